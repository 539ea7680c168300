// tests/test_plan_moe_counts.cpp: plan/moe_params.h's parameter counts (a tiny MoE by hand,
// the Qwen3-30B-A3B preset) and plan/gemm_calls.h's GEMM calls per label against
// kernels::gemm_counts() measured over one step of a CPU Transformer (forward + backward of
// several microbatches): dense gpt and llama (fused and unfused loss, naive and flash
// attention), MoE grouped and per expert (padded: exact from the config; dropless: exact at
// the measured nonempty experts), a shared expert with its gate, full and selective recompute.
#include <gtest/gtest.h>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>
#include "kernels/math.h"            // defines: mix64
#include "kernels/ops.h"             // defines: gemm_counts, reset_gemm_counts
#include "model/param_table.h"       // defines: param_units, parameter_count
#include "model/transformer.h"       // defines: Transformer
#include "parallel/data_parallel.h"  // defines: DataParallel, DataParallelOptions
#include "plan/gemm_calls.h"         // defines: predict_gemm_calls, kGemmLabels
#include "plan/moe_params.h"         // defines: param_counts
#include "plan/plan.h"               // defines: make_plan, Plan
#include "report/moe_plan.h"       // defines: moe_plan_text, gemm_calls_table
#include "tests/test_plan_helpers.h"

