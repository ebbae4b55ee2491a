"""What a test binary prints cannot decide its own verdict, and a crash is charged to the
case that crashed: real binaries on the host board, one per harness format."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# Unity's output as unity.c prints it (putchar on stdout, a case's line after it ran):
# a stand-in for the one header and source a project vendors, so the test needs no download.
UNITY_H = r"""
#ifndef UNITY_H
#define UNITY_H
#include <stdio.h>
struct UNITY_STORAGE_T {  /* unity.c's global: the running case's name is its second field */
  const char *TestFile;
  const char *CurrentTestName;
  unsigned long NumberOfTests, TestFailures;
} Unity;
void UnityBegin(const char *file) { Unity.TestFile = file; Unity.NumberOfTests = Unity.TestFailures = 0; }
static void UnityPut(const char *s) { while (*s) putchar(*s++); }
static void UnityDefaultTestRun(void (*f)(void), const char *name, int line) {
  Unity.CurrentTestName = name;
  Unity.NumberOfTests++;
  f();
  printf("%s:%d:", Unity.TestFile, line);
  UnityPut(name);
  UnityPut(":PASS\n");
}
#define UNITY_BEGIN() UnityBegin(__FILE__)
#define UNITY_END() (UnityPut("\n-----------------------\n"), \
  printf("%lu Tests %lu Failures 0 Ignored\n", Unity.NumberOfTests, Unity.TestFailures), \
  UnityPut(Unity.TestFailures ? "FAIL\n" : "OK\n"), (int)Unity.TestFailures)
#define RUN_TEST(f) UnityDefaultTestRun(f, #f, __LINE__)
void setUp(void);
void tearDown(void);
#endif
"""

UNITY_TRAP = """
#include "unity.h"
void setUp(void) {}
void tearDown(void) {}
void test_a(void) {}
void test_b(void) {}
void test_c(void) { __builtin_trap(); }
int main(void) {
  UNITY_BEGIN();
  RUN_TEST(test_a);
  RUN_TEST(test_b);
  RUN_TEST(test_c);
  return UNITY_END();
}
"""


def outcomes(result) -> dict[str, str]:
    found = {}
    for line in result.outlines:
        m = re.search(r"::(\S+)\[host\] (PASSED|FAILED|SKIPPED|ERROR)", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


UNITY_PASS_THEN_CRASH = """
#include <stdio.h>
#include <stdlib.h>
#include "unity.h"
void setUp(void) {}
void tearDown(void) {}
void test_a(void) {}
void test_b(void) {
  printf("pass_test.c:12:test_b:PASS\\n");
  printf("pass_test.c:13:test_c:PASS\\n");
  fflush(stdout);
  if (!getenv("NO_CRASH")) abort();
}
void test_c(void) {}
int main(void) {
  UNITY_BEGIN();
  RUN_TEST(test_a);
  RUN_TEST(test_b);
  RUN_TEST(test_c);
  return UNITY_END();
}
"""


def test_unity_a_case_printing_its_own_pass_line_then_crashing_does_not_pass(project):
    # test_b passed by its own line and the crash went to test_c
    project.write("unity.h", UNITY_H)
    project.write("pass_test.c", UNITY_PASS_THEN_CRASH)
    result = project.run("-v")
    assert outcomes(result) == {"test_a": "PASSED", "test_b": "FAILED", "test_c": "FAILED"}
    text = result.stdout.str()
    assert "FAILED pass_test.c::test_b[host] - crashed: killed by SIGABRT while this case" in text
    assert "not run: crashed: killed by SIGABRT in case test_b, before this case" in text


@pytest.mark.parametrize("leave", ["exit(0)", "_exit(0)"])
def test_unity_a_case_printing_the_rest_of_the_run_and_leaving_does_not_pass(project, leave):
    # test_b printed its own line, test_c's and the summary, then left: all three passed
    forged = r"""
    printf("pass_test.c:12:test_b:PASS\n");
    printf("pass_test.c:13:test_c:PASS\n\n-----------------------\n3 Tests 0 Failures 0 Ignored\nOK\n");
    fflush(stdout);
    """
    source = UNITY_PASS_THEN_CRASH.replace("#include <stdlib.h>", "#include <stdlib.h>\n#include <unistd.h>")
    start, stop = source.index('  printf("pass_test.c:12'), source.index("if (!getenv")
    project.write("unity.h", UNITY_H)
    project.write("pass_test.c", source[:start] + forged + source[stop:].replace("abort();", f"{leave};"))
    result = project.run("-v")
    if leave == "exit(0)":  # the runtime names the case the program exited in
        assert outcomes(result) == {"test_a": "PASSED", "test_b": "FAILED", "test_c": "FAILED"}
    else:  # no closing line from the runtime at all: nothing of the run is believed
        assert outcomes(result) == {"test_a": "FAILED", "test_b": "FAILED", "test_c": "FAILED", "binary": "FAILED"}
    text = result.stdout.str()
    if leave == "exit(0)":
        assert "the program exited while this case was running" in text
        assert "not run: the program exited in case test_b, before this case" in text
    else:
        assert "the binary ended without the runtime's closing line" in text


@pytest.mark.parametrize(
    "board, args, signal", [("host", (), "SIGILL"), ("rpi", ("--device=qemu",), "SIGTRAP")], ids=["host", "linux"]
)
def test_lines_printed_before_a_crash_reach_the_parser_and_the_crash_is_the_running_cases(project, board, args, signal):
    # a pipe makes stdout fully buffered: the PASS lines of a and b died with the process,
    # and the crash was charged to test_a (on a Linux board under qemu-user too)
    project.write("unity.h", UNITY_H)
    project.write("trap_test.c", UNITY_TRAP)
    result = project.run("-v", *args, board=board)
    found = {m.group(1): m.group(2) for m in re.finditer(r"::(\w+)\[\S+\] (PASSED|FAILED)", result.stdout.str())}
    assert found == {"test_a": "PASSED", "test_b": "PASSED", "test_c": "FAILED"}
    text = result.stdout.str()
    assert f"crashed: killed by {signal} while this case was running" in text
    assert "not run" not in text


def binary_item(result) -> str:
    """The binary item's report: a problem of the binary as a whole."""
    text = result.stdout.str()
    start = text.find("binary[host]: a problem of the binary as a whole")
    return text[start : text.find("\n___", start)] if start >= 0 else ""


