// parallel/tensor_parallel.h: tensor parallelism and sequence parallelism, Megatron-style.
//
// The idea (Shoeybi et al. 2019): split each layer's matmuls over t ranks so that only two
// small collectives per block are needed.
//   ColumnParallelLinear  W split by output rows: each rank computes y_r = x W_r^T, a slice
//                         of the output features, from the FULL input x.
//   RowParallelLinear     W split by input columns: each rank computes a PARTIAL y from its
//                         slice of the input features; the partials are summed.
// Attention: QKV column-parallel (a rank owns whole query groups: their heads and their
// key/value heads), attention on local heads, output projection row-parallel. MLP: fc1
// column-parallel (llama keeps each gate/up pair on one rank), fc2 row-parallel.
// Between them the conjugate operators, each the other's backward:
//   f  forward identity,   backward all-reduce   (before a column-parallel linear)
//   g  forward all-reduce, backward identity     (after a row-parallel linear)
// so per layer and microbatch: 2 all-reduces forward, 2 backward, of N h elements
// (N = b s tokens): 8 N h (t-1)/t bus elements per rank (Narayanan et al. SC21 §3.2).
//
// Sequence parallelism (Korthikanti et al. 2022 §4.2.2): the regions between the blocks
// (norms, dropout, residual) are replicated work on replicated activations under plain
// tensor parallelism; split them over the t ranks along the tokens instead. Then
//   g-bar  (before column-parallel) forward all-gather of the tokens, backward reduce-scatter
//   g-bar' (after row-parallel)     forward reduce-scatter,            backward all-gather
// the same bytes as the two all-reduces (an all-reduce IS a reduce-scatter + all-gather),
// and each rank keeps only N/t tokens of every between-block activation: 34 sbh / t bytes
// per layer instead of sbh (10 + 24/t). The column-parallel linear saves only its input
// shard for backward and all-gathers it again there (one more all-gather per linear in
// backward: what makes the 34/t possible).
// Tokens are split over the flattened (batch, sequence) dimension, rank r holding rows
// [r N/t, (r+1) N/t) of the (N, h) activations. With micro-batch 1 that is exactly
// Megatron's split of the sequence ([s, b, h] layout); otherwise the same bytes and work.
//
// Vocabulary parallelism: the embedding table and the output layer are split over the
// vocabulary (V padded to a multiple of t); a token's embedding comes from the rank that
// owns its row (others contribute zeros, summed by g / g-bar'), and the loss is computed
// from the local logits with three all-reduces of N floats per chunk (row max; sum of
// exponentials and the target's logit): the (N, V) logits are never gathered.
//
// Parameters replicated over tp (norms, position embedding, row-parallel biases) get
// identical gradients on every rank without sequence parallelism; with it each rank sees
// only its tokens, so their gradients are all-reduced over tp (reduce_replicated_grads).
//
// defines: TensorParallel (the operators on one tp group); Megatron's ColumnParallelLinear,
//          RowParallelLinear and VocabParallelEmbedding as functions: column_parallel_forward
//          / _backward, row_parallel_forward / _backward, linear_weight_backward,
//          vocab_parallel_embedding_forward / _backward, vocab_parallel_cross_entropy
#pragma once
#include <cstdint>
#include "measure/ledger.h"
#include "kernels/common.h"
#include "parallel/comm.h"
#include "parallel/fp8_linear.h"  // defines: Fp8Linear (each linear's GEMMs in FP8 or not)

namespace paralab {

// The tp group and the mode. With tp == nullptr (or size 1) every operator is the identity
// and nothing is communicated.
struct TensorParallel {
  Communicator* tp = nullptr;
  bool sequence_parallel = false;
  kernels::Device device = kernels::Device::CPU;

  int size() const { return tp ? tp->size() : 1; }
  int rank() const { return tp ? tp->rank() : 0; }
  // Tokens a rank holds between the blocks: N/t with sequence parallelism, else N.
  int local_tokens(int N) const { return sequence_parallel ? N / size() : N; }
  // The first token row this rank holds (positions for the position embedding).
  int first_token(int N) const { return sequence_parallel ? rank() * (N / size()) : 0; }

