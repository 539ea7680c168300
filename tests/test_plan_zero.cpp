// tests/test_plan_zero.cpp: the plan under data parallelism and ZeRO: the model states rank
// by rank against the ZeRO paper's closed forms, the model's calls replayed on small layouts
// checked by hand (zero_schedule.h, simulate_zero_step), the bytes on the dp group per step,
// and a gpt3-175b plan on 1024 ranks.
#include <gtest/gtest.h>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>
#include "plan/flops.h"  // defines: narayanan_model_flops
#include "plan/plan.h"  // defines: make_plan, simulate_zero_step, zero_model_state_bytes
#include "report/report.h"  // defines: plan_json
#include "model/param_table.h"  // defines: parameter_count, param_units
#include "tests/test_flags_helpers.h"  // defines: flags_test::parse
#include "tests/test_plan_helpers.h"  // defines: gpt, world, batch

namespace paralab {
namespace {

using namespace plan_test;  // gpt, world, batch, find_comm

int64_t model_states(const MemoryPlan& m) {
  return m.params + m.grads + m.master_params + m.optimizer_states;
}

// Bytes held for the whole step (no transient bucket or gather buffers): the ZeRO paper's
// model states.
int64_t resident_model_states(const Plan& p) {
  const DataParallelPlan& d = p.data_parallel;
  const int b = p.train.bf16 ? 2 : 4;
  return (d.params_resident + d.grads_resident) * b + d.state_numel * ((p.train.bf16 ? 4 : 0) + 8);
}

// bf16, every unit divisible by N (no padding): the resident bytes are exactly the ZeRO
// paper's 2 + 2 + 12 closed forms, whatever the buckets; the peaks add the transients.
TEST(Plan, ZeroStagesMatchPaperClosedForms) {
  const ModelConfig m = gpt(2, 64, 4, 32, 256);
  const int64_t psi = parameter_count(m);
  for (int64_t u : param_units(m)) ASSERT_EQ(u % 4, 0);
  for (int64_t bucket : {int64_t(40000000), int64_t(20000), int64_t(1)})
    for (int dp : {1, 2, 4})
      for (int z = 0; z <= 3; ++z) {
        PlanOptions o;
        o.ddp_bucket_size = bucket;
        const Plan p = make_plan(m, batch(2, 2 * dp, true), world(dp, z), o);
        SCOPED_TRACE("bucket " + std::to_string(bucket) + " dp " + std::to_string(dp) +
                     " stage " + std::to_string(z));
        EXPECT_EQ(p.data_parallel.layout.padded_total, psi);
        EXPECT_DOUBLE_EQ((double)resident_model_states(p), zero_model_state_bytes(z, psi, dp));
        const DataParallelPlan& d = p.data_parallel;
        for (const RankPlan& r : p.ranks) {
          EXPECT_EQ(r.memory.params, (d.params_resident + d.sim.params_transient_peak) * 2);
          EXPECT_EQ(r.memory.grads, (d.grads_resident + d.sim.grads_transient_peak) * 2);
        }
        EXPECT_EQ(d.sim.params_transient_peak > 0, z == 3);
        EXPECT_EQ(d.sim.grads_transient_peak > 0, z >= 2);
      }
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(0, 1000, 4), 16000);
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(1, 1000, 4), 4000 + 3000);
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(2, 1000, 4), 2000 + 3500);
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(3, 1000, 4), 4000);
}

