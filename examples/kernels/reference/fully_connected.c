#include "fully_connected.h"

#include "quantization.h"

void FullyConnectedFloat(int batches, int in_depth, int out_depth, const float *input,
                         const float *weights, const float *bias, float *output) {
  for (int b = 0; b < batches; ++b) {
    for (int o = 0; o < out_depth; ++o) {
      float acc = bias ? bias[o] : 0.0f;
      for (int i = 0; i < in_depth; ++i) acc += input[b * in_depth + i] * weights[o * in_depth + i];
      output[b * out_depth + o] = acc;
    }
  }
}

void FullyConnectedInt8(int batches, int in_depth, int out_depth, const int8_t *input,
                        int32_t input_offset, const int8_t *weights, int32_t weights_offset,
                        const int32_t *bias, int32_t multiplier, int shift,
                        int32_t output_offset, int8_t *output) {
  for (int b = 0; b < batches; ++b) {
    for (int o = 0; o < out_depth; ++o) {
      int32_t acc = bias ? bias[o] : 0;
      for (int i = 0; i < in_depth; ++i) {
        acc += (input[b * in_depth + i] + input_offset) * (weights[o * in_depth + i] + weights_offset);
      }
      acc = MultiplyByQuantizedMultiplier(acc, multiplier, shift) + output_offset;
      if (acc < -128) acc = -128;
      if (acc > 127) acc = 127;
      output[b * out_depth + o] = (int8_t)acc;
    }
  }
}
