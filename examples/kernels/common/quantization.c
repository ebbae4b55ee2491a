#include "quantization.h"

void QuantizeMultiplier(double m, int32_t *quantized, int *shift) {
  int s = 0;
  int64_t q;
  if (m == 0.0) {
    *quantized = 0;
    *shift = 0;
    return;
  }
  while (m < 0.5) { m *= 2.0; s--; }
  while (m >= 1.0) { m /= 2.0; s++; }
  q = (int64_t)(m * (double)(1LL << 31) + 0.5);
  if (q == (1LL << 31)) { q /= 2; s++; }
  *quantized = (int32_t)q;
  *shift = s;
}

static int32_t SaturatingRoundingDoublingHighMul(int32_t a, int32_t b) {
  int64_t ab;
  int32_t nudge;
  if (a == b && a == INT32_MIN) return INT32_MAX;
  ab = (int64_t)a * (int64_t)b;
  nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
  return (int32_t)((ab + nudge) / (1LL << 31));
}

static int32_t RoundingDivideByPOT(int32_t x, int exponent) {
  const int32_t mask = (int32_t)((1LL << exponent) - 1);
  const int32_t remainder = x & mask;
  const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

int32_t MultiplyByQuantizedMultiplier(int32_t x, int32_t multiplier, int shift) {
  int left = shift > 0 ? shift : 0;
  int right = shift > 0 ? 0 : -shift;
  return RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x * (1 << left), multiplier), right);
}

int8_t QuantizeToInt8(float value, float scale, int32_t zero_point) {
  float scaled = value / scale;
  int32_t q = (int32_t)(scaled >= 0 ? scaled + 0.5f : scaled - 0.5f) + zero_point;
  if (q < -128) q = -128;
  if (q > 127) q = 127;
  return (int8_t)q;
}