// Every category, every stage, dp 1/2/4, both precisions, with a Ψ that 4 does not divide.
// One bucket (the default size) at stages 0-2, one per unit at 3.
TEST(Plan, PerRankModelStatesEveryStage) {
  const ModelConfig m = gpt(1, 6, 2, 8, 16);
  const int64_t psi = parameter_count(m);
  ASSERT_EQ(psi, 666);
  ASSERT_EQ(param_units(m), (std::vector<int64_t>{0, 144, 654, 666}));
  for (bool bf16 : {false, true})
    for (int dp : {1, 2, 4})
      for (int z = 0; z <= 3; ++z) {
        const Plan p = make_plan(m, batch(1, dp, bf16), world(dp, z));
        const DataParallelPlan& d = p.data_parallel;
        auto up = [&](int64_t n) { return (n + dp - 1) / dp; };
        const int64_t shard = z == 3 ? up(144) + up(510) + up(12) : z ? up(psi) : psi;
        const int64_t full = z ? up(psi) * dp : psi;
        const int pb = bf16 ? 2 : 4;
        SCOPED_TRACE("bf16 " + std::to_string(bf16) + " dp " + std::to_string(dp) +
                     " stage " + std::to_string(z));
        EXPECT_EQ(p.zero_shard, shard);
        EXPECT_EQ(d.params_resident, z >= 3 ? shard : full);
        EXPECT_EQ(d.grads_resident, z >= 2 ? shard : full);
        // Stage 2, one bucket: written from the fused loss (grads(0)) to backward_done(0).
        if (z == 2) {
          EXPECT_EQ(d.sim.grads_transient_peak, full);
        }
        ASSERT_EQ((int)p.ranks.size(), dp);
        for (const RankPlan& r : p.ranks) {
          EXPECT_EQ(r.memory.params, (d.params_resident + d.sim.params_transient_peak) * pb);
          EXPECT_EQ(r.memory.grads, (d.grads_resident + d.sim.grads_transient_peak) * pb);
          EXPECT_EQ(r.memory.master_params, bf16 ? shard * 4 : 0);
          EXPECT_EQ(r.memory.optimizer_states, shard * 8);
          // the dp gradient norm's scalar (ZeRO >= 1), the trainer's loss and stop flag
          // (world > 1)
          EXPECT_EQ(r.memory.comm_buffers, (z >= 1 && dp > 1 ? 4 : 0) + (dp > 1 ? 8 : 0));
          EXPECT_EQ(r.params, psi);
          EXPECT_EQ(r.params_stored, z >= 3 ? shard : full);
          EXPECT_EQ(r.dp_rank, r.rank);
        }
      }
  // The padding shows at dp 4: 666 = 4 x 166.5 -> shard 167, buffers of 668.
  const Plan p = make_plan(m, batch(1, 4), world(4, 1));
  EXPECT_EQ(p.zero_shard, 167);
  EXPECT_EQ(p.ranks[3].memory.grads, 668 * 4);
  EXPECT_EQ(p.ranks[3].memory.optimizer_states, 167 * 8);
  // Stage 3, prefetch 1 (the default): the embedding (144) and the prefetched layer
  // (4 x 128 = 512) are gathered together at the start of forward.
  const Plan p3 = make_plan(m, batch(1, 4), world(4, 3));
  EXPECT_EQ(p3.data_parallel.sim.params_transient_peak, 144 + 512);
  EXPECT_EQ(p3.ranks[0].memory.params, (167 + 144 + 512) * 4);
}

