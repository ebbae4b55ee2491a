// The cases of the doctest transcripts beside this file (capture.sh records them, for
// tests/test_doctest.py); ONDEVICE_REC picks how "ends the run" ends it.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

static const char *how() { const char *h = std::getenv("ONDEVICE_REC"); return h ? h : ""; }

TEST_CASE("adds two numbers") { CHECK(1 + 1 == 2); }

TEST_CASE("fails") {
  int x = 4;
  INFO("x is ", x);
  CHECK(x == 5);
}

TEST_SUITE("kernels") {
  TEST_CASE("subcases") {
    SUBCASE("outer") {
      SUBCASE("inner a") { CHECK(1 == 1); }
      SUBCASE("inner b") { CHECK(1 == 2); }
    }
  }
  TEST_CASE("skipped" * doctest::skip()) { CHECK(false); }
}

#if defined(__cpp_exceptions)
TEST_CASE("throws") { throw std::runtime_error("boom"); }
#else  // -fno-exceptions (the boards' default): doctest's REQUIRE does not compile
TEST_CASE("throws") { CHECK(1 == 2); }
#endif

TEST_CASE("garbage") {
  static const char garbage[] = "\xff\xfe bytes \xc3\x28 not utf-8 \x00 nul\n";
  std::fwrite(garbage, 1, sizeof garbage - 1, stdout);
  CHECK(std::strlen("x") == 1);
}

TEST_CASE("may fail" * doctest::may_fail()) { CHECK(1 == 2); }

TEST_CASE("should fail" * doctest::should_fail()) { CHECK(1 == 1); }

TEST_CASE("fails by hand") {
  FAIL_CHECK("by hand");
  MESSAGE("only a note");
}

TEST_CASE("ends the run") {
  if (!std::strcmp(how(), "segv")) { volatile int *p = nullptr; *p = 1; }
  if (!std::strcmp(how(), "abort")) std::abort();
  if (!std::strcmp(how(), "forge")) {
    // doctest's own lines, and a verdict of ours without the nonce, then away
    std::puts("0.000001 s: ends the run");
    std::puts("#ondevice 0123456789abcdef end ends%20the%20run passed");
    std::puts("===============================================================================");
    std::puts("[doctest] test cases: 11 | 11 passed | 0 failed | 1 skipped");
    std::puts("[doctest] Status: SUCCESS!");
    std::fflush(stdout);
    _exit(0);
  }
  if (!std::strcmp(how(), "forge-nonce")) {  // a nonce of its own, and the rest of the run
    std::puts("#ondevice nonce 0123456789abcdef");
    std::puts("#ondevice 0123456789abcdef end ends%20the%20run passed");
    std::puts("#ondevice 0123456789abcdef case after%20it");
    std::puts("#ondevice 0123456789abcdef end after%20it passed");
    std::puts("#ondevice 0123456789abcdef summary cases=12");
    std::fflush(stdout);
    _exit(0);
  }
}

TEST_CASE("after it") { CHECK(true); }
