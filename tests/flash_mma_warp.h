// tests/flash_mma_warp.h: one warp of the tensor-core kernels emulated on the CPU, for
// tests/test_flash_mma_layout.cpp and tests/test_flash_mma_kernels.cpp: 32 lanes' registers as
// arrays, ldmatrix.x4 and mma.m16n8k16 (bf16 -> fp32) as the PTX ISA defines them (the
// fragment coordinates come from kernels/cuda/mma_layout.h, which test_flash_mma_layout.cpp
// checks against the ISA's tables), the kernels' bf16 pair packing and quad shuffles.
//
// defines: flash_mma_test::{Regs, Acc, Bits, bf, fl, pack, half, isa_ldsm, ldsm_x4, mma_x,
//          c_to_a_regs, quad, tile, rng, small_ints}
#pragma once
#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/mma_layout.h"
#include "kernels/math.h"  // to_bf16, bits_to_float

namespace flash_mma_test {

using kernels::mma::Coord;

// ldmatrix: each lane of the warp receives, per 8 x 8 matrix, the pair of row laneid / 4,
// elements 2 (laneid % 4) and 2 (laneid % 4) + 1; .trans delivers the transpose.
inline Coord isa_ldsm(int lane, int h, bool trans) {
  const Coord c{lane / 4, 2 * (lane % 4) + h};
  return trans ? Coord{c.col, c.row} : c;
}

// ---- the emulated warp: ldmatrix and mma on 32 lanes' registers ------------------------------

using Regs = std::array<std::array<uint32_t, 4>, 32>;  // 4 registers of each lane
using Acc = std::array<std::array<float, 4>, 32>;      // a C fragment of each lane
using Bits = std::vector<uint16_t>;                    // bf16 values as their bits

inline uint16_t bf(float x) { return kernels::to_bf16(x).bits; }
inline float fl(uint16_t bits) { return kernels::bits_to_float((uint32_t)bits << 16); }
// The kernels' pack_bf16x2: lo in the low half (round to nearest even, like to_bf16).
inline uint32_t pack(float lo, float hi) { return bf(lo) | (uint32_t)bf(hi) << 16; }
inline float half(uint32_t r, int h) { return fl((uint16_t)(h ? r >> 16 : r & 0xffff)); }

// ldmatrix.x4 from shared memory `sm`: lane L hands the element index addr(L) of row L % 8 of
// matrix L / 8; register m of every lane receives matrix m as isa_ldsm says.
template <typename Addr>
inline Regs ldsm_x4(const Bits& sm, Addr addr, bool trans) {
  Regs out{};
  for (int lane = 0; lane < 32; lane++)
    for (int m = 0; m < 4; m++)
      for (int h = 0; h < 2; h++) {
        const Coord c = isa_ldsm(lane, h, trans);
        out[lane][m] |= (uint32_t)sm.at(addr(8 * m + c.row) + c.col) << (16 * h);
      }
  return out;
}
// mma.m16n8k16 bf16 -> fp32: d += a b, b in registers b_reg, b_reg + 1 of `b`.
inline void mma_x(Acc& d, const Regs& a, const Regs& b, int b_reg) {
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; lane++) {
    for (int i = 0; i < 8; i++) {
      const Coord c = kernels::mma::a_coord(lane, i);
      A[c.row][c.col] = half(a[lane][i / 2], i % 2);
    }
    for (int i = 0; i < 4; i++) {
      const Coord c = kernels::mma::b_coord(lane, i);
      B[c.row][c.col] = half(b[lane][b_reg + i / 2], i % 2);
    }
  }
  for (int lane = 0; lane < 32; lane++)
    for (int i = 0; i < 4; i++) {
      const Coord c = kernels::mma::c_coord(lane, i);
      float s = 0.0f;
      for (int kk = 0; kk < 16; kk++) s += A[c.row][kk] * B[kk][c.col];
      d[lane][i] += s;
    }
}
// C fragments of n-tiles 2t, 2t+1 -> the A fragment (rounded to bf16), as the kernels pack.
inline Regs c_to_a_regs(const Acc& lo, const Acc& hi) {
  Regs a{};
  for (int lane = 0; lane < 32; lane++) {
    a[lane][0] = pack(lo[lane][0], lo[lane][1]);
    a[lane][1] = pack(lo[lane][2], lo[lane][3]);
    a[lane][2] = pack(hi[lane][0], hi[lane][1]);
    a[lane][3] = pack(hi[lane][2], hi[lane][3]);
  }
  return a;
}
// xor-shuffles over the quad (lanes 4g .. 4g+3)
template <typename F>
inline std::array<float, 32> quad(const std::array<float, 32>& x, F op) {
  std::array<float, 32> out;
  for (int lane = 0; lane < 32; lane++) {
    const int q = lane & ~3;
    out[lane] = op(op(x[q], x[q + 1]), op(x[q + 2], x[q + 3]));
  }
  return out;
}

// A row-major (rows, cols) bf16 matrix in a shared tile of row stride `stride`.
inline Bits tile(const std::vector<float>& x, int rows, int cols, int stride) {
  Bits sm((size_t)rows * stride, 0);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) sm[(size_t)r * stride + c] = bf(x[(size_t)r * cols + c]);
  return sm;
}

inline std::mt19937 rng(20250425);
// Small integers (exact in bf16, their products and sums exact in fp32).
inline std::vector<float> small_ints(size_t n, int lo = -3, int hi = 3) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = (float)d(rng);
  return x;
}
}  // namespace flash_mma_test
