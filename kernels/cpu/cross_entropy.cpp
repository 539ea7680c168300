// kernels/cpu/cross_entropy.cpp: softmax cross-entropy fused with its backward, in three
// passes so that the vocabulary (the columns of the logits) may be split over ranks.
//
// Per row i with target t, over the whole vocabulary:
//   m_i    = max_j z_ij                       (pass 1; ranks combine by max)
//   s_i    = sum_j exp(z_ij - m_i)            (pass 2; ranks combine by sum)
//   z_it                                      (pass 2; the owning rank's value, others 0: sum)
//   loss_i = log s_i + m_i - z_it             (pass 3, every rank alike)
//   dz_ij  = grad_scale (exp(z_ij - m_i) / s_i - [j == t])   (pass 3, on each rank's columns)
// Between the passes parallel/tensor_parallel.cpp all-reduces 3 floats per row, so the
// (N, V) logits are never gathered; on one rank the passes run back to back. The loss is
// fused with its backward because the logits are the largest tensor of a step: the gradient
// overwrites them in place, so no second (N, V) buffer exists.
//
// defines: cross_entropy_row_max, cross_entropy_sum_exp, cross_entropy_finish
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/simd_math.h"  // defines: exp_simd, row_max, row_sum
#include "kernels/cpu_ops.h"

namespace kernels {
namespace cpu {

// Column of row i's target on this rank: -1 when the row is ignored (t < 0) or another rank
// holds t. A target in this rank's padding columns is no token at all.
static int local_target(int t, int V, int valid, int vocab_start) {
  const int j = t - vocab_start;
  if (t < 0 || j < 0 || j >= V) return -1;
  if (j >= valid)
    throw std::out_of_range("cross_entropy: target " + std::to_string(t) +
                            " is a padding column (vocabulary ends at " +
                            std::to_string(vocab_start + valid) + ")");
  return j;
}

void cross_entropy_row_max(float* row_max_out, const float* logits, int N, int V, int valid) {
  for (int i = 0; i < N; i++) {
    const float* z = logits + (size_t)i * V;  // seek to row i
    // A rank whose columns are all padding holds no candidate: the identity of max.
    row_max_out[i] = valid > 0 ? row_max(z, valid) : -INFINITY;
  }
}

void cross_entropy_sum_exp(float* sum_exp, float* target_logit, const float* logits,
                           const float* row_max_in, const int* targets, int N, int V, int valid,
                           int vocab_start) {
  // One row's exponentials, summed by row_sum (independent lanes, so the loop vectorises).
  std::vector<float> e(valid > 0 ? valid : 0);
  for (int i = 0; i < N; i++) {
    const float* z = logits + (size_t)i * V;
    const float m = row_max_in[i];
    for (int j = 0; j < valid; j++) e[j] = exp_simd(z[j] - m);
    sum_exp[i] = row_sum(e.data(), (int)e.size());
    const int t = local_target(targets[i], V, valid, vocab_start);
    target_logit[i] = t >= 0 ? z[t] : 0.0f;
  }
}

void cross_entropy_finish(float* losses, float* logits, const int* targets,
                          const float* row_max_in, const float* sum_exp,
                          const float* target_logit, int N, int V, int valid, int vocab_start,
                          float grad_scale) {
  for (int i = 0; i < N; i++) {
    float* z = logits + (size_t)i * V;
    if (targets[i] < 0) {  // ignored position (padding): no loss, no gradient
      losses[i] = 0.0f;
      for (int j = 0; j < V; j++) z[j] = 0.0f;
      continue;
    }
    const float m = row_max_in[i];
    losses[i] = m + logf(sum_exp[i]) - target_logit[i];
    // softmax_j = exp(z_j - m) / s: one division per row, a multiply per column.
    const float norm = grad_scale / sum_exp[i];
    for (int j = 0; j < valid; j++) z[j] = exp_simd(z[j] - m) * norm;
    for (int j = valid > 0 ? valid : 0; j < V; j++) z[j] = 0.0f;
    const int t = local_target(targets[i], V, valid, vocab_start);
    if (t >= 0) z[t] -= grad_scale;
  }
}

}  // namespace cpu
}  // namespace kernels
