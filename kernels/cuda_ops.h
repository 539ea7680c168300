// kernels/cuda_ops.h: the CUDA twins of kernels/ops.h, namespace kernels::cuda.
//
// Same signatures as kernels/ops.h without the leading Device (see there for the
// semantics of each op); kernels/ops.cpp dispatches to them. Plain C++, no CUDA types, so
// g++-compiled code can include it. Every op is queued asynchronously on one stream
// (created lazily on the current device: call cudaSetDevice before the first op);
// synchronize() waits for it. Errors throw std::runtime_error naming file:line.
// FLOPs are not counted here: the dispatcher counts them on the host.
//
// defined in: kernels/cuda/memory_gemm.cu (device, memory, GEMM), elementwise.cu
// (elementwise, embedding, activations, dropout, convert), norms.cu, attention.cu (layout,
// naive softmax), flash_attention.cu, flash_attention_backward.cu, loss_optimizer.cu.
//
// The bf16 section at the end mirrors ops.h's: the same kernels, instantiated on bf16
// storage (each .cu file templates its kernels on the storage type T in {float, bf16}).
#ifndef PARALAB_KERNELS_CUDA_OPS_H  // a guard, not #pragma once: g++ -fsyntax-only checks it alone
#define PARALAB_KERNELS_CUDA_OPS_H
#include <cstddef>
#include <cstdint>

#include "kernels/common.h"  // kernels::bf16

namespace kernels {
namespace cuda {

// ---- device --------------------------------------------------------------------------------
// Visible GPUs; 0 when there is no driver or no GPU. Never throws.
int device_count();
// The cudaStream_t every op runs on, as void* (NCCL calls enqueue on it to stay ordered
// with the compute).
void* current_stream();

// ---- memory --------------------------------------------------------------------------------
void* device_malloc(size_t bytes);  // zero-filled, ready on return
void device_free(void* p);
void memcpy_to_host(void* host_dst, const void* src, size_t bytes);    // blocking
void memcpy_from_host(void* dst, const void* host_src, size_t bytes);  // blocking
void memcpy_device(void* dst, const void* src, size_t bytes);
void memset_zero(void* p, size_t bytes);
void synchronize();

// ---- GEMM ----------------------------------------------------------------------------------
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* A, int lda, long long stride_a, const float* B, int ldb,
                          long long stride_b, float beta, float* C, int ldc, long long stride_c,
                          int batch);

// ---- elementwise ---------------------------------------------------------------------------
void add(float* out, const float* a, const float* b, size_t n);
void accumulate(float* out, const float* a, size_t n);
void scale(float* x, float s, size_t n);
void add_bias(float* y, const float* bias, int N, int C);
void bias_backward(float* dbias, const float* dy, int N, int C);

// ---- embedding -----------------------------------------------------------------------------
void embedding_forward(float* out, const int* tokens, const float* wte, int vocab_start,
                       int vocab_rows, int N, int C);
// dwte uses atomicAdd: summation order (so the last bits) is nondeterministic.
void embedding_backward(float* dwte, const float* dout, const int* tokens, int vocab_start,
                        int vocab_rows, int N, int C);
void position_embedding_forward(float* out, const float* wpe, int N, int seq_len, int first_row,
                                int C);
// Deterministic: one thread per (position, channel) sums its rows in order.
void position_embedding_backward(float* dwpe, const float* dout, int N, int seq_len,
                                 int first_row, int C);

// ---- norms ---------------------------------------------------------------------------------
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C, float eps);
void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C);
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C,
                     float eps);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int N, int C);

// ---- activations ---------------------------------------------------------------------------
void gelu_forward(float* out, const float* in, size_t n);
void gelu_backward(float* din, const float* dout, const float* in, size_t n);
void swiglu_forward(float* out, const float* in, int N, int F);
void swiglu_backward(float* din, const float* dout, const float* in, int N, int F);

// ---- dropout -------------------------------------------------------------------------------
void dropout_forward(float* out, uint8_t* mask, const float* in, size_t n, float p, uint64_t seed,
                     uint64_t stream);
void dropout_backward(float* din, const float* dout, const uint8_t* mask, size_t n, float p);

// ---- attention layout ----------------------------------------------------------------------
void qkv_split_forward(float* q, float* k, float* v, const float* qkv, int B, int S, int A, int G,
                       int D, float rope_theta);
void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int B,
                        int S, int A, int G, int D, float rope_theta);
void heads_merge_forward(float* out, const float* o, int B, int S, int A, int D);
void heads_merge_backward(float* d_o, const float* dout, int B, int S, int A, int D);

// ---- attention, naive pieces ---------------------------------------------------------------
void causal_softmax_forward(float* probs, const float* scores, int rows, int S, float scale);
void causal_softmax_backward(float* dscores, const float* dprobs, const float* probs, int rows,
                             int S, float scale);

// ---- attention, flash ----------------------------------------------------------------------
// Head dim D is limited by shared memory per block: D <= 192 fits the A100 (163 KiB),
// D <= 256 the H100/H200 (227 KiB); a larger D throws.
void flash_attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                             int B, int A, int G, int S, int D, float scale, float dropout_p,
                             uint64_t seed, uint64_t stream);
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* o, const float* lse,
                              int B, int A, int G, int S, int D, float scale, float dropout_p,
                              uint64_t seed, uint64_t stream);

