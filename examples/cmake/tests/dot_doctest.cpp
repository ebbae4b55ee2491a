// doctest (Debian's doctest-dev), its own main; doctest_discover_tests lists one CTest test per case
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "dot.h"

TEST_CASE("dot is symmetric") {
  const signed char a[] = {1, -2, 3}, b[] = {-4, 5, 6};
  CHECK(dot_s8(a, b, 3) == dot_s8(b, a, 3));
}

TEST_CASE("dot of a vector with itself is its squared norm") {
  const signed char a[] = {3, 4};
  CHECK(dot_s8(a, a, 2) == 25);
}
