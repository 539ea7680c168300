// kernels/cuda/norms.cu: LayerNorm and RMSNorm, forward and backward: the CUDA twins of
// kernels/ops/norms.h, mirroring kernels/cpu/norms.cpp.
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
//
// Kernels are templated on the storage type T of activations, weights and gradients (float
// or bf16): loads widen with to_float, statistics, sums and the arithmetic stay fp32 (mean
// and rstd are float in both cases), outputs are rounded by store. "+=" outputs in bf16 are
// rounded once per call, as the CPU twin's "widen, run fp32, round" does.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/math.h"
#include "kernels/ops/norms.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), cublas(), kThreads, grid_1d, the reductions

// ---- forward -------------------------------------------------------------------------------
// mirrors layernorm_forward<Device::CPU>: two passes over the row (mean, then the biased variance
// of x - mean), which is stabler than E[x^2] - mean^2.
template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* x, const T* w,
                                         const T* b, int C, float eps) {
  const size_t row = blockIdx.x;
  const T* xr = x + row * C;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += to_float(xr[c]);
  const float mu = block_sum(s) / C;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float d = to_float(xr[c]) - mu;
    ss += d * d;
  }
  const float rs = 1.0f / sqrtf(block_sum(ss) / C + eps);
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[row] = mu;
    if (rstd != nullptr) rstd[row] = rs;
  }
  T* yr = out + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float shift = b != nullptr ? to_float(b[c]) : 0.0f;
    store(yr[c], (to_float(xr[c]) - mu) * rs * to_float(w[c]) + shift);
  }
}

// mirrors rmsnorm_forward<Device::CPU>: rstd = 1/sqrt(mean(x^2) + eps).
template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* x, const T* w, int C,
                                       float eps) {
  const size_t row = blockIdx.x;
  const T* xr = x + row * C;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) ss += to_float(xr[c]) * to_float(xr[c]);
  const float rs = 1.0f / sqrtf(block_sum(ss) / C + eps);
  if (threadIdx.x == 0 && rstd != nullptr) rstd[row] = rs;
  T* yr = out + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    store(yr[c], to_float(xr[c]) * rs * to_float(w[c]));
}

// ---- backward, input gradient --------------------------------------------------------------
// mirrors the dx loop of layernorm_backward<Device::CPU> / rmsnorm_backward<Device::CPU> (mean ==
// nullptr selects RMSNorm: no centring and no mean(dn) term). dx += (accumulated).
template <typename T>
__global__ void norm_backward_dx_kernel(T* dx, const T* dout, const T* x, const T* w,
                                        const float* mean, const float* rstd, int C) {
  const size_t row = blockIdx.x;
  const T* xr = x + row * C;
  const T* gr = dout + row * C;
  const float mu = mean != nullptr ? mean[row] : 0.0f;
  const float rs = rstd[row];
  float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float dn = to_float(gr[c]) * to_float(w[c]);
    sum_dn += dn;
    sum_dn_xhat += dn * (to_float(xr[c]) - mu) * rs;
  }
  const float mean_dn = mean != nullptr ? block_sum(sum_dn) / C : 0.0f;
  const float mean_dn_xhat = block_sum(sum_dn_xhat) / C;
  T* dxr = dx + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float xhat = (to_float(xr[c]) - mu) * rs;
    float g = rs * (to_float(gr[c]) * to_float(w[c]) - mean_dn - xhat * mean_dn_xhat);
    store(dxr[c], to_float(dxr[c]) + g);
  }
}

// ---- backward, parameter gradients ---------------------------------------------------------
// mirrors the dw/db sums of layernorm_backward<Device::CPU> / rmsnorm_backward<Device::CPU>:
// dw[c] += sum_n dout[n,c] xhat[n,c], db[c] += sum_n dout[n,c] (db == nullptr: none).
constexpr int kColumnRows = 16;
template <typename T>
__global__ void norm_backward_dw_kernel(T* dw, T* db, const T* dout, const T* x, const float* mean,
                                        const float* rstd, int N, int C) {
  __shared__ float partial_w[kColumnRows][32];
  __shared__ float partial_b[kColumnRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float sw = 0.0f, sb = 0.0f;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kColumnRows) {
      size_t i = (size_t)n * C + c;
      float mu = mean != nullptr ? mean[n] : 0.0f;
      float g = to_float(dout[i]);
      sw += g * (to_float(x[i]) - mu) * rstd[n];
      sb += g;
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
    if (dw != nullptr) store(dw[c], to_float(dw[c]) + tw);
    if (db != nullptr) store(db[c], to_float(db[c]) + tb);
  }
}

