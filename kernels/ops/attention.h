// kernels/ops/attention.h: the attention layout (QKV split with RoPE, heads merge, RoPE
// alone), the naive pieces of one attention pass (softmax, its backward, rescale, dropout,
// delta) and ring attention's log-sum-exp merge. The flash kernels: flash_attention.h.
// Twins: the layout ops in kernels/cpu/attention_layout.cpp and kernels/cuda/attention_layout.cu,
// the softmax pieces and the merge in kernels/cpu/attention_softmax.cpp and
// kernels/cuda/attention_softmax.cu.
//
// Attention shapes: B batch, S sequence, A query heads, G query groups (key/value heads,
// A % G == 0), D head dim. Per token the fused QKV row holds G groups, each
// [A/G query heads | 1 key head | 1 value head] of D channels (Megatron's layout, so a
// tensor-parallel rank owns whole groups). T is the storage of q, k, v, o, the probabilities
// and their gradients; lse and delta are fp32, and so is the merge's accumulator o.
//
// One pass of query rows against key rows (kernels/math.h AttentionBlock): the whole sequence
// is whole_sequence(S, A, D); ring attention's steps are passes on the local chunks or their
// halves (parallel/context_parallel.cpp). q, o, dout, dq, lse point at the q view's row 0 of
// head (0, 0), k, v, dk, dv at the k view's. GQA: query head h reads group h / (A/G). The mask
// and the dropout keep bit of (b, h, i, j) come from the block (causal by global position;
// keep = dropout_keep(seed, stream, blk.dropout_index(b,h,i,j))).
//
// Naive pieces (the probabilities are materialised, P of a pass is (B*A, q.rows, k.rows),
// contiguous). EVERY lse and delta argument of every op here (naive and flash, forward,
// backward, merge) sits at the q view: row i of head bh at bh * (q.head_stride / D) + i,
// which is why the naive ops take D too (the lead's final rule; it supersedes any
// "contiguous per pass" wording elsewhere).
//
// defines: qkv_split_forward, qkv_split_backward, heads_merge_forward, heads_merge_backward,
//          rope_forward, rope_backward, attention_softmax_forward, attention_softmax_backward,
//          attention_probs_rescale, attention_dropout_forward, attention_delta, attention_merge
#pragma once
#include "kernels/dispatch.h"

