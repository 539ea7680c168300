// parallel/tensor_parallel.cpp: the operators and layers of tensor_parallel.h.
//
// Collectives are blocking here: a layer needs the reduced activation before it can go on,
// and overlapping them with independent compute is a later refinement (Megatron's
// tp-comm-overlap). Every call is recorded on the "tp" group by the comm layer.
#include "parallel/tensor_parallel.h"

#include "kernels/ops.h"
#include "parallel/fp8_linear.h"  // defines: linear_fprop, linear_dgrad, linear_wgrad

namespace paralab {

namespace {

bool active(const TensorParallel& tp) { return tp.tp && tp.tp->size() > 1; }

}  // namespace

template <typename T>
const T* TensorParallel::enter_column_parallel(const T* x, T* full, int N, int C) const {
  if (!active(*this) || !sequence_parallel) return x;  // f: identity
  const size_t shard = (size_t)(N / size()) * C;
  tp->all_gather(x, full, shard, comm_type<T>());  // g-bar: gather the tokens
  return full;
}

template <typename T>
T* TensorParallel::enter_column_parallel_backward(T* dfull, T* dx, int N, int C) const {
  if (!active(*this)) return dfull;
  if (!sequence_parallel) {  // f's backward: sum the partial input gradients
    tp->all_reduce(dfull, (size_t)N * C, ReduceOp::SUM, comm_type<T>());
    return dfull;
  }
  // g-bar's backward: sum and keep only this rank's tokens
  tp->reduce_scatter(dfull, dx, (size_t)(N / size()) * C, comm_type<T>());
  return dx;
}

template <typename T>
T* TensorParallel::exit_row_parallel(T* partial, T* y, int N, int C) const {
  if (!active(*this)) return partial;
  if (!sequence_parallel) {  // g: sum the partial outputs
    tp->all_reduce(partial, (size_t)N * C, ReduceOp::SUM, comm_type<T>());
    return partial;
  }
  tp->reduce_scatter(partial, y, (size_t)(N / size()) * C, comm_type<T>());  // g-bar'
  return y;
}

template <typename T>
const T* TensorParallel::exit_row_parallel_backward(const T* dy, T* dfull, int N, int C) const {
  if (!active(*this) || !sequence_parallel) return dy;  // g's backward: identity
  tp->all_gather(dy, dfull, (size_t)(N / size()) * C, comm_type<T>());  // g-bar''s backward
  return dfull;
}

template <typename T>
void TensorParallel::reduce_replicated_grads(T* grads, size_t count) const {
  if (active(*this) && sequence_parallel && count > 0)
    tp->all_reduce(grads, count, ReduceOp::SUM, comm_type<T>());
}

// ---- linear layers: y = x W^T (+ b), W stored (out, in) like PyTorch

template <typename T>
void column_parallel_forward(const TensorParallel& tp, const Fp8Linear& fp8, T* y,
                             const T* x_full, const T* W, const T* b, int N, int in,
                             int out_local) {
  linear_fprop(tp.device, fp8, y, x_full, W, N, in, out_local);
  if (b) kernels::add_bias(tp.device, y, b, N, out_local);
}

template <typename T>
void linear_weight_backward(const TensorParallel& tp, const Fp8Linear& fp8, T* dW, T* db,
                            const T* dy, const T* x, int N, int in, int out) {
  linear_wgrad(tp.device, fp8, dW, dy, x, N, in, out);
  if (db) kernels::bias_backward(tp.device, db, dy, N, out);
}

template <typename T>
void column_parallel_backward(const TensorParallel& tp, const Fp8Linear& fp8, T* dx_full, T* dW,
                              T* db, const T* dy, const T* x_full, const T* W, int N, int in,
                              int out_local) {
  linear_dgrad(tp.device, fp8, dx_full, dy, W, N, in, out_local);
  if (dW) linear_weight_backward(tp, fp8, dW, db, dy, x_full, N, in, out_local);
}

template <typename T>
void row_parallel_forward(const TensorParallel& tp, const Fp8Linear& fp8, T* partial,
                          const T* x_local, const T* W, int N, int in_local, int out) {
  linear_fprop(tp.device, fp8, partial, x_local, W, N, in_local, out);
}

template <typename T>
void row_parallel_backward(const TensorParallel& tp, const Fp8Linear& fp8, T* dx_local, T* dW,
                           const T* dy_full, const T* x_local, const T* W, int N, int in_local,
                           int out) {
  linear_dgrad(tp.device, fp8, dx_local, dy_full, W, N, in_local, out);
  if (dW) linear_weight_backward(tp, fp8, dW, (T*)nullptr, dy_full, x_local, N, in_local, out);
}

// ---- vocabulary-parallel embedding and loss

template <typename T>
void vocab_parallel_embedding_forward(const TensorParallel& tp, T* partial, const int* tokens,
                                      const T* wte_local, int vocab_rows, int N, int C) {
  kernels::embedding_forward(tp.device, partial, tokens, wte_local, tp.rank() * vocab_rows,
                             vocab_rows, N, C);
}

template <typename T>
void vocab_parallel_embedding_backward(const TensorParallel& tp, T* dwte_local,
                                       const T* dx_full, const int* tokens, int vocab_rows,
                                       int N, int C) {
  kernels::embedding_backward(tp.device, dwte_local, dx_full, tokens, tp.rank() * vocab_rows,
                              vocab_rows, N, C);
}

void vocab_parallel_cross_entropy(const TensorParallel& tp, float* losses, float* logits,
                                  const int* targets, float* scratch, int n, int vocab_rows,
                                  int valid, float grad_scale) {
  const kernels::Device dev = tp.device;
  const int vocab_start = tp.rank() * vocab_rows;
  float* row_max = scratch;           // (n) max over the whole vocabulary
  float* sum_exp = scratch + n;       // (n) sum_j exp(z_ij - max_i)
  float* target_logit = sum_exp + n;  // (n) z_i,t: from the rank that owns t, 0 elsewhere
  // 1. the row maximum, for a stable exponent: max over ranks of the local maxima
  kernels::cross_entropy_row_max(dev, row_max, logits, n, vocab_rows, valid);
  if (active(tp)) tp.tp->all_reduce(row_max, n, ReduceOp::MAX);
  // 2. the softmax denominator and the target's logit, summed over ranks in one call
  kernels::cross_entropy_sum_exp(dev, sum_exp, target_logit, logits, row_max, targets, n,
                                 vocab_rows, valid, vocab_start);
  if (active(tp)) tp.tp->all_reduce(sum_exp, 2 * (size_t)n, ReduceOp::SUM);
  // 3. loss_i = log(sum_exp_i) + max_i - z_i,t; dlogits = (exp(z - max)/sum_exp - onehot) s
  kernels::cross_entropy_finish(dev, losses, logits, targets, row_max, sum_exp, target_logit, n,
                                vocab_rows, valid, vocab_start, grad_scale);
}

// ---- instantiations: float, bf16 and fp16 storage
#define PARALAB_TP_INSTANTIATE(T)                                                             \
  template const T* TensorParallel::enter_column_parallel(const T*, T*, int, int) const;     \
  template T* TensorParallel::enter_column_parallel_backward(T*, T*, int, int) const;        \
  template T* TensorParallel::exit_row_parallel(T*, T*, int, int) const;                     \
  template const T* TensorParallel::exit_row_parallel_backward(const T*, T*, int, int) const; \
  template void TensorParallel::reduce_replicated_grads(T*, size_t) const;                   \
  template void column_parallel_forward(const TensorParallel&, const Fp8Linear&, T*,         \
                                        const T*, const T*, const T*, int, int, int);         \
  template void linear_weight_backward(const TensorParallel&, const Fp8Linear&, T*, T*,      \
                                       const T*, const T*, int, int, int);                    \
  template void column_parallel_backward(const TensorParallel&, const Fp8Linear&, T*, T*, T*, \
                                         const T*, const T*, const T*, int, int, int);        \
  template void row_parallel_forward(const TensorParallel&, const Fp8Linear&, T*, const T*,  \
                                     const T*, int, int, int);                                \
  template void row_parallel_backward(const TensorParallel&, const Fp8Linear&, T*, T*,       \
                                      const T*, const T*, const T*, int, int, int);           \
  template void vocab_parallel_embedding_forward(const TensorParallel&, T*, const int*,      \
                                                 const T*, int, int, int);                    \
  template void vocab_parallel_embedding_backward(const TensorParallel&, T*, const T*,       \
                                                  const int*, int, int, int);
PARALAB_TP_INSTANTIATE(float)
PARALAB_TP_INSTANTIATE(kernels::bf16)
PARALAB_TP_INSTANTIATE(kernels::fp16)
#undef PARALAB_TP_INSTANTIATE

}  // namespace paralab
