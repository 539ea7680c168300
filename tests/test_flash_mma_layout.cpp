// tests/test_flash_mma_layout.cpp: the tensor-core flash attention (kernels/cuda/flash_mma_*.cu)
// checked on the CPU, where no GPU is needed.
//
// 1. The fragment layouts of kernels/cuda/mma_layout.h against the PTX ISA's documented ones,
//    written here in the ISA's own words (section "Matrix Fragments for mma.m16n8k16 with
//    floating point type"; "Warp-level matrix load instruction: ldmatrix"): which lane holds
//    which element of A, B, C; that each fragment covers its matrix once; that the scores' C
//    fragments are the next product's A fragment (the FlashAttention-2 register trick); that the
//    ldmatrix lane addresses load exactly those fragments; that the padded shared rows are free
//    of bank conflicts.
// 2. One warp's tile products (S = Q K^T and O = P V: the two patterns every product of the
//    three kernels follows, rows x rows^T and registers x rows) emulated on 32 lanes' register
//    arrays -- ldmatrix and mma.m16n8k16 as the ISA defines them, the lane addresses and
//    fragment coordinates from mma_layout.h -- against plain loops, on small integers, where
//    fp32 is exact: equal to the bit.
// 3. tests/test_flash_mma_kernels.cpp: the three kernels emulated warp by warp, mirroring their
//    code step for step (the same tile sizes, masks and tile ranges: flash_mma_tiles.h), against
//    attention in double on passes of kernels/math.h AttentionBlock: causal and not, GQA,
//    dropout, odd lengths, D 64 and 128, context-parallel views, a pass whose rows see no key.
//    Bounds as op_check's (tests/gpu/op_check_flash_mma.cpp): 1e-2 of the tensor's largest
//    value for o, dq, dk, dv (P and dS are rounded to bf16 before their second product), 1e-5
//    for lse (fp32 throughout).
// What only a GPU can check: the PTX itself (the wrappers of flash_mma.cuh), cp.async timing and
// the barriers, register allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/flash_mma_tiles.h"  // kPad
#include "kernels/cuda/mma_layout.h"
#include "tests/flash_mma_warp.h"  // the emulated warp: ldsm_x4, mma_x, isa_ldsm, ...

