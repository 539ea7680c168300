// tests/test_plan_expert_parallel.cpp: expert parallelism in the parameter table and the plan
// (pure arithmetic; tests/mpi/expert_parallel.sh holds the plan equal to what runs measure).
//   - the expert tensors split by ep: local shapes, the two flat vectors, their units, the
//     shard and its inverse;
//   - a rank's model states: the dense vector over dp, the experts' over edp (ZeRO 0-3);
//   - the dispatchers' bytes per step, padded to capacity (every size from the
//     configuration), worked out here from the dispatchers' tables
//     (parallel/expert_parallel_alltoall.cpp, _allgather.cpp);
//   - context parallelism: the rank's B S/cp tokens routed, the aux counts summed over cp;
//   - Qwen3-30B-A3B at ep 8 on 64 ranks: per-rank parameters and the all-to-all's bytes.
#include <gtest/gtest.h>
#include <cstdint>
#include <string>
#include <vector>
#include "model/param_table.h"  // defines: local_param_table, stage_*, shard_experts
#include "plan/plan.h"          // defines: make_plan, Plan, CommPlanEntry
#include "tests/test_plan_helpers.h"

namespace paralab {
namespace {

using plan_test::batch;
using plan_test::find_comm;
using plan_test::tiny_moe;  // layer 1 MoE: E 4 experts of width 6, top-2

ParallelConfig grid(int world, int ep, int zero = 0,
                    TokenDispatcher d = TokenDispatcher::ALLTOALL) {
  ParallelConfig p = plan_test::world(world, zero);
  p.expert_parallel = ep;
  p.token_dispatcher = d;
  return p;
}

// experts: fc1 4 x 12 x 8 = 384 and fc2 4 x 8 x 6 = 192 elements, 576 in all.
TEST(ExpertParallelTable, ExpertsSplitByEp) {
  const ModelConfig m = tiny_moe();
  const StageSlice whole = whole_model(m);
  for (const ParamSpec& p : local_param_table(m, 1, 2)) {
    if (p.name == "layers.1.mlp.experts.fc1.weight") {
      EXPECT_EQ(p.shape, (std::vector<int64_t>{2, 12, 8}));
    }
    if (p.name == "layers.1.mlp.experts.fc2.weight") {
      EXPECT_EQ(p.shape, (std::vector<int64_t>{2, 8, 6}));
    }
    EXPECT_EQ(p.expert, p.name.find("mlp.experts.") != std::string::npos) << p.name;
  }
  // ep 1: the experts are dense parameters (Megatron's), no expert vector
  EXPECT_EQ(stage_units(m, 1, whole, {1, false}), param_units(m, 1));
  EXPECT_TRUE(stage_expert_units(m, whole, {1, false}).empty());
  // ep 2: the dense vector loses them; the experts' vector mirrors its units (embedding,
  // layer 0, layer 1, head) with only layer 1's non-empty: half of 576
  const std::vector<int64_t> dense = stage_units(m, 1, whole, {2, true});
  EXPECT_EQ(dense.back(), parameter_count(m) - 576);
  EXPECT_EQ(stage_expert_units(m, whole, {2, true}), (std::vector<int64_t>{0, 0, 0, 288, 288}));
  EXPECT_EQ(stage_expert_table(m, whole, {2, true}).size(), 2u);
  // a pipeline stage holding only layer 0 (dense) has no expert vector
  const StageSlice first = pipeline_stage_slice(m, {PipelineSchedule::ONE_F_ONE_B, 2, 1, 1}, 0);
  EXPECT_TRUE(stage_expert_units(m, first, {2, true}).empty());
  // rank r's experts are the r-th block of dim 0; the blocks in rank order are the tensor
  ParamSpec fc1;
  for (const ParamSpec& p : param_table(m))
    if (p.name == "layers.1.mlp.experts.fc1.weight") fc1 = p;
  ASSERT_EQ(fc1.numel(), 384);
  std::vector<float> full(384);
  for (size_t i = 0; i < full.size(); ++i) full[i] = (float)i;
  const std::vector<float> r0 = shard_experts(fc1, full, 2, 0, 1, 0);
  const std::vector<float> r1 = shard_experts(fc1, full, 2, 1, 1, 0);
  EXPECT_EQ(r1.front(), 192.0f);
  EXPECT_EQ(unshard_experts(fc1, {{r0}, {r1}}), full);
  // etp 2 splits each expert's SwiGLU rows [gate 0..5 | up 6..11] (of h 8) by halves: etp
  // rank 1 holds gate rows 3..5 and up rows 9..11 of every expert
  const std::vector<float> t1 = shard_experts(fc1, full, 1, 0, 2, 1);
  ASSERT_EQ(t1.size(), 192u);
  EXPECT_EQ(t1[0], 3.0f * 8);
  EXPECT_EQ(t1[3 * 8], 9.0f * 8);
  EXPECT_EQ(t1[6 * 8], 96.0f + 3 * 8);  // expert 1 starts at 96
  std::vector<std::vector<std::vector<float>>> parts(2, std::vector<std::vector<float>>(2));
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < 2; ++t) parts[r][t] = shard_experts(fc1, full, 2, r, 2, t);
  EXPECT_EQ(unshard_experts(fc1, parts), full);
}

// world 4 = dp 4 (dense) = ep 2 x edp 2 (experts): each rank holds 2 of the 4 experts
// (288 elements) and shards their states over edp 2; the dense 1232 over dp 4.
TEST(ExpertParallelPlan, ModelStatesOverBothGroups) {
  const ModelConfig m = tiny_moe();
  const int64_t dense = parameter_count(m) - 576, experts = 288;
  for (int zero = 0; zero <= 3; ++zero) {
    const Plan p = make_plan(m, batch(1, 8), grid(4, 2, zero));
    EXPECT_EQ(p.ranks[0].params, dense + experts) << zero;
    EXPECT_EQ(p.expert_data_parallel.layout.total, experts);
    const int64_t states = zero == 0 ? dense + experts
                                     : p.data_parallel.layout.shard_numel +
                                           p.expert_data_parallel.layout.shard_numel;
    EXPECT_EQ(p.ranks[0].memory.optimizer_states, 8 * states) << zero;
    if (zero >= 1) {
      // every non-empty expert bucket padded to a multiple of edp 2, sliced in halves
      EXPECT_EQ(p.expert_data_parallel.layout.shard_numel, experts / 2) << zero;
      const CommPlanEntry* rs = find_comm(p.comm, CommGroup::EDP, CommOp::REDUCE_SCATTER);
      ASSERT_NE(rs, nullptr) << zero;
      // one non-empty bucket (layer 1's experts; the empty units never communicate): once a
      // step at ZeRO-1, every microbatch (8 / dp 4 = 2 per rank) at 2-3
      EXPECT_EQ(rs->calls, zero == 1 ? 1 : 2) << zero;
    } else {
      const CommPlanEntry* ar = find_comm(p.comm, CommGroup::EDP, CommOp::ALL_REDUCE);
      ASSERT_NE(ar, nullptr);
      EXPECT_EQ(ar->payload_bytes, 4 * experts);  // the expert gradients, fp32, once a step
    }
    // the gradient norm's expert share, summed over ep
    const CommPlanEntry* norm = find_comm(p.comm, CommGroup::EP, CommOp::ALL_REDUCE);
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->payload_bytes, 4);
  }
}

