// kernels/cpu/simd_math.h: the transcendental and row arithmetic of the CPU twins, written
// so that g++ turns the loops that use it into SIMD code.
//
// On a CPU the non-GEMM time of a training step is mostly exp and erf: the softmaxes
// (cross-entropy, attention) and GeLU. Written the obvious way none of their loops
// vectorises:
//  - expf and erff are calls into libm, which the compiler cannot vectorise; exp_simd and
//    normal_cdf below compute the same functions in plain arithmetic, which it can;
//  - a running max or sum is one chain in which every step waits for the previous one, and
//    the compiler may not reorder float additions into a tree; row_max and row_sum keep
//    kLanes independent chains, one per SIMD lane, and combine them at the end (a different
//    order of the same additions: the sum differs from the sequential one by rounding only).
//
// The loops vectorise under -O3 -fno-trapping-math (without the latter g++ will not compute
// both sides of a clamp) and pay off with -march=native: at the x86-64 baseline (SSE2, 4
// floats) normal_cdf is slower than libm's scalar erff, with AVX2 it is 2x faster and with
// AVX-512 3x (notes/performance.md). Without those flags the code is correct but slower:
// GeLU then slower than it was with erff.
// The CUDA twins keep expf and erff: there every thread is already a SIMD lane.
//
// defines: exp_simd, normal_cdf, row_max, row_sum
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kernels {
namespace cpu {

// e^x, at most 1.3 ulp from the exact value (glibc's expf: 0.5 ulp), checked on every float
// in [-87, 88]. Below -87 it returns 0, where expf returns numbers under 2^-125 (nothing next
// to a softmax denominator, which is at least 1); above 88 it returns e^88.
inline float exp_simd(float x) {
  // e^x = 2^k e^r, k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2].
  const float xc = std::min(std::max(x, -87.0f), 88.0f);
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
  const int32_t bits = ((int32_t)k + 127) << 23;
  float two_k;
  std::memcpy(&two_k, &bits, sizeof two_k);
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
// Measured against long double on every 7th float in [-14, 14]: within 6 ulp for x > -1;
// below, the rounding of z^2 costs z^2 2^-24 more, as in any float evaluation from a float x.
inline float normal_cdf(float x) {
  const float z = std::min(std::fabs(x) * 0.70710678118654752f, 10.0f);
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

constexpr int kLanes = 8;  // two SSE registers or one AVX register of floats

// max_j x[j] over n >= 1 values.
inline float row_max(const float* x, int n) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; l++) lane[l] = x[0];
  int j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; l++) lane[l] = std::max(lane[l], x[j + l]);
  float m = lane[0];
  for (int l = 1; l < kLanes; l++) m = std::max(m, lane[l]);
  for (; j < n; j++) m = std::max(m, x[j]);
  return m;
}

// sum_j x[j] over n values.
inline float row_sum(const float* x, int n) {
  float lane[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; l++) lane[l] += x[j + l];
  float s = 0.0f;
  for (int l = 0; l < kLanes; l++) s += lane[l];
  for (; j < n; j++) s += x[j];
  return s;
}

}  // namespace cpu
}  // namespace kernels
