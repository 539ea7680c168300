// model/moe.cpp: the MoE layer of model/moe.h, forward and backward, and its host-side
// dispatch (capacity, drops, the permutation maps) and expert-bias update.
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

Dispatch plan_dispatch(const Moe& moe, const int* experts, const float* gates, int N, int k) {
  const int E = moe.num_experts;
  Dispatch d;
  d.routed.assign(E, 0);
  // each expert's pairs in token order (the stable sort by expert)
  std::vector<std::vector<int>> pairs(E);
  for (int p = 0; p < N * k; ++p) {
    pairs.at(experts[p]).push_back(p);
    d.routed[experts[p]]++;
  }
  const bool capped = moe.capacity_factor > 0;
  if (capped) d.capacity = expert_capacity(N, k, E, moe.capacity_factor);
  d.rows.assign(E, 0);
  d.kept.assign(E, 0);
  d.offset.assign(E + 1, 0);
  d.slots.assign((size_t)N * k, -1);
  for (int e = 0; e < E; ++e) {
    std::vector<int>& mine = pairs[e];
    if (capped && (int)mine.size() > d.capacity) {
      if (moe.drop_policy == Moe::DropPolicy::PROBS) {
        // the C largest gates; equal gates keep the earlier token (pair index is token order)
        std::stable_sort(mine.begin(), mine.end(),
                         [&](int x, int y) { return gates[x] > gates[y]; });
      }
      d.dropped += (long long)mine.size() - d.capacity;
      mine.resize(d.capacity);
      std::sort(mine.begin(), mine.end());  // kept rows in token order
    }
    d.kept[e] = (int)mine.size();
    d.rows[e] = moe.pad_to_capacity ? std::min(d.capacity, N) : d.kept[e];
    d.offset[e + 1] = d.offset[e] + d.rows[e];
  }
  d.row_pair.assign(d.M(), -1);
  for (int e = 0; e < E; ++e)
    for (int i = 0; i < d.kept[e]; ++i) {
      const int row = d.offset[e] + i, p = pairs[e][i];
      d.row_pair[row] = p;
      d.slots[p] = row;
    }
  return d;
}

