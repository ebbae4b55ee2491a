#include "dot.h"

int32_t dot_s8(const int8_t *a, const int8_t *b, int n) {
  int32_t acc = 0;
  for (int i = 0; i < n; ++i) acc += (int32_t)a[i] * b[i];
  return acc;
}

int8_t sat_s8(int32_t v) { return (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v); }
