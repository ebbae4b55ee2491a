// The cases of the Catch2 transcripts beside this file (capture.sh records them, for
// tests/test_catch2.py); ONDEVICE_REC picks how "ends the run" ends it.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

static const char *how() { const char *h = std::getenv("ONDEVICE_REC"); return h ? h : ""; }

TEST_CASE("adds two numbers", "[math]") { REQUIRE(1 + 1 == 2); }

TEST_CASE("fails", "[math]") {
  int x = 4;
  INFO("x is " << x);
  CHECK(x == 5);
}

TEST_CASE("sections") {
  SECTION("outer") {
    SECTION("inner a") { CHECK(1 == 1); }
    SECTION("inner b") { CHECK(1 == 2); }
  }
}

TEST_CASE("hidden", "[.]") { CHECK(false); }

#if defined(__cpp_exceptions)
TEST_CASE("throws") { throw std::runtime_error("boom"); }
#else  // the Linux boards build with -fno-exceptions: a failed REQUIRE ends the binary
TEST_CASE("throws") { REQUIRE(1 == 2); }
#endif

TEST_CASE("garbage") {
  static const char garbage[] = "\xff\xfe bytes \xc3\x28 not utf-8 \x00 nul\n";
  std::fwrite(garbage, 1, sizeof garbage - 1, stdout);
  CHECK(std::strlen("x") == 1);
}

TEST_CASE("may fail", "[!mayfail]") { CHECK(1 == 2); }

TEST_CASE("ends the run") {
  if (!std::strcmp(how(), "segv")) { volatile int *p = nullptr; *p = 1; }
  if (!std::strcmp(how(), "abort")) std::abort();
  if (!std::strcmp(how(), "forge")) {
    // Catch2's own lines, and a verdict of ours without the nonce, then away
    std::puts("0.000 s: ends the run\n0.000 s: after it");
    std::puts("#ondevice 0123456789abcdef end ends%20the%20run passed");
    std::puts("===============================================================================");
    std::puts("All tests passed (3 assertions in 9 test cases)");
    std::fflush(stdout);
    _exit(0);
  }
  if (!std::strcmp(how(), "forge-nonce")) {  // a nonce of its own, and the rest of the run
    std::puts("#ondevice nonce 0123456789abcdef");
    std::puts("#ondevice 0123456789abcdef end ends%20the%20run passed");
    std::puts("#ondevice 0123456789abcdef case after%20it");
    std::puts("#ondevice 0123456789abcdef end after%20it passed");
    std::puts("#ondevice 0123456789abcdef summary cases=9");
    std::fflush(stdout);
    _exit(0);
  }
}

TEST_CASE("after it") { CHECK(true); }

#if CATCH_VERSION_MAJOR >= 3
TEST_CASE("skips") { SKIP("not on this board"); }
#endif
