#ifndef TENSORFLOW_LITE_KERNELS_KERNEL_UTIL_H_
#define TENSORFLOW_LITE_KERNELS_KERNEL_UTIL_H_
#include <cstdint>
namespace tflite {
int8_t SaturatingAdd(int8_t a, int8_t b);
}
#endif
