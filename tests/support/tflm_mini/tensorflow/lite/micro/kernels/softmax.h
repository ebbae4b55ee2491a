#ifndef TENSORFLOW_LITE_MICRO_KERNELS_SOFTMAX_H_
#define TENSORFLOW_LITE_MICRO_KERNELS_SOFTMAX_H_
namespace tflite {
void SoftmaxFloat(const float* in, float* out, int n);
}
#endif