// Padded to capacity every size is the configuration's: N = 4 tokens, k 2, E 4, cf 1.5:
// C = ceil(4 x 2 / 4 x 1.5) = 3, rows per expert min(C, N) = 3, M = R = E x 3 = 12.
// 8 microbatches per rank (global 16, dp 2), one MoE layer, fp32 (e = 4), h 8.
TEST(ExpertParallelPlan, DispatchBytesPaddedToCapacity) {
  ModelConfig m = tiny_moe();
  m.moe.capacity_factor = 1.5f;
  m.moe.pad_to_capacity = true;
  const int64_t N = 4, h = 8, k = 2, E = 4, M = 12, R = 12, e = 4, mb = 8, ep = 2;
  const Plan a2a = make_plan(m, batch(1, 16), grid(2, 2, 0, TokenDispatcher::ALLTOALL));
  const CommPlanEntry* rows = find_comm(a2a.comm, CommGroup::EP, CommOp::ALL_TO_ALL_V);
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->calls, 6 * mb);  // dispatch, gates, combine; their three backwards
  EXPECT_EQ(rows->payload_bytes,
            mb * ((M * h * e + M * 4 + R * h * e) + (M * h * e + R * h * e + R * 4)));
  EXPECT_DOUBLE_EQ(rows->bus_bytes, rows->payload_bytes * 0.5);  // (n - 1) / n at n = 2
  // no all-gather of the counts: every rank's rows per expert are min(C, N), known without
  // looking (model/moe.h, "Where the routing lives")
  EXPECT_EQ(find_comm(a2a.comm, CommGroup::ETP_EP, CommOp::ALL_GATHER), nullptr);

  const Plan ag = make_plan(m, batch(1, 16), grid(2, 2, 0, TokenDispatcher::ALLGATHER));
  EXPECT_EQ(find_comm(ag.comm, CommGroup::EP, CommOp::ALL_TO_ALL_V), nullptr);
  const CommPlanEntry* gathers = find_comm(ag.comm, CommGroup::ETP_EP, CommOp::ALL_GATHER);
  const CommPlanEntry* scatters = find_comm(ag.comm, CommGroup::ETP_EP, CommOp::REDUCE_SCATTER);
  ASSERT_NE(gathers, nullptr);
  ASSERT_NE(scatters, nullptr);
  EXPECT_EQ(gathers->calls, 4 * mb);  // hidden states, gates, routing map; output gradient
  EXPECT_EQ(gathers->payload_bytes,
            mb * (ep * N * h * e + ep * N * k * 4 + ep * (E + N * k) * 4 + ep * N * h * e));
  EXPECT_EQ(scatters->calls, 3 * mb);  // output; input and gate gradients
  EXPECT_EQ(scatters->payload_bytes, mb * (ep * N * h * e + ep * N * h * e + ep * N * k * 4));
  // the expert rows' saved tensors are the same size under both: R rows each
  EXPECT_EQ(a2a.moe_rows, M);
}

