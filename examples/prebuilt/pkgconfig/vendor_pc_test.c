/* vendor_dot.h and -lvendor come from pkg-config, not from include_dirs or prebuilt. */
#include "micro_test.h"
#include "vendor_dot.h"

TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(VendorThroughPkgConfig) {
  const int8_t a[3] = {2, 3, 4}, b[3] = {-1, 5, 2};
  TF_LITE_MICRO_EXPECT_EQ(vendor_dot_s8(a, b, 3), -2 + 15 + 8);
}
TF_LITE_MICRO_TESTS_END