// What a rank holds between steps (MemoryPlan::resident_*, "resident" in --plan --json):
// in bf16 exactly the ZeRO paper's 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N with Ψ replaced by
// P, the padded buckets' sum (stages >= 1); padding adds (P - Ψ) x (0, 4 + 12/N, 2 + 14/N,
// 16/N) bytes. Ψ = 666 is not divisible by 4 (padding), 16 x 666 is (no padding at dp 2).
TEST(Plan, ResidentModelStatesAreTheZeroPaperClosedForms) {
  const ModelConfig m = gpt(1, 6, 2, 8, 16);
  const int64_t psi = parameter_count(m);
  for (int64_t bucket : {int64_t(40000000), int64_t(200)})
    for (int dp : {1, 2, 4})
      for (int z = 0; z <= 3; ++z) {
        PlanOptions o;
        o.ddp_bucket_size = bucket;
        const Plan p = make_plan(m, batch(1, dp, true), world(dp, z), o);
        SCOPED_TRACE("bucket " + std::to_string(bucket) + " dp " + std::to_string(dp) +
                     " stage " + std::to_string(z));
        const MemoryPlan& r = p.ranks.at(0).memory;
        const int64_t P = z == 0 ? psi : p.data_parallel.layout.padded_total;
        EXPECT_EQ((double)r.resident_total(), zero_model_state_bytes(z, (double)P, dp));
        EXPECT_EQ((double)r.resident_total(), zero_resident_bytes(z, (double)P, dp, 2, 2, 4, 8));
        const double per_padding[] = {0, 4 + 12.0 / dp, 2 + 14.0 / dp, 16.0 / dp};
        EXPECT_NEAR(r.resident_total() - zero_model_state_bytes(z, (double)psi, dp),
                    (double)(P - psi) * per_padding[z], 1e-9);
        EXPECT_LT(P - psi, (int64_t)dp * (int64_t)p.data_parallel.layout.buckets.size());
        // resident <= peak: ZeRO-2/3's buffers are transients on top
        EXPECT_EQ(r.resident_params == r.params, z < 3);
        EXPECT_EQ(r.resident_grads == r.grads, z < 2);
        if (dp == 4 && z >= 1) {
          EXPECT_GT(P, psi);  // 666 = 4 x 166.5
        }
      }
  // fp32 (4 + 4 + 0 + 8): the same shape, 8Ψ + 8Ψ/N at stage 1.
  const Plan f = make_plan(m, batch(1, 2), world(2, 1));
  EXPECT_EQ((double)f.ranks[0].memory.resident_total(), zero_resident_bytes(1, psi, 2, 4, 4, 0, 8));
  EXPECT_EQ(zero_resident_formula(2, 2, 2, 4, 8), "2Ψ + 14Ψ/N");
  // Printed: --plan --json per rank, and rows in the memory table.
  const Plan p = make_plan(m, batch(1, 4, true), world(4, 2));
  const MemoryPlan& r = p.ranks[3].memory;
  const std::string j = plan_json(p, nullptr, false);
  const std::string want = "\"resident\":{\"params\":" + std::to_string(r.resident_params) +
                           ",\"grads\":" + std::to_string(r.resident_grads) +
                           ",\"master_params\":" + std::to_string(r.master_params) +
                           ",\"optimizer_states\":" + std::to_string(r.optimizer_states) +
                           ",\"total\":" + std::to_string(r.resident_total()) + "}";
  EXPECT_NE(j.find(want), std::string::npos) << j.substr(0, 2000);
  const std::string t = memory_table(p, 3, nullptr);
  EXPECT_NE(t.find("held between steps"), std::string::npos) << t;
  EXPECT_NE(t.find("ZeRO 2 (2 + 2 + 12, the paper's): 2Ψ + 14Ψ/N"), std::string::npos) << t;
  EXPECT_NE(t.find("bucket padding P - Ψ = 2 elements"), std::string::npos) << t;
}

// Megatron's precision-aware optimizer with bf16 moments (--exp-avg-dtype bf16
// --exp-avg-sq-dtype bf16), DeepSeek-V3's convention: Adam 2 + 2, so with --bf16 2 + 2 + 8 =
// 12 bytes per parameter where the paper's mixed precision takes 16: stage 0..3 12Ψ,
// 4Ψ + 8Ψ/N, 2Ψ + 10Ψ/N, 12Ψ/N (Ψ -> P past stage 0); one moment in bf16: 14 bytes; fp32
// storage with both: 4 + 4 + 4 = 12. The optimizer_states row is 4 (or 6) bytes per state
// element and the AdamW kernel moves 20 (or 24) bytes an element, not 28.
TEST(Plan, BF16MomentsTwelveBytesPerParameter) {
  const ModelConfig m = gpt(1, 6, 2, 8, 16);
  const int64_t psi = parameter_count(m);
  for (int moments = 1; moments <= 2; ++moments)
    for (bool bf16 : {false, true})
      for (int dp : {1, 2, 4})
        for (int z = 0; z <= 3; ++z) {
          TrainConfig t = batch(1, dp, bf16);
          t.exp_avg_sq_bf16 = true;
          t.exp_avg_bf16 = moments == 2;
          const Plan p = make_plan(m, t, world(dp, z));
          SCOPED_TRACE("moments " + std::to_string(moments) + " bf16 " + std::to_string(bf16) +
                       " dp " + std::to_string(dp) + " stage " + std::to_string(z));
          const MemoryPlan& r = p.ranks.at(0).memory;
          const int64_t P = z == 0 ? psi : p.data_parallel.layout.padded_total;
          const int pb = bf16 ? 2 : 4, mb = bf16 ? 4 : 0, ob = 8 - 2 * moments;
          EXPECT_EQ(pb + pb + mb + ob, 16 - 2 * moments);  // 12 with both moments in bf16
          EXPECT_EQ((double)r.resident_total(), zero_resident_bytes(z, (double)P, dp, pb, pb, mb, ob));
          EXPECT_EQ(r.optimizer_states, p.data_parallel.state_numel * ob);
          if (bf16 && moments == 2) {
            const double paper12[] = {12.0 * P, 4.0 * P + 8.0 * P / dp, 2.0 * P + 10.0 * P / dp,
                                      12.0 * P / dp};
            EXPECT_DOUBLE_EQ((double)r.resident_total(), paper12[z]);
          }
        }
  TrainConfig t = batch(1, 4, true);
  t.exp_avg_bf16 = t.exp_avg_sq_bf16 = true;
  const Plan p = make_plan(m, t, world(4, 2));
  const std::string table = memory_table(p, 3, nullptr);
  EXPECT_NE(table.find("ZeRO 2 (2 + 2 + 8: bf16 moments): 2Ψ + 10Ψ/N"), std::string::npos)
      << table;
}

