// tests/test_plan.cpp: the analytic model against the published closed forms it must
// reproduce (notes/formulas.md): parameters, activations, workspace and FLOPs.
// The ZeRO byte conventions rank by rank: test_plan_zero.cpp; the report writers and the peak
// FLOP/s: test_plan_report.cpp. Tensor and sequence parallelism: test_plan_parallel.cpp.
#include <gtest/gtest.h>
#include <vector>
#include "plan/flops.h"  // defines: narayanan_model_flops, palm_flops_per_token
#include "plan/plan.h"  // defines: make_plan, Plan, korthikanti_*, workspace_bytes
#include "model/param_table.h"  // defines: parameter_count
#include "tests/test_plan_helpers.h"  // defines: gpt, world, batch

namespace paralab {
namespace {

using namespace plan_test;  // gpt, world, batch

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
  // xf becomes d(xf), same size; no S x S scratch. d(xf) lives in the head's backward only,
  // the int32 tokens and targets (2N) in the forward only: the larger, d(xf), counts.
  m.fused_cross_entropy = false;
  EXPECT_EQ(workspace_bytes(m, 3, 4), fused - 4 * 2 * 3 * a * S * S - 4 * 2 * N);
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
  // xf in bf16; losses and the loss scratch (3 N) fp32; tokens, targets int32; the flash
  // backward's fp32 dq accumulator (B a S d = N h), bf16 only.
  EXPECT_EQ(mem.workspace,
            2 * (2 * N * h + 3 * N * h + 3 * N * h + 3 * N * h + N * f + N * f + N * h) +
                4 * (N + 3 * N + 2 * N) + 4 * N * h);
  EXPECT_EQ(workspace_bytes(m, B, 2) * 2 - workspace_bytes(m, B, 4),
            4 * (N + 3 * N + 2 * N) + 8 * N * h);
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

}  // namespace
}  // namespace paralab
