// plan/flops.cpp: see flops.h for the conventions.
#include "plan/flops.h"
#include <algorithm>
#include "model/param_table.h"  // padded_vocab
#include "plan/context_parallel.h"  // cp_attention_pairs
#include "plan/moe_memory.h"     // MoeRouting, moe_rows, moe_kept_step
#include "plan/plan.h"           // plan_core_shape

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
  // With context parallelism the rank's S = s/cp tokens of each sequence, and its pairs
  // those of its passes (plan/context_parallel.h: the zigzag layout gives every rank
  // s(s+1)/2cp causal pairs; contiguous rank r gives r (s/cp)^2 + (s/cp)(s/cp+1)/2).
  const double B = micro_batch_size, S = m.seq_length / m.context_parallel.size, N = B * S;
  const double h = m.hidden_size, a = m.num_attention_heads / tp, g = m.groups() / tp,
               d = m.head_dim(), f = m.ffn() / tp, fc1 = m.fc1_size() / tp,
               V = (double)padded_vocab(m, tp) / tp, L = m.num_layers;
  const bool split = tp > 1;
  // Query-key pairs one head scores in one sequence: all S^2 (each of the rank's queries
  // against all s keys), or the causal triangle; the kernels' passes score full_pairs
  // (naive: every pair of each pass's block) or causal_pairs (flash).
  const AttentionPairs rank_pairs = cp_attention_pairs(m, tp);
  const double full_pairs = rank_pairs.scored, causal_pairs = rank_pairs.causal;
  const int passes = (int)core_passes(plan_core_shape(m, 1, tp), m.context_parallel).size();
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
  const double L_dense = dense_layer_count(m);
  auto linear = [&](const char* name, const char* k, const char* formula, double fwd,
                    bool per_layer, double layers_counted = -1) {
    const double layers = per_layer ? (layers_counted < 0 ? L : layers_counted) : 1;
    p.matmuls.push_back({name, k, formula, per_layer, (int)layers, fwd, 3 * fwd * layers,
                         3 * fwd * layers});
  };
  // Attention: model = 3 x forward; hardware by kernel: naive QK^T has 1 forward + 2
  // backward (dQ = dS K, dK = dS^T Q) products, PV 1 + 2 (dV = P^T dO, dP = dO V^T); flash
  // adds the recomputed QK^T in backward.
  auto attention = [&](const char* name, const char* k, const char* formula, int hw_products) {
    const double fwd = attn_product(model_pairs);
    p.matmuls.push_back({name, k, formula, true, (int)L, fwd, 3 * fwd * L,
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
  if (L_dense > 0) {  // the dense layers' MLP (MoE layers: their rows below, flops_plan)
    linear("fc1", "h",
           m.is_gpt() ? (split ? "2 N h f/t" : "2 N h f") : (split ? "2 N h 2f/t" : "2 N h 2f"),
           2 * N * h * fc1, true, L_dense);
    linear("fc2", split ? "f/t" : "f", split ? "2 N (f/t) h" : "2 N f h", 2 * N * f * h, true,
           L_dense);
  }
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
  if (rc.recompute_core_attn() && naive && passes == 1)
    term(attn_product(full_pairs), split ? "2 B (a/t) d S^2 (QK^T)" : "2 B a d S^2 (QK^T)");
  if (rc.recompute_core_attn() && naive && passes > 1)  // a ring's merge needs P V too
    term(2 * attn_product(full_pairs), "4 B (a/t) d (ring pairs) (QK^T, PV)");
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
  // (MoE models: flops_plan replaces the per-layer recompute by each layer's own.)
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
  return flops_plan(m, micro_batch_size, microbatches_per_step, microbatches_per_rank, convention,
                    tp, stage_layers, MoeRouting());
}

// Which global layers recompute something (recomputed_layer_count's, layer by layer).
static std::vector<bool> recomputed_layers(const ModelConfig& m,
                                           const std::vector<int>& stage_layers) {
  const Recompute& rc = m.recompute;
  std::vector<bool> r(m.num_layers, rc.selective() || rc.full());
  if (!rc.full() || rc.method != Recompute::Method::BLOCK) return r;
  const std::vector<int> chunks =
      stage_layers.empty() ? std::vector<int>{m.num_layers} : stage_layers;
  int first = 0;
  for (int n : chunks) {
    for (int i = 0; i < n; ++i) r.at(first + i) = i < rc.num_layers;
    first += n;
  }
  return r;
}

// The per-layer step FLOPs (FlopsPlan::layer_*_step) and, with MoE layers, their rows of the
// matmul table and the totals (flops.h).
static void per_layer_flops(FlopsPlan& p, const ModelConfig& m, int B, int64_t k,
                            const std::vector<int>& stage_layers, const MoeRouting& routing,
                            int etp) {
  const double N = (double)B * m.seq_length / m.context_parallel.size, h = m.hidden_size,
               kd = (double)k;
  // one microbatch of any layer: the attention rows; one dense layer's MLP
  double attn_model = 0, attn_hw = 0, attn_fwd = 0, dense_model = 0, dense_hw = 0,
         dense_fwd = 0, head_model = 0, head_hw = 0;
  for (const MatmulFlops& mm : p.matmuls) {
    if (!mm.per_layer) {
      head_model += mm.model, head_hw += mm.hardware;
      continue;
    }
    const bool mlp = mm.name == "fc1" || mm.name == "fc2";
    const double per = mm.layers > 0 ? 1.0 / mm.layers : 0;
    (mlp ? dense_model : attn_model) += mm.model * per;
    (mlp ? dense_hw : attn_hw) += mm.hardware * per;
    if (mlp) dense_fwd += mm.model_forward;
    // the forward as run (the recompute's convention): each linear's, both attention
    // products once (scores: naive 3 products, flash 4 with its backward's QK^T; av 3)
    else if (mm.name == "scores")
      attn_fwd += mm.hardware * per / (m.attention == AttentionImpl::NAIVE ? 3 : 4);
    else if (mm.name == "av")
      attn_fwd += mm.hardware * per / 3;
    else
      attn_fwd += mm.model_forward;
  }
  const Moe& e = m.moe;
  // an MoE layer routes the rank's tokens: its B S/cp (N), N / tp of them under sequence
  // parallelism (which experts under tensor parallelism need), their router and shared
  // expert whole on each rank
  const int split = p.tensor_parallel;
  const double Nl = N / split;
  const double E = e.num_experts, fc1e = m.moe_fc1_size(), fe = m.moe_ffn();
  const double router = 2 * Nl * h * E;
  const double shared = e.shared_expert_size > 0
                            ? 2 * Nl * h * m.shared_fc1_size() + 2 * Nl * e.shared_expert_size * h +
                                  (e.shared_expert_gate ? 2 * Nl * h : 0)
                            : 0;
  // one permuted row through fc1 and fc2 (model FLOPs, counted where the tokens are), and
  // through the rank's slice of them (1/etp of their width: the hardware FLOPs it runs)
  const double per_pair = 2 * h * fc1e + 2 * fe * h, per_row = per_pair / etp;
  const std::vector<bool> rec = recomputed_layers(m, stage_layers);
  const double selective_per_layer =
      p.recomputed_layers > 0 && m.recompute.selective()
          ? p.recompute_per_microbatch / (double)p.recomputed_layers : 0;
  const int L = m.num_layers;
  p.layer_model_step.assign(L, 0);
  p.layer_hardware_step.assign(L, 0);
  p.layer_recompute_step.assign(L, 0);
  double rows_step = 0, kept_step = 0;  // summed over the MoE layers
  for (int l = 0; l < L; ++l) {
    if (!e.is_moe_layer(l)) {
      p.layer_model_step[l] = (attn_model + dense_model) * kd;
      p.layer_hardware_step[l] = (attn_hw + dense_hw) * kd;
      if (rec[l])
        p.layer_recompute_step[l] =
            m.recompute.full() ? (attn_fwd + dense_fwd) * kd : selective_per_layer * kd;
      continue;
    }
    double rows = 0;
    // the rows this rank's experts run (R: its tokens' M without expert parallelism)
    for (int64_t i = 0; i < k; ++i)
      rows += (double)moe_expert_rows(m, B, routing, l, (int)i, split, etp);
    const double kept = moe_kept_step(m, B, routing, l, k, split);
    rows_step += rows, kept_step += kept;
    p.layer_model_step[l] = (attn_model + 3 * (router + shared)) * kd + 3 * per_pair * kept;
    p.layer_hardware_step[l] = (attn_hw + 3 * (router + shared)) * kd + 3 * per_row * rows;
    if (rec[l])
      p.layer_recompute_step[l] = m.recompute.full()
                                      ? (attn_fwd + router + shared) * kd + per_row * rows
                                      : selective_per_layer * kd;
  }
  p.head_model_step = head_model * kd;
  p.head_hardware_step = head_hw * kd;
  if (!e.enabled()) return;
  // the MoE rows of the table: one microbatch (the step's mean with a measured routing)
  const double Lm = moe_layer_count(m);
  auto row = [&](const char* name, const char* over, const char* formula, double fwd,
                 double model, double hw) {
    p.matmuls.insert(p.matmuls.end() - 1,  // before the head
                     MatmulFlops{name, over, formula, true, (int)Lm, fwd, model, hw});
  };
  const double rows_mb = rows_step / kd, kept_mb = kept_step / kd;
  p.moe_rows = Lm > 0 ? rows_mb / Lm : 0;
  p.moe_kept = Lm > 0 ? kept_mb / Lm : 0;
  p.moe_rows_exact = moe_rows_exact(m);
  p.routed = routing.measured();
  row("router", "h", "2 N h E", router, 3 * router * Lm, 3 * router * Lm);
  row("experts.fc1", "h", m.is_gpt() ? "2 M h f_e" : "2 M h 2f_e", 2 * p.moe_kept * h * fc1e,
      6 * kept_mb * h * fc1e, 6 * rows_mb * h * fc1e);
  row("experts.fc2", "f_e", "2 M f_e h", 2 * p.moe_kept * fe * h, 6 * kept_mb * fe * h,
      6 * rows_mb * fe * h);
  if (e.shared_expert_size > 0) {
    const double fs = e.shared_expert_size, fc1s = m.shared_fc1_size();
    row("shared.fc1", "h", m.is_gpt() ? "2 N h f_s" : "2 N h 2f_s", 2 * Nl * h * fc1s,
        6 * Nl * h * fc1s * Lm, 6 * Nl * h * fc1s * Lm);
    row("shared.fc2", "f_s", "2 N f_s h", 2 * Nl * fs * h, 6 * Nl * fs * h * Lm,
        6 * Nl * fs * h * Lm);
    if (e.shared_expert_gate)
      row("shared.gate", "h", "2 N h", 2 * Nl * h, 6 * Nl * h * Lm, 6 * Nl * h * Lm);
  }
  // the totals from the layers (exact sums of integers), the table's per microbatch their mean
  double model = p.head_model_step, hw = p.head_hardware_step, recompute = 0;
  for (int l = 0; l < L; ++l) {
    model += p.layer_model_step[l];
    hw += p.layer_hardware_step[l];
    recompute += p.layer_recompute_step[l];
  }
  p.model_per_microbatch = model / kd;
  p.hardware_per_microbatch = hw / kd;
  p.recompute_per_microbatch = recompute / kd;
  if (m.recompute.full()) p.recompute_formula = "one forward of the layer (MoE: router, experts, shared)";
  p.model_per_rank_step = model;
  p.hardware_per_rank_step = hw + recompute;
}

FlopsPlan flops_plan(const ModelConfig& m, int micro_batch_size, int64_t microbatches_per_step,
                     int64_t microbatches_per_rank, AttentionFlops convention, int tp,
                     const std::vector<int>& stage_layers, const MoeRouting& routing, int etp) {
  FlopsPlan p = rank_matmuls(m, micro_batch_size, convention, tp, stage_layers);
  p.tensor_parallel = tp;
  p.microbatches_per_step = microbatches_per_step;
  p.microbatches_per_rank = microbatches_per_rank;
  const double hw = p.hardware_per_microbatch + p.recompute_per_microbatch;
  // A microbatch is shared by the tp ranks of its group: the step's model FLOPs are the
  // whole model's (true vocabulary, no padding), its hardware FLOPs the ranks' sum.
  // With context parallelism a microbatch is the cp ranks' too: the whole model's FLOPs at
  // cp 1, the hardware's the cp ranks' sum (cp times this rank's under the zigzag layout,
  // where they are equal; each rank's own under the contiguous one).
  // (--make-vocab-size-divisible-by's padding rows are hardware FLOPs, not the model's;
  // Megatron's num_floating_point_operations counts the padded vocabulary: docs/megatron.md)
  ModelConfig whole = m;
  whole.context_parallel = CpSpec();
  whole.vocab_divisible_by = 1;
  const int cp = m.context_parallel.size;
  const double model_whole =
      tp == 1 && cp == 1 && padded_vocab(m, 1) == m.vocab_size
          ? p.model_per_microbatch
          : rank_matmuls(whole, micro_batch_size, convention, 1, stage_layers).model_per_microbatch;
  p.model_per_step = model_whole * microbatches_per_step;
  double hw_cp = hw * cp;
  if (cp > 1 && m.context_parallel.layout == CpLayout::CONTIGUOUS) {
    hw_cp = 0;
    for (int r = 0; r < cp; ++r) {
      ModelConfig rank_r = m;
      rank_r.context_parallel.rank = r;
      const FlopsPlan q = rank_matmuls(rank_r, micro_batch_size, convention, tp, stage_layers);
      hw_cp += q.hardware_per_microbatch + q.recompute_per_microbatch;
    }
  }
  p.hardware_per_step = hw_cp * tp * microbatches_per_step;
  p.model_per_rank_step = p.model_per_microbatch * microbatches_per_rank;
  p.hardware_per_rank_step = hw * microbatches_per_rank;
  const double unrouted_rank_step = p.model_per_rank_step;  // all but the MoE layers' own rows
  per_layer_flops(p, m, micro_batch_size, microbatches_per_rank, stage_layers, routing, etp);
  if (m.moe.enabled()) {
    // With experts every rank of the stage (dp x cp x tp: each cp and tp rank routes its own
    // tokens) runs the MoE rows (router, experts, shared expert) of its own tokens, routed
    // like this one (with a measured routing; the expectation otherwise): the step's model
    // FLOPs are the whole model's other matmuls (as without experts) plus the ranks' MoE
    // rows; its hardware FLOPs the ranks', alike but for the contiguous layout's attention:
    // its cp ranks' sum (hw_cp) in place of cp times this rank's.
    const double ranks =
        (double)microbatches_per_step / (double)microbatches_per_rank * tp * cp;
    const double routed_rank_step = p.model_per_rank_step - unrouted_rank_step;
    p.model_per_step = model_whole * microbatches_per_step + routed_rank_step * ranks;
    p.hardware_per_step =
        p.hardware_per_rank_step * ranks + (hw_cp - hw * cp) * tp * microbatches_per_step;
  }
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
