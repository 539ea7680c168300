// kernels/emulator/include/cuda_fp8.h: the FP8 conversion of the CUDA toolkit that paralab's
// kernels call (kernels/cuda/fp8.cu, on sm_89 and later: __CUDA_ARCH__ is 900 here), as the
// PTX ISA defines the instruction behind it, cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32: round to
// nearest even; .satfinite clamps a finite value beyond the format's largest normal, and an
// infinity, to +-max; NaN becomes the canonical NaN (0x7F); E4M3 has no infinity.
//
// Written from that definition in double arithmetic (the magnitude split into a power of two
// and a significand, the significand rounded with nearbyint under the default round-to-nearest-
// even mode), not from kernels/fp8.h's integer bit rounding, so that op_check's comparison of
// the CUDA twin (this) with the CPU twin (kernels/fp8.h) compares two independent derivations.
// Only the saturating form is emulated: paralab converts with __NV_SATFINITE alone, and a
// __NV_NOSAT call aborts naming itself.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/emulator/include/cuda_runtime.h"

typedef unsigned char __nv_fp8_storage_t;
typedef enum { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t saturate,
                                                __nv_fp8_interpretation_t interpretation) {
  if (saturate != __NV_SATFINITE) {
    std::fprintf(stderr, "emulator: __nv_cvt_float_to_fp8 with __NV_NOSAT is not emulated\n");
    std::abort();
  }
  const bool e4m3 = interpretation == __NV_E4M3;
  const int mantissa_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const double max_normal = e4m3 ? 448.0 : 57344.0;
  if (std::isnan(x)) return 0x7F;
  const unsigned char sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs((double)x);
  const int min_exponent = 1 - bias;  // of the smallest normal, 2^(1 - bias)
  // The spacing of representable values around a: 2^(e - mantissa_bits) for a in [2^e, 2^(e+1)),
  // the subnormal spacing below the smallest normal.
  int e = min_exponent;
  if (a >= std::ldexp(1.0, min_exponent)) {
    int frexp_exponent;
    std::frexp(a, &frexp_exponent);  // a = f 2^frexp_exponent, f in [0.5, 1)
    e = frexp_exponent - 1;
  }
  double v = std::isinf(a) ? max_normal
                           : std::nearbyint(std::ldexp(a, mantissa_bits - e)) *
                                 std::ldexp(1.0, e - mantissa_bits);
  if (v > max_normal) v = max_normal;  // .satfinite
  // The code of v, now a representable magnitude.
  unsigned code;
  if (v < std::ldexp(1.0, min_exponent)) {
    code = (unsigned)std::ldexp(v, mantissa_bits - min_exponent);  // subnormal (or zero)
  } else {
    int frexp_exponent;
    const double f = std::frexp(v, &frexp_exponent);
    const int exponent = frexp_exponent - 1;
    const unsigned mantissa = (unsigned)std::ldexp(2.0 * f - 1.0, mantissa_bits);
    code = (unsigned)(exponent + bias) << mantissa_bits | mantissa;
  }
  return (__nv_fp8_storage_t)(sign | code);
}
