// kernels/ops/elementwise.h: vector arithmetic, bias, the fp32 <-> bf16 conversion, the
// activations (GeLU, SwiGLU) and dropout.
// Twins: kernels/cpu/elementwise.cpp, kernels/cuda/elementwise.cu.
//
// Each op is a loop over elements (or rows of N x C), no reduction except bias_backward's
// column sums. T is the storage type (float or bf16): an op widens its inputs, computes in
// fp32 with the kernels/math.h function both twins share, and rounds its outputs once.
// Parameter gradients (dbias) accumulate (+=), activation gradients are written (=).
//
// defines: add, accumulate, scale, add_bias, bias_backward, convert, gelu_forward,
//          gelu_backward, swiglu_forward, swiglu_backward, dropout_forward, dropout_backward
#pragma once
#include "kernels/dispatch.h"

namespace kernels {

// ---- arithmetic -----------------------------------------------------------------------------
// out = a + b
template <Device Dev, class T> void add(T* out, const T* a, const T* b, size_t n);
template <class T> void add(Device d, T* out, const T* a, const T* b, size_t n) {
  count_kernel(3.0 * n * sizeof(T));
  ON_DEVICE(add, T)(out, a, b, n);
}

// out += a
template <Device Dev, class T> void accumulate(T* out, const T* a, size_t n);
template <class T> void accumulate(Device d, T* out, const T* a, size_t n) {
  count_kernel(3.0 * n * sizeof(T));
  ON_DEVICE(accumulate, T)(out, a, n);
}

// x *= s (fp32 only)
template <Device Dev> void scale(float* x, float s, size_t n);
template <class = void> void scale(Device d, float* x, float s, size_t n) {
  count_kernel(2.0 * n * sizeof(float));
  ON_DEVICE(scale)(x, s, n);
}

// y(N,C) += bias(C) broadcast over rows.
template <Device Dev, class T> void add_bias(T* y, const T* bias, int N, int C);
template <class T> void add_bias(Device d, T* y, const T* bias, int N, int C) {
  count_kernel((2.0 * N * C + C) * sizeof(T));
  ON_DEVICE(add_bias, T)(y, bias, N, C);
}

// dbias(C) += sum over rows of dy(N,C).
template <Device Dev, class T> void bias_backward(T* dbias, const T* dy, int N, int C);
template <class T> void bias_backward(Device d, T* dbias, const T* dy, int N, int C) {
  count_kernel(((double)N * C + 2.0 * C) * sizeof(T));
  ON_DEVICE(bias_backward, T)(dbias, dy, N, C);
}

// out = round(in) (float -> bf16, nearest even) or out = widen(in) (bf16 -> float, exact).
template <Device Dev, class To, class From> void convert(To* out, const From* in, size_t n);
template <class To, class From> void convert(Device d, To* out, const From* in, size_t n) {
  count_kernel(6.0 * n);
  ON_DEVICE(convert, To, From)(out, in, n);
}

// ---- activations ----------------------------------------------------------------------------
// out = gelu(in)   ("=")
template <Device Dev, class T> void gelu_forward(T* out, const T* in, size_t n);
template <class T> void gelu_forward(Device d, T* out, const T* in, size_t n) {
  count_kernel(2.0 * n * sizeof(T));
  ON_DEVICE(gelu_forward, T)(out, in, n);
}

// din = dout * gelu'(in)   ("=")
template <Device Dev, class T> void gelu_backward(T* din, const T* dout, const T* in, size_t n);
template <class T> void gelu_backward(Device d, T* din, const T* dout, const T* in, size_t n) {
  count_kernel(3.0 * n * sizeof(T));
  ON_DEVICE(gelu_backward, T)(din, dout, in, n);
}

// in(N, 2F) holds [gate | up] per row; out(N,F) = silu(gate) * up.
template <Device Dev, class T> void swiglu_forward(T* out, const T* in, int N, int F);
template <class T> void swiglu_forward(Device d, T* out, const T* in, int N, int F) {
  count_kernel(3.0 * N * F * sizeof(T));
  ON_DEVICE(swiglu_forward, T)(out, in, N, F);
}

// din(N,2F) = ("=") [dout*up*silu'(gate) | dout*silu(gate)]
template <Device Dev, class T>
void swiglu_backward(T* din, const T* dout, const T* in, int N, int F);
template <class T>
void swiglu_backward(Device d, T* din, const T* dout, const T* in, int N, int F) {
  count_kernel(5.0 * N * F * sizeof(T));
  ON_DEVICE(swiglu_backward, T)(din, dout, in, N, F);
}

// ---- dropout --------------------------------------------------------------------------------
// Keep element i when dropout_keep(seed, stream, pos.element(i, width), p) (kernels/math.h)
// (kernels/math.h); out = in * keep / (1-p); mask[i] = keep (1 byte). p == 0 copies and sets
// mask to 1. pos and width: a (B * pos.local, width) tensor of a context-parallel rank's
// tokens draws the single-rank run's bits (the default: index i itself). The mask does not
// depend on T.
template <Device Dev, class T>
void dropout_forward(T* out, uint8_t* mask, const T* in, size_t n, float p, uint64_t seed,
                     uint64_t stream, const TokenPositions& pos, int width);
template <class T>
void dropout_forward(Device d, T* out, uint8_t* mask, const T* in, size_t n, float p,
                     uint64_t seed, uint64_t stream, const TokenPositions& pos = TokenPositions(),
                     int width = 1) {
  count_kernel(2.0 * n * sizeof(T) + n);
  ON_DEVICE(dropout_forward, T)(out, mask, in, n, p, seed, stream, pos, width);
}

// din = ("=") dout * mask / (1-p)
template <Device Dev, class T>
void dropout_backward(T* din, const T* dout, const uint8_t* mask, size_t n, float p);
template <class T>
void dropout_backward(Device d, T* din, const T* dout, const uint8_t* mask, size_t n, float p) {
  count_kernel(2.0 * n * sizeof(T) + n);
  ON_DEVICE(dropout_backward, T)(din, dout, mask, n, p);
}

}  // namespace kernels
