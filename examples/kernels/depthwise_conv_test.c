/* Depthwise convolution against TFLM's reference data (v1 harness, C). */
#include "depthwise_conv.h"
#include "micro_test.h"
#include "quantization.h"

/* Shapes and data from TFLM's depthwise_conv_test SimpleTest. */
static const DepthwiseParams kParams = {3, 2, 2, 2, 2, 2, 1};
static const float kInput[12] = {1, 2, 7, 8, 3, 4, 9, 10, 5, 6, 11, 12};
static const float kFilter[16] = {1, 2, 3, 4, -9, 10, -11, 12, 5, 6, 7, 8, 13, -14, 15, -16};
static const float kBias[4] = {1, 2, 3, 4};
static const float kGolden[8] = {71, -34, 99, -20, 91, -26, 127, -4};

TF_LITE_MICRO_TESTS_BEGIN

TF_LITE_MICRO_TEST(OutputShape) {
  TF_LITE_MICRO_EXPECT_EQ(DepthwiseOutputHeight(&kParams), 2);
  TF_LITE_MICRO_EXPECT_EQ(DepthwiseOutputWidth(&kParams), 1);
}

TF_LITE_MICRO_TEST(SimpleTestFloat) {
  float output[8];
  DepthwiseConvFloat(&kParams, kInput, kFilter, kBias, output);
  for (int i = 0; i < 8; ++i) {
    TF_LITE_MICRO_EXPECT_NEAR(kGolden[i], output[i], 1e-5f);
  }
}

TF_LITE_MICRO_TEST(SimpleTestQuantized) {
  const float input_scale = 0.5f, output_scale = 1.0f;
  const int32_t input_zero_point = -1, output_zero_point = 0;
  int8_t input[12], filter[16], output[8];
  int32_t bias[4], multiplier[4];
  int shift[4];
  float filter_scale[4];

  for (int i = 0; i < 12; ++i) input[i] = QuantizeToInt8(kInput[i], input_scale, input_zero_point);
  for (int c = 0; c < 4; ++c) { /* symmetric per-channel filter quantization */
    float max_abs = 0;
    for (int k = 0; k < 4; ++k) {
      float w = kFilter[k * 4 + c];
      if (w < 0) w = -w;
      if (w > max_abs) max_abs = w;
    }
    filter_scale[c] = max_abs / 127.0f;
    for (int k = 0; k < 4; ++k) filter[k * 4 + c] = QuantizeToInt8(kFilter[k * 4 + c], filter_scale[c], 0);
    float bias_scale = input_scale * filter_scale[c];
    bias[c] = (int32_t)(kBias[c] / bias_scale + 0.5f);
    QuantizeMultiplier((double)bias_scale / output_scale, &multiplier[c], &shift[c]);
  }
  DepthwiseConvInt8(&kParams, input, -input_zero_point, filter, bias, multiplier, shift,
                    output_zero_point, output);
  for (int i = 0; i < 8; ++i) {
    int expected = QuantizeToInt8(kGolden[i], output_scale, output_zero_point);
    TF_LITE_MICRO_EXPECT_NEAR(expected, output[i], 1);
  }
}

TF_LITE_MICRO_TEST(QuantizedOutputSaturates) {
  /* A huge multiplier must clamp to int8, not wrap. */
  int8_t input[12], output[8];
  int8_t filter[16];
  int32_t multiplier[4];
  int shift[4];
  for (int i = 0; i < 12; ++i) input[i] = 100;
  for (int i = 0; i < 16; ++i) filter[i] = (i % 2) ? -100 : 100;
  for (int c = 0; c < 4; ++c) QuantizeMultiplier(0.5, &multiplier[c], &shift[c]);
  DepthwiseConvInt8(&kParams, input, 0, filter, 0, multiplier, shift, 0, output);
  for (int i = 0; i < 8; ++i) {
    TF_LITE_MICRO_EXPECT_EQ((int)output[i], (i % 2) ? -128 : 127);
  }
}

TF_LITE_MICRO_TESTS_END
