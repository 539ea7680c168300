// tests/test_moe.cpp: the MoE layer inside a model: finite differences of the whole MoE MLP
// through a model, grouped against per-expert GEMMs bit for bit, recompute bit for bit, the
// expert bias. The dispatch's rules (capacity, drop policies, padding) on hand-computed cases
// and random routings: tests/test_moe_dispatch.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>
#include "kernels/math.h"  // mix64
#include "kernels/ops.h"
#include "model/moe.h"
#include "model/optimizer.h"
#include "model/param_table.h"
#include "parallel/data_parallel.h"
#include "model/transformer.h"
#include "tests/test_plan_helpers.h"

namespace paralab {
namespace {

// ---- the layer inside a model ------------------------------------------------------------

ModelConfig tiny_moe(Arch arch) {
  ModelConfig m = arch == Arch::GPT ? plan_test::gpt(2, 32, 4, 16, 64)
                                    : plan_test::llama(2, 32, 4, 2, 48, 16, 64);
  m.moe.num_experts = 4;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 24;
  m.moe.aux_loss_coeff = 1e-2f;
  m.moe.z_loss_coeff = 1e-3f;
  return m;
}

struct TrainedRun {
  std::vector<float> losses, aux;
  std::vector<std::vector<float>> grads;
  std::vector<float> params, bias;
  std::vector<int> microbatches_recorded;
};

// `steps` AdamW steps of `k` microbatches of 2 sequences, random tokens, the trainer's order.
TrainedRun train(const ModelConfig& m, int steps, int k, bool bf16 = false) {
  TrainConfig t;
  t.lr = 1e-2f;
  t.bf16 = bf16;
  DataParallelOptions options;
  options.storage = (bf16) ? paralab::DType::BF16 : paralab::DType::F32;
  DataParallel dp(param_units(m), nullptr, options, kernels::Device::CPU);
  Transformer model(m, kernels::Device::CPU, &dp);
  model.init_parameters(7);
  AdamW optimizer(model, t);
  const int B = 2, N = B * m.seq_length;
  std::vector<int> tokens(N), targets(N);
  TrainedRun run;
  for (int step = 1; step <= steps; ++step) {
    model.zero_grads();
    model.reset_moe_stats();
    float loss = 0;
    for (int micro = 0; micro < k; ++micro) {
      for (int n = 0; n < N; ++n) {
        const uint64_t r = kernels::mix64(((uint64_t)step << 32) ^ ((uint64_t)micro << 16) ^ n);
        // random tokens, each target a fixed function of its token: something to learn
        tokens[n] = (int)(r % m.vocab_size);
        targets[n] = (3 * tokens[n] + 1) % m.vocab_size;
      }
      model.data_parallel().begin_microbatch(micro == k - 1);
      loss += model.forward(tokens.data(), targets.data(), B, 1.0f / k, step * 100 + micro);
      model.backward();
    }
    double aux = 0;
    int recorded = 0;
    for (const MoeLayerState& s : model.moe_layers()) {
      aux += s.stats.aux_loss + s.stats.z_loss;
      recorded += s.stats.microbatches;
    }
    run.losses.push_back(loss / k);
    run.aux.push_back((float)aux);
    run.microbatches_recorded.push_back(recorded);
    run.grads.push_back(model.data_parallel().gather_grads());
    optimizer.step(learning_rate(t, step));
    model.update_expert_bias(nullptr);
  }
  run.params = model.data_parallel().gather_params();
  for (int l = 0; l < m.num_layers; ++l) {
    const std::vector<float> b = model.expert_bias(l);
    run.bias.insert(run.bias.end(), b.begin(), b.end());
  }
  return run;
}

void expect_identical(const TrainedRun& a, const TrainedRun& b) {
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.aux, b.aux);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(a.grads[i] == b.grads[i]) << "step " << i;
  EXPECT_TRUE(a.params == b.params);
  EXPECT_EQ(a.bias, b.bias);
}

// On the CPU the grouped GEMM runs the per-expert sgemm calls in one function: bit for bit.
TEST(MoeModel, GroupedEqualsPerExpertBitForBit) {
  for (Arch arch : {Arch::GPT, Arch::LLAMA}) {
    ModelConfig per_expert = tiny_moe(arch), grouped = per_expert;
    grouped.moe.grouped_gemm = true;
    expect_identical(train(per_expert, 3, 2), train(grouped, 3, 2));
  }
}

// The permute fusion changes kernels on CUDA only; the CPU's loops are the same.
TEST(MoeModel, PermuteFusionChangesNothingOnTheCpu) {
  ModelConfig a = tiny_moe(Arch::LLAMA), b = a;
  b.moe.permute_fusion = true;
  expect_identical(train(a, 2, 1), train(b, 2, 1));
}

// Full recompute reruns each layer's forward in backward: same routing, same numbers, and the
// statistics count every microbatch once (the second forward records nothing).
TEST(MoeModel, FullRecomputeIsBitIdenticalAndRecordsOnce) {
  ModelConfig plain = tiny_moe(Arch::LLAMA);
  plain.moe.shared_expert_size = 16;
  plain.moe.shared_expert_gate = true;
  plain.moe.capacity_factor = 1.0f;  // drops too
  ModelConfig full = plain;
  full.recompute.granularity = Recompute::Granularity::FULL;
  full.recompute.method = Recompute::Method::UNIFORM;
  full.recompute.num_layers = 1;
  const TrainedRun a = train(plain, 3, 2), b = train(full, 3, 2);
  expect_identical(a, b);
  for (int recorded : b.microbatches_recorded) EXPECT_EQ(recorded, 2 * 2);  // 2 layers x 2
}

// The step's losses must move the model: a lower LM loss, and the auxiliary losses near their
// values at balance (aux = alpha per layer, plus a positive z loss).
TEST(MoeModel, TrainsAndReportsItsLosses) {
  const TrainedRun r = train(tiny_moe(Arch::LLAMA), 20, 1);
  EXPECT_LT(r.losses.back(), r.losses.front());
  const double balanced = 2 * 1e-2;  // two MoE layers at aux = alpha
  EXPECT_GT(r.aux.front(), 0.5 * balanced);
  EXPECT_LT(r.aux.front(), 3 * balanced);
}

// Sigmoid routing with the expert bias: the bias moves by +-rate per step, only in training.
TEST(MoeModel, ExpertBiasMovesByTheRateEachStep) {
  ModelConfig m = tiny_moe(Arch::LLAMA);
  m.moe.score = Moe::Score::SIGMOID;
  m.moe.expert_bias = true;
  m.moe.bias_update_rate = 0.5f;
  const TrainedRun one = train(m, 1, 1), three = train(m, 3, 1);
  ASSERT_EQ(one.bias.size(), 8u);  // 2 layers x 4 experts
  double moved = 0;
  for (float b : one.bias) {
    EXPECT_TRUE(b == 0.0f || b == 0.5f || b == -0.5f) << b;
    moved += std::fabs(b);
  }
  EXPECT_GT(moved, 0.0);
  for (float b : three.bias) EXPECT_LE(std::fabs(b), 1.5f);
}

// bf16 storage follows the fp32 run within bf16's rounding.
TEST(MoeModel, Bf16FollowsFp32) {
  const TrainedRun a = train(tiny_moe(Arch::LLAMA), 3, 1), b = train(tiny_moe(Arch::LLAMA), 3, 1, true);
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(b.losses[i], a.losses[i], 2e-2 * a.losses[i]) << "step " << i;
}

}  // namespace
}  // namespace paralab
