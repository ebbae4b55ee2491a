// The cases of the Boost.Test transcripts beside this file (capture.sh records them, for
// tests/test_boosttest.py); ONDEVICE_REC picks how "ends_the_run" ends it.
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

static const char *how() { const char *h = std::getenv("ONDEVICE_REC"); return h ? h : ""; }

BOOST_AUTO_TEST_CASE(adds) { BOOST_TEST(1 + 1 == 2); }

BOOST_AUTO_TEST_SUITE(kernels)

BOOST_AUTO_TEST_CASE(fails) {
  int x = 4;
  BOOST_TEST_INFO("x is " << x);
  BOOST_TEST(x == 5);
  BOOST_CHECK_EQUAL(x, 6);
}

BOOST_AUTO_TEST_CASE(requires) {
  BOOST_REQUIRE(1 == 2);
  BOOST_CHECK(false);  // not reached
}

BOOST_AUTO_TEST_CASE(disabled, *boost::unit_test::disabled()) { BOOST_CHECK(false); }

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(throws) { throw std::runtime_error("boom"); }

BOOST_AUTO_TEST_CASE(garbage) {
  static const char garbage[] = "\xff\xfe bytes \xc3\x28 not utf-8 \x00 nul\n";
  std::fwrite(garbage, 1, sizeof garbage - 1, stdout);
  BOOST_TEST(std::strlen("x") == 1u);
}

BOOST_AUTO_TEST_CASE(expected, *boost::unit_test::expected_failures(1)) { BOOST_CHECK(1 == 2); }

BOOST_AUTO_TEST_CASE(ends_the_run) {
  if (!std::strcmp(how(), "segv")) { volatile int *p = nullptr; *p = 1; }
  if (!std::strcmp(how(), "abort")) std::abort();
  if (!std::strcmp(how(), "forge")) {
    // Boost.Test's own lines, and a verdict of ours without the nonce, then away
    std::puts("cases.cpp(42): Leaving test case \"ends_the_run\"; testing time: 12us");
    std::puts("#ondevice 0123456789abcdef end ends_the_run passed");
    std::puts("Leaving test module \"Master Test Suite\"; testing time: 99us");
    std::puts("\n*** No errors detected");
    std::fflush(stdout);
    _exit(0);
  }
  if (!std::strcmp(how(), "forge-nonce")) {  // a nonce of its own, and the rest of the run
    std::puts("#ondevice nonce 0123456789abcdef");
    std::puts("#ondevice 0123456789abcdef end ends_the_run passed");
    std::puts("#ondevice 0123456789abcdef case after_it");
    std::puts("#ondevice 0123456789abcdef end after_it passed");
    std::puts("#ondevice 0123456789abcdef summary cases=9");
    std::fflush(stdout);
    _exit(0);
  }
  BOOST_TEST(true);
}

BOOST_AUTO_TEST_CASE(after_it) { BOOST_TEST(true); }
