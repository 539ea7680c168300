// model/attention.cpp: the attention core, softmax(q k^T / sqrt(d)) v with a causal mask, two
// ways (--attention):
//
//  naive  materialises the probabilities P (B,a,S,S) and keeps them for backward: the
//         5as/h term of Korthikanti et al.'s activation count (2 bytes P + 1 byte dropout
//         mask + 2 bytes dropped P, per element, with 16-bit activations).
//  flash  tiles the product with an online softmax and keeps only the log-sum-exp (B,a,S);
//         backward recomputes P from q, k and lse (Dao et al. 2022).
//
// The core itself is parallel/context_parallel.h's: one causal pass over the sequence on one
// rank, and with --cp the ring, all-gather or all-to-all over the sequence's ranks, each rank
// holding S/cp tokens (then naive keeps each pass's P: (S/cp) x (keys it saw)).
//
// Selective recompute of the core (--recompute-modules core_attn) keeps neither: P, the mask
// and P' (naive) or the lse (flash) are made again before the backward by the forward's own
// kernels on the kept q, k, v (and with --cp its exchanges again). The dropout mask is a pure
// function of (seed, stream, element) (kernels/math.h), so it comes back bit for bit, and so
// does everything else.
//
// defines: core_shape, attention_forward, attention_backward, attention_recompute,
//          qk_norm_forward, qk_norm_backward
#include <cmath>
#include "kernels/ops.h"
#include "model/layer.h"

namespace paralab {

CoreShape core_shape(const ModelConfig& m, int B, const ContextParallel& cp) {
  CoreShape s;
  s.B = B;
  s.A = m.num_attention_heads;
  s.G = m.groups();
  s.S = m.seq_length;
  s.D = m.head_dim();
  s.length = m.seq_length * cp.size();
  s.flash = m.attention == AttentionImpl::FLASH;
  s.scale = 1.0f / std::sqrt((float)s.D);
  s.dropout = m.attention_dropout;
  return s;
}

namespace {
// The attention-dropout stream of this layer: each tensor-parallel rank's heads draw their
// own masks (rank 0's are single-rank's).
uint64_t attention_stream(const LayerContext& c) {
  return 4ull * c.layer + 1 + ((uint64_t)c.tp.rank() << 32);
}

CoreShape layer_core(const LayerContext& c) {
  CoreShape s = core_shape(c.model, c.B, c.cp);
  s.seed = c.dropout_seed;
  s.stream = attention_stream(c);
  return s;
}

Category core_category(const LayerContext& c) {
  return c.model.recompute.recompute_core_attn() ? Category::RECOMPUTE : Category::ACTIVATIONS;
}

// a2a keeps its head-split q, k, v in the layer's buffers unless the core is recomputed
// (the recompute's all-to-all reads the sequence-split ones).
bool heads_kept(const LayerContext& c) {
  return !c.model.recompute.recompute_core_attn() && !c.forward_only;
}
}  // namespace

template <typename T>
void attention_forward(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws) {
  const CoreShape s = layer_core(c);
  core_attention_forward(c.cp, s, act.q, act.k, act.v, ws.o_heads.data(), act.core, ws.core,
                         core_category(c), heads_kept(c), false);
  kernels::heads_merge_forward(c.device, act.ctx.data(), ws.o_heads.data(), s.B, s.S, s.A, s.D);
}

// Only what the backward reads: naive's P again (ctx, P V's output, is kept as proj's input;
// a ring's passes also need their merge to rescale P), flash its forward, which makes O
// along with the lse.
template <typename T>
void attention_recompute(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws) {
  core_attention_forward(c.cp, layer_core(c), act.q, act.k, act.v, ws.o_heads.data(), act.core,
                         ws.core, Category::RECOMPUTE, false, true);
}

template <typename T>
void attention_backward(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws) {
  const CoreShape s = layer_core(c);
  const auto dev = c.device;
  kernels::heads_merge_backward(dev, ws.do_heads.data(), ws.dctx.data(), s.B, s.S, s.A, s.D);
  // the backward reads O in head layout: un-merge the saved ctx (a permutation), unless the
  // recompute's forward has just made it
  if (!c.model.recompute.recompute_core_attn())
    kernels::heads_merge_backward(dev, ws.o_heads.data(), act.ctx.data(), s.B, s.S, s.A, s.D);
  core_attention_backward(c.cp, s, act.q, act.k, act.v, ws.o_heads.data(), ws.do_heads.data(),
                          ws.dq.data(), ws.dk.data(), ws.dv.data(), act.core, ws.core,
                          heads_kept(c));
}

template void attention_forward(const LayerContext&, LayerActivations<float>&, Workspace<float>&);
template void attention_forward(const LayerContext&, LayerActivations<kernels::bf16>&,
                                Workspace<kernels::bf16>&);
template void attention_forward(const LayerContext&, LayerActivations<kernels::fp16>&,
                                Workspace<kernels::fp16>&);
template void attention_backward(const LayerContext&, LayerActivations<float>&,
                                 Workspace<float>&);
template void attention_backward(const LayerContext&, LayerActivations<kernels::bf16>&,
                                 Workspace<kernels::bf16>&);
template void attention_backward(const LayerContext&, LayerActivations<kernels::fp16>&,
                                 Workspace<kernels::fp16>&);
template void attention_recompute(const LayerContext&, LayerActivations<float>&,
                                  Workspace<float>&);
template void attention_recompute(const LayerContext&, LayerActivations<kernels::bf16>&,
                                  Workspace<kernels::bf16>&);
template void attention_recompute(const LayerContext&, LayerActivations<kernels::fp16>&,
                                  Workspace<kernels::fp16>&);

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
    kernels::rope_forward(c.device, a.q.data(), c.B, A, S, d, m.rope_theta, c.positions);
    kernels::rope_forward(c.device, a.k.data(), c.B, G, S, d, m.rope_theta, c.positions);
  }
}

template <typename T>
void qk_norm_backward(const LayerContext& c, const LayerWeights<T>& w, LayerGrads<T>& g,
                      LayerActivations<T>& a, Workspace<T>& ws) {
  const ModelConfig& m = c.model;
  const int S = m.seq_length, A = m.num_attention_heads, G = m.groups(), d = m.head_dim();
  if (!m.is_gpt()) {
    kernels::rope_backward(c.device, ws.dq.data(), c.B, A, S, d, m.rope_theta, c.positions);
    kernels::rope_backward(c.device, ws.dk.data(), c.B, G, S, d, m.rope_theta, c.positions);
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
template void qk_norm_forward(const LayerContext&, const LayerWeights<kernels::fp16>&,
                              LayerActivations<kernels::fp16>&);
template void qk_norm_backward(const LayerContext&, const LayerWeights<float>&,
                               LayerGrads<float>&, LayerActivations<float>&, Workspace<float>&);
template void qk_norm_backward(const LayerContext&, const LayerWeights<kernels::bf16>&,
                               LayerGrads<kernels::bf16>&, LayerActivations<kernels::bf16>&,
                               Workspace<kernels::bf16>&);
template void qk_norm_backward(const LayerContext&, const LayerWeights<kernels::fp16>&,
                               LayerGrads<kernels::fp16>&, LayerActivations<kernels::fp16>&,
                               Workspace<kernels::fp16>&);

}  // namespace paralab
