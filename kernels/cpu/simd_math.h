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
// floats) GeLU through normal_cdf is slower than with libm's scalar erff, with AVX2 about 3x
// faster and with AVX-512 4x (notes/performance.md). Without the flags the code is correct,
// only slower.
// The CUDA twins keep expf and erff: there every thread is already a SIMD lane.
//
// defines: exp_simd, normal_cdf, row_max, row_sum
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include "kernels/math.h"  // exp_simd, which the softmax loops call

namespace kernels {
namespace cpu {

// exp_simd and normal_cdf are in kernels/math.h: the CUDA twins share them.

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
