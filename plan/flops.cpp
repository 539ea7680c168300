// plan/flops.cpp: see flops.h for the conventions.
#include "plan/flops.h"
#include <algorithm>
#include "model/param_table.h"  // padded_vocab

namespace paralab {

const char* attention_flops_name(AttentionFlops c) {
  return c == AttentionFlops::CAUSAL ? "causal" : "full";
}

// The matmuls one rank of a tp group runs for one microbatch (tp = 1: the whole model).
// Each is the full product with its split dimension divided by tp: heads and groups
// (qkv, attention, proj), ffn columns (fc1, fc2), vocabulary rows V_l = Vp/tp, padding
// included since the padded columns are computed (the head).
static FlopsPlan rank_matmuls(const ModelConfig& m, int micro_batch_size,
                              AttentionFlops convention, int tp,
                              const std::vector<int>& stage_layers) {
  // Doubles throughout: a 175B step is ~1e21 FLOPs, beyond int64; every term is an integer
  // below 2^53 for the sizes the tests check exactly.
  const double B = micro_batch_size, S = m.seq_length, N = B * S;
  const double h = m.hidden_size, a = m.num_attention_heads / tp, g = m.groups() / tp,
               d = m.head_dim(), f = m.ffn() / tp, fc1 = m.fc1_size() / tp,
               V = (double)padded_vocab(m, tp) / tp, L = m.num_layers;
  const bool split = tp > 1;
  // Query-key pairs one head scores in one sequence: all S^2, or the causal triangle.
  const double full_pairs = S * S, causal_pairs = S * (S + 1) / 2;
  const double model_pairs = convention == AttentionFlops::CAUSAL ? causal_pairs : full_pairs;
  // One attention product (QK^T, PV, or one of their gradients): 2 d FLOPs per (query, key)
  // pair per query head. With GQA, k and v are shared but every query head multiplies.
  auto attn_product = [&](double pairs) { return 2 * B * a * d * pairs; };
  const bool naive = m.attention == AttentionImpl::NAIVE;
  const double hw_pairs = naive ? full_pairs : causal_pairs;

  FlopsPlan p;
  p.convention = convention;
  p.attention = m.attention;
  // Linear layers: forward, input gradient dX = dY W and weight gradient dW = dY^T X, each
  // the same 2mnk, so model and hardware are both 3 x forward.
  auto linear = [&](const char* name, const char* k, const char* formula, double fwd,
                    bool per_layer) {
    const double layers = per_layer ? L : 1;
    p.matmuls.push_back({name, k, formula, per_layer, fwd, 3 * fwd * layers, 3 * fwd * layers});
  };
  // Attention: model = 3 x forward; hardware by kernel: naive QK^T has 1 forward + 2
  // backward (dQ = dS K, dK = dS^T Q) products, PV 1 + 2 (dV = P^T dO, dP = dO V^T); flash
  // adds the recomputed QK^T in backward.
  auto attention = [&](const char* name, const char* k, const char* formula, int hw_products) {
    const double fwd = attn_product(model_pairs);
    p.matmuls.push_back({name, k, formula, true, fwd, 3 * fwd * L,
                         hw_products * attn_product(hw_pairs) * L});
  };

  // Under tp the formulas name the local sizes: a/t heads, g/t groups, f/t columns, Vp/t rows.
  const char* pairs_formula = convention == AttentionFlops::CAUSAL
                                  ? (split ? "2 B (a/t) d S(S+1)/2" : "2 B a d S(S+1)/2")
                                  : (split ? "2 B (a/t) S S d" : "2 B a S S d");
  linear("qkv", "h", split ? "2 N h (a+2g)d/t" : "2 N h (a+2g) d", 2 * N * h * (a + 2 * g) * d,
         true);
  attention("scores", "d", pairs_formula, naive ? 3 : 4);
  attention("av", "S (keys)", pairs_formula, 3);
  linear("proj", split ? "a d/t" : "a d", split ? "2 N (a d/t) h" : "2 N (a d) h",
         2 * N * (a * d) * h, true);
  linear("fc1", "h",
         m.is_gpt() ? (split ? "2 N h f/t" : "2 N h f") : (split ? "2 N h 2f/t" : "2 N h 2f"),
         2 * N * h * fc1, true);
  linear("fc2", split ? "f/t" : "f", split ? "2 N (f/t) h" : "2 N f h", 2 * N * f * h, true);
  // Tied or untied, the head is one (N,h) x (h,V) product; the fused cross-entropy runs the
  // same forward and two backward GEMMs chunk by chunk.
  linear("head", "h", split ? "2 N h Vp/t" : "2 N h V", 2 * N * h * V, false);

  for (const auto& mm : p.matmuls) {
    p.model_per_microbatch += mm.model;
    p.hardware_per_microbatch += mm.hardware;
  }

  // Recompute (flops.h): what one layer's backward runs again, hardware only.
  const Recompute& rc = m.recompute;
  double per_layer = 0;
  std::string formula;
  auto term = [&](double flops, const char* what) {
    per_layer += flops;
    formula += (formula.empty() ? "" : " + ") + std::string(what);
  };
  if (rc.recompute_core_attn() && naive)
    term(attn_product(full_pairs), split ? "2 B (a/t) d S^2 (QK^T)" : "2 B a d S^2 (QK^T)");
  if (rc.recompute_core_attn() && !naive)
    term(2 * attn_product(causal_pairs),
         split ? "4 B (a/t) d S(S+1)/2 (flash fwd)" : "4 B a d S(S+1)/2 (flash fwd)");
  if (rc.recompute_mlp()) term(2 * N * h * fc1, split ? "2 N h fc1/t (fc1)" : "2 N h fc1 (fc1)");
  if (rc.recompute_norm()) term(0, "0 (norms: no matmul)");
  if (rc.full()) {  // one forward of the layer: each linear's forward and both attention products
    for (const auto& mm : p.matmuls)
      if (mm.per_layer && (mm.name == "scores" || mm.name == "av"))
        per_layer += attn_product(hw_pairs);
      else if (mm.per_layer)
        per_layer += mm.model_forward;
    formula = "one forward of the layer";
  }
  p.recompute_formula = formula;
  p.recomputed_layers = recomputed_layer_count(m, stage_layers);
  p.recompute_per_microbatch = per_layer * (double)p.recomputed_layers;
  return p;
}

int64_t recomputed_layer_count(const ModelConfig& m, const std::vector<int>& stage_layers) {
  const Recompute& rc = m.recompute;
  if (rc.selective()) return m.num_layers;  // every layer, its listed modules
  if (!rc.full()) return 0;
  if (rc.method != Recompute::Method::BLOCK) return m.num_layers;  // uniform: every group
  if (stage_layers.empty()) return std::min(rc.num_layers, m.num_layers);
  int64_t n = 0;
  for (int layers : stage_layers) n += std::min(rc.num_layers, layers);
  return n;
}

FlopsPlan flops_plan(const ModelConfig& m, int micro_batch_size, int64_t microbatches_per_step,
                     int64_t microbatches_per_rank, AttentionFlops convention, int tp,
                     const std::vector<int>& stage_layers) {
  FlopsPlan p = rank_matmuls(m, micro_batch_size, convention, tp, stage_layers);
  p.tensor_parallel = tp;
  p.microbatches_per_step = microbatches_per_step;
  p.microbatches_per_rank = microbatches_per_rank;
  const double hw = p.hardware_per_microbatch + p.recompute_per_microbatch;
  // A microbatch is shared by the tp ranks of its group: the step's model FLOPs are the
  // whole model's (true vocabulary, no padding), its hardware FLOPs the ranks' sum.
  const double model_whole =
      tp == 1 ? p.model_per_microbatch
              : rank_matmuls(m, micro_batch_size, convention, 1, stage_layers).model_per_microbatch;
  p.model_per_step = model_whole * microbatches_per_step;
  p.hardware_per_step = hw * tp * microbatches_per_step;
  p.model_per_rank_step = p.model_per_microbatch * microbatches_per_rank;
  p.hardware_per_rank_step = hw * microbatches_per_rank;
  return p;
}

double narayanan_model_flops(double B, double L, double s, double h, double V) {
  return 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L));
}

double korthikanti_selective_hardware_flops(double B, double L, double s, double h, double V) {
  return 72 * B * L * s * h * h * (1 + s / (3 * h) + V / (12 * h * L));
}

double narayanan_full_recompute_flops(double B, double L, double s, double h, double V) {
  return 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
}

double palm_flops_per_token(double N, double L, double H, double Q, double T) {
  return 6 * N + 12 * L * H * Q * T;
}

}  // namespace paralab