namespace paralab {
namespace {

using plan_test::gpt;
using plan_test::llama;

// A 2-layer llama, h 8, 2 heads of d 4 (no GQA), V 16; layer 0 dense (f 12), layer 1 MoE:
// E 4 experts of width 6, top-2, a shared expert of width 4 with its gate.
ModelConfig tiny_moe() {
  ModelConfig m = plan_test::tiny_moe();
  m.moe.shared_expert_size = 4;
  m.moe.shared_expert_gate = true;
  return m;
}

// By hand (h 8, qkv (a + 2g) d = (2 + 4) 4 = 24, attention out a d = 8):
//   embedding.word V h                       16 x 8            = 128
//   layer 0  norms 2 h = 16; attention qkv 24 x 8 = 192 + proj 8 x 8 = 64 -> 256;
//            mlp fc1 2f h = 24 x 8 = 192 + fc2 h f = 8 x 12 = 96 -> 288;      total 560
//   layer 1  norms 16; attention 256; router E h = 32;
//            experts fc1 E 2f_e h = 4 x 12 x 8 = 384 + fc2 E h f_e = 4 x 8 x 6 = 192 -> 576,
//            one expert 576 / 4 = 144; shared fc1 2 f_s h = 64 + fc2 h f_s = 32 -> 96;
//            gate 1 x h = 8;                                  total 16+256+32+576+96+8 = 984
//            active: 984 - 576 + 2 x 144                                             = 696
//   final_norm 8, output.weight V h = 128
//   total  128 + 560 + 984 + 8 + 128 = 1808;  active 128 + 560 + 696 + 8 + 128 = 1520
//   non-embedding active 1520 - 128 - 128 = 1264; torchtitan's (output layer in) 1392
TEST(MoeParamCounts, TinyByHand) {
  const ModelConfig m = tiny_moe();
  const ParamCounts c = param_counts(m);
  EXPECT_EQ(c.total, 1808);
  EXPECT_EQ(c.total, parameter_count(m));
  EXPECT_EQ(c.active, 1520);
  EXPECT_EQ(c.active_non_embedding(), 1264);
  EXPECT_EQ(c.active_torchtitan(), 1392);
  EXPECT_EQ(c.lookups, 128);
  EXPECT_EQ(c.output, 128);
  EXPECT_EQ(c.final_norm, 8);
  EXPECT_EQ(c.dense_layers, 1);
  EXPECT_EQ(c.moe_layers, 1);
  const LayerParamCounts& d = c.layers[0];
  EXPECT_EQ(d.norms, 16);
  EXPECT_EQ(d.attention, 256);
  EXPECT_EQ(d.mlp, 288);
  EXPECT_EQ(d.total(), 560);
  const LayerParamCounts& e = c.layers[1];
  EXPECT_EQ(e.router, 32);
  EXPECT_EQ(e.experts, 576);
  EXPECT_EQ(e.expert, 144);
  EXPECT_EQ(e.shared_expert, 96);
  EXPECT_EQ(e.shared_gate, 8);
  EXPECT_EQ(e.total(), 984);
  EXPECT_EQ(e.active(2), 696);
}

// A dense model: active = total.
TEST(MoeParamCounts, DenseActiveIsTotal) {
  const ModelConfig m = gpt(2, 16, 2, 8, 32);
  const ParamCounts c = param_counts(m);
  EXPECT_EQ(c.total, parameter_count(m));
  EXPECT_EQ(c.active, c.total);
  EXPECT_EQ(c.output, 0);  // tied
}

// Qwen3-30B-A3B (configs/models/qwen3-30b-a3b.toml): per layer attention (32 + 8) 128 x 2048
// + 2048 x 4096 = 18,874,368, norms 2 x 2048 + 2 x 128 = 4352, router 128 x 2048 = 262,144,
// one expert 3 x 768 x 2048 = 4,718,592 (all 128: 603,979,776); embeddings 2 x 151936 x 2048
// = 622,329,856 (untied), final norm 2048.
using plan_test::qwen3_30b_a3b;

TEST(MoeParamCounts, Qwen3_30B_A3B) {
  const ParamCounts c = param_counts(qwen3_30b_a3b());
  EXPECT_EQ(c.total, 30532122624LL);   // 30.5B
  EXPECT_EQ(c.active, 3353032704LL);   // 3.35B with embeddings (the "A3B")
  EXPECT_EQ(c.active_non_embedding(), 2730702848LL);
  EXPECT_EQ(c.layers[0].expert, 4718592);
  EXPECT_EQ(c.layers[0].attention, 18874368);
}

TEST(GemmCalls, Qwen3WorkedExample) {
  const ModelConfig m = qwen3_30b_a3b();
  EXPECT_EQ(paper_per_expert_calls(m, 2, false), 36864);  // 48 x 128 x 2 x 3
  EXPECT_EQ(paper_per_expert_calls(m, 3, false), 55296);  // HF's unfused gate, up, down
  EXPECT_EQ(paper_per_expert_calls(m, 2, true), 288);     // 48 x 2 x 3
  // the plan's own: one microbatch of 4096 tokens, every expert certainly has rows
  Plan p;
  p.model = m;
  p.train = plan_test::batch(1, 1);
  p.microbatches_per_rank = 1;
  EXPECT_DOUBLE_EQ(predict_gemm_calls(p, true).at("experts"), 288);
  EXPECT_NEAR(predict_gemm_calls(p, false).at("experts"), 36864, 1e-6);
  EXPECT_DOUBLE_EQ(predict_gemm_calls(p, false).at("router"), 48 * 3);
  const std::string text = moe_plan_text(p);
  EXPECT_NE(text.find("36864"), std::string::npos) << text;
}

TEST(GemmCalls, ExpectedNonemptyExperts) {
  Moe moe;
  moe.num_experts = 4;
  moe.topk = 2;
  EXPECT_DOUBLE_EQ(expected_nonempty_experts(moe, 1), 2.0);   // one token: its k experts
  EXPECT_DOUBLE_EQ(expected_nonempty_experts(moe, 2), 3.0);   // 4 (1 - 1/4)
  moe.pad_to_capacity = true;
  EXPECT_DOUBLE_EQ(expected_nonempty_experts(moe, 1), 4.0);
}

// ---- measured on a CPU run ---------------------------------------------------------------

struct Measured {
  std::vector<std::pair<std::string, kernels::GemmCount>> counts;
  std::vector<long long> nonempty;  // per layer
};

// One training step of k microbatches of B sequences, as trainer.cu runs it on one rank.
Measured run_step(const ModelConfig& m, int B, int k) {
  const int N = B * m.seq_length;
  DataParallelOptions options;
  DataParallel dp(param_units(m), nullptr, options, kernels::Device::CPU);
  Transformer model(m, kernels::Device::CPU, &dp);
  model.init_parameters(1234);
  kernels::reset_gemm_counts();
  model.reset_moe_stats();
  model.zero_grads();
  std::vector<int> tokens(N), targets(N);
  for (int micro = 0; micro < k; ++micro) {
    for (int n = 0; n < N; ++n) {
      const uint64_t r = kernels::mix64(((uint64_t)micro << 16) ^ (uint64_t)n ^ 0x9e37);
      tokens[n] = (int)(r % m.vocab_size);
      targets[n] = (int)((r >> 32) % m.vocab_size);
    }
    model.data_parallel().begin_microbatch(micro == k - 1);
    model.forward(tokens.data(), targets.data(), B, 1.0f / k, kernels::mix64(7 + micro));
    model.backward();
  }
  Measured out;
  out.counts = kernels::gemm_counts();
  out.nonempty.assign(m.num_layers, 0);
  if (m.moe.enabled())
    for (int l = 0; l < m.num_layers; ++l)
      if (m.moe.is_moe_layer(l)) out.nonempty[l] = model.moe_layers().at(l).stats.nonempty_experts;
  return out;
}

// The plan's inputs that predict_gemm_calls reads (one rank, no pipeline).
Plan plan_of(const ModelConfig& m, int B, int k) {
  Plan p;
  p.model = m;
  p.train = plan_test::batch(B, B * k);
  p.microbatches_per_rank = k;
  return p;
}

void expect_counts(const ModelConfig& m, int B, int k, bool use_nonempty) {
  const Measured meas = run_step(m, B, k);
  const Plan plan = plan_of(m, B, k);
  const GemmCallPrediction p =
      predict_gemm_calls(plan, experts_grouped(m), 0, use_nonempty ? &meas.nonempty : nullptr);
  ASSERT_TRUE(p.experts_exact);
  for (const auto& [label, c] : meas.counts) {
    bool known = false;
    for (const char* l : kGemmLabels) known = known || label == l;
    EXPECT_TRUE(known) << "unknown label " << label;
  }
  StepMetrics s;
  for (int i = 0; i < kNumGemmLabels; ++i) {
    long long got = 0;
    for (const auto& [label, c] : meas.counts)
      if (label == kGemmLabels[i]) got = c.calls;
    EXPECT_EQ((double)got, p.calls[i]) << kGemmLabels[i];
    s.gemm_calls.push_back({kGemmLabels[i], got, 0.0});
  }
  // the report's table says the same
  const std::string table =
      gemm_calls_table(plan, s, 0, use_nonempty ? &meas.nonempty : nullptr);
  EXPECT_EQ(table.find("expected"), std::string::npos) << table;
}

ModelConfig small_moe(Arch arch, bool grouped) {
  ModelConfig m = arch == Arch::GPT ? gpt(3, 16, 2, 8, 32) : llama(3, 16, 4, 2, 32, 8, 32);
  m.moe.num_experts = 8;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 8;
  m.moe.layer_pattern = {1, 0, 1};
  m.moe.grouped_gemm = grouped;
  return m;
}

TEST(GemmCalls, DenseGptNaiveFusedChunks) {
  ModelConfig m = gpt(2, 16, 2, 8, 32);
  m.attention = AttentionImpl::NAIVE;
  m.cross_entropy_chunk = 5;  // N = 16: 4 chunks of the fused loss
  expect_counts(m, 2, 3, false);
}

TEST(GemmCalls, DenseGptNaiveUnfused) {
  ModelConfig m = gpt(2, 16, 2, 8, 32);
  m.attention = AttentionImpl::NAIVE;
  m.fused_cross_entropy = false;
  expect_counts(m, 2, 2, false);
}

TEST(GemmCalls, DenseLlamaFlashFusedAndUnfused) {
  ModelConfig m = llama(2, 16, 4, 2, 32, 8, 32);
  expect_counts(m, 2, 2, false);
  m.fused_cross_entropy = false;
  m.attention = AttentionImpl::NAIVE;
  expect_counts(m, 2, 2, false);
}

TEST(GemmCalls, MoeGrouped) {
  expect_counts(small_moe(Arch::LLAMA, true), 2, 3, false);
  expect_counts(small_moe(Arch::GPT, true), 2, 2, false);
}

TEST(GemmCalls, MoePerExpertPaddedExact) {
  ModelConfig m = small_moe(Arch::LLAMA, false);
  m.moe.capacity_factor = 1.0f;
  m.moe.pad_to_capacity = true;
  expect_counts(m, 2, 3, false);  // no measured routing needed
}

TEST(GemmCalls, MoePerExpertDroplessAtMeasuredNonempty) {
  ModelConfig m = small_moe(Arch::LLAMA, false);
  m.seq_length = 2;  // B 1: N = 2 tokens, 4 pairs on 8 experts: some experts are empty
  const Measured meas = run_step(m, 1, 3);
  const Plan plan = plan_of(m, 1, 3);
  const GemmCallPrediction expected = predict_gemm_calls(plan, false);
  EXPECT_FALSE(expected.experts_exact);
  // 2 MoE layers x 3 microbatches x 6 x E(1 - (1 - k/E)^N) = 36 x 8 (1 - 0.75^2) = 126
  EXPECT_NEAR(expected.at("experts"), 126.0, 1e-9);
  expect_counts(m, 1, 3, true);
  // the capacity without padding: the same rule (drops never empty an expert)
  m.moe.capacity_factor = 1.0f;
  expect_counts(m, 1, 3, true);
}

TEST(GemmCalls, SharedExpertWithGate) {
  for (bool grouped : {true, false}) {
    ModelConfig m = small_moe(Arch::LLAMA, grouped);
    m.moe.shared_expert_size = 8;
    m.moe.shared_expert_gate = true;
    expect_counts(m, 2, 2, true);
    m.moe.shared_expert_gate = false;
    expect_counts(m, 2, 2, true);
  }
}

TEST(GemmCalls, FullRecompute) {
  ModelConfig m = small_moe(Arch::LLAMA, false);
  m.attention = AttentionImpl::NAIVE;
  m.moe.shared_expert_size = 8;
  m.recompute.granularity = Recompute::Granularity::FULL;
  m.recompute.method = Recompute::Method::UNIFORM;
  m.recompute.num_layers = 2;
  expect_counts(m, 2, 2, true);
  m.recompute.method = Recompute::Method::BLOCK;  // the first 2 of 3 layers
  expect_counts(m, 2, 2, true);
  m.moe.grouped_gemm = true;
  expect_counts(m, 2, 2, false);
}

TEST(GemmCalls, SelectiveRecompute) {
  ModelConfig m = gpt(2, 16, 2, 8, 32);
  m.attention = AttentionImpl::NAIVE;
  m.recompute.granularity = Recompute::Granularity::SELECTIVE;
  m.recompute.core_attn = true;
  expect_counts(m, 2, 2, false);
  m.recompute.mlp = true;  // fc1 again, under "mlp"
  m.recompute.norm = true;
  expect_counts(m, 2, 2, false);
}

// make_plan's Plan gives the same as the minimal one (the trainer's path).
TEST(GemmCalls, FromMakePlan) {
  ModelConfig m = llama(2, 16, 4, 2, 32, 8, 32);
  const Plan full = make_plan(m, plan_test::batch(2, 6), plan_test::world(1, 0));
  const Plan mini = plan_of(m, 2, 3);
  EXPECT_EQ(predict_gemm_calls(full, false).calls, predict_gemm_calls(mini, false).calls);
}

}  // namespace
}  // namespace paralab

namespace paralab {
namespace {
// Pipeline stages: each rank runs its stage's layers, the head on the last; the stages add
// up to the whole model's calls.
TEST(GemmCalls, PipelineStagesAddUp) {
  ModelConfig m = small_moe(Arch::LLAMA, true);
  m.num_layers = 4;
  m.moe.layer_pattern = {1, 0, 1, 1};
  ParallelConfig p = plan_test::world(2, 0);
  p.pipeline_parallel = 2;
  const Plan staged = make_plan(m, plan_test::batch(2, 8), p);
  const Plan whole = plan_of(m, 2, 4);
  const GemmCallPrediction a = predict_gemm_calls(staged, true, 0);
  const GemmCallPrediction b = predict_gemm_calls(staged, true, 1);
  const GemmCallPrediction w = predict_gemm_calls(whole, true);
  EXPECT_EQ(a.at("head"), 0);
  EXPECT_EQ(b.at("head"), w.at("head"));
  for (int i = 0; i < kNumGemmLabels; ++i)
    EXPECT_EQ(a.calls[i] + b.calls[i], w.calls[i]) << kGemmLabels[i];
}
}  // namespace
}  // namespace paralab