// Expert tensor parallelism, padded to capacity as above (N 4, k 2, E 4, C 3, 8 microbatches,
// fp32, h 8) on world 4 = etp 2 x ep 2: M = R_ep = E min(C, N) = 12 rows leave and reach each
// rank over ep, R = etp R_ep = 24 run on its experts (their halves of the width: fc1 12 / 2,
// fc2 6 / 2); the etp all-to-all-v gathers every block (etp copies) and scatters the partial
// outputs back, both directions.
TEST(ExpertParallelPlan, ExpertTensorParallelBytesPaddedToCapacity) {
  ModelConfig m = tiny_moe();
  m.moe.capacity_factor = 1.5f;
  m.moe.pad_to_capacity = true;
  ParallelConfig p = grid(4, 2, 0, TokenDispatcher::ALLTOALL);
  p.expert_tensor_parallel = 2;
  const Plan plan = make_plan(m, batch(1, 32), p);
  const int64_t h = 8, M = 12, Re = 12, R = 24, T = 2, e = 4, mb = 8;
  EXPECT_EQ(plan.expert_data_parallel.layout.total, 576 / 4);  // 2 experts, half of each
  const CommPlanEntry* etp = find_comm(plan.comm, CommGroup::ETP, CommOp::ALL_TO_ALL_V);
  ASSERT_NE(etp, nullptr);
  EXPECT_EQ(etp->calls, 6 * mb);
  EXPECT_EQ(etp->payload_bytes, mb * ((T * Re * h * e + T * Re * 4 + R * h * e) +
                                      (T * Re * h * e + R * h * e + R * 4)));
  const CommPlanEntry* rows = find_comm(plan.comm, CommGroup::EP, CommOp::ALL_TO_ALL_V);
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->payload_bytes,
            mb * ((M * h * e + M * 4 + Re * h * e) + (M * h * e + Re * h * e + Re * 4)));
  // the counts' all-gather is not needed padded to capacity (as above)
  EXPECT_EQ(find_comm(plan.comm, CommGroup::ETP_EP, CommOp::ALL_GATHER), nullptr);
  // the norm's expert share over etp x ep
  EXPECT_NE(find_comm(plan.comm, CommGroup::ETP_EP, CommOp::ALL_REDUCE), nullptr);
  EXPECT_EQ(find_comm(plan.comm, CommGroup::EP, CommOp::ALL_REDUCE), nullptr);
}