// The preset: `--config configs/models/llama-7b.toml --plan --world-size 4 --bf16
// --zero-stage z`, Ψ = 6.74B, the default 40M-element buckets.
TEST(Plan, ResidentModelStatesLlama7bPreset) {
  if (!std::ifstream("configs/models/llama-7b.toml"))
    GTEST_SKIP() << "run from the repository root to read configs/models";
  for (int z = 0; z <= 3; ++z) {
    const Options o = flags_test::parse({"--config", "configs/models/llama-7b.toml", "--plan",
                                         "--world-size", "4", "--bf16", "--zero-stage",
                                         std::to_string(z)});
    PlanOptions po;
    po.ddp_bucket_size = o.ddp_bucket_size;
    const Plan p = make_plan(o.model, o.train, o.parallel, po);
    SCOPED_TRACE("stage " + std::to_string(z));
    const int64_t psi = p.params_total;
    ASSERT_EQ(psi, 6738415616);  // Touvron et al.: 6.74B
    const int64_t P = z == 0 ? psi : p.data_parallel.layout.padded_total;
    const int64_t buckets = (int64_t)p.data_parallel.layout.buckets.size();
    EXPECT_LT(P - psi, 4 * buckets);
    for (const RankPlan& rp : p.ranks)
      EXPECT_EQ((double)rp.memory.resident_total(), zero_model_state_bytes(z, (double)P, 4));
    // 4 divides every unit and bucket of llama-7b (h, f, V are multiples of 4): no padding,
    // the paper's 16Ψ = 100.41 GiB, 4Ψ + 3Ψ = 43.93, 2Ψ + 3.5Ψ = 34.52, 4Ψ = 25.10 GiB
    EXPECT_EQ(P, psi);
    const double paper = zero_model_state_bytes(z, (double)psi, 4);
    EXPECT_EQ((double)p.ranks[0].memory.resident_total(), paper);
    const double gib[] = {100.41, 43.93, 34.52, 25.10};
    EXPECT_NEAR(paper / (1 << 30), gib[z], 0.005);
  }
}

