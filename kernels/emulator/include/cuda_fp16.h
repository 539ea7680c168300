// kernels/emulator/include/cuda_fp16.h: the half-precision (fp16) type of the CUDA toolkit, as
// far as paralab's code uses it: its size and layout (paralab's own kernels::fp16 carries the
// math), and the two conversions, which round with paralab's encoding (kernels/float16.h:
// nearest even, overflow to infinity, subnormals), as the toolkit's __float2half does.
#pragma once
#include <cstdint>

#include "kernels/emulator/include/cuda_runtime.h"
#include "kernels/float16.h"

struct __half {
  unsigned short __x;
};
struct __half2 {
  __half x, y;
};

inline float __half2float(__half h) { return kernels::to_float(kernels::fp16{h.__x}); }
inline __half __float2half(float f) { return __half{kernels::to_fp16(f).bits}; }
inline __half __float2half_rn(float f) { return __float2half(f); }
