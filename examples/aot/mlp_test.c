// The MLP compiled ahead of time (no interpreter, no runtime) against the outputs
// TensorFlow computed for the same inputs (golden.h), and its inference latency.
#include <math.h>

#include "golden.h"
#include "micro_test.h"
#include "mlp_model.h"

#define TOLERANCE 1e-5f  // float32 sums in another order than TensorFlow's: measured 2.4e-7 on x86-64
#define MACS (64 * 32 + 32 * 10)

TF_LITE_MICRO_TESTS_BEGIN

TF_LITE_MICRO_TEST(MatchesTensorFlowOnTheGoldenInputs) {
  for (int c = 0; c < GOLDEN_CASES; ++c) {
    float logits[MLP_LOGITS_COUNT];
    TF_LITE_MICRO_EXPECT_EQ(mlp_run(kGoldenInput[c], logits), 0);
    for (int i = 0; i < MLP_LOGITS_COUNT; ++i) TF_LITE_MICRO_EXPECT_NEAR(kGoldenOutput[c][i], logits[i], TOLERANCE);
  }
}

TF_LITE_MICRO_TEST(BenchMlpInference) {
  float logits[MLP_LOGITS_COUNT];
  ONDEVICE_BENCH("mlp_aot_inference", MACS, 10) { mlp_run(kGoldenInput[0], logits); }
  TF_LITE_MICRO_EXPECT_EQ(mlp_run(kGoldenInput[0], logits), 0);
}

TF_LITE_MICRO_TESTS_END