std::vector<float> update_expert_bias(const std::vector<float>& bias,
                                      const std::vector<long long>& counts, float rate) {
  const double mean =
      std::accumulate(counts.begin(), counts.end(), 0.0) / std::max<size_t>(1, counts.size());
  std::vector<float> out(bias);
  for (size_t e = 0; e < out.size(); ++e) {
    const double offset = mean - (double)counts[e];
    out[e] += rate * (float)((offset > 0) - (offset < 0));
  }
  return out;
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

template <typename T>
std::vector<T> download(Device dev, const Buffer<T>& b) {
  std::vector<T> host(b.size());
  if (!host.empty()) kernels::memcpy_to_host(dev, host.data(), b.data(), b.bytes());
  return host;
}

bool balancing_on(const Moe& m) {
  return m.balancing != Moe::Balancing::NONE && m.aux_loss_coeff > 0;
}

// d(aux)/d(p_e(t)) for the tokens of each group (aux_loss: one group; seq_aux_loss: one per
// sequence, averaged over the B groups): alpha E / (k T_g^2) c_{g,e} / groups. c counts the
// top-k of the balancing scores, which rank like the logits: the router's choice without the
// expert bias. The rank may hold a part of each group, as Megatron's aux loss over the tensor
// x context parallel group: under sequence parallelism N of the microbatch's N tp tokens (one
// group: seq_aux_loss with tp > 1 is refused), under context parallelism S/cp of each
// sequence's S (the local sequences are the groups' parts, in order). The counts are summed
// over tp, then over cp (an all-reduce of groups E int32 each) and T_g is the whole group's,
// T_g = group tp cp, so the ranks' partial losses (their own tokens' p) add up to the
// one-rank loss.
std::vector<float> aux_weights(const LayerContext& c, const std::vector<int>& topk_experts,
                               int N, int k) {
  const Moe& m = c.model.moe;
  const int E = m.num_experts, S = c.model.seq_length, cp = c.cp.size();
  const int tp = c.tp.sequence_parallel ? c.tp.size() : 1;
  const bool per_sequence = m.balancing == Moe::Balancing::SEQ_AUX_LOSS;
  const int group = per_sequence ? S : N, groups = N / group;  // S: the rank's S/cp
  std::vector<int> counts((size_t)groups * E, 0);
  for (int p = 0; p < N * k; ++p) counts[(size_t)(p / k / group) * E + topk_experts[p]]++;
  if (tp > 1 || cp > 1) {
    Buffer<int> sum(c.device, counts.size(), Category::WORKSPACE);
    kernels::memcpy_from_host(c.device, sum.data(), counts.data(), counts.size() * 4);
    if (tp > 1) c.tp.tp->all_reduce(sum.data(), counts.size(), ReduceOp::SUM, DType::I32);
    if (cp > 1) c.cp.cp->all_reduce(sum.data(), counts.size(), ReduceOp::SUM, DType::I32);
    kernels::memcpy_to_host(c.device, counts.data(), sum.data(), counts.size() * 4);
  }
  const double T = (double)group * tp * cp;
  const double scale = (double)m.aux_loss_coeff * E / ((double)k * T * T) / groups;
  std::vector<float> w((size_t)groups * E, 0.0f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = (float)(scale * (double)counts[i]);
  return w;
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

  // ---- dispatch on the host (Megatron syncs the counts too, for the grouped GEMM's sizes)
  const std::vector<int> experts = download(dev, a.experts);
  const std::vector<float> gates = download(dev, a.gates);
  const Dispatch d = plan_dispatch(moe, experts.data(), gates.data(), N, k);
  const int M = d.M();

  // ---- balancing losses: their gradient needs the per-group weights (a recompute makes
  //      them again, the same); the values are only statistics
  const bool training = !c.forward_only;
  std::vector<int> balancing_experts = experts;
  if (training && balancing_on(moe) && bias) {  // the choice without the expert bias
    Buffer<float> g2(dev, (size_t)N * k, Category::WORKSPACE);
    Buffer<int> e2(dev, (size_t)N * k, Category::WORKSPACE);
    kernels::moe_router_topk(dev, g2.data(), e2.data(), a.logits.data(), nullptr, N, E, k,
                             score_id(moe), moe.pre_softmax, moe.topk_scaling_factor);
    balancing_experts = download(dev, e2);
  }
  if (training && balancing_on(moe))
    a.aux_weights = aux_weights(c, balancing_experts, N, k);
  if (c.record_moe_stats && c.moe) {
    MoeLayerStats& s = c.moe->stats;
    s.tokens_per_expert.resize(E, 0);
    s.kept_per_expert.resize(E, 0);
    for (int e = 0; e < E; ++e) {
      s.tokens_per_expert[e] += d.routed[e];
      s.kept_per_expert[e] += d.kept[e];
      s.padding_rows += d.rows[e] - d.kept[e];
    }
    s.dropped_pairs += d.dropped;
    s.permuted_rows.push_back(M);
    s.microbatches++;
    if (balancing_on(moe)) {
      // aux = sum_t sum_e p_e(t) w_{g(t), e}, the weights above
      Buffer<float> scores(dev, (size_t)N * E, Category::WORKSPACE);
      Buffer<float> weights(dev, a.aux_weights.size(), Category::WORKSPACE);
      kernels::memcpy_from_host(dev, weights.data(), a.aux_weights.data(),
                                a.aux_weights.size() * sizeof(float));
      kernels::moe_balancing_scores(dev, scores.data(), a.logits.data(), N, E, score_id(moe));
      const int group = moe.balancing == Moe::Balancing::SEQ_AUX_LOSS ? m.seq_length : N;
      s.aux_loss += kernels::moe_weighted_sum(dev, scores.data(), weights.data(), N, E, group);
    }
    if (moe.z_loss_coeff > 0)
      s.z_loss += moe.z_loss_coeff * kernels::moe_z_loss_sum(dev, a.logits.data(), N, E) / N_all;
  }

  // ---- dispatch (permute, or the rows to their experts' ranks) -> experts -> combine
  const ExpertParallel& ep = c.ep;
  const LocalRouting routing{N, k, E, h, &d.rows, &d.offset, &d.row_pair, &d.slots};
  dispatch_tokens(ep, routing, moe.permute_fusion, u, a.gates.data(), a.exchange, a.expert_in,
                  a.expert_gates);
  const ExpertExchange& x = a.exchange;
  const int R = x.R;
  if (c.record_moe_stats && c.moe) {
    MoeLayerStats& s = c.moe->stats;
    s.expert_rows.push_back(R);
    s.ep_rows.push_back(x.R_ep);
    for (int rows : x.local_rows) s.nonempty_experts += rows > 0;
  }
  a.fc1_out.allocate(dev, (size_t)R * fc1e, act);
  a.act_out.allocate(dev, (size_t)R * fe, act);
  {
    kernels::GemmLabel label("experts");
    Buffer<T> y(dev, (size_t)R * h, Category::WORKSPACE);
    expert_gemm(c, false, true, a.expert_in.data(), h, w.experts_fc1, h, 0.0f, a.fc1_out.data(),
                fc1e, groups_of(x.local_rows, x.local_offset, Product::FORWARD, h, fc1e));
    if (m.is_gpt())
      kernels::moe_gelu_forward(dev, a.act_out.data(), a.fc1_out.data(), a.expert_gates.data(),
                                R, fe);
    else
      kernels::moe_swiglu_forward(dev, a.act_out.data(), a.fc1_out.data(),
                                  a.expert_gates.data(), R, fe);
    expert_gemm(c, false, true, a.act_out.data(), fe, w.experts_fc2, fe, 0.0f, y.data(), h,
                groups_of(x.local_rows, x.local_offset, Product::FORWARD, fe, h));
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
    expert_gemm(c, false, false, dy.data(), h, w.experts_fc2, fe, 0.0f, dact.data(), fe,
                groups_of(x.local_rows, x.local_offset, Product::INPUT_GRAD, fe, h));
    expert_gemm(c, true, false, dy.data(), h, a.act_out.data(), fe, 1.0f, g.experts_fc2, fe,
                groups_of(x.local_rows, x.local_offset, Product::WEIGHT_GRAD, fe, h));
    if (m.is_gpt())
      kernels::moe_gelu_backward(dev, dfc1.data(), dexpert_gates.data(), dact.data(),
                                 a.fc1_out.data(), a.expert_gates.data(), R, fe);
    else
      kernels::moe_swiglu_backward(dev, dfc1.data(), dexpert_gates.data(), dact.data(),
                                   a.fc1_out.data(), a.expert_gates.data(), R, fe);
    expert_gemm(c, false, false, dfc1.data(), fc1e, w.experts_fc1, h, 0.0f, dexpert_in.data(), h,
                groups_of(x.local_rows, x.local_offset, Product::INPUT_GRAD, h, fc1e));
    expert_gemm(c, true, false, dfc1.data(), fc1e, a.expert_in.data(), h, 1.0f, g.experts_fc1, h,
                groups_of(x.local_rows, x.local_offset, Product::WEIGHT_GRAD, h, fc1e));
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
    if (!a.aux_weights.empty()) {
      const int group = moe.balancing == Moe::Balancing::SEQ_AUX_LOSS ? m.seq_length : N;
      Buffer<float> weights(dev, a.aux_weights.size(), ws), dscores(dev, (size_t)N * E, ws);
      std::vector<float> scaled(a.aux_weights);
      for (float& x : scaled) x *= c.grad_scale;
      kernels::memcpy_from_host(dev, weights.data(), scaled.data(), scaled.size() * sizeof(float));
      kernels::moe_weighted_sum_backward(dev, dscores.data(), weights.data(), N, E, group);
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
template void moe_backward(const LayerContext&, const MoeWeights<float>&, MoeGrads<float>&,
                           const float*, const float*, float*, MoeActivations<float>&);
template void moe_backward(const LayerContext&, const MoeWeights<kernels::bf16>&,
                           MoeGrads<kernels::bf16>&, const kernels::bf16*, const kernels::bf16*,
                           kernels::bf16*, MoeActivations<kernels::bf16>&);

}  // namespace paralab
