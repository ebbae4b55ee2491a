#include "tensorflow/lite/micro/kernels/softmax.h"

#include <cmath>

namespace tflite {
void SoftmaxFloat(const float* in, float* out, int n) {
  float max = in[0];
  for (int i = 1; i < n; ++i) max = in[i] > max ? in[i] : max;
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += out[i] = std::exp(in[i] - max);
  for (int i = 0; i < n; ++i) out[i] /= sum;
}
}  // namespace tflite
