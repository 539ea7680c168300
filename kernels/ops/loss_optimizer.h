// kernels/ops/loss_optimizer.h: the loss (softmax cross-entropy fused with its backward, in
// three passes) and the optimizer (AdamW, and the sum of squares behind gradient clipping).
// Twins: kernels/cpu/loss_optimizer.cpp, kernels/cuda/loss_optimizer.cu.
//
// The loss is fp32 whatever the storage: a bf16 run's logits come from the bf16 x bf16 ->
// fp32 GEMM (memory_gemm.h). The optimizer steps fp32 master weights with fp32 moments; T is
// the storage of the gradients (and of the model's copy of the weights).
//
// defines: cross_entropy_row_max, cross_entropy_sum_exp, cross_entropy_finish, AdamRun,
//          AdamStep, adamw_update, Span, kSquareSpansPerLaunch, sum_squares_launches,
//          sum_squares
#pragma once
#include "kernels/dispatch.h"

namespace kernels {

// ---- loss (fp32) ----------------------------------------------------------------------------
// Three passes so that the vocabulary may be split over ranks (parallel/tensor_parallel.cpp
// reduces between them; one rank calls them back to back). logits (N, V) hold this rank's
// columns, global ids [vocab_start, vocab_start + V); only the first `valid` columns are real
// (the rest is vocabulary padding: ignored, gradient 0). Rows whose target < 0 are ignored
// (loss 0, gradient 0).
// 1. row_max[i] = max over the valid columns of logits_i.
template <Device Dev>
void cross_entropy_row_max(float* row_max, const float* logits, int N, int V, int valid);
template <class = void>
void cross_entropy_row_max(Device d, float* row_max, const float* logits, int N, int V,
                           int valid) {
  count_kernel(4.0 * N * valid + 4.0 * N);
  ON_DEVICE(cross_entropy_row_max)(row_max, logits, N, V, valid);
}

// 2. sum_exp[i] = sum over valid j of exp(logits_ij - row_max[i]); target_logit[i] =
//    logits_i[target_i - vocab_start] when this rank holds the target, else 0.
template <Device Dev>
void cross_entropy_sum_exp(float* sum_exp, float* target_logit, const float* logits,
                           const float* row_max, const int* targets, int N, int V, int valid,
                           int vocab_start);
template <class = void>
void cross_entropy_sum_exp(Device d, float* sum_exp, float* target_logit, const float* logits,
                           const float* row_max, const int* targets, int N, int V, int valid,
                           int vocab_start) {
  count_kernel(4.0 * N * valid + 16.0 * N);
  ON_DEVICE(cross_entropy_sum_exp)(sum_exp, target_logit, logits, row_max, targets, N, V, valid,
                                   vocab_start);
}

// 3. losses[i] = log(sum_exp[i]) + row_max[i] - target_logit[i]; logits become
//    dlogits_ij = (exp(logits_ij - row_max[i]) / sum_exp[i] - [j is the target]) grad_scale.
template <Device Dev>
void cross_entropy_finish(float* losses, float* logits, const int* targets, const float* row_max,
                          const float* sum_exp, const float* target_logit, int N, int V,
                          int valid, int vocab_start, float grad_scale);
template <class = void>
void cross_entropy_finish(Device d, float* losses, float* logits, const int* targets,
                          const float* row_max, const float* sum_exp, const float* target_logit,
                          int N, int V, int valid, int vocab_start, float grad_scale) {
  count_kernel(4.0 * N * valid + 4.0 * N * V + 20.0 * N);
  ON_DEVICE(cross_entropy_finish)(losses, logits, targets, row_max, sum_exp, target_logit, N, V,
                                  valid, vocab_start, grad_scale);
}

// ---- optimizer ------------------------------------------------------------------------------
// AdamW over a list of runs in one launch, as apex's and PyTorch's fused multi-tensor AdamW: a
// run is a contiguous slice of one tensor's elements with its gradient, Adam's moments and the
// tensor's weight decay (decay is per tensor: 2-D weights only), so a step's whole update is
// one launch instead of one per tensor (GPT-2 124M: 148). Each element (kernels/math.h
// adamw_step): the fp32 master weight steps from the gradient widened and multiplied by
// step.grad_scale (the clipping coefficient); params, the model's copy, then receives
// round(master) in the same pass, or is null when fp32 weights are their own master. T is the
// storage of params and grads (float or bf16), one per call: a step's runs share it.
struct AdamRun {
  float* master = nullptr;      // the fp32 weights updated (fp32 runs: the parameters)
  void* params = nullptr;       // T: written round(master); null when master is the parameter
  const void* grads = nullptr;  // T
  void* m = nullptr;            // Adam's first moment: float, or bf16 (AdamStep::exp_avg_bf16)
  void* v = nullptr;            // and second: float, or bf16 (AdamStep::exp_avg_sq_bf16)
  int64_t n = 0;
  float weight_decay = 0;
};
struct AdamStep {
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0;
  float bias1 = 1, bias2 = 1;  // 1 - beta^t, t the updates made
  float grad_scale = 1;        // the clipping coefficient
  // the moments' storage (--exp-avg-dtype, --exp-avg-sq-dtype bf16): kernels/math.h
  // adamw_step_stored; false: fp32
  bool exp_avg_bf16 = false, exp_avg_sq_bf16 = false;
};
template <Device Dev, class T> void adamw_update(const AdamRun* runs, int count, const AdamStep& step);
template <class T>
void adamw_update(Device d, const AdamRun* runs, int count, const AdamStep& step) {
  double n = 0;
  for (int r = 0; r < count; ++r) n += (double)runs[r].n;
  // one launch for all the runs (none when they are empty): 28 bytes an element with fp32
  // moments, 4 fewer for each moment in bf16 (read and written at 2 bytes, not 4)
  count_kernel((28.0 - 4.0 * step.exp_avg_bf16 - 4.0 * step.exp_avg_sq_bf16) * n);
  ON_DEVICE(adamw_update, T)(runs, count, step);
}

// The gradient norm's sum of squares over a list of spans (pieces of one storage T: a rank's
// owned segments less the ranges another rank counts), accumulated in double and returned to
// the host (blocking): one launch and one copy to the host for up to kSquareSpansPerLaunch
// spans (the spans ride in the kernel's parameters), where each piece was a launch and a
// copy. The plan counts the same launches (plan/kernel_traffic.h).
struct Span {
  const void* data = nullptr;  // T
  int64_t n = 0;
};
constexpr int kSquareSpansPerLaunch = 128;
inline int sum_squares_launches(int spans) {
  return (spans + kSquareSpansPerLaunch - 1) / kSquareSpansPerLaunch;
}
template <Device Dev, class T> double sum_squares(const Span* spans, int count);
template <class T> double sum_squares(Device d, const Span* spans, int count) {
  double n = 0;
  int nonempty = 0;  // an empty span takes no place in a launch
  for (int i = 0; i < count; ++i) n += (double)spans[i].n, nonempty += spans[i].n > 0;
  count_kernel(n * sizeof(T), sum_squares_launches(nonempty));
  return ON_DEVICE(sum_squares, T)(spans, count);
}

}  // namespace kernels
