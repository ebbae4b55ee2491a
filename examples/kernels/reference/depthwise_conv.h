/* Reference depthwise convolution (NHWC, VALID padding), float and int8. */
#ifndef EXAMPLES_REFERENCE_DEPTHWISE_CONV_H_
#define EXAMPLES_REFERENCE_DEPTHWISE_CONV_H_
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int in_h, in_w, in_c;  /* input shape (batch 1) */
  int k_h, k_w;          /* filter size */
  int depth_multiplier;  /* output channels = in_c * depth_multiplier */
  int stride;
} DepthwiseParams;

int DepthwiseOutputHeight(const DepthwiseParams *p);
int DepthwiseOutputWidth(const DepthwiseParams *p);

void DepthwiseConvFloat(const DepthwiseParams *p, const float *input, const float *filter,
                        const float *bias, float *output);

/* Per-channel quantized: one multiplier/shift per output channel. */
void DepthwiseConvInt8(const DepthwiseParams *p, const int8_t *input, int32_t input_offset,
                       const int8_t *filter, const int32_t *bias, const int32_t *multiplier,
                       const int *shift, int32_t output_offset, int8_t *output);

#ifdef __cplusplus
}
#endif
#endif
