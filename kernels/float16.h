// kernels/float16.h: the two 16-bit storage formats, bf16 and fp16 (kernels/common.h), to and
// from fp32: the encoding every CUDA kernel shares with its CPU twin, so that both round
// alike (and the emulated device's cuda_fp16.h, kernels/emulator/include, rounds with it).
//
//            sign  exponent (bias)  mantissa  max      smallest normal  smallest subnormal
//   fp32      1     8 (127)          23        3.4e38   1.2e-38          1.4e-45
//   bf16      1     8 (127)           7        3.4e38   1.2e-38          9.2e-41
//   fp16      1     5 (15)           10        65504    6.1e-5 (2^-14)   6.0e-8 (2^-24)
//
// Widening is exact in both. Narrowing rounds to nearest, ties to even (IEEE-754's default,
// what cuBLAS, __float2bfloat16 and __float2half do), and keeps a NaN a NaN (quiet, sign and
// the payload's upper bits kept). bf16 has fp32's exponent, so only the mantissa is rounded.
// fp16's narrower exponent adds the two ends: a value at or above 65520 (65504 plus half its
// ulp: the tie goes to the even neighbour, which is infinity) becomes infinity, and one below
// 2^-14 becomes a subnormal, a multiple of 2^-24, rounded like any other value (so below
// 2^-25 it flushes to zero). tests/test_fp16.cpp checks every one of the 65,536 codes and the
// rounding against the CPU's own converter (F16C).
//
// defines: bits_to_float, float_to_bits, to_float (bf16, fp16, float), to_bf16, to_fp16,
//          store (float into float, bf16 or fp16), round_to<T>
#pragma once
#include "kernels/common.h"

namespace kernels {

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

HD float to_float(float x) { return x; }

// ---- bf16 -------------------------------------------------------------------------------
// Widening is exact: the bf16 bits become the float's upper half.
HD float to_float(bf16 x) { return bits_to_float((uint32_t)x.bits << 16); }
// Round to nearest, ties to even: add 0x7FFF plus the lowest kept bit, then truncate.
// NaN stays NaN (a quiet NaN with the sign kept).
HD bf16 to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu))
    return bf16{(uint16_t)((u >> 16) | 0x0040u)};
  return bf16{(uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}

// ---- fp16 -------------------------------------------------------------------------------
// Widening is exact: a normal fp16 re-biases its exponent (15 -> 127, +112) and pads its
// mantissa with 13 zeros; infinity and NaN keep their mantissa bits; a subnormal, m x 2^-24
// with m < 1024, is a float product without rounding.
HD float to_float(fp16 x) {
  const uint32_t sign = (uint32_t)(x.bits & 0x8000u) << 16;
  const uint32_t e = (x.bits >> 10) & 0x1Fu, m = x.bits & 0x3FFu;
  if (e == 0x1Fu) return bits_to_float(sign | 0x7F800000u | (m << 13));
  if (e != 0) return bits_to_float(sign | ((e + 112u) << 23) | (m << 13));
  return bits_to_float(sign | float_to_bits((float)m * 5.9604644775390625e-8f));  // m 2^-24
}

// Round to nearest, ties to even, in integer arithmetic (no FPU rounding mode or flush-to-zero
// setting can change it), on |f|'s bits a:
HD fp16 to_fp16(float f) {
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  // NaN: quiet (mantissa bit 9), the payload's upper 9 bits kept
  if (a > 0x7F800000u) return fp16{(uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu))};
  // |f| >= 65520 = 0x477FF000, infinity included: overflow to infinity
  if (a >= 0x477FF000u) return fp16{(uint16_t)(sign | 0x7C00u)};
  // normal, |f| >= 2^-14: re-bias the exponent (-112 << 23), then drop 13 mantissa bits the
  // way bf16 drops 16 (a carry out of the mantissa correctly bumps the exponent)
  if (a >= 0x38800000u) {
    const uint32_t r = a - 0x38000000u;
    return fp16{(uint16_t)(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13))};
  }
  // subnormal or zero: the code is |f| / 2^-24 rounded. With the 24-bit significand s and the
  // biased exponent e, |f| = s 2^(e - 150), so the code is s >> (126 - e) rounded on the bits
  // shifted out. Below 2^-25 (e < 102) that is 0.
  const uint32_t e = a >> 23;
  if (e < 102u) return fp16{sign};
  const uint32_t s = (a & 0x7FFFFFu) | 0x800000u, shift = 126u - e;  // 14..24
  const uint32_t rest = s & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  uint32_t q = s >> shift;
  q += (rest > half || (rest == half && (q & 1u))) ? 1u : 0u;  // 0x400: the smallest normal
  return fp16{(uint16_t)(sign | q)};
}

// Store a float into any storage type; round_to<T>(v), the value as T.
HD void store(float& dst, float v) { dst = v; }
HD void store(bf16& dst, float v) { dst = to_bf16(v); }
HD void store(fp16& dst, float v) { dst = to_fp16(v); }
template <class T>
HD T round_to(float v) {
  T t;
  store(t, v);
  return t;
}

}  // namespace kernels
