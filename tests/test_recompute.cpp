// tests/test_recompute.cpp: selective activation recompute (--recompute-granularity
// selective) changes what is kept, never what is computed.
//
// For both families and both attention kernels, with dropout, and each set of modules
// (core_attn; mlp; norm; all three), a run with recompute and the run without, from the same
// weights, data and seed, must give BIT-identical losses, gradients and parameters step
// after step (fp32, and bf16 storage): the recompute runs the forward's kernels on the kept
// inputs, and the dropout masks regenerate from (seed, stream, element) (kernels/math.h).
// The recompute run's ledger must equal the plan in every category to the byte, activations
// and recompute included, and its peak total too; the kernels' FLOP counter must equal the
// plan's hardware FLOPs, the recompute's included.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>
#include "measure/ledger.h"       // defines: Ledger, Category
#include "plan/plan.h"         // defines: make_plan, Plan
#include "kernels/math.h"            // defines: mix64
#include "kernels/ops.h"             // defines: flop_counter, reset_flop_counter
#include "model/optimizer.h"         // defines: AdamW, learning_rate
#include "model/param_table.h"       // defines: param_units
#include "model/transformer.h"       // defines: Transformer
#include "parallel/data_parallel.h"  // defines: DataParallel, DataParallelOptions
#include "tests/test_plan_helpers.h"

