/* The reference GEMMs: the obvious loops, the definition the optimized ones must match. */
#include "gemm.h"

#include "quantization.h"

void gemm_s8_ref(const GemmS8Params *p, const int8_t *a, const int8_t *b, const int32_t *bias, int8_t *c) {
  for (int i = 0; i < p->m; ++i) {
    for (int j = 0; j < p->n; ++j) {
      int32_t acc = bias ? bias[j] : 0;
      for (int k = 0; k < p->k; ++k) acc += (a[i * p->k + k] + p->input_offset) * b[j * p->k + k];
      acc = MultiplyByQuantizedMultiplier(acc, p->multiplier, p->shift) + p->output_offset;
      if (acc < p->act_min) acc = p->act_min;
      if (acc > p->act_max) acc = p->act_max;
      c[i * p->n + j] = (int8_t)acc;
    }
  }
}

void gemm_f32_ref(int m, int n, int k, const float *a, const float *b, const float *bias, float *c) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float acc = bias ? bias[j] : 0.0f;
      for (int x = 0; x < k; ++x) acc += a[i * k + x] * b[j * k + x];
      c[i * n + j] = acc;
    }
  }
}
