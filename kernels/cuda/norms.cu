// kernels/cuda/norms.cu: LayerNorm and RMSNorm, forward and backward.
//
// Row statistics and the input gradient: one block per row (token), threads stride over
// the C channels and meet in block_sum. Parameter gradients are a sum over rows, so they
// run as a second, column-wise kernel (the bias_backward pattern: a block owns 32 adjacent
// columns, threadIdx.y walks rows) that recomputes xhat from the saved statistics: no
// scratch buffer, no atomics, a fixed summation order, so deterministic.
//
// Backward formulas (xhat = normalised input, dn = dout * w, means over the C channels):
//   LayerNorm  xhat = (x - mean) rstd   dx = rstd (dn - mean(dn) - xhat mean(dn xhat))
//   RMSNorm    xhat = x rstd            dx = rstd (dn - xhat mean(dn xhat))
//   both       dw = sum_rows dout xhat; LayerNorm db = sum_rows dout
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda_ops.h"

namespace kernels {
namespace cuda {

// ---- forward -------------------------------------------------------------------------------
// mirrors cpu::layernorm_forward: two passes over the row (mean, then the biased variance
// of x - mean), which is stabler than E[x^2] - mean^2.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* x,
                                         const float* w, const float* b, int C, float eps) {
  const size_t row = blockIdx.x;
  const float* xr = x + row * C;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
  const float mu = block_sum(s) / C;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float d = xr[c] - mu;
    ss += d * d;
  }
  const float rs = 1.0f / sqrtf(block_sum(ss) / C + eps);
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[row] = mu;
    if (rstd != nullptr) rstd[row] = rs;
  }
  float* yr = out + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    yr[c] = (xr[c] - mu) * rs * w[c] + (b != nullptr ? b[c] : 0.0f);
}

// mirrors cpu::rmsnorm_forward: rstd = 1/sqrt(mean(x^2) + eps).
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* w,
                                       int C, float eps) {
  const size_t row = blockIdx.x;
  const float* xr = x + row * C;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) ss += xr[c] * xr[c];
  const float rs = 1.0f / sqrtf(block_sum(ss) / C + eps);
  if (threadIdx.x == 0 && rstd != nullptr) rstd[row] = rs;
  float* yr = out + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) yr[c] = xr[c] * rs * w[c];
}

// ---- backward, input gradient --------------------------------------------------------------
// mirrors the dx loop of cpu::layernorm_backward / cpu::rmsnorm_backward (mean == nullptr
// selects RMSNorm: no centring and no mean(dn) term). dx += (accumulated).
__global__ void norm_backward_dx_kernel(float* dx, const float* dout, const float* x,
                                        const float* w, const float* mean, const float* rstd,
                                        int C) {
  const size_t row = blockIdx.x;
  const float* xr = x + row * C;
  const float* gr = dout + row * C;
  const float mu = mean != nullptr ? mean[row] : 0.0f;
  const float rs = rstd[row];
  float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float dn = gr[c] * w[c];
    sum_dn += dn;
    sum_dn_xhat += dn * (xr[c] - mu) * rs;
  }
  const float mean_dn = mean != nullptr ? block_sum(sum_dn) / C : 0.0f;
  const float mean_dn_xhat = block_sum(sum_dn_xhat) / C;
  float* dxr = dx + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float xhat = (xr[c] - mu) * rs;
    dxr[c] += rs * (gr[c] * w[c] - mean_dn - xhat * mean_dn_xhat);
  }
}

// ---- backward, parameter gradients ---------------------------------------------------------
// mirrors the dw/db sums of cpu::layernorm_backward / cpu::rmsnorm_backward:
// dw[c] += sum_n dout[n,c] xhat[n,c], db[c] += sum_n dout[n,c] (db == nullptr: none).
constexpr int kColumnRows = 16;
__global__ void norm_backward_dw_kernel(float* dw, float* db, const float* dout, const float* x,
                                        const float* mean, const float* rstd, int N, int C) {
  __shared__ float partial_w[kColumnRows][32];
  __shared__ float partial_b[kColumnRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float sw = 0.0f, sb = 0.0f;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kColumnRows) {
      size_t i = (size_t)n * C + c;
      float mu = mean != nullptr ? mean[n] : 0.0f;
      sw += dout[i] * (x[i] - mu) * rstd[n];
      sb += dout[i];
    }
  }
  partial_w[threadIdx.y][threadIdx.x] = sw;
  partial_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.0f, tb = 0.0f;
    for (int r = 0; r < kColumnRows; r++) {
      tw += partial_w[r][threadIdx.x];
      tb += partial_b[r][threadIdx.x];
    }
    if (dw != nullptr) dw[c] += tw;
    if (db != nullptr) db[c] += tb;
  }
}

// ---- launchers -----------------------------------------------------------------------------
static void norm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                          const float* w, const float* mean, const float* rstd, int N, int C) {
  if (N == 0 || C == 0) return;
  if (dx != nullptr) {
    norm_backward_dx_kernel<<<N, kThreads, 0, stream()>>>(dx, dout, x, w, mean, rstd, C);
    KERNEL_CHECK();
  }
  if (dw != nullptr || db != nullptr) {
    norm_backward_dw_kernel<<<(C + 31) / 32, dim3(32, kColumnRows), 0, stream()>>>(
        dw, db, dout, x, mean, rstd, N, C);
    KERNEL_CHECK();
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C, float eps) {
  if (N == 0 || C == 0) return;
  layernorm_forward_kernel<<<N, kThreads, 0, stream()>>>(out, mean, rstd, x, w, b, C, eps);
  KERNEL_CHECK();
}

void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C) {
  norm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
}

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C,
                     float eps) {
  if (N == 0 || C == 0) return;
  rmsnorm_forward_kernel<<<N, kThreads, 0, stream()>>>(out, rstd, x, w, C, eps);
  KERNEL_CHECK();
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int N, int C) {
  norm_backward(dx, dw, nullptr, dout, x, w, nullptr, rstd, N, C);
}

}  // namespace cuda
}  // namespace kernels
