"""What a test binary prints cannot decide its own verdict, and a crash is charged to the
case that crashed: real binaries on the host board, one per harness format."""

from __future__ import annotations

import re

# Unity's output as unity.c prints it (putchar on stdout, a case's line after it ran):
# a stand-in for the one header and source a project vendors, so the test needs no download.
UNITY_H = r"""
#ifndef UNITY_H
#define UNITY_H
#include <stdio.h>
static int unity_tests, unity_failures;
static void UnityPut(const char *s) { while (*s) putchar(*s++); }
static void UnityDefaultTestRun(void (*f)(void), const char *name, const char *file, int line) {
  unity_tests++;
  f();
  printf("%s:%d:", file, line);
  UnityPut(name);
  UnityPut(":PASS\n");
}
#define UNITY_BEGIN() (unity_tests = unity_failures = 0)
#define UNITY_END() (UnityPut("\n-----------------------\n"), \
  printf("%d Tests %d Failures 0 Ignored\n", unity_tests, unity_failures), \
  UnityPut(unity_failures ? "FAIL\n" : "OK\n"), unity_failures)
#define RUN_TEST(f) UnityDefaultTestRun(f, #f, __FILE__, __LINE__)
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


def test_lines_printed_before_a_crash_reach_the_parser_and_the_crash_is_the_running_cases(project):
    # a pipe makes stdout fully buffered: the PASS lines of a and b died with the process,
    # and the crash was charged to test_a
    project.write("unity.h", UNITY_H)
    project.write("trap_test.c", UNITY_TRAP)
    result = project.run("-v")
    assert outcomes(result)["test_a"] == "PASSED"
    assert outcomes(result)["test_c"] == "FAILED"
    text = result.stdout.str()
    assert "crashed: killed by SIGILL while this case was running" in text
    assert "not run" not in text
