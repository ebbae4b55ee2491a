#include <gtest/gtest.h>
#include "dot.h"

TEST(Dot, Empty) {
  EXPECT_EQ(dot_s8(nullptr, nullptr, 0), 0);
}

TEST(Dot, Saturates32Bits) {
  signed char a[4] = {-128, -128, -128, -128};
  EXPECT_EQ(dot_s8(a, a, 4), 4 * 16384);
}

TEST(Dot, Negative) {
  const signed char a[] = {1, -1}, b[] = {3, 5};
  EXPECT_EQ(dot_s8(a, b, 2), -2);
}
