// model/attention.cpp: the attention core, softmax(q k^T / sqrt(d)) v with a causal mask, two
// ways (--attention):
//
//  naive  materialises the probabilities P (B,a,S,S) and keeps them for backward: the
//         5as/h term of Korthikanti et al.'s activation count (2 bytes P + 1 byte dropout
//         mask + 2 bytes dropped P, per element, with 16-bit activations).
//  flash  tiles the product with an online softmax and keeps only the log-sum-exp (B,a,S);
//         backward recomputes P from q, k and lse (Dao et al. 2022).
//
// Selective recompute of the core (--recompute-modules core_attn) keeps neither: P, the mask
// and P' (naive) or the lse (flash) are made again before the backward by the forward's own
// kernels on the kept q, k, v. The dropout mask is a pure function of (seed, stream,
// element) (kernels/math.h), so it comes back bit for bit, and so does everything else.
//
// Grouped-query attention: the a/g query heads of one group share its key/value head, and
// are contiguous in q (B,a,S,d), so one GEMM per (batch, group) handles a whole group:
// Q_group (a/g * S, d) x K^T (d, S) -> scores (a/g * S, S).
#include <cmath>
#include "kernels/ops.h"
#include "model/layer.h"

namespace paralab {

namespace {
struct Dims {
  int B, S, A, G, D, R;  // R = heads per group
  long long q_group, kv_group, p_group;  // element strides per (batch, group)
};
Dims dims(const LayerContext& c) {
  const ModelConfig& m = c.model;
  Dims x{c.B, m.seq_length, m.num_attention_heads, m.groups(), m.head_dim(), 0, 0, 0, 0};
  x.R = x.A / x.G;
  x.q_group = (long long)x.R * x.S * x.D;
  x.kv_group = (long long)x.S * x.D;
  x.p_group = (long long)x.R * x.S * x.S;
  return x;
}

// The attention-dropout stream of this layer: each tensor-parallel rank's heads draw their
// own masks (rank 0's are single-rank's).
uint64_t attention_stream(const LayerContext& c) {
  return 4ull * c.layer + 1 + ((uint64_t)c.tp.rank() << 32);
}

// Flash forward: O (head layout, ws.o_heads) and the log-sum-exp.
template <typename T>
void flash_forward(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws) {
  const Dims x = dims(c);
  kernels::flash_attention_forward(c.device, ws.o_heads.data(), act.lse.data(), act.q.data(),
                                   act.k.data(), act.v.data(), x.B, x.A, x.G, x.S, x.D,
                                   1.0f / std::sqrt((float)x.D), c.model.attention_dropout,
                                   c.dropout_seed, attention_stream(c));
}

// Naive forward up to P V's left operand: P, and with attention dropout its mask and P'.
// Returns P' (or P).
template <typename T>
const T* naive_probs(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws) {
  const Dims x = dims(c);
  const float p = c.model.attention_dropout;
  const auto dev = c.device;
  // scores = Q K^T per (batch, group); P = causal_softmax(scale * scores)
  kernels::gemm_strided_batched(dev, false, true, x.R * x.S, x.S, x.D, 1.0f, act.q.data(), x.D,
                                x.q_group, act.k.data(), x.D, x.kv_group, 0.0f,
                                ws.scores.data(), x.S, x.p_group, x.B * x.G);
  kernels::causal_softmax_forward(dev, act.probs.data(), ws.scores.data(), x.B * x.A, x.S,
                                  1.0f / std::sqrt((float)x.D));
  if (p <= 0.0f) return act.probs.data();
  kernels::dropout_forward(dev, act.probs_dropped.data(), act.attn_mask.data(), act.probs.data(),
                           act.probs.size(), p, c.dropout_seed, attention_stream(c));
  return act.probs_dropped.data();
}
}  // namespace

template <typename T>
void attention_forward(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws) {
  const Dims x = dims(c);
  const auto dev = c.device;
  if (c.model.attention == AttentionImpl::FLASH) {
    flash_forward(c, act, ws);
  } else {
    const T* used = naive_probs(c, act, ws);
    // O = P' V per (batch, group): (R*S, S) x (S, d)
    kernels::gemm_strided_batched(dev, false, false, x.R * x.S, x.D, x.S, 1.0f, used, x.S,
                                  x.p_group, act.v.data(), x.D, x.kv_group, 0.0f,
                                  ws.o_heads.data(), x.D, x.q_group, x.B * x.G);
  }
  kernels::heads_merge_forward(dev, act.ctx.data(), ws.o_heads.data(), x.B, x.S, x.A, x.D);
}

// Only what the backward reads: naive P V is not rerun (ctx, its output, is kept as proj's
// input); flash reruns its forward, which makes O along with the lse.
template <typename T>
void attention_recompute(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws) {
  if (c.model.attention == AttentionImpl::FLASH)
    flash_forward(c, act, ws);
  else
    naive_probs(c, act, ws);
}

template <typename T>
void attention_backward(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws) {
  const Dims x = dims(c);
  const float scale = 1.0f / std::sqrt((float)x.D);
  const float p = c.model.attention_dropout;
  const uint64_t stream = attention_stream(c);
  const auto dev = c.device;
  kernels::heads_merge_backward(dev, ws.do_heads.data(), ws.dctx.data(), x.B, x.S, x.A, x.D);
  if (c.model.attention == AttentionImpl::FLASH) {
    // flash backward needs O in head layout: un-merge the saved ctx (a permutation), unless
    // the recompute's forward has just made it.
    if (!c.model.recompute.recompute_core_attn())
      kernels::heads_merge_backward(dev, ws.o_heads.data(), act.ctx.data(), x.B, x.S, x.A, x.D);
    kernels::flash_attention_backward(dev, ws.dq.data(), ws.dk.data(), ws.dv.data(),
                                      ws.do_heads.data(), act.q.data(), act.k.data(),
                                      act.v.data(), ws.o_heads.data(), act.lse.data(), x.B, x.A,
                                      x.G, x.S, x.D, scale, p, c.dropout_seed, stream);
    return;
  }
  const T* used = p > 0.0f ? act.probs_dropped.data() : act.probs.data();
  // dP' = dO V^T: (R*S, d) x (d, S)
  kernels::gemm_strided_batched(dev, false, true, x.R * x.S, x.S, x.D, 1.0f, ws.do_heads.data(),
                                x.D, x.q_group, act.v.data(), x.D, x.kv_group, 0.0f,
                                ws.dprobs.data(), x.S, x.p_group, x.B * x.G);
  // dV = P'^T dO, summed over the R heads of the group: (S, R*S) x (R*S, d)
  kernels::gemm_strided_batched(dev, true, false, x.S, x.D, x.R * x.S, 1.0f, used, x.S,
                                x.p_group, ws.do_heads.data(), x.D, x.q_group, 0.0f,
                                ws.dv.data(), x.D, x.kv_group, x.B * x.G);
  if (p > 0.0f)
    kernels::dropout_backward(dev, ws.dprobs.data(), ws.dprobs.data(), act.attn_mask.data(),
                              ws.dprobs.size(), p);
  // dS = scale * P * (dP - rowsum(dP * P)), into the scores scratch
  kernels::causal_softmax_backward(dev, ws.scores.data(), ws.dprobs.data(), act.probs.data(),
                                   x.B * x.A, x.S, scale);
  // dQ = dS K: (R*S, S) x (S, d)
  kernels::gemm_strided_batched(dev, false, false, x.R * x.S, x.D, x.S, 1.0f, ws.scores.data(),
                                x.S, x.p_group, act.k.data(), x.D, x.kv_group, 0.0f,
                                ws.dq.data(), x.D, x.q_group, x.B * x.G);
  // dK = dS^T Q, summed over the group's heads: (S, R*S) x (R*S, d)
  kernels::gemm_strided_batched(dev, true, false, x.S, x.D, x.R * x.S, 1.0f, ws.scores.data(),
                                x.S, x.p_group, act.q.data(), x.D, x.q_group, 0.0f,
                                ws.dk.data(), x.D, x.kv_group, x.B * x.G);
}

template void attention_forward(const LayerContext&, LayerActivations<float>&, Workspace<float>&);
template void attention_forward(const LayerContext&, LayerActivations<kernels::bf16>&,
                                Workspace<kernels::bf16>&);
template void attention_backward(const LayerContext&, LayerActivations<float>&,
                                 Workspace<float>&);
template void attention_backward(const LayerContext&, LayerActivations<kernels::bf16>&,
                                 Workspace<kernels::bf16>&);
template void attention_recompute(const LayerContext&, LayerActivations<float>&,
                                  Workspace<float>&);
template void attention_recompute(const LayerContext&, LayerActivations<kernels::bf16>&,
                                  Workspace<kernels::bf16>&);

// ---- --qk-layernorm (Qwen3, OLMo 2) ---------------------------------------------------------
// The family's norm over each head's d channels of q and k, one (d) weight shared by the
// heads, between the split and RoPE: q = rope(norm(q_raw)). Rows: B heads S.
namespace {
template <typename T>
void head_norm_forward(const LayerContext& c, T* out, Buffer<float>& mean, Buffer<float>& rstd,
                       const T* x, const T* w, const T* b, int rows) {
  const ModelConfig& m = c.model;
  if (m.is_gpt())
    kernels::layernorm_forward(c.device, out, mean.data(), rstd.data(), x, w, b, rows,
                               m.head_dim(), m.norm_epsilon);
  else
    kernels::rmsnorm_forward(c.device, out, rstd.data(), x, w, rows, m.head_dim(), m.norm_epsilon);
}

// d(normed) in place -> d(raw) in place; the weights' gradients +=.
template <typename T>
void head_norm_backward(const LayerContext& c, T* dx, T* dw, T* db, const T* x, const T* w,
                        const Buffer<float>& mean, const Buffer<float>& rstd, int rows) {
  const ModelConfig& m = c.model;
  const size_t n = (size_t)rows * m.head_dim();
  Buffer<T> d_raw(c.device, n, Category::WORKSPACE);
  kernels::memset_zero(c.device, d_raw.data(), n * sizeof(T));  // the norms' dx is +=
  if (m.is_gpt())
    kernels::layernorm_backward(c.device, d_raw.data(), dw, db, dx, x, w, mean.data(),
                                rstd.data(), rows, m.head_dim());
  else
    kernels::rmsnorm_backward(c.device, d_raw.data(), dw, dx, x, w, rstd.data(), rows,
                              m.head_dim());
  kernels::memcpy_device(c.device, dx, d_raw.data(), n * sizeof(T));
}

}  // namespace

template <typename T>
void qk_norm_forward(const LayerContext& c, const LayerWeights<T>& w, LayerActivations<T>& a) {
  const ModelConfig& m = c.model;
  const int S = m.seq_length, A = m.num_attention_heads, G = m.groups(), d = m.head_dim();
  head_norm_forward(c, a.q.data(), a.q_norm_mean, a.q_norm_rstd, a.q_raw.data(), w.q_norm_w,
                    w.q_norm_b, c.B * A * S);
  head_norm_forward(c, a.k.data(), a.k_norm_mean, a.k_norm_rstd, a.k_raw.data(), w.k_norm_w,
                    w.k_norm_b, c.B * G * S);
  if (!m.is_gpt()) {  // RoPE after the norm (gpt has learned positions)
    kernels::rope_forward(c.device, a.q.data(), c.B, A, S, d, m.rope_theta);
    kernels::rope_forward(c.device, a.k.data(), c.B, G, S, d, m.rope_theta);
  }
}

template <typename T>
void qk_norm_backward(const LayerContext& c, const LayerWeights<T>& w, LayerGrads<T>& g,
                      LayerActivations<T>& a, Workspace<T>& ws) {
  const ModelConfig& m = c.model;
  const int S = m.seq_length, A = m.num_attention_heads, G = m.groups(), d = m.head_dim();
  if (!m.is_gpt()) {
    kernels::rope_backward(c.device, ws.dq.data(), c.B, A, S, d, m.rope_theta);
    kernels::rope_backward(c.device, ws.dk.data(), c.B, G, S, d, m.rope_theta);
  }
  head_norm_backward(c, ws.dq.data(), g.q_norm_w, g.q_norm_b, a.q_raw.data(), w.q_norm_w,
                     a.q_norm_mean, a.q_norm_rstd, c.B * A * S);
  head_norm_backward(c, ws.dk.data(), g.k_norm_w, g.k_norm_b, a.k_raw.data(), w.k_norm_w,
                     a.k_norm_mean, a.k_norm_rstd, c.B * G * S);
}

template void qk_norm_forward(const LayerContext&, const LayerWeights<float>&,
                              LayerActivations<float>&);
template void qk_norm_forward(const LayerContext&, const LayerWeights<kernels::bf16>&,
                              LayerActivations<kernels::bf16>&);
template void qk_norm_backward(const LayerContext&, const LayerWeights<float>&,
                               LayerGrads<float>&, LayerActivations<float>&, Workspace<float>&);
template void qk_norm_backward(const LayerContext&, const LayerWeights<kernels::bf16>&,
                               LayerGrads<kernels::bf16>&, LayerActivations<kernels::bf16>&,
                               Workspace<kernels::bf16>&);

}  // namespace paralab
