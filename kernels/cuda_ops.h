// kernels/cuda_ops.h: the CUDA twins of kernels/ops.h, namespace kernels::cuda.
//
// Same signatures as kernels/ops.h without the leading Device (see there for the
// semantics of each op); kernels/ops.cpp dispatches to them. Plain C++, no CUDA types, so
// g++-compiled code can include it. Every op is queued asynchronously on one stream
// (created lazily on the current device: call cudaSetDevice before the first op);
// synchronize() waits for it. Errors throw std::runtime_error naming file:line.
// FLOPs are not counted here: the dispatcher counts them on the host.
//
// defined in: kernels/cuda/memory_gemm.cu (device, memory, GEMM, grouped GEMM), elementwise.cu
// (elementwise, embedding, activations, dropout, convert), norms.cu, attention.cu (layout,
// RoPE, the naive attention pieces and the ring's merge), flash_attention.cu,
// flash_attention_backward.cu, loss_optimizer.cu, moe.cu (router, permute / unpermute, gated
// expert activations, shared gate).
//
// The bf16 section at the end mirrors ops.h's: the same kernels, instantiated on bf16
// storage (each .cu file templates its kernels on the storage type T in {float, bf16}).
#ifndef PARALAB_KERNELS_CUDA_OPS_H  // a guard, not #pragma once: g++ -fsyntax-only checks it alone
#define PARALAB_KERNELS_CUDA_OPS_H
#include <cstddef>
#include <cstdint>

#include "kernels/common.h"  // kernels::bf16

namespace kernels {
struct GemmGroup;  // kernels/ops.h
// kernels/math.h: where a rank's tokens sit, and one pass of attention (passed by value to the
// kernels, so their member functions run on the device).
struct TokenPositions;
struct AttentionRows;
struct AttentionBlock;
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
// cublasGemmGroupedBatchedEx, one problem per non-empty group; the device array of the
// groups' pointers is uploaded on the stream each call.
void gemm_grouped(bool trans_a, bool trans_b, float alpha, const float* A, int lda, const float* B,
                  int ldb, float beta, float* C, int ldc, const GemmGroup* groups, int count);

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
                                int C, const TokenPositions& pos);
// Deterministic: one thread per (local position, channel) sums its rows in order into
// dwpe[pos.at(s)] (at() is one to one, so no two threads share a table row).
void position_embedding_backward(float* dwpe, const float* dout, int N, int seq_len,
                                 int first_row, int C, const TokenPositions& pos);

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
                     uint64_t stream, const TokenPositions& pos, int width);
void dropout_backward(float* din, const float* dout, const uint8_t* mask, size_t n, float p);

// ---- attention layout ----------------------------------------------------------------------
void qkv_split_forward(float* q, float* k, float* v, const float* qkv, int B, int S, int A, int G,
                       int D, float rope_theta, const TokenPositions& pos);
void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int B,
                        int S, int A, int G, int D, float rope_theta, const TokenPositions& pos);
void heads_merge_forward(float* out, const float* o, int B, int S, int A, int D);
void heads_merge_backward(float* d_o, const float* dout, int B, int S, int A, int D);

// One thread per rotated pair (in place: it reads both halves before writing either).
void rope_forward(float* x, int B, int H, int S, int D, float theta, const TokenPositions& pos);
void rope_backward(float* dx, int B, int H, int S, int D, float theta, const TokenPositions& pos);

// ---- attention, one pass of query rows against key rows (attention.cu) ----------------------
// The softmax and its backward run one block per probability row, the rescale and dropout
// one thread per probability, delta and merge one warp per query row. Every lse and delta is
// at the q view (bh * (head_stride / D) + i), hence D; a head_stride that is not whole rows
// throws.
void attention_softmax_forward(float* probs, float* lse, const float* scores, int BH, int D,
                               float scale, const AttentionBlock& blk);
void attention_softmax_backward(float* dscores, const float* dprobs, const float* probs,
                                const float* delta, int BH, int D, float scale,
                                const AttentionBlock& blk);
