// kernels/ops.cpp: kernels::NAME(Device d, ...) -> kernels::cpu::NAME or kernels::cuda::NAME,
// and the host-side FLOP counter.
//
// The dispatch is the only place that knows both backends exist: model/ and parallel/ call
// kernels::NAME with the Device they were configured with. In a CPU_ONLY build
// (g++ -DPARALAB_CPU_ONLY, no CUDA toolkit) the CUDA branch throws instead of linking
// against kernels/cuda/.
//
// FLOPs are counted here, at launch, from the arguments alone (so both backends count the
// same and the CUDA count needs no device round trip). Only matrix products are counted, one
// multiply-add = 2 FLOPs (plan/flops.h compares them with the plan):
//   gemm                      2 m n k
//   gemm_strided_batched      2 m n k batch
//   gemm_grouped              sum over the groups of 2 m_i n_i k_i
//   flash forward             2 products (Q K^T, P V) over the pairs the block's mask keeps:
//                             query i sees blk.visible(i) keys, pairs = sum_i visible(i) per
//                             (b, head) (kernels/math.h visible_pairs; S(S+1)/2 for the whole
//                             causal sequence), 2D FLOPs per pair per product:
//                             2 * 2D * B A pairs = 4 D B A pairs
//   flash backward            5 products (Q K^T recomputed, dP' = dO V^T, dV, dQ, dK):
//                             5 * 2D * B A pairs = 10 D B A pairs
// The tiled kernels also multiply the masked part of each tile that straddles the mask
// (zeroed afterwards); that work is not counted, as FlashAttention's own accounting leaves it
// out. The naive attention pieces (softmax, rescale, dropout, delta, merge) count nothing:
// their products are gemm calls, counted there.
//
// Each GEMM call is also counted per label (GemmLabel): one call and its FLOPs go to the label
// in force, "other" when none; add_flops (the attention kernels) adds FLOPs to it too, so the
// labels' FLOPs sum to flop_counter(). The labels are a few string literals: a short vector
// kept sorted by name, looked up by strcmp, is all the storage they need.
//
// GEMM wall time is measured here too, around the dispatch: on the CPU backend the call
// returns when the product is done, so the elapsed time is the GEMM's. A CUDA launch returns
// at once; timing it would measure nothing, so a CUDA GEMM marks the counter unmeasured.
//
// defines: everything declared in kernels/ops.h, cuda_compiled, cuda_device_count
#include <chrono>
#include <cstring>
#include <stdexcept>

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

// ---- FLOP counter -----------------------------------------------------------------------

static double g_flops = 0.0;
static const char* g_label = nullptr;  // the innermost live GemmLabel's, null: "other"
static std::vector<std::pair<std::string, GemmCount>> g_counts;  // sorted by label

// The count of the label in force, created (in sorted place) at its first use.
static GemmCount& current_count() {
  const char* label = g_label ? g_label : "other";
  auto it = g_counts.begin();
  while (it != g_counts.end() && std::strcmp(it->first.c_str(), label) < 0) ++it;
  if (it == g_counts.end() || it->first != label) it = g_counts.insert(it, {label, GemmCount{}});
  return it->second;
}

double flop_counter() { return g_flops; }
void reset_flop_counter() { g_flops = 0.0; }
void add_flops(double f) {
  g_flops += f;
  current_count().flops += f;
}
void count_gemm(double flops) {
  add_flops(flops);
  current_count().calls += 1;
}

std::vector<std::pair<std::string, GemmCount>> gemm_counts() { return g_counts; }
void reset_gemm_counts() { g_counts.clear(); }
GemmLabel::GemmLabel(const char* label) : previous_(g_label) { g_label = label; }
GemmLabel::~GemmLabel() { g_label = previous_; }

// ---- GEMM wall time ----------------------------------------------------------------------

static double g_gemm_seconds = 0.0;
static bool g_gemm_on_cuda = false;  // a CUDA GEMM since the reset: the time is unknown

double gemm_seconds() { return g_gemm_on_cuda ? -1.0 : g_gemm_seconds; }
void reset_gemm_seconds() {
  g_gemm_seconds = 0.0;
  g_gemm_on_cuda = false;
}