// MoE parallel folding: tp 2 with sequence parallelism for attention, the experts on the
// expert grid with etp 1 (apart even at ep 1: edp = world = 2, every rank every expert).
// Per microbatch (8 per rank: global 8, dp 1) the tp group runs the dense layer's 6
// all-gathers and 4 reduce-scatters, the MoE layer's attention-only 3 and 2, and the
// embedding's and head's 1 and 1 each; with the aux loss one all-reduce of the E counts.
TEST(ExpertParallelPlan, FoldedOverTensorParallelism) {
  ModelConfig m = tiny_moe();
  ParallelConfig p = grid(2, 1);
  p.tensor_parallel = 2;
  p.sequence_parallel = true;
  p.expert_tensor_parallel = 1;
  const Plan plan = make_plan(m, batch(1, 8), p);
  EXPECT_TRUE(p.experts_apart());
  EXPECT_EQ(p.expert_data_parallel(), 2);
  EXPECT_EQ(plan.expert_data_parallel.layout.total, 576);
  const int64_t k = 8;
  const CommPlanEntry* ag = find_comm(plan.comm, CommGroup::TP, CommOp::ALL_GATHER);
  const CommPlanEntry* rs = find_comm(plan.comm, CommGroup::TP, CommOp::REDUCE_SCATTER);
  ASSERT_NE(ag, nullptr);
  ASSERT_NE(rs, nullptr);
  EXPECT_EQ(ag->calls, k * (6 + 3 + 2));
  EXPECT_EQ(rs->calls, k * (4 + 2 + 2));
  const CommPlanEntry* ar = find_comm(plan.comm, CommGroup::TP, CommOp::ALL_REDUCE);
  m.moe.aux_loss_coeff = 1e-2f;
  const Plan aux = make_plan(m, batch(1, 8), p);
  const CommPlanEntry* ar_aux = find_comm(aux.comm, CommGroup::TP, CommOp::ALL_REDUCE);
  ASSERT_NE(ar, nullptr);
  ASSERT_NE(ar_aux, nullptr);
  EXPECT_EQ(ar_aux->calls - ar->calls, k);
  EXPECT_EQ(ar_aux->payload_bytes - ar->payload_bytes, k * 4 * 4);  // E = 4 int32
  // each tp rank routes N / tp = 2 of the microbatch's 4 tokens: M = N k / tp
  EXPECT_EQ(plan.moe_rows, 2 * 2);
}

// Context parallelism: each cp rank routes its B S/cp tokens (the dispatch, the MoE tensors
// and FLOPs at them), and the aux loss's counts are summed over cp once per MoE layer and
// forward (E int32; B E with seq_aux_loss; twice per microbatch with full recompute). The
// step's FLOPs are the cp ranks' together: the one-rank run's.
TEST(ExpertParallelPlan, ContextParallelRoutesTheRanksTokens) {
  ModelConfig m = tiny_moe();  // S 4: zigzag chunks of one token at cp 2
  m.moe.aux_loss_coeff = 1e-2f;
  ParallelConfig p = grid(2, 1);
  p.context_parallel = 2;
  const int64_t B = 2, k = 4, E = 4, N = B * 4 / 2;  // 4 microbatches of 2 sequences
  const Plan plan = make_plan(m, batch(B, B * k), p);
  EXPECT_EQ(plan.moe_rows, N * 2);  // dropless: M = N k, N = B S/cp
  bool logits = false;
  for (const ActivationTensor& t : plan.moe_layer_activations)
    if (t.name == "moe.logits") {
      logits = true;
      EXPECT_EQ(t.elements, N * E);
    }
  EXPECT_TRUE(logits);
  const CommPlanEntry* ar = find_comm(plan.comm, CommGroup::CP, CommOp::ALL_REDUCE);
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->calls, k);  // the one MoE layer, once per microbatch
  EXPECT_EQ(ar->payload_bytes, k * E * 4);
  m.moe.balancing = Moe::Balancing::SEQ_AUX_LOSS;  // per sequence: the B sequences' counts
  const Plan seq = make_plan(m, batch(B, B * k), p);
  ar = find_comm(seq.comm, CommGroup::CP, CommOp::ALL_REDUCE);
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->payload_bytes, k * B * E * 4);
  m.moe.balancing = Moe::Balancing::AUX_LOSS;
  ModelConfig full = m;
  full.recompute.granularity = Recompute::Granularity::FULL;
  full.recompute.method = Recompute::Method::UNIFORM;
  full.recompute.num_layers = 1;
  ar = find_comm(make_plan(full, batch(B, B * k), p).comm, CommGroup::CP, CommOp::ALL_REDUCE);
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->calls, 2 * k);
  // without the aux loss nothing is summed over cp but attention's
  m.moe.aux_loss_coeff = 0;
  EXPECT_EQ(find_comm(make_plan(m, batch(B, B * k), p).comm, CommGroup::CP, CommOp::ALL_REDUCE),
            nullptr);
  // the step's model FLOPs: the whole model's attention and head, and the two cp ranks' MoE
  // rows (each its B S/cp tokens'): the one-rank step's
  m.moe.aux_loss_coeff = 1e-2f;
  const Plan one = make_plan(m, batch(B, B * k), grid(1, 1));
  EXPECT_DOUBLE_EQ(plan.flops.model_per_step, one.flops.model_per_step);
  // the contiguous layout's cp ranks differ in attention: the step's hardware FLOPs are the
  // two ranks' (dp 1: each runs every microbatch's half)
  p.cp_layout = CpLayout::CONTIGUOUS;
  PlanOptions second;
  second.cp_rank = 1;
  const Plan c0 = make_plan(m, batch(B, B * k), p), c1 = make_plan(m, batch(B, B * k), p, second);
  EXPECT_NE(c0.flops.hardware_per_rank_step, c1.flops.hardware_per_rank_step);
  EXPECT_DOUBLE_EQ(c0.flops.hardware_per_step,
                   c0.flops.hardware_per_rank_step + c1.flops.hardware_per_rank_step);
  EXPECT_DOUBLE_EQ(c1.flops.hardware_per_step, c0.flops.hardware_per_step);
}

