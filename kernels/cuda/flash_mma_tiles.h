// kernels/cuda/flash_mma_tiles.h: the tile geometry and bookkeeping of the tensor-core flash
// attention kernels (kernels/cuda/flash_mma_forward.cu, flash_mma_backward.cu). Plain C++
// (HD), so that the CPU tests (tests/test_flash_mma_layout.cpp, tests/emulator/) read the same
// tile sizes and padding the GPU uses.
//
//   kernel      block owns                 streams                  warp owns
//   forward     128 query rows (8 warps)   64-key K, V tiles        16 query rows
//   dq          128 query rows             64-key K, V tiles        16 query rows
//   dkdv        128 key rows               64-query Q, dO tiles     16 key rows
// Shared rows are D + kPad bf16 (flash_mma.cuh says why).
//
// defines: kernels::cuda::flash_mma::{kLog2e, kPad, kWarps, kThreads, Fwd, Dq, Dkv,
//          tile_needs_mask, first_query_seeing}
#pragma once
#include <cstddef>

#include "kernels/common.h"  // HD
#include "kernels/math.h"    // AttentionBlock

namespace kernels {
namespace cuda {
namespace flash_mma {

constexpr float kLog2e = 1.4426950408889634f;  // e^x = 2^(x log2 e): the kernels use exp2
constexpr int kPad = 8;                         // shared rows are D + kPad elements
constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr size_t kElem = 2;  // bytes of a bf16

template <int D>
struct Fwd {
  static constexpr int kBr = 16 * kWarps;  // query rows per block
  static constexpr int kBc = 64;           // key rows per tile
  static constexpr int kStride = D + kPad;
  // sQ (kBr), sK and sV (2 stages of kBc each)
  static constexpr size_t kSmemBytes = (size_t)(kBr + 4 * kBc) * kStride * kElem;
  // Blocks an SM holds: the kernel's launch bound (flash_mma_forward.cu says why).
  static constexpr int kBlocksPerSm = D == 64 ? 2 : 1;
};
template <int D>
struct Dq {
  static constexpr int kBr = 16 * kWarps, kBc = 64, kStride = D + kPad;
  // sQ, sdO (kBr each), sK and sV (2 stages of kBc each)
  static constexpr size_t kSmemBytes = (size_t)(2 * kBr + 4 * kBc) * kStride * kElem;
};
template <int D>
struct Dkv {
  static constexpr int kBc = 16 * kWarps, kBr = 64, kStride = D + kPad;
  // sK, sV (kBc each), sQ and sdO (2 stages of kBr each), then per stage and query row lse_i
  // and delta_i (floats, fetched by cp.async with the tiles) and n_i (an int)
  static constexpr size_t kTileBytes = (size_t)(2 * kBc + 4 * kBr) * kStride * kElem;
  static constexpr size_t kSmemBytes = kTileBytes + 2 * kBr * (2 * sizeof(float) + sizeof(int));
  // The 64 query columns of a step are taken in kParts parts of 64 / kParts: S^T and dP^T
  // (2 x 32 / kParts fp32 per lane) then fit beside dK, dV (2 x D / 2) without spilling. At
  // D 128 halves; sm_80's register allocator still spills 4 bytes there (CUDA 13), so quarters.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static constexpr int kParts = D == 128 ? 4 : 1;
#else
  static constexpr int kParts = D == 128 ? 2 : 1;
#endif
};

// A score tile of rows [r0, r0 + rows) against columns [c0, c0 + cols), where row i sees columns
// j < n_i, needs the per-element mask unless every row exists and sees every column: n_i grows
// with i, so the first row's n_first decides, and rows past the view (r0 + rows > Sq) see none.
HD bool tile_needs_mask(int c0, int cols, int n_first, int r0, int rows, int Sq) {
  return c0 + cols > n_first || r0 + rows > Sq;
}

// The first query row that sees key j (visible(i) > j), q.rows when none: visible grows with i.
// (kernels/cpu/flash_attention.cpp's first_query_seeing.)
HD int first_query_seeing(const AttentionBlock& blk, int j) {
  int lo = 0, hi = blk.q.rows;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (blk.visible(mid) > j) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

}  // namespace flash_mma
}  // namespace cuda
}  // namespace kernels
