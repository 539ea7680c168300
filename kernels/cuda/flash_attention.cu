// kernels/cuda/flash_attention.cu: attention without materialising the probabilities (Dao et
// al. 2022, FlashAttention), forward pass, on one pass of query rows against key rows
// (kernels/math.h AttentionBlock: the whole causal sequence, or one step of ring attention).
// The backward is in flash_attention_backward.cu; both share flash_attention.cuh. Together
// they are the CUDA twins of kernels/ops/flash_attention.h, mirroring
// kernels/cpu/flash_attention.cpp.
//
// One thread block per (query tile of 32 rows, head h, batch b). It keeps its query tile
// and an unnormalised output accumulator in shared memory and walks the key/value tiles
// 0 .. the one holding the last key its last row sees: query row i sees keys
// j < n_i = blk.visible(i), a prefix that grows with i, so no later tile has a visible key.
// For each key tile, with s_ij = scale q_i . k_j (masked to -inf for j >= n_i), row i updates
// its running max m and running sum l (the online softmax):
//   m' = max(m, max_j s_ij)       c = exp(m - m')
//   l' = c l + sum_j exp(s_ij - m')
//   O' = c O + sum_j exp(s_ij - m') z_ij v_j         z_ij = dropout keep bit of (i, j)
// and at the end o_i = O / (l (1 - p)), lse_i = m + log l. l sums the probabilities before
// dropout, so lse is the true log-sum-exp and the backward can rebuild P = exp(s - lse). A row
// that sees no key (n_i = 0, l = 0) gets o_i = 0 and lse_i = -inf, which the ring's merge
// treats as "nothing to add".
//
// Work split: warp w owns query rows w, w+4, ..., w+28 of the tile and lane j owns key j of
// the tile, so a row's max and sum are warp shuffles and m, l live in registers. The
// P V product runs one thread per (row, channel) over shared memory.
// Views: rows of head bh of q, o start at bh * blk.q.head_stride (those of group bg of k, v at
// bg * blk.k.head_stride), D apart; lse_i of head bh is at bh * (blk.q.head_stride / D) + i.
// GQA: query head h reads key/value group h / (A / G).
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/flash_mma.h"  // flash_mma_forward / _backward: the tensor-core kernels

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), cublas(), kThreads, grid_1d, the reductions

// mirrors flash_attention_forward<Device::CPU>. Shared memory, in floats:
//   sQ (32, D)  sK (32, D+1)  sV (32, D)  sP (32, 32)  sO (32, D)  sCorr (32)  sScale (32)
template <typename T>
__global__ void flash_forward_kernel(T* o, float* lse, const T* q, const T* k, const T* v, int A,
                                     int G, int D, float scale, float dropout_p, uint64_t seed,
                                     uint64_t rng_stream, AttentionBlock blk) {
  extern __shared__ float smem[];
  const int Dk = D + 1;
  float* sQ = smem;
  float* sK = sQ + kTile * D;
  float* sV = sK + kTile * Dk;
  float* sP = sV + kTile * D;
  float* sO = sP + kTile * kTile;
  float* sCorr = sO + kTile * D;
  float* sScale = sCorr + kTile;

  const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = qt * kTile, nq = min(kTile, blk.q.rows - q0), Sk = blk.k.rows;
  const size_t bh = (size_t)b * A + h;
  const size_t bg = (size_t)b * G + h / (A / G);
  const size_t q_row0 = bh * blk.q.head_stride + (size_t)q0 * D;
  const T* k_bg = k + bg * blk.k.head_stride;
  const T* v_bg = v + bg * blk.k.head_stride;
  const float kept_scale = dropout_p < 1.0f ? 1.0f / (1.0f - dropout_p) : 0.0f;

  load_tile(sQ, D, q + q_row0, nq, D);
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) sO[e] = 0.0f;

  float m[kRowsPerWarp], l[kRowsPerWarp];
  int visible[kRowsPerWarp];
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int il = warp + r * kWarps;
    m[r] = -INFINITY;
    l[r] = 0.0f;
    visible[r] = il < nq ? blk.visible(q0 + il) : 0;
  }

  const int tiles = key_tiles(blk, q0 + nq - 1);
  for (int kt = 0; kt < tiles; kt++) {
    const int k0 = kt * kTile, nk = min(kTile, Sk - k0);
    __syncthreads();  // the previous tile's sK, sV, sP are no longer read
    load_tile(sK, Dk, k_bg + (size_t)k0 * D, nk, D);
    load_tile(sV, D, v_bg + (size_t)k0 * D, nk, D);
    __syncthreads();

    for (int r = 0; r < kRowsPerWarp; r++) {
      const int il = warp + r * kWarps, i = q0 + il, j = k0 + lane;
      const bool valid = il < nq && lane < nk && j < visible[r];
      const float s = valid ? scale * dot(sQ + il * D, sK + lane * Dk, D) : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(s));
      // A row with nothing unmasked yet keeps m = -inf; exp(-inf - -inf) would be NaN.
      const float p = valid ? expf(s - m_new) : 0.0f;
      const float corr = m[r] == -INFINITY ? 0.0f : expf(m[r] - m_new);
      l[r] = corr * l[r] + warp_sum(p);
      m[r] = m_new;
      sP[il * kTile + lane] =
          valid && kept(dropout_p, seed, rng_stream, blk, b, h, i, j) ? p : 0.0f;
      if (lane == 0) sCorr[il] = corr;
    }
    __syncthreads();

    // O = c O + P V, one thread per (row, channel); sP's row is a broadcast read and sV's
    // channels are consecutive across the warp.
    for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
      const int il = e / D, d = e % D;
      float acc = sO[e] * sCorr[il];
      for (int jl = 0; jl < nk; jl++) acc += sP[il * kTile + jl] * sV[jl * D + d];
      sO[e] = acc;
    }
  }

  // Normalise: o = O / (l (1-p)); lse = m + log l. m, l sit in the owning warp's registers.
  // l >= 1 once a key is visible (its max term is e^0), so l = 0 means none was.
  const size_t lse0 = bh * (blk.q.head_stride / D) + q0;
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int il = warp + r * kWarps;
    if (lane == 0 && il < nq) {
      const bool seen = l[r] > 0.0f;
      sScale[il] = seen ? kept_scale / l[r] : 0.0f;
      lse[lse0 + il] = seen ? m[r] + logf(l[r]) : -INFINITY;
    }
  }
  __syncthreads();
  T* o_bh = o + q_row0;
  for (int e = threadIdx.x; e < nq * D; e += blockDim.x) store(o_bh[e], sO[e] * sScale[e / D]);
}

