// kernels/ops_bf16_attention.cpp: the bf16-storage attention ops of kernels/ops.h (the
// layout: qkv split, heads merge, RoPE; one naive pass's pieces and the merge; flash),
// dispatched by device the way kernels/ops_bf16.cpp's header says.
#include <algorithm>
#include <stdexcept>
#include <vector>
#include "kernels/cpu_ops.h"
#include "kernels/math.h"
#include "kernels/ops.h"
#include "kernels/ops_bf16_impl.h"
#ifndef PARALAB_CPU_ONLY
#include "kernels/cuda_ops.h"
#endif

namespace kernels {

using namespace bf16_impl;

// ---- attention layout
void qkv_split_forward(Device d, bf16* q, bf16* k, bf16* v, const bf16* qkv, int B, int S, int A,
                       int G, int D, float theta, const TokenPositions& pos) {
  count_kernel(2.0 * B * S * (A + 2.0 * G) * D * kE);
  ON_CUDA(qkv_split_forward(q, k, v, qkv, B, S, A, G, D, theta, pos));
  const size_t N = (size_t)B * S;
  Input X(qkv, N * (A + 2 * G) * D);
  Widened Q(q, N * A * D), K(k, N * G * D), V(v, N * G * D);
  cpu::qkv_split_forward(Q.data(), K.data(), V.data(), X.data(), B, S, A, G, D, theta, pos);
}
void qkv_split_backward(Device d, bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv,
                        int B, int S, int A, int G, int D, float theta, const TokenPositions& pos) {
  count_kernel(2.0 * B * S * (A + 2.0 * G) * D * kE);
  ON_CUDA(qkv_split_backward(dqkv, dq, dk, dv, B, S, A, G, D, theta, pos));
  const size_t N = (size_t)B * S;
  Input Q(dq, N * A * D), K(dk, N * G * D), V(dv, N * G * D);
  Widened X(dqkv, N * (A + 2 * G) * D);
  cpu::qkv_split_backward(X.data(), Q.data(), K.data(), V.data(), B, S, A, G, D, theta, pos);
}
void heads_merge_forward(Device d, bf16* out, const bf16* o, int B, int S, int A, int D) {
  count_kernel(2.0 * B * S * A * D * kE);
  ON_CUDA(heads_merge_forward(out, o, B, S, A, D));
  const size_t n = (size_t)B * S * A * D;
  Input O(o, n);
  Widened R(out, n);
  cpu::heads_merge_forward(R.data(), O.data(), B, S, A, D);
}
void heads_merge_backward(Device d, bf16* d_o, const bf16* dout, int B, int S, int A, int D) {
  count_kernel(2.0 * B * S * A * D * kE);
  ON_CUDA(heads_merge_backward(d_o, dout, B, S, A, D));
  const size_t n = (size_t)B * S * A * D;
  Input G(dout, n);
  Widened R(d_o, n);
  cpu::heads_merge_backward(R.data(), G.data(), B, S, A, D);
}

// ---- attention, one pass: naive pieces and the merge (probabilities (BH, q.rows, k.rows),
// lse and delta fp32)
void attention_softmax_forward(Device d, bf16* probs, float* lse, const bf16* scores, int BH,
                               int D, float scale, const AttentionBlock& blk) {
  count_kernel(2.0 * pass_probs(BH, blk) * kE + (lse ? 4.0 * BH * blk.q.rows : 0));
  ON_CUDA(attention_softmax_forward(probs, lse, scores, BH, D, scale, blk));
  const size_t n = (size_t)BH * blk.q.rows * blk.k.rows;
  Input X(scores, n);
  Widened P(probs, n);
  cpu::attention_softmax_forward(P.data(), lse, X.data(), BH, D, scale, blk);
}
void attention_softmax_backward(Device d, bf16* dscores, const bf16* dprobs, const bf16* probs,
                                const float* delta, int BH, int D, float scale,
                                const AttentionBlock& blk) {
  count_kernel(3.0 * pass_probs(BH, blk) * kE + (delta ? 4.0 * BH * blk.q.rows : 0));
  ON_CUDA(attention_softmax_backward(dscores, dprobs, probs, delta, BH, D, scale, blk));
  const size_t n = (size_t)BH * blk.q.rows * blk.k.rows;
  Input G(dprobs, n), P(probs, n);
  Widened DS(dscores, n);
  cpu::attention_softmax_backward(DS.data(), G.data(), P.data(), delta, BH, D, scale, blk);
}
void attention_probs_rescale(Device d, bf16* probs, const float* lse_pass, const float* lse,
                             int BH, int D, const AttentionBlock& blk) {
  count_kernel(2.0 * pass_probs(BH, blk) * kE + 8.0 * BH * blk.q.rows);
  ON_CUDA(attention_probs_rescale(probs, lse_pass, lse, BH, D, blk));
  Widened P(probs, (size_t)BH * blk.q.rows * blk.k.rows);
  cpu::attention_probs_rescale(P.data(), lse_pass, lse, BH, D, blk);
}
void attention_dropout_forward(Device d, bf16* out, uint8_t* mask, const bf16* probs, int B,
                               int A, float p, uint64_t seed, uint64_t stream,
                               const AttentionBlock& blk) {
  count_kernel((2.0 * kE + 1) * pass_probs(B * A, blk));
  ON_CUDA(attention_dropout_forward(out, mask, probs, B, A, p, seed, stream, blk));
  const size_t n = (size_t)B * A * blk.q.rows * blk.k.rows;
  Input P(probs, n);
  Widened O(out, n);
  cpu::attention_dropout_forward(O.data(), mask, P.data(), B, A, p, seed, stream, blk);
}
void attention_delta(Device d, float* delta, const bf16* dout, const bf16* o, int BH, int D,
                     const AttentionRows& rows) {
  count_kernel((2.0 * D * kE + 4) * BH * rows.rows);
  ON_CUDA(attention_delta(delta, dout, o, BH, D, rows));
  const size_t n = view_span(BH, D, rows);
  Input G(dout, n), O(o, n);
  cpu::attention_delta(delta, G.data(), O.data(), BH, D, rows);
}
void attention_merge(Device d, float* o, float* lse, const bf16* o_pass, const float* lse_pass,
                     int BH, int D, const AttentionRows& rows) {
  count_kernel(((8.0 + kE) * D + 12) * BH * rows.rows);
  ON_CUDA(attention_merge(o, lse, o_pass, lse_pass, BH, D, rows));
  Input P(o_pass, view_span(BH, D, rows));
  cpu::attention_merge(o, lse, P.data(), lse_pass, BH, D, rows);
}

// ---- flash attention: the fp32 dispatcher counts the CPU FLOPs. The widened spans cover the
// views (rows of other passes between them round-trip exactly).
void flash_attention_forward(Device d, bf16* o, float* lse, const bf16* q, const bf16* k,
                             const bf16* v, int B, int A, int G, int D, float scale, float p,
                             uint64_t seed, uint64_t stream, const AttentionBlock& blk) {
  if (d == Device::CUDA) add_flops(4.0 * D * block_pairs(B, A, blk));
  if (d == Device::CUDA) count_attention_kernel(1);
  ON_CUDA(flash_attention_forward(o, lse, q, k, v, B, A, G, D, scale, p, seed, stream, blk));
  const size_t nq = view_span(B * A, D, blk.q), nk = view_span(B * G, D, blk.k);
  Input Q(q, nq), K(k, nk), V(v, nk);
  Widened O(o, nq);
  flash_attention_forward(d, O.data(), lse, Q.data(), K.data(), V.data(), B, A, G, D, scale, p,
                          seed, stream, blk);
}
// dq is fp32 and accumulates in place; dk, dv widen, take the fp32 pass's += and round.
void flash_attention_backward(Device d, float* dq, bf16* dk, bf16* dv, const bf16* dout,
                              const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                              const float* lse, int B, int A, int G, int D, float scale, float p,
                              uint64_t seed, uint64_t stream, const AttentionBlock& blk) {
  if (d == Device::CUDA) add_flops(10.0 * D * block_pairs(B, A, blk));
  if (d == Device::CUDA) count_attention_kernel(2);
  ON_CUDA(flash_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale, p, seed,
                                   stream, blk));
  const size_t nq = view_span(B * A, D, blk.q), nk = view_span(B * G, D, blk.k);
  Input G_(dout, nq), Q(q, nq), K(k, nk), V(v, nk), O(o, nq);
  Widened DK(dk, nk), DV(dv, nk);
  flash_attention_backward(d, dq, DK.data(), DV.data(), G_.data(), Q.data(), K.data(), V.data(),
                           O.data(), lse, B, A, G, D, scale, p, seed, stream, blk);
}

// ---- RoPE alone
void rope_forward(Device d, bf16* x, int B, int H, int S, int D, float theta,
                  const TokenPositions& pos) {
  count_kernel(2.0 * B * H * S * D * kE);
  ON_CUDA(rope_forward(x, B, H, S, D, theta, pos));
  Widened X(x, (size_t)B * H * S * D);
  cpu::rope_forward(X.data(), B, H, S, D, theta, pos);
}
void rope_backward(Device d, bf16* dx, int B, int H, int S, int D, float theta,
                   const TokenPositions& pos) {
  count_kernel(2.0 * B * H * S * D * kE);
  ON_CUDA(rope_backward(dx, B, H, S, D, theta, pos));
  Widened X(dx, (size_t)B * H * S * D);
  cpu::rope_backward(X.data(), B, H, S, D, theta, pos);
}

}  // namespace kernels
