// tests/test_plan.cpp: the analytic model against the published closed forms it must
// reproduce (FORMULAS.md), the ZeRO byte conventions rank by rank, and the report writers.
// Tensor and sequence parallelism: test_plan_parallel.cpp.
#include <gtest/gtest.h>
#include <cblas.h>
#include <vector>
#include "instrument/flops.h"
#include "instrument/peak.h"
#include "instrument/plan.h"
#include "instrument/report.h"
#include "model/param_table.h"

namespace paralab {
namespace {

ModelConfig gpt(int L, int h, int a, int s, int V) {
  ModelConfig m;
  m.arch = Arch::GPT;
  m.num_layers = L;
  m.hidden_size = h;
  m.num_attention_heads = a;
  m.seq_length = s;
  m.vocab_size = V;
  return m;
}

ParallelConfig world(int n, int zero) {
  ParallelConfig p;
  p.world_size = n;
  p.zero_stage = zero;
  return p;
}

TrainConfig batch(int micro, int global, bool bf16 = false) {
  TrainConfig t;
  t.micro_batch_size = micro;
  t.global_batch_size = global;
  t.bf16 = bf16;
  return t;
}

int64_t model_states(const MemoryPlan& m) {
  return m.params + m.grads + m.master_params + m.optimizer_states;
}

// P = 12Lh^2 (1 + 13/(12h) + (V+s)/(12Lh)) (Narayanan SC21) counts each layer's weights and
// biases, the word and position embeddings; it leaves out the final LayerNorm (2h).
TEST(Plan, ParameterCountMatchesNarayananClosedForm) {
  for (const ModelConfig& m : {gpt(2, 64, 4, 32, 256), gpt(12, 768, 12, 1024, 50257),
                               gpt(96, 12288, 96, 2048, 50257)}) {
    const double L = m.num_layers, h = m.hidden_size, V = m.vocab_size, s = m.seq_length;
    const double closed = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h));
    EXPECT_DOUBLE_EQ((double)parameter_count(m), closed + 2 * h) << "L=" << L;
  }
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
          // the dp gradient norm's scalar (ZeRO >= 1), the trainer's loss scalar (world > 1)
          EXPECT_EQ(r.memory.comm_buffers, (z >= 1 && dp > 1 ? 4 : 0) + (dp > 1 ? 4 : 0));
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
const CommPlanEntry* find_comm(const Plan& p, CommGroup g, CommOp op) {
  for (const CommPlanEntry& e : p.comm)
    if (e.group == g && e.op == op) return &e;
  return nullptr;
}

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
          EXPECT_EQ(loss->payload_bytes, 4);
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

// Korthikanti Table 2: GPT layer, dropout on, naive attention, 2-byte activations, 1-byte
// masks, norm statistics left out: exactly sbh(34 + 5as/h).
TEST(Plan, ActivationsMatchKorthikanti) {
  for (int b : {1, 3}) {
    ModelConfig m = gpt(2, 64, 4, 32, 256);
    m.attention = AttentionImpl::NAIVE;
    m.attention_dropout = 0.1f;
    m.hidden_dropout = 0.1f;
    const Plan p = make_plan(m, batch(b, b, true), world(1, 0));
    const double s = 32, h = 64, a = 4;
    EXPECT_DOUBLE_EQ((double)sum_bytes(p.layer_activations, false),
                     korthikanti_layer_bytes(s, b, h, a));
    // The statistics our LayerNorms keep on top: mean + rstd per token, two norms, fp32.
    EXPECT_EQ(p.activation_bytes_per_layer - sum_bytes(p.layer_activations, false),
              2 * 2 * (int64_t)b * 32 * 4);
  }
  EXPECT_DOUBLE_EQ(korthikanti_tp_bytes(32, 1, 64, 4, 1), korthikanti_layer_bytes(32, 1, 64, 4));
  EXPECT_DOUBLE_EQ(korthikanti_tp_sp_bytes(32, 1, 64, 4, 1), korthikanti_layer_bytes(32, 1, 64, 4));
  EXPECT_DOUBLE_EQ(korthikanti_tp_sp_selective_bytes(32, 1, 64, 2), 34 * 32 * 64 / 2.0);
}

TEST(Plan, ActivationVariants) {
  ModelConfig m = gpt(2, 64, 4, 32, 256);
  const int64_t N = 2 * 32, V = 256, h = 64, a = 4, S = 32;
  m.attention = AttentionImpl::FLASH;
  const Plan flash = make_plan(m, batch(2, 2), world(1, 0));
  m.attention = AttentionImpl::NAIVE;
  const Plan naive = make_plan(m, batch(2, 2), world(1, 0));
  // naive keeps P (B a S S) where flash keeps the log-sum-exp (B a S), fp32.
  EXPECT_EQ(naive.activation_bytes_per_layer - flash.activation_bytes_per_layer,
            (2 * a * S * S - 2 * a * S) * 4);
  m.attention_dropout = 0.1f;
  const Plan drop = make_plan(m, batch(2, 2), world(1, 0));
  EXPECT_EQ(drop.activation_bytes_per_layer - naive.activation_bytes_per_layer,
            2 * a * S * S * (1 + 4));  // mask (1 byte) + P' (4 bytes)
  // Logits: fused CE holds min(N, chunk) rows; --no-fused-ce all N rows.
  m.cross_entropy_chunk = 16;
  EXPECT_EQ(make_plan(m, batch(2, 2), world(1, 0)).ranks[0].memory.logits, 16 * V * 4);
  m.fused_cross_entropy = false;
  const Plan unfused = make_plan(m, batch(2, 2), world(1, 0));
  EXPECT_EQ(unfused.ranks[0].memory.logits, N * V * 4);
  EXPECT_EQ(sum_bytes(unfused.head_activations), (2 * N + N * h) * 4);
  // Whole microbatch: embedding output + L layers + head; llama keeps N rstd per norm and
  // z of width 2f.
  EXPECT_EQ(unfused.activation_bytes_per_microbatch,
            N * h * 4 + 2 * unfused.activation_bytes_per_layer + (2 * N + N * h) * 4);
  ModelConfig l = m;
  l.arch = Arch::LLAMA;
  l.attention = AttentionImpl::FLASH;
  const Plan llama = make_plan(l, batch(2, 2), world(1, 0));
  const int64_t f = 4 * h;
  EXPECT_EQ(llama.activation_bytes_per_layer,
            4 * (N + N * h + 3 * N * h + 2 * a * S + N * h + N * h + N + N * h + N * 2 * f +
                 N * f + N * h));
}

// notes/model.md "Workspace": fp32 scratch, plus tokens and targets (int32) in flight and
// the loss's 3 x chunk fp32 scratch (row max, sum of exponentials, target logit).
TEST(Plan, WorkspaceFollowsNotes) {
  ModelConfig m = gpt(2, 64, 4, 32, 256);
  const int64_t N = 3 * 32, h = 64, f = 256, a = 4, S = 32;
  m.attention = AttentionImpl::NAIVE;
  const int64_t fused = 4 * (2 * N * h + 3 * N * h + 3 * N * h + 3 * N * h + N * f + N * f + N +
                             2 * 3 * a * S * S + N * h + 2 * N + 3 * N);
  EXPECT_EQ(make_plan(m, batch(3, 3), world(1, 0)).ranks[0].memory.workspace, fused);
  m.attention = AttentionImpl::FLASH;
  m.fused_cross_entropy = false;  // xf becomes d(xf), same size; no S x S scratch
  EXPECT_EQ(workspace_bytes(m, 3, 4), fused - 4 * 2 * 3 * a * S * S);
}

// notes/model.md "--bf16": 2-byte activations and workspace except the fp32 norm
// statistics, log-sum-exp and losses, int32 tokens and targets, 1-byte masks; logits fp32
// plus a bf16 copy of their gradient.
TEST(Plan, Bf16StorageFollowsNotes) {
  ModelConfig m = gpt(2, 64, 4, 32, 256);
  const int64_t B = 3, N = B * 32, h = 64, f = 256, a = 4, S = 32, V = 256;
  m.attention = AttentionImpl::NAIVE;
  const Plan naive = make_plan(m, batch(B, B, true), world(1, 0));
  // gpt layer: stats 2N per norm (fp32); u, q, k, v, ctx, resid1, u2, out: 8 N h; z, m: 2 N f.
  EXPECT_EQ(naive.activation_bytes_per_layer,
            4 * (2 * 2 * N) + 2 * (8 * N * h + 2 * N * f + B * a * S * S));
  m.attention_dropout = 0.1f;
  m.hidden_dropout = 0.1f;
  const Plan drop = make_plan(m, batch(B, B, true), world(1, 0));
  EXPECT_EQ(drop.activation_bytes_per_layer - naive.activation_bytes_per_layer,
            B * a * S * S * (1 + 2) + 2 * N * h);  // mask + P', two hidden masks (1 byte)
  m.attention_dropout = m.hidden_dropout = 0;
  m.attention = AttentionImpl::FLASH;
  const Plan flash = make_plan(m, batch(B, B, true), world(1, 0));
  EXPECT_EQ(naive.activation_bytes_per_layer - flash.activation_bytes_per_layer,
            2 * B * a * S * S - 4 * B * a * S);  // P (bf16) against the fp32 log-sum-exp
  // Embedding x0 (bf16), head: final norm stats (fp32) and d(xf) (bf16).
  EXPECT_EQ(flash.activation_bytes_per_microbatch,
            2 * N * h + 2 * flash.activation_bytes_per_layer + 4 * 2 * N + 2 * N * h);
  const MemoryPlan& mem = flash.ranks[0].memory;
  EXPECT_EQ(mem.params, parameter_count(m) * 2);
  EXPECT_EQ(mem.grads, parameter_count(m) * 2);
  EXPECT_EQ(mem.master_params, parameter_count(m) * 4);
  EXPECT_EQ(mem.optimizer_states, parameter_count(m) * 8);
  // Workspace, flash, fused: dres tmp_h, qkv, o_heads dctx do_heads, dq dk dv, dact, dfc1,
  // xf in bf16; losses and the loss scratch (3 N) fp32; tokens, targets int32.
  EXPECT_EQ(mem.workspace,
            2 * (2 * N * h + 3 * N * h + 3 * N * h + 3 * N * h + N * f + N * f + N * h) +
                4 * (N + 3 * N + 2 * N));
  EXPECT_EQ(workspace_bytes(m, B, 2) * 2 - workspace_bytes(m, B, 4), 4 * (N + 3 * N + 2 * N));
  // Logits: fused, one chunk of fp32 logits and its bf16 gradient; unfused, all N rows.
  m.cross_entropy_chunk = 16;
  EXPECT_EQ(make_plan(m, batch(B, B, true), world(1, 0)).ranks[0].memory.logits, 16 * V * 6);
  m.fused_cross_entropy = false;
  const Plan unfused = make_plan(m, batch(B, B, true), world(1, 0));
  EXPECT_EQ(unfused.ranks[0].memory.logits, N * V * (4 + 2));
  EXPECT_EQ(make_plan(m, batch(B, B), world(1, 0)).ranks[0].memory.logits, N * V * 4);
  EXPECT_EQ(sum_bytes(unfused.head_activations), 4 * 2 * N + 2 * N * h);  // stats, xf
}

// Narayanan eq. 3 for a GPT (f = 4h, no GQA, tied head, full attention convention).
TEST(Plan, ModelFlopsMatchNarayanan) {
  for (int dp : {1, 4}) {
    const ModelConfig m = gpt(4, 128, 8, 64, 512);
    const Plan p = make_plan(m, batch(2, 8 * dp), world(dp, 0));
    EXPECT_DOUBLE_EQ(p.flops.model_per_step,
                     narayanan_model_flops(8 * dp, 4, 64, 128, 512));
    EXPECT_DOUBLE_EQ(p.flops.model_per_rank_step * dp, p.flops.model_per_step);
    EXPECT_EQ(p.flops.microbatches_per_rank, 4);
  }
  // Full recompute adds a forward: 96 B s L h^2(1 + s/(6h) + V/(16Lh)) = 4/3 of the above
  // minus the head's extra third, i.e. model + one forward of the layers.
  const double fwd_layers = (72.0 * 8 * 4 * 64 * 128 * 128 * (1 + 64.0 / (6 * 128))) / 3;
  EXPECT_DOUBLE_EQ(narayanan_full_recompute_flops(8, 4, 64, 128, 512),
                   narayanan_model_flops(8, 4, 64, 128, 512) + fwd_layers);
}

// PaLM: 6N + 12 L H Q T per token, N the matmul weights, full attention; holds for llama
// with GQA and SwiGLU too, since every matmul weight is used once per token.
TEST(Plan, ModelFlopsMatchPalm) {
  ModelConfig l = gpt(3, 96, 8, 48, 300);
  l.arch = Arch::LLAMA;
  l.num_query_groups = 2;
  l.ffn_hidden_size = 160;
  for (const ModelConfig& m : {gpt(3, 96, 8, 48, 300), l}) {
    const double h = m.hidden_size, d = m.head_dim();
    const double per_layer = m.qkv_size() * h + h * m.num_attention_heads * d +
                             m.fc1_size() * h + h * m.ffn();
    const double N = m.num_layers * per_layer + m.vocab_size * h;
    const Plan p = make_plan(m, batch(2, 4), world(1, 0));
    EXPECT_DOUBLE_EQ(p.flops.model_per_step / p.tokens_per_step,
                     palm_flops_per_token(N, m.num_layers, m.num_attention_heads, d,
                                          m.seq_length));
  }
}

TEST(Plan, HardwareFlopsFollowTheAttentionKernel) {
  ModelConfig m = gpt(2, 64, 4, 32, 256);
  const double B = 2, S = 32, a = 4, d = 16, L = 2;
  const double full = 2 * B * a * d * S * S, causal = 2 * B * a * d * S * (S + 1) / 2;
  m.attention = AttentionImpl::NAIVE;
  const Plan naive = make_plan(m, batch(2, 2), world(1, 0));
  // naive runs the full square: 2 forward + 4 backward products = the full-convention model.
  EXPECT_DOUBLE_EQ(naive.flops.hardware_per_step, naive.flops.model_per_step);
  m.attention = AttentionImpl::FLASH;
  PlanOptions causal_opt;
  causal_opt.attention_flops = AttentionFlops::CAUSAL;
  const Plan flash = make_plan(m, batch(2, 2), world(1, 0), causal_opt);
  // flash: 7 causal products (QK^T recomputed) against the model's 6.
  EXPECT_DOUBLE_EQ(flash.flops.hardware_per_step - flash.flops.model_per_step, causal * L);
  const Plan flash_full = make_plan(m, batch(2, 2), world(1, 0));
  EXPECT_DOUBLE_EQ(flash_full.flops.model_per_step - flash.flops.model_per_step,
                   6 * (full - causal) * L);
  EXPECT_EQ(flash.flops.matmuls.size(), 7u);
  EXPECT_EQ(flash.flops.recompute_per_microbatch, 0);
}

TEST(Plan, RejectsInconsistentBatch) {
  EXPECT_THROW(make_plan(gpt(2, 64, 4, 32, 256), batch(2, 6), world(4, 0)),
               std::invalid_argument);
  EXPECT_THROW(make_plan(gpt(2, 64, 4, 32, 256), batch(2, 8), world(4, 4)),
               std::invalid_argument);
}

TEST(Report, PlanJsonHasRequiredKeys) {
  const Plan p = make_plan(gpt(2, 64, 4, 32, 256), batch(2, 8), world(2, 1));
  const Peak peak{989, "configs/hardware/h100-sxm.toml (bf16 dense)"};
  const std::string j = plan_json(p, &peak, false);
  for (const char* key : {"\"params\":{\"total\":", "\"per_rank\":", "\"memory\":[{\"rank\":0",
                          "{\"rank\":1", "\"flops\":{\"convention\":\"full\"",
                          "\"model_per_step\":", "\"hardware_per_step\":", "\"total\":",
                          "\"optimizer_states\":", "\"comm_buffers\":", "\"peak\":",
                          "\"comm\":[{\"group\":\"dp\",\"op\":\"reduce-scatter\",\"calls\":1,",
                          "\"data_parallel\":{\"buckets\":1,"})
    EXPECT_NE(j.find(key), std::string::npos) << key;
  // Balanced outside strings: the writer closed what it opened.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < j.size(); ++i) {
    if (j[i] == '"' && (i == 0 || j[i - 1] != '\\')) in_string = !in_string;
    if (in_string) continue;
    if (j[i] == '{' || j[i] == '[') ++depth;
    if (j[i] == '}' || j[i] == ']') --depth;
    ASSERT_GE(depth, 0);
  }
  EXPECT_EQ(depth, 0);
  EXPECT_NE(plan_json(p, nullptr, true).find("\n  \"params\": {"), std::string::npos);
}

