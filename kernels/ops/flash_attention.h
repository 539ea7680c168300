// kernels/ops/flash_attention.h: attention without materialising the probabilities (tiled,
// online softmax, saves only the log-sum-exp), on one pass of query rows against key rows.
// Twins: kernels/cpu/flash_attention.cpp (the algorithm, step by step),
// kernels/cuda/flash_attention.cu and flash_attention_backward.cu.
//
// Shapes, views, the mask and the dropout bits are attention.h's: q, o, dout, dq and lse at
// the q view, k, v, dk, dv at the k view, lse (fp32) at bh * (q.head_stride / D) + i. T is
// the storage of q, k, v, o and dk, dv; dq is fp32 whatever T is (a ring of passes adds
// into it).
//
// Counting: FLOPs, not bytes (kernels/counters.h): the pairs the block's mask keeps,
// B A sum_i visible(i), times 4 D forward (Q K^T, P V) and 10 D backward (five products); and
// the launches apart, as attention launches.
//
// defines: flash_attention_forward, flash_attention_backward
#pragma once
#include "kernels/dispatch.h"

namespace kernels {

// B A sum_i visible(i): the (b, head, query i, visible key j) pairs of one attention pass.
inline double block_pairs(int B, int A, const AttentionBlock& blk) {
  return (double)B * A * (double)visible_pairs(blk);
}

// o ("=") = softmax(q k^T * scale, the block's mask) v with dropout p on the probabilities,
// lse ("=") = log sum_j e^(scale q_i . k_j) over the keys query i sees (before dropout; -inf
// and o = 0 when it sees none), both at the q view.
template <Device Dev, class T>
void flash_attention_forward(T* o, float* lse, const T* q, const T* k, const T* v, int B, int A,
                             int G, int D, float scale, float dropout_p, uint64_t seed,
                             uint64_t stream, const AttentionBlock& blk);
template <class T>
void flash_attention_forward(Device d, T* o, float* lse, const T* q, const T* k, const T* v,
                             int B, int A, int G, int D, float scale, float dropout_p,
                             uint64_t seed, uint64_t stream, const AttentionBlock& blk) {
  add_flops(4.0 * D * block_pairs(B, A, blk));
  count_attention_kernel(1);
  ON_DEVICE(flash_attention_forward, T)(o, lse, q, k, v, B, A, G, D, scale, dropout_p, seed,
                                        stream, blk);
}

// The pass's share of the gradients: dq (fp32, +=), dk, dv (+=; bf16: the pass's share is
// summed in fp32, added to the widened value and rounded once), recomputing the
// probabilities from q, k and the whole row's lse (P_ij = e^(scale q_i.k_j - lse_i)), with
// the whole row's o for D_i = dout_i . o_i. Over the whole sequence it is the full backward.
template <Device Dev, class T>
void flash_attention_backward(float* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                              const T* v, const T* o, const float* lse, int B, int A, int G,
                              int D, float scale, float dropout_p, uint64_t seed,
                              uint64_t stream, const AttentionBlock& blk);
template <class T>
void flash_attention_backward(Device d, float* dq, T* dk, T* dv, const T* dout, const T* q,
                              const T* k, const T* v, const T* o, const float* lse, int B, int A,
                              int G, int D, float scale, float dropout_p, uint64_t seed,
                              uint64_t stream, const AttentionBlock& blk) {
  add_flops(10.0 * D * block_pairs(B, A, blk));
  count_attention_kernel(2);  // the dq kernel, then the dk, dv kernel
  ON_DEVICE(flash_attention_backward, T)(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale,
                                         dropout_p, seed, stream, blk);
}

}  // namespace kernels
