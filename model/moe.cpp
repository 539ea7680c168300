// model/moe.cpp: the MoE layer of model/moe.h, forward and backward: the router, the balancing
// losses, the dispatch built on the device (kernels/ops/moe_dispatch.h), the experts.
#include "model/moe.h"
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <type_traits>
#include "kernels/ops.h"
#include "model/layer.h"

namespace paralab {

int expert_capacity(int tokens, int k, int E, float capacity_factor) {
  return (int)std::ceil((double)tokens * k / E * (double)capacity_factor);
}

namespace {

using kernels::Device;
using kernels::GemmGroup;

// One projection of every expert: grouped (one call) or one gemm per expert with rows.
template <typename T>
void expert_gemm(const LayerContext& c, bool ta, bool tb, const T* A, int lda, const T* B,
                 int ldb, float beta, T* C, int ldc, const std::vector<GemmGroup>& groups) {
  if (c.model.moe.grouped_gemm) {
    kernels::gemm_grouped(c.device, ta, tb, 1.0f, A, lda, B, ldb, beta, C, ldc, groups.data(),
                          (int)groups.size());
    return;
  }
  for (const GemmGroup& g : groups)
    if (g.m > 0 && g.n > 0 && g.k > 0)
      kernels::gemm(c.device, ta, tb, g.m, g.n, g.k, 1.0f, A + g.a_offset, lda, B + g.b_offset,
                    ldb, beta, C + g.c_offset, ldc);
}

// The three products of an expert's linear layer W (out_features, in_features) on its n_e
// rows: forward y = x W^T, input gradient dX = dY W, weight gradient dW += dY^T X.
enum class Product { FORWARD, INPUT_GRAD, WEIGHT_GRAD };
// One group per expert: its rows start at offset_e in the permuted activations, its weight
// at e (out_features in_features) in the stacked (E, out, in) tensor.
std::vector<GemmGroup> groups_of(const std::vector<int>& rows, const std::vector<int>& offset,
                                 Product kind, int in_features, int out_features) {
  std::vector<GemmGroup> g(rows.size());
  const long long w = (long long)in_features * out_features;
  for (size_t e = 0; e < rows.size(); ++e) {
    const long long r = offset[e];
    switch (kind) {
      case Product::FORWARD:      // (n_e, in) x (out, in)^T
        g[e] = {rows[e], out_features, in_features, r * in_features, (long long)e * w,
                r * out_features};
        break;
      case Product::INPUT_GRAD:   // (n_e, out) x (out, in)
        g[e] = {rows[e], in_features, out_features, r * out_features, (long long)e * w,
                r * in_features};
        break;
      case Product::WEIGHT_GRAD:  // (n_e, out)^T x (n_e, in)
        g[e] = {out_features, in_features, rows[e], r * out_features, r * in_features,
                (long long)e * w};
        break;
    }
  }
  return g;
}

// The experts' linears: fc1 (h -> fc1_e) and fc2 (f_e -> h) of every local expert on its rows
// (local_rows, from local_offset in the permuted activations), its weight the e-th of the
// stacked (E/ep, out, in) tensor. In the storage type: expert_gemm. In FP8 (c.fp8_experts,
// docs/fp8.md): each expert with rows is its own FP8 linear (parallel/fp8_linear.h) with its
// own scaling state, linear fp8_experts_first + 2 e (+ 1 for fc2), as Transformer Engine's
// GroupedLinear keeps one per GEMM; its operands in `scratch`, sized for all R rows.
enum class Fc { FC1 = 0, FC2 = 1 };
struct ExpertLinears {
  const LayerContext& c;
  const ExpertExchange& x;
  Fc fc;
  int in, out;
  Fp8Scratch* scratch;
  bool fp8() const { return c.fp8_experts != nullptr; }
  Fp8Linear linear(size_t e) const {
    const int index = c.fp8_experts_first + 2 * (int)e + (int)fc;
    if (c.fp8_expert_weights.state == nullptr) return {c.fp8_experts, index, scratch};
    // --fp8-param-gather: ZeRO-3's codes in W's place, or (ZeRO-1/2) W as stored, its other
    // slices decoded from the gathered codes; cast at the gathered scale (parallel/fp8_linear.h)
    const int k = (int)fc * (int)x.local_rows.size() + (int)e;
    return {c.fp8_experts, index, scratch, c.fp8_expert_weights.scale(k),
            c.fp8_expert_weights.factor(k), c.fp8_weights_stored};
  }
  size_t rows(size_t e) const { return (size_t)x.local_offset[e]; }  // its first row
  size_t weight(size_t e) const { return e * (size_t)in * out; }
};

// y = x W^T per expert.
template <typename T>
void experts_fprop(const ExpertLinears& L, T* y, const T* in, const T* W) {
  if (!L.fp8())
    return expert_gemm(L.c, false, true, in, L.in, W, L.in, 0.0f, y, L.out,
                       groups_of(L.x.local_rows, L.x.local_offset, Product::FORWARD, L.in, L.out));
  for (size_t e = 0; e < L.x.local_rows.size(); ++e)
    if (L.x.local_rows[e] > 0)
      linear_fprop(L.c.device, L.linear(e), y + L.rows(e) * L.out, in + L.rows(e) * L.in,
                   W + L.weight(e), L.x.local_rows[e], L.in, L.out);
}
// dx = dy W per expert.
template <typename T>
void experts_dgrad(const ExpertLinears& L, T* dx, const T* dy, const T* W) {
  if (!L.fp8())
    return expert_gemm(L.c, false, false, dy, L.out, W, L.in, 0.0f, dx, L.in,
                       groups_of(L.x.local_rows, L.x.local_offset, Product::INPUT_GRAD, L.in,
                                 L.out));
  for (size_t e = 0; e < L.x.local_rows.size(); ++e)
    if (L.x.local_rows[e] > 0)
      linear_dgrad(L.c.device, L.linear(e), dx + L.rows(e) * L.in, dy + L.rows(e) * L.out,
                   W + L.weight(e), L.x.local_rows[e], L.in, L.out);
}
// dW += dy^T x per expert.
template <typename T>
void experts_wgrad(const ExpertLinears& L, T* dW, const T* dy, const T* in) {
  if (!L.fp8())
    return expert_gemm(L.c, true, false, dy, L.out, in, L.in, 1.0f, dW, L.in,
                       groups_of(L.x.local_rows, L.x.local_offset, Product::WEIGHT_GRAD, L.in,
                                 L.out));
  for (size_t e = 0; e < L.x.local_rows.size(); ++e)
    if (L.x.local_rows[e] > 0)
      linear_wgrad(L.c.device, L.linear(e), dW + L.weight(e), dy + L.rows(e) * L.out,
                   in + L.rows(e) * L.in, L.x.local_rows[e], L.in, L.out);
}

// The experts' FP8 operands for R rows (category workspace, parallel/fp8_linear.h), empty
// in the storage type. decoded_es: the backward's, with --fp8-param-gather at ZeRO-3, whose
// dgrad decodes an expert's gathered codes (es bytes per element of the larger of fc1 and
// fc2); 0 for the forward (fprop reads the codes) and elsewhere.
Fp8Scratch expert_scratch(const LayerContext& c, int R, int h, int fc1e, int fe,
                          int decoded_es) {
  Fp8Scratch s;
  if (c.fp8_experts)
    s.allocate(c.device, c.model.fp8, R, {{h, fc1e}, {fe, h}}, decoded_es, Category::WORKSPACE);
  return s;
}
bool expert_codes_gathered(const LayerContext& c) {  // ZeRO-3's codes in the experts' places
  return c.fp8_expert_weights.state != nullptr && !c.fp8_weights_stored;
}

// The router in fp32 whatever the storage: bf16 inputs are widened first (Megatron's
// router dtype fp32). Returns the fp32 view of x (itself for fp32).
template <typename T>
const float* as_float(Device dev, const T* x, size_t n, Buffer<float>& scratch) {
  if constexpr (std::is_same<T, float>::value) {
    (void)dev, (void)n, (void)scratch;
    return x;
  } else {
    scratch.allocate(dev, n, Category::WORKSPACE);
    kernels::convert(dev, scratch.data(), x, n);
    return scratch.data();
  }
}

// dst (storage T) += src (fp32).
template <typename T>
void accumulate_float(Device dev, T* dst, const float* src, size_t n) {
  if constexpr (std::is_same<T, float>::value) {
    kernels::accumulate(dev, dst, src, n);
  } else {
    Buffer<T> rounded(dev, n, Category::WORKSPACE);
    kernels::convert(dev, rounded.data(), src, n);
    kernels::accumulate(dev, dst, rounded.data(), n);
  }
}

bool balancing_on(const Moe& m) {
  return m.balancing != Moe::Balancing::NONE && m.aux_loss_coeff > 0;
}

// The aux loss's counts c_{g,e} (groups x E int32, on the device, into `counts`, category
// activations: the backward reads them) and returns its scale, d(aux)/d(p_e(t)) =
// scale c_{g(t),e} with scale = alpha E / (k T_g^2) / groups (aux_loss: one group; seq_aux_loss:
// one per sequence, averaged over the B groups). c counts the top-k of the balancing scores,
// which rank like the logits: the router's choice without the expert bias (topk_experts). The
// rank may hold a part of each group, as Megatron's aux loss over the tensor x context parallel
// group: under sequence parallelism N of the microbatch's N tp tokens (one group: seq_aux_loss
// with tp > 1 is refused), under context parallelism S/cp of each sequence's S (the local
// sequences are the groups' parts, in order). The counts are summed over tp, then over cp (an
// all-reduce of groups E int32 each, on the device) and T_g is the whole group's,
// T_g = group tp cp, so the ranks' partial losses (their own tokens' p) add up to the
// one-rank loss.
double balancing_counts(const LayerContext& c, const int* topk_experts, int N, int k,
                        Buffer<int>& counts) {
  const Moe& m = c.model.moe;
  const int E = m.num_experts, S = c.model.seq_length, cp = c.cp.size();
  const int tp = c.tp.sequence_parallel ? c.tp.size() : 1;
  const bool per_sequence = m.balancing == Moe::Balancing::SEQ_AUX_LOSS;
  const int group = per_sequence ? S : N, groups = N / group;  // S: the rank's S/cp
  counts.allocate(c.device, (size_t)groups * E, Category::ACTIVATIONS);
  kernels::moe_expert_counts(c.device, counts.data(), topk_experts, N, k, E, group);
  if (tp > 1) c.tp.tp->all_reduce(counts.data(), counts.size(), ReduceOp::SUM, DType::I32);
  if (cp > 1) c.cp.cp->all_reduce(counts.data(), counts.size(), ReduceOp::SUM, DType::I32);
  const double T = (double)group * tp * cp;
  return (double)m.aux_loss_coeff * E / ((double)k * T * T) / groups;
}

int score_id(const Moe& m) { return m.score == Moe::Score::SIGMOID ? 1 : 0; }

}  // namespace

template <typename T>
void moe_forward(const LayerContext& c, const MoeWeights<T>& w, const T* u, T* out,
                 MoeActivations<T>& a) {
  const ModelConfig& m = c.model;
  const Moe& moe = m.moe;
  const Device dev = c.device;
  // the rank's tokens: B S/cp of the local sequences (S/cp of each under context
  // parallelism), N/tp of them under sequence parallelism; N_all the whole microbatch's B S
  // tokens (the z-loss's mean: the ranks' partial sums add up to it)
  const int N = c.tp.local_tokens(c.B * m.seq_length);
  const int N_all = c.B * m.seq_length * c.cp.size();
  const int h = m.hidden_size, E = moe.num_experts, k = moe.topk;
  const int fe = m.moe_ffn(), fc1e = m.moe_fc1_size();
  const Category act = Category::ACTIVATIONS;

  // ---- router: logits in fp32, top-k
  a.logits.allocate(dev, (size_t)N * E, act);
  {
    kernels::GemmLabel label("router");
    Buffer<float> u_f, w_f;
    const float* uf = as_float(dev, u, (size_t)N * h, u_f);
    const float* wf = as_float(dev, w.router, (size_t)E * h, w_f);
    kernels::gemm(dev, false, true, N, E, h, 1.0f, uf, h, wf, h, 0.0f, a.logits.data(), E);
  }
  a.gates.allocate(dev, (size_t)N * k, act);
  a.experts.allocate(dev, (size_t)N * k, act);
  const float* bias = c.moe && !c.moe->expert_bias.empty() ? c.moe->expert_bias.data() : nullptr;
  kernels::moe_router_topk(dev, a.gates.data(), a.experts.data(), a.logits.data(), bias, N, E, k,
                           score_id(moe), moe.pre_softmax, moe.topk_scaling_factor);

  // ---- balancing losses: their gradient needs each group's top-k counts (a recompute makes
  //      them again, the same); the values are only statistics
  const bool training = !c.forward_only;
  const int group = moe.balancing == Moe::Balancing::SEQ_AUX_LOSS ? m.seq_length : N;
  if (training && balancing_on(moe)) {
    if (bias) {  // the choice without the expert bias
      Buffer<float> g2(dev, (size_t)N * k, Category::WORKSPACE);
      Buffer<int> e2(dev, (size_t)N * k, Category::WORKSPACE);
      kernels::moe_router_topk(dev, g2.data(), e2.data(), a.logits.data(), nullptr, N, E, k,
                               score_id(moe), moe.pre_softmax, moe.topk_scaling_factor);
      a.aux_scale = balancing_counts(c, e2.data(), N, k, a.aux_counts);
    } else {
      a.aux_scale = balancing_counts(c, a.experts.data(), N, k, a.aux_counts);
    }
  }
  const bool record = c.record_moe_stats && c.moe;
  if (record) {
    MoeLayerStats& s = c.moe->stats;
    if (balancing_on(moe)) {
      // aux = sum_t sum_e p_e(t) w_{g(t), e}, w = aux_scale c (the counts above)
      Buffer<float> scores(dev, (size_t)N * E, Category::WORKSPACE);
      kernels::moe_balancing_scores(dev, scores.data(), a.logits.data(), N, E, score_id(moe));
      s.aux_loss += kernels::moe_weighted_sum(dev, scores.data(), a.aux_counts.data(),
                                              a.aux_scale, N, E, group);
    }
    if (moe.z_loss_coeff > 0)
      s.z_loss += moe.z_loss_coeff * kernels::moe_z_loss_sum(dev, a.logits.data(), N, E) / N_all;
  }

  // ---- dispatch, a counting sort on the device (kernels/ops/moe_dispatch.h): the counts per
  //      expert, their scan (the rows, and the statistics' sums), the host's sizes (one copy of
  //      the E rows, none padded to capacity), then the maps; Megatron syncs the same counts
  //      for its grouped GEMM's sizes
  const int C = moe.capacity_factor > 0 ? expert_capacity(N, k, E, moe.capacity_factor) : -1;
  const int padded_rows = moe.pad_to_capacity && C >= 0 ? std::min(C, N) : -1;
  const bool probs = C >= 0 && moe.drop_policy == Moe::DropPolicy::PROBS;
  const ExpertParallel& ep = c.ep;
  ExpertExchange& x = a.exchange;
  {
    Buffer<int> sizes(dev, 3 * (size_t)E + 1, Category::WORKSPACE);  // counts | rows | offset
    int *counts = sizes.data(), *rows = counts + E, *offset = rows + E;
    kernels::moe_expert_counts(dev, counts, a.experts.data(), N, k, E, N);
    kernels::moe_dispatch_offsets(dev, rows, offset, record ? c.moe->routed_counts : nullptr,
                                  record ? c.moe->kept_counts : nullptr, counts, E, C,
                                  padded_rows, record && c.moe->stats.microbatches > 0);
    routing_sizes(ep, LocalRouting{N, k, E, h, rows, padded_rows}, x);
    x.row_pair.allocate(dev, x.M, act);
    x.slots.allocate(dev, (size_t)N * k, act);
    Buffer<int> rank(dev, probs ? (size_t)N * k : 0, Category::WORKSPACE);
    if (probs)
      kernels::moe_gate_rank(dev, rank.data(), a.experts.data(), a.gates.data(), N, k, E);
    kernels::moe_dispatch_scatter(dev, x.row_pair.data(), x.slots.data(), a.experts.data(),
                                  probs ? rank.data() : nullptr, offset, N, k, E, x.M, C);
  }

  // ---- dispatch (permute, or the rows to their experts' ranks) -> experts -> combine
  dispatch_tokens(ep, moe.permute_fusion, u, a.gates.data(), x, a.expert_in, a.expert_gates);
  const int R = x.R;
  if (record) {
    MoeLayerStats& s = c.moe->stats;
    s.permuted_rows.push_back(x.M);
    s.microbatch_ids.push_back(c.microbatch);
    s.expert_rows.push_back(R);
    s.ep_rows.push_back(x.R_ep);
    for (int rows : x.local_rows) s.nonempty_experts += rows > 0;
    s.microbatches++;
    c.moe->counts_pending = true;
  }
  a.fc1_out.allocate(dev, (size_t)R * fc1e, act);
  a.act_out.allocate(dev, (size_t)R * fe, act);
  {
    kernels::GemmLabel label("experts");
    Buffer<T> y(dev, (size_t)R * h, Category::WORKSPACE);
    {
      Fp8Scratch scratch = expert_scratch(c, R, h, fc1e, fe, 0);  // freed before the combine
      experts_fprop(ExpertLinears{c, x, Fc::FC1, h, fc1e, &scratch}, a.fc1_out.data(),
                    a.expert_in.data(), w.experts_fc1);
      if (m.is_gpt())
        kernels::moe_gelu_forward(dev, a.act_out.data(), a.fc1_out.data(), a.expert_gates.data(),
                                  R, fe);
      else
        kernels::moe_swiglu_forward(dev, a.act_out.data(), a.fc1_out.data(),
                                    a.expert_gates.data(), R, fe);
      experts_fprop(ExpertLinears{c, x, Fc::FC2, fe, h, &scratch}, y.data(), a.act_out.data(),
                    w.experts_fc2);
    }
    combine_tokens(ep, x, y.data(), out);
  }

  // ---- shared expert: every token, added to the routed output
  if (moe.shared_expert_size > 0) {
    kernels::GemmLabel label("shared_expert");
    const int fs = moe.shared_expert_size, fc1s = m.shared_fc1_size();
    a.shared_fc1_out.allocate(dev, (size_t)N * fc1s, act);
    a.shared_act_out.allocate(dev, (size_t)N * fs, act);
    kernels::gemm(dev, false, true, N, fc1s, h, 1.0f, u, h, w.shared_fc1, h, 0.0f,
                  a.shared_fc1_out.data(), fc1s);
    if (m.is_gpt())
      kernels::gelu_forward(dev, a.shared_act_out.data(), a.shared_fc1_out.data(), (size_t)N * fs);
    else
      kernels::swiglu_forward(dev, a.shared_act_out.data(), a.shared_fc1_out.data(), N, fs);
    if (moe.shared_expert_gate) {
      a.shared_out.allocate(dev, (size_t)N * h, act);
      a.shared_gate.allocate(dev, N, act);
      kernels::gemm(dev, false, true, N, h, fs, 1.0f, a.shared_act_out.data(), fs, w.shared_fc2,
                    fs, 0.0f, a.shared_out.data(), h);
      kernels::gemm(dev, false, true, N, 1, h, 1.0f, u, h, w.shared_gate, h, 0.0f,
                    a.shared_gate.data(), 1);
      kernels::moe_shared_gate_forward(dev, out, a.shared_out.data(), a.shared_gate.data(), N, h);
    } else {
      kernels::gemm(dev, false, true, N, h, fs, 1.0f, a.shared_act_out.data(), fs, w.shared_fc2,
                    fs, 1.0f, out, h);
    }
  }
}

template <typename T>
void moe_backward(const LayerContext& c, const MoeWeights<T>& w, MoeGrads<T>& g, const T* u,
                  const T* dout, T* du, MoeActivations<T>& a) {
  const ModelConfig& m = c.model;
  const Moe& moe = m.moe;
  const Device dev = c.device;
  // the rank's tokens: B S/cp of the local sequences (S/cp of each under context
  // parallelism), N/tp of them under sequence parallelism; N_all the whole microbatch's B S
  // tokens (the z-loss's mean: the ranks' partial sums add up to it)
  const int N = c.tp.local_tokens(c.B * m.seq_length);
  const int N_all = c.B * m.seq_length * c.cp.size();
  const int h = m.hidden_size, E = moe.num_experts, k = moe.topk;
  const int fe = m.moe_ffn(), fc1e = m.moe_fc1_size();
  const Category ws = Category::WORKSPACE;
  const ExpertExchange& x = a.exchange;
  const int R = x.R;
  const ExpertParallel& ep = c.ep;
  // du is written last: dout may live in the same buffer (the layer's dropout backward)
  Buffer<T> dx(dev, (size_t)N * h, ws);
  Buffer<float> dgates(dev, (size_t)N * k, ws);

  // ---- experts, last to first: combine's backward brings dout's rows to the experts,
  //      dispatch's takes the input and gate gradients back to the tokens
  {
    kernels::GemmLabel label("experts");
    Buffer<float> dexpert_gates(dev, R, ws);
    Buffer<T> dy(dev, (size_t)R * h, ws), dact(dev, (size_t)R * fe, ws);
    Buffer<T> dfc1(dev, (size_t)R * fc1e, ws), dexpert_in(dev, (size_t)R * h, ws);
    combine_tokens_backward(ep, x, dout, dy.data());
    {
      Fp8Scratch scratch =  // between the two exchanges
          expert_scratch(c, R, h, fc1e, fe, expert_codes_gathered(c) ? (int)sizeof(T) : 0);
      const ExpertLinears fc1{c, x, Fc::FC1, h, fc1e, &scratch};
      const ExpertLinears fc2{c, x, Fc::FC2, fe, h, &scratch};
      experts_dgrad(fc2, dact.data(), dy.data(), w.experts_fc2);
      experts_wgrad(fc2, g.experts_fc2, dy.data(), a.act_out.data());
      if (m.is_gpt())
        kernels::moe_gelu_backward(dev, dfc1.data(), dexpert_gates.data(), dact.data(),
                                   a.fc1_out.data(), a.expert_gates.data(), R, fe);
      else
        kernels::moe_swiglu_backward(dev, dfc1.data(), dexpert_gates.data(), dact.data(),
                                     a.fc1_out.data(), a.expert_gates.data(), R, fe);
      experts_dgrad(fc1, dexpert_in.data(), dfc1.data(), w.experts_fc1);
      experts_wgrad(fc1, g.experts_fc1, dfc1.data(), a.expert_in.data());
    }
    dispatch_tokens_backward(ep, x, dexpert_in.data(), dexpert_gates.data(), dx.data(),
                             dgates.data());
  }

  // ---- router: the gates' gradient, the balancing losses', back through the logits
  {
    kernels::GemmLabel label("router");
    Buffer<float> dlogits(dev, (size_t)N * E, ws);
    kernels::moe_router_topk_backward(dev, dlogits.data(), dgates.data(), a.logits.data(),
                                      a.experts.data(), N, E, k, score_id(moe), moe.pre_softmax,
                                      moe.topk_scaling_factor);
    if (!a.aux_counts.empty()) {
      const int group = moe.balancing == Moe::Balancing::SEQ_AUX_LOSS ? m.seq_length : N;
      Buffer<float> dscores(dev, (size_t)N * E, ws);
      kernels::moe_weighted_sum_backward(dev, dscores.data(), a.aux_counts.data(), a.aux_scale,
                                         c.grad_scale, N, E, group);
      kernels::moe_balancing_scores_backward(dev, dlogits.data(), dscores.data(), a.logits.data(),
                                             N, E, score_id(moe));
    }
    if (moe.z_loss_coeff > 0)
      kernels::moe_z_loss_backward(dev, dlogits.data(), a.logits.data(), N, E,
                                   moe.z_loss_coeff * c.grad_scale / N_all);
    Buffer<float> u_f, w_f, du_f(dev, (size_t)N * h, ws), dw_f(dev, (size_t)E * h, ws);
    const float* uf = as_float(dev, u, (size_t)N * h, u_f);
    const float* wf = as_float(dev, w.router, (size_t)E * h, w_f);
    kernels::gemm(dev, false, false, N, h, E, 1.0f, dlogits.data(), E, wf, h, 0.0f, du_f.data(), h);
    kernels::gemm(dev, true, false, E, h, N, 1.0f, dlogits.data(), E, uf, h, 0.0f, dw_f.data(), h);
    accumulate_float(dev, dx.data(), du_f.data(), (size_t)N * h);
    accumulate_float(dev, g.router, dw_f.data(), (size_t)E * h);
  }

  // ---- shared expert
  if (moe.shared_expert_size > 0) {
    kernels::GemmLabel label("shared_expert");
    const int fs = moe.shared_expert_size, fc1s = m.shared_fc1_size();
    const T* ds_out = dout;
    Buffer<T> gated(dev, moe.shared_expert_gate ? (size_t)N * h : 0, ws);
    if (moe.shared_expert_gate) {
      Buffer<T> dz(dev, N, ws);
      kernels::moe_shared_gate_backward(dev, gated.data(), dz.data(), dout, a.shared_out.data(),
                                        a.shared_gate.data(), N, h);
      kernels::gemm(dev, false, false, N, h, 1, 1.0f, dz.data(), 1, w.shared_gate, h, 1.0f,
                    dx.data(), h);
      kernels::gemm(dev, true, false, 1, h, N, 1.0f, dz.data(), 1, u, h, 1.0f, g.shared_gate, h);
      ds_out = gated.data();
    }
    Buffer<T> dact(dev, (size_t)N * fs, ws), dfc1(dev, (size_t)N * fc1s, ws);
    kernels::gemm(dev, false, false, N, fs, h, 1.0f, ds_out, h, w.shared_fc2, fs, 0.0f,
                  dact.data(), fs);
    kernels::gemm(dev, true, false, h, fs, N, 1.0f, ds_out, h, a.shared_act_out.data(), fs, 1.0f,
                  g.shared_fc2, fs);
    if (m.is_gpt())
      kernels::gelu_backward(dev, dfc1.data(), dact.data(), a.shared_fc1_out.data(), (size_t)N * fs);
    else
      kernels::swiglu_backward(dev, dfc1.data(), dact.data(), a.shared_fc1_out.data(), N, fs);
    kernels::gemm(dev, false, false, N, h, fc1s, 1.0f, dfc1.data(), fc1s, w.shared_fc1, h, 1.0f,
                  dx.data(), h);
    kernels::gemm(dev, true, false, fc1s, h, N, 1.0f, dfc1.data(), fc1s, u, h, 1.0f, g.shared_fc1,
                  h);
  }
  kernels::memcpy_device(dev, du, dx.data(), (size_t)N * h * sizeof(T));
}

template void moe_forward(const LayerContext&, const MoeWeights<float>&, const float*, float*,
                          MoeActivations<float>&);
template void moe_forward(const LayerContext&, const MoeWeights<kernels::bf16>&,
                          const kernels::bf16*, kernels::bf16*, MoeActivations<kernels::bf16>&);
template void moe_forward(const LayerContext&, const MoeWeights<kernels::fp16>&,
                          const kernels::fp16*, kernels::fp16*, MoeActivations<kernels::fp16>&);
template void moe_backward(const LayerContext&, const MoeWeights<float>&, MoeGrads<float>&,
                           const float*, const float*, float*, MoeActivations<float>&);
template void moe_backward(const LayerContext&, const MoeWeights<kernels::bf16>&,
                           MoeGrads<kernels::bf16>&, const kernels::bf16*, const kernels::bf16*,
                           kernels::bf16*, MoeActivations<kernels::bf16>&);
template void moe_backward(const LayerContext&, const MoeWeights<kernels::fp16>&,
                           MoeGrads<kernels::fp16>&, const kernels::fp16*, const kernels::fp16*,
                           kernels::fp16*, MoeActivations<kernels::fp16>&);

}  // namespace paralab
