// kernels/cpu/elementwise.cpp: the per-element and per-row ops with no reduction across a
// row: vector arithmetic, bias, GeLU, SwiGLU and dropout.
//
// Every loop walks memory contiguously with the channel (or element) index innermost, so
// the compiler can vectorise it; the per-element math is the kernels/math.h function the
// CUDA kernel calls too. GeLU and SiLU go through math.h's exp_simd and normal_cdf rather
// than libm's expf and erff, which do not vectorise (GeLU was the largest non-GEMM cost of a
// GPT step on a CPU).
// Parameter gradients accumulate (+=), activation gradients are written (=), as
// kernels/ops/elementwise.h specifies per op. 16-bit storage (bf16, fp16): the loops below
// between a widening and a rounding (kernels/cpu/widen.h); add, accumulate and convert are that
// loop itself.
//
// defines the CPU twins of kernels/ops/elementwise.h: add, accumulate, scale, add_bias,
//          bias_backward, convert, gelu_forward, gelu_backward, swiglu_forward,
//          swiglu_backward, dropout_forward, dropout_backward
#include "kernels/cpu/widen.h"  // defines: Input, Widened
#include "kernels/math.h"
#include "kernels/ops/elementwise.h"

namespace kernels {

template <> void add<Device::CPU, float>(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

template <> void accumulate<Device::CPU, float>(float* out, const float* a, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] += a[i];
}

template <> void scale<Device::CPU>(float* x, float s, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

template <> void add_bias<Device::CPU, float>(float* y, const float* bias, int N, int C) {
  for (int r = 0; r < N; r++) {
    float* y_r = y + (size_t)r * C;  // seek to row r
    for (int c = 0; c < C; c++) y_r[c] += bias[c];
  }
}

// y = x + bias broadcast over rows, so dL/dbias_c = sum_r dy[r][c]. Rows outermost keeps the
// inner loop contiguous; dbias stays in cache.
template <> void bias_backward<Device::CPU, float>(float* dbias, const float* dy, int N, int C) {
  for (int r = 0; r < N; r++) {
    const float* dy_r = dy + (size_t)r * C;  // seek to row r
    for (int c = 0; c < C; c++) dbias[c] += dy_r[c];
  }
}

// ---- activations --------------------------------------------------------------------------

template <> void gelu_forward<Device::CPU, float>(float* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = gelu(in[i]);
}

template <> void gelu_backward<Device::CPU, float>(float* din, const float* dout, const float* in,
                                                   size_t n) {
  for (size_t i = 0; i < n; i++) din[i] = dout[i] * gelu_grad(in[i]);
}

template <> void swiglu_forward<Device::CPU, float>(float* out, const float* in, int N, int F) {
  for (int r = 0; r < N; r++) {
    const float* gate = in + (size_t)r * 2 * F;  // seek to row r: [gate (F) | up (F)]
    const float* up = gate + F;
    float* out_r = out + (size_t)r * F;
    for (int c = 0; c < F; c++) out_r[c] = gate[c] * sigmoid(gate[c]) * up[c];
  }
}

// out = silu(g) u:  dg = dout u silu'(g),  du = dout silu(g);
// silu(g) = g s and silu'(g) = s + g s (1 - s), s = sigmoid(g).
template <> void swiglu_backward<Device::CPU, float>(float* din, const float* dout, const float* in,
                                                     int N, int F) {
  for (int r = 0; r < N; r++) {
    const float* gate = in + (size_t)r * 2 * F;  // seek to row r of the input and its grad
    const float* up = gate + F;
    float* dgate = din + (size_t)r * 2 * F;
    float* dup = dgate + F;
    const float* dout_r = dout + (size_t)r * F;
    for (int c = 0; c < F; c++) {
      const float g = gate[c], s = sigmoid(g);
      dgate[c] = dout_r[c] * up[c] * (s + g * s * (1.0f - s));
      dup[c] = dout_r[c] * (g * s);
    }
  }
}

// ---- dropout ------------------------------------------------------------------------------
// Inverted dropout: kept elements are scaled by 1/(1-p) at training time so that
// E[out] = in and inference needs no rescaling. The mask is a pure function of
// (seed, stream, index) (kernels/math.h), so a recompute redraws it exactly. The index of
// element i is pos.element(i, width): i itself, or on a context-parallel rank the element's
// index in the single-rank tensor, so that both runs drop the same elements.

template <> void dropout_forward<Device::CPU, float>(
    float* out, uint8_t* mask, const float* in, size_t n, float p, uint64_t seed, uint64_t stream,
    const TokenPositions& pos, int width) {
  if (p == 0.0f) {
    for (size_t i = 0; i < n; i++) {
      out[i] = in[i];
      mask[i] = 1;
    }
    return;
  }
  const float keep_scale = 1.0f / (1.0f - p);
  for (size_t i = 0; i < n; i++) {
    bool keep = dropout_keep(seed, stream, pos.element(i, width), p);
    mask[i] = keep ? 1 : 0;
    out[i] = keep ? in[i] * keep_scale : 0.0f;
  }
}

template <> void dropout_backward<Device::CPU, float>(float* din, const float* dout,
                                                      const uint8_t* mask, size_t n, float p) {
  const float keep_scale = p == 0.0f ? 1.0f : 1.0f / (1.0f - p);
  for (size_t i = 0; i < n; i++) din[i] = mask[i] ? dout[i] * keep_scale : 0.0f;
}

// ---- 16-bit storage (bf16, fp16): widen, the fp32 twin above, round ----------------------------
using cpu::Input;
using cpu::Widened;

template <class H>
static void add_16(H* out, const H* a, const H* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = round_to<H>(to_float(a[i]) + to_float(b[i]));
}
template <> void add<Device::CPU, bf16>(bf16* out, const bf16* a, const bf16* b, size_t n) {
  add_16(out, a, b, n);
}
template <> void add<Device::CPU, fp16>(fp16* out, const fp16* a, const fp16* b, size_t n) {
  add_16(out, a, b, n);
}
template <class H>
static void accumulate_16(H* out, const H* a, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = round_to<H>(to_float(out[i]) + to_float(a[i]));
}
template <> void accumulate<Device::CPU, bf16>(bf16* out, const bf16* a, size_t n) {
  accumulate_16(out, a, n);
}
template <> void accumulate<Device::CPU, fp16>(fp16* out, const fp16* a, size_t n) {
  accumulate_16(out, a, n);
}
template <class H>
static void add_bias_16(H* y, const H* bias, int N, int C) {
  Widened Y(y, (size_t)N * C);
  Input b(bias, C);
  add_bias<Device::CPU>(Y.data(), b.data(), N, C);
}
template <> void add_bias<Device::CPU, bf16>(bf16* y, const bf16* bias, int N, int C) {
  add_bias_16(y, bias, N, C);
}
template <> void add_bias<Device::CPU, fp16>(fp16* y, const fp16* bias, int N, int C) {
  add_bias_16(y, bias, N, C);
}
template <class H>
static void bias_backward_16(H* dbias, const H* dy, int N, int C) {
  Widened db(dbias, C);
  Input g(dy, (size_t)N * C);
  bias_backward<Device::CPU>(db.data(), g.data(), N, C);
}
template <> void bias_backward<Device::CPU, bf16>(bf16* dbias, const bf16* dy, int N, int C) {
  bias_backward_16(dbias, dy, N, C);
}
template <> void bias_backward<Device::CPU, fp16>(fp16* dbias, const fp16* dy, int N, int C) {
  bias_backward_16(dbias, dy, N, C);
}

template <> void convert<Device::CPU, bf16, float>(bf16* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}
template <> void convert<Device::CPU, fp16, float>(fp16* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = to_fp16(in[i]);
}
template <> void convert<Device::CPU, float, bf16>(float* out, const bf16* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}
template <> void convert<Device::CPU, float, fp16>(float* out, const fp16* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

template <class H>
static void gelu_forward_16(H* out, const H* in, size_t n) {
  Input I(in, n);
  Widened O(out, n);
  gelu_forward<Device::CPU>(O.data(), I.data(), n);
}
template <> void gelu_forward<Device::CPU, bf16>(bf16* out, const bf16* in, size_t n) {
  gelu_forward_16(out, in, n);
}
template <> void gelu_forward<Device::CPU, fp16>(fp16* out, const fp16* in, size_t n) {
  gelu_forward_16(out, in, n);
}
template <class H>
static void gelu_backward_16(H* din, const H* dout, const H* in, size_t n) {
  Input G(dout, n), I(in, n);
  Widened D(din, n);
  gelu_backward<Device::CPU>(D.data(), G.data(), I.data(), n);
}
template <> void gelu_backward<Device::CPU, bf16>(bf16* din, const bf16* dout, const bf16* in,
                                                  size_t n) {
  gelu_backward_16(din, dout, in, n);
}
template <> void gelu_backward<Device::CPU, fp16>(fp16* din, const fp16* dout, const fp16* in,
                                                  size_t n) {
  gelu_backward_16(din, dout, in, n);
}
template <class H>
static void swiglu_forward_16(H* out, const H* in, int N, int F) {
  Input I(in, (size_t)N * 2 * F);
  Widened O(out, (size_t)N * F);
  swiglu_forward<Device::CPU>(O.data(), I.data(), N, F);
}
template <> void swiglu_forward<Device::CPU, bf16>(bf16* out, const bf16* in, int N, int F) {
  swiglu_forward_16(out, in, N, F);
}
template <> void swiglu_forward<Device::CPU, fp16>(fp16* out, const fp16* in, int N, int F) {
  swiglu_forward_16(out, in, N, F);
}
template <class H>
static void swiglu_backward_16(H* din, const H* dout, const H* in, int N, int F) {
  Input G(dout, (size_t)N * F), I(in, (size_t)N * 2 * F);
  Widened D(din, (size_t)N * 2 * F);
  swiglu_backward<Device::CPU>(D.data(), G.data(), I.data(), N, F);
}
template <> void swiglu_backward<Device::CPU, bf16>(bf16* din, const bf16* dout, const bf16* in,
                                                    int N, int F) {
  swiglu_backward_16(din, dout, in, N, F);
}
template <> void swiglu_backward<Device::CPU, fp16>(fp16* din, const fp16* dout, const fp16* in,
                                                    int N, int F) {
  swiglu_backward_16(din, dout, in, N, F);
}

template <class H>
static void dropout_forward_16(H* out, uint8_t* mask, const H* in, size_t n, float p, uint64_t seed,
                               uint64_t stream, const TokenPositions& pos, int width) {
  Input I(in, n);
  Widened O(out, n);
  dropout_forward<Device::CPU>(O.data(), mask, I.data(), n, p, seed, stream, pos, width);
}
template <> void dropout_forward<Device::CPU, bf16>(bf16* out, uint8_t* mask, const bf16* in,
                                                    size_t n, float p, uint64_t seed,
                                                    uint64_t stream, const TokenPositions& pos,
                                                    int width) {
  dropout_forward_16(out, mask, in, n, p, seed, stream, pos, width);
}
template <> void dropout_forward<Device::CPU, fp16>(fp16* out, uint8_t* mask, const fp16* in,
                                                    size_t n, float p, uint64_t seed,
                                                    uint64_t stream, const TokenPositions& pos,
                                                    int width) {
  dropout_forward_16(out, mask, in, n, p, seed, stream, pos, width);
}
template <class H>
static void dropout_backward_16(H* din, const H* dout, const uint8_t* mask, size_t n, float p) {
  Input G(dout, n);
  Widened D(din, n);
  dropout_backward<Device::CPU>(D.data(), G.data(), mask, n, p);
}
template <> void dropout_backward<Device::CPU, bf16>(bf16* din, const bf16* dout,
                                                     const uint8_t* mask, size_t n, float p) {
  dropout_backward_16(din, dout, mask, n, p);
}
template <> void dropout_backward<Device::CPU, fp16>(fp16* din, const fp16* dout,
                                                     const uint8_t* mask, size_t n, float p) {
  dropout_backward_16(din, dout, mask, n, p);
}

}  // namespace kernels
