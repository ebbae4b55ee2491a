// First-generation harness, as TFLM's older kernel tests are written.
#include "tensorflow/lite/micro/kernels/add.h"

#include "tensorflow/lite/micro/kernels/kernel_util.h"
#include "tensorflow/lite/micro/testing/micro_test.h"

TF_LITE_MICRO_TESTS_BEGIN

TF_LITE_MICRO_TEST(AddInt8Saturates) {
  const int8_t a[] = {100, -100, 3};
  const int8_t b[] = {100, -100, 4};
  int8_t out[3];
  tflite::AddInt8(a, b, out, 3);
  TF_LITE_MICRO_EXPECT_EQ(out[0], 127);
  TF_LITE_MICRO_EXPECT_EQ(out[1], -128);
  TF_LITE_MICRO_EXPECT_EQ(out[2], 7);
}

TF_LITE_MICRO_TEST(AddKeepsFloatTolerance) {
  const float expected = 0.25f;
  TF_LITE_MICRO_EXPECT_NEAR(0.5f * 0.5f, expected, 1e-6f);
}

TF_LITE_MICRO_TEST(PlatformDefineComesFromTheBoardKind) {
  const char* platform = tflite::micro::Platform();
  TF_LITE_MICRO_EXPECT(platform[0] != 'n');
}

TF_LITE_MICRO_TESTS_END
