// kernels/cuda/flash_attention_backward.cu: the FlashAttention backward pass of one attention
// pass (kernels/math.h AttentionBlock). Recomputes the probabilities tile by tile from q, k and
// the saved lse instead of reading a stored probability matrix.
//
// With s_ij = scale q_i . k_j, P_ij = exp(s_ij - lse_i) (0 for j >= blk.visible(i)),
// z_ij = keep_ij/(1-p), and lse, o the whole row's (after the ring's merge, or this pass's
// when the pass is the whole sequence):
//   Step 1  D_i   = dO_i . o_i              (= sum_j P_ij dP_ij over every key of the row)
//   Step 2  dP_ij = z_ij (dO_i . v_j)
//   Step 3  dS_ij = P_ij (dP_ij - D_i)      (softmax backward)
//   Step 4  dV_j  += sum_i P_ij z_ij dO_i
//   Step 5  dK_j  += scale sum_i dS_ij q_i
//   Step 6  dQ_i  += scale sum_j dS_ij k_j
// The sums run over this pass's rows; the ring adds the passes' shares ("+=" into dq, dk, dv;
// the caller zeroes them first). dQ sums over keys and dK, dV over queries (and, with GQA,
// over the A/G query heads that share a key/value group). Rather than atomics, two kernels each
// own what they write: flash_dq_kernel, one block per (query tile, head), loops over the key
// tiles its rows see; flash_dkdv_kernel, one block per (key tile, group), loops over the
// group's heads and the query tiles some row of which sees the key tile. Steps 2-3 are
// recomputed in both (7 tile products instead of a fused backward's 5) in exchange for a
// deterministic result and no scratch buffer. With bf16 storage each block sums its share
// of dk, dv in fp32, adds it to the widened value and rounds once.
// Thread layout and views as in the forward: warp w owns query rows w + 4r, lane j owns key j.
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/flash_mma.h"  // flash_mma_forward / _backward: the tensor-core kernels

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), cublas(), kThreads, grid_1d, the reductions

// Steps 2-3 for query row il and key row jl of the current tiles: returns dS_ij and stores
// P_ij z_ij in *pz.
__device__ inline float prob_grad(const float* sQ, const float* sdO, const float* sK,
                                  const float* sV, int Dk, int D, int il, int jl, bool valid,
                                  bool keep, float kept_scale, float scale, float lse_i, float D_i,
                                  float* pz) {
  if (!valid) {
    *pz = 0.0f;
    return 0.0f;
  }
  const float p = expf(scale * dot(sQ + il * D, sK + jl * Dk, D) - lse_i);
  const float z = keep ? kept_scale : 0.0f;
  *pz = p * z;
  return p * (z * dot(sdO + il * D, sV + jl * Dk, D) - D_i);
}

// Step 1 for the rows warp `warp` owns: D_i, lse_i and the visible key count n_i, replicated
// in every lane. q0: the tile's first row in the pass.
template <typename T>
__device__ inline void row_stats(float* D_rows, float* lse_rows, int* visible, const float* sdO,
                                 const T* o_tile, const float* lse_tile, int q0, int nq, int D,
                                 const AttentionBlock& blk) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int il = warp + r * kWarps;
    float s = 0.0f;
    if (il < nq)
      for (int d = lane; d < D; d += 32)
        s += sdO[il * D + d] * to_float(o_tile[(size_t)il * D + d]);
    D_rows[r] = warp_sum(s);
    lse_rows[r] = il < nq ? lse_tile[il] : 0.0f;
    visible[r] = il < nq ? blk.visible(q0 + il) : 0;
  }
}

