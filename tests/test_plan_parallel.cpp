// tests/test_plan_parallel.cpp: the plan under tensor and sequence parallelism against
// notes/model.md ("Tensor parallelism"), counted by hand, and against the closed forms of
// Korthikanti et al. 2022 (Table 2) and Narayanan et al. SC21 (notes/formulas.md). The
// single-rank plan is tested in test_plan.cpp, the data-parallel one in test_plan_zero.cpp.
#include <gtest/gtest.h>
#include <chrono>
#include <string>
#include <vector>
#include "plan/gemm_calls.h"
#include "plan/plan.h"
#include "report/report.h"
#include "model/param_table.h"
#include "tests/test_plan_helpers.h"

namespace paralab {
namespace {

using namespace plan_test;  // gpt, llama, batch, find_comm

// world = tp x dp (no pipeline or context parallelism yet).
ParallelConfig grid(int tp, int dp, bool sp = false, int zero = 0) {
  ParallelConfig p;
  p.world_size = tp * dp;
  p.tensor_parallel = tp;
  p.sequence_parallel = sp;
  p.zero_stage = zero;
  return p;
}

// Korthikanti's configuration: GPT, both dropouts on (1-byte masks), naive attention,
// 16-bit activations. Then the plan's layer, norm statistics left out, is exactly
// sbh(10 + 24/t + 5as/(ht)) under tp and sbh(34/t + 5as/(ht)) under tp + sp.
TEST(PlanTensorParallel, ActivationsMatchKorthikanti) {
  struct Shape { int L, h, a, s, b; };
  for (const Shape& sh : {Shape{2, 64, 8, 32, 1}, Shape{1, 128, 16, 64, 3},
                          Shape{2, 96, 8, 40, 2}})
    for (int t : {1, 2, 4, 8})
      for (bool sp : {false, true}) {
        ModelConfig m = gpt(sh.L, sh.h, sh.a, sh.s, 256);
        m.attention = AttentionImpl::NAIVE;
        m.attention_dropout = 0.1f;
        m.hidden_dropout = 0.1f;
        const Plan p = make_plan(m, batch(sh.b, sh.b, true), grid(t, 1, sp));
        SCOPED_TRACE("h " + std::to_string(sh.h) + " t " + std::to_string(t) + " sp " +
                     std::to_string(sp));
        const double s = sh.s, b = sh.b, h = sh.h, a = sh.a;
        const double closed = sp ? korthikanti_tp_sp_bytes(s, b, h, a, t)
                                 : korthikanti_tp_bytes(s, b, h, a, t);
        EXPECT_DOUBLE_EQ((double)sum_bytes(p.layer_activations, false), closed);
        const KorthikantiCheck k = korthikanti_check(p);
        EXPECT_TRUE(k.applicable());
        EXPECT_EQ((double)k.plan_bytes, closed);
        // On top: LayerNorm mean + rstd (fp32) of the tokens a rank holds, two norms.
        const int64_t tokens = sh.b * sh.s / (sp && t > 1 ? t : 1);
        EXPECT_EQ(k.norm_statistics_bytes, 2 * 2 * tokens * 4);
        EXPECT_EQ(k.formula, t == 1 ? "sbh(34 + 5as/h)"
                             : sp   ? "sbh(34/t + 5as/(ht))"
                                    : "sbh(10 + 24/t + 5as/(ht))");
        if (t == 1) {
          EXPECT_DOUBLE_EQ(closed, korthikanti_layer_bytes(s, b, h, a));
        }

        // Flash keeps no a s s tensor: the 5as/(ht) term is gone, an fp32 log-sum-exp of
        // b (a/t) s rows takes its place.
        m.attention = AttentionImpl::FLASH;
        const KorthikantiCheck f = korthikanti_check(make_plan(m, batch(sh.b, sh.b, true),
                                                               grid(t, 1, sp)));
        const double selective = sp ? korthikanti_tp_sp_selective_bytes(s, b, h, t)
                                    : korthikanti_tp_selective_bytes(s, b, h, t);
        EXPECT_DOUBLE_EQ(f.closed_form_bytes, selective);
        EXPECT_DOUBLE_EQ((double)f.plan_bytes - selective, 4 * b * (a / t) * s);
        ASSERT_EQ(f.differences.size(), 1u);
        EXPECT_NE(f.differences[0].find("flash attention"), std::string::npos);
      }
}

// What breaks the paper's assumptions is named, one entry each.
TEST(PlanTensorParallel, KorthikantiNamesWhatDiffers) {
  ModelConfig m = gpt(2, 64, 8, 32, 256);
  m.attention = AttentionImpl::NAIVE;
  const KorthikantiCheck k = korthikanti_check(make_plan(m, batch(1, 1), grid(2, 1)));
  ASSERT_EQ(k.differences.size(), 3u);  // fp32, no hidden dropout, no attention dropout
  EXPECT_NE(k.differences[0].find("fp32"), std::string::npos);
  EXPECT_NE(k.differences[1].find("hidden dropout"), std::string::npos);
  EXPECT_NE(k.differences[2].find("attention dropout"), std::string::npos);
  const KorthikantiCheck l =
      korthikanti_check(make_plan(llama(2, 64, 8, 4, 160, 32, 256), batch(1, 1, true),
                                  grid(2, 1)));
  EXPECT_NE(l.differences[0].find("llama"), std::string::npos);
  EXPECT_NE(l.differences[1].find("ffn 160"), std::string::npos);
  EXPECT_NE(l.differences[2].find("GQA"), std::string::npos);
}

// Per rank: the local table. Its t copies hold the model once, the vocabulary padding
// rows (Vp - V) h per vocabulary tensor, and t - 1 extra copies of the replicated tensors
// (gpt: per layer norm1, norm2 weights and biases, proj and fc2 biases, 6h; the position
// embedding S h; the final norm 2h. llama: 2h per layer, h).
TEST(PlanTensorParallel, ParamsPerRank) {
  for (bool is_gpt : {true, false})
    for (int t : {1, 2, 4, 8}) {
      const ModelConfig m = is_gpt ? gpt(3, 64, 8, 32, 257) : llama(3, 64, 8, 8, 96, 32, 257);
      const int64_t L = 3, h = 64, S = 32, V = 257, Vp = (V + t - 1) / t * t;
      const int64_t replicated = is_gpt ? L * 6 * h + S * h + 2 * h : L * 2 * h + h;
      const int64_t vocab_tensors = is_gpt ? 1 : 2;
      const Plan p = make_plan(m, batch(1, 2, true), grid(t, 2, false, 1));
      SCOPED_TRACE(std::string(is_gpt ? "gpt" : "llama") + " t " + std::to_string(t));
      EXPECT_EQ(p.params_total, parameter_count(m));
      EXPECT_EQ(p.padded_vocab, Vp);
      EXPECT_EQ(p.ranks[0].params * t,
                p.params_total + vocab_tensors * (Vp - V) * h + (t - 1) * replicated);
      // ZeRO-1 over dp 2 shards the local vector: one bucket, padded to a multiple of 2.
      const int64_t local = p.ranks[0].params;
      EXPECT_EQ(p.data_parallel.layout.total, local);
      EXPECT_EQ(p.zero_shard, (local + 1) / 2);
      EXPECT_EQ(p.ranks[0].memory.optimizer_states, (local + 1) / 2 * 8);
      // Ranks: tp fastest, then dp; every rank holds the same.
      ASSERT_EQ((int)p.ranks.size(), 2 * t);
      for (const RankPlan& r : p.ranks) {
        EXPECT_EQ(r.tp_rank, r.rank % t);
        EXPECT_EQ(r.dp_rank, r.rank / t);
        EXPECT_EQ(r.memory.total(), p.ranks[0].memory.total());
      }
      const std::string note = "vocab 257 padded to " + std::to_string(Vp) + " for tp " +
                               std::to_string(t);
      EXPECT_EQ(plan_text(p, nullptr).find(note) != std::string::npos, Vp != V) << note;
      EXPECT_EQ(memory_table(p, 0, nullptr).find(note) != std::string::npos, Vp != V);
    }
  // ZeRO-3 over dp: one bucket per unit of the LOCAL vector (param_units(m, t)).
  const ModelConfig m = gpt(2, 64, 8, 32, 257);
  const Plan z3 = make_plan(m, batch(1, 2), grid(4, 2, true, 3));
  const std::vector<int64_t> u = param_units(m, 4);
  int64_t shard = 0;
  for (size_t i = 0; i + 1 < u.size(); ++i) shard += (u[i + 1] - u[i] + 1) / 2;
  EXPECT_EQ(z3.zero_shard, shard);
  EXPECT_EQ(z3.data_parallel.layout.buckets.size(), u.size() - 1);
}

// notes/model.md "Tensor parallelism", element by element for one small gpt, tp 2, fp32:
// naive attention, V = 255 padded to 256 (V_l = 128), N = 64 tokens, N_l = 32 with sp.
TEST(PlanTensorParallel, MemoryFollowsNotes) {
  ModelConfig m = gpt(2, 64, 4, 32, 255);
  m.attention = AttentionImpl::NAIVE;
  const int64_t B = 2, S = 32, N = 64, h = 64, a_l = 2, d = 16, f_l = 128, V_l = 128;
  for (bool sp : {false, true}) {
    const int64_t Nl = sp ? N / 2 : N;
    SCOPED_TRACE(sp ? "sp" : "tp");
    m.fused_cross_entropy = true;
    const Plan p = make_plan(m, batch(B, B), grid(2, 1, sp));
    EXPECT_EQ(p.sequence_parallel, sp);
    // Layer: stats 2 N_l per norm (fp32); norm1 out, resid1, norm2 out, out: N_l h;
    // q, k, v, ctx: N a_l d; P: B a_l S S; fc1 out, act: N f_l.
    EXPECT_EQ(p.activation_bytes_per_layer,
              4 * (2 * 2 * Nl + 4 * Nl * h + 4 * N * a_l * d + B * a_l * S * S + 2 * N * f_l));
    EXPECT_EQ(sum_bytes(p.embedding_activations), 4 * Nl * h);
    EXPECT_EQ(sum_bytes(p.head_activations), 4 * (2 * Nl + Nl * h));  // stats, d(xf)
    const MemoryPlan& mem = p.ranks[1].memory;
    EXPECT_EQ(mem.logits, N * V_l * 4);  // one chunk of min(N, 1024) rows, local columns
    // dres N_l h, tmp_h N h, [tmp_l N_l h, gathered N h], qkv N (a_l + 2 g_l) d,
    // o_heads dctx do_heads dq dk dv N a_l d, dact dfc1 N f_l, losses N, loss scratch 3N,
    // scores dprobs B a_l S S, xf N h [xf_local N_l h, dxf_full N h], tokens, targets N.
    const int64_t ws = Nl * h + N * h + (sp ? Nl * h + N * h : 0) + N * 3 * a_l * d +
                       6 * N * a_l * d + 2 * N * f_l + N + 3 * N + 2 * B * a_l * S * S +
                       N * h + (sp ? Nl * h + N * h : 0) + 2 * N;
    EXPECT_EQ(mem.workspace, 4 * ws);
    EXPECT_EQ(mem.params, p.ranks[0].params * 4);
    // --no-fused-ce: xf (N_l h) saved; dxf (N h) in workspace instead of xf and, with sp,
    // xf_local and dxf_full; all N rows of the local logits. d(xf) lives in the head's
    // backward only, the int32 tokens and targets in the forward only: the larger counts.
    m.fused_cross_entropy = false;
    const Plan u = make_plan(m, batch(B, B, true), grid(2, 1, sp));
    EXPECT_EQ(sum_bytes(u.head_activations), 4 * 2 * Nl + 2 * Nl * h);
    EXPECT_EQ(u.ranks[0].memory.logits, N * V_l * (4 + 2));
    EXPECT_EQ(u.ranks[0].memory.workspace,
              2 * (ws - 4 * N - 2 * N - (sp ? Nl * h + N * h : 0)) + 4 * (4 * N));
  }
  // Sequence parallelism at tp 1 is off, as in Megatron.
  EXPECT_FALSE(make_plan(m, batch(B, B), grid(1, 1, true)).sequence_parallel);
}

// The tp group's calls of one step, by hand from notes/model.md: gpt and llama, tp 2 and 4,
// fp32 and bf16, 3 microbatches, loss chunks of 24 rows (N = 64: chunks of 24, 24, 16).
TEST(PlanTensorParallel, CommunicationByHand) {
  for (bool is_gpt : {true, false})
    for (int t : {2, 4})
      for (bool bf16 : {false, true}) {
        ModelConfig m = is_gpt ? gpt(2, 64, 4, 32, 256) : llama(2, 64, 4, 4, 128, 32, 256);
        m.cross_entropy_chunk = 24;
        const int64_t L = 2, N = 64, h = 64, S = 32, k = 3, e = bf16 ? 2 : 4, Nh = N * h;
        const int64_t loss_calls = 2 * 3, loss_bytes = 4 * N + 4 * 2 * N;  // MAX c, SUM 2c
        const double ring = double(t - 1) / t;
        SCOPED_TRACE(std::string(is_gpt ? "gpt" : "llama") + " t " + std::to_string(t) +
                     " bf16 " + std::to_string(bf16));

        const Plan tp = make_plan(m, batch(2, 2 * k, bf16), grid(t, 1));
        const CommPlanEntry* ar = find_comm(tp, CommGroup::TP, CommOp::ALL_REDUCE);
        ASSERT_TRUE(ar);
        EXPECT_FALSE(find_comm(tp, CommGroup::TP, CommOp::ALL_GATHER));
        EXPECT_FALSE(find_comm(tp, CommGroup::TP, CommOp::REDUCE_SCATTER));
        // 4 per layer, the embedding's, d(xf)'s, the loss chunks'; + the gradient norm.
        EXPECT_EQ(ar->calls, k * (4 * L + 2 + loss_calls) + 1);
        EXPECT_EQ(ar->payload_bytes, k * ((4 * L + 2) * Nh * e + loss_bytes) + 4);
        EXPECT_DOUBLE_EQ(ar->bus_bytes, 2 * ring * ar->payload_bytes);

        const Plan sp = make_plan(m, batch(2, 2 * k, bf16), grid(t, 1, true));
        const CommPlanEntry* sar = find_comm(sp, CommGroup::TP, CommOp::ALL_REDUCE);
        const CommPlanEntry* ag = find_comm(sp, CommGroup::TP, CommOp::ALL_GATHER);
        const CommPlanEntry* rs = find_comm(sp, CommGroup::TP, CommOp::REDUCE_SCATTER);
        ASSERT_TRUE(sar && ag && rs);
        // Forward 2 AG + 2 RS, backward 4 AG + 2 RS per layer; embedding RS x0, AG d(x0);
        // head AG xf, RS d(xf).
        EXPECT_EQ(ag->calls, k * (6 * L + 2));
        EXPECT_EQ(ag->payload_bytes, k * (6 * L + 2) * Nh * e);
        EXPECT_EQ(rs->calls, k * (4 * L + 2));
        EXPECT_EQ(rs->payload_bytes, k * (4 * L + 2) * Nh * e);
        EXPECT_DOUBLE_EQ(ag->bus_bytes, ring * ag->payload_bytes);
        // Replicated gradients: gpt 6h per layer, d(position) S h, final norm 2h; llama 2h
        // per layer and h; at ZeRO 0 once per step (the buffer accumulates the microbatches).
        const int64_t repl_calls = is_gpt ? L + 2 : L + 1;
        const int64_t repl = is_gpt ? L * 6 * h + S * h + 2 * h : L * 2 * h + h;
        EXPECT_EQ(sar->calls, k * loss_calls + repl_calls + 1);
        EXPECT_EQ(sar->payload_bytes, k * loss_bytes + repl * e + 4);

        // Same bytes in the block collectives: every all-reduce of P became a reduce-scatter
        // of P and an all-gather of P (payloads RS + AG = 2 x AR, bus bytes equal); sp adds
        // only the 2 re-gathers per layer of the column-parallel inputs in backward.
        const int64_t ar_block = ar->payload_bytes - (k * loss_bytes + 4);
        const int64_t regather = k * 2 * L * Nh * e;
        EXPECT_EQ(rs->payload_bytes + ag->payload_bytes - regather, 2 * ar_block);
        EXPECT_DOUBLE_EQ(rs->bus_bytes + ag->bus_bytes - ring * regather, 2 * ring * ar_block);
        // Narayanan SC21 §3.2: per layer and microbatch 8 N h (t-1)/t elements on the bus.
        const double outside_layers = 2 * ring * (k * (2 * Nh * e + loss_bytes) + 4);
        EXPECT_DOUBLE_EQ((ar->bus_bytes - outside_layers) / (k * L), 8.0 * Nh * e * ring);
      }
  // tp 1: nothing on tp.
  EXPECT_FALSE(find_comm(make_plan(gpt(2, 64, 4, 32, 256), batch(1, 2), grid(1, 2)),
                         CommGroup::TP, CommOp::ALL_REDUCE));
}

// Per rank 1/t of every matmul, the head over V_l padded rows; the step's model FLOPs are
// the whole model's (Narayanan eq. 3), whatever t.
TEST(PlanTensorParallel, Flops) {
  const ModelConfig m = gpt(4, 128, 8, 64, 509);  // V prime: padded for every t > 1
  const int64_t N = 2 * 64, h = 128, V = 509, k = 2;
  const Plan one = make_plan(m, batch(2, 2 * k * 2), grid(1, 2));
  for (int t : {2, 4, 8}) {
    const Plan p = make_plan(m, batch(2, 2 * k * 2), grid(t, 2));
    const int64_t Vp = (V + t - 1) / t * t;
    EXPECT_DOUBLE_EQ(p.flops.model_per_step, one.flops.model_per_step);
    EXPECT_DOUBLE_EQ(p.flops.model_per_step, narayanan_model_flops(8, 4, 64, 128, 509));
    // t ranks together run the single rank's matmuls plus the padded head columns
    // (forward, input and weight gradient: 3 x 2 N h (Vp - V)).
    EXPECT_DOUBLE_EQ(p.flops.hardware_per_rank_step * t,
                     one.flops.hardware_per_rank_step + k * 6.0 * N * h * (Vp - V));
    EXPECT_DOUBLE_EQ(p.flops.hardware_per_rank_step * p.parallel.world_size,
                     p.flops.hardware_per_step);
    EXPECT_EQ(p.flops.matmuls.back().formula, "2 N h Vp/t");
  }
}

TEST(PlanTensorParallel, RejectsWhatItCannotPlan) {
  ModelConfig m = gpt(2, 64, 4, 30, 256);  // 30 tokens: not 4 chunks of cp 2's zigzag
  const std::string expected[2] = {
      "plan: context parallel 2 must cut seq length 30 into equal chunks",
      "plan: expert parallel 2 needs experts divisible by it (0 experts)"};
  for (int which = 0; which < 2; ++which) {
    ParallelConfig p = grid(1, 2);
    (which == 0 ? p.context_parallel : p.expert_parallel) = 2;
    try {
      make_plan(m, batch(1, which == 0 ? 1 : 2), p);
      ADD_FAILURE() << "accepted " << which;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(e.what(), expected[which]);
    }
  }
  ParallelConfig piped = grid(1, 2);  // pipelines are planned (test_plan_pipeline.cpp)
  piped.pipeline_parallel = 2;
  EXPECT_EQ(make_plan(m, batch(1, 1), piped).pipeline.stages.size(), 2u);
  piped.pipeline_parallel = 4;  // 4 stages do not divide 2 ranks
  EXPECT_THROW(make_plan(m, batch(1, 1), piped), std::invalid_argument);
  try {
    make_plan(m, batch(1, 1), grid(8, 1));  // 4 heads
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "plan: tensor parallel 8 must divide heads 4, query groups 4 and "
                           "ffn 256");
  }
  ModelConfig odd = gpt(2, 64, 4, 5, 256);  // N = 5 tokens
  EXPECT_THROW(make_plan(odd, batch(1, 1), grid(2, 1, true)), std::invalid_argument);
  EXPECT_NO_THROW(make_plan(odd, batch(1, 1), grid(2, 1, false)));
  ParallelConfig uneven = grid(2, 1);
  uneven.world_size = 3;
  EXPECT_THROW(make_plan(m, batch(1, 3), uneven), std::invalid_argument);
}

TEST(PlanTensorParallel, ReportShowsTheCheck) {
  ModelConfig m = gpt(2, 64, 8, 32, 255);
  m.attention = AttentionImpl::NAIVE;
  m.attention_dropout = m.hidden_dropout = 0.1f;
  const Plan p = make_plan(m, batch(2, 4, true), grid(4, 2, true));
  const std::string mt = memory_table(p, 0, nullptr);
  // One per-layer figure, the norm statistics included (the one --plan's tensor list and the
  // activations note print); the Korthikanti comparison takes the statistics out, saying so.
  const std::string layer = format_mib((double)p.activation_bytes_per_layer);
  EXPECT_NE(mt.find("activations per layer: " + layer + " MiB (norm statistics "),
            std::string::npos) << mt;
  EXPECT_NE(mt.find("MiB included)\n  Korthikanti sbh(34/t + 5as/(ht)) = "),
            std::string::npos) << mt;
  EXPECT_NE(mt.find("layers x " + layer + " MiB"), std::string::npos) << mt;
  EXPECT_NE(mt.find("Korthikanti sbh(34/t + 5as/(ht)) = "), std::string::npos) << mt;
  const KorthikantiCheck k = korthikanti_check(p);
  EXPECT_EQ(k.plan_bytes + k.norm_statistics_bytes, p.activation_bytes_per_layer);
  EXPECT_NE(mt.find("plan - statistics = " + format_mib((double)k.plan_bytes) + " MiB: equal"),
            std::string::npos) << mt;
  m.attention = AttentionImpl::FLASH;
  const std::string flash = korthikanti_line(make_plan(m, batch(2, 4, true), grid(4, 2)));
  EXPECT_NE(flash.find("sbh(10 + 24/t)"), std::string::npos) << flash;
  EXPECT_NE(flash.find("flash attention: no 5as/(ht) term"), std::string::npos) << flash;
  const std::string j = plan_json(p, nullptr, false);
  for (const char* key : {"\"sequence_parallel\":true", "\"tensor_parallel\":4",
                          "\"padded_vocab\":256", "\"tp_rank\":3",
                          "\"korthikanti\":{\"formula\":\"sbh(34/t + 5as/(ht))\"",
                          "\"applicable\":true", "{\"group\":\"tp\",\"op\":\"all-reduce\""})
    EXPECT_NE(j.find(key), std::string::npos) << key;
  const std::string text = plan_text(p, nullptr);
  EXPECT_NE(text.find("tp4+sp"), std::string::npos);
  EXPECT_NE(text.find("vocab 255 padded to 256 for tp 4"), std::string::npos);
  EXPECT_NE(text.find("tp        reduce-scatter"), std::string::npos) << text;
}

// gpt3-175b on tp 8 x dp 128, `--plan --json`: no allocation, at once.
// Megatron's _vocab_size_with_padding: V rounded up to a multiple of
// --make-vocab-size-divisible-by x tp (GPT-2's 50257: 50304 at tp 1, 50432 at tp 2, 51200 at
// tp 8, as Megatron prints "padded vocab (size: 50257) with 943 dummy tokens (new size:
// 51200)" at tp 8). Each rank holds Vp/t rows of each vocabulary tensor; Psi stays V's.
TEST(PlanTensorParallel, VocabPaddingAsMegatron) {
  for (auto [t, Vp] : std::vector<std::pair<int, int64_t>>{{1, 50304}, {2, 50432}, {8, 51200}}) {
    SCOPED_TRACE("tp " + std::to_string(t));
    ModelConfig m = gpt(2, 64, 8, 32, 50257);
    m.vocab_divisible_by = 128;
    const Plan p = make_plan(m, batch(1, 8, true), grid(t, 1, true, 1));
    EXPECT_EQ(p.padded_vocab, Vp);
    const int64_t h = 64, replicated = 2 * 6 * h + 32 * h + 2 * h;
    EXPECT_EQ(p.ranks[0].params * t, p.params_total + (Vp - 50257) * h + (t - 1) * replicated);
    EXPECT_EQ(p.params_total, parameter_count(m));  // Psi: the real vocabulary's
    EXPECT_NE(plan_text(p, nullptr).find("vocab 50257 padded to " + std::to_string(Vp)),
              std::string::npos);
  }
  // 1: tp alone (the behaviour before the flag), as the tests above count it
  ModelConfig m = gpt(2, 64, 8, 32, 50257);
  EXPECT_EQ(make_plan(m, batch(1, 8, true), grid(8, 1, true, 1)).padded_vocab, 50264);
}

// The GEMMs' leading dimensions the fast kernels want (plan/gemm_calls.h): GPT-2 at the default
// padding has none unaligned; its 50257 rows unpadded do, and so do a head dim of 12 under
// naive attention and an odd width per tp rank.
TEST(PlanTensorParallel, UnalignedGemmDims) {
  ModelConfig m = gpt(12, 768, 12, 1024, 50257);
  m.vocab_divisible_by = 128;
  EXPECT_TRUE(unaligned_gemm_dims(make_plan(m, batch(1, 8, true), grid(1, 1, true, 1))).empty());
  m.vocab_divisible_by = 1;
  EXPECT_EQ(unaligned_gemm_dims(make_plan(m, batch(1, 8, true), grid(1, 1, true, 1))),
            std::vector<std::string>{"vocabulary rows per rank 50257"});
  ModelConfig n = gpt(2, 48, 4, 64, 256);  // d 12
  n.attention = AttentionImpl::NAIVE;
  n.ffn_hidden_size = 200;                // 100 per rank at tp 2
  const Plan p = make_plan(n, batch(1, 8, true), grid(2, 1, true, 1));
  EXPECT_EQ(unaligned_gemm_dims(p),
            (std::vector<std::string>{"fc1 width per rank 100", "ffn width per rank 100",
                                      "head dim 12"}));
  EXPECT_NE(plan_text(p, nullptr).find("gemms    not a multiple of 8 elements"), std::string::npos);
  EXPECT_NE(plan_json(p, nullptr, false).find("\"unaligned_gemm_dims\":[\"fc1 width per rank 100\""),
            std::string::npos);
}

TEST(PlanTensorParallel, Gpt3Tp8Dp128) {
  ModelConfig m = gpt(96, 12288, 96, 2048, 50257);
  const auto start = std::chrono::steady_clock::now();
  const Plan p = make_plan(m, batch(1, 1536, true), grid(8, 128, true, 1));
  const std::string j = plan_json(p, nullptr, false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ((int)p.ranks.size(), 1024);
  EXPECT_EQ(p.padded_vocab, 50264);
  const int64_t h = 12288, replicated = 96 * 6 * h + 2048 * h + 2 * h;
  EXPECT_EQ(p.ranks[0].params * 8, p.params_total + 7 * h + 7 * replicated);
  EXPECT_NEAR(p.ranks[0].params / 1e9, 174.6 / 8, 0.1);
  EXPECT_EQ(p.microbatches_per_rank, 12);
  EXPECT_NEAR(p.flops.model_per_step / narayanan_model_flops(1536, 96, 2048, 12288, 50257), 1.0,
              1e-12);
  EXPECT_NE(j.find("\"tp_rank\":7"), std::string::npos);
  EXPECT_NE(j.find("\"padded_vocab\":50264"), std::string::npos);
}

}  // namespace
}  // namespace paralab
