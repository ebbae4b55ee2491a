#ifndef TENSORFLOW_LITE_MICRO_SYSTEM_SETUP_H_
#define TENSORFLOW_LITE_MICRO_SYSTEM_SETUP_H_
namespace tflite {
void InitializeTarget();
}
#endif
