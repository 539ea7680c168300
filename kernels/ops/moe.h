// kernels/ops/moe.h: the mixture-of-experts ops (model/moe.h): the router, the dispatch of
// token rows to experts and back, the gated expert activations, the shared expert's gate.
// Twins: kernels/cpu/moe.cpp (the formulas), kernels/cuda/moe.cu.
//
// Router math is fp32 whatever the storage (logits, scores, gate values): those ops have no
// storage type. Token rows (in, out, y, z and their gradients) are of the storage type T. N
// tokens, E experts, k experts per token; a (token, slot) "pair" is p = t*k + s.
// Score functions: 0 softmax, 1 sigmoid (model/config.h Moe::Score).
//
// defines: moe_router_topk, moe_router_topk_backward, moe_balancing_scores,
//          moe_balancing_scores_backward, moe_weighted_sum, moe_weighted_sum_backward,
//          moe_z_loss_sum, moe_z_loss_backward, moe_permute, moe_unpermute, moe_unpermute_gates,
//          moe_swiglu_forward, moe_swiglu_backward, moe_gelu_forward, moe_gelu_backward,
//          moe_shared_gate_forward, moe_shared_gate_backward
#pragma once
#include "kernels/dispatch.h"

namespace kernels {

// ---- router (fp32) --------------------------------------------------------------------------
// Top-k routing of logits(N,E) (kernels/math.h moe_* helpers hold the per-row math):
//   softmax, pre_softmax false: the k largest logits, gates = softmax over those k;
//   softmax, pre_softmax true:  p = softmax over all E, the k largest p, gates = those p;
//   sigmoid: s = sigmoid(logits); the k largest s + expert_bias (bias may be null; it only
//            picks), gates = the picked s / (their sum + 1e-20) when k > 1, s when k == 1.
// Then gates *= scaling (scaling 0: none). Order within a row: by the selection value,
// largest first; ties go to the lower expert index. experts(N,k) int32, gates(N,k) "=".
template <Device Dev>
void moe_router_topk(float* gates, int* experts, const float* logits, const float* expert_bias,
                     int N, int E, int k, int score, bool pre_softmax, float scaling);
template <class = void>
void moe_router_topk(Device d, float* gates, int* experts, const float* logits,
                     const float* expert_bias, int N, int E, int k, int score, bool pre_softmax,
                     float scaling) {
  count_kernel(4.0 * N * E + (expert_bias ? 4.0 * E : 0) + 8.0 * N * k);
  ON_DEVICE(moe_router_topk)(gates, experts, logits, expert_bias, N, E, k, score, pre_softmax,
                             scaling);
}

// dlogits(N,E) "=" from dgates(N,k), the selection not differentiated (it recomputes the
// scores from the logits).
template <Device Dev>
void moe_router_topk_backward(float* dlogits, const float* dgates, const float* logits,
                              const int* experts, int N, int E, int k, int score,
                              bool pre_softmax, float scaling);
template <class = void>
void moe_router_topk_backward(Device d, float* dlogits, const float* dgates, const float* logits,
                              const int* experts, int N, int E, int k, int score,
                              bool pre_softmax, float scaling) {
  count_kernel(8.0 * N * E + 8.0 * N * k);
  ON_DEVICE(moe_router_topk_backward)(dlogits, dgates, logits, experts, N, E, k, score,
                                      pre_softmax, scaling);
}

// The load-balancing scores(N,E) "=": softmax over E (softmax) or sigmoid / (row sum + 1e-20)
// (sigmoid), whatever pre_softmax says (Megatron's compute_routing_scores_for_aux_loss).
template <Device Dev>
void moe_balancing_scores(float* scores, const float* logits, int N, int E, int score);
template <class = void>
void moe_balancing_scores(Device d, float* scores, const float* logits, int N, int E, int score) {
  count_kernel(8.0 * N * E);
  ON_DEVICE(moe_balancing_scores)(scores, logits, N, E, score);
}

// dlogits(N,E) += the scores' backward of dscores(N,E), recomputing the scores from logits.
template <Device Dev>
void moe_balancing_scores_backward(float* dlogits, const float* dscores, const float* logits,
                                   int N, int E, int score);
template <class = void>
void moe_balancing_scores_backward(Device d, float* dlogits, const float* dscores,
                                   const float* logits, int N, int E, int score) {
  count_kernel(16.0 * N * E);
  ON_DEVICE(moe_balancing_scores_backward)(dlogits, dscores, logits, N, E, score);
}

// The aux loss as a weighted sum: returns sum_t sum_e scores[t,e] w[t / group, e] (to the
// host, blocking; double accumulation), the weights w[g, e] = (float)(scale counts[g, e]) made
// from the aux loss's int32 counts (groups = N / group, E). aux_loss: one group of all N
// tokens; seq_aux_loss: one per sequence (group = S). And its gradient dscores(N,E) "=" the
// weights times factor (float), broadcast over each group's rows.
template <Device Dev>
double moe_weighted_sum(const float* scores, const int* counts, double scale, int N, int E,
                        int group);
template <class = void>
double moe_weighted_sum(Device d, const float* scores, const int* counts, double scale, int N,
                        int E, int group) {
  count_kernel(4.0 * N * E + 4.0 * (N / group) * E);
  return ON_DEVICE(moe_weighted_sum)(scores, counts, scale, N, E, group);
}
template <Device Dev>
void moe_weighted_sum_backward(float* dscores, const int* counts, double scale, float factor,
                               int N, int E, int group);
template <class = void>
void moe_weighted_sum_backward(Device d, float* dscores, const int* counts, double scale,
                               float factor, int N, int E, int group) {
  count_kernel(4.0 * N * E + 4.0 * (N / group) * E);
  ON_DEVICE(moe_weighted_sum_backward)(dscores, counts, scale, factor, N, E, group);
}

// z loss pieces: returns sum_t logsumexp(logits_t)^2 (host, blocking); dlogits += coeff *
// 2 lse_t softmax(logits_t).
template <Device Dev> double moe_z_loss_sum(const float* logits, int N, int E);
template <class = void> double moe_z_loss_sum(Device d, const float* logits, int N, int E) {
  count_kernel(4.0 * N * E);
  return ON_DEVICE(moe_z_loss_sum)(logits, N, E);
}
template <Device Dev>
void moe_z_loss_backward(float* dlogits, const float* logits, int N, int E, float coeff);
template <class = void>
void moe_z_loss_backward(Device d, float* dlogits, const float* logits, int N, int E,
                         float coeff) {
  count_kernel(12.0 * N * E);
  ON_DEVICE(moe_z_loss_backward)(dlogits, logits, N, E, coeff);
}

// ---- dispatch -------------------------------------------------------------------------------
// Permute: row j of out(M,C) "=" in[row_pair[j] / k] (row_pair[j] a pair index, -1: a
// padding row of zeros), and out_gates[j] = gates[row_pair[j]] (0 for padding; out_gates
// null: rows only). fused: one kernel for rows and gates (--moe-permute-fusion, CUDA); else
// two. The CPU runs one loop.
template <Device Dev, class T>
void moe_permute(T* out, float* out_gates, const T* in, const float* gates, const int* row_pair,
                 int M, int C, int k, bool fused);
template <class T>
void moe_permute(Device d, T* out, float* out_gates, const T* in, const float* gates,
                 const int* row_pair, int M, int C, int k, bool fused) {
  count_moe_permute(M, C, out_gates != nullptr, fused, (int)sizeof(T));
  ON_DEVICE(moe_permute, T)(out, out_gates, in, gates, row_pair, M, C, k, fused);
}

// Unpermute: out(N,C) "=" sum over s < k of in[slots[t*k + s]] (slots: the permuted row of
// pair (t, s), -1 when dropped), summed in slot order in fp32. fused: one kernel; else a
// zeroing pass and k accumulating passes (one per slot). Also permute's backward.
template <Device Dev, class T>
void moe_unpermute(T* out, const T* in, const int* slots, int N, int C, int k, bool fused);
template <class T>
void moe_unpermute(Device d, T* out, const T* in, const int* slots, int N, int C, int k,
                   bool fused) {
  count_moe_unpermute(N, C, k, fused, (int)sizeof(T));
  ON_DEVICE(moe_unpermute, T)(out, in, slots, N, C, k, fused);
}

// The gates' gradient back to pairs: dgates(N*k) "=" dperm_gates[slots[p]], 0 when dropped.
template <Device Dev>
void moe_unpermute_gates(float* dgates, const float* dperm_gates, const int* slots, int pairs);
template <class = void>
void moe_unpermute_gates(Device d, float* dgates, const float* dperm_gates, const int* slots,
                         int pairs) {
  count_kernel(12.0 * pairs);
  ON_DEVICE(moe_unpermute_gates)(dgates, dperm_gates, slots, pairs);
}

// ---- expert activations ---------------------------------------------------------------------
// With the gate applied after them (Megatron's experts): row j of out(M,F) = act(in_j) *
// gate[j]. swiglu: in(M,2F) [gate | up] per row; gelu: in(M,F). Backward: din "=" and
// dgates(M) "=" (sum over the row of dout * act(in)).
template <Device Dev, class T>
void moe_swiglu_forward(T* out, const T* in, const float* gates, int M, int F);
template <class T>
void moe_swiglu_forward(Device d, T* out, const T* in, const float* gates, int M, int F) {
  count_kernel(3.0 * M * F * sizeof(T) + 4.0 * M);
  ON_DEVICE(moe_swiglu_forward, T)(out, in, gates, M, F);
}
// din(M,2F) "=", dgates(M) "=".
template <Device Dev, class T>
void moe_swiglu_backward(T* din, float* dgates, const T* dout, const T* in, const float* gates,
                         int M, int F);
template <class T>
void moe_swiglu_backward(Device d, T* din, float* dgates, const T* dout, const T* in,
                         const float* gates, int M, int F) {
  count_kernel(5.0 * M * F * sizeof(T) + 8.0 * M);
  ON_DEVICE(moe_swiglu_backward, T)(din, dgates, dout, in, gates, M, F);
}
template <Device Dev, class T>
void moe_gelu_forward(T* out, const T* in, const float* gates, int M, int F);
template <class T>
void moe_gelu_forward(Device d, T* out, const T* in, const float* gates, int M, int F) {
  count_kernel(2.0 * M * F * sizeof(T) + 4.0 * M);
  ON_DEVICE(moe_gelu_forward, T)(out, in, gates, M, F);
}
// din(M,F) "=", dgates(M) "=".
template <Device Dev, class T>
void moe_gelu_backward(T* din, float* dgates, const T* dout, const T* in, const float* gates,
                       int M, int F);
template <class T>
void moe_gelu_backward(Device d, T* din, float* dgates, const T* dout, const T* in,
                       const float* gates, int M, int F) {
  count_kernel(3.0 * M * F * sizeof(T) + 8.0 * M);
  ON_DEVICE(moe_gelu_backward, T)(din, dgates, dout, in, gates, M, F);
}

// ---- the shared expert's gate ---------------------------------------------------------------
// Qwen2-MoE: out(N,C) += sigmoid(z_t) * y(N,C); backward dy "=" sigmoid(z) dout,
// dz(N) "=" sigmoid'(z) sum_c dout y. z is a row of the storage type too.
template <Device Dev, class T>
void moe_shared_gate_forward(T* out, const T* y, const T* z, int N, int C);
template <class T>
void moe_shared_gate_forward(Device d, T* out, const T* y, const T* z, int N, int C) {
  count_kernel((3.0 * N * C + N) * sizeof(T));
  ON_DEVICE(moe_shared_gate_forward, T)(out, y, z, N, C);
}
template <Device Dev, class T>
void moe_shared_gate_backward(T* dy, T* dz, const T* dout, const T* y, const T* z, int N, int C);
template <class T>
void moe_shared_gate_backward(Device d, T* dy, T* dz, const T* dout, const T* y, const T* z,
                              int N, int C) {
  count_kernel((3.0 * N * C + 2.0 * N) * sizeof(T));
  ON_DEVICE(moe_shared_gate_backward, T)(dy, dz, dout, y, z, N, C);
}

}  // namespace kernels
