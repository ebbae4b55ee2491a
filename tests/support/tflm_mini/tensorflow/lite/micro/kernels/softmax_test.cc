// Second-generation harness (GoogleTest names), as TFLM's newer kernel tests are written.
#include "tensorflow/lite/micro/kernels/softmax.h"

#include "tensorflow/lite/micro/testing/micro_test_v2.h"

namespace {
void CheckSoftmax(const float* in, const float* golden, int n, float tolerance) {
  float out[8];
  tflite::SoftmaxFloat(in, out, n);
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(out[i], golden[i], tolerance);
  }
}
}  // namespace

TEST(SoftmaxTest, Float1D) {
  const float in[] = {1.0f, 2.0f, 3.0f};
  const float golden[] = {0.0900306f, 0.2447285f, 0.6652409f};
  CheckSoftmax(in, golden, 3, 1e-5f);
}

TEST(SoftmaxTest, FloatUniform) {
  const float in[] = {4.0f, 4.0f, 4.0f, 4.0f};
  const float golden[] = {0.25f, 0.25f, 0.25f, 0.25f};
  CheckSoftmax(in, golden, 4, 1e-6f);
}

#ifdef USE_TFLM_COMPRESSION

TEST(SoftmaxTest, FloatCompressed) {
  const float in[] = {0.0f, 0.0f};
  const float golden[] = {0.5f, 0.5f};
  CheckSoftmax(in, golden, 2, 1e-6f);
}

#endif  // USE_TFLM_COMPRESSION

TF_LITE_MICRO_TESTS_MAIN
