// Miniature of TFLM's first-generation harness (tensorflow/lite/micro/testing/micro_test.h):
// the same macros and the same lines, printed through MicroPrintf.
#ifndef TENSORFLOW_LITE_MICRO_TESTING_MICRO_TEST_H_
#define TENSORFLOW_LITE_MICRO_TESTING_MICRO_TEST_H_
#include <limits>
#include <type_traits>

#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/micro_log.h"
#include "tensorflow/lite/micro/system_setup.h"

namespace micro_test {
extern int tests_passed;
extern int tests_failed;
extern bool is_test_complete;
extern bool did_test_fail;
}  // namespace micro_test

namespace tflite {
inline void InitializeTest() { InitializeTarget(); }
}  // namespace tflite

#define TF_LITE_MICRO_TESTS_BEGIN   \
  namespace micro_test {            \
  int tests_passed;                 \
  int tests_failed;                 \
  bool is_test_complete;            \
  bool did_test_fail;               \
  }                                 \
  int main(int argc, char** argv) { \
    micro_test::tests_passed = 0;   \
    micro_test::tests_failed = 0;   \
    tflite::InitializeTest();

#define TF_LITE_MICRO_TESTS_END                                                                   \
  MicroPrintf("%d/%d tests passed", micro_test::tests_passed,                                     \
              (micro_test::tests_failed + micro_test::tests_passed));                             \
  if (micro_test::tests_failed == 0) {                                                            \
    MicroPrintf("~~~ALL TESTS PASSED~~~\n");                                                      \
    return kTfLiteOk;                                                                             \
  } else {                                                                                        \
    MicroPrintf("~~~SOME TESTS FAILED~~~\n");                                                     \
    return kTfLiteError;                                                                          \
  }                                                                                               \
  }

#define TF_LITE_MICRO_TEST(name)                                                                  \
  MicroPrintf("Testing " #name);                                                                  \
  for (micro_test::is_test_complete = false, micro_test::did_test_fail = false;                   \
       !micro_test::is_test_complete; micro_test::is_test_complete = true,                        \
      micro_test::tests_passed += (micro_test::did_test_fail) ? 0 : 1,                            \
      micro_test::tests_failed += (micro_test::did_test_fail) ? 1 : 0)

#define TF_LITE_MICRO_EXPECT(x)                               \
  do {                                                        \
    if (!(x)) {                                               \
      MicroPrintf(#x " failed at %s:%d", __FILE__, __LINE__); \
      micro_test::did_test_fail = true;                       \
    }                                                         \
  } while (false)

#define TF_LITE_MICRO_EXPECT_EQ(x, y)                                                             \
  do {                                                                                            \
    auto vx = x;                                                                                  \
    auto vy = y;                                                                                  \
    bool isFloatingX = (std::is_floating_point<decltype(vx)>::value);                             \
    bool isFloatingY = (std::is_floating_point<decltype(vy)>::value);                             \
    if (isFloatingX && isFloatingY) {                                                             \
      auto delta = ((vx) > (vy)) ? ((vx) - (vy)) : ((vy) - (vx));                                 \
      if (delta > std::numeric_limits<decltype(delta)>::epsilon()) {                              \
        MicroPrintf(#x " == " #y " failed at %s:%d (%f vs %f)", __FILE__, __LINE__,               \
                    static_cast<double>(vx), static_cast<double>(vy));                            \
        micro_test::did_test_fail = true;                                                         \
      }                                                                                           \
    } else if ((vx) != (vy)) {                                                                    \
      MicroPrintf(#x " == " #y " failed at %s:%d (%d vs %d)", __FILE__, __LINE__,                 \
                  static_cast<int>(vx), static_cast<int>(vy));                                    \
      micro_test::did_test_fail = true;                                                           \
    }                                                                                             \
  } while (false)

#define TF_LITE_MICRO_EXPECT_NEAR(x, y, epsilon)                                                  \
  do {                                                                                            \
    auto vx = (x);                                                                                \
    auto vy = (y);                                                                                \
    auto delta = ((vx) > (vy)) ? ((vx) - (vy)) : ((vy) - (vx));                                   \
    if (vx != vy && delta > epsilon) {                                                            \
      MicroPrintf(#x " (%f) near " #y " (%f) failed at %s:%d", static_cast<double>(vx),           \
                  static_cast<double>(vy), __FILE__, __LINE__);                                   \
      micro_test::did_test_fail = true;                                                           \
    }                                                                                             \
  } while (false)

#define TF_LITE_MICRO_EXPECT_TRUE(x)                                  \
  do {                                                                \
    if (!(x)) {                                                       \
      MicroPrintf(#x " was not true failed at %s:%d", __FILE__, __LINE__); \
      micro_test::did_test_fail = true;                               \
    }                                                                 \
  } while (false)

#define TF_LITE_MICRO_FAIL(msg)                         \
  do {                                                  \
    MicroPrintf("FAIL: %s", msg, __FILE__, __LINE__);   \
    micro_test::did_test_fail = true;                   \
  } while (false)

#endif  // TENSORFLOW_LITE_MICRO_TESTING_MICRO_TEST_H_
