/* Reference fully-connected layer: output = input x weights^T + bias. */
#ifndef EXAMPLES_REFERENCE_FULLY_CONNECTED_H_
#define EXAMPLES_REFERENCE_FULLY_CONNECTED_H_
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void FullyConnectedFloat(int batches, int in_depth, int out_depth, const float *input,
                         const float *weights, const float *bias, float *output);

/* Per-tensor quantized, TFLM style: int32 accumulators, requantized to int8. */
void FullyConnectedInt8(int batches, int in_depth, int out_depth, const int8_t *input,
                        int32_t input_offset, const int8_t *weights, int32_t weights_offset,
                        const int32_t *bias, int32_t multiplier, int shift,
                        int32_t output_offset, int8_t *output);

#ifdef __cplusplus
}
#endif
#endif
