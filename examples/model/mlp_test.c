/* A two-layer int8 MLP ("a custom runtime that loads the weights and does the matrix
 * multiplies"): weights in flash (const), activations in RAM, outputs exactly as the
 * generator's integer pipeline computed them, and its end-to-end latency benched. */
#include <stdint.h>

#include "gemm.h"
#include "micro_test.h"
#include "mlp_model.h"

static int8_t hidden[MLP_HIDDEN], logits[MLP_OUT];

static void infer(const int8_t *input) {
  const GemmS8Params l1 = {1, MLP_HIDDEN, MLP_IN, -MLP_IN_ZP, MLP_HIDDEN_ZP, MLP_M1, MLP_S1, MLP_HIDDEN_ZP, 127};
  const GemmS8Params l2 = {1, MLP_OUT, MLP_HIDDEN, -MLP_HIDDEN_ZP, MLP_OUT_ZP, MLP_M2, MLP_S2, -128, 127};
  gemm_s8_opt(&l1, input, mlp_w1, mlp_b1, hidden); /* act_min = zero point: ReLU */
  gemm_s8_opt(&l2, hidden, mlp_w2, mlp_b2, logits);
}

TF_LITE_MICRO_TESTS_BEGIN

TF_LITE_MICRO_TEST(MlpOutputsMatchTheGenerator) {
  for (int s = 0; s < MLP_SAMPLES; ++s) {
    infer(mlp_inputs + s * MLP_IN);
    for (int j = 0; j < MLP_OUT; ++j) TF_LITE_MICRO_EXPECT_EQ(logits[j], mlp_expected[s * MLP_OUT + j]);
  }
}

TF_LITE_MICRO_TEST(BenchMlpInference) {
  ONDEVICE_BENCH("mlp_int8_64_32_10", MLP_IN * MLP_HIDDEN + MLP_HIDDEN * MLP_OUT, 10) {
    infer(mlp_inputs);
    ONDEVICE_KEEP(logits);
  }
  TF_LITE_MICRO_EXPECT_EQ(logits[0], mlp_expected[0]);
}

TF_LITE_MICRO_TESTS_END