namespace kernels {

// ---- layout ---------------------------------------------------------------------------------
// qkv(B*S, (A+2G)*D) -> q(B,A,S,D), k(B,G,S,D), v(B,G,S,D); when rope_theta > 0 rotates q and
// k by position s (rotate-half RoPE, kernels/math.h).
// pos: the tokens' global positions (context parallelism), which RoPE rotates by.
template <Device Dev, class T>
void qkv_split_forward(T* q, T* k, T* v, const T* qkv, int B, int S, int A, int G, int D,
                       float rope_theta, const TokenPositions& pos);
template <class T>
void qkv_split_forward(Device d, T* q, T* k, T* v, const T* qkv, int B, int S, int A, int G,
                       int D, float rope_theta, const TokenPositions& pos = TokenPositions()) {
  count_kernel(2.0 * B * S * (A + 2.0 * G) * D * sizeof(T));
  ON_DEVICE(qkv_split_forward, T)(q, k, v, qkv, B, S, A, G, D, rope_theta, pos);
}

// The inverse: dqkv ("=") from dq, dk, dv, un-rotating dq and dk.
template <Device Dev, class T>
void qkv_split_backward(T* dqkv, const T* dq, const T* dk, const T* dv, int B, int S, int A,
                        int G, int D, float rope_theta, const TokenPositions& pos);
template <class T>
void qkv_split_backward(Device d, T* dqkv, const T* dq, const T* dk, const T* dv, int B, int S,
                        int A, int G, int D, float rope_theta,
                        const TokenPositions& pos = TokenPositions()) {
  count_kernel(2.0 * B * S * (A + 2.0 * G) * D * sizeof(T));
  ON_DEVICE(qkv_split_backward, T)(dqkv, dq, dk, dv, B, S, A, G, D, rope_theta, pos);
}

// o(B,A,S,D) -> out(B*S, A*D) and back ("=").
template <Device Dev, class T>
void heads_merge_forward(T* out, const T* o, int B, int S, int A, int D);
template <class T>
void heads_merge_forward(Device d, T* out, const T* o, int B, int S, int A, int D) {
  count_kernel(2.0 * B * S * A * D * sizeof(T));
  ON_DEVICE(heads_merge_forward, T)(out, o, B, S, A, D);
}
template <Device Dev, class T>
void heads_merge_backward(T* d_o, const T* dout, int B, int S, int A, int D);
template <class T>
void heads_merge_backward(Device d, T* d_o, const T* dout, int B, int S, int A, int D) {
  count_kernel(2.0 * B * S * A * D * sizeof(T));
  ON_DEVICE(heads_merge_backward, T)(d_o, dout, B, S, A, D);
}

// Rotary embedding alone (qk-layernorm: the norm comes between the split and RoPE):
// x(B,H,S,D) rotated in place by global position pos.at(s) (rotate-half, kernels/math.h);
// backward rotates the gradient back (the inverse rotation).
template <Device Dev, class T>
void rope_forward(T* x, int B, int H, int S, int D, float theta, const TokenPositions& pos);
template <class T>
void rope_forward(Device d, T* x, int B, int H, int S, int D, float theta,
                  const TokenPositions& pos = TokenPositions()) {
  count_kernel(2.0 * B * H * S * D * sizeof(T));
  ON_DEVICE(rope_forward, T)(x, B, H, S, D, theta, pos);
}
template <Device Dev, class T>
void rope_backward(T* dx, int B, int H, int S, int D, float theta, const TokenPositions& pos);
template <class T>
void rope_backward(Device d, T* dx, int B, int H, int S, int D, float theta,
                   const TokenPositions& pos = TokenPositions()) {
  count_kernel(2.0 * B * H * S * D * sizeof(T));
  ON_DEVICE(rope_backward, T)(dx, B, H, S, D, theta, pos);
}

// ---- one pass, naive pieces -----------------------------------------------------------------
// Elements of a naive pass's probabilities: BH heads of q.rows x k.rows.
inline double pass_probs(int BH, const AttentionBlock& blk) {
  return (double)BH * blk.q.rows * blk.k.rows;
}

// probs ("=") = softmax over the keys query i sees of scale * scores, 0 for the others;
// lse (may be nullptr) = log sum over those keys of e^(scale s_ij) (-inf when none). In place
// (probs == scores) is fine.
template <Device Dev, class T>
void attention_softmax_forward(T* probs, float* lse, const T* scores, int BH, int D, float scale,
                               const AttentionBlock& blk);
template <class T>
void attention_softmax_forward(Device d, T* probs, float* lse, const T* scores, int BH, int D,
                               float scale, const AttentionBlock& blk) {
  count_kernel(2.0 * pass_probs(BH, blk) * sizeof(T) + (lse ? 4.0 * BH * blk.q.rows : 0));
  ON_DEVICE(attention_softmax_forward, T)(probs, lse, scores, BH, D, scale, blk);
}

// dscores ("=") = scale * P * (dP - delta_i), 0 where masked. delta at the q view is the
// whole row's dout_i . o_i (attention_delta); nullptr: rowsum(dP * P) of this pass, which
// equals it when the pass is the whole row.
template <Device Dev, class T>
void attention_softmax_backward(T* dscores, const T* dprobs, const T* probs, const float* delta,
                                int BH, int D, float scale, const AttentionBlock& blk);
template <class T>
void attention_softmax_backward(Device d, T* dscores, const T* dprobs, const T* probs,
                                const float* delta, int BH, int D, float scale,
                                const AttentionBlock& blk) {
  count_kernel(3.0 * pass_probs(BH, blk) * sizeof(T) + (delta ? 4.0 * BH * blk.q.rows : 0));
  ON_DEVICE(attention_softmax_backward, T)(dscores, dprobs, probs, delta, BH, D, scale, blk);
}

// probs *= e^(lse_pass_i - lse_i): a pass's probabilities become the whole row's once the
// row's final lse is known (both at the q view).
template <Device Dev, class T>
void attention_probs_rescale(T* probs, const float* lse_pass, const float* lse, int BH, int D,
                             const AttentionBlock& blk);
template <class T>
void attention_probs_rescale(Device d, T* probs, const float* lse_pass, const float* lse, int BH,
                             int D, const AttentionBlock& blk) {
  count_kernel(2.0 * pass_probs(BH, blk) * sizeof(T) + 8.0 * BH * blk.q.rows);
  ON_DEVICE(attention_probs_rescale, T)(probs, lse_pass, lse, BH, D, blk);
}

// out ("=") = probs * keep / (1-p), mask = keep, probs (B*A, q.rows, k.rows).
template <Device Dev, class T>
void attention_dropout_forward(T* out, uint8_t* mask, const T* probs, int B, int A, float p,
                               uint64_t seed, uint64_t stream, const AttentionBlock& blk);
template <class T>
void attention_dropout_forward(Device d, T* out, uint8_t* mask, const T* probs, int B, int A,
                               float p, uint64_t seed, uint64_t stream,
                               const AttentionBlock& blk) {
  count_kernel((2.0 * sizeof(T) + 1) * pass_probs(B * A, blk));
  ON_DEVICE(attention_dropout_forward, T)(out, mask, probs, B, A, p, seed, stream, blk);
}

// delta ("=") = dout_i . o_i for every row of the view (BH heads of rows.rows rows), at the
// view (bh * (rows.head_stride / D) + i).
template <Device Dev, class T>
void attention_delta(float* delta, const T* dout, const T* o, int BH, int D,
                     const AttentionRows& rows);
template <class T>
void attention_delta(Device d, float* delta, const T* dout, const T* o, int BH, int D,
                     const AttentionRows& rows) {
  count_kernel((2.0 * D * sizeof(T) + 4) * BH * rows.rows);
  ON_DEVICE(attention_delta, T)(delta, dout, o, BH, D, rows);
}

// ---- the ring's merge -----------------------------------------------------------------------
// Ring attention's log-sum-exp merge, at the view's rows (o, o_pass: D channels, lse, lse_pass:
// head_stride / D). o stays fp32 (the ring's accumulator); o_pass is the pass's output, T:
//   lse' = log(e^lse + e^lse_pass),  o' = o e^(lse - lse') + o_pass e^(lse_pass - lse').
// lse = -inf (nothing merged yet) gives o' = o_pass.
template <Device Dev, class T>
void attention_merge(float* o, float* lse, const T* o_pass, const float* lse_pass, int BH, int D,
                     const AttentionRows& rows);
template <class T>
void attention_merge(Device d, float* o, float* lse, const T* o_pass, const float* lse_pass,
                     int BH, int D, const AttentionRows& rows) {
  count_kernel(((8.0 + sizeof(T)) * D + 12) * BH * rows.rows);
  ON_DEVICE(attention_merge, T)(o, lse, o_pass, lse_pass, BH, D, rows);
}

}  // namespace kernels