void attention_probs_rescale(float* probs, const float* lse_pass, const float* lse, int BH,
                             int D, const AttentionBlock& blk);
void attention_dropout_forward(float* out, uint8_t* mask, const float* probs, int B, int A,
                               float p, uint64_t seed, uint64_t stream, const AttentionBlock& blk);
void attention_delta(float* delta, const float* dout, const float* o, int BH, int D,
                     const AttentionRows& rows);
void attention_merge(float* o, float* lse, const float* o_pass, const float* lse_pass, int BH,
                     int D, const AttentionRows& rows);

// ---- attention, flash ----------------------------------------------------------------------
// Head dim D is limited by shared memory per block: D <= 192 fits the A100 (163 KiB),
// D <= 256 the H100/H200 (227 KiB); a larger D throws.
// Key tiles past the last visible key of a query tile's last row are skipped (and query tiles
// none of whose rows sees a key tile, in the dk/dv kernel).
void flash_attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                             int B, int A, int G, int D, float scale, float dropout_p,
                             uint64_t seed, uint64_t stream, const AttentionBlock& blk);
// dq, dk, dv "+=" (deterministic: each element has one owning thread, no atomics).
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* o, const float* lse,
                              int B, int A, int G, int D, float scale, float dropout_p,
                              uint64_t seed, uint64_t stream, const AttentionBlock& blk);

// ---- mixture of experts --------------------------------------------------------------------
// Router ops: one thread per token row (kernels/math.h moe_*_row). The two sums return to the
// host (blocking) from a block reduction in double. unpermute fused: one thread per output
// element sums its k slots; unfused: a zeroing pass and k accumulating passes, the same sum in
// the same order (bit for bit the fused result).
void moe_router_topk(float* gates, int* experts, const float* logits, const float* expert_bias,
                     int N, int E, int k, int score, bool pre_softmax, float scaling);
void moe_router_topk_backward(float* dlogits, const float* dgates, const float* logits,
                              const int* experts, int N, int E, int k, int score,
                              bool pre_softmax, float scaling);
void moe_balancing_scores(float* scores, const float* logits, int N, int E, int score);
void moe_balancing_scores_backward(float* dlogits, const float* dscores, const float* logits,
                                   int N, int E, int score);
double moe_weighted_sum(const float* scores, const float* weights, int N, int E, int group);
void moe_weighted_sum_backward(float* dscores, const float* weights, int N, int E, int group);
double moe_z_loss_sum(const float* logits, int N, int E);
void moe_z_loss_backward(float* dlogits, const float* logits, int N, int E, float coeff);
void moe_permute(float* out, float* out_gates, const float* in, const float* gates,
                 const int* row_pair, int M, int C, int k, bool fused);
void moe_unpermute(float* out, const float* in, const int* slots, int N, int C, int k,
                   bool fused);
void moe_unpermute_gates(float* dgates, const float* dperm_gates, const int* slots, int pairs);
void moe_swiglu_forward(float* out, const float* in, const float* gates, int M, int F);
void moe_swiglu_backward(float* din, float* dgates, const float* dout, const float* in,
                         const float* gates, int M, int F);
void moe_gelu_forward(float* out, const float* in, const float* gates, int M, int F);
void moe_gelu_backward(float* din, float* dgates, const float* dout, const float* in,
                       const float* gates, int M, int F);
void moe_shared_gate_forward(float* out, const float* y, const float* z, int N, int C);
void moe_shared_gate_backward(float* dy, float* dz, const float* dout, const float* y,
                              const float* z, int N, int C);

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
                                int C, const TokenPositions& pos);
void position_embedding_backward(bf16* dwpe, const bf16* dout, int N, int seq_len, int first_row,
                                 int C, const TokenPositions& pos);
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
                     uint64_t stream, const TokenPositions& pos, int width);
