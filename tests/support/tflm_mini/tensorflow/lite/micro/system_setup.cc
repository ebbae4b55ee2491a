#include "tensorflow/lite/micro/system_setup.h"
namespace tflite {
void InitializeTarget() {}
}  // namespace tflite