// The peak of the total under ZeRO-2/3 (plan/total.cpp): each compute beside the buffers
// alive then. Lesson 02's model (gpt, 8 layers of 198272, buckets of >= 150000: one layer
// each, the embedding alone), dp 2, ZeRO-2: the largest buckets, the embedding's (written by
// the fused loss in forward) and {layer 7, head}, are both alive in the head's backward,
// after the loss's logits chunk and the forward's int32 tokens and targets are freed. The
// sum of the category peaks counted them all at once (54.57 MiB; measured and replayed
// 54.07 MiB, tests/mpi/equivalence.sh and lessons/02-zero hold the measured one).
TEST(Plan, ZeroTwoTotalReplayedNotSummed) {
  const ModelConfig m = gpt(8, 128, 4, 64, 256);
  PlanOptions o;
  o.ddp_bucket_size = 150000;
  const Plan p = make_plan(m, batch(8, 16), world(2, 2), o);
  const MemoryPlan& r = p.ranks[0].memory;
  int64_t sum = 0;
  for (int c = 0; c < kNumMemoryCategories; ++c) sum += r.at(c);
  const int64_t N = 8 * 64, tokens_targets = 2 * 4 * N;
  EXPECT_EQ(r.logits, N * 256 * 4);  // fused: one chunk of min(N, 1024) rows, fp32
  EXPECT_GT(r.total_replayed, 0);
  EXPECT_EQ(r.total(), sum - r.logits - tokens_targets);
  EXPECT_EQ(r.total(), 56696844);
  // without transients (ZeRO 0-1) the replay is the validated total, term for term: fused
  // and unfused, both families, bf16, selective recompute, tp + sp
  for (bool fused : {true, false})
    for (bool bf16 : {false, true})
      for (int variant = 0; variant < 4; ++variant)
        for (int z : {0, 1}) {
          ModelConfig v = variant == 1 ? plan_test::llama(2, 64, 4, 2, 96, 32, 256)
                                       : gpt(2, 64, 4, 32, 256);
          v.fused_cross_entropy = fused;
          v.cross_entropy_chunk = 48;
          if (variant == 2) {
            v.recompute.granularity = Recompute::Granularity::SELECTIVE;
            v.recompute.core_attn = v.recompute.mlp = v.recompute.norm = true;
          }
          ParallelConfig par = world(2, z);
          if (variant == 3) par.world_size = 4, par.tensor_parallel = 2, par.sequence_parallel = true;
          const Plan q = make_plan(v, batch(2, 4, bf16), par);
          SCOPED_TRACE("fused " + std::to_string(fused) + " bf16 " + std::to_string(bf16) +
                       " variant " + std::to_string(variant) + " stage " + std::to_string(z));
          const MemoryPlan& mem = q.ranks[0].memory;
          EXPECT_EQ(mem.total_replayed, 0);
          EXPECT_EQ(replayed_total(q, mem, q.data_parallel), mem.total());
        }
}

// ---- the model's calls, replayed: small layouts checked by hand --------------------------
// Units of 8, 20, 30, 6 elements (embedding, two layers, head), Ψ = 64; dp 2 divides all.
const std::vector<int64_t> kUnits = {0, 8, 28, 58, 64};