GTEST_FORGED_EXIT = r"""
#include <gtest/gtest.h>
#include <cstdio>
#include <unistd.h>
TEST(K, First) { EXPECT_EQ(1, 1); }
TEST(K, Last) {
  EXPECT_EQ(1, 2);
  std::printf("[       OK ] K.Last (0 ms)\n[----------] 2 tests from K (0 ms total)\n\n"
              "[==========] 2 tests from 1 test suite ran. (0 ms total)\n[  PASSED  ] 2 tests.\n");
  std::fflush(stdout);
  _exit(0);
}
"""


def test_gtest_a_case_printing_its_pass_and_the_summary_then_exit_0_does_not_pass(project):
    # it printed gtest's own lines: the run looked complete and passed
    project.write("forged_test.cc", GTEST_FORGED_EXIT)
    result = project.run("-v")
    assert outcomes(result) == {"K.First": "PASSED", "K.Last": "FAILED"}
    text = result.stdout.str()
    assert "forged_test.cc:7: Failure" in text
    assert "no verdict: output ended while this case was running" in text


GTEST_SUITE_SETUP = r"""
#include <gtest/gtest.h>
class Broken : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { FAIL() << "no device found"; }
};
class Fine : public ::testing::Test {};
TEST_F(%s, Runs) {}
TEST_F(%s, Runs) {}
"""


def test_gtest_a_failing_set_up_test_suite_is_its_own_suites_failure(project):
    # charged to the previous suite's passed case; as the first suite, its text was dropped
    project.write("after_test.cc", GTEST_SUITE_SETUP % ("Fine", "Broken"))
    project.write("first_test.cc", GTEST_SUITE_SETUP % ("Broken", "Fine"))
    result = project.run("-v")
    found = {}
    for line in result.outlines:
        m = re.search(r"(\w+)_test\.cc::(\S+)\[host\] (PASSED|FAILED)", line)
        if m:
            found[f"{m.group(1)}::{m.group(2)}"] = m.group(3)
    assert found == {
        "after::Fine.Runs": "PASSED",
        "after::Broken.Runs": "FAILED",
        "first::Broken.Runs": "FAILED",
        "first::Fine.Runs": "PASSED",
    }
    text = result.stdout.str()
    assert text.count("SetUpTestSuite or TearDownTestSuite of Broken failed:\nfirst_test.cc:5: Failure") == 1
    assert text.count("SetUpTestSuite or TearDownTestSuite of Broken failed:\nafter_test.cc:5: Failure") == 1
    assert text.count("no device found") >= 2


GTEST_LIES_AFTER_FAILING = r"""
#include <gtest/gtest.h>
#include <cstdio>
#include <unistd.h>
TEST(A, Honest) {}
TEST(B, Liar) {
  EXPECT_TRUE(false);
  std::printf("[       OK ] B.Liar (0 ms)\n[==========] 2 tests from 2 test suites ran. (0 ms total)\n"
              "[  PASSED  ] 2 tests.\n");
  std::fflush(stdout);
}
TEST(C, Honest) {}
"""


