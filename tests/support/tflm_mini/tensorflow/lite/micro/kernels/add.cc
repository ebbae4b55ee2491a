#include "tensorflow/lite/micro/kernels/add.h"

#include "tensorflow/lite/kernels/kernel_util.h"

namespace tflite {
void AddInt8(const int8_t* a, const int8_t* b, int8_t* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = SaturatingAdd(a[i], b[i]);
}
}  // namespace tflite
