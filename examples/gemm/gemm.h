/* GEMM, the hot path of fully-connected and conv layers: C = A x B^T (+ bias).
 * A is M x K (activations, row-major), B is N x K (weights, one row per output, as TFLM
 * stores fully-connected weights), C is M x N. Each kernel comes in a naive reference
 * form and an optimized form that must agree with it (bit-exact for int8). */
#ifndef EXAMPLES_GEMM_GEMM_H_
#define EXAMPLES_GEMM_GEMM_H_
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* TFLM-style int8 quantization: int32 accumulators, per-tensor zero points, and a
 * requantization by a fixed-point multiplier and shift (see ../kernels/common). */
typedef struct {
  int m, n, k;
  int32_t input_offset;  /* -(A's zero point) */
  int32_t output_offset; /* C's zero point */
  int32_t multiplier;    /* Q31 mantissa of scale_a * scale_b / scale_c */
  int shift;
  int32_t act_min, act_max; /* usually -128, 127 */
} GemmS8Params;

void gemm_s8_ref(const GemmS8Params *p, const int8_t *a, const int8_t *b, const int32_t *bias, int8_t *c);
void gemm_s8_opt(const GemmS8Params *p, const int8_t *a, const int8_t *b, const int32_t *bias, int8_t *c);

void gemm_f32_ref(int m, int n, int k, const float *a, const float *b, const float *bias, float *c);
void gemm_f32_opt(int m, int n, int k, const float *a, const float *b, const float *bias, float *c);

#ifdef __cplusplus
}
#endif
#endif