// The shared tiles are fp32 for either T, so the shared-memory size does not depend on it.
template <typename T>
static void flash_forward_launch(T* o, float* lse, const T* q, const T* k, const T* v, int B,
                                 int A, int G, int D, float scale, float dropout_p, uint64_t seed,
                                 uint64_t rng_stream, const AttentionBlock& blk) {
  if (B == 0 || A == 0 || blk.q.rows == 0) return;
  check_flash_shape(A, G, D, blk);
  const size_t floats = (size_t)kTile * D * 3 + (size_t)kTile * (D + 1) + kTile * kTile + 2 * kTile;
  const size_t bytes = floats * sizeof(float);
  prepare_smem(flash_forward_kernel<T>, bytes);
  dim3 grid((blk.q.rows + kTile - 1) / kTile, A, B);
  flash_forward_kernel<<<grid, kFlashThreads, bytes, stream()>>>(o, lse, q, k, v, A, G, D, scale,
                                                                 dropout_p, seed, rng_stream, blk);
  KERNEL_CHECK();
}

template <> void flash_attention_forward<Device::CUDA, float>(
    float* o, float* lse, const float* q, const float* k, const float* v, int B, int A, int G,
    int D, float scale, float dropout_p, uint64_t seed, uint64_t rng_stream,
    const AttentionBlock& blk) {
  flash_forward_launch(o, lse, q, k, v, B, A, G, D, scale, dropout_p, seed, rng_stream, blk);
}
template <> void flash_attention_forward<Device::CUDA, bf16>(
    bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v, int B, int A, int G, int D,
    float scale, float dropout_p, uint64_t seed, uint64_t rng_stream, const AttentionBlock& blk) {
  // the tensor-core kernels (flash_mma_forward.cu) where they take the shape; else these
  if (flash_mma_forward(o, lse, q, k, v, B, A, G, D, scale, dropout_p, seed, rng_stream, blk))
    return;
  flash_forward_launch(o, lse, q, k, v, B, A, G, D, scale, dropout_p, seed, rng_stream, blk);
}
template <> void flash_attention_forward<Device::CUDA, fp16>(
    fp16* o, float* lse, const fp16* q, const fp16* k, const fp16* v, int B, int A, int G, int D,
    float scale, float dropout_p, uint64_t seed, uint64_t rng_stream, const AttentionBlock& blk) {
  // the tensor-core kernels (flash_mma_forward.cu) where they take the shape; else these
  if (flash_mma_forward(o, lse, q, k, v, B, A, G, D, scale, dropout_p, seed, rng_stream, blk))
    return;
  flash_forward_launch(o, lse, q, k, v, B, A, G, D, scale, dropout_p, seed, rng_stream, blk);
}

}  // namespace kernels
