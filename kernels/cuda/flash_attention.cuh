// kernels/cuda/flash_attention.cuh: what the flash attention forward and backward kernels
// share: the tile geometry, tile loads, the dropout index, the tiles a pass needs, shared-memory
// set-up.
//
// Tiles are 32 query rows by 32 key rows: 32 is the warp width, so lane j of a warp can
// own key j of a tile and reduce over keys with shuffles. A block has 4 warps; warp w owns
// rows w, w + 4, ..., w + 28 of its tile.
//
// The kernels are templated on the storage type T (float or bf16) of q, k, v, o, dout, dk
// and dv. Shared-memory tiles are always fp32: load_tile widens as it copies, so all the
// tile arithmetic is the fp32 kernel's, and only the final writes round (store). lse and dq
// stay float in both (dq sums the ring's passes, so it is not rounded between them).
//
// Head dim D is limited by shared memory per block: D <= 192 fits the A100 (163 KiB),
// D <= 256 the H100/H200 (227 KiB); a larger D throws (prepare_smem).
//
// defines: kTile, kWarps, kRowsPerWarp, kFlashThreads, load_tile, dot, kept, key_tiles,
//          check_flash_shape, prepare_smem
#pragma once
#include <string>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/math.h"
#include "kernels/ops/flash_attention.h"

namespace kernels {
namespace cuda {

constexpr int kTile = 32;
constexpr int kWarps = 4;
constexpr int kRowsPerWarp = kTile / kWarps;
constexpr int kFlashThreads = kWarps * 32;

// Copies `rows` rows of a (rows, D) head slice into a (kTile, stride) shared tile and
// zero-fills the rest, so partial tiles at the end of a pass's rows need no special case.
// Key tiles use stride D + 1: lane j reads row j, and an odd stride puts the 32 lanes'
// reads of one channel in 32 different banks.
template <typename T>
__device__ inline void load_tile(float* dst, int stride, const T* src, int rows, int D) {
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    dst[r * stride + d] = r < rows ? to_float(src[(size_t)r * D + d]) : 0.0f;
  }
}

__device__ inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int d = 0; d < n; d++) s += a[d] * b[d];
  return s;
}

// Dropout keep bit of probability (i, j) of query head h of batch b in the pass blk (i, j the
// pass's local query and key rows): the index blk.dropout_index(b, h, i, j) is the one the
// naive path's attention_dropout_forward draws, and the single-rank whole sequence's for the
// same global positions.
__device__ inline bool kept(float p, uint64_t seed, uint64_t rng_stream, const AttentionBlock& blk,
                            int b, int h, int i, int j) {
  return p <= 0.0f || dropout_keep(seed, rng_stream, blk.dropout_index(b, h, i, j), p);
}

// Key tiles a query tile needs: keys j < blk.visible(last row) (visible grows along the rows).
__device__ inline int key_tiles(const AttentionBlock& blk, int last_row) {
  return (blk.visible(last_row) + kTile - 1) / kTile;
}

// The lse of a view sits at head_stride / D per head, so the q view's stride must be whole rows.
inline void check_flash_shape(int A, int G, int D, const AttentionBlock& blk) {
  if (G <= 0 || A % G != 0 || D <= 0 || blk.q.head_stride % D != 0)
    throw std::runtime_error(
        "flash attention: need G > 0, A % G == 0, D > 0 and whole rows per head (A=" +
        std::to_string(A) + " G=" + std::to_string(G) + " D=" + std::to_string(D) +
        " q head_stride=" + std::to_string(blk.q.head_stride) + ")");
}

// Tiles of a large head dim exceed the default 48 KiB of dynamic shared memory per block;
// the kernel must opt in, up to the device's limit (227 KiB on H100/H200, 163 KiB on A100).
template <typename Kernel>
inline void prepare_smem(Kernel kernel, size_t bytes) {
  int device = 0, limit = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > (size_t)limit)
    throw std::runtime_error("flash attention: this head dim needs " + std::to_string(bytes) +
                             " bytes of shared memory per block, the GPU allows " +
                             std::to_string(limit) + "; use the naive attention");
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

}  // namespace cuda
}  // namespace kernels