// Qwen3-30B-A3B (configs/models/qwen3-30b-a3b.toml) at ep 8 on 64 ranks, bf16, dropless: each
// rank holds 16 of the 128 experts of each of the 48 layers (16 x 4,718,592 x 48 =
// 3,623,878,656 elements) beside the dense 1,541,093,376 (30,532,122,624 - 48 x 603,979,776).
// Per step (16 microbatches of 4096 tokens, top-8, M = 32768, R = M expected) the all-to-all
// moves 16 x 48 x (2 M h e + M 4 + 2 R h e + R 4) bytes: 384 GiB per rank.
TEST(ExpertParallelPlan, Qwen3AtEp8On64Ranks) {
  const ModelConfig m = plan_test::qwen3_30b_a3b();
  const Plan p = make_plan(m, batch(1, 1024, true), grid(64, 8, 1));
  EXPECT_EQ(p.expert_data_parallel.layout.total, 3623878656LL);
  EXPECT_EQ(p.ranks[0].params, 1541093376LL + 3623878656LL);
  EXPECT_EQ(p.microbatches_per_rank, 16);
  const int64_t M = 4096 * 8, h = 2048, e = 2;
  const CommPlanEntry* rows = find_comm(p.comm, CommGroup::EP, CommOp::ALL_TO_ALL_V);
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->payload_bytes, 16 * 48 * (2 * M * h * e + M * 4 + 2 * M * h * e + M * 4));
  EXPECT_EQ(rows->calls, 16 * 48 * 6);
  // ZeRO-1: the experts' states sharded over edp 8, the dense ones over dp 64
  EXPECT_EQ(p.parallel.expert_data_parallel(), 8);
  EXPECT_EQ(p.expert_data_parallel.layout.shard_numel * 8,
            p.expert_data_parallel.layout.padded_total);
}

// The same at tp 2 + sp, etp 1 (folded): the dense part halves (776,943,616 elements a rank:
// attention, embeddings and head split, norms and routers whole), the experts do not; the
// all-to-all's bytes per rank are the same (32 microbatches of N/tp = 2048 tokens routed).
TEST(ExpertParallelPlan, Qwen3AtTp2Etp1Ep8On64Ranks) {
  const ModelConfig m = plan_test::qwen3_30b_a3b();
  ParallelConfig par = grid(64, 8, 1);
  par.tensor_parallel = 2;
  par.sequence_parallel = true;
  par.expert_tensor_parallel = 1;
  const Plan p = make_plan(m, batch(1, 1024, true), par);
  EXPECT_EQ(p.ranks[0].params, 776943616LL + 3623878656LL);
  EXPECT_EQ(p.microbatches_per_rank, 32);
  const int64_t M = 2048 * 8, h = 2048, e = 2;
  const CommPlanEntry* rows = find_comm(p.comm, CommGroup::EP, CommOp::ALL_TO_ALL_V);
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->payload_bytes, 32 * 48 * (4 * M * h * e + 2 * M * 4));
}

}  // namespace
}  // namespace paralab
