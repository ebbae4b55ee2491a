#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace tflite {
namespace micro {
const char* Platform() {
#if defined(TF_LITE_USE_CTIME)
  return "ctime";
#elif defined(TF_LITE_MCU_DEBUG_LOG)
  return "mcu";
#else
  return "none";
#endif
}
}  // namespace micro
}  // namespace tflite
