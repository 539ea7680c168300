// kernels/emulator/include/cuda_bf16.h: the bfloat16 type of the CUDA toolkit, as far as
// paralab's code uses it (its size and layout: paralab's own kernels::bf16 carries the math).
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/emulator/include/cuda_runtime.h"

struct __nv_bfloat16 {
  unsigned short __x;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = (uint32_t)h.__x << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest, ties to even; NaN stays NaN.
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return __nv_bfloat16{0x7fff};
  return __nv_bfloat16{(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
