// tests/ptx_isa_tables.h: the PTX ISA's tables of which lane holds which element, written in the
// ISA's own words, for the tests that hold paralab's code to them: tests/test_flash_mma_layout.cpp
// (kernels/cuda/mma_layout.h, the coordinates the kernels use) and tests/emulator/test_ptx.cpp
// (the emulated device's ldmatrix and mma, which the kernels run on it).
//
// Sources: PTX ISA (CUDA 12/13), "Matrix Fragments for mma.m16n8k16 with floating point type"
// and "Warp-level matrix load instruction: ldmatrix". A lane is 4 groupID + threadID_in_group.
//
// defines: ptx_isa::{Coord, a, b, c, ldsm}
#pragma once

namespace ptx_isa {

struct Coord {
  int row, col;
};

// For the 16-bit types of mma.m16n8k16, element i of a lane:
//   A: row = groupID for a_i with i < 2 or 4 <= i < 6, groupID + 8 otherwise;
//      col = threadID_in_group * 2 + (i & 1) for i < 4, threadID_in_group * 2 + (i & 1) + 8 else
inline Coord a(int lane, int i) {
  const int groupID = lane >> 2, tig = lane % 4;
  const int row = (i < 2 || (i >= 4 && i < 6)) ? groupID : groupID + 8;
  const int col = i < 4 ? tig * 2 + (i & 1) : tig * 2 + (i & 1) + 8;
  return Coord{row, col};
}
//   B: row = threadID_in_group * 2 + (i & 1) for b_i with i < 2, ... + 8 for i >= 2; col = groupID
inline Coord b(int lane, int i) {
  const int groupID = lane >> 2, tig = lane % 4;
  return Coord{i < 2 ? tig * 2 + (i & 1) : tig * 2 + (i & 1) + 8, groupID};
}
//   C: row = groupID for c_i with i < 2, groupID + 8 for i >= 2;
//      col = threadID_in_group * 2 + (i & 1)
inline Coord c(int lane, int i) {
  const int groupID = lane >> 2, tig = lane % 4;
  return Coord{i < 2 ? groupID : groupID + 8, tig * 2 + (i & 1)};
}
// ldmatrix: each lane of the warp receives, per 8 x 8 matrix, the pair of row laneid / 4,
// elements 2 (laneid % 4) and 2 (laneid % 4) + 1 (element h of the pair in half h); .trans
// delivers the transpose.
inline Coord ldsm(int lane, int h, bool trans) {
  const Coord c{lane / 4, 2 * (lane % 4) + h};
  return trans ? Coord{c.col, c.row} : c;
}

}  // namespace ptx_isa