namespace paralab {
namespace {

struct RecomputeCase {
  std::string name;
  ModelConfig model;  // without recompute; the modules are set on a copy
  bool core_attn = false, mlp = false, norm = false;
  bool bf16 = false;
  int microbatches = 1;
};

// 2 layers, h 32, a 4, s 16, V 64 (llama with GQA: the dropout streams per head), both
// dropouts on: the masks must come back the same.
ModelConfig small(Arch arch, AttentionImpl attention) {
  ModelConfig m = arch == Arch::GPT ? plan_test::gpt(2, 32, 4, 16, 64)
                                    : plan_test::llama(2, 32, 4, 2, 0, 16, 64);
  m.attention = attention;
  m.hidden_dropout = 0.1f;
  m.attention_dropout = 0.1f;
  return m;
}

std::vector<RecomputeCase> cases() {
  std::vector<RecomputeCase> c;
  for (Arch arch : {Arch::GPT, Arch::LLAMA})
    for (AttentionImpl att : {AttentionImpl::NAIVE, AttentionImpl::FLASH}) {
      const std::string base = std::string(arch == Arch::GPT ? "gpt" : "llama") +
                               (att == AttentionImpl::NAIVE ? "_naive" : "_flash");
      const ModelConfig m = small(arch, att);
      c.push_back({base + "_core_attn", m, true, false, false});
      c.push_back({base + "_mlp", m, false, true, false});
      c.push_back({base + "_norm", m, false, false, true});
      c.push_back({base + "_all", m, true, true, true});
    }
  RecomputeCase accum{"gpt_naive_all_accum2_unfused", small(Arch::GPT, AttentionImpl::NAIVE),
                      true, true, true};
  accum.model.fused_cross_entropy = false;
  accum.microbatches = 2;
  c.push_back(accum);
  c.push_back({"gpt_naive_all_bf16", small(Arch::GPT, AttentionImpl::NAIVE), true, true, true,
               true});
  c.push_back({"llama_flash_all_bf16", small(Arch::LLAMA, AttentionImpl::FLASH), true, true,
               true, true});
  return c;
}

// What a run leaves to compare: per step the loss and every gradient (before the update),
// and the parameters at the end.
struct Trace {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;
  std::vector<float> params;
};

int64_t bytes_now(Category c) { return (int64_t)Ledger::instance().current(c); }

// Trains `steps` steps the way trainer.cu does. With plan != nullptr also checks the ledger
// and the FLOP counter of every step against it.
Trace train(const ModelConfig& m, const TrainConfig& t, int steps, const Plan* plan) {
  const int B = t.micro_batch_size, k = t.global_batch_size / B, N = B * m.seq_length;
  std::vector<int64_t> baseline(kNumCategories);
  for (int c = 0; c < kNumCategories; ++c) baseline[c] = bytes_now(Category(c));
  const int64_t baseline_total = (int64_t)Ledger::instance().current_total();
  Trace trace;
  {
    DataParallelOptions options;
    options.storage = (t.bf16) ? paralab::DType::BF16 : paralab::DType::F32;
    DataParallel dp(param_units(m), nullptr, options, kernels::Device::CPU);
    Transformer model(m, kernels::Device::CPU, &dp);
    model.init_parameters(t.seed);
    AdamW optimizer(model, t);
    std::vector<int> tokens(N), targets(N);
    for (int step = 1; step <= steps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      Ledger::instance().reset_peaks();
      kernels::reset_flop_counter();
      model.zero_grads();
      float loss = 0;
      for (int micro = 0; micro < k; ++micro) {
        for (int n = 0; n < N; ++n) {
          const uint64_t r =
              kernels::mix64(((uint64_t)step << 32) ^ ((uint64_t)micro << 16) ^ (uint64_t)n);
          tokens[n] = (int)(r % m.vocab_size);
          targets[n] = (int)((r >> 32) % m.vocab_size);
        }
        model.data_parallel().begin_microbatch(micro == k - 1);
        const uint64_t seed =
            kernels::mix64(t.seed ^ kernels::mix64(((uint64_t)step << 20) + micro));
        loss += model.forward(tokens.data(), targets.data(), B, 1.0f / k, seed);
        model.backward();
      }
      trace.losses.push_back(loss);
      trace.grads.push_back(model.data_parallel().gather_grads());
      optimizer.step(learning_rate(t, step));
      if (!plan) continue;
      const MemoryPlan& want = plan->ranks.at(0).memory;
      for (int c = 0; c < kNumCategories; ++c)
        EXPECT_EQ((int64_t)Ledger::instance().peak(Category(c)) - baseline[c], want.at(c))
            << category_name(Category(c));
      EXPECT_EQ((int64_t)Ledger::instance().peak_total() - baseline_total, want.total())
          << "peak of the total";
      EXPECT_EQ(kernels::flop_counter(), plan->flops.hardware_per_rank_step) << "FLOPs";
    }
    trace.params = model.data_parallel().gather_params();
  }
  for (int c = 0; c < kNumCategories; ++c)
    EXPECT_EQ(bytes_now(Category(c)), baseline[c]) << "leaked " << category_name(Category(c));
  return trace;
}

class RecomputeTest : public ::testing::TestWithParam<RecomputeCase> {};

TEST_P(RecomputeTest, BitIdenticalToTheRunWithoutAndLedgerEqualsPlan) {
  const RecomputeCase& rc = GetParam();
  TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = 2 * rc.microbatches;
  t.train_iters = 3;
  t.bf16 = rc.bf16;
  ModelConfig with = rc.model;
  with.recompute.granularity = Recompute::Granularity::SELECTIVE;
  with.recompute.core_attn = rc.core_attn;
  with.recompute.mlp = rc.mlp;
  with.recompute.norm = rc.norm;
  ParallelConfig single;
  const Plan plan = make_plan(with, t, single);
  const Plan plain = make_plan(rc.model, t, single);
  // Something is recomputed: fewer bytes kept, more FLOPs (norm alone runs no matmul).
  EXPECT_LT(plan.activation_bytes_per_layer, plain.activation_bytes_per_layer);
  EXPECT_GT(plan.ranks[0].memory.recompute, 0);
  if (rc.core_attn || rc.mlp) {
    EXPECT_GT(plan.flops.hardware_per_rank_step, plain.flops.hardware_per_rank_step);
  }
  EXPECT_EQ(plan.flops.model_per_step, plain.flops.model_per_step);  // MFU never counts it

  const Trace ref = train(rc.model, t, t.train_iters, nullptr);
  const Trace got = train(with, t, t.train_iters, &plan);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    EXPECT_EQ(got.losses[s], ref.losses[s]) << "loss of step " << s + 1;  // bit for bit
    ASSERT_EQ(got.grads[s].size(), ref.grads[s].size());
    size_t differ = 0;
    for (size_t i = 0; i < ref.grads[s].size(); ++i) differ += got.grads[s][i] != ref.grads[s][i];
    EXPECT_EQ(differ, 0u) << "gradient elements that differ at step " << s + 1;
  }
  EXPECT_EQ(got.params, ref.params);
}

INSTANTIATE_TEST_SUITE_P(
    Recompute, RecomputeTest, ::testing::ValuesIn(cases()),
    [](const ::testing::TestParamInfo<RecomputeCase>& i) { return i.param.name; });

}  // namespace
}  // namespace paralab
