/* The vendor library's header: all a test sees of it. */
#ifndef EXAMPLES_PREBUILT_VENDOR_DOT_H_
#define EXAMPLES_PREBUILT_VENDOR_DOT_H_
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
int32_t vendor_dot_s8(const int8_t *a, const int8_t *b, int n);
#ifdef __cplusplus
}
#endif
#endif
