// kernels/math.h: the per-element and per-row arithmetic that every CUDA kernel shares
// with its CPU twin (notes/design.md, "Two backends, one code path").
//
// defines: to_float, to_bf16, store (bf16 <-> float), exp_simd, normal_cdf, gelu, gelu_grad, silu, silu_grad,
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

// ---- exp and the normal CDF without libm, so that loops over them vectorise on the CPU
// (libm's expf and erff are calls the compiler cannot vectorise; notes/performance.md) and
// the CUDA kernels compute the very same values.
// e^x, at most 1.3 ulp from the exact value (glibc's expf: 0.5 ulp), checked on every float
// in [-87, 88]. Below -87 it returns 0, where expf returns numbers under 2^-125 (nothing next
// to a softmax denominator, which is at least 1); above 88 it returns e^88.
HD float exp_simd(float x) {
  // e^x = 2^k e^r, k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2].
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);  // min/max, vectorisable
  const float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float k = (xc * 1.44269504088896341f + kRound) - kRound;
  // ln 2 in two parts, the first with few enough bits that k * kLn2Hi is exact, so r keeps
  // full precision although x - k ln 2 cancels most of x.
  const float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860682030941723e-6f;
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;
  // e^r by its Taylor series to r^7: the first omitted term, r^8/8! < 6e-9, is a tenth of an
  // ulp of e^r. Horner's form, highest power first.
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^k as a float: exponent field k + 127, mantissa 0 (k is in [-126, 127] after the clamp).
  const float two_k = bits_to_float((uint32_t)((int32_t)k + 127) << 23);
  return x < -87.0f ? 0.0f : p * two_k;
}

// Phi(x) = P(X <= x) for a standard normal X = (1 + erf(x / sqrt 2)) / 2, GeLU's gate.
//
// Through the tail E = P(X > |x|) = erfc(z) / 2, z = |x| / sqrt 2, as Phi = E for x < 0 and
// 1 - E for x >= 0, so the left tail keeps its relative precision (1 + erf(x / sqrt 2) loses
// it all to cancellation once x < -3). erfc(z) = t e^(-z^2 + Q) with t = 1 / (1 + z/2),
// which maps z in [0, 10] onto t in [1/6, 1], where Q = ln(erfc(z) / t) + z^2 is smooth;
// beyond z = 10, erfc(z) < 2e-45 underflows a float anyway. Q is a polynomial in u, t mapped
// onto [-1, 1]: the degree-10 Chebyshev interpolant of Q (relative error 1e-8 in erfc,
// computed in long double: notes/performance.md) written in powers of u.
// Measured against long double on every 61st float in [-14, 14]: within 6 ulp for x > -1;
// below, the rounding of z^2 costs z^2 2^-24 more, as in any float evaluation from a float x.
HD float normal_cdf(float x) {
  const float za = fabsf(x) * 0.70710678118654752f;
  const float z = za > 10.0f ? 10.0f : za;  // a compare, not fminf: it vectorises
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float u = (2.0f * t - (1.0f + 1.0f / 6.0f)) / (1.0f - 1.0f / 6.0f);  // [1/6, 1] -> [-1, 1]
  float q = -2.413217408e-05f;  // Horner's form, highest power first
  q = q * u + 5.488488750e-05f;
  q = q * u + 1.330719306e-04f;
  q = q * u - 5.343771873e-04f;
  q = q * u - 2.787787663e-04f;
  q = q * u + 3.707520235e-03f;
  q = q * u - 1.044538645e-03f;
  q = q * u - 2.947035019e-02f;
  q = q * u + 1.574494611e-02f;
  q = q * u + 5.703070983e-01f;
  q = q * u - 5.585953440e-01f;
  const float tail = 0.5f * t * exp_simd(q - z * z);
  return x < 0.0f ? tail : 1.0f - tail;
}

// GeLU, exact (erf) form, Megatron's default: gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x/sqrt2)).
HD float gelu(float x) { return x * normal_cdf(x); }
// d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2/2)/sqrt(2 pi).
HD float gelu_grad(float x) {
  return normal_cdf(x) + x * 0.39894228040143268f * exp_simd(-0.5f * x * x);
}

// SiLU (swish): silu(x) = x * sigmoid(x); SwiGLU(g, u) = silu(g) * u (Shazeer 2020).
HD float sigmoid(float x) { return 1.0f / (1.0f + exp_simd(-x)); }
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
