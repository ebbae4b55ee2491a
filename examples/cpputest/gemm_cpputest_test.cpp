// CppUTest over the GEMM kernels. CppUTest runs a file's tests in reverse order; each
// TEST is its own pytest item, and CppUTest's usual main is linked (the source has none).
#include <CppUTest/TestHarness.h>

#include <stdint.h>

#include "gemm.h"
#include "quantization.h"

static uint32_t seed = 12345;
static int8_t RandS8() {
  seed = seed * 1664525u + 1013904223u;
  return static_cast<int8_t>(seed >> 24);
}

TEST_GROUP(GemmS8) {
  int8_t a[32 * 32], b[32 * 32], ref[32 * 32], opt[32 * 32];
  int32_t bias[32];
  GemmS8Params p;
  void setup() override { seed = 12345; }
  void Run(int m, int n, int k) {
    for (int i = 0; i < m * k; ++i) a[i] = RandS8();
    for (int i = 0; i < n * k; ++i) b[i] = RandS8();
    for (int j = 0; j < n; ++j) bias[j] = RandS8() * 37;
    p = GemmS8Params{m, n, k, 3, -5, 0, 0, -128, 127};
    QuantizeMultiplier(0.0042, &p.multiplier, &p.shift);
    gemm_s8_ref(&p, a, b, bias, ref);
    gemm_s8_opt(&p, a, b, bias, opt);
  }
};

TEST(GemmS8, OptimizedMatchesReferenceSmall) {
  Run(3, 5, 7);
  MEMCMP_EQUAL(ref, opt, 3 * 5);
}

TEST(GemmS8, OptimizedMatchesReferenceSquare) {
  Run(32, 32, 32);
  MEMCMP_EQUAL(ref, opt, 32 * 32);
}

IGNORE_TEST(GemmS8, LargeShapesOnlyOnRequest) {}

TEST_GROUP(GemmF32){};

TEST(GemmF32, OptimizedWithinRoundingOfReference) {
  float a[4 * 8], b[3 * 8], bias[3] = {0.5f, -1.0f, 0.25f}, ref[4 * 3], opt[4 * 3];
  for (int i = 0; i < 4 * 8; ++i) a[i] = RandS8() / 64.0f;
  for (int i = 0; i < 3 * 8; ++i) b[i] = RandS8() / 64.0f;
  gemm_f32_ref(4, 3, 8, a, b, bias, ref);
  gemm_f32_opt(4, 3, 8, a, b, bias, opt);
  for (int i = 0; i < 4 * 3; ++i) DOUBLES_EQUAL(ref[i], opt[i], 1e-4);
}
