// tests/test_plan_moe.cpp: the plan of mixture-of-experts layers (plan/moe_memory.h) and
// --qk-layernorm against what the run measures.
//
// For single-rank MoE configurations (both families, fp32 and bf16, one and two microbatches,
// grouped and per-expert GEMMs, a shared expert with and without its gate, dense layers among
// MoE ones, the expert bias, balancing and z losses, full recompute) the test trains two steps
// the way trainer.cu does and holds every ledger category to the plan, to the byte: padded to
// capacity the plan predicts from the configuration alone (M = E min(C, N)); dropless and
// capacity without padding the plan is evaluated at the routing the step measured
// (MoeLayerStats::permuted_rows, kept_per_expert). The kernels' FLOP counter must equal the
// plan's hardware FLOPs per rank, and the peak of the total the plan's (an upper bound with
// full recompute, where the layers' transients are held at their peak). With --fp8-format too
// (the experts' GEMMs in FP8).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>
#include "kernels/math.h"            // defines: mix64
#include "kernels/ops.h"             // defines: flop_counter, reset_flop_counter
#include "measure/ledger.h"          // defines: Ledger, Category
#include "model/optimizer.h"         // defines: AdamW, learning_rate
#include "model/param_table.h"       // defines: param_units
#include "model/transformer.h"       // defines: Transformer
#include "parallel/data_parallel.h"  // defines: DataParallel, DataParallelOptions
#include "plan/moe_memory.h"         // defines: MoeRouting, moe_expected_rows
#include "plan/plan.h"               // defines: make_plan, Plan
#include "tests/test_plan_helpers.h"
#include "tests/test_routing_helpers.h"

