/* Fixed-point requantization as TFLM does it (gemmlowp rounding). */
#ifndef EXAMPLES_COMMON_QUANTIZATION_H_
#define EXAMPLES_COMMON_QUANTIZATION_H_
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Splits a real multiplier into a Q31 mantissa and a power-of-two shift. */
void QuantizeMultiplier(double real_multiplier, int32_t *quantized, int *shift);

/* x * multiplier * 2^shift with round-half-away rounding, saturating. */
int32_t MultiplyByQuantizedMultiplier(int32_t x, int32_t multiplier, int shift);

int8_t QuantizeToInt8(float value, float scale, int32_t zero_point);

#ifdef __cplusplus
}
#endif
#endif
