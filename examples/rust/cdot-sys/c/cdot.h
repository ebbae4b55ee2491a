/* An int8 dot product with zero points, as a quantized fully-connected layer computes it. */
#ifndef ONDEVICE_CDOT_H
#define ONDEVICE_CDOT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* sum over i of (a[i] - a_zero) * (b[i] - b_zero), accumulated in int32 */
int32_t ondevice_cdot_s8(const int8_t *a, int32_t a_zero, const int8_t *b, int32_t b_zero, size_t n);

/* the library's version, to check the binary links the build it was tested against */
uint32_t ondevice_cdot_version(void);

#ifdef __cplusplus
}
#endif

#endif
