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

int8_t QuantizeToInt8(float value, float scale, int32_t zero_point) {
  float scaled = value / scale;
  int32_t q = (int32_t)(scaled >= 0 ? scaled + 0.5f : scaled - 0.5f) + zero_point;
  if (q < -128) q = -128;
  if (q > 127) q = 127;
  return (int8_t)q;
}
