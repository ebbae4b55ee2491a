// Fully-connected layer, float and int8 (v2 harness, C++, gtest-style names).
#include "fully_connected.h"
#include "micro_test.h"
#include "quantization.h"

namespace {

constexpr int kBatches = 2, kInDepth = 10, kOutDepth = 3;
const float kInput[kBatches * kInDepth] = {1, 2, 3, 4, 5, 6, 7, 8, -9, -10,
                                           1, 2, 3, 4, 5, 6, 7, -8, 9, -10};
const float kWeights[kOutDepth * kInDepth] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                              1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                              1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
const float kBias[kOutDepth] = {1, 2, 3};
// From TFLM's fully_connected_test SimpleTest.
const float kGolden[kBatches * kOutDepth] = {24, 25, 26, 58, 59, 60};

}  // namespace

TEST(FullyConnected, Float) {
  float output[kBatches * kOutDepth];
  FullyConnectedFloat(kBatches, kInDepth, kOutDepth, kInput, kWeights, kBias, output);
  for (int i = 0; i < kBatches * kOutDepth; ++i) EXPECT_NEAR(kGolden[i], output[i], 1e-5);
}

TEST(FullyConnected, FloatWithoutBias) {
  float output[kBatches * kOutDepth];
  FullyConnectedFloat(kBatches, kInDepth, kOutDepth, kInput, kWeights, nullptr, output);
  for (int i = 0; i < kBatches * kOutDepth; ++i) EXPECT_NEAR(kGolden[i] - kBias[i % 3], output[i], 1e-5);
}

class QuantizedFullyConnected : public testing::Test {
 public:
  void SetUp() override {
    for (int i = 0; i < kBatches * kInDepth; ++i) input[i] = QuantizeToInt8(kInput[i], kInScale, kInZero);
    for (int i = 0; i < kOutDepth * kInDepth; ++i) weights[i] = QuantizeToInt8(kWeights[i], kWScale, 0);
    for (int o = 0; o < kOutDepth; ++o) bias[o] = static_cast<int32_t>(kBias[o] / (kInScale * kWScale));
    QuantizeMultiplier(static_cast<double>(kInScale) * kWScale / kOutScale, &multiplier, &shift);
  }

 protected:
  static constexpr float kInScale = 0.5f, kWScale = 0.25f, kOutScale = 1.0f;
  static constexpr int32_t kInZero = -1, kOutZero = -128;
  int8_t input[kBatches * kInDepth];
  int8_t weights[kOutDepth * kInDepth];
  int32_t bias[kOutDepth];
  int32_t multiplier = 0;
  int shift = 0;
};

TEST_F(QuantizedFullyConnected, Int8MatchesFloat) {
  int8_t output[kBatches * kOutDepth];
  FullyConnectedInt8(kBatches, kInDepth, kOutDepth, input, -kInZero, weights, 0, bias, multiplier,
                     shift, kOutZero, output);
  for (int i = 0; i < kBatches * kOutDepth; ++i) {
    EXPECT_EQ(QuantizeToInt8(kGolden[i], kOutScale, kOutZero), output[i]);
  }
}

TEST(Quantization, MultiplierRoundTrip) {
  int32_t q = 0;
  int shift = 0;
  QuantizeMultiplier(0.25, &q, &shift);
  EXPECT_EQ(1 << 30, q);
  EXPECT_EQ(-1, shift);
  EXPECT_EQ(25, MultiplyByQuantizedMultiplier(100, q, shift));
  EXPECT_EQ(-25, MultiplyByQuantizedMultiplier(-100, q, shift));
}

TF_LITE_MICRO_TESTS_MAIN
