// kernels/math.h: the per-element and per-row arithmetic that every CUDA kernel shares
// with its CPU twin (DESIGN.md, "Two backends, one code path").
//
// defines: to_float, to_bf16, store (bf16 <-> float), gelu, gelu_grad, silu, silu_grad,
//          rope_inv_freq, counter_uniform (dropout RNG), adamw_step
#pragma once
#include <cmath>
#include "kernels/common.h"

namespace kernels {

// ---- bf16 <-> float ----------------------------------------------------------------------
HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}
HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
#endif
}
// Widening is exact: the bf16 bits become the float's upper half.
HD float to_float(bf16 x) { return bits_to_float((uint32_t)x.bits << 16); }
HD float to_float(float x) { return x; }
// Round to nearest, ties to even: add 0x7FFF plus the lowest kept bit, then truncate.
// NaN stays NaN (a quiet NaN with the sign kept).
HD bf16 to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu))
    return bf16{(uint16_t)((u >> 16) | 0x0040u)};
  return bf16{(uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}
// Store a float into either storage type.
HD void store(float& dst, float v) { dst = v; }
HD void store(bf16& dst, float v) { dst = to_bf16(v); }

// GeLU, exact (erf) form, Megatron's default: gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x/sqrt2)).
HD float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
// d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2/2)/sqrt(2 pi).
HD float gelu_grad(float x) {
  float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
  return cdf + x * pdf;
}

// SiLU (swish): silu(x) = x * sigmoid(x); SwiGLU(g, u) = silu(g) * u (Shazeer 2020).
HD float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
HD float silu(float x) { return x * sigmoid(x); }
// d/dx silu = s + x s (1 - s), s = sigmoid(x).
HD float silu_grad(float x) {
  float s = sigmoid(x);
  return s + x * s * (1.0f - s);
}

// RoPE (Su et al. 2021), rotate-half (GPT-NeoX / Megatron) form. For head dim d, pair i
// (0 <= i < d/2) rotates (x[i], x[i + d/2]) by angle pos * theta^(-2i/d).
HD float rope_inv_freq(int i, int head_dim, float theta) {
  return powf(theta, -2.0f * (float)i / (float)head_dim);
}

// Counter-based random numbers (a 64-bit mix, splitmix64 finaliser): the value depends
// only on (seed, stream, index), so the GPU and the CPU, a naive and a flash attention,
// a forward and its recompute all draw the same dropout mask without storing state.
HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) with 24 random bits.
HD float counter_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t r = mix64(seed ^ mix64(stream ^ mix64(index)));
  return (float)(r >> 40) * (1.0f / 16777216.0f);
}
// Dropout keeps an element when its uniform is >= p; kept values are scaled by 1/(1-p).
HD bool dropout_keep(uint64_t seed, uint64_t stream, uint64_t index, float p) {
  return counter_uniform(seed, stream, index) >= p;
}

// One AdamW step on one element (Loshchilov & Hutter 2019; PyTorch AdamW semantics):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
// bias1 = 1 - b1^t and bias2 = 1 - b2^t are computed once per step by the caller.
HD void adamw_step(float& p, float& m, float& v, float g, float lr, float b1, float b2,
                   float eps, float wd, float bias1, float bias2) {
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
  float mhat = m / bias1;
  float vhat = v / bias2;
  p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
}

}  // namespace kernels
