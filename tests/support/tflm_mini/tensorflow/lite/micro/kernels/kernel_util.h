#ifndef TENSORFLOW_LITE_MICRO_KERNELS_KERNEL_UTIL_H_
#define TENSORFLOW_LITE_MICRO_KERNELS_KERNEL_UTIL_H_
namespace tflite {
namespace micro {
// Which per-kind define the build gave (TFLM: TF_LITE_USE_CTIME on host, TF_LITE_MCU_DEBUG_LOG on MCUs).
const char* Platform();
}  // namespace micro
}  // namespace tflite
#endif
