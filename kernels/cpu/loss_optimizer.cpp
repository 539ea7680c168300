// kernels/cpu/loss_optimizer.cpp: the fused softmax cross-entropy, AdamW and the squared norm
// that gradient clipping needs.
//
// Cross-entropy is fused with its backward because the (N, V) logits are the largest tensor
// of a step: the loss needs only logsumexp and one logit per row, and the gradient
// softmax - onehot can overwrite the logits in place, so no second (N, V) buffer exists.
//
// defines: cross_entropy_forward_backward, adamw_update, sum_squares
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/simd_math.h"  // defines: exp_simd, row_max, row_sum
#include "kernels/cpu_ops.h"
#include "kernels/math.h"

namespace kernels {
namespace cpu {

// Per row i with target t:
//   loss_i = logsumexp(z_i) - z_it,  logsumexp(z) = m + log sum_j e^(z_j - m), m = max_j z_j
//   dz_ij  = grad_scale * (softmax(z_i)_j - [j == t])
void cross_entropy_forward_backward(float* losses, float* logits, const int* targets, int N,
                                    int V, float grad_scale) {
  for (int i = 0; i < N; i++) {
    float* z = logits + (size_t)i * V;  // seek to row i
    const int t = targets[i];
    if (t < 0) {  // ignored position (padding): no loss, no gradient
      losses[i] = 0.0f;
      for (int j = 0; j < V; j++) z[j] = 0.0f;
      continue;
    }
    if (t >= V) {
      throw std::out_of_range("cross_entropy: target " + std::to_string(t) + " >= vocab " +
                              std::to_string(V));
    }
    // One tight loop per pass over the row, so that each vectorises (kernels/cpu/row_math.h).
    const float m = row_max(z, V);
    const float z_t = z[t];
    // The exponentials are written over the logits: the gradient is a rescaling of them.
    for (int j = 0; j < V; j++) z[j] = exp_simd(z[j] - m);
    const float sum = row_sum(z, V);
    losses[i] = m + logf(sum) - z_t;
    const float norm = grad_scale / sum;
    for (int j = 0; j < V; j++) z[j] *= norm;
    z[t] -= grad_scale;
  }
}

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
