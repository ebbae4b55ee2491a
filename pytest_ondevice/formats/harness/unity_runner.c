/* pytest-ondevice: the main of a Unity test file that has none, as Unity's own
 * generate_test_runner.rb (and Ceedling) would write it: every test function of the file,
 * in source order, each named at the line it is defined on; setUp/tearDown stubs when the
 * file has none; suiteSetUp/suiteTearDown when it has them.
 *
 * What the file holds comes in as macros (formats/unity.py, Unity.needs):
 *   ONDEVICE_TEST_SOURCE         the test file, as our builds write __FILE__ (build.py)
 *   ONDEVICE_UNITY_TESTS(X)      X(name, line) for each test function
 *   ONDEVICE_UNITY_HAS_SETUP, _TEARDOWN, _SUITE_SETUP, _SUITE_TEARDOWN   0 or 1 */
#include "unity.h"

#define ONDEVICE_DECLARE(name, line) void name(void);
ONDEVICE_UNITY_TESTS(ONDEVICE_DECLARE)

#if !ONDEVICE_UNITY_HAS_SETUP
void setUp(void) {}
#endif
#if !ONDEVICE_UNITY_HAS_TEARDOWN
void tearDown(void) {}
#endif

int main(void) {
#if ONDEVICE_UNITY_HAS_SUITE_SETUP
  suiteSetUp();
#endif
  UnityBegin(ONDEVICE_TEST_SOURCE);
#define ONDEVICE_RUN(name, line) UnityDefaultTestRun(name, #name, line);
  ONDEVICE_UNITY_TESTS(ONDEVICE_RUN)
#if ONDEVICE_UNITY_HAS_SUITE_TEARDOWN
  return suiteTearDown(UnityEnd());
#else
  return UnityEnd();
#endif
}