// ---- loss ----------------------------------------------------------------------------------
// The three passes: one block per row each.
void cross_entropy_row_max(float* row_max, const float* logits, int N, int V, int valid);
void cross_entropy_sum_exp(float* sum_exp, float* target_logit, const float* logits,
                           const float* row_max, const int* targets, int N, int V, int valid,
                           int vocab_start);
void cross_entropy_finish(float* losses, float* logits, const int* targets, const float* row_max,
                          const float* sum_exp, const float* target_logit, int N, int V, int valid,
                          int vocab_start, float grad_scale);

// ---- optimizer -----------------------------------------------------------------------------
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float bias1, float bias2,
                  float grad_scale);
double sum_squares(const float* x, size_t n);  // blocking

// ---- bf16 storage (--bf16) -----------------------------------------------------------------
// kernels/ops.h's bf16 section without the Device. Inputs widen to fp32 (kernels/math.h
// to_float), the arithmetic is the fp32 kernels', outputs round to nearest even (store).
// "+=" outputs are read, added to in fp32 and rounded once per call.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* A, int lda,
          const bf16* B, int ldb, float beta, bf16* C, int ldc);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* A, int lda,
          const bf16* B, int ldb, float beta, float* C, int ldc);
void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const bf16* A, int lda, long long stride_a, const bf16* B, int ldb,
                          long long stride_b, float beta, bf16* C, int ldc, long long stride_c,
                          int batch);
void convert(bf16* out, const float* in, size_t n);
void convert(float* out, const bf16* in, size_t n);

void add(bf16* out, const bf16* a, const bf16* b, size_t n);
void accumulate(bf16* out, const bf16* a, size_t n);
void add_bias(bf16* y, const bf16* bias, int N, int C);
void bias_backward(bf16* dbias, const bf16* dy, int N, int C);
void embedding_forward(bf16* out, const int* tokens, const bf16* wte, int vocab_start,
                       int vocab_rows, int N, int C);
// Deterministic (no atomics): each distinct token's rows (tokens out of range skipped) are
// summed in fp32, in row order, by one block, then rounded into dwte once. Costs O(N^2) token
// comparisons (elementwise.cu).
void embedding_backward(bf16* dwte, const bf16* dout, const int* tokens, int vocab_start,
                        int vocab_rows, int N, int C);
void position_embedding_forward(bf16* out, const bf16* wpe, int N, int seq_len, int first_row,
                                int C);
void position_embedding_backward(bf16* dwpe, const bf16* dout, int N, int seq_len, int first_row,
                                 int C);
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* x, const bf16* w,
                       const bf16* b, int N, int C, float eps);
void layernorm_backward(bf16* dx, bf16* dw, bf16* db, const bf16* dout, const bf16* x,
                        const bf16* w, const float* mean, const float* rstd, int N, int C);
void rmsnorm_forward(bf16* out, float* rstd, const bf16* x, const bf16* w, int N, int C,
                     float eps);
void rmsnorm_backward(bf16* dx, bf16* dw, const bf16* dout, const bf16* x, const bf16* w,
                      const float* rstd, int N, int C);
void gelu_forward(bf16* out, const bf16* in, size_t n);
void gelu_backward(bf16* din, const bf16* dout, const bf16* in, size_t n);
void swiglu_forward(bf16* out, const bf16* in, int N, int F);
void swiglu_backward(bf16* din, const bf16* dout, const bf16* in, int N, int F);
void dropout_forward(bf16* out, uint8_t* mask, const bf16* in, size_t n, float p, uint64_t seed,
                     uint64_t stream);
void dropout_backward(bf16* din, const bf16* dout, const uint8_t* mask, size_t n, float p);
void qkv_split_forward(bf16* q, bf16* k, bf16* v, const bf16* qkv, int B, int S, int A, int G,
                       int D, float rope_theta);
void qkv_split_backward(bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv, int B, int S,
                        int A, int G, int D, float rope_theta);
void heads_merge_forward(bf16* out, const bf16* o, int B, int S, int A, int D);
void heads_merge_backward(bf16* d_o, const bf16* dout, int B, int S, int A, int D);
void causal_softmax_forward(bf16* probs, const bf16* scores, int rows, int S, float scale);
void causal_softmax_backward(bf16* dscores, const bf16* dprobs, const bf16* probs, int rows, int S,
                             float scale);
void flash_attention_forward(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v,
                             int B, int A, int G, int S, int D, float scale, float dropout_p,
                             uint64_t seed, uint64_t stream);
void flash_attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                              const bf16* k, const bf16* v, const bf16* o, const float* lse,
                              int B, int A, int G, int S, int D, float scale, float dropout_p,
                              uint64_t seed, uint64_t stream);
void adamw_update(float* master, bf16* params, const bf16* grads, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float bias1,
                  float bias2, float grad_scale);
double sum_squares(const bf16* x, size_t n);  // blocking

}  // namespace cuda
}  // namespace kernels

#endif  // PARALAB_KERNELS_CUDA_OPS_H
