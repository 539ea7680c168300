// kernels/cpu/row_math.h: the softmax arithmetic of the CPU twins (cross-entropy, causal
// softmax, flash attention), written so that g++ turns it into SIMD code.
//
// A softmax over a row is three loops: the maximum, the exponentials, their sum. Written the
// obvious way, none of them vectorises, and on a CPU they then cost as much as a good part of
// the GEMMs around them:
//  - expf is a call into libm, which the compiler cannot vectorise; exp_simd below computes
//    the same function in plain arithmetic, which it can;
//  - a running max or sum is one chain in which every step waits for the previous one, and
//    the compiler may not reorder float additions into a tree; row_max and row_sum keep
//    kLanes independent chains, one per SIMD lane, and combine them at the end (a different
//    order of the same additions: the sum differs from the sequential one by rounding only).
//
// The loops vectorise under -O3 -fno-trapping-math (without it g++ will not execute the
// clamps' arithmetic speculatively); the code is correct, only slower, without them.
//
// defines: exp_simd, row_max, row_sum
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

namespace kernels {
namespace cpu {

// e^x, at most 1.3 ulp from the exact value (glibc's expf: 0.5 ulp), checked on every float
// in [-87, 88]. Below -87 it returns 0, where expf returns numbers under 2^-125 (irrelevant
// next to a softmax's denominator, which is at least 1); above 88 it returns e^88. The softmax
// loops pass x = score - max <= 0.
inline float exp_simd(float x) {
  // e^x = 2^k e^r, k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2].
  const float xc = std::min(std::max(x, -87.0f), 88.0f);
  const float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float k = (xc * 1.44269504088896341f + kRound) - kRound;
  // ln 2 in two parts, the first with few enough bits that k * kLn2Hi is exact, so r keeps
  // full precision even though x - k ln 2 cancels most of x.
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