// mirrors the dq part of flash_attention_backward<Device::CPU> (Steps 1-3, 6). Shared memory:
//   sQ (32, D)  sdO (32, D)  sdQ (32, D)  sK (32, D+1)  sV (32, D+1)  sdS (32, 32)
template <typename T>
__global__ void flash_dq_kernel(float* dq, const T* dout, const T* q, const T* k, const T* v,
                                const T* o, const float* lse, int A, int G, int D, float scale,
                                float dropout_p, uint64_t seed, uint64_t rng_stream,
                                AttentionBlock blk) {
  extern __shared__ float smem[];
  const int Dk = D + 1;
  float* sQ = smem;
  float* sdO = sQ + kTile * D;
  float* sdQ = sdO + kTile * D;
  float* sK = sdQ + kTile * D;
  float* sV = sK + kTile * Dk;
  float* sdS = sV + kTile * Dk;

  const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = qt * kTile, nq = min(kTile, blk.q.rows - q0), Sk = blk.k.rows;
  const size_t bh = (size_t)b * A + h;
  const size_t bg = (size_t)b * G + h / (A / G);
  const size_t row0 = bh * blk.q.head_stride + (size_t)q0 * D;
  const T* k_bg = k + bg * blk.k.head_stride;
  const T* v_bg = v + bg * blk.k.head_stride;
  const float kept_scale = dropout_p < 1.0f ? 1.0f / (1.0f - dropout_p) : 0.0f;

  load_tile(sQ, D, q + row0, nq, D);
  load_tile(sdO, D, dout + row0, nq, D);
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) sdQ[e] = 0.0f;
  __syncthreads();
  float D_rows[kRowsPerWarp], lse_rows[kRowsPerWarp];
  int visible[kRowsPerWarp];
  row_stats(D_rows, lse_rows, visible, sdO, o + row0, lse + bh * (blk.q.head_stride / D) + q0, q0,
            nq, D, blk);

  const int tiles = key_tiles(blk, q0 + nq - 1);
  for (int kt = 0; kt < tiles; kt++) {
    const int k0 = kt * kTile, nk = min(kTile, Sk - k0);
    __syncthreads();  // the previous tile's sK and sdS are no longer read
    load_tile(sK, Dk, k_bg + (size_t)k0 * D, nk, D);
    load_tile(sV, Dk, v_bg + (size_t)k0 * D, nk, D);
    __syncthreads();
    for (int r = 0; r < kRowsPerWarp; r++) {
      const int il = warp + r * kWarps, i = q0 + il, j = k0 + lane;
      const bool valid = il < nq && lane < nk && j < visible[r];
      const bool keep = valid && kept(dropout_p, seed, rng_stream, blk, b, h, i, j);
      float pz;
      sdS[il * kTile + lane] = prob_grad(sQ, sdO, sK, sV, Dk, D, il, lane, valid, keep, kept_scale,
                                         scale, lse_rows[r], D_rows[r], &pz);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
      const int il = e / D, d = e % D;
      float acc = 0.0f;
      for (int jl = 0; jl < nk; jl++) acc += sdS[il * kTile + jl] * sK[jl * Dk + d];
      sdQ[e] += acc;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < nq * D; e += blockDim.x) dq[row0 + e] += scale * sdQ[e];
}

// mirrors the dk, dv part of flash_attention_backward<Device::CPU> (Steps 1-5). Shared memory:
//   sK (32, D+1)  sV (32, D+1)  sdK (32, D)  sdV (32, D)  sQ (32, D)  sdO (32, D)
//   sPz (32, 32)  sdS (32, 32)
template <typename T>
__global__ void flash_dkdv_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                                  const T* o, const float* lse, int A, int G, int D, float scale,
                                  float dropout_p, uint64_t seed, uint64_t rng_stream,
                                  AttentionBlock blk) {
  extern __shared__ float smem[];
  const int Dk = D + 1;
  float* sK = smem;
  float* sV = sK + kTile * Dk;
  float* sdK = sV + kTile * Dk;
  float* sdV = sdK + kTile * D;
  float* sQ = sdV + kTile * D;
  float* sdO = sQ + kTile * D;
  float* sPz = sdO + kTile * D;
  float* sdS = sPz + kTile * kTile;

  const int kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = kt * kTile, nk = min(kTile, blk.k.rows - k0), Sq = blk.q.rows;
  const int heads_per_group = A / G, query_tiles = (Sq + kTile - 1) / kTile;
  const size_t key_row0 = ((size_t)b * G + g) * blk.k.head_stride + (size_t)k0 * D;
  const size_t lse_stride = blk.q.head_stride / D;
  const float kept_scale = dropout_p < 1.0f ? 1.0f / (1.0f - dropout_p) : 0.0f;

  load_tile(sK, Dk, k + key_row0, nk, D);
  load_tile(sV, Dk, v + key_row0, nk, D);
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) sdK[e] = sdV[e] = 0.0f;

  for (int h = g * heads_per_group; h < (g + 1) * heads_per_group; h++) {
    const size_t bh = (size_t)b * A + h;
    for (int qt = 0; qt < query_tiles; qt++) {
      const int q0 = qt * kTile, nq = min(kTile, Sq - q0);
      // No row of the tile sees key k0 (the tile's last row sees the most): all masked. The
      // same answer in every thread, so the barriers below stay uniform.
      if (blk.visible(q0 + nq - 1) <= k0) continue;
      const size_t row0 = bh * blk.q.head_stride + (size_t)q0 * D;
      __syncthreads();  // the previous tile's sQ, sdO, sPz, sdS are no longer read
      load_tile(sQ, D, q + row0, nq, D);
      load_tile(sdO, D, dout + row0, nq, D);
      __syncthreads();
      float D_rows[kRowsPerWarp], lse_rows[kRowsPerWarp];
      int visible[kRowsPerWarp];
      row_stats(D_rows, lse_rows, visible, sdO, o + row0, lse + bh * lse_stride + q0, q0, nq, D,
                blk);
      for (int r = 0; r < kRowsPerWarp; r++) {
        const int il = warp + r * kWarps, i = q0 + il, j = k0 + lane;
        const bool valid = il < nq && lane < nk && j < visible[r];
        const bool keep = valid && kept(dropout_p, seed, rng_stream, blk, b, h, i, j);
        sdS[il * kTile + lane] =
            prob_grad(sQ, sdO, sK, sV, Dk, D, il, lane, valid, keep, kept_scale, scale, lse_rows[r],
                      D_rows[r], &sPz[il * kTile + lane]);
      }
      __syncthreads();
      // One thread per (key row jl, channel d): sums over the tile's query rows.
      for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
        const int jl = e / D, d = e % D;
        float acc_k = 0.0f, acc_v = 0.0f;
        for (int il = 0; il < nq; il++) {
          acc_v += sPz[il * kTile + jl] * sdO[il * D + d];
          acc_k += sdS[il * kTile + jl] * sQ[il * D + d];
        }
        sdK[e] += acc_k;
        sdV[e] += acc_v;
      }
    }
  }
  __syncthreads();
  // "+=": for bf16 the block's fp32 share is added to the widened value and rounded once.
  for (int e = threadIdx.x; e < nk * D; e += blockDim.x) {
    T& dk_e = dk[key_row0 + e];
    T& dv_e = dv[key_row0 + e];
    store(dk_e, to_float(dk_e) + scale * sdK[e]);
    store(dv_e, to_float(dv_e) + sdV[e]);
  }
}

