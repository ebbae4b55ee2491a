// Boost.Test's module and main, linked by pytest-ondevice when a test source has cases but
// neither (no BOOST_TEST_MODULE or BOOST_TEST_MAIN, no main): the cases register themselves.
#define BOOST_TEST_MAIN
#include "boosttest_runner.cpp"
