/* The optimized GEMMs.
 * int8: the input offset is folded into the bias once per output (sum_k (a+off)*b =
 * sum_k a*b + off*sum_k b), outputs are computed in 2x2 blocks (each loaded value feeds two
 * MACs), and the requantization is inlined. On cores with the DSP extension (Cortex-M4/M7,
 * ARMv7E-M), K goes by 4: int8 pairs are packed with SXTB16 and multiplied two at a time
 * with SMLAD.
 * f32: the same 2x2 blocking with K unrolled by 2. */
#include "gemm.h"

#include <string.h>

#include "quantization.h"

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define GEMM_DSP 1
static inline uint32_t load4(const int8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4); /* unaligned-safe; compiles to one LDR on ARMv7E-M */
  return v;
}
static inline uint32_t sxtb16(uint32_t x) {
  uint32_t r;
  __asm__("sxtb16 %0, %1" : "=r"(r) : "r"(x));
  return r;
}
static inline uint32_t sxtb16_ror8(uint32_t x) {
  uint32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
  return r;
}
static inline int32_t smlad(uint32_t x, uint32_t y, int32_t acc) {
  int32_t r;
  __asm__("smlad %0, %1, %2, %3" : "=r"(r) : "r"(x), "r"(y), "r"(acc));
  return r;
}
#else
#define GEMM_DSP 0
#endif

/* The requantization of one accumulator, with the parameters already in registers. */
static inline int8_t requantize(int32_t acc, int32_t multiplier, int shift, int32_t out_off, int32_t lo, int32_t hi) {
  acc = MultiplyByQuantizedMultiplier(acc, multiplier, shift) + out_off;
  return (int8_t)(acc < lo ? lo : acc > hi ? hi : acc);
}

/* bias[j] + input_offset * sum_k b[j][k]: the offset's share, computed once per output */
static int32_t folded_bias(int32_t input_offset, const int8_t *brow, int kk, const int32_t *bias, int j) {
  int32_t sum = 0;
  for (int k = 0; k < kk; ++k) sum += brow[k];
  return (bias ? bias[j] : 0) + input_offset * sum;
}

void gemm_s8_opt(const GemmS8Params *p, const int8_t *a, const int8_t *b, const int32_t *bias, int8_t *c) {
  const int m = p->m, n = p->n, kk = p->k;
  const int32_t mult = p->multiplier, out_off = p->output_offset, lo = p->act_min, hi = p->act_max;
  const int shift = p->shift;
  for (int j = 0; j < n; j += 2) {
    const int j1 = j + 1 < n ? j + 1 : j; /* an odd last column is computed twice, kept once */
    const int8_t *b0 = b + j * kk, *b1 = b + j1 * kk;
    const int32_t f0 = folded_bias(p->input_offset, b0, kk, bias, j);
    const int32_t f1 = folded_bias(p->input_offset, b1, kk, bias, j1);
    for (int i = 0; i < m; i += 2) {
      const int8_t *a0 = a + i * kk;
      if (i + 1 == m) { /* a last odd row (or a whole GEMV, m = 1): two outputs, no wasted MACs */
        int32_t s0 = f0, s1 = f1;
        for (int k = 0; k < kk; ++k) {
          const int32_t x = a0[k];
          s0 += x * b0[k];
          s1 += x * b1[k];
        }
        c[i * n + j] = requantize(s0, mult, shift, out_off, lo, hi);
        c[i * n + j1] = requantize(s1, mult, shift, out_off, lo, hi);
        break;
      }
      const int i1 = i + 1;
      const int8_t *a1 = a + i1 * kk;
      int32_t s00 = f0, s01 = f1, s10 = f0, s11 = f1;
      int k = 0;
#if GEMM_DSP
      for (; k + 4 <= kk; k += 4) {
        uint32_t x0 = load4(a0 + k), x1 = load4(a1 + k), y0 = load4(b0 + k), y1 = load4(b1 + k);
        uint32_t x0e = sxtb16(x0), x0o = sxtb16_ror8(x0), x1e = sxtb16(x1), x1o = sxtb16_ror8(x1);
        uint32_t y0e = sxtb16(y0), y0o = sxtb16_ror8(y0), y1e = sxtb16(y1), y1o = sxtb16_ror8(y1);
        s00 = smlad(x0e, y0e, smlad(x0o, y0o, s00));
        s01 = smlad(x0e, y1e, smlad(x0o, y1o, s01));
        s10 = smlad(x1e, y0e, smlad(x1o, y0o, s10));
        s11 = smlad(x1e, y1e, smlad(x1o, y1o, s11));
      }
#endif /* without DSP this plain loop is the tight one: 4 loads and 4 MLAs per step */
      for (; k < kk; ++k) {
        const int32_t x0 = a0[k], x1 = a1[k], y0 = b0[k], y1 = b1[k];
        s00 += x0 * y0;
        s01 += x0 * y1;
        s10 += x1 * y0;
        s11 += x1 * y1;
      }
      c[i * n + j] = requantize(s00, mult, shift, out_off, lo, hi);
      c[i1 * n + j] = requantize(s10, mult, shift, out_off, lo, hi);
      c[i * n + j1] = requantize(s01, mult, shift, out_off, lo, hi);
      c[i1 * n + j1] = requantize(s11, mult, shift, out_off, lo, hi);
    }
  }
}

void gemm_f32_opt(int m, int n, int k, const float *a, const float *b, const float *bias, float *c) {
  for (int j = 0; j < n; j += 2) {
    const int j1 = j + 1 < n ? j + 1 : j;
    const float *b0 = b + j * k, *b1 = b + j1 * k;
    for (int i = 0; i < m; i += 2) {
      const int i1 = i + 1 < m ? i + 1 : i;
      const float *a0 = a + i * k, *a1 = a + i1 * k;
      float s00 = bias ? bias[j] : 0.0f, s01 = bias ? bias[j1] : 0.0f;
      float s10 = s00, s11 = s01;
      for (int x = 0; x < k; ++x) { /* the same order of additions as the reference */
        const float x0 = a0[x], x1 = a1[x], y0 = b0[x], y1 = b1[x];
        s00 += x0 * y0;
        s01 += x0 * y1;
        s10 += x1 * y0;
        s11 += x1 * y1;
      }
      c[i * n + j] = s00;
      c[i1 * n + j] = s10;
      c[i * n + j1] = s01;
      c[i1 * n + j1] = s11;
    }
  }
}
