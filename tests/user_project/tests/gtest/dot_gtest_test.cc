// GoogleTest cases of the same kernel: found from the include, linked with pkg-config's gtest_main
#include <gtest/gtest.h>

#include "dot.h"

TEST(Dot, Empty) { EXPECT_EQ(0, dot_s8(nullptr, nullptr, 0)); }

TEST(Dot, Mixed) {
  const int8_t a[3] = {1, -2, 3}, b[3] = {4, 5, -6};
  EXPECT_EQ(4 - 10 - 18, dot_s8(a, b, 3));
}

TEST(Sat, Clamps) {
  EXPECT_EQ(127, sat_s8(128));
  EXPECT_EQ(-128, sat_s8(-129));
}
