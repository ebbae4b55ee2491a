#include "depthwise_conv.h"

#include "quantization.h"

int DepthwiseOutputHeight(const DepthwiseParams *p) { return (p->in_h - p->k_h) / p->stride + 1; }
int DepthwiseOutputWidth(const DepthwiseParams *p) { return (p->in_w - p->k_w) / p->stride + 1; }

void DepthwiseConvFloat(const DepthwiseParams *p, const float *input, const float *filter,
                        const float *bias, float *output) {
  const int out_h = DepthwiseOutputHeight(p), out_w = DepthwiseOutputWidth(p);
  const int out_c = p->in_c * p->depth_multiplier;
  for (int oy = 0; oy < out_h; ++oy) {
    for (int ox = 0; ox < out_w; ++ox) {
      for (int ic = 0; ic < p->in_c; ++ic) {
        for (int m = 0; m < p->depth_multiplier; ++m) {
          const int oc = ic * p->depth_multiplier + m;
          float acc = bias ? bias[oc] : 0.0f;
          for (int ky = 0; ky < p->k_h; ++ky) {
            for (int kx = 0; kx < p->k_w; ++kx) {
              const int iy = oy * p->stride + ky, ix = ox * p->stride + kx;
              acc += input[(iy * p->in_w + ix) * p->in_c + ic] *
                     filter[(ky * p->k_w + kx) * out_c + oc];
            }
          }
          output[(oy * out_w + ox) * out_c + oc] = acc;
        }
      }
    }
  }
}

void DepthwiseConvInt8(const DepthwiseParams *p, const int8_t *input, int32_t input_offset,
                       const int8_t *filter, const int32_t *bias, const int32_t *multiplier,
                       const int *shift, int32_t output_offset, int8_t *output) {
  const int out_h = DepthwiseOutputHeight(p), out_w = DepthwiseOutputWidth(p);
  const int out_c = p->in_c * p->depth_multiplier;
  for (int oy = 0; oy < out_h; ++oy) {
    for (int ox = 0; ox < out_w; ++ox) {
      for (int ic = 0; ic < p->in_c; ++ic) {
        for (int m = 0; m < p->depth_multiplier; ++m) {
          const int oc = ic * p->depth_multiplier + m;
          int32_t acc = bias ? bias[oc] : 0;
          for (int ky = 0; ky < p->k_h; ++ky) {
            for (int kx = 0; kx < p->k_w; ++kx) {
              const int iy = oy * p->stride + ky, ix = ox * p->stride + kx;
              const int32_t in = input[(iy * p->in_w + ix) * p->in_c + ic] + input_offset;
              acc += in * filter[(ky * p->k_w + kx) * out_c + oc];
            }
          }
          acc = MultiplyByQuantizedMultiplier(acc, multiplier[oc], shift[oc]) + output_offset;
          if (acc < -128) acc = -128;
          if (acc > 127) acc = 127;
          output[(oy * out_w + ox) * out_c + oc] = (int8_t)acc;
        }
      }
    }
  }
}
