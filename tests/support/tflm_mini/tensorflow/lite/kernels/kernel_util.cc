// Same basename as micro/kernels/kernel_util.cc, as in TFLM: both go into one library.
#include "tensorflow/lite/kernels/kernel_util.h"

#include "flatbuffers/base.h"

static_assert(FLATBUFFERS_VERSION_MAJOR == 25, "the pinned flatbuffers");

namespace tflite {
int8_t SaturatingAdd(int8_t a, int8_t b) {
  int sum = a + b;
  return static_cast<int8_t>(sum > 127 ? 127 : sum < -128 ? -128 : sum);
}
}  // namespace tflite