TEST(ZeroSchedule, CallsOfOneMicrobatch) {
  using C = DpCall;
  auto str = [](const std::vector<DpCall>& cs) {
    std::string s;
    for (const DpCall& c : cs) {
      const char* k[] = {"A", "R", "G", "D"};
      s += std::string(k[c.kind]) + std::to_string(c.unit) +
           (c.kind == C::ACQUIRE ? (c.forward ? "f" : "b") : "") + " ";
    }
    return s;
  };
  // gpt (tied), fused loss: the head's weight gradient is the embedding's, written in forward.
  EXPECT_EQ(str(microbatch_calls(2, true, true)),
            "A0f R0 A1f R1 A2f R2 A3f A0f G0 R0 R3 "
            "A3b G3 R3 D3 A2b G2 R2 D2 A1b G1 R1 D1 G0 D0 ");
  // llama (untied), unfused: output.weight's gradient in backward.
  EXPECT_EQ(str(microbatch_calls(2, false, false)),
            "A0f R0 A1f R1 A2f R2 A3f R3 "
            "A3b G3 G3 R3 D3 A2b G2 R2 D2 A1b G1 R1 D1 G0 D0 ");
  EXPECT_EQ(str(microbatch_calls(1, true, false)),
            "A0f R0 A1f R1 A2f A0f R0 R2 A2b A0b G0 R0 G2 R2 D2 A1b G1 R1 D1 G0 D0 ");
  EXPECT_EQ(prefetch_window(0, true, 4, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(prefetch_window(2, true, 4, 2), (std::vector<int>{3}));
  EXPECT_EQ(prefetch_window(2, false, 4, 5), (std::vector<int>{1}));
  EXPECT_TRUE(prefetch_window(1, false, 4, 1).empty());
}

TEST(ZeroSchedule, Stage3GathersAndPeaks) {
  const BucketLayout l = make_bucket_layout(kUnits, 40000000, 2, true);
  ASSERT_EQ(l.buckets.size(), 4u);
  const auto gpt_calls = microbatch_calls(2, true, true);
  // gpt, prefetch 1. Forward: {0,1} -> {1,2} -> {2,3} -> {3} + nested 0; backward: {3,2}
  // -> {2,1}: the peak is layers 1 and 2 together, 50.
  ZeroStepSimulation s = simulate_zero_step(l, gpt_calls, 3, false, 1, 1);
  EXPECT_EQ(s.params_transient_peak, 50);
  // Forward gathers 0,1,2,3 and 0 again for the tied head; backward 3,2,1: 2Ψ in all.
  EXPECT_EQ(s.gathers, 8);
  EXPECT_EQ(s.gathered_elements, 2 * 64);
  EXPECT_EQ(s.grad_reductions, 4);
  EXPECT_EQ(s.grad_reduced_elements, 64);
  // Gradients, no overlap: unit 0's buffer lives from the fused loss to the end (8), plus
  // one unit at a time: 8 + 30.
  EXPECT_EQ(s.grads_transient_peak, 38);
  // With overlap, the previous unit is freed only when the next is posted: 8 + 30 + 20.
  EXPECT_EQ(simulate_zero_step(l, gpt_calls, 3, true, 1, 1).grads_transient_peak, 58);
  // prefetch 0: one unit at a time, except the tied head (6 + 8): max 30.
  EXPECT_EQ(simulate_zero_step(l, gpt_calls, 3, false, 0, 1).params_transient_peak, 30);
  // prefetch 2: 0, 1 and 2 at the start of forward.
  s = simulate_zero_step(l, gpt_calls, 3, false, 2, 3);
  EXPECT_EQ(s.params_transient_peak, 58);
  EXPECT_EQ(s.gathers, 3 * 8);  // microbatches alike: nothing stays resident
  EXPECT_EQ(s.grad_reductions, 3 * 4);
  // llama, unfused: no second embedding gather, so 2Ψ - 8.
  s = simulate_zero_step(l, microbatch_calls(2, false, false), 3, false, 1, 1);
  EXPECT_EQ(s.gathers, 7);
  EXPECT_EQ(s.gathered_elements, 2 * 64 - 8);
  EXPECT_EQ(s.params_transient_peak, 50);
  EXPECT_EQ(s.grads_transient_peak, 30);  // nothing written in forward
}

TEST(ZeroSchedule, Stage2BucketBuffers) {
  // Bucket size 25, from the last unit back: {2,3} = 36, {0,1} = 28.
  const BucketLayout l = make_bucket_layout(kUnits, 25, 2, false);
  ASSERT_EQ(l.buckets.size(), 2u);
  EXPECT_EQ(l.buckets[0].unit_lo, 2);
  EXPECT_EQ(l.buckets[1].padded, 28);
  for (bool overlap : {false, true}) {
    // gpt: {0,1} is written by the fused loss in forward and held to backward_done(0); {2,3}
    // joins it during backward.
    const ZeroStepSimulation s =
        simulate_zero_step(l, microbatch_calls(2, true, true), 2, overlap, 1, 3);
    EXPECT_EQ(s.grads_transient_peak, 64);
    EXPECT_EQ(s.params_transient_peak, 0);
    EXPECT_EQ(s.grad_reductions, 2 * 3);
    EXPECT_EQ(s.grad_reduced_elements, 64 * 3);
    // llama: {2,3} is reduced (and, without overlap, freed) before {0,1} is written.
    EXPECT_EQ(simulate_zero_step(l, microbatch_calls(2, false, true), 2, overlap, 1, 1)
                  .grads_transient_peak,
              overlap ? 64 : 36);
  }
  // Stages 0-1 hold no transients.
  EXPECT_EQ(simulate_zero_step(l, microbatch_calls(2, true, true), 1, true, 1, 2).grads_transient_peak,
            0);
  // A sequence data_parallel would reject is rejected here too.
  std::vector<DpCall> bad = {{DpCall::RELEASE, 1, false}};
  EXPECT_THROW(simulate_zero_step(l, bad, 3, false, 1, 1), std::invalid_argument);
  bad = {{DpCall::GRADS, 2, false}, {DpCall::BACKWARD_DONE, 2, false}, {DpCall::GRADS, 3, false}};
  EXPECT_THROW(simulate_zero_step(l, bad, 2, false, 1, 1), std::invalid_argument);
}

// Bytes on the dp group per step, padding-free, against ZeRO §7: stages 0-2 move 2Ψ on the
// ring (all-reduce = reduce-scatter + all-gather), stage 3 moves 3Ψ (1.5x).

// With --bf16 parameters and gradients travel as 2-byte elements, the norm and the loss
// as fp32 scalars.
TEST(Plan, DataParallelCommunication) {
  const ModelConfig m = gpt(2, 64, 4, 32, 256);
  const int64_t psi = parameter_count(m);
  for (bool bf16 : {false, true})
    for (int dp : {2, 4})
      for (int64_t k : {1, 3})
        for (int z = 0; z <= 3; ++z) {
          const int64_t bytes = (bf16 ? 2 : 4) * psi;
          PlanOptions o;
          o.ddp_bucket_size = 20000;  // several buckets
          const Plan p = make_plan(m, batch(1, dp * k, bf16), world(dp, z), o);
          SCOPED_TRACE("bf16 " + std::to_string(bf16) + " dp " + std::to_string(dp) + " k " +
                       std::to_string(k) + " stage " + std::to_string(z));
          const int64_t nb = (int64_t)p.data_parallel.layout.buckets.size();
          ASSERT_GT(nb, 1);
          const double ring = double(dp - 1) / dp;
          const CommPlanEntry* ar = find_comm(p, CommGroup::DP, CommOp::ALL_REDUCE);
          const CommPlanEntry* rs = find_comm(p, CommGroup::DP, CommOp::REDUCE_SCATTER);
          const CommPlanEntry* ag = find_comm(p, CommGroup::DP, CommOp::ALL_GATHER);
          const CommPlanEntry* loss = find_comm(p, CommGroup::WORLD, CommOp::ALL_REDUCE);
          ASSERT_TRUE(ar && loss);
          EXPECT_EQ(loss->calls, 1);
          EXPECT_EQ(loss->payload_bytes, 8);  // the loss and the stop flag
          double bus = 0;
          if (z == 0) {
            EXPECT_EQ(ar->calls, nb);
            EXPECT_EQ(ar->payload_bytes, bytes);
            EXPECT_FALSE(rs || ag);
            bus = ar->bus_bytes;
          } else {
            ASSERT_TRUE(rs && ag);
            EXPECT_EQ(ar->calls, 1);  // the gradient norm
            EXPECT_EQ(ar->payload_bytes, 4);
            const int64_t rs_per_step = z == 1 ? 1 : k;  // per step vs per microbatch
            EXPECT_EQ(rs->calls, nb * rs_per_step);
            EXPECT_EQ(rs->payload_bytes, bytes * rs_per_step);
            const int64_t ag_per_step = z < 3 ? 1 : 2 * k;  // after the step vs fwd + bwd
            EXPECT_EQ(ag->payload_bytes, bytes * ag_per_step);
            EXPECT_EQ(ag->calls, z < 3 ? nb : k * (m.num_layers + 3 + m.num_layers + 1));
            EXPECT_DOUBLE_EQ(rs->bus_bytes, ring * rs->payload_bytes);
            bus = rs->bus_bytes + ag->bus_bytes;
          }
          if (k == 1) {
            EXPECT_DOUBLE_EQ(bus, (z == 3 ? 3 : 2) * ring * bytes);
          }
        }
  // dp 1: nothing on the dp group, nor on the world.
  EXPECT_TRUE(make_plan(m, batch(1, 1), world(1, 3)).comm.empty());
}

// gpt3-175b shape on 1024 ranks: planned without allocating, at once.
TEST(Plan, Gpt3On1024Ranks) {
  ModelConfig m = gpt(96, 12288, 96, 2048, 50257);
  const Plan p = make_plan(m, batch(1, 2048, true), world(1024, 1));
  EXPECT_EQ((int)p.ranks.size(), 1024);
  EXPECT_NEAR(p.params_total / 1e9, 174.6, 0.1);
  // Padding: each bucket rounds up to a multiple of 1024, at most 1023 elements each of
  // the padded params and grads (2 bytes each in bf16).
  const double pad = (double)p.data_parallel.layout.buckets.size() * 1023 * 4 + 16;
  EXPECT_NEAR((double)model_states(p.ranks[1023].memory),
              zero_model_state_bytes(1, p.params_total, 1024), pad);
  EXPECT_NEAR(p.flops.model_per_step / narayanan_model_flops(2048, 96, 2048, 12288, 50257), 1.0,
              1e-12);
  EXPECT_GT(plan_json(p, nullptr).size(), 1024u * 100);
}

}  // namespace
}  // namespace paralab
