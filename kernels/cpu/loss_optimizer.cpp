// kernels/cpu/loss_optimizer.cpp: the loss (softmax cross-entropy fused with its backward)
// and the optimizer (AdamW, and the squared norm that gradient clipping needs).
//
// Cross-entropy, in three passes so that the vocabulary (the columns of the logits) may be
// split over ranks.
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
// overwrites them in place, so no second (N, V) buffer exists. The loss is fp32 whatever
// the storage.
//
// AdamW steps the fp32 master weights; with 16-bit storage it widens the gradients, runs the
// fp32 step and rounds the master into the model's 16-bit weights. Its moments are fp32 or,
// with Megatron's precision-aware optimizer, bf16 (AdamStep::exp_avg_bf16, exp_avg_sq_bf16).
//
// defines the CPU twins of kernels/ops/loss_optimizer.h: cross_entropy_row_max,
// cross_entropy_sum_exp, cross_entropy_finish, adamw_update, sum_squares
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/simd_math.h"  // defines: exp_simd, row_max, row_sum
#include "kernels/cpu/widen.h"      // defines: Input
#include "kernels/math.h"
#include "kernels/ops/loss_optimizer.h"

namespace kernels {

using cpu::row_max;
using cpu::row_sum;

// ---- cross-entropy ------------------------------------------------------------------------

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

template <> void cross_entropy_row_max<Device::CPU>(float* row_max_out, const float* logits, int N,
                                                    int V, int valid) {
  for (int i = 0; i < N; i++) {
    const float* z = logits + (size_t)i * V;  // seek to row i
    // A rank whose columns are all padding holds no candidate: the identity of max.
    row_max_out[i] = valid > 0 ? row_max(z, valid) : -INFINITY;
  }
}

template <> void cross_entropy_sum_exp<Device::CPU>(
    float* sum_exp, float* target_logit, const float* logits, const float* row_max_in,
    const int* targets, int N, int V, int valid, int vocab_start) {
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

template <> void cross_entropy_finish<Device::CPU>(
    float* losses, float* logits, const int* targets, const float* row_max_in, const float* sum_exp,
    const float* target_logit, int N, int V, int valid, int vocab_start, float grad_scale) {
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

// ---- optimizer --------------------------------------------------------------------------------

// One loop per run, element by element: the runs are independent, so their order and the
// CUDA twin's blocks give the same bits. The gradient is storage H widened exactly, the fp32
// step runs on moments loaded from their storage (fp32 or bf16: kernels/math.h
// adamw_step_stored, M16 and V16 compile-time so the fp32 loop stays the plain one), and
// params, when given, receive the master rounded to H (fp32 runs: a separate fp32 copy).
template <class H, bool M16, bool V16>
static void adamw_runs(const AdamRun* runs, int count, const AdamStep& s) {
  for (int r = 0; r < count; ++r) {
    const AdamRun& run = runs[r];
    const H* g = static_cast<const H*>(run.grads);
    H* p = static_cast<H*>(run.params);
    for (int64_t i = 0; i < run.n; ++i) {
      adamw_step_stored(run.master[i], run.m, run.v, i, M16, V16, to_float(g[i]) * s.grad_scale,
                        s.lr, s.beta1, s.beta2, s.eps, run.weight_decay, s.bias1, s.bias2);
      if (p != nullptr) p[i] = round_to<H>(run.master[i]);
    }
  }
}
template <class H>
static void adamw_update_stored(const AdamRun* runs, int count, const AdamStep& s) {
  if (s.exp_avg_bf16 && s.exp_avg_sq_bf16) adamw_runs<H, true, true>(runs, count, s);
  else if (s.exp_avg_bf16) adamw_runs<H, true, false>(runs, count, s);
  else if (s.exp_avg_sq_bf16) adamw_runs<H, false, true>(runs, count, s);
  else adamw_runs<H, false, false>(runs, count, s);
}
template <> void adamw_update<Device::CPU, float>(const AdamRun* runs, int count,
                                                  const AdamStep& s) {
  adamw_update_stored<float>(runs, count, s);
}
template <> void adamw_update<Device::CPU, bf16>(const AdamRun* runs, int count,
                                                 const AdamStep& s) {
  adamw_update_stored<bf16>(runs, count, s);
}
template <> void adamw_update<Device::CPU, fp16>(const AdamRun* runs, int count,
                                                 const AdamStep& s) {
  adamw_update_stored<fp16>(runs, count, s);
}

// In double: a float running sum of 10^8 squares would lose the small ones entirely (its
// 24-bit mantissa), and the norm decides whether gradients are clipped. Four partial sums
// break the add-latency chain; the order differs from the GPU's tree only by rounding.
namespace {
double squares_of(const float* x, size_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += (double)x[i] * x[i];
    s1 += (double)x[i + 1] * x[i + 1];
    s2 += (double)x[i + 2] * x[i + 2];
    s3 += (double)x[i + 3] * x[i + 3];
  }
  for (; i < n; i++) s0 += (double)x[i] * x[i];
  return (s0 + s1) + (s2 + s3);
}
}  // namespace

// The spans' sums added in order.
template <> double sum_squares<Device::CPU, float>(const Span* spans, int count) {
  double total = 0.0;
  for (int i = 0; i < count; ++i)
    total += squares_of(static_cast<const float*>(spans[i].data), (size_t)spans[i].n);
  return total;
}

// ---- 16-bit storage (bf16, fp16) ---------------------------------------------------------------
// Widened on the fly, one sum in double (not the fp32 twin's four partial sums).
template <class H>
static double sum_squares_16(const Span* spans, int count) {
  double s = 0.0;
  for (int k = 0; k < count; ++k) {
    const H* x = static_cast<const H*>(spans[k].data);
    for (int64_t i = 0; i < spans[k].n; ++i) {
      const double f = to_float(x[i]);
      s += f * f;
    }
  }
  return s;
}
template <> double sum_squares<Device::CPU, bf16>(const Span* spans, int count) {
  return sum_squares_16<bf16>(spans, count);
}
template <> double sum_squares<Device::CPU, fp16>(const Span* spans, int count) {
  return sum_squares_16<fp16>(spans, count);
}

}  // namespace kernels
