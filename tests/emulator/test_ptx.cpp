// tests/emulator/test_ptx.cpp: the emulated device's PTX instructions, run through the very
// wrappers the tensor-core flash kernels call (kernels/cuda/flash_mma.cuh), against the PTX ISA's
// tables (tests/ptx_isa_tables.h) and plain arithmetic:
//   ldmatrix.x4 (and .trans): every lane's registers hold the elements the ISA names, and the
//     kernels' own lane addresses (mma_layout.h) load the fragments the kernels expect;
//   mma.m16n8k16 bf16 and f16 -> fp32: D = A B + C, fragments placed by the ISA's tables, on
//     small integers where fp32 is exact (so equal to the bit), and on random values within
//     fp32 rounding of the double product;
//   cvt.rn.bf16x2.f32 and cvt.rn.f16x2.f32: round to nearest even, the first operand in the
//     upper half; f16 overflow, subnormals and ties as kernels/float16.h's to_fp16 (which
//     tests/test_fp16.cpp holds to the CPU's F16C);
//   cp.async: 16 bytes landed after the wait_group that covers their group, not before (the
//     emulator's documented, and GPU-conservative, choice), src-size 0 zero-filled.
// The instructions the kernels run are the ones tested (no re-typed copy of them in the tests).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/mma_layout.h"  // a_coord, b_coord
#include "kernels/math.h"            // to_bf16, to_fp16, bits_to_float
#include "tests/emulator/test_kernels.h"
#include "tests/ptx_isa_tables.h"