  // f / g-bar: the input of a column-parallel region. Without sp, x is already the full
  // (N, C) input: returns x. With sp, all-gathers x (N/t, C) into full (N, C) and returns it.
  template <typename T>
  const T* enter_column_parallel(const T* x, T* full, int N, int C) const;
  // Backward of the above: dfull (N, C) holds this rank's partial input gradient; without
  // sp all-reduce it in place and return it; with sp reduce-scatter it into dx (N/t, C).
  template <typename T>
  T* enter_column_parallel_backward(T* dfull, T* dx, int N, int C) const;
  // g / g-bar': the output of a row-parallel region. partial (N, C) holds this rank's
  // partial sum; without sp all-reduce it in place and return it; with sp reduce-scatter it
  // into y (N/t, C) and return y.
  template <typename T>
  T* exit_row_parallel(T* partial, T* y, int N, int C) const;
  // Backward of the above: dy is the gradient of the (N or N/t, C) output; returns the full
  // (N, C) gradient: dy itself without sp, all-gathered into dfull with sp.
  template <typename T>
  const T* exit_row_parallel_backward(const T* dy, T* dfull, int N, int C) const;
  // Sum over tp of gradients that sequence parallelism left partial (replicated params).
  template <typename T>
  void reduce_replicated_grads(T* grads, size_t count) const;
};

// The linear layers below run their GEMMs through parallel/fp8_linear.h: in the storage type,
// or with FP8 inputs when `fp8` names a scaling (each piece quantised on its rank; the recipe's
// `pieces` reduction makes a piece's per-tensor amax the whole tensor's).
// y(N, out_local) = x_full(N, in) W_local^T + b_local; W_local (out_local, in).
template <typename T>
void column_parallel_forward(const TensorParallel& tp, const Fp8Linear& fp8, T* y,
                             const T* x_full, const T* W, const T* b, int N, int in,
                             int out_local);
// dW += dy^T x; db += colsum(dy) (db may be nullptr): a linear layer's weight gradient. The
// backward functions below call it, unless their dW is nullptr: a split schedule (zb-h1)
// computes the input gradient in B and calls this later, in W.
template <typename T>
void linear_weight_backward(const TensorParallel& tp, const Fp8Linear& fp8, T* dW, T* db,
                            const T* dy, const T* x, int N, int in, int out);
// dW += dy^T x_full; db += colsum(dy); dx_full(N, in) = dy W (this rank's partial: the
// caller's enter_column_parallel_backward sums it). dW == nullptr: the input gradient only.
template <typename T>
void column_parallel_backward(const TensorParallel& tp, const Fp8Linear& fp8, T* dx_full, T* dW,
                              T* db, const T* dy, const T* x_full, const T* W, int N, int in,
                              int out_local);
// partial(N, out) = x_local(N, in_local) W_local^T (no bias: add it after the reduction,
// once); W_local (out, in_local).
template <typename T>
void row_parallel_forward(const TensorParallel& tp, const Fp8Linear& fp8, T* partial,
                          const T* x_local, const T* W, int N, int in_local, int out);
// dW += dy_full^T x_local; dx_local = dy_full W. dW == nullptr: the input gradient only.
template <typename T>
void row_parallel_backward(const TensorParallel& tp, const Fp8Linear& fp8, T* dx_local, T* dW,
                           const T* dy_full, const T* x_local, const T* W, int N, int in_local,
                           int out);

// Vocabulary-parallel embedding: partial(N, C) = rows of wte_local for the tokens this rank
// owns ([vocab_start, vocab_start + vocab_rows)), zeros for the others; the caller reduces
// it with exit_row_parallel (all-reduce, or reduce-scatter with sp).
template <typename T>
void vocab_parallel_embedding_forward(const TensorParallel& tp, T* partial, const int* tokens,
                                      const T* wte_local, int vocab_rows, int N, int C);
// dwte_local += the rows of dx_full (N, C) whose tokens this rank owns.
template <typename T>
void vocab_parallel_embedding_backward(const TensorParallel& tp, T* dwte_local,
                                       const T* dx_full, const int* tokens, int vocab_rows,
                                       int N, int C);

// Softmax cross-entropy over vocabulary-split logits, fused with its backward, for n rows:
// logits (n, vocab_rows) fp32, the rank's columns [rank vocab_rows, ...); `valid` of them are
// real (the last rank's padding is masked). Writes losses[i] = log sum_j exp(z_ij) - z_i,t
// (over the whole vocabulary) and overwrites logits with (softmax - onehot) * grad_scale.
// scratch: 3n floats (row max; sum of exponentials and target logit, reduced together).
void vocab_parallel_cross_entropy(const TensorParallel& tp, float* losses, float* logits,
                                  const int* targets, float* scratch, int n, int vocab_rows,
                                  int valid, float grad_scale);

}  // namespace paralab
