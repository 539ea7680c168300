// kernels/cpu_ops.h: the CPU twin of every op in kernels/ops.h.
//
// Same signatures as kernels/ops.h minus the leading Device argument; the semantics
// (shapes, "=" vs "+=") are documented there once and not repeated here. The bodies are
// plain loops plus OpenBLAS sgemm, written to be read as the pseudocode the CUDA kernels
// (kernels/cuda/) mirror; the per-element math comes from kernels/math.h so both twins run
// the same arithmetic.
//
//   kernels/cpu/memory_gemm.cpp     device_malloc .. synchronize, gemm, gemm_strided_batched,
//                                   gemm_grouped
//   kernels/cpu/elementwise.cpp     add .. bias_backward, gelu, swiglu, dropout
//   kernels/cpu/embedding.cpp       vocab-range embedding, position embedding
//   kernels/cpu/norms.cpp           layernorm, rmsnorm
//   kernels/cpu/attention.cpp       qkv_split, heads_merge, rope, the naive attention pieces
//                                   (softmax, rescale, dropout, delta) and the ring's merge
//   kernels/cpu/moe.cpp             MoE router (top-k, balancing scores, aux and z loss),
//                                   permute / unpermute, gated expert activations, shared gate
//   kernels/cpu/flash_attention.cpp flash_attention_forward / _backward (tiled, online softmax)
//   kernels/cpu/loss_optimizer.cpp  adamw_update, sum_squares
//   kernels/cpu/cross_entropy.cpp   cross_entropy_row_max, _sum_exp, _finish (three passes)
//   kernels/cpu/simd_math.h         row_max, row_sum: vectorisable row reductions of the
//                                   softmax loops (exp_simd itself is in kernels/math.h)
//
// The FLOP counter is not here: it is host-side and device-independent (kernels/ops.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/math.h"  // TokenPositions, AttentionRows, AttentionBlock

namespace kernels {
struct GemmGroup;  // kernels/ops.h
namespace cpu {

// ---- memory ----
void* device_malloc(size_t bytes);  // 64-byte aligned, zero-filled
void device_free(void* p);
void memcpy_to_host(void* host_dst, const void* src, size_t bytes);
void memcpy_from_host(void* dst, const void* host_src, size_t bytes);
void memcpy_device(void* dst, const void* src, size_t bytes);
void memset_zero(void* p, size_t bytes);
void synchronize();

// ---- GEMM ----
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* A, int lda, long long stride_a, const float* B, int ldb,
                          long long stride_b, float beta, float* C, int ldc, long long stride_c,
                          int batch);
void gemm_grouped(bool trans_a, bool trans_b, float alpha, const float* A, int lda, const float* B,
                  int ldb, float beta, float* C, int ldc, const GemmGroup* groups, int count);

// ---- elementwise ----
void add(float* out, const float* a, const float* b, size_t n);
void accumulate(float* out, const float* a, size_t n);
void scale(float* x, float s, size_t n);
void add_bias(float* y, const float* bias, int N, int C);
void bias_backward(float* dbias, const float* dy, int N, int C);

// ---- embedding ----
void embedding_forward(float* out, const int* tokens, const float* wte, int vocab_start,
                       int vocab_rows, int N, int C);
void embedding_backward(float* dwte, const float* dout, const int* tokens, int vocab_start,
                        int vocab_rows, int N, int C);
void position_embedding_forward(float* out, const float* wpe, int N, int seq_len, int first_row,
                                int C, const TokenPositions& pos);
void position_embedding_backward(float* dwpe, const float* dout, int N, int seq_len,
                                 int first_row, int C, const TokenPositions& pos);

// ---- norms ----
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C, float eps);
void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C);
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C,
                     float eps);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int N, int C);

// ---- activations ----
void gelu_forward(float* out, const float* in, size_t n);
void gelu_backward(float* din, const float* dout, const float* in, size_t n);
void swiglu_forward(float* out, const float* in, int N, int F);
void swiglu_backward(float* din, const float* dout, const float* in, int N, int F);

// ---- dropout ----
void dropout_forward(float* out, uint8_t* mask, const float* in, size_t n, float p,
                     uint64_t seed, uint64_t stream, const TokenPositions& pos, int width);
void dropout_backward(float* din, const float* dout, const uint8_t* mask, size_t n, float p);

// ---- attention layout ----
void qkv_split_forward(float* q, float* k, float* v, const float* qkv, int B, int S, int A,
                       int G, int D, float rope_theta, const TokenPositions& pos);
void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int B,
                        int S, int A, int G, int D, float rope_theta, const TokenPositions& pos);
void heads_merge_forward(float* out, const float* o, int B, int S, int A, int D);
void heads_merge_backward(float* d_o, const float* dout, int B, int S, int A, int D);

void rope_forward(float* x, int B, int H, int S, int D, float theta, const TokenPositions& pos);
void rope_backward(float* dx, int B, int H, int S, int D, float theta,
                   const TokenPositions& pos);

// ---- attention, one pass: the naive pieces and the merge ----
void attention_softmax_forward(float* probs, float* lse, const float* scores, int BH, int D,
                               float scale, const AttentionBlock& blk);
void attention_softmax_backward(float* dscores, const float* dprobs, const float* probs,
                                const float* delta, int BH, int D, float scale,
                                const AttentionBlock& blk);
void attention_probs_rescale(float* probs, const float* lse_pass, const float* lse, int BH,
                             int D, const AttentionBlock& blk);
void attention_dropout_forward(float* out, uint8_t* mask, const float* probs, int B, int A,
                               float p, uint64_t seed, uint64_t stream,
                               const AttentionBlock& blk);
void attention_delta(float* delta, const float* dout, const float* o, int BH, int D,
                     const AttentionRows& rows);
void attention_merge(float* o, float* lse, const float* o_pass, const float* lse_pass, int BH,
                     int D, const AttentionRows& rows);

// ---- attention, flash ----
void flash_attention_forward(float* o, float* lse, const float* q, const float* k,
                             const float* v, int B, int A, int G, int D, float scale,
                             float dropout_p, uint64_t seed, uint64_t stream,
                             const AttentionBlock& blk);
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                              const float* q, const float* k, const float* v, const float* o,
                              const float* lse, int B, int A, int G, int D, float scale,
                              float dropout_p, uint64_t seed, uint64_t stream,
                              const AttentionBlock& blk);

// ---- mixture of experts ----
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

// ---- loss ----
void cross_entropy_row_max(float* row_max, const float* logits, int N, int V, int valid);
void cross_entropy_sum_exp(float* sum_exp, float* target_logit, const float* logits,
                           const float* row_max, const int* targets, int N, int V, int valid,
                           int vocab_start);
void cross_entropy_finish(float* losses, float* logits, const int* targets, const float* row_max,
                          const float* sum_exp, const float* target_logit, int N, int V,
                          int valid, int vocab_start, float grad_scale);

// ---- optimizer ----
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float bias1,
                  float bias2, float grad_scale);
double sum_squares(const float* x, size_t n);

}  // namespace cpu
}  // namespace kernels