namespace paralab {
namespace {

struct MoeCase {
  std::string name;
  ModelConfig model;
  int micro_batch = 2;
  int microbatches = 1;
  bool bf16 = false;
  bool measured = true;     // evaluate the plan at the measured routing (else the config's)
  bool total_exact = true;  // else the plan's total is an upper bound
};

ModelConfig moe_model(Arch arch, int E, int k, int fe) {
  ModelConfig m = arch == Arch::GPT ? plan_test::gpt(2, 32, 4, 16, 64)
                                    : plan_test::llama(2, 32, 4, 2, 0, 16, 64);
  m.moe.num_experts = E;
  m.moe.topk = k;
  m.moe.ffn_hidden_size = fe;
  m.moe.aux_loss_coeff = 1e-2f;
  m.moe.z_loss_coeff = 1e-3f;
  return m;
}

std::vector<MoeCase> cases() {
  std::vector<MoeCase> c;
  MoeCase grouped{"llama_dropless_grouped", moe_model(Arch::LLAMA, 4, 2, 24)};
  grouped.model.moe.grouped_gemm = true;
  c.push_back(grouped);

  // dense layer 0 among MoE layers; a gated shared expert; per-expert GEMMs; bf16
  MoeCase mixed{"llama_mixed_shared_gate_bf16_accum2", moe_model(Arch::LLAMA, 4, 2, 16), 2, 2,
                true};
  mixed.model.num_layers = 3;
  mixed.model.moe.layer_pattern = {0, 1, 1};
  mixed.model.moe.shared_expert_size = 24;
  mixed.model.moe.shared_expert_gate = true;
  c.push_back(mixed);

  // padded to capacity: every size fixed by the configuration
  MoeCase padded{"gpt_padded_shared", moe_model(Arch::GPT, 4, 2, 48), 2, 1, false, false};
  padded.model.moe.capacity_factor = 1.0f;
  padded.model.moe.pad_to_capacity = true;
  padded.model.moe.shared_expert_size = 16;
  padded.model.moe.grouped_gemm = true;
  c.push_back(padded);

  MoeCase padded_bias{"gpt_padded_expert_bias_bf16_accum2", moe_model(Arch::GPT, 4, 1, 32), 2, 2,
                      true, false};
  padded_bias.model.moe.capacity_factor = 1.5f;
  padded_bias.model.moe.pad_to_capacity = true;
  padded_bias.model.moe.score = Moe::Score::SIGMOID;
  padded_bias.model.moe.expert_bias = true;
  c.push_back(padded_bias);

  // capacity without padding, sequence-level balancing, drops by position
  MoeCase capped{"llama_capacity_seq_aux", moe_model(Arch::LLAMA, 4, 2, 16), 2, 2};
  capped.model.moe.capacity_factor = 1.0f;
  capped.model.moe.balancing = Moe::Balancing::SEQ_AUX_LOSS;
  capped.model.moe.drop_policy = Moe::DropPolicy::POSITION;
  c.push_back(capped);

  // full recompute: the MoE layer's forward runs again in backward (same routing)
  MoeCase full{"llama_full_recompute_qk_norm", moe_model(Arch::LLAMA, 4, 2, 16), 2, 2, false,
               true, false};
  full.model.qk_layernorm = true;
  full.model.recompute.granularity = Recompute::Granularity::FULL;
  full.model.recompute.method = Recompute::Method::UNIFORM;
  full.model.recompute.num_layers = 1;
  c.push_back(full);

  MoeCase qk_bf16{"gpt_qk_norm_bf16_shared_gate", moe_model(Arch::GPT, 4, 2, 16), 2, 1, true};
  qk_bf16.model.qk_layernorm = true;
  qk_bf16.model.moe.shared_expert_size = 16;
  qk_bf16.model.moe.shared_expert_gate = true;
  c.push_back(qk_bf16);

  // --fp8-format: the experts' fc1 and fc2 in FP8 (their operands a transient at R rows, the
  // delayed state per expert in category fp8_state: plan/fp8.h); a dense layer among MoE ones
  // (its fc1 and fc2 in the dense scratch), per-expert state over 2 microbatches; blockwise's
  // factors per 1 x 128 tile and 128 x 128 block; tensorwise under full recompute
  MoeCase fp8_delayed{"llama_fp8_delayed_mixed_bf16_accum2", moe_model(Arch::LLAMA, 4, 2, 24), 2,
                      2, true};
  fp8_delayed.model.num_layers = 3;
  fp8_delayed.model.moe.layer_pattern = {0, 1, 1};
  fp8_delayed.model.moe.grouped_gemm = true;
  fp8_delayed.model.fp8.enabled = fp8_delayed.model.fp8.hybrid = true;
  fp8_delayed.model.fp8.amax_history_len = 4;
  c.push_back(fp8_delayed);
  MoeCase fp8_block{"gpt_fp8_blockwise", moe_model(Arch::GPT, 4, 2, 48)};
  fp8_block.model.fp8.enabled = true;
  fp8_block.model.fp8.recipe = Fp8Recipe::Blockwise;
  c.push_back(fp8_block);
  MoeCase fp8_tensor{"llama_fp8_tensorwise_full_recompute", moe_model(Arch::LLAMA, 4, 2, 16), 2,
                     2, false, true, false};
  fp8_tensor.model.fp8.enabled = true;
  fp8_tensor.model.fp8.recipe = Fp8Recipe::Tensorwise;
  fp8_tensor.model.recompute.granularity = Recompute::Granularity::FULL;
  fp8_tensor.model.recompute.method = Recompute::Method::UNIFORM;
  fp8_tensor.model.recompute.num_layers = 1;
  c.push_back(fp8_tensor);

  // --qk-layernorm on a dense model
  MoeCase dense_qk{"gpt_dense_qk_norm", plan_test::gpt(2, 32, 4, 16, 64), 2, 2, false, false};
  dense_qk.model.qk_layernorm = true;
  c.push_back(dense_qk);
  MoeCase dense_qk_llama{"llama_dense_qk_norm_bf16", plan_test::llama(2, 32, 4, 2, 0, 16, 64), 2,
                         1, true, false};
  dense_qk_llama.model.qk_layernorm = true;
  c.push_back(dense_qk_llama);
  return c;
}

class PlanMoeTest : public ::testing::TestWithParam<MoeCase> {};

using routing_test::measured_routing;

TEST_P(PlanMoeTest, LedgerAndFlopCounterEqualThePlan) {
  const MoeCase& mc = GetParam();
  const int B = mc.micro_batch, k = mc.microbatches, N = B * mc.model.seq_length;
  TrainConfig train = plan_test::batch(B, B * k, mc.bf16);
  train.train_iters = 2;
  const ParallelConfig parallel = plan_test::world(1, 0);
  const Plan config_plan = make_plan(mc.model, train, parallel);

  std::vector<int64_t> baseline(kNumCategories);
  for (int c = 0; c < kNumCategories; ++c)
    baseline[c] = (int64_t)Ledger::instance().current(Category(c));
  const int64_t baseline_total = (int64_t)Ledger::instance().current_total();
  {
    DataParallelOptions options;
    options.storage = (mc.bf16) ? paralab::DType::BF16 : paralab::DType::F32;
    DataParallel dp(param_units(mc.model), nullptr, options, kernels::Device::CPU);
    Transformer model(mc.model, kernels::Device::CPU, &dp);
    model.init_parameters(train.seed);
    AdamW optimizer(model, train);
    std::vector<int> tokens(N), targets(N);
    for (int step = 1; step <= 2; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      Ledger::instance().reset_peaks();
      kernels::reset_flop_counter();
      model.reset_moe_stats();
      model.zero_grads();
      for (int micro = 0; micro < k; ++micro) {
        for (int n = 0; n < N; ++n) {
          const uint64_t r =
              kernels::mix64(((uint64_t)step << 32) ^ ((uint64_t)micro << 16) ^ (uint64_t)n);
          tokens[n] = (int)(r % mc.model.vocab_size);
          targets[n] = (int)((r >> 32) % mc.model.vocab_size);
        }
        model.data_parallel().begin_microbatch(micro == k - 1);
        const uint64_t seed =
            kernels::mix64(train.seed ^ kernels::mix64(((uint64_t)step << 20) + micro));
        model.forward(tokens.data(), targets.data(), B, 1.0f / k, seed);
        model.backward();
      }
      optimizer.step(learning_rate(train, step));
      model.update_expert_bias(nullptr);

      const MoeRouting routing = measured_routing(model);
      const Plan plan =
          mc.measured ? make_plan(mc.model, train, parallel, PlanOptions{}, routing) : config_plan;
      if (!mc.measured && mc.model.moe.enabled()) {
        // padded: the measured rows are the configuration's, every layer and microbatch
        for (int l = 0; l < mc.model.num_layers; ++l)
          for (int rows : routing.rows.at(l))
            EXPECT_EQ(rows, moe_expected_rows(mc.model, B)) << "layer " << l;
      }
      const MemoryPlan& predicted = plan.ranks.at(0).memory;
      for (int c = 0; c < kNumCategories; ++c)
        EXPECT_EQ((int64_t)Ledger::instance().peak(Category(c)) - baseline[c], predicted.at(c))
            << category_name(Category(c));
      const int64_t total = (int64_t)Ledger::instance().peak_total() - baseline_total;
      if (mc.total_exact)
        EXPECT_EQ(total, predicted.total()) << "peak of the total";
      else
        EXPECT_LE(total, predicted.total()) << "peak of the total (upper bound)";
      EXPECT_EQ(kernels::flop_counter(), plan.flops.hardware_per_rank_step) << "hardware FLOPs";
      if (mc.model.moe.enabled()) {
        // the experts' model FLOPs count the kept pairs, their hardware FLOPs every row
        double kept = 0, rows = 0;
        for (int l = 0; l < mc.model.num_layers; ++l) {
          if (!mc.model.moe.is_moe_layer(l)) continue;
          kept += (double)routing.kept.at(l);
          for (int r : routing.rows.at(l)) rows += r;
        }
        const double per_row = 6.0 * mc.model.hidden_size *
                               (mc.model.moe_fc1_size() + mc.model.moe_ffn());
        const FlopsPlan& f = plan.flops;
        double model_experts = 0, hw_experts = 0;
        for (const MatmulFlops& mm : f.matmuls)
          if (mm.name == "experts.fc1" || mm.name == "experts.fc2")
            model_experts += mm.model * k, hw_experts += mm.hardware * k;
        EXPECT_DOUBLE_EQ(hw_experts, per_row * rows);
        if (mc.measured) {
          EXPECT_DOUBLE_EQ(model_experts, per_row * kept);
        }
      }
    }
  }
  for (int c = 0; c < kNumCategories; ++c)
    EXPECT_EQ((int64_t)Ledger::instance().current(Category(c)), baseline[c])
        << "leaked " << category_name(Category(c));
}

INSTANTIATE_TEST_SUITE_P(
    PlanMoe, PlanMoeTest, ::testing::ValuesIn(cases()),
    [](const ::testing::TestParamInfo<MoeCase>& i) { return i.param.name; });

// The configuration's M: padded E min(C, N) exactly, else the uniform expectation.
TEST(PlanMoe, ExpectedRowsFollowTheCapacityRules) {
  ModelConfig m = moe_model(Arch::LLAMA, 4, 2, 16);  // N = B S = 32 at B = 2
  EXPECT_EQ(moe_expected_rows(m, 2), 64);            // dropless: N k, every pair runs
  EXPECT_TRUE(moe_rows_exact(m));
  m.moe.capacity_factor = 0.5f;                      // C = ceil(32 2 / 4 0.5) = 8
  EXPECT_EQ(moe_capacity(m, 32), 8);
  EXPECT_EQ(moe_expected_rows(m, 2), 32);            // min(E C, N k): an expectation
  EXPECT_FALSE(moe_rows_exact(m));
  m.moe.pad_to_capacity = true;
  EXPECT_TRUE(moe_rows_exact(m));
  EXPECT_EQ(moe_expected_rows(m, 2), 32);            // E min(C, N)
  m.moe.capacity_factor = 20.0f;                     // C = 320 > N: min(C, N) = 32 rows each
  EXPECT_EQ(moe_expected_rows(m, 2), 4 * 32);
  EXPECT_EQ(moe_expected_kept(m, 2), 64);            // but only N k pairs are real
}

// FLOPs: router 2NhE in the model FLOPs too; experts at the kept pairs (model) and at M
// (hardware); fc1 and fc2 rows only over the dense layers.
TEST(PlanMoe, FlopRowsPerLayerKind) {
  ModelConfig m = moe_model(Arch::LLAMA, 4, 2, 16);
  m.num_layers = 3;
  m.moe.layer_pattern = {0, 1, 1};
  m.moe.capacity_factor = 20.0f;
  m.moe.pad_to_capacity = true;
  const Plan p = make_plan(m, plan_test::batch(2, 2), plan_test::world(1, 0));
  const double N = 32, h = 32, E = 4;
  double router = -1, fc1 = -1, experts_model = -1, experts_hw = -1;
  int fc1_layers = 0;
  for (const MatmulFlops& mm : p.flops.matmuls) {
    if (mm.name == "router") router = mm.model;
    if (mm.name == "fc1") fc1 = mm.model, fc1_layers = mm.layers;
    if (mm.name == "experts.fc1") experts_model = mm.model, experts_hw = mm.hardware;
  }
  EXPECT_EQ(router, 3 * 2 * N * h * E * 2);  // two MoE layers
  EXPECT_EQ(fc1_layers, 1);
  EXPECT_GT(fc1, 0);
  EXPECT_EQ(experts_model, 6 * (N * 2) * h * 32 * 2);    // kept pairs N k, fc1_e = 2 f_e
  EXPECT_EQ(experts_hw, 6 * (E * N) * h * 32 * 2);       // M = E min(C, N) rows
  EXPECT_LT(p.flops.model_per_rank_step, p.flops.hardware_per_rank_step);
}

}  // namespace
}  // namespace paralab
