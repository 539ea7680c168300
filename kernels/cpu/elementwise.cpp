// kernels/cpu/elementwise.cpp: the per-element and per-row ops with no reduction across a
// row: vector arithmetic, bias, GeLU, SwiGLU and dropout.
//
// Every loop walks memory contiguously with the channel (or element) index innermost, so
// the compiler can vectorise it; the per-element math is the kernels/math.h function the
// CUDA kernel calls too. GeLU and SiLU go through math.h's exp_simd and normal_cdf rather
// than libm's expf and erff, which do not vectorise (GeLU was the largest non-GEMM cost of a
// GPT step on a CPU).
// Parameter gradients accumulate (+=), activation gradients are written (=), as
// kernels/ops.h specifies per op.
//
// defines: add, accumulate, scale, add_bias, bias_backward, gelu_forward, gelu_backward,
//          swiglu_forward, swiglu_backward, dropout_forward, dropout_backward
#include "kernels/cpu_ops.h"
#include "kernels/math.h"

namespace kernels {
namespace cpu {

void add(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void accumulate(float* out, const float* a, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] += a[i];
}

void scale(float* x, float s, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

void add_bias(float* y, const float* bias, int N, int C) {
  for (int r = 0; r < N; r++) {
    float* y_r = y + (size_t)r * C;  // seek to row r
    for (int c = 0; c < C; c++) y_r[c] += bias[c];
  }
}

// y = x + bias broadcast over rows, so dL/dbias_c = sum_r dy[r][c]. Rows outermost keeps the
// inner loop contiguous; dbias stays in cache.
void bias_backward(float* dbias, const float* dy, int N, int C) {
  for (int r = 0; r < N; r++) {
    const float* dy_r = dy + (size_t)r * C;  // seek to row r
    for (int c = 0; c < C; c++) dbias[c] += dy_r[c];
  }
}

// ---- activations --------------------------------------------------------------------------

void gelu_forward(float* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = gelu(in[i]);
}

void gelu_backward(float* din, const float* dout, const float* in, size_t n) {
  for (size_t i = 0; i < n; i++) din[i] = dout[i] * gelu_grad(in[i]);
}

void swiglu_forward(float* out, const float* in, int N, int F) {
  for (int r = 0; r < N; r++) {
    const float* gate = in + (size_t)r * 2 * F;  // seek to row r: [gate (F) | up (F)]
    const float* up = gate + F;
    float* out_r = out + (size_t)r * F;
    for (int c = 0; c < F; c++) out_r[c] = gate[c] * sigmoid(gate[c]) * up[c];
  }
}

// out = silu(g) u:  dg = dout u silu'(g),  du = dout silu(g);
// silu(g) = g s and silu'(g) = s + g s (1 - s), s = sigmoid(g).
void swiglu_backward(float* din, const float* dout, const float* in, int N, int F) {
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

void dropout_forward(float* out, uint8_t* mask, const float* in, size_t n, float p,
                     uint64_t seed, uint64_t stream, const TokenPositions& pos, int width) {
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

void dropout_backward(float* din, const float* dout, const uint8_t* mask, size_t n, float p) {
  const float keep_scale = p == 0.0f ? 1.0f : 1.0f / (1.0f - p);
  for (size_t i = 0; i < n; i++) din[i] = mask[i] ? dout[i] * keep_scale : 0.0f;
}

}  // namespace cpu
}  // namespace kernels
