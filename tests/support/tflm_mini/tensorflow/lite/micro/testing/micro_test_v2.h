// Miniature of TFLM's second-generation harness (tensorflow/lite/micro/testing/micro_test_v2.h):
// GoogleTest-style names and lines, tests registered by static constructors and run in
// definition order, every piece printed through DebugLog (no newline added).
#ifndef TENSORFLOW_LITE_MICRO_TESTING_MICRO_TEST_V2_H_
#define TENSORFLOW_LITE_MICRO_TESTING_MICRO_TEST_V2_H_
#include <cstdarg>
#include <cstddef>
#include <limits>

#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/debug_log.h"
#include "tensorflow/lite/micro/micro_log.h"
#include "tensorflow/lite/micro/system_setup.h"

namespace tflite {
inline void InitializeTest() { InitializeTarget(); }
}  // namespace tflite

namespace micro_test {
namespace internal {

struct TestInfo {
  const char* suite_name;
  const char* test_name;
  void (*test_func)();
  TestInfo* next;
  TestInfo* next_failure;
};

namespace printer {
inline void Printf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  DebugLog(format, args);
  va_end(args);
}
inline void PrintValue(int v) { Printf("%d", v); }
inline void PrintValue(long v) { Printf("%ld", v); }
inline void PrintValue(unsigned int v) { Printf("%u", v); }
inline void PrintValue(float v) { Printf("%f", static_cast<double>(v)); }
inline void PrintValue(double v) { Printf("%f", v); }
inline void PrintValue(bool v) { Printf("%s", v ? "true" : "false"); }
inline void PrintValue(signed char v) { Printf("%d", v); }

template <typename T, typename U>
void ReportFailure(const char* a_str, const char* b_str, const T& a, const U& b, const char* op,
                   const char* file, int line) {
  Printf("%s:%d: Failure\n", file, line);
  Printf("  Expression:  %s %s %s\n", a_str, op, b_str);
  Printf("  Evaluated:   ");
  PrintValue(a);
  Printf(" %s ", op);
  PrintValue(b);
  Printf("\n");
}

template <typename T, typename U>
void ReportFailureNear(const char* a_str, const char* b_str, const char* epsilon_str, const T& delta,
                       const U& epsilon, const char* file, int line) {
  Printf("%s:%d: Failure\n", file, line);
  Printf("  Expression: |%s - %s| <= %s\n", a_str, b_str, epsilon_str);
  Printf("  Evaluated:  ");
  PrintValue(delta);
  Printf(" <= ");
  PrintValue(epsilon);
  Printf("\n");
}
}  // namespace printer

class TestRunner {
 public:
  static TestRunner& Get() {
    static TestRunner instance;
    return instance;
  }
  void RegisterTest(TestInfo* test) {
    test->next = tests_;
    tests_ = test;
  }
  bool& fail() { return fail_; }

  TfLiteStatus Run() {
    int tests_passed = 0, tests_failed = 0;
    TestInfo* failed_tests = nullptr;
    TestInfo** next_failed_test = &failed_tests;
    TestInfo* prev = nullptr;  // registered last-first: reverse to definition order
    for (TestInfo* current = tests_; current != nullptr;) {
      TestInfo* next = current->next;
      current->next = prev;
      prev = current;
      current = next;
    }
    tests_ = prev;
    printer::Printf("[==========] Running tests.\n");
    for (TestInfo* test = tests_; test != nullptr; test = test->next) {
      printer::Printf("[ RUN      ] %s.%s\n", test->suite_name, test->test_name);
      fail_ = false;
      test->test_func();
      if (fail_) {
        tests_failed++;
        *next_failed_test = test;
        next_failed_test = &test->next_failure;
        test->next_failure = nullptr;
        printer::Printf("[  FAILED  ] %s.%s\n", test->suite_name, test->test_name);
      } else {
        tests_passed++;
        printer::Printf("[       OK ] %s.%s\n", test->suite_name, test->test_name);
      }
    }
    printer::Printf("[==========] %d tests ran.\n", tests_passed + tests_failed);
    printer::Printf("[  PASSED  ] %d tests.\n", tests_passed);
    if (tests_failed > 0) {
      printer::Printf("[  FAILED  ] %d tests, listed below:\n", tests_failed);
      for (TestInfo* test = failed_tests; test != nullptr; test = test->next_failure) {
        printer::Printf("[  FAILED  ] %s.%s\n", test->suite_name, test->test_name);
      }
      return kTfLiteError;
    }
    printer::Printf("~~~ALL TESTS PASSED~~~\n");
    return kTfLiteOk;
  }

 private:
  TestInfo* tests_ = nullptr;
  bool fail_ = false;
};

class TestRegistrar {
 public:
  TestRegistrar(TestInfo* info) { TestRunner::Get().RegisterTest(info); }
};

}  // namespace internal
inline TfLiteStatus RunAllTests() { return internal::TestRunner::Get().Run(); }
}  // namespace micro_test

#define MICRO_TEST_OP(a, b, op_str, compare, on_fail)                                             \
  do {                                                                                            \
    auto va = (a);                                                                                \
    auto vb = (b);                                                                                \
    if (!(compare)) {                                                                             \
      micro_test::internal::printer::ReportFailure(#a, #b, va, vb, op_str, __FILE__, __LINE__);   \
      micro_test::internal::TestRunner::Get().fail() = true;                                      \
      on_fail;                                                                                    \
    }                                                                                             \
  } while (false)

#define MICRO_TEST_NEAR(a, b, epsilon, on_fail)                                                   \
  do {                                                                                            \
    auto va = (a);                                                                                \
    auto vb = (b);                                                                                \
    auto delta = ((va) > (vb)) ? ((va) - (vb)) : ((vb) - (va));                                   \
    if (va != vb && delta > epsilon) {                                                            \
      micro_test::internal::printer::ReportFailureNear(#a, #b, #epsilon, delta, epsilon, __FILE__, \
                                                       __LINE__);                                 \
      micro_test::internal::TestRunner::Get().fail() = true;                                      \
      on_fail;                                                                                    \
    }                                                                                             \
  } while (false)

#define TEST(suite, name)                                                                         \
  void suite##_##name##_Test();                                                                   \
  static micro_test::internal::TestInfo suite##_##name##_Info = {#suite, #name,                   \
                                                                 suite##_##name##_Test, nullptr,  \
                                                                 nullptr};                        \
  static micro_test::internal::TestRegistrar suite##_##name##_Reg(&suite##_##name##_Info);        \
  void suite##_##name##_Test()

#define ASSERT_EQ(a, b) MICRO_TEST_OP(a, b, "==", va == vb, return)
#define EXPECT_EQ(a, b) MICRO_TEST_OP(a, b, "==", va == vb, (void)0)
#define EXPECT_LE(a, b) MICRO_TEST_OP(a, b, "<=", va <= vb, (void)0)
#define EXPECT_TRUE(x) MICRO_TEST_OP(x, true, "==", va == vb, (void)0)
#define EXPECT_NEAR(a, b, epsilon) MICRO_TEST_NEAR(a, b, epsilon, (void)0)
#define EXPECT_FLOAT_EQ(a, b) \
  MICRO_TEST_NEAR(a, b, 4 * std::numeric_limits<float>::epsilon(), (void)0)

#define RUN_ALL_TESTS() micro_test::RunAllTests()

#define TF_LITE_MICRO_TESTS_MAIN    \
  int main(int argc, char** argv) { \
    tflite::InitializeTest();       \
    return RUN_ALL_TESTS();         \
  }

#endif  // TENSORFLOW_LITE_MICRO_TESTING_MICRO_TEST_V2_H_
