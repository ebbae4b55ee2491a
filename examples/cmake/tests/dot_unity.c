/* Unity (ThrowTheSwitch), with a main of its own as projects write it (cJSON's tests do, with a
 * calling-convention macro before main): one item per RUN_TEST, on Linux boards and bare metal.
 * Unity comes from the project (cmake -DUNITY_DIR=...: unity.c and unity.h), as cJSON's tests
 * carry theirs. */
#include "unity.h"
#include "dot.h"

#define DOT_CDECL

void setUp(void) {}
void tearDown(void) {}

void test_dot_of_one(void) {
  const signed char a[] = {-3}, b[] = {7};
  TEST_ASSERT_EQUAL_INT(-21, dot_s8(a, b, 1));
}

void test_dot_accumulates_past_int8(void) {
  const signed char a[] = {127, 127, 127}, b[] = {127, 127, 127};
  TEST_ASSERT_EQUAL_INT(48387, dot_s8(a, b, 3));
}

int DOT_CDECL main(void) {
  UNITY_BEGIN();
  RUN_TEST(test_dot_of_one);
  RUN_TEST(test_dot_accumulates_past_int8);
  return UNITY_END();
}
