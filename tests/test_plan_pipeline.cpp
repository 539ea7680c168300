// tests/test_plan_pipeline.cpp: the plan under pipeline parallelism (plan/plan.h,
// plan_pipeline), counted by hand for small models: the units, parameters, ZeRO shards and
// activations of every stage, its messages and exchanges, and the report's pipeline keys.
// The schedules themselves: test_pipeline_schedule.cpp.
#include <gtest/gtest.h>
#include <string>
#include <vector>
#include "plan/plan.h"
#include "report/report.h"
#include "report/text.h"  // strprintf
#include "report/timeline.h"
#include "model/param_table.h"
#include "parallel/buckets.h"
#include "parallel/zero_schedule.h"
#include "tests/test_plan_helpers.h"

namespace paralab {
namespace {

using plan_test::batch;
using plan_test::find_comm;

ModelConfig gpt(int L) {
  ModelConfig m;
  m.num_layers = L;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.seq_length = 32;
  m.vocab_size = 256;
  return m;
}

ParallelConfig grid(int pp, int dp, int tp = 1, int zero = 0) {
  ParallelConfig p;
  p.world_size = pp * dp * tp;
  p.pipeline_parallel = pp;
  p.tensor_parallel = tp;
  p.zero_stage = zero;
  return p;
}


// gpt, L 4, h 64, a 4, S 32, V 256, micro batch 1 (N = 32 tokens), 4 microbatches, fp32,
// pp 2 with 1F1B: every number below by hand.
constexpr int64_t h = 64, S = 32, V = 256, N = 32;
constexpr int64_t kLayerParams = 12 * h * h + 13 * h;  // qkv, proj, fc1, fc2 + biases, 2 norms
// Flash layer: 16 N h activations (norm1.out, q, k, v, ctx, resid1, norm2.out, out: N h;
// fc1_out, act: 4 N h), two norms' mean + rstd (2 x 2N) and the log-sum-exp (B a S), fp32.
constexpr int64_t kLayerBytes = 4 * (16 * N * h + 4 * N + 4 * S);

TEST(PlanPipeline, StagesByHand) {
  const Plan plan = make_plan(gpt(4), batch(1, 4), grid(2, 1));
  const PipelinePlan& pp = plan.pipeline;
  ASSERT_EQ(pp.stages.size(), 2u);
  EXPECT_EQ(pp.shape.m, 4);
  EXPECT_EQ(pp.stage_layers, (std::vector<int>{2, 2}));
  EXPECT_EQ(plan.activation_bytes_per_layer, kLayerBytes);
  const PipelineStagePlan &s0 = pp.stages[0], &s1 = pp.stages[1];

  // Units: stage 0 the embedding (S h positions + V h words) and layers 0-1; stage 1 layers
  // 2-3 and the head: the final norm (2h) and, tied, a copy of the V h word embedding.
  EXPECT_TRUE(s0.embedding && !s0.head && s1.head && s1.tied_copy && !s1.embedding);
  EXPECT_EQ(s0.unit_begin, (std::vector<int64_t>{0, S * h + V * h, S * h + V * h + kLayerParams,
                                                 S * h + V * h + 2 * kLayerParams}));
  EXPECT_EQ(s0.params, S * h + V * h + 2 * kLayerParams);
  EXPECT_EQ(s1.params, 2 * kLayerParams + 2 * h + V * h);
  EXPECT_EQ(s0.params + s1.params, parameter_count(gpt(4)) + V * h);
  EXPECT_EQ(plan.ranks[0].params, s0.params);
  EXPECT_EQ(plan.ranks[1].params, s1.params);
  EXPECT_EQ(plan.ranks[1].pp_rank, 1);

  // fp32, no ZeRO: params 4, grads 4, Adam 8 bytes per element.
  EXPECT_EQ(s0.memory.params, 4 * s0.params);
  EXPECT_EQ(s1.memory.grads, 4 * s1.params);
  EXPECT_EQ(s1.memory.optimizer_states, 8 * s1.params);
  // 1F1B: stage 0 holds min(p - 0, m) = 2 microbatches of x0 (N h) + 2 layers; stage 1 one
  // of its received input (N h) + 2 layers + the head (final norm stats 2N, d(xf) N h).
  EXPECT_EQ(s0.held, 2);
  EXPECT_EQ(s1.held, 1);
  EXPECT_EQ(s0.chunk_activation_bytes[0], 4 * N * h + 2 * kLayerBytes);
  EXPECT_EQ(s1.chunk_activation_bytes[0], 4 * N * h + 2 * kLayerBytes + 4 * (2 * N + N * h));
  EXPECT_EQ(s0.memory.activations, 2 * (4 * N * h + 2 * kLayerBytes));
  EXPECT_EQ(s1.memory.activations, 4 * N * h + 2 * kLayerBytes + 4 * (2 * N + N * h));
  // Only the last stage runs the loss: one chunk of N rows x V fp32 logits.
  EXPECT_EQ(s0.memory.logits, 0);
  EXPECT_EQ(s1.memory.logits, N * V * 4);
  // Workspace: the common buffers; the forward's int32 tokens on stage 0, targets on stage
  // 1; stage 0's receive buffer for the gradient coming back (N h fp32), none on the last.
  const WorkspacePhases w = workspace_phases(gpt(4), 1, 4);
  EXPECT_EQ(w.forward, 4 * N + 4 * N);
  EXPECT_EQ(w.backward, 4 * N);  // the embedding's backward reads the tokens again
  EXPECT_EQ(s0.memory.workspace, w.common + 4 * N + 4 * N * h);
  EXPECT_EQ(s1.memory.workspace, w.common + 4 * N);
  EXPECT_EQ(s0.memory.comm_buffers, 4 + 8);  // the norm over pp, the loss and stop flag over the world

  // Messages: N h fp32. Stage 0 sends 4 activations, stage 1 4 gradients, in 5 exchanges each:
  // rank 0 runs F0 | F1 B0 F2 B1 F3 B2 | B3 and rank 1 F0 B0 F1 B1 F2 B2 F3 B3.
  EXPECT_EQ(pp.message_bytes, 4 * N * h);
  EXPECT_EQ(s0.activations_sent, 4);
  EXPECT_EQ(s0.gradients_sent, 0);
  EXPECT_EQ(s1.gradients_sent, 4);
  for (const PipelineStagePlan* st : {&s0, &s1}) {
    const CommPlanEntry* p2p = find_comm(st->comm, CommGroup::PP, CommOp::SEND_RECV);
    ASSERT_TRUE(p2p);
    EXPECT_EQ(p2p->calls, 5);
    EXPECT_EQ(p2p->payload_bytes, 4 * 4 * N * h);
    EXPECT_DOUBLE_EQ(p2p->bus_bytes, (double)p2p->payload_bytes);
    EXPECT_EQ(find_comm(st->comm, CommGroup::PP, CommOp::ALL_REDUCE)->payload_bytes, 4);
    // The tied embedding's two copies: their gradients all-reduced once per step.
    const CommPlanEntry* emb = find_comm(st->comm, CommGroup::EMBEDDING, CommOp::ALL_REDUCE);
    ASSERT_TRUE(emb);
    EXPECT_EQ(emb->calls, 1);
    EXPECT_EQ(emb->payload_bytes, 4 * V * h);
  }
  EXPECT_EQ(plan.comm.size(), s0.comm.size());
  // Bubble: (p-1)/(m+p-1) = 1/5 of the step, simulated and closed form.
  EXPECT_NEAR(pp.sim.bubble, 0.2, 1e-12);
  EXPECT_NEAR(pp.closed_form.of_step, 0.2, 1e-12);
}

// ZeRO-1 over dp 2 shards each stage's own vector; ranks: dp inside, pp outside.
TEST(PlanPipeline, ZeroShardsEachStage) {
  const Plan plan = make_plan(gpt(4), batch(1, 8), grid(2, 2, 1, 1));
  ASSERT_EQ(plan.ranks.size(), 4u);
  for (const RankPlan& r : plan.ranks) {
    EXPECT_EQ(r.pp_rank, r.rank / 2);
    EXPECT_EQ(r.dp_rank, r.rank % 2);
    const PipelineStagePlan& st = plan.pipeline.stages[r.pp_rank];
    EXPECT_EQ(r.memory.optimizer_states, (st.params + 1) / 2 * 8);  // one bucket
    EXPECT_EQ(r.memory.total(), st.memory.total());
  }
  const PipelineStagePlan& s1 = plan.pipeline.stages[1];
  const CommPlanEntry* rs = find_comm(s1.comm, CommGroup::DP, CommOp::REDUCE_SCATTER);
  ASSERT_TRUE(rs);
  EXPECT_EQ(rs->payload_bytes, (s1.params + 1) / 2 * 2 * 4);
  EXPECT_EQ(plan.zero_shard, (plan.pipeline.stages[0].params + 1) / 2);
}

// Interleaved p 2, v 2, L 4 (one layer per chunk), m 4: rank 0 warms up (2-0-1) 2 + (2-1) 2
// = 4 chunk-forwards and holds 5 chunks = p v (1 + (p-1)/(p v)), Korthikanti's factor
// over 1F1B's p microbatches of L/p layers.
TEST(PlanPipeline, InterleavedHoldsMegatronsCount) {
  ParallelConfig p = grid(2, 1);
  p.pipeline_schedule = PipelineSchedule::INTERLEAVED;
  p.virtual_pipeline = 2;
  const Plan plan = make_plan(gpt(4), batch(1, 4), p);
  const PipelineStagePlan& s0 = plan.pipeline.stages[0];
  EXPECT_EQ(s0.chunk_first_layer, (std::vector<int>{0, 2}));
  EXPECT_EQ(plan.pipeline.stages[1].chunk_first_layer, (std::vector<int>{1, 3}));
  EXPECT_EQ(s0.held, 5);
  EXPECT_EQ(s0.memory.activations, 5 * (4 * N * h + kLayerBytes));
  const double p_ = 2, v = 2;
  EXPECT_DOUBLE_EQ(s0.held / v, p_ * (1 + (p_ - 1) / (p_ * v)));
  EXPECT_NEAR(plan.pipeline.sim.bubble_vs_ideal, (p_ - 1) / (v * 4), 1e-12);
  // Every F crosses a boundary except the last stage's: 2 chunks x 4 microbatches each.
  EXPECT_EQ(s0.activations_sent, 8);
  EXPECT_EQ(s0.gradients_sent, 4);  // chunk b's B sends to rank 1's chunk a; chunk a's none
}

// model/param_table.h's stage slices, which the trainer and the plan both build from:
// interleaved p 2, v 2 over 4 layers, gpt (tied).
TEST(PlanPipeline, StageSlicesAndUnits) {
  const ModelConfig m = gpt(4);
  const PipelineShape shape{PipelineSchedule::INTERLEAVED, 2, 2, 2};
  const StageSlice s0 = pipeline_stage_slice(m, shape, 0), s1 = pipeline_stage_slice(m, shape, 1);
  EXPECT_EQ(s0.chunk_first_layer, (std::vector<int>{0, 2}));
  EXPECT_EQ(s1.chunk_first_layer, (std::vector<int>{1, 3}));
  EXPECT_TRUE(s0.embedding && !s0.head && !s0.tied_copy);
  EXPECT_TRUE(!s1.embedding && s1.head && s1.tied_copy);
  // units: [embedding] layer 0 | layer 2 on rank 0; layer 1 | layer 3 [head + copy] on rank 1
  EXPECT_EQ(stage_unit_chunk(s0), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(stage_unit_chunk(s1), (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(stage_units(m, 1, s1),
            (std::vector<int64_t>{0, kLayerParams, 2 * kLayerParams, 2 * kLayerParams + 2 * h + V * h}));
  const std::vector<ParamSpec> t1 = stage_param_table(m, 1, s1);
  EXPECT_EQ(t1.front().name, "layers.1.norm1.weight");
  EXPECT_EQ(t1.back().name, "embedding.word");  // the tied copy closes the head unit
  // The whole model is one slice: param_units is its units.
  EXPECT_EQ(stage_units(m, 1, whole_model(m)), param_units(m, 1));
  // The buckets stay inside a chunk: with one big bucket, one per chunk.
  const BucketLayout l = make_bucket_layout(stage_units(m, 1, s0), 0, 1, false,
                                            stage_unit_chunk(s0));
  ASSERT_EQ(l.buckets.size(), 2u);
  EXPECT_EQ(l.buckets[0].unit_lo, 2);
  EXPECT_EQ(l.buckets[1].unit_hi, 1);
  EXPECT_EQ(prefetch_window(1, true, 3, 2, stage_unit_chunk(s0)), std::vector<int>{});
}

// ZeRO-2 under 1F1B, p 2, dp 2, gpt: the tied word embedding's buckets (stage 0's unit 0,
// stage 1's head with the copy) are deferred: written every microbatch, reduced once, at
// the step's end, after the embedding group summed them; the other buckets reduce in every
// backward.
TEST(PlanPipeline, ZeroTwoDefersTheTiedEmbedding) {
  PlanOptions o;
  o.ddp_bucket_size = 1;  // a bucket per unit
  const Plan plan = make_plan(gpt(4), batch(1, 8), grid(2, 2, 1, 2), o);
  const int64_t k = 4;  // microbatches per rank
  for (const PipelineStagePlan& st : plan.pipeline.stages) {
    const DataParallelPlan& d = st.data_parallel;
    ASSERT_EQ(d.layout.buckets.size(), 3u);
    EXPECT_EQ(d.sim.grad_reductions, 2 * k + 1) << "stage " << st.pp_rank;
    const CommPlanEntry* rs = find_comm(st.comm, CommGroup::DP, CommOp::REDUCE_SCATTER);
    ASSERT_TRUE(rs);
    EXPECT_EQ(rs->calls, 2 * k + 1);
    const CommPlanEntry* e = find_comm(st.comm, CommGroup::EMBEDDING, CommOp::ALL_REDUCE);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->payload_bytes, V * h * 4);
  }
  // The deferred bucket's buffer lives the whole step: stage 0's peak holds unit 0's
  // (padded to dp) beside one layer's.
  const DataParallelPlan& d0 = plan.pipeline.stages[0].data_parallel;
  const int64_t embedding = d0.layout.buckets[d0.layout.bucket_of[0]].padded;
  const int64_t layer = d0.layout.buckets[d0.layout.bucket_of[1]].padded;
  EXPECT_EQ(d0.sim.grads_transient_peak, embedding + layer);
}

// Uneven stages, llama (untied: the head owns output.weight, no embedding group), tp + sp:
// a message is N/t h.
TEST(PlanPipeline, UnevenLlamaTensorParallel) {
  ModelConfig m = gpt(6);
  m.arch = Arch::LLAMA;
  ParallelConfig p = grid(3, 1, 2);
  p.sequence_parallel = true;
  p.first_stage_layers = 1;
  p.last_stage_layers = 1;
  const Plan plan = make_plan(m, batch(2, 4), p);
  EXPECT_EQ(plan.pipeline.stage_layers, (std::vector<int>{1, 4, 1}));
  EXPECT_EQ(plan.pipeline.message_bytes, 2 * N / 2 * h * 4);
  const std::vector<int64_t> u = param_units(m, 2);  // embedding, 6 layers, head
  EXPECT_EQ(plan.pipeline.stages[1].params, u[5] - u[1]);
  EXPECT_EQ(plan.pipeline.stages[2].params, u[8] - u[6]);
  EXPECT_FALSE(plan.pipeline.stages[2].tied_copy);
  for (const PipelineStagePlan& st : plan.pipeline.stages)
    EXPECT_FALSE(find_comm(st.comm, CommGroup::EMBEDDING, CommOp::ALL_REDUCE));
  // tp + sp on the middle stage: 4 layers of (6 all-gathers + 4 reduce-scatters) per
  // microbatch, no embedding or head.
  const CommPlanEntry* ag = find_comm(plan.pipeline.stages[1].comm, CommGroup::TP, CommOp::ALL_GATHER);
  ASSERT_TRUE(ag);
  EXPECT_EQ(ag->calls, 2 * 6 * 4);
  ParallelConfig bad = p;
  bad.first_stage_layers = 4;  // 4 + 3 > 6 layers
  bad.last_stage_layers = 3;
  EXPECT_THROW(make_plan(m, batch(2, 4), bad), std::invalid_argument);
}

TEST(PlanPipeline, ReportKeys) {
  const Plan plan = make_plan(gpt(4), batch(1, 4), grid(2, 1));
  const std::string j = plan_json(plan, nullptr, false);
  for (const char* key :
       {"\"pipeline\":{\"schedule\":\"1f1b\",\"p\":2,\"m\":4,\"v\":1", "\"bubble_simulated\":",
        "\"bubble_closed_form\":", "\"bubble_formula\":\"(p-1)/(m+p-1)\"",
        "\"per_rank\":[{\"pp_rank\":0", "\"held\":2", "\"idle\":", "\"exchanges\":5",
        "\"tied_embedding_copy\":true", "\"dp_rank\":0,\"pp_rank\":1",
        "{\"group\":\"pp\",\"op\":\"send/recv\",\"calls\":5"})
    EXPECT_NE(j.find(key), std::string::npos) << key;
  const std::string t = plan_text(plan, nullptr);
  for (const char* line : {"pipeline 1f1b | p 2 stages x m 4 microbatches",
                           "simulated 20.00% of the step", "closed form (p-1)/(m+p-1): 20.00%",
                           "memory, rank 1 (MiB)", "1f1b stage 1 holds 1",
                           "communication per step, each rank of stage 1 (predicted)",
                           "embedding all-reduce"})
    EXPECT_NE(t.find(line), std::string::npos) << line << "\n" << t;
  // Without pipelining: no pipeline section, the single-stage schedule still planned.
  const Plan one = make_plan(gpt(4), batch(1, 4), grid(1, 1));
  EXPECT_TRUE(one.pipeline.stages.empty());
  EXPECT_EQ(plan_json(one, nullptr, false).find("\"pipeline\""), std::string::npos);
  EXPECT_EQ(one.pipeline.sim.bubble, 0);
  EXPECT_EQ(render_timeline(one.pipeline.schedule, one.pipeline.sim, one.pipeline.costs)
                .find("rank 0: F0 B0       F1 B1"),
            std::string("timeline, simulated: 1f1b, p 1, m 4; F 1, B 3 (input + weight "
                        "gradient) cost units, 1 unit = 3 columns; '.' idle\n").size());
}

// The peak of a stage's total under ZeRO-2/3 (plan/total.cpp, replayed_stage_total): each
// compute beside the buffers alive then. Without transients (ZeRO 0-1) the walk is
// stage_total_peak's replay, term for term, for every schedule (no recompute), both losses,
// both precisions, tp; with them it is below the replay that
// holds them at their peak (tests/mpi/pipeline.sh holds it to the ledger on every rank).
TEST(PlanPipeline, ZeroTransientsReplayedPerCompute) {
  for (PipelineSchedule kind :
       {PipelineSchedule::GPIPE, PipelineSchedule::ONE_F_ONE_B, PipelineSchedule::INTERLEAVED})
    for (bool fused : {true, false})
      for (bool bf16 : {false, true})
        for (int tp : {1, 2})
          for (int z = 0; z <= 3; ++z) {
            ModelConfig m = gpt(4);
            m.fused_cross_entropy = fused;
            ParallelConfig par = grid(2, 2, tp, z);
            par.pipeline_schedule = kind;
            par.virtual_pipeline = kind == PipelineSchedule::INTERLEAVED ? 2 : 1;
            PlanOptions o;
            o.ddp_bucket_size = 5000;
            const Plan plan = make_plan(m, batch(1, 8, bf16), par, o);
            SCOPED_TRACE(std::string(schedule_name(kind)) + " fused " + std::to_string(fused) +
                         " bf16 " + std::to_string(bf16) + " tp " + std::to_string(tp) +
                         " stage " + std::to_string(z));
            for (const PipelineStagePlan& st : plan.pipeline.stages) {
              const MemoryPlan& mem = st.memory;
              ASSERT_GT(mem.total_replayed, 0);
              EXPECT_EQ(mem.total(), mem.total_replayed);
              if (z < 2) {
                EXPECT_EQ(mem.total_replayed, mem.total_stage);
              } else {
                EXPECT_LE(mem.total_replayed, mem.total_stage);
              }
            }
          }
  // zb-h1 (split backward) too: each B beside the copies it makes for W, each W beside the
  // keeps still held; equal to stage_total_peak at ZeRO 0-1, below it at ZeRO-2/3
  for (int z = 0; z <= 3; ++z) {
    ParallelConfig zb = grid(2, 2, 1, z);
    zb.pipeline_schedule = PipelineSchedule::ZB_H1;
    SCOPED_TRACE("zb-h1 stage " + std::to_string(z));
    for (const PipelineStagePlan& st : make_plan(gpt(4), batch(1, 8), zb).pipeline.stages) {
      ASSERT_GT(st.memory.total_replayed, 0);
      if (z < 2) EXPECT_EQ(st.memory.total_replayed, st.memory.total_stage);
      else EXPECT_LE(st.memory.total_replayed, st.memory.total_stage);
    }
  }
  // recompute keeps stage_total_peak
  ModelConfig selective = gpt(4);
  selective.recompute.granularity = Recompute::Granularity::SELECTIVE;
  EXPECT_EQ(make_plan(selective, batch(1, 8), grid(2, 1)).pipeline.stages[0].memory.total_replayed,
            0);
}

// MoE stages (plan/moe_memory.h): each layer's workspace transients live inside that layer's
// forward or backward only (model/moe.cpp's Buffer scopes), so the stage's total peaks where
// one layer's transients sit beside what is held then, not beside the loss's logits. GPipe on
// the last stage (layers 2-3 and the head; fused loss, ZeRO-0, k microbatches of kept_c
// bytes, in = N h act received per chunk), by hand:
//   F of the k-th   base + common + targets + (k-1) kept_c + in + [saved_2 +] layer 2's
//                   [3's] forward peak (its tensors + its forward transients)
//   loss            base + common + targets + k kept_c + the loss's logits
//   B of the first  base + common + (k-1) kept_c + in + saved_2 [+ saved_3] + layer 2's
//                   [3's] backward transients
// zb-h1 takes the same replay (tests/mpi/moe.sh holds both to the ledger).
TEST(PlanPipeline, MoeTransientsInsideTheirLayer) {
  ModelConfig m = gpt(4);
  m.moe.num_experts = 4;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 32;
  m.moe.aux_loss_coeff = 1e-2f;
  m.moe.z_loss_coeff = 1e-3f;
  ParallelConfig par = grid(2, 1);
  par.pipeline_schedule = PipelineSchedule::GPIPE;
  const int64_t k = 4;
  const Plan plan = make_plan(m, batch(1, k), par);
  const PipelineStagePlan& st = plan.pipeline.stages[1];
  const MemoryPlan& mem = st.memory;
  const int64_t base =
      mem.params + mem.grads + mem.master_params + mem.optimizer_states + mem.comm_buffers;
  const int64_t common = workspace_phases(m, 1, 4).common, targets = 4 * N;
  const int64_t in = N * h * 4, kept = st.chunk_activation_bytes[0];
  const LayerFootprint &f2 = plan.footprint(0, 2), &f3 = plan.footprint(0, 3);
  ASSERT_GT(f2.backward_transient, 0);
  ASSERT_GT(f2.forward_peak, f2.saved);
  EXPECT_EQ(kept, in + f2.saved + f3.saved + sum_bytes(plan.head_activations));
  const int64_t held = base + common + (k - 1) * kept + in;
  const int64_t expected = std::max(
      {held + targets + f2.forward_peak, held + targets + f2.saved + f3.forward_peak,
       base + common + targets + k * kept + logits_bytes(m, 1, false),
       held + f2.saved + f3.saved + f3.backward_transient,
       held + f2.saved + f2.backward_transient});
  // the transients decide the peak here: without them it would be lower
  EXPECT_GT(expected, std::max(base + common + targets + k * kept + logits_bytes(m, 1, false),
                               held + targets + f2.saved + f3.saved));
  EXPECT_EQ(mem.total(), expected);
  EXPECT_EQ(mem.total_replayed, expected);
  EXPECT_LE(mem.total_replayed, mem.total_stage);  // transients at their peaks: a bound

  par.pipeline_schedule = PipelineSchedule::ZB_H1;
  for (const PipelineStagePlan& z : make_plan(m, batch(1, k), par).pipeline.stages) {
    ASSERT_GT(z.memory.total_replayed, 0);
    EXPECT_EQ(z.memory.total(), z.memory.total_replayed);
    EXPECT_LE(z.memory.total_replayed, z.memory.total_stage);
  }
}

// One convention for the unit costs (plan.h, PipelinePlan::costs): a B that also makes the
// weight gradient costs 3 (W 0); split into B and W, 2 and 1. JSON and text agree.
TEST(PlanPipeline, CostsOneConvention) {
  const Plan one = make_plan(gpt(4), batch(1, 4), grid(2, 1));
  EXPECT_EQ(one.pipeline.costs.B, 3);
  EXPECT_EQ(one.pipeline.costs.W, 0);
  EXPECT_NE(plan_json(one, nullptr, false).find("\"F\":1,\"B\":3,\"W\":0,\"split_backward\":false"),
            std::string::npos);
  ParallelConfig zb = grid(2, 1);
  zb.pipeline_schedule = PipelineSchedule::ZB_H1;
  const Plan split = make_plan(gpt(4), batch(1, 4), zb);
  EXPECT_EQ(split.pipeline.costs.B, 2);
  EXPECT_EQ(split.pipeline.costs.W, 1);
  EXPECT_NE(plan_json(split, nullptr, false).find("\"F\":1,\"B\":2,\"W\":1,\"split_backward\":true"),
            std::string::npos);
  // the same step time as before the convention: F 1 + B 3 per microbatch on one stage
  EXPECT_EQ(one.pipeline.sim.step_time, (4 + 2 - 1) * 4.0);
}

// The FLOPs table at pp 2: the matmul rows and the total are the whole model; each stage's
// row is what its ranks run, model and hardware alike, and the stages sum to the total.
TEST(PlanPipeline, FlopsTableOneScopePerRow) {
  ModelConfig m = gpt(4);
  m.recompute.granularity = Recompute::Granularity::SELECTIVE;
  m.recompute.core_attn = true;
  const Plan plan = make_plan(m, batch(1, 4), grid(2, 1));
  const Plan whole = make_plan(m, batch(1, 4), grid(1, 1));
  const PipelinePlan& pp = plan.pipeline;
  double model = 0, hardware = 0;
  for (const PipelineStagePlan& st : pp.stages) model += st.model_flops, hardware += st.hardware_flops;
  EXPECT_DOUBLE_EQ(model, whole.flops.model_per_rank_step);
  EXPECT_DOUBLE_EQ(hardware, whole.flops.hardware_per_rank_step);
  // rank 0's per-rank numbers are stage 0's, both of them
  EXPECT_DOUBLE_EQ(plan.flops.model_per_rank_step, pp.stages[0].model_flops);
  EXPECT_DOUBLE_EQ(plan.flops.hardware_per_rank_step, pp.stages[0].hardware_flops);
  EXPECT_LT(pp.stages[0].model_flops, pp.stages[1].model_flops);  // the head on stage 1
  const std::string t = flops_table(plan, 2 - 1, nullptr);
  for (const std::string& line :
       {strprintf("%-42s %12s %12s", "total, whole model (the stages' sum)",
                  format_si(model).c_str(), format_si(hardware).c_str()),
        strprintf("%-42s %12s %12s\n", "stage 0: 2 layers + embedding",
                  format_si(pp.stages[0].model_flops).c_str(),
                  format_si(pp.stages[0].hardware_flops).c_str()),
        std::string("   <- rank 1, each rank of its stage\n")})
    EXPECT_NE(t.find(line), std::string::npos) << line << "\n" << t;
}

}  // namespace
}  // namespace paralab

namespace paralab {
namespace {

ParallelConfig scheduled(int pp, int dp, PipelineSchedule kind, int zero = 0) {
  ParallelConfig p = grid(pp, dp, 1, zero);
  p.pipeline_schedule = kind;
  p.virtual_pipeline = placement_of(kind) == StagePlacement::LOOPED ? 1 : 2;
  return p;
}

// The V (zb-v, dualpipev): rank 0 holds model stages 0 and 2p - 1, so the embedding and the
// head (gpt's tied table once: no copy, no embedding all-reduce); rank p - 1 the turn, whose
// hand-over is no message. The tokens and the targets are read by two forwards of rank 0:
// its workspace holds one of them at a time.
TEST(PlanPipeline, VPlacementHoldsBothEndsOnRankZero) {
  for (PipelineSchedule kind : {PipelineSchedule::ZB_V, PipelineSchedule::DUALPIPE_V}) {
    const Plan plan = make_plan(gpt(8), batch(1, 8), scheduled(2, 1, kind));
    const PipelineStagePlan& r0 = plan.pipeline.stages[0];
    const PipelineStagePlan& r1 = plan.pipeline.stages[1];
    EXPECT_TRUE(r0.embedding && r0.head && !r0.tied_copy);
    EXPECT_TRUE(!r1.embedding && !r1.head);
    EXPECT_EQ(r0.chunk_first_layer, (std::vector<int>{0, 6}));  // stages 0 and 3
    EXPECT_EQ(r1.chunk_first_layer, (std::vector<int>{2, 4}));  // stages 1 and 2
    for (const PipelineStagePlan& st : plan.pipeline.stages)
      EXPECT_EQ(find_comm(st.comm, CommGroup::EMBEDDING, CommOp::ALL_REDUCE), nullptr);
    // every microbatch crosses rank 0 -> 1 and back: m activations and m gradients each way
    EXPECT_EQ(r0.activations_sent, 8);
    EXPECT_EQ(r0.gradients_sent, 8);
    EXPECT_EQ(r1.activations_sent, 8);  // stage 2 -> 3; stage 1 -> 2 stays on rank 1
    EXPECT_EQ(r1.gradients_sent, 8);
    const WorkspacePhases one = workspace_phases(gpt(8), 1, 4);
    const WorkspacePhases two = workspace_phases(gpt(8), 1, 4, 1, false, true, true, false);
    EXPECT_EQ(one.forward - two.forward, 4 * N);  // tokens + targets against the larger one
  }
}

// DualPipe: every rank holds two stages (2x the parameters of 1F1B's stage), the pair r,
// p - 1 - r the same two and one all-reduce of its gradient buffer over the mirror group;
// each rank holds PP + 1 = p + 1 (microbatch, chunk) pairs at its peak (DeepSeek-V3 Table 2).
TEST(PlanPipeline, DualPipeMirrorsTheStages) {
  for (int zero : {0, 1, 2, 3}) {
    SCOPED_TRACE(zero);
    const Plan one = make_plan(gpt(8), batch(1, 16), grid(4, 2, 1, zero));
    const Plan dual =
        make_plan(gpt(8), batch(1, 16), scheduled(4, 2, PipelineSchedule::DUALPIPE, zero));
    const auto& s = dual.pipeline.stages;
    // both ends: 1F1B's first and last stage but its tied copy of the word table (V h)
    EXPECT_EQ(s[0].params, one.pipeline.stages[0].params + one.pipeline.stages[3].params - V * h);
    EXPECT_EQ(s[0].params, s[3].params);
    EXPECT_EQ(s[1].params, s[2].params);
    EXPECT_EQ(s[0].chunk_first_layer, s[3].chunk_first_layer);  // the mirror: the same stages
    for (const PipelineStagePlan& st : s) {
      EXPECT_EQ(st.held, 4 + 1);
      const CommPlanEntry* e = find_comm(st.comm, CommGroup::MIRROR, CommOp::ALL_REDUCE);
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->calls, 1);
      EXPECT_EQ(e->payload_bytes, st.data_parallel.grads_resident * 4);
      EXPECT_EQ(find_comm(st.comm, CommGroup::EMBEDDING, CommOp::ALL_REDUCE), nullptr);
    }
    // each direction's half: every rank sends m/2 activations and m/2 gradients each way
    EXPECT_EQ(s[1].activations_sent, 8);
    EXPECT_EQ(s[1].gradients_sent, 8);
  }
}

// Megatron's --account-for-embedding/loss-in-pipeline-split: (L + 2) / p layers a rank, the
// first and the last model stage one fewer; the plan's stages are the slices the trainer
// builds.
TEST(PlanPipeline, AccountedSplit) {
  ParallelConfig p = grid(4, 1);
  p.account_for_embedding = p.account_for_loss = true;
  const Plan plan = make_plan(gpt(10), batch(1, 4), p);
  EXPECT_EQ(plan.pipeline.stage_layers, (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(plan.pipeline.stages[3].chunk_layers, (std::vector<int>{2}));
  EXPECT_EQ(plan.pipeline.stages[3].chunk_first_layer, (std::vector<int>{8}));
  // Megatron's premise: the embedding and the loss cost a layer each, so the stages balance
  EXPECT_EQ(plan.pipeline.costs.stage_F, (std::vector<double>{1, 1, 1, 1}));
  // first 1, last 3 of 8: the simulation costs each stage by its layers (0.5 1 1 1.5 of
  // the mean), the slowest stage sets the pace, and the bubble grows past the closed form's
  ParallelConfig uneven = grid(4, 1);
  uneven.first_stage_layers = 1, uneven.last_stage_layers = 3;
  const Plan u = make_plan(gpt(8), batch(1, 4), uneven);
  EXPECT_EQ(u.pipeline.costs.stage_B, (std::vector<double>{1.5, 3, 3, 4.5}));
  const Plan even = make_plan(gpt(8), batch(1, 4), grid(4, 1));
  EXPECT_TRUE(even.pipeline.costs.stage_F.empty());
  EXPECT_GT(u.pipeline.sim.bubble, even.pipeline.sim.bubble);
  EXPECT_NEAR(u.pipeline.closed_form.of_step, even.pipeline.closed_form.of_step, 1e-12);
}

}  // namespace
}  // namespace paralab
