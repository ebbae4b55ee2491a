// Boost.Test (Debian's libboost-test-dev), its header-only variant: no library to cross-build
#define BOOST_TEST_MODULE dot
#include <boost/test/included/unit_test.hpp>

#include "dot.h"

BOOST_AUTO_TEST_SUITE(dot)

BOOST_AUTO_TEST_CASE(zero_vector) {
  const signed char a[] = {0, 0}, b[] = {9, -9};
  BOOST_TEST(dot_s8(a, b, 2) == 0);
}

BOOST_AUTO_TEST_CASE(scaled) {
  const signed char a[] = {1, 2}, b[] = {2, 4};
  BOOST_TEST(dot_s8(a, b, 2) == 10);
}

BOOST_AUTO_TEST_SUITE_END()
