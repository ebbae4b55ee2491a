/* int8 GEMM: the optimized kernel is bit-exact with the reference; both are benched. */
#include <stdint.h>

#include "gemm.h"
#include "micro_test.h"
#include "quantization.h"

#define MAX_DIM 32
static int8_t a[MAX_DIM * MAX_DIM], b[MAX_DIM * MAX_DIM], c_ref[MAX_DIM * MAX_DIM], c_opt[MAX_DIM * MAX_DIM];
static int32_t bias[MAX_DIM];
static uint32_t seed = 12345;

static int8_t rand_s8(void) {
  seed = seed * 1664525u + 1013904223u;
  return (int8_t)(seed >> 24);
}

static GemmS8Params params(int m, int n, int k, double real_multiplier) {
  GemmS8Params p = {m, n, k, 3, -5, 0, 0, -128, 127};
  QuantizeMultiplier(real_multiplier, &p.multiplier, &p.shift);
  return p;
}

static void fill(int m, int n, int k) {
  for (int i = 0; i < m * k; ++i) a[i] = rand_s8();
  for (int i = 0; i < n * k; ++i) b[i] = rand_s8();
  for (int j = 0; j < n; ++j) bias[j] = rand_s8() * 37;
}

static int agree(const GemmS8Params *p) {
  gemm_s8_ref(p, a, b, bias, c_ref);
  gemm_s8_opt(p, a, b, bias, c_opt);
  for (int i = 0; i < p->m * p->n; ++i)
    if (c_ref[i] != c_opt[i]) {
      MicroPrintf("mismatch at %d: ref %d, opt %d (m=%d n=%d k=%d)", i, c_ref[i], c_opt[i], p->m, p->n, p->k);
      return 0;
    }
  return 1;
}

TF_LITE_MICRO_TESTS_BEGIN

TF_LITE_MICRO_TEST(Int8OptimizedMatchesReferenceOnAllShapes) {
  static const int shapes[][3] = {{1, 1, 1}, {1, 1, 4}, {2, 3, 5}, {3, 5, 7}, {7, 1, 9}, {17, 9, 33},
                                  {32, 32, 32}, {2, 2, 32}, {31, 3, 1}};
  for (unsigned s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
    const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
    fill(m, n, k);
    GemmS8Params p = params(m, n, k, 0.0042);
    TF_LITE_MICRO_EXPECT(agree(&p));
  }
}

TF_LITE_MICRO_TEST(Int8SaturatesBothWays) {
  fill(4, 4, 32);
  for (int i = 0; i < 4 * 32; ++i) a[i] = 127, b[i] = (int8_t)(i % 2 ? 127 : -128);
  GemmS8Params p = params(4, 4, 32, 0.5); /* far beyond int8: every output clamps */
  TF_LITE_MICRO_EXPECT(agree(&p));
  int clamped = 0;
  for (int i = 0; i < 16; ++i) clamped += c_opt[i] == 127 || c_opt[i] == -128;
  TF_LITE_MICRO_EXPECT_EQ(clamped, 16);
}

TF_LITE_MICRO_TEST(BenchInt8Gemm32) {
  fill(32, 32, 32);
  GemmS8Params p = params(32, 32, 32, 0.0042);
  ONDEVICE_BENCH("gemm_s8_naive_32", 32 * 32 * 32, 10) {
    gemm_s8_ref(&p, a, b, bias, c_ref);
    ONDEVICE_KEEP(c_ref);
  }
  ONDEVICE_BENCH("gemm_s8_opt_32", 32 * 32 * 32, 10) {
    gemm_s8_opt(&p, a, b, bias, c_opt);
    ONDEVICE_KEEP(c_opt);
  }
  TF_LITE_MICRO_EXPECT(agree(&p));
}

TF_LITE_MICRO_TESTS_END