TEST(Report, StepLineJsonAndTables) {
  const Plan p = make_plan(gpt(2, 64, 4, 32, 256), batch(2, 4), world(2, 0));
  StepMetrics s;
  s.step = 1; s.loss = 5.546; s.lr = 3e-5; s.grad_norm = 1.92; s.step_seconds = 0.0412;
  for (int c = 0; c < kNumMemoryCategories; ++c) s.memory_bytes[c] = p.ranks[0].memory.at(c);
  s.peak_memory_bytes = p.ranks[0].memory.total();
  s.hardware_flops = p.flops.hardware_per_rank_step;
  fill_rates(s, p, Peak{0.001, "flag"});
  EXPECT_DOUBLE_EQ(s.tokens_per_second, 4 * 32 / 0.0412);
  EXPECT_NEAR(s.mfu, p.flops.model_per_step / (0.0412 * 1e9 * 2), 1e-12);
  // flash runs 7 causal attention products where the full convention counts 6 full ones.
  EXPECT_NEAR(s.hfu, p.flops.hardware_per_step / (0.0412 * 1e9 * 2), 1e-12);
  EXPECT_EQ(step_header(s).size(), step_row(s).size());
  s.comm_bytes = 1 << 20;
  EXPECT_EQ(step_header(s).size(), step_row(s).size());
  const std::string j = step_json(s, p, 0);
  EXPECT_EQ(j.find('\n'), std::string::npos);
  for (const char* key : {"\"loss\":", "\"mfu\":", "\"hfu\":", "\"activations\":{\"measured\":",
                          "\"comm_bytes\":", "\"hardware_per_rank_measured\":"})
    EXPECT_NE(j.find(key), std::string::npos) << key;
  const std::string mt = memory_table(p, 0, &s);
  EXPECT_NE(mt.find("optimizer_states"), std::string::npos);
  EXPECT_NE(mt.find("+0.0%"), std::string::npos);
  EXPECT_NE(flops_table(p, 0, &s).find("(+0.00%)"), std::string::npos);
  EXPECT_NE(plan_text(p, nullptr).find("activations saved per layer"), std::string::npos);
  EXPECT_NE(plan_text(p, nullptr).find("communication per step"), std::string::npos);
  // Predicted beside measured: a record equal to the plan shows no diff; one more call does.
  CommStats measured;
  for (const CommPlanEntry& e : p.comm)
    for (int64_t c = 0; c < e.calls; ++c)
      measured.record_call(e.group, e.op, e.payload_bytes / e.calls, 2);
  std::string ct = comm_table(p, &measured);
  EXPECT_NE(ct.find("dp        all-reduce"), std::string::npos) << ct;
  EXPECT_EQ(ct.find("diff"), std::string::npos) << ct;
  measured.record_call(CommGroup::DP, CommOp::ALL_REDUCE, 8, 2);
  measured.record_call(CommGroup::TP, CommOp::ALL_GATHER, 8, 2);
  ct = comm_table(p, &measured);
  EXPECT_NE(ct.find("payload diff +8 B"), std::string::npos) << ct;
  EXPECT_NE(ct.find("tp        all-gather"), std::string::npos) << ct;
  EXPECT_EQ(format_mib(1.5 * 1024 * 1024), "1.50");
  EXPECT_EQ(format_si(1.234e15), "1.23P");
  EXPECT_EQ(format_si(12400, 1), "12.4k");
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

TEST(Peak, ProfilesMatchDeviceNames) {
  std::vector<HardwareProfile> ps = {
      parse_hardware_profile("name = \"H200\"\nmatch = [\"H200\"]\nbf16_tflops = 989\n", "h200"),
      parse_hardware_profile("name = \"H20\" # export part\nmatch = [\"H20\"]\n"
                             "bf16_tflops = 148\nconfirmed = false\n", "h20"),
      parse_hardware_profile("name = \"H100\"\nmatch = [\"H100 80GB HBM3\", \"H100\"]\n"
                             "bf16_tflops = 989\nfp32_tflops = 67\n", "h100"),
      parse_hardware_profile("name = \"H100 PCIe\"\nmatch = [\"H100 PCIe\"]\n"
                             "bf16_tflops = 756\n", "h100-pcie")};
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA H200")->name, "H200");
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA H20")->name, "H20");
  EXPECT_FALSE(match_hardware_profile(ps, "NVIDIA H20")->confirmed);
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA H100 PCIe")->name, "H100 PCIe");
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA H100 80GB HBM3")->name, "H100");
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA GeForce RTX 3090"), nullptr);
  EXPECT_THROW(parse_hardware_profile("name = \"x\"\nmatch = [\"x\"]\nbf16 = 1\n", "bad"),
               std::runtime_error);
}

TEST(Peak, ShippedProfilesAndResolution) {
  const auto ps = load_hardware_profiles("configs/hardware");
  if (ps.empty()) GTEST_SKIP() << "run from the repository root to read configs/hardware";
  for (const char* gpu : {"NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB",
                          "NVIDIA H20", "NVIDIA GeForce RTX 4090", "NVIDIA H100 PCIe"})
    EXPECT_NE(match_hardware_profile(ps, gpu), nullptr) << gpu;
  EXPECT_EQ(resolve_peak(0, "NVIDIA H200", true, "configs/hardware", {}).tflops, 989);
  EXPECT_EQ(resolve_peak(0, "NVIDIA A100-SXM4-80GB", false, "configs/hardware", {}).tflops, 19.5);
  EXPECT_NE(resolve_peak(0, "NVIDIA H20", true, "configs/hardware", {}).source.find("unconfirmed"),
            std::string::npos);
  const Peak flag = resolve_peak(123, "NVIDIA H200", true, "configs/hardware", {});
  EXPECT_EQ(flag.source, "flag");
  EXPECT_EQ(resolve_peak(0, "NVIDIA B300", true, "configs/hardware", {}).tflops, 0);
}

TEST(Peak, MeasuredSgemmOnCpu) {
  const int n = 128;
  std::vector<float> A(n * n, 1.0f), B(n * n, 0.5f), C(n * n);
  auto gemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n,
                B.data(), n, 0.0f, C.data(), n);
  };
  const Peak p = resolve_peak(0, "", false, "configs/hardware",
                              [&] { return measure_peak_tflops(gemm, 2.0 * n * n * n, 0.01); });
  EXPECT_GT(p.tflops, 0);
  EXPECT_EQ(p.source, "measured sgemm");
  EXPECT_NE(describe_peak(p).find("TFLOP/s/rank (measured sgemm)"), std::string::npos);
}

}  // namespace
}  // namespace paralab