// ---- launchers -----------------------------------------------------------------------------
// One template per op; the twins below are one-liners over its float and bf16 instantiations.
template <typename T>
static void norm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w,
                          const float* mean, const float* rstd, int N, int C) {
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

template <typename T>
static void layernorm_forward_launch(T* out, float* mean, float* rstd, const T* x, const T* w,
                                     const T* b, int N, int C, float eps) {
  if (N == 0 || C == 0) return;
  layernorm_forward_kernel<<<N, kThreads, 0, stream()>>>(out, mean, rstd, x, w, b, C, eps);
  KERNEL_CHECK();
}

template <typename T>
static void rmsnorm_forward_launch(T* out, float* rstd, const T* x, const T* w, int N, int C,
                                   float eps) {
  if (N == 0 || C == 0) return;
  rmsnorm_forward_kernel<<<N, kThreads, 0, stream()>>>(out, rstd, x, w, C, eps);
  KERNEL_CHECK();
}

template <> void layernorm_forward<Device::CUDA, float>(float* out, float* mean, float* rstd,
                                                        const float* x, const float* w,
                                                        const float* b, int N, int C, float eps) {
  layernorm_forward_launch(out, mean, rstd, x, w, b, N, C, eps);
}
template <> void layernorm_forward<Device::CUDA, bf16>(bf16* out, float* mean, float* rstd,
                                                       const bf16* x, const bf16* w, const bf16* b,
                                                       int N, int C, float eps) {
  layernorm_forward_launch(out, mean, rstd, x, w, b, N, C, eps);
}
template <> void layernorm_forward<Device::CUDA, fp16>(fp16* out, float* mean, float* rstd,
                                                       const fp16* x, const fp16* w, const fp16* b,
                                                       int N, int C, float eps) {
  layernorm_forward_launch(out, mean, rstd, x, w, b, N, C, eps);
}

template <> void layernorm_backward<Device::CUDA, float>(
    float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
    const float* mean, const float* rstd, int N, int C) {
  norm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
}
template <> void layernorm_backward<Device::CUDA, bf16>(
    bf16* dx, bf16* dw, bf16* db, const bf16* dout, const bf16* x, const bf16* w, const float* mean,
    const float* rstd, int N, int C) {
  norm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
}
template <> void layernorm_backward<Device::CUDA, fp16>(
    fp16* dx, fp16* dw, fp16* db, const fp16* dout, const fp16* x, const fp16* w, const float* mean,
    const float* rstd, int N, int C) {
  norm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
}

template <> void rmsnorm_forward<Device::CUDA, float>(float* out, float* rstd, const float* x,
                                                      const float* w, int N, int C, float eps) {
  rmsnorm_forward_launch(out, rstd, x, w, N, C, eps);
}
template <> void rmsnorm_forward<Device::CUDA, bf16>(bf16* out, float* rstd, const bf16* x,
                                                     const bf16* w, int N, int C, float eps) {
  rmsnorm_forward_launch(out, rstd, x, w, N, C, eps);
}
template <> void rmsnorm_forward<Device::CUDA, fp16>(fp16* out, float* rstd, const fp16* x,
                                                     const fp16* w, int N, int C, float eps) {
  rmsnorm_forward_launch(out, rstd, x, w, N, C, eps);
}

template <> void rmsnorm_backward<Device::CUDA, float>(float* dx, float* dw, const float* dout,
                                                       const float* x, const float* w,
                                                       const float* rstd, int N, int C) {
  norm_backward(dx, dw, (float*)nullptr, dout, x, w, nullptr, rstd, N, C);
}
template <> void rmsnorm_backward<Device::CUDA, bf16>(bf16* dx, bf16* dw, const bf16* dout,
                                                      const bf16* x, const bf16* w,
                                                      const float* rstd, int N, int C) {
  norm_backward(dx, dw, (bf16*)nullptr, dout, x, w, nullptr, rstd, N, C);
}
template <> void rmsnorm_backward<Device::CUDA, fp16>(fp16* dx, fp16* dw, const fp16* dout,
                                                      const fp16* x, const fp16* w,
                                                      const float* rstd, int N, int C) {
  norm_backward(dx, dw, (fp16*)nullptr, dout, x, w, nullptr, rstd, N, C);
}

}  // namespace kernels