void dropout_backward(bf16* din, const bf16* dout, const uint8_t* mask, size_t n, float p);
void qkv_split_forward(bf16* q, bf16* k, bf16* v, const bf16* qkv, int B, int S, int A, int G,
                       int D, float rope_theta, const TokenPositions& pos);
void qkv_split_backward(bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv, int B, int S,
                        int A, int G, int D, float rope_theta, const TokenPositions& pos);
void heads_merge_forward(bf16* out, const bf16* o, int B, int S, int A, int D);
void heads_merge_backward(bf16* d_o, const bf16* dout, int B, int S, int A, int D);
void attention_softmax_forward(bf16* probs, float* lse, const bf16* scores, int BH, int D,
                               float scale, const AttentionBlock& blk);
void attention_softmax_backward(bf16* dscores, const bf16* dprobs, const bf16* probs,
                                const float* delta, int BH, int D, float scale,
                                const AttentionBlock& blk);
void attention_probs_rescale(bf16* probs, const float* lse_pass, const float* lse, int BH,
                             int D, const AttentionBlock& blk);
void attention_dropout_forward(bf16* out, uint8_t* mask, const bf16* probs, int B, int A, float p,
                               uint64_t seed, uint64_t stream, const AttentionBlock& blk);
void attention_delta(float* delta, const bf16* dout, const bf16* o, int BH, int D,
                     const AttentionRows& rows);
// o stays fp32 (the ring's accumulator); o_pass is the pass's bf16 output.
void attention_merge(float* o, float* lse, const bf16* o_pass, const float* lse_pass, int BH,
                     int D, const AttentionRows& rows);
void flash_attention_forward(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v,
                             int B, int A, int G, int D, float scale, float dropout_p,
                             uint64_t seed, uint64_t stream, const AttentionBlock& blk);
// dq fp32 (+=); dk, dv bf16 (+=: each block sums its share in fp32, adds it to the widened
// value and rounds once).
void flash_attention_backward(float* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                              const bf16* k, const bf16* v, const bf16* o, const float* lse,
                              int B, int A, int G, int D, float scale, float dropout_p,
                              uint64_t seed, uint64_t stream, const AttentionBlock& blk);
void gemm_grouped(bool trans_a, bool trans_b, float alpha, const bf16* A, int lda, const bf16* B,
                  int ldb, float beta, bf16* C, int ldc, const GemmGroup* groups, int count);
void rope_forward(bf16* x, int B, int H, int S, int D, float theta, const TokenPositions& pos);
void rope_backward(bf16* dx, int B, int H, int S, int D, float theta, const TokenPositions& pos);
void moe_permute(bf16* out, float* out_gates, const bf16* in, const float* gates,
                 const int* row_pair, int M, int C, int k, bool fused);
// unfused bf16: the k passes accumulate into an fp32 scratch (stream-ordered cudaMallocAsync)
// and a last pass rounds it into out once, so it equals the fused result bit for bit.
void moe_unpermute(bf16* out, const bf16* in, const int* slots, int N, int C, int k, bool fused);
void moe_swiglu_forward(bf16* out, const bf16* in, const float* gates, int M, int F);
void moe_swiglu_backward(bf16* din, float* dgates, const bf16* dout, const bf16* in,
                         const float* gates, int M, int F);
void moe_gelu_forward(bf16* out, const bf16* in, const float* gates, int M, int F);
void moe_gelu_backward(bf16* din, float* dgates, const bf16* dout, const bf16* in,
                       const float* gates, int M, int F);
void moe_shared_gate_forward(bf16* out, const bf16* y, const bf16* z, int N, int C);
void moe_shared_gate_backward(bf16* dy, bf16* dz, const bf16* dout, const bf16* y, const bf16* z,
                              int N, int C);
void adamw_update(float* master, bf16* params, const bf16* grads, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float bias1,
                  float bias2, float grad_scale);
double sum_squares(const bf16* x, size_t n);  // blocking

}  // namespace cuda
}  // namespace kernels

#endif  // PARALAB_KERNELS_CUDA_OPS_H
