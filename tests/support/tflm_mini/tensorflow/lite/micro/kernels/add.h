#ifndef TENSORFLOW_LITE_MICRO_KERNELS_ADD_H_
#define TENSORFLOW_LITE_MICRO_KERNELS_ADD_H_
#include <cstdint>
namespace tflite {
void AddInt8(const int8_t* a, const int8_t* b, int8_t* out, int n);
}
#endif