namespace {

using namespace flash_mma_test;
namespace mma = kernels::mma;
namespace fm = kernels::cuda::flash_mma;

// ---- 1. layouts ------------------------------------------------------------------------------

// The PTX ISA's fragment tables, for the 16-bit types of mma.m16n8k16, element i of a lane:
//   A: row = groupID for a_i with i < 2 or 4 <= i < 6, groupID + 8 otherwise;
//      col = threadID_in_group * 2 + (i & 1) for i < 4, threadID_in_group * 2 + (i & 1) + 8 else
//   B: row = threadID_in_group * 2 + (i & 1) for b_i with i < 2, ... + 8 for i >= 2; col = groupID
//   C: row = groupID for c_i with i < 2, groupID + 8 for i >= 2;
//      col = threadID_in_group * 2 + (i & 1)
Coord isa_a(int lane, int i) {
  const int groupID = lane >> 2, tig = lane % 4;
  const int row = (i < 2 || (i >= 4 && i < 6)) ? groupID : groupID + 8;
  const int col = i < 4 ? tig * 2 + (i & 1) : tig * 2 + (i & 1) + 8;
  return Coord{row, col};
}
Coord isa_b(int lane, int i) {
  const int groupID = lane >> 2, tig = lane % 4;
  return Coord{i < 2 ? tig * 2 + (i & 1) : tig * 2 + (i & 1) + 8, groupID};
}
Coord isa_c(int lane, int i) {
  const int groupID = lane >> 2, tig = lane % 4;
  return Coord{i < 2 ? groupID : groupID + 8, tig * 2 + (i & 1)};
}
bool same(Coord a, Coord b) { return a.row == b.row && a.col == b.col; }

TEST(MmaLayout, FragmentsAreThePtxIsaTables) {
  for (int lane = 0; lane < 32; lane++) {
    for (int i = 0; i < 8; i++) EXPECT_TRUE(same(mma::a_coord(lane, i), isa_a(lane, i)));
    for (int i = 0; i < 4; i++) EXPECT_TRUE(same(mma::b_coord(lane, i), isa_b(lane, i)));
    for (int i = 0; i < 4; i++) EXPECT_TRUE(same(mma::c_coord(lane, i), isa_c(lane, i)));
    for (int h = 0; h < 2; h++)
      for (bool trans : {false, true})
        EXPECT_TRUE(same(mma::ldsm_coord(lane, h, trans), isa_ldsm(lane, h, trans)));
  }
}

TEST(MmaLayout, EachFragmentCoversItsMatrixOnce) {
  std::vector<int> a(16 * 16, 0), b(16 * 8, 0), c(16 * 8, 0);
  for (int lane = 0; lane < 32; lane++) {
    for (int i = 0; i < 8; i++) a[mma::a_coord(lane, i).row * 16 + mma::a_coord(lane, i).col]++;
    for (int i = 0; i < 4; i++) b[mma::b_coord(lane, i).row * 8 + mma::b_coord(lane, i).col]++;
    for (int i = 0; i < 4; i++) c[mma::c_coord(lane, i).row * 8 + mma::c_coord(lane, i).col]++;
  }
  for (int n : a) EXPECT_EQ(n, 1);
  for (int n : b) EXPECT_EQ(n, 1);
  for (int n : c) EXPECT_EQ(n, 1);
}

// The C fragments of n-tiles 2t and 2t+1 are, lane for lane, the A fragment of columns
// [16t, 16t + 16): what lets P (and dS) feed the next product without moving.
TEST(MmaLayout, ScoresAreTheNextProductsAFragment) {
  for (int lane = 0; lane < 32; lane++)
    for (int e = 0; e < 8; e++) {
      const int from = mma::c_to_a(e), tile = from / 4;
      const Coord c = mma::c_coord(lane, from % 4);
      EXPECT_TRUE(same(mma::a_coord(lane, e), Coord{c.row, 8 * tile + c.col}));
    }
}

// Each ldmatrix load of the kernels yields the mma fragment of its block.
TEST(MmaLayout, LdmatrixAddressesLoadTheFragments) {
  const int stride = 16 + fm::kPad;
  std::vector<float> x(16 * 16);
  for (int i = 0; i < 256; i++) x[i] = (float)i;  // exact in bf16 up to 256
  const Bits sm = tile(x, 16, 16, stride);
  auto at = [&](Coord c) { return c.row * stride + c.col; };
  const Regs a = ldsm_x4(sm, [&](int l) { return at(mma::ldsm_a(l)); }, false);
  // ldsm_b reads a row-major (n, k) block: B(k, n) = x[n][k], n-tile t = rows 8t .. 8t+7.
  const Regs b = ldsm_x4(sm, [&](int l) { return at(mma::ldsm_b(l)); }, false);
  // ldsm_bt reads a row-major (k, n) block: B(k, n) = x[k][n], n-tile t = columns 8t .. 8t+7.
  const Regs bt = ldsm_x4(sm, [&](int l) { return at(mma::ldsm_bt(l)); }, true);
  for (int lane = 0; lane < 32; lane++) {
    for (int i = 0; i < 8; i++) {
      const Coord c = mma::a_coord(lane, i);
      EXPECT_EQ(half(a[lane][i / 2], i % 2), x[c.row * 16 + c.col]);
    }
    for (int t = 0; t < 2; t++)
      for (int i = 0; i < 4; i++) {
        const Coord c = mma::b_coord(lane, i);  // (k, n) within n-tile t
        EXPECT_EQ(half(b[lane][2 * t + i / 2], i % 2), x[(8 * t + c.col) * 16 + c.row]);
        EXPECT_EQ(half(bt[lane][2 * t + i / 2], i % 2), x[c.row * 16 + 8 * t + c.col]);
      }
  }
}

// Rows of D + 8 bf16: the 8 rows of one ldmatrix matrix (16 bytes each) hit 32 distinct banks.
TEST(MmaLayout, PaddedRowsAreFreeOfBankConflicts) {
  for (int D : {64, 128}) {
    const int stride_bytes = (D + fm::kPad) * 2;
    for (auto load : {mma::ldsm_a, mma::ldsm_b, mma::ldsm_bt})
      for (int col0 : {0, 16, D - 16})  // some 16-column block of the row
        for (int m = 0; m < 4; m++) {
          std::vector<int> hits(32, 0);
          for (int r = 0; r < 8; r++) {
            const Coord c = load(8 * m + r);
            const int byte = (c.row + 8) * stride_bytes + (col0 + c.col) * 2;  // any row offset
            for (int w = 0; w < 4; w++) hits[(byte / 4 + w) % 32]++;
          }
          for (int n : hits) EXPECT_EQ(n, 1) << "D " << D << " matrix " << m;
        }
  }
}

// ---- 2. one warp's tile products ---------------------------------------------------------------

// S (16 x 64) = Q (16 x D) K^T and O (16 x D) = P V (P = S, rounded) as flash_mma_forward.cu
// computes them; the dkdv kernel's S^T = K_w Q^T and dV = P^T dO; dq's dQ = dS K.
TEST(MmaWarp, ProductsEqualPlainLoops) {
  constexpr int D = 64, N = 64, stride = D + fm::kPad;
  const std::vector<float> q = small_ints(16 * D), k = small_ints(N * D), v = small_ints(N * D);
  const Bits sQ = tile(q, 16, D, stride), sK = tile(k, N, D, stride), sV = tile(v, N, D, stride);
  Regs qf[D / 16];
  for (int kk = 0; kk < D / 16; kk++)
    qf[kk] = ldsm_x4(sQ, [&](int l) {
      return mma::ldsm_a(l).row * stride + 16 * kk + mma::ldsm_a(l).col;
    }, false);
  Acc s[N / 8] = {};
  for (int kk = 0; kk < D / 16; kk++)
    for (int np = 0; np < N / 16; np++) {
      const Regs kf = ldsm_x4(sK, [&](int l) {
        return (16 * np + mma::ldsm_b(l).row) * stride + 16 * kk + mma::ldsm_b(l).col;
      }, false);
      mma_x(s[2 * np], qf[kk], kf, 0);
      mma_x(s[2 * np + 1], qf[kk], kf, 2);
    }
  std::vector<float> S(16 * N, 0.0f), O(16 * D, 0.0f);
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < N; j++)
      for (int c = 0; c < D; c++) S[i * N + j] += q[i * D + c] * k[j * D + c];
  for (int nt = 0; nt < N / 8; nt++)
    for (int lane = 0; lane < 32; lane++)
      for (int e = 0; e < 4; e++) {
        const Coord c = mma::c_coord(lane, e);
        ASSERT_EQ(s[nt][lane][e], S[c.row * N + 8 * nt + c.col]);
      }
  // O = S V with S rounded to bf16 (|S| <= 576 has 10 significant bits: round it ourselves)
  Acc o[D / 8] = {};
  for (int kt = 0; kt < N / 16; kt++) {
    const Regs pf = c_to_a_regs(s[2 * kt], s[2 * kt + 1]);
    for (int dp = 0; dp < D / 16; dp++) {
      const Regs vf = ldsm_x4(sV, [&](int l) {
        return (16 * kt + mma::ldsm_bt(l).row) * stride + 16 * dp + mma::ldsm_bt(l).col;
      }, true);
      mma_x(o[2 * dp], pf, vf, 0);
      mma_x(o[2 * dp + 1], pf, vf, 2);
    }
  }
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < N; j++)
      for (int c = 0; c < D; c++) O[i * D + c] += fl(bf(S[i * N + j])) * v[j * D + c];
  for (int dt = 0; dt < D / 8; dt++)
    for (int lane = 0; lane < 32; lane++)
      for (int e = 0; e < 4; e++) {
        const Coord c = mma::c_coord(lane, e);
        const float want = O[c.row * D + 8 * dt + c.col];
        ASSERT_NEAR(o[dt][lane][e], want, 1e-6 * std::fabs(want));
      }
}

}  // namespace
