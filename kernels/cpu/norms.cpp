// kernels/cpu/norms.cpp: LayerNorm (GPT) and RMSNorm (Llama), forward and backward.
//
// One row (token) at a time. Forward saves the per-row statistics (mean, rstd) so backward
// need not recompute them. The backward formulas, with xhat = normalised input and
// g = dout * w (the gradient arriving at xhat):
//
//   LayerNorm  xhat = (x - mean) rstd
//              dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
//   RMSNorm    xhat = x rstd
//              dx = rstd * (g - xhat * mean_c(g * xhat))
//   both       dw += dout * xhat;  LayerNorm also db += dout
//
// (the mean_c terms are the gradient flowing through mean and rstd, which every channel of
// the row depends on). dx, dw and db all accumulate (+=), see kernels/ops/norms.h. 16-bit
// storage: the same loops between a widening and a rounding (kernels/cpu/widen.h); the
// statistics stay fp32.
//
// defines the CPU twins of kernels/ops/norms.h: layernorm_forward, layernorm_backward,
//          rmsnorm_forward, rmsnorm_backward
#include <cmath>

#include "kernels/cpu/widen.h"  // defines: Input, Widened
#include "kernels/ops/norms.h"

namespace kernels {

template <> void layernorm_forward<Device::CPU, float>(float* out, float* mean, float* rstd,
                                                       const float* x, const float* w,
                                                       const float* b, int N, int C, float eps) {
  for (int r = 0; r < N; r++) {
    const float* x_r = x + (size_t)r * C;  // seek to row r
    float* out_r = out + (size_t)r * C;
    float sum = 0.0f;
    for (int c = 0; c < C; c++) sum += x_r[c];
    float mu = sum / C;
    // Two passes (mean, then squared deviations) rather than E[x^2] - mean^2, which loses
    // all precision when |mean| >> std.
    float sq = 0.0f;
    for (int c = 0; c < C; c++) {
      float dev = x_r[c] - mu;
      sq += dev * dev;
    }
    float s = 1.0f / sqrtf(sq / C + eps);
    for (int c = 0; c < C; c++) out_r[c] = (x_r[c] - mu) * s * w[c] + b[c];
    mean[r] = mu;
    rstd[r] = s;
  }
}

template <> void layernorm_backward<Device::CPU, float>(
    float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
    const float* mean, const float* rstd, int N, int C) {
  for (int r = 0; r < N; r++) {
    const float* x_r = x + (size_t)r * C;  // seek to row r of every row-shaped tensor
    const float* dout_r = dout + (size_t)r * C;
    float* dx_r = dx + (size_t)r * C;
    const float mu = mean[r];
    const float s = rstd[r];
    // Pass 1: the two row means the dx formula needs.
    float g_sum = 0.0f, g_xhat_sum = 0.0f;
    for (int c = 0; c < C; c++) {
      float xhat = (x_r[c] - mu) * s;
      float g = dout_r[c] * w[c];
      g_sum += g;
      g_xhat_sum += g * xhat;
    }
    const float g_mean = g_sum / C;
    const float g_xhat_mean = g_xhat_sum / C;
    // Pass 2: accumulate into dx, dw, db.
    for (int c = 0; c < C; c++) {
      float xhat = (x_r[c] - mu) * s;
      float g = dout_r[c] * w[c];
      dx_r[c] += s * (g - g_mean - xhat * g_xhat_mean);
      dw[c] += dout_r[c] * xhat;
      db[c] += dout_r[c];
    }
  }
}

template <> void rmsnorm_forward<Device::CPU, float>(float* out, float* rstd, const float* x,
                                                     const float* w, int N, int C, float eps) {
  for (int r = 0; r < N; r++) {
    const float* x_r = x + (size_t)r * C;  // seek to row r
    float* out_r = out + (size_t)r * C;
    float sq = 0.0f;
    for (int c = 0; c < C; c++) sq += x_r[c] * x_r[c];
    float s = 1.0f / sqrtf(sq / C + eps);
    for (int c = 0; c < C; c++) out_r[c] = x_r[c] * s * w[c];
    rstd[r] = s;
  }
}

template <> void rmsnorm_backward<Device::CPU, float>(float* dx, float* dw, const float* dout,
                                                      const float* x, const float* w,
                                                      const float* rstd, int N, int C) {
  for (int r = 0; r < N; r++) {
    const float* x_r = x + (size_t)r * C;  // seek to row r of every row-shaped tensor
    const float* dout_r = dout + (size_t)r * C;
    float* dx_r = dx + (size_t)r * C;
    const float s = rstd[r];
    float g_xhat_sum = 0.0f;
    for (int c = 0; c < C; c++) g_xhat_sum += dout_r[c] * w[c] * x_r[c] * s;
    const float g_xhat_mean = g_xhat_sum / C;
    for (int c = 0; c < C; c++) {
      float xhat = x_r[c] * s;
      dx_r[c] += s * (dout_r[c] * w[c] - xhat * g_xhat_mean);
      dw[c] += dout_r[c] * xhat;
    }
  }
}

// ---- 16-bit storage (bf16, fp16): widen, the fp32 twin above, round ----------------------------
using cpu::Input;
using cpu::Widened;

template <class H>
static void layernorm_forward_16(H* out, float* mean, float* rstd, const H* x, const H* w,
                                 const H* b, int N, int C, float eps) {
  Input X(x, (size_t)N * C), W(w, C), Bb(b, C);
  Widened o(out, (size_t)N * C);
  layernorm_forward<Device::CPU>(o.data(), mean, rstd, X.data(), W.data(), Bb.data(), N, C, eps);
}
template <> void layernorm_forward<Device::CPU, bf16>(bf16* out, float* mean, float* rstd,
                                                      const bf16* x, const bf16* w, const bf16* b,
                                                      int N, int C, float eps) {
  layernorm_forward_16(out, mean, rstd, x, w, b, N, C, eps);
}
template <> void layernorm_forward<Device::CPU, fp16>(fp16* out, float* mean, float* rstd,
                                                      const fp16* x, const fp16* w, const fp16* b,
                                                      int N, int C, float eps) {
  layernorm_forward_16(out, mean, rstd, x, w, b, N, C, eps);
}
template <class H>
static void layernorm_backward_16(H* dx, H* dw, H* db, const H* dout, const H* x, const H* w,
                                  const float* mean, const float* rstd, int N, int C) {
  Widened DX(dx, (size_t)N * C), DW(dw, C), DB(db, C);
  Input G(dout, (size_t)N * C), X(x, (size_t)N * C), W(w, C);
  layernorm_backward<Device::CPU>(DX.data(), DW.data(), DB.data(), G.data(), X.data(), W.data(),
                                  mean, rstd, N, C);
}
template <> void layernorm_backward<Device::CPU, bf16>(bf16* dx, bf16* dw, bf16* db,
                                                       const bf16* dout, const bf16* x,
                                                       const bf16* w, const float* mean,
                                                       const float* rstd, int N, int C) {
  layernorm_backward_16(dx, dw, db, dout, x, w, mean, rstd, N, C);
}
template <> void layernorm_backward<Device::CPU, fp16>(fp16* dx, fp16* dw, fp16* db,
                                                       const fp16* dout, const fp16* x,
                                                       const fp16* w, const float* mean,
                                                       const float* rstd, int N, int C) {
  layernorm_backward_16(dx, dw, db, dout, x, w, mean, rstd, N, C);
}
template <class H>
static void rmsnorm_forward_16(H* out, float* rstd, const H* x, const H* w, int N, int C,
                               float eps) {
  Input X(x, (size_t)N * C), W(w, C);
  Widened o(out, (size_t)N * C);
  rmsnorm_forward<Device::CPU>(o.data(), rstd, X.data(), W.data(), N, C, eps);
}
template <> void rmsnorm_forward<Device::CPU, bf16>(bf16* out, float* rstd, const bf16* x,
                                                    const bf16* w, int N, int C, float eps) {
  rmsnorm_forward_16(out, rstd, x, w, N, C, eps);
}
template <> void rmsnorm_forward<Device::CPU, fp16>(fp16* out, float* rstd, const fp16* x,
                                                    const fp16* w, int N, int C, float eps) {
  rmsnorm_forward_16(out, rstd, x, w, N, C, eps);
}
template <class H>
static void rmsnorm_backward_16(H* dx, H* dw, const H* dout, const H* x, const H* w,
                                const float* rstd, int N, int C) {
  Widened DX(dx, (size_t)N * C), DW(dw, C);
  Input G(dout, (size_t)N * C), X(x, (size_t)N * C), W(w, C);
  rmsnorm_backward<Device::CPU>(DX.data(), DW.data(), G.data(), X.data(), W.data(), rstd, N, C);
}
template <> void rmsnorm_backward<Device::CPU, bf16>(bf16* dx, bf16* dw, const bf16* dout,
                                                     const bf16* x, const bf16* w,
                                                     const float* rstd, int N, int C) {
  rmsnorm_backward_16(dx, dw, dout, x, w, rstd, N, C);
}
template <> void rmsnorm_backward<Device::CPU, fp16>(fp16* dx, fp16* dw, const fp16* dout,
                                                     const fp16* x, const fp16* w,
                                                     const float* rstd, int N, int C) {
  rmsnorm_backward_16(dx, dw, dout, x, w, rstd, N, C);
}

}  // namespace kernels
