/* The dot kernel on every board: exact results, saturation, and its latency. */
#include <stdint.h>

#include "dot.h"
#include "micro_test.h"

static int8_t a[256], b[256];

TF_LITE_MICRO_TESTS_BEGIN

TF_LITE_MICRO_TEST(DotOfOnesIsLength) {
  for (int i = 0; i < 64; ++i) a[i] = b[i] = 1;
  TF_LITE_MICRO_EXPECT_EQ(64, dot_s8(a, b, 64));
}

TF_LITE_MICRO_TEST(DotOfExtremes) {
  for (int i = 0; i < 4; ++i) { a[i] = -128; b[i] = -128; }
  TF_LITE_MICRO_EXPECT_EQ(4 * 16384, dot_s8(a, b, 4));
}

TF_LITE_MICRO_TEST(SaturatesBothWays) {
  TF_LITE_MICRO_EXPECT_EQ(127, sat_s8(1000));
  TF_LITE_MICRO_EXPECT_EQ(-128, sat_s8(-1000));
  TF_LITE_MICRO_EXPECT_EQ(5, sat_s8(5));
}

TF_LITE_MICRO_TEST(BenchDot256) {
  for (int i = 0; i < 256; ++i) { a[i] = (int8_t)(i * 7); b[i] = (int8_t)(i * 3); }
  volatile int32_t sink = 0;
  ONDEVICE_BENCH("dot_s8_256", 256, 8) { sink = dot_s8(a, b, 256); }
  TF_LITE_MICRO_EXPECT(sink != 12345);
}

TF_LITE_MICRO_TESTS_END
