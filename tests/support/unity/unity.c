/* The stand-in's implementation: see unity.h. */
#include "unity.h"

#include <stdio.h>

struct UNITY_STORAGE_T Unity;

static void UnityPrint(const char *s) {
  while (*s) putchar(*s++);
}

static void UnityResultsBegin(unsigned long line) {
  printf("%s:%lu:%s:", Unity.TestFile, line, Unity.CurrentTestName);
}

void UnityBegin(const char *filename) {
  Unity.TestFile = filename;
  Unity.CurrentTestName = 0;
  Unity.NumberOfTests = Unity.TestFailures = Unity.TestIgnores = 0;
  Unity.CurrentTestFailed = Unity.CurrentTestIgnored = 0;
}

void UnityAssertEqualNumber(long expected, long actual, const char *msg, unsigned long line) {
  if (expected == actual) return;
  UnityResultsBegin(line);
  printf("FAIL: Expected %ld Was %ld", expected, actual);
  if (msg) printf(". %s", msg);
  Unity.CurrentTestFailed = 1;
  longjmp(Unity.AbortFrame, 1);
}

void UnityFail(const char *msg, unsigned long line) {
  UnityResultsBegin(line);
  printf("FAIL: %s", msg);
  Unity.CurrentTestFailed = 1;
  longjmp(Unity.AbortFrame, 1);
}

void UnityIgnore(const char *msg, unsigned long line) {
  UnityResultsBegin(line);
  UnityPrint("IGNORE");
  if (msg) printf(": %s", msg);
  Unity.CurrentTestIgnored = 1;
  longjmp(Unity.AbortFrame, 1);
}

static void UnityConcludeTest(void) {
  if (Unity.CurrentTestIgnored) {
    Unity.TestIgnores++;
  } else if (!Unity.CurrentTestFailed) {
    UnityResultsBegin(Unity.CurrentTestLineNumber);
    UnityPrint("PASS");
  } else {
    Unity.TestFailures++;
  }
  Unity.CurrentTestFailed = Unity.CurrentTestIgnored = 0;
  putchar('\n');
  fflush(stdout);
}

void UnityDefaultTestRun(UnityTestFunction Func, const char *FuncName, const int FuncLineNum) {
  Unity.CurrentTestName = FuncName;
  Unity.CurrentTestLineNumber = (unsigned long)FuncLineNum;
  Unity.NumberOfTests++;
  if (TEST_PROTECT()) {
    setUp();
    Func();
  }
  if (TEST_PROTECT()) {
    tearDown();
  }
  UnityConcludeTest();
}

int UnityEnd(void) {
  UnityPrint("\n-----------------------\n");
  printf("%lu Tests %lu Failures %lu Ignored \n", Unity.NumberOfTests, Unity.TestFailures, Unity.TestIgnores);
  UnityPrint(Unity.TestFailures == 0 ? "OK\n" : "FAIL\n");
  fflush(stdout);
  return (int)Unity.TestFailures;
}