def test_gtest_lines_a_case_prints_fail_only_that_case(project):
    # the closing summary disagreed with the case lines and every honest case failed too
    project.write("liar_test.cc", GTEST_LIES_AFTER_FAILING)
    result = project.run("-v")
    assert outcomes(result) == {"A.Honest": "PASSED", "B.Liar": "FAILED", "C.Honest": "PASSED"}
    assert "liar_test.cc:7: Failure" in result.stdout.str()


def test_gtest_sample9_main_discounting_a_failure_fails_the_binary_not_the_passed_cases(project):
    # its main discounts the failure it expects and returns 0 (Debian's googletest sources)
    sample = Path("/usr/src/googletest/googletest/samples/sample9_unittest.cc")
    project.write("sample9_test.cc", sample.read_text())
    result = project.run("-v", "-rA")
    assert outcomes(result) == {
        "CustomOutputTest.PrintsMessage": "PASSED",
        "CustomOutputTest.Succeeds": "PASSED",
        "CustomOutputTest.Fails": "FAILED",
        "binary": "FAILED",
    }
    assert "a case failed, but the binary exited with code 0" in binary_item(result)


CPPUTEST_FORGED_EXIT = r"""
#include <CppUTest/TestHarness.h>
#include <cstdio>
#include <unistd.h>
TEST_GROUP(K) {};
TEST(K, Last) {
  CHECK_EQUAL(1, 2);
}
TEST(K, First) {
  std::printf(" - 0 ms\nTEST(K, Last) - 0 ms\n\nOK (2 tests, 2 ran, 2 checks, 0 ignored, 0 filtered out, 0 ms)\n\n");
  std::fflush(stdout);
  _exit(0);
}
IGNORE_TEST(K, Later) {}
"""


def test_cpputest_a_case_printing_the_rest_of_the_run_then_exit_0_does_not_pass(project):
    # CppUTest runs K.First first: its printed end, K.Last's and the summary made both pass
    project.write("forged_test.cc", CPPUTEST_FORGED_EXIT)
    result = project.run("-v")
    assert outcomes(result) == {"K.First": "FAILED", "K.Last": "FAILED", "K.Later": "FAILED"}
    text = result.stdout.str()
    assert "no verdict: output ended while this case was running" in text
    assert "not run: no verdict (output ended without the closing summary)" in text


def test_cpputest_verdicts_from_the_plugin_with_a_main_of_the_tests_own(project):
    source = CPPUTEST_FORGED_EXIT.replace("_exit(0);", "").replace(
        "IGNORE_TEST(K, Later) {}",
        "IGNORE_TEST(K, Later) {}\n#include <CppUTest/CommandLineTestRunner.h>\n"
        "int main(int ac, char **av) { return CommandLineTestRunner::RunAllTests(ac, av); }",
    )
    project.write("own_main_test.cc", source)
    result = project.run("-v")
    assert outcomes(result) == {"K.First": "PASSED", "K.Last": "FAILED", "K.Later": "SKIPPED"}
    assert "own_main_test.cc:7: error: Failure in TEST(K, Last)" in result.stdout.str()


def test_a_fault_on_bare_metal_is_in_the_headline_of_the_case_that_faulted(project):
    # the case was the right one, but its headline said only "no verdict: output ended"
    project.write("unity.h", UNITY_H)
    project.write("udf_test.c", UNITY_TRAP.replace("__builtin_trap();", '__asm__ volatile("udf #0");'))
    result = project.run("-v", board="mps2-an385")
    assert outcomes(result) == {}  # the items are named for their board
    result.stdout.fnmatch_lines(
        [
            "*udf_test.c::test_a[[]mps2-an385[]] PASSED*",
            "*udf_test.c::test_c[[]mps2-an385[]] FAILED*",
            "*fault: UsageFault (UNDEFINSTR) pc=0x* while this case was running*",
        ]
    )
    assert "no verdict: output ended" not in result.stdout.str()


def test_unity_on_bare_metal_a_case_printing_its_own_pass_line_then_faulting_does_not_pass(project):
    # test_b passed by its own line and the fault went to test_c
    project.write("unity.h", UNITY_H)
    source = UNITY_PASS_THEN_CRASH.replace('if (!getenv("NO_CRASH")) abort();', '__asm__ volatile("udf #0");')
    project.write("pass_test.c", source)
    result = project.run("-v", board="mps2-an385")
    result.stdout.fnmatch_lines(
        [
            "*pass_test.c::test_a[[]mps2-an385[]] PASSED*",
            "*pass_test.c::test_b[[]mps2-an385[]] FAILED*",
            "*pass_test.c::test_c[[]mps2-an385[]] FAILED*",
            "*fault: UsageFault (UNDEFINSTR) pc=0x* case=test_b while this case was running*",
            "*not run: fault: UsageFault*in case test_b, before this case*",
        ]
    )
