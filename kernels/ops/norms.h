// kernels/ops/norms.h: LayerNorm (GPT) and RMSNorm (Llama), forward and backward.
// Twins: kernels/cpu/norms.cpp (the backward formulas), kernels/cuda/norms.cu.
//
// x, out, w, b and their gradients are (N, C) rows and (C) vectors of the storage type T; the
// per-row statistics (mean, rstd) are fp32 whatever T is. The backward ops accumulate into
// dx, dw and db (+=): the residual stream's gradient arrives in dx, and microbatches add into
// one parameter gradient.
//
// defines: layernorm_forward, layernorm_backward, rmsnorm_forward, rmsnorm_backward
#pragma once
#include "kernels/dispatch.h"

namespace kernels {

// LayerNorm: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps) (biased variance).
// Saves mean(N) and rstd(N) for backward.
template <Device Dev, class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b,
                       int N, int C, float eps);
template <class T>
void layernorm_forward(Device d, T* out, float* mean, float* rstd, const T* x, const T* w,
                       const T* b, int N, int C, float eps) {
  count_kernel((2.0 * N * C + 2.0 * C) * sizeof(T) + 8.0 * N);
  ON_DEVICE(layernorm_forward, T)(out, mean, rstd, x, w, b, N, C, eps);
}

// dx += ..., dw += ..., db += ...   (2 CUDA launches: the dx kernel, the dw/db kernel)
template <Device Dev, class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w,
                        const float* mean, const float* rstd, int N, int C);
template <class T>
void layernorm_backward(Device d, T* dx, T* dw, T* db, const T* dout, const T* x, const T* w,
                        const float* mean, const float* rstd, int N, int C) {
  count_kernel((4.0 * N * C + 5.0 * C) * sizeof(T) + 8.0 * N, 2);
  ON_DEVICE(layernorm_backward, T)(dx, dw, db, dout, x, w, mean, rstd, N, C);
}

// RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). Saves rstd(N).
template <Device Dev, class T>
void rmsnorm_forward(T* out, float* rstd, const T* x, const T* w, int N, int C, float eps);
template <class T>
void rmsnorm_forward(Device d, T* out, float* rstd, const T* x, const T* w, int N, int C,
                     float eps) {
  count_kernel((2.0 * N * C + C) * sizeof(T) + 4.0 * N);
  ON_DEVICE(rmsnorm_forward, T)(out, rstd, x, w, N, C, eps);
}

// dx += ..., dw += ...   (2 CUDA launches)
template <Device Dev, class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const float* rstd,
                      int N, int C);
template <class T>
void rmsnorm_backward(Device d, T* dx, T* dw, const T* dout, const T* x, const T* w,
                      const float* rstd, int N, int C) {
  count_kernel((4.0 * N * C + 3.0 * C) * sizeof(T) + 4.0 * N, 2);
  ON_DEVICE(rmsnorm_backward, T)(dx, dw, dout, x, w, rstd, N, C);
}

}  // namespace kernels
