/* A stand-in for ThrowTheSwitch's Unity (no Unity in any package registry these tests can
 * reach), written for pytest-ondevice's tests from Unity's documented interface: the same
 * names (UnityBegin, UnityEnd, UnityDefaultTestRun, RUN_TEST, TEST_ASSERT_*, TEST_IGNORE,
 * UNITY_BEGIN/UNITY_END), the same global `Unity` whose first two fields are the test file
 * and the running case's name (our runtime reads the second), setUp/tearDown that the user
 * (or a generated runner) provides, and the same output, line for line:
 *   FILE:LINE:NAME:PASS | FILE:LINE:NAME:FAIL: Expected 1 Was 2 | FILE:LINE:NAME:IGNORE
 * then a rule, "N Tests F Failures I Ignored " and OK or FAIL. */
#ifndef UNITY_H
#define UNITY_H
#include <setjmp.h>

typedef void (*UnityTestFunction)(void);

struct UNITY_STORAGE_T {
  const char *TestFile;
  const char *CurrentTestName;
  unsigned long CurrentTestLineNumber;
  unsigned long NumberOfTests;
  unsigned long TestFailures;
  unsigned long TestIgnores;
  unsigned char CurrentTestFailed;
  unsigned char CurrentTestIgnored;
  jmp_buf AbortFrame;
};
extern struct UNITY_STORAGE_T Unity;

void setUp(void);
void tearDown(void);
void suiteSetUp(void);
int suiteTearDown(int num_failures);

void UnityBegin(const char *filename);
int UnityEnd(void);
void UnityDefaultTestRun(UnityTestFunction Func, const char *FuncName, const int FuncLineNum);
void UnityAssertEqualNumber(long expected, long actual, const char *msg, unsigned long line);
void UnityFail(const char *msg, unsigned long line);
void UnityIgnore(const char *msg, unsigned long line);

#define TEST_PROTECT() (setjmp(Unity.AbortFrame) == 0)
#define UNITY_BEGIN() UnityBegin(__FILE__)
#define UNITY_END() UnityEnd()
#define RUN_TEST(func) UnityDefaultTestRun(func, #func, __LINE__)
#define TEST_ASSERT_EQUAL_INT(expected, actual) UnityAssertEqualNumber((expected), (actual), 0, __LINE__)
#define TEST_ASSERT_EQUAL(expected, actual) TEST_ASSERT_EQUAL_INT(expected, actual)
#define TEST_ASSERT_TRUE(condition) do { if (!(condition)) UnityFail("Expected TRUE Was FALSE", __LINE__); } while (0)
#define TEST_FAIL_MESSAGE(message) UnityFail((message), __LINE__)
#define TEST_IGNORE() UnityIgnore(0, __LINE__)
#endif
