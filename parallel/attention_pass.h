// parallel/attention_pass.h: one pass of attention, a set of query rows against a set of key
// rows (kernels/math.h AttentionBlock), flash or naive: the unit that context parallelism's
// ring, all-gather and all-to-all (parallel/context_parallel.cpp) repeat, and that the
// single-rank run does once over the whole sequence.
//
// Layouts: q, o, dout, dq (B, A, rows, D) and k, v, dk, dv (B, G, rows, D) head-major, the
// pointers at the view's first row; a naive pass's probabilities (B*A, q.rows, k.rows).
// GQA: the A/G query heads of a group share its key/value head. When the query view is
// contiguous (its rows are the whole head), one GEMM per (batch, group) covers the group's
// heads, as the single-rank path always did; a half view takes one GEMM per head of a group.
//
// defines: naive_pass_probs, naive_pass_output, naive_pass_backward, attention_gemm_calls
#pragma once
#include <cstdint>
#include "kernels/common.h"
#include "kernels/math.h"

namespace paralab {

struct CoreShape;

// scores = Q K^T, probs = the block's softmax (lse at the q view, may be nullptr), and with
// attention dropout its mask and the dropped probabilities (mask, dropped may be nullptr
// when the dropout is 0).
template <typename T>
void naive_pass_probs(kernels::Device dev, const CoreShape& s, const kernels::AttentionBlock& blk,
                      const T* q, const T* k, T* scores, T* probs, float* lse, uint8_t* mask,
                      T* dropped);
// o ("=", at the q view) = P' V.
template <typename T>
void naive_pass_output(kernels::Device dev, const CoreShape& s,
                       const kernels::AttentionBlock& blk, const T* used, const T* v, T* o);
// The pass's gradients: dq, dk, dv (+=) from dout, with delta (the rows' dout . o at the q
// view; nullptr when the pass is every row's whole softmax). dprobs, scores: scratch of the
// pass's (B*A, q.rows, k.rows).
template <typename T>
void naive_pass_backward(kernels::Device dev, const CoreShape& s,
                         const kernels::AttentionBlock& blk, const T* q, const T* k, const T* v,
                         const T* probs, const T* dropped, const uint8_t* mask,
                         const float* delta, const T* dout, T* dq, T* dk, T* dv, T* dprobs,
                         T* scores);
// GEMM calls of one product of a naive pass (plan/flops.h counts them): one per batch of
// (b, group) when the query view is contiguous, else one per head of a group.
int attention_gemm_calls(const CoreShape& s, const kernels::AttentionBlock& blk);

}  // namespace paralab
