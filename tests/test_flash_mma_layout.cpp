// tests/test_flash_mma_layout.cpp: the fragment layouts of the tensor-core flash attention
// (kernels/cuda/mma_layout.h, the coordinates kernels/cuda/flash_mma_*.cu use) against the PTX
// ISA's documented ones (tests/ptx_isa_tables.h, in the ISA's own words): which lane holds which
// element of A, B, C; that each fragment covers its matrix once; that the scores' C fragments are
// the next product's A fragment (the FlashAttention-2 register trick); that the padded shared
// rows are free of bank conflicts. Plain arithmetic on coordinates: no device, emulated or real.
//
// The instructions themselves run elsewhere, on the emulated CUDA device (kernels/emulator):
// tests/emulator/test_ptx.cpp holds ldmatrix and mma to the same tables and the kernels' lane
// addresses to these fragments; op_check on the emulated device runs the three kernels against
// their CPU twin (scripts/gpu_check.sh --emulated). What only a GPU can check: timing, register
// allocation, and that the emulator's reading of the ISA is the hardware's.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/flash_mma_tiles.h"  // kPad
#include "kernels/cuda/mma_layout.h"
#include "tests/ptx_isa_tables.h"

namespace {

namespace mma = kernels::mma;
namespace fm = kernels::cuda::flash_mma;

// kernels::mma::Coord and ptx_isa::Coord: the same two fields, from two sources.
template <typename A, typename B>
bool same(A a, B b) {
  return a.row == b.row && a.col == b.col;
}

TEST(MmaLayout, FragmentsAreThePtxIsaTables) {
  for (int lane = 0; lane < 32; lane++) {
    for (int i = 0; i < 8; i++) EXPECT_TRUE(same(mma::a_coord(lane, i), ptx_isa::a(lane, i)));
    for (int i = 0; i < 4; i++) EXPECT_TRUE(same(mma::b_coord(lane, i), ptx_isa::b(lane, i)));
    for (int i = 0; i < 4; i++) EXPECT_TRUE(same(mma::c_coord(lane, i), ptx_isa::c(lane, i)));
    for (int h = 0; h < 2; h++)
      for (bool trans : {false, true})
        EXPECT_TRUE(same(mma::ldsm_coord(lane, h, trans), ptx_isa::ldsm(lane, h, trans)));
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
      const mma::Coord c = mma::c_coord(lane, from % 4);
      EXPECT_TRUE(same(mma::a_coord(lane, e), ptx_isa::Coord{c.row, 8 * tile + c.col}));
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
            const mma::Coord c = load(8 * m + r);
            const int byte = (c.row + 8) * stride_bytes + (col0 + c.col) * 2;  // any row offset
            for (int w = 0; w < 4; w++) hits[(byte / 4 + w) % 32]++;
          }
          for (int n : hits) EXPECT_EQ(n, 1) << "D " << D << " matrix " << m;
        }
  }
}

}  // namespace
