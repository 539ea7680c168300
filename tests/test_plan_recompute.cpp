// tests/test_plan_recompute.cpp: the plan of activation recompute against the closed forms.
//
// Bytes (Korthikanti et al. 2022, Table 2): with the paper's layer (gpt, f = 4h, both
// dropouts, naive attention, 16-bit activations) selective core_attn removes exactly the
// 5as/h term, sbh(34 + 5as/h) -> 34sbh, also under tp and sp; with flash attention it removes
// only the fp32 log-sum-exp. FLOPs: full recompute adds one forward of the recomputed layers
// (Narayanan's 96BsLh^2(1 + s/6h + V/16Lh) when all are); selective adds what backward reruns
// (flops.h), which is less than Korthikanti's eq. 8 counts: its ratio hardware/model is
// 1 + s/(6h) to first order, ours 1 + s/(36h) for naive core_attn.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include "plan/flops.h"           // narayanan_*, korthikanti_selective_hardware_flops
#include "plan/plan.h"            // make_plan, korthikanti_* closed forms
#include "plan/recompute.h"  // recompute_buffers, korthikanti_check_recompute
#include "test_plan_helpers.h"          // gpt, llama, world, batch

namespace paralab {
namespace {

using plan_test::batch;
using plan_test::gpt;
using plan_test::llama;
using plan_test::world;

ModelConfig paper_layer(AttentionImpl attention) {  // the paper's assumptions
  ModelConfig m = gpt(2, 64, 4, 32, 256);
  m.attention = attention;
  m.hidden_dropout = m.attention_dropout = 0.1f;
  return m;
}

ModelConfig selective(ModelConfig m, bool core_attn, bool mlp = false, bool norm = false) {
  m.recompute.granularity = Recompute::Granularity::SELECTIVE;
  m.recompute.core_attn = core_attn;
  m.recompute.mlp = mlp;
  m.recompute.norm = norm;
  return m;
}

ParallelConfig tp_world(int t, bool sp) {
  ParallelConfig p = world(t, 0);
  p.tensor_parallel = t;
  p.sequence_parallel = sp;
  return p;
}

// Naive core_attn removes 5as/h sbh = 5 a s^2 b bytes at 16 bits, to the byte, at tp 1, 2, 4
// with and without sp; what is left is Table 2's selective row plus the norm statistics.
TEST(PlanRecompute, SelectiveCoreAttnRemovesTheFiveAsOverHTerm) {
  const double s = 32, b = 2, h = 64, a = 4;
  for (int t : {1, 2, 4})
    for (bool sp : {false, true}) {
      if (t == 1 && sp) continue;
      SCOPED_TRACE("tp " + std::to_string(t) + (sp ? " sp" : ""));
      const Plan plain = make_plan(paper_layer(AttentionImpl::NAIVE), batch(2, 2, true),
                                   tp_world(t, sp));
      const Plan sel = make_plan(selective(paper_layer(AttentionImpl::NAIVE), true),
                                 batch(2, 2, true), tp_world(t, sp));
      EXPECT_EQ(sum_bytes(plain.layer_activations) - sum_bytes(sel.layer_activations),
                (int64_t)(5 * a * s * s * b / t));
      const double row = sp ? korthikanti_tp_sp_selective_bytes(s, b, h, t)
                            : korthikanti_tp_selective_bytes(s, b, h, t);
      EXPECT_EQ((double)sum_bytes(sel.layer_activations, false), row);
      const KorthikantiCheck k = korthikanti_check_recompute(sel);
      EXPECT_TRUE(k.applicable());
      EXPECT_EQ((double)k.plan_bytes, k.closed_form_bytes) << k.formula;
      // The dropped P, mask and P' are the recompute buffers (the largest group here).
      EXPECT_EQ(sel.ranks[0].memory.recompute, (int64_t)(5 * a * s * s * b / t));
    }
  // 34 sbh at t = 1: the formula's own numbers.
  const Plan one = make_plan(selective(paper_layer(AttentionImpl::NAIVE), true),
                             batch(2, 2, true), world(1, 0));
  EXPECT_EQ(sum_bytes(one.layer_activations, false), 34 * 32 * 2 * 64);
  EXPECT_EQ(korthikanti_check_recompute(one).formula, "34sbh");
}

// Flash keeps no S x S tensor: core_attn saves its fp32 log-sum-exp, 4 B a S bytes, and leaves
// exactly the selective row too.
TEST(PlanRecompute, SelectiveCoreAttnWithFlashSavesOnlyTheLogSumExp) {
  const Plan plain = make_plan(paper_layer(AttentionImpl::FLASH), batch(2, 2, true),
                               world(1, 0));
  const Plan sel = make_plan(selective(paper_layer(AttentionImpl::FLASH), true),
                             batch(2, 2, true), world(1, 0));
  EXPECT_EQ(sum_bytes(plain.layer_activations) - sum_bytes(sel.layer_activations), 4 * 2 * 4 * 32);
  EXPECT_EQ(selective_saved_bytes_per_layer(sel.model, 2, 2, 1), 4 * 2 * 4 * 32);
  EXPECT_EQ(sel.ranks[0].memory.recompute, 4 * 2 * 4 * 32);
  EXPECT_TRUE(korthikanti_check_recompute(sel).applicable());
  EXPECT_EQ((double)korthikanti_check_recompute(sel).plan_bytes,
            korthikanti_check_recompute(sel).closed_form_bytes);
}

// mlp drops fc1's and the activation's outputs, norm both norms' outputs and statistics; the
// recompute category holds max(norm1, core, norm2 + mlp), with sp plus fc1's gathered input.
TEST(PlanRecompute, ModulesAndTheirBuffers) {
  const ModelConfig l = llama(2, 64, 8, 2, 96, 32, 256);  // GQA, SwiGLU fc1 of 2f
  const int64_t N = 2 * 32, h = 64, f = 96;
  const Plan plain = make_plan(l, batch(2, 2), world(1, 0));
  const Plan mlp = make_plan(selective(l, false, true), batch(2, 2), world(1, 0));
  EXPECT_EQ(sum_bytes(plain.layer_activations) - sum_bytes(mlp.layer_activations),
            4 * (N * 2 * f + N * f));
  EXPECT_EQ(mlp.ranks[0].memory.recompute, 4 * (N * 2 * f + N * f));
  const Plan norm = make_plan(selective(l, false, false, true), batch(2, 2), world(1, 0));
  EXPECT_EQ(sum_bytes(plain.layer_activations) - sum_bytes(norm.layer_activations),
            2 * (4 * N + 4 * N * h));  // llama: rstd per token + output, per norm
  EXPECT_EQ(norm.ranks[0].memory.recompute, 4 * N + 4 * N * h);  // never both at once
  const Plan all = make_plan(selective(l, true, true, true), batch(2, 2), world(1, 0));
  const RecomputeBuffers r = recompute_buffers(all.model, 2, 4, 1);
  EXPECT_EQ(all.ranks[0].memory.recompute,
            std::max({sum_bytes(r.norm1), sum_bytes(r.core), sum_bytes(r.mlp_block)}));
  EXPECT_EQ(sum_bytes(r.mlp_block), 4 * N + 4 * N * h + 4 * (N * 2 * f + N * f));
  // tp 2 with sp: the MLP's recompute keeps fc1's all-gathered input, N h.
  ModelConfig g = selective(paper_layer(AttentionImpl::FLASH), false, true);
  const RecomputeBuffers sp = recompute_buffers(g, 2, 4, 1, 2, true);
  EXPECT_EQ(sum_bytes(sp.mlp_block), 4 * (N * 256 / 2 + N * 256 / 2 + N * 64));
  // The run's peak total: the larger of the head's moment and the recompute's.
  const MemoryPlan& mem = all.ranks[0].memory;
  EXPECT_EQ(mem.total(), std::max(mem.total_at_recompute,
                                  mem.params + mem.grads + mem.optimizer_states +
                                      mem.activations + mem.logits + mem.workspace));
}

// Full recompute of every layer adds one forward of each: with naive attention counted in
// the full convention (hardware = model without recompute), Narayanan's eq. 3 with
// recompute exactly, and the layers' FLOPs x 4/3.
TEST(PlanRecompute, FullRecomputeAddsOneForward) {
  ModelConfig m = gpt(4, 128, 8, 64, 512);
  m.attention = AttentionImpl::NAIVE;
  m.recompute.granularity = Recompute::Granularity::FULL;
  m.recompute.method = Recompute::Method::UNIFORM;
  m.recompute.num_layers = 1;
  const Plan p = make_plan(m, batch(2, 8), world(1, 0));
  EXPECT_DOUBLE_EQ(p.flops.hardware_per_step, narayanan_full_recompute_flops(8, 4, 64, 128, 512));
  const double head = 3 * 2.0 * 8 * 64 * 128 * 512;  // 3 x 2 B s h V
  EXPECT_DOUBLE_EQ((p.flops.hardware_per_step - head) / (p.flops.model_per_step - head), 4.0 / 3);
  EXPECT_EQ(p.flops.recomputed_layers, 4);
  // block: min(n, layers) of each pipeline chunk; 4 layers on pp 2 = 2 + 2, n = 1 -> 2.
  m.recompute.method = Recompute::Method::BLOCK;
  ParallelConfig pp = world(2, 0);
  pp.pipeline_parallel = 2;
  const Plan b = make_plan(m, batch(2, 8), pp);
  EXPECT_EQ(b.flops.recomputed_layers, 2);
  EXPECT_DOUBLE_EQ(b.flops.recompute_per_microbatch, p.flops.recompute_per_microbatch / 2);
}

// Selective core_attn reruns Q K^T (naive: the full square) or the flash forward (2 causal
// products); mlp reruns fc1. HFU counts them, MFU does not.
TEST(PlanRecompute, SelectiveFlopsAreWhatBackwardReruns) {
  const double B = 2, S = 64, h = 128, a = 8, d = 16, L = 4, V = 512, f = 512;
  ModelConfig m = selective(gpt(4, 128, 8, 64, 512), true);
  m.attention = AttentionImpl::NAIVE;
  const Plan naive = make_plan(m, batch(2, 2), world(1, 0));
  EXPECT_DOUBLE_EQ(naive.flops.recompute_per_microbatch, 2 * B * a * d * S * S * L);
  EXPECT_DOUBLE_EQ(naive.flops.hardware_per_step - naive.flops.model_per_step,
                   naive.flops.recompute_per_microbatch);
  // hardware / model = 1 + (s/(36h)) / (1 + s/(6h) + V/(12hL))
  EXPECT_NEAR(naive.flops.hardware_per_step / naive.flops.model_per_step,
              1 + (S / (36 * h)) / (1 + S / (6 * h) + V / (12 * h * L)), 1e-12);
  // Korthikanti's eq. 8 counts s/(6h) (12 B s^2 h per layer, 6 x ours): ~1 + s/(6h).
  EXPECT_NEAR(korthikanti_selective_hardware_flops(B, L, S, h, V) /
                  narayanan_model_flops(B, L, S, h, V),
              1 + S / (6 * h), S / (6 * h) * (S / (6 * h) + V / (12 * h * L)));
  m.attention = AttentionImpl::FLASH;
  const Plan flash = make_plan(m, batch(2, 2), world(1, 0));
  EXPECT_DOUBLE_EQ(flash.flops.recompute_per_microbatch, 2 * 2 * B * a * d * S * (S + 1) / 2 * L);
  const Plan mlp = make_plan(selective(gpt(4, 128, 8, 64, 512), false, true), batch(2, 2),
                             world(1, 0));
  EXPECT_DOUBLE_EQ(mlp.flops.recompute_per_microbatch, 2 * B * S * h * f * L);
  const Plan norm = make_plan(selective(gpt(4, 128, 8, 64, 512), false, false, true),
                              batch(2, 2), world(1, 0));
  EXPECT_EQ(norm.flops.recompute_per_microbatch, 0);
  // tp 2: each rank reruns its half of the heads and columns; the step counts both ranks.
  ModelConfig t = selective(gpt(4, 128, 8, 64, 512), true, true);
  ParallelConfig tp = world(2, 0);
  tp.tensor_parallel = 2;
  const Plan one = make_plan(t, batch(2, 2), world(1, 0));
  const Plan two = make_plan(t, batch(2, 2), tp);
  EXPECT_DOUBLE_EQ(two.flops.recompute_per_microbatch * 2, one.flops.recompute_per_microbatch);
}

}  // namespace
}  // namespace paralab
