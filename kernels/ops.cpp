// kernels/ops.cpp: kernels::NAME(Device d, ...) -> kernels::cpu::NAME or kernels::cuda::NAME,
// each call counted as kernels/counters.h says (FLOPs, GEMM calls per label, the other
// kernels' launches and bytes, GEMM wall time).
//
// The dispatch is the only place that knows both backends exist: model/ and parallel/ call
// kernels::NAME with the Device they were configured with. In a CPU_ONLY build
// (g++ -DPARALAB_CPU_ONLY, no CUDA toolkit) the CUDA branch throws instead of linking
// against kernels/cuda/.
//
// defines: the dispatchers declared in kernels/ops.h (their counters: kernels/counters.cpp),
//          cuda_compiled, cuda_device_count
#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "kernels/counters.h"
#include "kernels/cpu_ops.h"
#include "kernels/ops.h"
#ifndef PARALAB_CPU_ONLY
#include <cuda_runtime_api.h>
#include "kernels/cuda_ops.h"
#endif

namespace kernels {

// ---- device queries ---------------------------------------------------------------------

#ifndef PARALAB_CPU_ONLY
bool cuda_compiled() { return true; }
int cuda_device_count() { return cuda::device_count(); }
void cuda_select_device(int local_rank) {
  const int n = cuda::device_count();
  if (n == 0) throw std::runtime_error("--device cuda: no GPU is visible");
  if (cudaSetDevice(local_rank % n) != cudaSuccess)
    throw std::runtime_error("cudaSetDevice(" + std::to_string(local_rank % n) + ") failed");
}
std::string cuda_device_name() {
  int device = 0;
  cudaDeviceProp prop;
  if (cuda::device_count() == 0 || cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "";
  return prop.name;
}
#else
bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_name() { return ""; }

[[noreturn]] static void no_cuda() {
  throw std::runtime_error("--device cuda: this binary was built without CUDA (make CPU_ONLY=1)");
}
void cuda_select_device(int) { no_cuda(); }
#endif

// ON_DEVICE(NAME, args...) is the body of every op below:
//   if (d == Device::CUDA) return cuda::NAME(args...);   (throws in a CPU_ONLY build)
//   return cpu::NAME(args...);
// `return f(...)` of a void f is legal C++, so one macro serves void and non-void ops.
#ifndef PARALAB_CPU_ONLY
#define ON_DEVICE(NAME, ...)                              \
  if (d == Device::CUDA) return cuda::NAME(__VA_ARGS__); \
  return cpu::NAME(__VA_ARGS__)
#else
#define ON_DEVICE(NAME, ...)         \
  if (d == Device::CUDA) no_cuda(); \
  return cpu::NAME(__VA_ARGS__)
#endif

// B A sum_i visible(i): the (b, head, query i, visible key j) pairs of one attention pass.
static double block_pairs(int B, int A, const AttentionBlock& blk) {
  return (double)B * A * (double)visible_pairs(blk);
}

// The bytes of a stored element in this file's ops (fp32; kernels/ops_bf16.cpp's are 2).
constexpr double kE = sizeof(float);

// Elements of a naive pass's probabilities: BH heads of q.rows x k.rows.
static double pass_probs(int BH, const AttentionBlock& blk) {
  return (double)BH * blk.q.rows * blk.k.rows;
}

// ---- memory -----------------------------------------------------------------------------

void* device_malloc(Device d, size_t bytes) { ON_DEVICE(device_malloc, bytes); }
void device_free(Device d, void* p) { ON_DEVICE(device_free, p); }
void memcpy_to_host(Device d, void* host_dst, const void* src, size_t bytes) {
  ON_DEVICE(memcpy_to_host, host_dst, src, bytes);
}
void memcpy_from_host(Device d, void* dst, const void* host_src, size_t bytes) {
  ON_DEVICE(memcpy_from_host, dst, host_src, bytes);
}
void memcpy_device(Device d, void* dst, const void* src, size_t bytes) {
  count_kernel(2.0 * bytes);
  ON_DEVICE(memcpy_device, dst, src, bytes);
}
void memset_zero(Device d, void* p, size_t bytes) {
  count_kernel((double)bytes);
  ON_DEVICE(memset_zero, p, bytes);
}
void synchronize(Device d) { ON_DEVICE(synchronize, ); }

// ---- GEMM -------------------------------------------------------------------------------

void gemm(Device d, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  count_gemm(2.0 * m * n * k);
  GemmTimer timer(d);
  ON_DEVICE(gemm, trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_strided_batched(Device d, bool trans_a, bool trans_b, int m, int n, int k,
                          float alpha, const float* A, int lda, long long stride_a,
                          const float* B, int ldb, long long stride_b, float beta, float* C,
                          int ldc, long long stride_c, int batch) {
  count_gemm(2.0 * m * n * k * batch);
  GemmTimer timer(d);
  ON_DEVICE(gemm_strided_batched, trans_a, trans_b, m, n, k, alpha, A, lda, stride_a, B, ldb,
            stride_b, beta, C, ldc, stride_c, batch);
}

double grouped_flops(const GemmGroup* groups, int count) {
  double f = 0.0;
  for (int i = 0; i < count; i++) f += 2.0 * groups[i].m * groups[i].n * groups[i].k;
  return f;
}

void gemm_grouped(Device d, bool trans_a, bool trans_b, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc,
                  const GemmGroup* groups, int count) {
  count_gemm(grouped_flops(groups, count));
  GemmTimer timer(d);
  ON_DEVICE(gemm_grouped, trans_a, trans_b, alpha, A, lda, B, ldb, beta, C, ldc, groups, count);
}

// ---- elementwise ------------------------------------------------------------------------

void add(Device d, float* out, const float* a, const float* b, size_t n) {
  count_kernel(3.0 * n * kE);
  ON_DEVICE(add, out, a, b, n);
}
void accumulate(Device d, float* out, const float* a, size_t n) {
  count_kernel(3.0 * n * kE);
  ON_DEVICE(accumulate, out, a, n);
}
void scale(Device d, float* x, float s, size_t n) {
  count_kernel(2.0 * n * kE);
  ON_DEVICE(scale, x, s, n);
}
void add_bias(Device d, float* y, const float* bias, int N, int C) {
  count_kernel((2.0 * N * C + C) * kE);
  ON_DEVICE(add_bias, y, bias, N, C);
}
void bias_backward(Device d, float* dbias, const float* dy, int N, int C) {
  count_kernel(((double)N * C + 2.0 * C) * kE);
  ON_DEVICE(bias_backward, dbias, dy, N, C);
}

// ---- embedding --------------------------------------------------------------------------

void embedding_forward(Device d, float* out, const int* tokens, const float* wte,
                       int vocab_start, int vocab_rows, int N, int C) {
  count_kernel(4.0 * N + 2.0 * N * C * kE);
  ON_DEVICE(embedding_forward, out, tokens, wte, vocab_start, vocab_rows, N, C);
}
void embedding_backward(Device d, float* dwte, const float* dout, const int* tokens,
                        int vocab_start, int vocab_rows, int N, int C) {
  count_kernel(4.0 * N + 3.0 * N * C * kE);
  ON_DEVICE(embedding_backward, dwte, dout, tokens, vocab_start, vocab_rows, N, C);
}
void position_embedding_forward(Device d, float* out, const float* wpe, int N, int seq_len,
                                int first_row, int C, const TokenPositions& pos) {
  count_kernel((2.0 * N + std::min(N, seq_len)) * C * kE);
  ON_DEVICE(position_embedding_forward, out, wpe, N, seq_len, first_row, C, pos);
}
void position_embedding_backward(Device d, float* dwpe, const float* dout, int N, int seq_len,
                                 int first_row, int C, const TokenPositions& pos) {
  count_kernel(((double)N + 2.0 * std::min(N, seq_len)) * C * kE);
  ON_DEVICE(position_embedding_backward, dwpe, dout, N, seq_len, first_row, C, pos);
}

// ---- norms ------------------------------------------------------------------------------

void layernorm_forward(Device d, float* out, float* mean, float* rstd, const float* x,
                       const float* w, const float* b, int N, int C, float eps) {
  count_kernel((2.0 * N * C + 2.0 * C) * kE + 8.0 * N);
  ON_DEVICE(layernorm_forward, out, mean, rstd, x, w, b, N, C, eps);
}
void layernorm_backward(Device d, float* dx, float* dw, float* db, const float* dout,
                        const float* x, const float* w, const float* mean, const float* rstd,
                        int N, int C) {
  count_kernel((4.0 * N * C + 5.0 * C) * kE + 8.0 * N, 2);
  ON_DEVICE(layernorm_backward, dx, dw, db, dout, x, w, mean, rstd, N, C);
}
void rmsnorm_forward(Device d, float* out, float* rstd, const float* x, const float* w, int N,
                     int C, float eps) {
  count_kernel((2.0 * N * C + C) * kE + 4.0 * N);
  ON_DEVICE(rmsnorm_forward, out, rstd, x, w, N, C, eps);
}
void rmsnorm_backward(Device d, float* dx, float* dw, const float* dout, const float* x,
                      const float* w, const float* rstd, int N, int C) {
  count_kernel((4.0 * N * C + 3.0 * C) * kE + 4.0 * N, 2);
  ON_DEVICE(rmsnorm_backward, dx, dw, dout, x, w, rstd, N, C);
}

// ---- activations ------------------------------------------------------------------------

void gelu_forward(Device d, float* out, const float* in, size_t n) {
  count_kernel(2.0 * n * kE);
  ON_DEVICE(gelu_forward, out, in, n);
}
void gelu_backward(Device d, float* din, const float* dout, const float* in, size_t n) {
  count_kernel(3.0 * n * kE);
  ON_DEVICE(gelu_backward, din, dout, in, n);
}
void swiglu_forward(Device d, float* out, const float* in, int N, int F) {
  count_kernel(3.0 * N * F * kE);
  ON_DEVICE(swiglu_forward, out, in, N, F);
}
void swiglu_backward(Device d, float* din, const float* dout, const float* in, int N, int F) {
  count_kernel(5.0 * N * F * kE);
  ON_DEVICE(swiglu_backward, din, dout, in, N, F);
}

// ---- dropout ----------------------------------------------------------------------------

void dropout_forward(Device d, float* out, uint8_t* mask, const float* in, size_t n, float p,
                     uint64_t seed, uint64_t stream, const TokenPositions& pos, int width) {
  count_kernel(2.0 * n * kE + n);
  ON_DEVICE(dropout_forward, out, mask, in, n, p, seed, stream, pos, width);
}
void dropout_backward(Device d, float* din, const float* dout, const uint8_t* mask, size_t n,
                      float p) {
  count_kernel(2.0 * n * kE + n);
  ON_DEVICE(dropout_backward, din, dout, mask, n, p);
}

// ---- attention layout -------------------------------------------------------------------

void qkv_split_forward(Device d, float* q, float* k, float* v, const float* qkv, int B, int S,
                       int A, int G, int D, float rope_theta, const TokenPositions& pos) {
  count_kernel(2.0 * B * S * (A + 2.0 * G) * D * kE);
  ON_DEVICE(qkv_split_forward, q, k, v, qkv, B, S, A, G, D, rope_theta, pos);
}
void qkv_split_backward(Device d, float* dqkv, const float* dq, const float* dk,
                        const float* dv, int B, int S, int A, int G, int D, float rope_theta,
                        const TokenPositions& pos) {
  count_kernel(2.0 * B * S * (A + 2.0 * G) * D * kE);
  ON_DEVICE(qkv_split_backward, dqkv, dq, dk, dv, B, S, A, G, D, rope_theta, pos);
}
void heads_merge_forward(Device d, float* out, const float* o, int B, int S, int A, int D) {
  count_kernel(2.0 * B * S * A * D * kE);
  ON_DEVICE(heads_merge_forward, out, o, B, S, A, D);
}
void heads_merge_backward(Device d, float* d_o, const float* dout, int B, int S, int A,
                          int D) {
  count_kernel(2.0 * B * S * A * D * kE);
  ON_DEVICE(heads_merge_backward, d_o, dout, B, S, A, D);
}

void rope_forward(Device d, float* x, int B, int H, int S, int D, float theta,
                  const TokenPositions& pos) {
  count_kernel(2.0 * B * H * S * D * kE);
  ON_DEVICE(rope_forward, x, B, H, S, D, theta, pos);
}
void rope_backward(Device d, float* dx, int B, int H, int S, int D, float theta,
                   const TokenPositions& pos) {
  count_kernel(2.0 * B * H * S * D * kE);
  ON_DEVICE(rope_backward, dx, B, H, S, D, theta, pos);
}

// ---- attention, one pass: naive pieces and the merge -------------------------------------

void attention_softmax_forward(Device d, float* probs, float* lse, const float* scores, int BH,
                               int D, float scale, const AttentionBlock& blk) {
  count_kernel(2.0 * pass_probs(BH, blk) * kE + (lse ? 4.0 * BH * blk.q.rows : 0));
  ON_DEVICE(attention_softmax_forward, probs, lse, scores, BH, D, scale, blk);
}
void attention_softmax_backward(Device d, float* dscores, const float* dprobs, const float* probs,
                                const float* delta, int BH, int D, float scale,
                                const AttentionBlock& blk) {
  count_kernel(3.0 * pass_probs(BH, blk) * kE + (delta ? 4.0 * BH * blk.q.rows : 0));
  ON_DEVICE(attention_softmax_backward, dscores, dprobs, probs, delta, BH, D, scale, blk);
}
void attention_probs_rescale(Device d, float* probs, const float* lse_pass, const float* lse,
                             int BH, int D, const AttentionBlock& blk) {
  count_kernel(2.0 * pass_probs(BH, blk) * kE + 8.0 * BH * blk.q.rows);
  ON_DEVICE(attention_probs_rescale, probs, lse_pass, lse, BH, D, blk);
}
void attention_dropout_forward(Device d, float* out, uint8_t* mask, const float* probs, int B,
                               int A, float p, uint64_t seed, uint64_t stream,
                               const AttentionBlock& blk) {
  count_kernel((2.0 * kE + 1) * pass_probs(B * A, blk));
  ON_DEVICE(attention_dropout_forward, out, mask, probs, B, A, p, seed, stream, blk);
}
void attention_delta(Device d, float* delta, const float* dout, const float* o, int BH, int D,
                     const AttentionRows& rows) {
  count_kernel((2.0 * D * kE + 4) * BH * rows.rows);
  ON_DEVICE(attention_delta, delta, dout, o, BH, D, rows);
}
void attention_merge(Device d, float* o, float* lse, const float* o_pass, const float* lse_pass,
                     int BH, int D, const AttentionRows& rows) {
  count_kernel(((8.0 + kE) * D + 12) * BH * rows.rows);
  ON_DEVICE(attention_merge, o, lse, o_pass, lse_pass, BH, D, rows);
}

// ---- attention, flash -------------------------------------------------------------------

void flash_attention_forward(Device d, float* o, float* lse, const float* q, const float* k,
                             const float* v, int B, int A, int G, int D, float scale,
                             float dropout_p, uint64_t seed, uint64_t stream,
                             const AttentionBlock& blk) {
  add_flops(4.0 * D * block_pairs(B, A, blk));
  count_attention_kernel(1);
  ON_DEVICE(flash_attention_forward, o, lse, q, k, v, B, A, G, D, scale, dropout_p, seed,
            stream, blk);
}
void flash_attention_backward(Device d, float* dq, float* dk, float* dv, const float* dout,
                              const float* q, const float* k, const float* v, const float* o,
                              const float* lse, int B, int A, int G, int D, float scale,
                              float dropout_p, uint64_t seed, uint64_t stream,
                              const AttentionBlock& blk) {
  add_flops(10.0 * D * block_pairs(B, A, blk));
  count_attention_kernel(2);  // the dq kernel, then the dk, dv kernel
  ON_DEVICE(flash_attention_backward, dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale,
            dropout_p, seed, stream, blk);
}

// ---- mixture of experts -----------------------------------------------------------------

void moe_router_topk(Device d, float* gates, int* experts, const float* logits,
                     const float* expert_bias, int N, int E, int k, int score, bool pre_softmax,
                     float scaling) {
  count_kernel(4.0 * N * E + (expert_bias ? 4.0 * E : 0) + 8.0 * N * k);
  ON_DEVICE(moe_router_topk, gates, experts, logits, expert_bias, N, E, k, score, pre_softmax,
            scaling);
}
void moe_router_topk_backward(Device d, float* dlogits, const float* dgates, const float* logits,
                              const int* experts, int N, int E, int k, int score,
                              bool pre_softmax, float scaling) {
  count_kernel(8.0 * N * E + 8.0 * N * k);
  ON_DEVICE(moe_router_topk_backward, dlogits, dgates, logits, experts, N, E, k, score,
            pre_softmax, scaling);
}
void moe_balancing_scores(Device d, float* scores, const float* logits, int N, int E, int score) {
  count_kernel(8.0 * N * E);
  ON_DEVICE(moe_balancing_scores, scores, logits, N, E, score);
}
void moe_balancing_scores_backward(Device d, float* dlogits, const float* dscores,
                                   const float* logits, int N, int E, int score) {
  count_kernel(16.0 * N * E);
  ON_DEVICE(moe_balancing_scores_backward, dlogits, dscores, logits, N, E, score);
}
double moe_weighted_sum(Device d, const float* scores, const float* weights, int N, int E,
                        int group) {
  count_kernel(4.0 * N * E + 4.0 * (N / group) * E);
  ON_DEVICE(moe_weighted_sum, scores, weights, N, E, group);
}
void moe_weighted_sum_backward(Device d, float* dscores, const float* weights, int N, int E,
                               int group) {
  count_kernel(4.0 * N * E + 4.0 * (N / group) * E);
  ON_DEVICE(moe_weighted_sum_backward, dscores, weights, N, E, group);
}
double moe_z_loss_sum(Device d, const float* logits, int N, int E) {
  count_kernel(4.0 * N * E);
  ON_DEVICE(moe_z_loss_sum, logits, N, E);
}
void moe_z_loss_backward(Device d, float* dlogits, const float* logits, int N, int E,
                         float coeff) {
  count_kernel(12.0 * N * E);
  ON_DEVICE(moe_z_loss_backward, dlogits, logits, N, E, coeff);
}
void moe_permute(Device d, float* out, float* out_gates, const float* in, const float* gates,
                 const int* row_pair, int M, int C, int k, bool fused) {
  count_moe_permute(M, C, out_gates != nullptr, fused, (int)kE);
  ON_DEVICE(moe_permute, out, out_gates, in, gates, row_pair, M, C, k, fused);
}
void moe_unpermute(Device d, float* out, const float* in, const int* slots, int N, int C, int k,
                   bool fused) {
  count_moe_unpermute(N, C, k, fused, (int)kE);
  ON_DEVICE(moe_unpermute, out, in, slots, N, C, k, fused);
}
void moe_unpermute_gates(Device d, float* dgates, const float* dperm_gates, const int* slots,
                         int pairs) {
  count_kernel(12.0 * pairs);
  ON_DEVICE(moe_unpermute_gates, dgates, dperm_gates, slots, pairs);
}
void moe_swiglu_forward(Device d, float* out, const float* in, const float* gates, int M, int F) {
  count_kernel(3.0 * M * F * kE + 4.0 * M);
  ON_DEVICE(moe_swiglu_forward, out, in, gates, M, F);
}
void moe_swiglu_backward(Device d, float* din, float* dgates, const float* dout, const float* in,
                         const float* gates, int M, int F) {
  count_kernel(5.0 * M * F * kE + 8.0 * M);
  ON_DEVICE(moe_swiglu_backward, din, dgates, dout, in, gates, M, F);
}
void moe_gelu_forward(Device d, float* out, const float* in, const float* gates, int M, int F) {
  count_kernel(2.0 * M * F * kE + 4.0 * M);
  ON_DEVICE(moe_gelu_forward, out, in, gates, M, F);
}
void moe_gelu_backward(Device d, float* din, float* dgates, const float* dout, const float* in,
                       const float* gates, int M, int F) {
  count_kernel(3.0 * M * F * kE + 8.0 * M);
  ON_DEVICE(moe_gelu_backward, din, dgates, dout, in, gates, M, F);
}
void moe_shared_gate_forward(Device d, float* out, const float* y, const float* z, int N, int C) {
  count_kernel((3.0 * N * C + N) * kE);
  ON_DEVICE(moe_shared_gate_forward, out, y, z, N, C);
}
void moe_shared_gate_backward(Device d, float* dy, float* dz, const float* dout, const float* y,
                              const float* z, int N, int C) {
  count_kernel((3.0 * N * C + 2.0 * N) * kE);
  ON_DEVICE(moe_shared_gate_backward, dy, dz, dout, y, z, N, C);
}

// ---- loss -------------------------------------------------------------------------------

void cross_entropy_row_max(Device d, float* row_max, const float* logits, int N, int V,
                           int valid) {
  count_kernel(4.0 * N * valid + 4.0 * N);
  ON_DEVICE(cross_entropy_row_max, row_max, logits, N, V, valid);
}
void cross_entropy_sum_exp(Device d, float* sum_exp, float* target_logit, const float* logits,
                           const float* row_max, const int* targets, int N, int V, int valid,
                           int vocab_start) {
  count_kernel(4.0 * N * valid + 16.0 * N);
  ON_DEVICE(cross_entropy_sum_exp, sum_exp, target_logit, logits, row_max, targets, N, V, valid,
            vocab_start);
}
void cross_entropy_finish(Device d, float* losses, float* logits, const int* targets,
                          const float* row_max, const float* sum_exp, const float* target_logit,
                          int N, int V, int valid, int vocab_start, float grad_scale) {
  count_kernel(4.0 * N * valid + 4.0 * N * V + 20.0 * N);
  ON_DEVICE(cross_entropy_finish, losses, logits, targets, row_max, sum_exp, target_logit, N, V,
            valid, vocab_start, grad_scale);
}

// ---- optimizer --------------------------------------------------------------------------

void adamw_update(Device d, float* params, const float* grads, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float bias1, float bias2, float grad_scale) {
  count_kernel(28.0 * n);
  ON_DEVICE(adamw_update, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, bias1,
            bias2, grad_scale);
}
double sum_squares(Device d, const float* x, size_t n) {
  count_kernel(n * kE);
  ON_DEVICE(sum_squares, x, n);
}

}  // namespace kernels
