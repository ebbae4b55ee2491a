// Catch2 v2 (Debian's catch2), its own main; catch_discover_tests lists one CTest test per case
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "dot.h"

TEST_CASE("dot_of_nothing_is_0", "[dot]") { REQUIRE(dot_s8(nullptr, nullptr, 0) == 0); }

TEST_CASE("dot_of_two", "[dot]") {
  const signed char a[] = {2, 3}, b[] = {4, 5};
  CHECK(dot_s8(a, b, 2) == 23);
}
