// kernels/cpu/loss_optimizer.cpp: AdamW and the squared norm that gradient clipping needs.
// (The loss is kernels/cpu/cross_entropy.cpp.)
//
// defines: adamw_update, sum_squares
#include "kernels/cpu_ops.h"
#include "kernels/math.h"

namespace kernels {
namespace cpu {

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float bias1,
                  float bias2, float grad_scale) {
  for (size_t i = 0; i < n; i++) {
    adamw_step(params[i], m[i], v[i], grads[i] * grad_scale, lr, beta1, beta2, eps,
               weight_decay, bias1, bias2);
  }
}

// In double: a float running sum of 10^8 squares would lose the small ones entirely (its
// 24-bit mantissa), and the norm decides whether gradients are clipped. Four partial sums
// break the add-latency chain; the order differs from the GPU's tree only by rounding.
double sum_squares(const float* x, size_t n) {
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

}  // namespace cpu
}  // namespace kernels
