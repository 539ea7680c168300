// kernels/emulator/ptx.h: the PTX instructions paralab's tensor-core kernels issue through
// inline assembly (kernels/cuda/flash_mma.cuh), as the emulated device runs them: each computes
// what the PTX ISA (CUDA 12/13) says the instruction does, with every address checked.
//
//   ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16   ldmatrix_x4: a warp collective. Lane L
//       gives the address of row L % 8 of 8 x 8 matrix L / 8 (16 bytes, 16-aligned, shared);
//       register m of lane L receives matrix m's row L / 4, elements 2 (L % 4) and 2 (L % 4) + 1
//       (lower-indexed in the low half); .trans: column L / 4, rows 2 (L % 4) and 2 (L % 4) + 1.
//       PTX ISA, "Warp-level matrix load instruction: ldmatrix".
//   mma.sync.aligned.m16n8k16.row.col.f32.{bf16.bf16,f16.f16}.f32   mma_bf16, mma_f16: a warp
//       collective,
//       D = A B + C over the warp's fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with
//       floating point type"; group = lane / 4, t = lane % 4):
//         A (16 x 16): reg 0 row g cols 2t, 2t+1; reg 1 row g+8; reg 2 row g cols 2t+8, 2t+9;
//                      reg 3 row g+8 cols 2t+8, 2t+9
//         B (16 x 8):  reg 0 rows (k) 2t, 2t+1 of column (n) g; reg 1 rows 2t+8, 2t+9
//         C, D:        c0 c1 row g cols 2t, 2t+1; c2 c3 row g+8
//       The products of bf16 (or f16) values are exact; they are summed with C in double and
//       rounded once to fp32 (the tensor cores' order of summation is not specified).
//   cvt.rn.{bf16x2,f16x2}.f32 d, a, b   cvt_bf16x2, cvt_f16x2: a rounded to nearest even into the
//       upper half, b into the lower; NaN becomes the canonical 0x7fff; f16 overflows to infinity
//       and rounds below 2^-14 to its subnormals (multiples of 2^-24).
//   cp.async.{cg,ca}.shared.global [dst], [src], cp-size, src_size   cp_async: cp-size (4, 8 or
//       16) bytes, src_size of them read from global and the rest zero-filled; dst and src
//       aligned to cp-size (src even when src_size is 0). The copy lands when a
//       cp.async.wait_group covers its group
//       (cp_async_commit / cp_async_wait); until then the destination holds what it held,
//       and racecheck counts it as written (race_check.h).
//
// defines: emu::ptx::{ldmatrix_x4, mma_bf16, mma_f16, cvt_bf16x2, cvt_f16x2, cp_async, cp_async_commit,
//          cp_async_wait}, emu::complete_async_copies
#pragma once
#include <cstddef>
#include <cstdint>

namespace emu {

struct Lane;
// Completes the lane's cp.async copies of every committed group but the newest `keep`
// (exiting: every copy, committed or not, with keep = 0 and everything = true).
void complete_async_copies(Lane& lane, size_t keep, bool everything = true);

namespace ptx {

void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans);
void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
uint32_t cvt_bf16x2(float a, float b);
uint32_t cvt_f16x2(float a, float b);
void cp_async(void* dst, const void* src, uint32_t bytes, uint32_t src_bytes);
void cp_async_commit();
void cp_async_wait(int groups_in_flight);

}  // namespace ptx
}  // namespace emu
