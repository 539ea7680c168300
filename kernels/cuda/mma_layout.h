// kernels/cuda/mma_layout.h: where the elements of a tensor-core tile sit among a warp's 32
// lanes, for mma.sync.aligned.m16n8k16 on 16-bit inputs (bf16) with fp32 accumulators, and
// which shared-memory row each lane hands ldmatrix. Plain C++ (HD constexpr), so the same
// functions serve the CUDA kernels (kernels/cuda/flash_mma_*.cu) and the CPU tests that hold
// them to the ISA's tables (tests/test_flash_mma_layout.cpp, tests/emulator/test_ptx.cpp).
//
// Source: PTX ISA (CUDA 12/13), section "Matrix Fragments for mma.m16n8k16 with floating point
// type" (9.7.14.5.8 in PTX ISA 8.x) and "Warp-level matrix load instruction: ldmatrix"
// (9.7.14.5.15). A lane is 4 * group + tig: group = lane / 4 (0..7, "groupID"), tig = lane % 4
// ("threadID_in_group"). A register of 16-bit elements holds two, the lower-indexed one in
// its low half.
//
//   A (16 x 16, row-major "row"), 8 elements = 4 registers a0..a3 per lane:
//     a0: (group,     2tig..2tig+1)     a2: (group,     2tig+8..2tig+9)
//     a1: (group + 8, 2tig..2tig+1)     a3: (group + 8, 2tig+8..2tig+9)
//   B (16 x 8, k x n, "col"), 4 elements = 2 registers b0, b1:
//     b0: (k = 2tig..2tig+1, n = group)  b1: (k = 2tig+8..2tig+9, n = group)
//   C, D (16 x 8, fp32), 4 elements c0..c3:
//     c0, c1: (group, 2tig), (group, 2tig+1)   c2, c3: (group + 8, 2tig), (group + 8, 2tig+1)
//
//            col: 0 1 | 2 3 | 4 5 | 6 7          C of one m16n8 tile: lane 4g+t holds
//   row  0        L0  | L1  | L2  | L3            columns 2t, 2t+1 of rows g and g+8
//   row  1        L4  | L5  | L6  | L7            (c0 c1 above, c2 c3 below).
//   ...
//   row  7        L28 | L29 | L30 | L31
//   row  8        L0  | L1  | L2  | L3   <- c2, c3
//   ...
//   row 15        L28 | L29 | L30 | L31
//
// The register trick of FlashAttention-2: the C tiles of columns [16t, 16t+8) and
// [16t+8, 16t+16) hold, lane for lane, exactly the A fragment of the 16 x 16 block [16t, 16t+16):
//   a0 = C[2t](c0, c1)  a1 = C[2t](c2, c3)  a2 = C[2t+1](c0, c1)  a3 = C[2t+1](c2, c3)
// so the scores S = Q K^T, once turned into probabilities and rounded to bf16, feed O += P V
// with no shuffle (c_to_a below).
//
// ldmatrix.m8n8.x4.b16: lane L hands the address of row L % 8 of 8 x 8 matrix L / 8 (each row
// 8 consecutive 16-bit elements, 16 bytes, 16-byte aligned); register m of every lane receives
// matrix m, lane L holding row L / 4, elements 2(L % 4), 2(L % 4) + 1 -- or, with .trans, the
// transpose: elements (row 2(L % 4), col L / 4) and (row 2(L % 4) + 1, col L / 4).
// The three loads the flash kernels use, as (row, col) of the 16 x 16 block a lane points at:
//   ldsm_a:  an A fragment of a row-major 16 x 16 block (Q rows x head channels)
//   ldsm_b:  B fragments of two n-tiles from a row-major (n, k) block: S = Q K^T reads K's
//            rows (keys = n) with their channels (= k) contiguous
//   ldsm_bt: B fragments of two n-tiles from a row-major (k, n) block with .trans: O += P V
//            reads V's rows (keys = k) with their channels (= n) contiguous
//
// defines: kernels::mma::{Coord, group_of, tig_of, a_coord, b_coord, c_coord, c_to_a,
//          ldsm_coord, ldsm_a, ldsm_b, ldsm_bt}
#pragma once
#include "kernels/common.h"  // HD

namespace kernels {
namespace mma {

struct Coord {
  int row, col;
};

HD constexpr int group_of(int lane) { return lane >> 2; }
HD constexpr int tig_of(int lane) { return lane & 3; }

// Element e (0..7; register e / 2, half e % 2) of lane's A fragment (16 x 16).
HD constexpr Coord a_coord(int lane, int e) {
  return Coord{group_of(lane) + 8 * ((e >> 1) & 1), 2 * tig_of(lane) + (e & 1) + 8 * (e >> 2)};
}
// Element e (0..3; register e / 2, half e % 2) of lane's B fragment (16 x 8, row = k, col = n).
HD constexpr Coord b_coord(int lane, int e) {
  return Coord{2 * tig_of(lane) + (e & 1) + 8 * (e >> 1), group_of(lane)};
}
// Element e (0..3) of lane's C / D fragment (16 x 8, fp32).
HD constexpr Coord c_coord(int lane, int e) {
  return Coord{group_of(lane) + 8 * (e >> 1), 2 * tig_of(lane) + (e & 1)};
}
// Which C element feeds A element e of the 16 x 16 block made of two adjacent n8 tiles:
// returns 4 * tile + c (tile 0 or 1, c in 0..3). a_coord(lane, e) == c_coord(lane, c) shifted
// by 8 tile columns: the same lane, so no data moves.
HD constexpr int c_to_a(int e) { return 4 * (e >> 2) + (e & 3); }

// Element (row, col) of 8 x 8 matrix `matrix` that lane's register `matrix`, half h, holds
// after ldmatrix (trans: the .trans variant).
HD constexpr Coord ldsm_coord(int lane, int h, bool trans) {
  return trans ? Coord{2 * (lane & 3) + h, lane >> 2} : Coord{lane >> 2, 2 * (lane & 3) + h};
}

// The (row, col) in the 16 x 16 block whose 8-element row lane L addresses, for each x4 load.
// ldsm_a: matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15),
// (rows 8-15, cols 8-15) = registers a0, a1, a2, a3.
HD constexpr Coord ldsm_a(int lane) { return Coord{lane & 15, (lane >> 4) * 8}; }
// ldsm_b (source rows = n, cols = k): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
// (n 8-15, k 8-15) = b0, b1 of n-tile 0, then b0, b1 of n-tile 1.
HD constexpr Coord ldsm_b(int lane) {
  return Coord{(lane & 7) + (lane >> 4) * 8, ((lane >> 3) & 1) * 8};
}
// ldsm_bt (source rows = k, cols = n, .trans): matrices (k 0-7, n 0-7), (k 8-15, n 0-7),
// (k 0-7, n 8-15), (k 8-15, n 8-15) = b0, b1 of n-tile 0, then b0, b1 of n-tile 1.
HD constexpr Coord ldsm_bt(int lane) {
  return Coord{(lane & 7) + ((lane >> 3) & 1) * 8, (lane >> 4) * 8};
}

}  // namespace mma
}  // namespace kernels
