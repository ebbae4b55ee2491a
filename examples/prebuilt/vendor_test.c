/* A test of a library we only have prebuilt, per board. */
#include "micro_test.h"
#include "vendor_dot.h"

TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(VendorDotProduct) {
  const int8_t a[5] = {1, -2, 3, -4, 127}, b[5] = {5, 6, -7, 8, 1};
  TF_LITE_MICRO_EXPECT_EQ(vendor_dot_s8(a, b, 5), 5 - 12 - 21 - 32 + 127);
}
TF_LITE_MICRO_TESTS_END