namespace {

using namespace emulator_test;

// The 16-bit code of x and the value of a code: bf16, or fp16 with f16.
uint16_t bits(float x, bool f16 = false) {
  return f16 ? kernels::to_fp16(x).bits : kernels::to_bf16(x).bits;
}
float value(uint16_t b, bool f16 = false) {
  return f16 ? kernels::to_float(kernels::fp16{b}) : kernels::to_float(kernels::bf16{b});
}

TEST(EmulatedPtx, LdmatrixGivesEachLaneTheIsaElements) {
  std::vector<uint16_t> tile(256);
  for (int i = 0; i < 256; i++) tile[i] = (uint16_t)(1000 + i);  // distinct, row-major 16 x 16
  for (bool trans : {false, true}) {
    const std::vector<uint32_t> regs = run_ldmatrix(tile, trans);
    for (int lane = 0; lane < 32; lane++)
      for (int m = 0; m < 4; m++)
        for (int h = 0; h < 2; h++) {
          const ptx_isa::Coord c = ptx_isa::ldsm(lane, h, trans);  // within matrix m
          const int row = 8 * (m % 2) + c.row, col = 8 * (m / 2) + c.col;
          const uint16_t got = (uint16_t)(regs[lane * 4 + m] >> (16 * h));
          EXPECT_EQ(got, tile[row * 16 + col])
              << "lane " << lane << " register " << m << " half " << h << (trans ? " .trans" : "");
        }
  }
}

// The kernels' ldmatrix addresses (kernels/cuda/mma_layout.h ldsm_a, ldsm_b, ldsm_bt, on rows of
// 16 + kPad) load, through the real instruction, the mma fragments the kernels' coordinate
// functions name (which tests/test_flash_mma_layout.cpp holds to the ISA's tables):
//   ldsm_a:  a row-major 16 x 16 block is A;
//   ldsm_b:  a row-major (n, k) block gives B(k, n) = x[n][k] for n-tiles t = rows 8t .. 8t+7;
//   ldsm_bt: a row-major (k, n) block with .trans gives B(k, n) = x[k][n], n-tile t = columns.
TEST(EmulatedPtx, KernelsLdmatrixAddressesLoadTheirFragments) {
  namespace mma = kernels::mma;
  std::vector<uint16_t> tile(256);
  for (int i = 0; i < 256; i++) tile[i] = (uint16_t)(3000 + 7 * i);  // distinct
  auto half = [](uint32_t r, int h) { return (uint16_t)(h ? r >> 16 : r & 0xffff); };
  const std::vector<uint32_t> a = run_kernel_ldmatrix(tile, LdmatrixAddress::a);
  const std::vector<uint32_t> b = run_kernel_ldmatrix(tile, LdmatrixAddress::b);
  const std::vector<uint32_t> bt = run_kernel_ldmatrix(tile, LdmatrixAddress::bt);
  for (int lane = 0; lane < 32; lane++) {
    for (int i = 0; i < 8; i++) {
      const mma::Coord c = mma::a_coord(lane, i);
      EXPECT_EQ(half(a[lane * 4 + i / 2], i % 2), tile[c.row * 16 + c.col]) << "A lane " << lane;
    }
    for (int t = 0; t < 2; t++)
      for (int i = 0; i < 4; i++) {
        const mma::Coord c = mma::b_coord(lane, i);  // (k, n) within n-tile t
        EXPECT_EQ(half(b[lane * 4 + 2 * t + i / 2], i % 2), tile[(8 * t + c.col) * 16 + c.row])
            << "B lane " << lane;
        EXPECT_EQ(half(bt[lane * 4 + 2 * t + i / 2], i % 2), tile[c.row * 16 + 8 * t + c.col])
            << "B.trans lane " << lane;
      }
  }
}

// Fragments of A (16 x 16), B (16 x 8) and C (16 x 8) for every lane, by the ISA's tables.
struct Fragments {
  std::vector<uint32_t> a = std::vector<uint32_t>(128), b = std::vector<uint32_t>(64);
  std::vector<float> c = std::vector<float>(128);
};
Fragments place(const float (&A)[16][16], const float (&B)[16][8], const float (&C)[16][8],
                bool f16) {
  Fragments f;
  for (int lane = 0; lane < 32; lane++) {
    for (int i = 0; i < 8; i++) {
      const ptx_isa::Coord p = ptx_isa::a(lane, i);
      f.a[lane * 4 + i / 2] |= (uint32_t)bits(A[p.row][p.col], f16) << (16 * (i % 2));
    }
    for (int i = 0; i < 4; i++) {
      const ptx_isa::Coord p = ptx_isa::b(lane, i);
      f.b[lane * 2 + i / 2] |= (uint32_t)bits(B[p.row][p.col], f16) << (16 * (i % 2));
      const ptx_isa::Coord q = ptx_isa::c(lane, i);
      f.c[lane * 4 + i] = C[q.row][q.col];
    }
  }
  return f;
}

void check_mma(bool integers, bool f16) {
  std::mt19937 rng(integers ? 7 : 11);
  std::uniform_int_distribution<int> small(-8, 8);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  float A[16][16], B[16][8], C[16][8];
  for (auto& row : A)
    for (float& x : row) x = value(bits(integers ? (float)small(rng) : real(rng), f16), f16);
  for (auto& row : B)
    for (float& x : row) x = value(bits(integers ? (float)small(rng) : real(rng), f16), f16);
  for (auto& row : C)
    for (float& x : row) x = integers ? (float)small(rng) : real(rng);
  const Fragments f = place(A, B, C, f16);
  const std::vector<float> d = run_mma(f.a, f.b, f.c, f16);
  for (int lane = 0; lane < 32; lane++)
    for (int i = 0; i < 4; i++) {
      const ptx_isa::Coord p = ptx_isa::c(lane, i);
      double want = C[p.row][p.col];
      for (int k = 0; k < 16; k++) want += (double)A[p.row][k] * B[k][p.col];
      if (integers)
        EXPECT_EQ(d[lane * 4 + i], (float)want) << "lane " << lane << " element " << i;
      else
        EXPECT_NEAR(d[lane * 4 + i], want, 1e-6 * (1 + std::fabs(want))) << "lane " << lane;
    }
}
TEST(EmulatedPtx, MmaIsTheProductOnSmallIntegersExactly) { check_mma(true, false); }
TEST(EmulatedPtx, MmaIsTheProductOnRandomValues) { check_mma(false, false); }
TEST(EmulatedPtx, MmaF16IsTheProductOnSmallIntegersExactly) { check_mma(true, true); }
TEST(EmulatedPtx, MmaF16IsTheProductOnRandomValues) { check_mma(false, true); }

void check_cvt(bool f16, const std::vector<uint32_t>& cases) {
  std::vector<float> lo, hi;
  for (uint32_t c : cases) {
    float f;
    std::memcpy(&f, &c, 4);
    lo.push_back(f);
    hi.push_back(-2.5f * f);
  }
  const std::vector<uint32_t> packed = run_cvt(lo, hi, f16);
  for (size_t i = 0; i < lo.size(); i++) {
    EXPECT_EQ(packed[i] & 0xffffu, bits(lo[i], f16)) << "case " << i;
    EXPECT_EQ(packed[i] >> 16, bits(hi[i], f16)) << "case " << i;
  }
}
TEST(EmulatedPtx, CvtRoundsToNearestEvenFirstOperandHigh) {
  check_cvt(false, {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0x00000001u, 0x80000000u,
                    0x3f800000u, 0xbf7fffffu});
}
// fp16: ties at 1 + 2^-11 and 1 + 3 2^-11, 65504 and the overflow at 65520, the subnormal tie
// 2^-25 (to 0) and 1.5 2^-24 (to 2 2^-24), a subnormal, -0, fp32's largest (infinity)
TEST(EmulatedPtx, CvtF16RoundsToNearestEvenOverflowsAndSubnormals) {
  check_cvt(true, {0x3f801000u, 0x3f803000u, 0x477fe000u, 0x477ff000u, 0x33000000u, 0x33c00000u,
                   0x35800123u, 0x80000000u, 0x7f7fffffu, 0x3f800000u, 0x38800000u, 0xc2f6e979u});
}

TEST(EmulatedPtx, CpAsyncLandsAtItsWaitAndZeroFills) {
  std::vector<uint16_t> first(256), second(256);
  for (int i = 0; i < 256; i++) {
    first[i] = (uint16_t)(100 + i);
    second[i] = (uint16_t)(5000 + i);
  }
  const std::vector<uint16_t> seen = run_cp_async(first, second);
  for (int t = 0; t < 32; t++)
    for (int e = 0; e < 8; e++) {
      const int i = 8 * t + e;
      EXPECT_EQ(seen[i], first[i]) << "group 0 after wait_group 1, thread " << t;
      EXPECT_EQ(seen[256 + i], 0xffffu) << "group 1 before its wait: shared memory's old bytes";
      EXPECT_EQ(seen[512 + i], t % 2 == 0 ? second[i] : 0) << "group 1 after wait_group 0";
    }
}

}  // namespace
