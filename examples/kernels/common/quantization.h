/* Fixed-point requantization as TFLM does it (gemmlowp rounding). */
#ifndef EXAMPLES_COMMON_QUANTIZATION_H_
#define EXAMPLES_COMMON_QUANTIZATION_H_
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Splits a real multiplier into a Q31 mantissa and a power-of-two shift. */
void QuantizeMultiplier(double real_multiplier, int32_t *quantized, int *shift);

/* x * multiplier * 2^shift with gemmlowp's rounding, saturating; inline, as it runs once
 * per output of every quantized kernel. */
static inline int32_t SaturatingRoundingDoublingHighMul(int32_t a, int32_t b) {
  int64_t ab;
  if (a == b && a == INT32_MIN) return INT32_MAX;
  ab = (int64_t)a * (int64_t)b;
  ab += ab >= 0 ? (1 << 30) : (1 - (1 << 30));
  /* == ab / 2^31, truncating as gemmlowp divides, without a 64-bit division */
  return (int32_t)((ab + (ab < 0 ? (1LL << 31) - 1 : 0)) >> 31);
}

static inline int32_t RoundingDivideByPOT(int32_t x, int exponent) {
  const int32_t mask = (int32_t)((1LL << exponent) - 1);
  const int32_t remainder = x & mask;
  const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

static inline int32_t MultiplyByQuantizedMultiplier(int32_t x, int32_t multiplier, int shift) {
  const int left = shift > 0 ? shift : 0;
  const int right = shift > 0 ? 0 : -shift;
  return RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x * (1 << left), multiplier), right);
}

int8_t QuantizeToInt8(float value, float scale, int32_t zero_point);

#ifdef __cplusplus
}
#endif
#endif
