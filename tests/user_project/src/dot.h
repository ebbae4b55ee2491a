#ifndef DOT_H
#define DOT_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
/* int8 dot product with an int32 accumulator, the inner loop of a fully connected layer */
int32_t dot_s8(const int8_t *a, const int8_t *b, int n);
/* saturate an int32 to int8 */
int8_t sat_s8(int32_t v);
#ifdef __cplusplus
}
#endif
#endif