// Lives for one GEMM call and adds its duration to g_gemm_seconds when it ends.
class GemmTimer {
 public:
  explicit GemmTimer(Device d) : start_(std::chrono::steady_clock::now()) {
    if (d == Device::CUDA) g_gemm_on_cuda = true;
  }
  ~GemmTimer() {
    g_gemm_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// B A sum_i visible(i): the (b, head, query i, visible key j) pairs of one attention pass.
static double block_pairs(int B, int A, const AttentionBlock& blk) {
  return (double)B * A * (double)visible_pairs(blk);
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
  ON_DEVICE(memcpy_device, dst, src, bytes);
}
void memset_zero(Device d, void* p, size_t bytes) { ON_DEVICE(memset_zero, p, bytes); }
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
  ON_DEVICE(add, out, a, b, n);
}
void accumulate(Device d, float* out, const float* a, size_t n) {
  ON_DEVICE(accumulate, out, a, n);
}
void scale(Device d, float* x, float s, size_t n) { ON_DEVICE(scale, x, s, n); }
void add_bias(Device d, float* y, const float* bias, int N, int C) {
  ON_DEVICE(add_bias, y, bias, N, C);
}
void bias_backward(Device d, float* dbias, const float* dy, int N, int C) {
  ON_DEVICE(bias_backward, dbias, dy, N, C);
}

// ---- embedding --------------------------------------------------------------------------

void embedding_forward(Device d, float* out, const int* tokens, const float* wte,
                       int vocab_start, int vocab_rows, int N, int C) {
  ON_DEVICE(embedding_forward, out, tokens, wte, vocab_start, vocab_rows, N, C);
}
void embedding_backward(Device d, float* dwte, const float* dout, const int* tokens,
                        int vocab_start, int vocab_rows, int N, int C) {
  ON_DEVICE(embedding_backward, dwte, dout, tokens, vocab_start, vocab_rows, N, C);
}
void position_embedding_forward(Device d, float* out, const float* wpe, int N, int seq_len,
                                int first_row, int C, const TokenPositions& pos) {
  ON_DEVICE(position_embedding_forward, out, wpe, N, seq_len, first_row, C, pos);
}
void position_embedding_backward(Device d, float* dwpe, const float* dout, int N, int seq_len,
                                 int first_row, int C, const TokenPositions& pos) {
  ON_DEVICE(position_embedding_backward, dwpe, dout, N, seq_len, first_row, C, pos);
}

// ---- norms ------------------------------------------------------------------------------

void layernorm_forward(Device d, float* out, float* mean, float* rstd, const float* x,
                       const float* w, const float* b, int N, int C, float eps) {
  ON_DEVICE(layernorm_forward, out, mean, rstd, x, w, b, N, C, eps);
}
void layernorm_backward(Device d, float* dx, float* dw, float* db, const float* dout,
                        const float* x, const float* w, const float* mean, const float* rstd,
                        int N, int C) {
  ON_DEVICE(layernorm_backward, dx, dw, db, dout, x, w, mean, rstd, N, C);
}
void rmsnorm_forward(Device d, float* out, float* rstd, const float* x, const float* w, int N,
                     int C, float eps) {
  ON_DEVICE(rmsnorm_forward, out, rstd, x, w, N, C, eps);
}
void rmsnorm_backward(Device d, float* dx, float* dw, const float* dout, const float* x,
                      const float* w, const float* rstd, int N, int C) {
  ON_DEVICE(rmsnorm_backward, dx, dw, dout, x, w, rstd, N, C);
}

// ---- activations ------------------------------------------------------------------------

void gelu_forward(Device d, float* out, const float* in, size_t n) {
  ON_DEVICE(gelu_forward, out, in, n);
}
void gelu_backward(Device d, float* din, const float* dout, const float* in, size_t n) {
  ON_DEVICE(gelu_backward, din, dout, in, n);
}
void swiglu_forward(Device d, float* out, const float* in, int N, int F) {
  ON_DEVICE(swiglu_forward, out, in, N, F);
}
void swiglu_backward(Device d, float* din, const float* dout, const float* in, int N, int F) {
  ON_DEVICE(swiglu_backward, din, dout, in, N, F);
}

// ---- dropout ----------------------------------------------------------------------------

void dropout_forward(Device d, float* out, uint8_t* mask, const float* in, size_t n, float p,
                     uint64_t seed, uint64_t stream, const TokenPositions& pos, int width) {
  ON_DEVICE(dropout_forward, out, mask, in, n, p, seed, stream, pos, width);
}
void dropout_backward(Device d, float* din, const float* dout, const uint8_t* mask, size_t n,
                      float p) {
  ON_DEVICE(dropout_backward, din, dout, mask, n, p);
}

// ---- attention layout -------------------------------------------------------------------

void qkv_split_forward(Device d, float* q, float* k, float* v, const float* qkv, int B, int S,
                       int A, int G, int D, float rope_theta, const TokenPositions& pos) {
  ON_DEVICE(qkv_split_forward, q, k, v, qkv, B, S, A, G, D, rope_theta, pos);
}
void qkv_split_backward(Device d, float* dqkv, const float* dq, const float* dk,
                        const float* dv, int B, int S, int A, int G, int D, float rope_theta,
                        const TokenPositions& pos) {
  ON_DEVICE(qkv_split_backward, dqkv, dq, dk, dv, B, S, A, G, D, rope_theta, pos);
}
void heads_merge_forward(Device d, float* out, const float* o, int B, int S, int A, int D) {
  ON_DEVICE(heads_merge_forward, out, o, B, S, A, D);
}
void heads_merge_backward(Device d, float* d_o, const float* dout, int B, int S, int A,
                          int D) {
  ON_DEVICE(heads_merge_backward, d_o, dout, B, S, A, D);
}

void rope_forward(Device d, float* x, int B, int H, int S, int D, float theta,
                  const TokenPositions& pos) {
  ON_DEVICE(rope_forward, x, B, H, S, D, theta, pos);
}
void rope_backward(Device d, float* dx, int B, int H, int S, int D, float theta,
                   const TokenPositions& pos) {
  ON_DEVICE(rope_backward, dx, B, H, S, D, theta, pos);
}

// ---- attention, one pass: naive pieces and the merge -------------------------------------

void attention_softmax_forward(Device d, float* probs, float* lse, const float* scores, int BH,
                               int D, float scale, const AttentionBlock& blk) {
  ON_DEVICE(attention_softmax_forward, probs, lse, scores, BH, D, scale, blk);
}
void attention_softmax_backward(Device d, float* dscores, const float* dprobs, const float* probs,
                                const float* delta, int BH, int D, float scale,
                                const AttentionBlock& blk) {
  ON_DEVICE(attention_softmax_backward, dscores, dprobs, probs, delta, BH, D, scale, blk);
}
void attention_probs_rescale(Device d, float* probs, const float* lse_pass, const float* lse,
                             int BH, int D, const AttentionBlock& blk) {
  ON_DEVICE(attention_probs_rescale, probs, lse_pass, lse, BH, D, blk);
}
void attention_dropout_forward(Device d, float* out, uint8_t* mask, const float* probs, int B,
                               int A, float p, uint64_t seed, uint64_t stream,
                               const AttentionBlock& blk) {
  ON_DEVICE(attention_dropout_forward, out, mask, probs, B, A, p, seed, stream, blk);
}
void attention_delta(Device d, float* delta, const float* dout, const float* o, int BH, int D,
                     const AttentionRows& rows) {
  ON_DEVICE(attention_delta, delta, dout, o, BH, D, rows);
}
void attention_merge(Device d, float* o, float* lse, const float* o_pass, const float* lse_pass,
                     int BH, int D, const AttentionRows& rows) {
  ON_DEVICE(attention_merge, o, lse, o_pass, lse_pass, BH, D, rows);
}

// ---- attention, flash -------------------------------------------------------------------

void flash_attention_forward(Device d, float* o, float* lse, const float* q, const float* k,
                             const float* v, int B, int A, int G, int D, float scale,
                             float dropout_p, uint64_t seed, uint64_t stream,
                             const AttentionBlock& blk) {
  add_flops(4.0 * D * block_pairs(B, A, blk));
  ON_DEVICE(flash_attention_forward, o, lse, q, k, v, B, A, G, D, scale, dropout_p, seed,
            stream, blk);
}
void flash_attention_backward(Device d, float* dq, float* dk, float* dv, const float* dout,
                              const float* q, const float* k, const float* v, const float* o,
                              const float* lse, int B, int A, int G, int D, float scale,
                              float dropout_p, uint64_t seed, uint64_t stream,
                              const AttentionBlock& blk) {
  add_flops(10.0 * D * block_pairs(B, A, blk));
  ON_DEVICE(flash_attention_backward, dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale,
            dropout_p, seed, stream, blk);
}

// ---- mixture of experts -----------------------------------------------------------------

void moe_router_topk(Device d, float* gates, int* experts, const float* logits,
                     const float* expert_bias, int N, int E, int k, int score, bool pre_softmax,
                     float scaling) {
  ON_DEVICE(moe_router_topk, gates, experts, logits, expert_bias, N, E, k, score, pre_softmax,
            scaling);
}
void moe_router_topk_backward(Device d, float* dlogits, const float* dgates, const float* logits,
                              const int* experts, int N, int E, int k, int score,
                              bool pre_softmax, float scaling) {
  ON_DEVICE(moe_router_topk_backward, dlogits, dgates, logits, experts, N, E, k, score,
            pre_softmax, scaling);
}
void moe_balancing_scores(Device d, float* scores, const float* logits, int N, int E, int score) {
  ON_DEVICE(moe_balancing_scores, scores, logits, N, E, score);
}
void moe_balancing_scores_backward(Device d, float* dlogits, const float* dscores,
                                   const float* logits, int N, int E, int score) {
  ON_DEVICE(moe_balancing_scores_backward, dlogits, dscores, logits, N, E, score);
}
double moe_weighted_sum(Device d, const float* scores, const float* weights, int N, int E,
                        int group) {
  ON_DEVICE(moe_weighted_sum, scores, weights, N, E, group);
}
void moe_weighted_sum_backward(Device d, float* dscores, const float* weights, int N, int E,
                               int group) {
  ON_DEVICE(moe_weighted_sum_backward, dscores, weights, N, E, group);
}
double moe_z_loss_sum(Device d, const float* logits, int N, int E) {
  ON_DEVICE(moe_z_loss_sum, logits, N, E);
}
void moe_z_loss_backward(Device d, float* dlogits, const float* logits, int N, int E,
                         float coeff) {
  ON_DEVICE(moe_z_loss_backward, dlogits, logits, N, E, coeff);
}
void moe_permute(Device d, float* out, float* out_gates, const float* in, const float* gates,
                 const int* row_pair, int M, int C, int k, bool fused) {
  ON_DEVICE(moe_permute, out, out_gates, in, gates, row_pair, M, C, k, fused);
}
void moe_unpermute(Device d, float* out, const float* in, const int* slots, int N, int C, int k,
                   bool fused) {
  ON_DEVICE(moe_unpermute, out, in, slots, N, C, k, fused);
}
void moe_unpermute_gates(Device d, float* dgates, const float* dperm_gates, const int* slots,
                         int pairs) {
  ON_DEVICE(moe_unpermute_gates, dgates, dperm_gates, slots, pairs);
}
void moe_swiglu_forward(Device d, float* out, const float* in, const float* gates, int M, int F) {
  ON_DEVICE(moe_swiglu_forward, out, in, gates, M, F);
}
void moe_swiglu_backward(Device d, float* din, float* dgates, const float* dout, const float* in,
                         const float* gates, int M, int F) {
  ON_DEVICE(moe_swiglu_backward, din, dgates, dout, in, gates, M, F);
}
void moe_gelu_forward(Device d, float* out, const float* in, const float* gates, int M, int F) {
  ON_DEVICE(moe_gelu_forward, out, in, gates, M, F);
}
void moe_gelu_backward(Device d, float* din, float* dgates, const float* dout, const float* in,
                       const float* gates, int M, int F) {
  ON_DEVICE(moe_gelu_backward, din, dgates, dout, in, gates, M, F);
}
void moe_shared_gate_forward(Device d, float* out, const float* y, const float* z, int N, int C) {
  ON_DEVICE(moe_shared_gate_forward, out, y, z, N, C);
}
void moe_shared_gate_backward(Device d, float* dy, float* dz, const float* dout, const float* y,
                              const float* z, int N, int C) {
  ON_DEVICE(moe_shared_gate_backward, dy, dz, dout, y, z, N, C);
}

// ---- loss -------------------------------------------------------------------------------

void cross_entropy_row_max(Device d, float* row_max, const float* logits, int N, int V,
                           int valid) {
  ON_DEVICE(cross_entropy_row_max, row_max, logits, N, V, valid);
}
void cross_entropy_sum_exp(Device d, float* sum_exp, float* target_logit, const float* logits,
                           const float* row_max, const int* targets, int N, int V, int valid,
                           int vocab_start) {
  ON_DEVICE(cross_entropy_sum_exp, sum_exp, target_logit, logits, row_max, targets, N, V, valid,
            vocab_start);
}
void cross_entropy_finish(Device d, float* losses, float* logits, const int* targets,
                          const float* row_max, const float* sum_exp, const float* target_logit,
                          int N, int V, int valid, int vocab_start, float grad_scale) {
  ON_DEVICE(cross_entropy_finish, losses, logits, targets, row_max, sum_exp, target_logit, N, V,
            valid, vocab_start, grad_scale);
}

// ---- optimizer --------------------------------------------------------------------------

void adamw_update(Device d, float* params, const float* grads, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float bias1, float bias2, float grad_scale) {
  ON_DEVICE(adamw_update, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, bias1,
            bias2, grad_scale);
}
double sum_squares(Device d, const float* x, size_t n) { ON_DEVICE(sum_squares, x, n); }

}  // namespace kernels