// The shared tiles are fp32 for either T, so the shared-memory sizes do not depend on it.
template <typename T>
static void flash_backward_launch(float* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                                  const T* v, const T* o, const float* lse, int B, int A, int G,
                                  int D, float scale, float dropout_p, uint64_t seed,
                                  uint64_t rng_stream, const AttentionBlock& blk) {
  if (B == 0 || A == 0 || blk.q.rows == 0 || blk.k.rows == 0) return;
  check_flash_shape(A, G, D, blk);

  const size_t dq_bytes =
      ((size_t)kTile * D * 3 + (size_t)kTile * (D + 1) * 2 + kTile * kTile) * sizeof(float);
  prepare_smem(flash_dq_kernel<T>, dq_bytes);
  const int q_tiles = (blk.q.rows + kTile - 1) / kTile;
  flash_dq_kernel<<<dim3(q_tiles, A, B), kFlashThreads, dq_bytes, stream()>>>(
      dq, dout, q, k, v, o, lse, A, G, D, scale, dropout_p, seed, rng_stream, blk);
  KERNEL_CHECK();

  const size_t dkdv_bytes =
      ((size_t)kTile * (D + 1) * 2 + (size_t)kTile * D * 4 + 2 * kTile * kTile) * sizeof(float);
  prepare_smem(flash_dkdv_kernel<T>, dkdv_bytes);
  const int k_tiles = (blk.k.rows + kTile - 1) / kTile;
  flash_dkdv_kernel<<<dim3(k_tiles, G, B), kFlashThreads, dkdv_bytes, stream()>>>(
      dk, dv, dout, q, k, v, o, lse, A, G, D, scale, dropout_p, seed, rng_stream, blk);
  KERNEL_CHECK();
}

template <> void flash_attention_backward<Device::CUDA, float>(
    float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
    const float* v, const float* o, const float* lse, int B, int A, int G, int D, float scale,
    float dropout_p, uint64_t seed, uint64_t rng_stream, const AttentionBlock& blk) {
  flash_backward_launch(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale, dropout_p, seed,
                        rng_stream, blk);
}
template <> void flash_attention_backward<Device::CUDA, bf16>(
    float* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
    const bf16* o, const float* lse, int B, int A, int G, int D, float scale, float dropout_p,
    uint64_t seed, uint64_t rng_stream, const AttentionBlock& blk) {
  // the tensor-core kernels (flash_mma_backward.cu) where they take the shape; else these
  if (flash_mma_backward(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale, dropout_p, seed,
                         rng_stream, blk))
    return;
  flash_backward_launch(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale, dropout_p, seed,
                        rng_stream, blk);
}
template <> void flash_attention_backward<Device::CUDA, fp16>(
    float* dq, fp16* dk, fp16* dv, const fp16* dout, const fp16* q, const fp16* k, const fp16* v,
    const fp16* o, const float* lse, int B, int A, int G, int D, float scale, float dropout_p,
    uint64_t seed, uint64_t rng_stream, const AttentionBlock& blk) {
  // the tensor-core kernels (flash_mma_backward.cu) where they take the shape; else these
  if (flash_mma_backward(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale, dropout_p, seed,
                         rng_stream, blk))
    return;
  flash_backward_launch(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale, dropout_p, seed,
                        rng_stream, blk);
}

}  // namespace kernels
