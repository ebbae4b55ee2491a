/* f32 GEMM: the optimized kernel agrees with the reference within 1e-5 relative; benched. */
#include <math.h>
#include <stdint.h>

#include "gemm.h"
#include "micro_test.h"

#define MAX_DIM 16
static float a[MAX_DIM * MAX_DIM], b[MAX_DIM * MAX_DIM], c_ref[MAX_DIM * MAX_DIM], c_opt[MAX_DIM * MAX_DIM];
static float bias[MAX_DIM];
static uint32_t seed = 777;

static float rand_f(void) {
  seed = seed * 1664525u + 1013904223u;
  return (float)((int32_t)(seed >> 8) - (1 << 23)) / (float)(1 << 23); /* [-1, 1) */
}

static void fill(int m, int n, int k) {
  for (int i = 0; i < m * k; ++i) a[i] = rand_f();
  for (int i = 0; i < n * k; ++i) b[i] = rand_f();
  for (int j = 0; j < n; ++j) bias[j] = rand_f();
}

static int agree(int m, int n, int k) {
  gemm_f32_ref(m, n, k, a, b, bias, c_ref);
  gemm_f32_opt(m, n, k, a, b, bias, c_opt);
  for (int i = 0; i < m * n; ++i)
    if (fabsf(c_ref[i] - c_opt[i]) > 1e-5f * (1.0f + fabsf(c_ref[i]))) {
      MicroPrintf("mismatch at %d: ref %f, opt %f", i, c_ref[i], c_opt[i]);
      return 0;
    }
  return 1;
}

TF_LITE_MICRO_TESTS_BEGIN

TF_LITE_MICRO_TEST(F32OptimizedMatchesReference) {
  static const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {16, 16, 16}, {9, 2, 13}, {1, 16, 3}};
  for (unsigned s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
    fill(shapes[s][0], shapes[s][1], shapes[s][2]);
    TF_LITE_MICRO_EXPECT(agree(shapes[s][0], shapes[s][1], shapes[s][2]));
  }
}

TF_LITE_MICRO_TEST(BenchF32Gemm16) {
  fill(16, 16, 16);
  ONDEVICE_BENCH("gemm_f32_naive_16", 16 * 16 * 16, 5) {
    gemm_f32_ref(16, 16, 16, a, b, bias, c_ref);
    ONDEVICE_KEEP(c_ref);
  }
  ONDEVICE_BENCH("gemm_f32_opt_16", 16 * 16 * 16, 5) {
    gemm_f32_opt(16, 16, 16, a, b, bias, c_opt);
    ONDEVICE_KEEP(c_opt);
  }
  TF_LITE_MICRO_EXPECT(agree(16, 16, 16));
}

TF_LITE_MICRO_TESTS_END
