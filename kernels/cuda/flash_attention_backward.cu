// kernels/cuda/flash_attention_backward.cu: the FlashAttention backward pass. Recomputes
// the probabilities tile by tile from q, k and the saved lse instead of reading a stored
// (S, S) matrix.
//
// With s_ij = scale q_i . k_j, P_ij = exp(s_ij - lse_i) (0 for j > i), z_ij = keep_ij/(1-p):
//   Step 1  D_i   = dO_i . o_i              (= sum_j P_ij dP_ij, since o_i = sum_j P_ij z_ij v_j)
//   Step 2  dP_ij = z_ij (dO_i . v_j)
//   Step 3  dS_ij = P_ij (dP_ij - D_i)      (softmax backward)
//   Step 4  dV_j  = sum_i P_ij z_ij dO_i
//   Step 5  dK_j  = scale sum_i dS_ij q_i
//   Step 6  dQ_i  = scale sum_j dS_ij k_j
// dQ sums over keys and dK, dV over queries (and, with GQA, over the A/G query heads that
// share a key/value group). Rather than atomics, two kernels each own what they write:
// flash_dq_kernel, one block per (query tile, head), loops over key tiles; flash_dkdv_kernel,
// one block per (key tile, group), loops over the group's heads and the query tiles at or
// below the diagonal. Steps 2-3 are recomputed in both (7 tile products instead of a fused
// backward's 5) in exchange for a deterministic result and no scratch buffer.
// Thread layout as in the forward: warp w owns query rows w + 4r, lane j owns key j.
#include "kernels/cuda/flash_attention.cuh"

namespace kernels {
namespace cuda {

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

// Step 1 for the rows warp `warp` owns: D_i and lse_i, replicated in every lane.
template <typename T>
__device__ inline void row_stats(float* D_rows, float* lse_rows, const float* sdO, const T* o_tile,
                                 const float* lse_tile, int nq, int D) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int il = warp + r * kWarps;
    float s = 0.0f;
    if (il < nq)
      for (int d = lane; d < D; d += 32)
        s += sdO[il * D + d] * to_float(o_tile[(size_t)il * D + d]);
    D_rows[r] = warp_sum(s);
    lse_rows[r] = il < nq ? lse_tile[il] : 0.0f;
  }
}

// mirrors the dq part of cpu::flash_attention_backward (Steps 1-3, 6). Shared memory:
//   sQ (32, D)  sdO (32, D)  sdQ (32, D)  sK (32, D+1)  sV (32, D+1)  sdS (32, 32)
template <typename T>
__global__ void flash_dq_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v,
                                const T* o, const float* lse, int A, int G, int S, int D,
                                float scale, float dropout_p, uint64_t seed, uint64_t rng_stream) {
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
  const int q0 = qt * kTile, nq = min(kTile, S - q0);
  const size_t bh = (size_t)b * A + h;
  const size_t bg = (size_t)b * G + h / (A / G);
  const size_t row0 = (bh * S + q0) * D;
  const float kept_scale = dropout_p < 1.0f ? 1.0f / (1.0f - dropout_p) : 0.0f;

  load_tile(sQ, D, q + row0, nq, D);
  load_tile(sdO, D, dout + row0, nq, D);
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) sdQ[e] = 0.0f;
  __syncthreads();
  float D_rows[kRowsPerWarp], lse_rows[kRowsPerWarp];
  row_stats(D_rows, lse_rows, sdO, o + row0, lse + bh * S + q0, nq, D);

  for (int kt = 0; kt <= qt; kt++) {
    const int k0 = kt * kTile, nk = min(kTile, S - k0);
    __syncthreads();  // the previous tile's sK and sdS are no longer read
    load_tile(sK, Dk, k + (bg * S + k0) * D, nk, D);
    load_tile(sV, Dk, v + (bg * S + k0) * D, nk, D);
    __syncthreads();
    for (int r = 0; r < kRowsPerWarp; r++) {
      const int il = warp + r * kWarps, i = q0 + il, j = k0 + lane;
      const bool valid = il < nq && lane < nk && j <= i;
      const bool keep = valid && kept(dropout_p, seed, rng_stream, bh, S, i, j);
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
  for (int e = threadIdx.x; e < nq * D; e += blockDim.x) store(dq[row0 + e], scale * sdQ[e]);
}

// mirrors the dk, dv part of cpu::flash_attention_backward (Steps 1-5). Shared memory:
//   sK (32, D+1)  sV (32, D+1)  sdK (32, D)  sdV (32, D)  sQ (32, D)  sdO (32, D)
//   sPz (32, 32)  sdS (32, 32)
template <typename T>
__global__ void flash_dkdv_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                                  const T* o, const float* lse, int A, int G, int S, int D,
                                  float scale, float dropout_p, uint64_t seed,
                                  uint64_t rng_stream) {
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
  const int k0 = kt * kTile, nk = min(kTile, S - k0);
  const int heads_per_group = A / G, query_tiles = (S + kTile - 1) / kTile;
  const size_t key_row0 = (((size_t)b * G + g) * S + k0) * D;
  const float kept_scale = dropout_p < 1.0f ? 1.0f / (1.0f - dropout_p) : 0.0f;

  load_tile(sK, Dk, k + key_row0, nk, D);
  load_tile(sV, Dk, v + key_row0, nk, D);
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) sdK[e] = sdV[e] = 0.0f;

  for (int h = g * heads_per_group; h < (g + 1) * heads_per_group; h++) {
    const size_t bh = (size_t)b * A + h;
    for (int qt = kt; qt < query_tiles; qt++) {  // tiles above the diagonal are all masked
      const int q0 = qt * kTile, nq = min(kTile, S - q0);
      const size_t row0 = (bh * S + q0) * D;
      __syncthreads();  // the previous tile's sQ, sdO, sPz, sdS are no longer read
      load_tile(sQ, D, q + row0, nq, D);
      load_tile(sdO, D, dout + row0, nq, D);
      __syncthreads();
      float D_rows[kRowsPerWarp], lse_rows[kRowsPerWarp];
      row_stats(D_rows, lse_rows, sdO, o + row0, lse + bh * S + q0, nq, D);
      for (int r = 0; r < kRowsPerWarp; r++) {
        const int il = warp + r * kWarps, i = q0 + il, j = k0 + lane;
        const bool valid = il < nq && lane < nk && j <= i;
        const bool keep = valid && kept(dropout_p, seed, rng_stream, bh, S, i, j);
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
  for (int e = threadIdx.x; e < nk * D; e += blockDim.x) {
    store(dk[key_row0 + e], scale * sdK[e]);
    store(dv[key_row0 + e], sdV[e]);
  }
}

// The shared tiles are fp32 for either T, so the shared-memory sizes do not depend on it.
template <typename T>
static void flash_backward_launch(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                                  const T* v, const T* o, const float* lse, int B, int A, int G,
                                  int S, int D, float scale, float dropout_p, uint64_t seed,
                                  uint64_t rng_stream) {
  if (B == 0 || A == 0 || S == 0) return;
  check_flash_shape(A, G, D);
  const int tiles = (S + kTile - 1) / kTile;

  const size_t dq_bytes =
      ((size_t)kTile * D * 3 + (size_t)kTile * (D + 1) * 2 + kTile * kTile) * sizeof(float);
  prepare_smem(flash_dq_kernel<T>, dq_bytes);
  flash_dq_kernel<<<dim3(tiles, A, B), kFlashThreads, dq_bytes, stream()>>>(
      dq, dout, q, k, v, o, lse, A, G, S, D, scale, dropout_p, seed, rng_stream);
  KERNEL_CHECK();

  const size_t dkdv_bytes =
      ((size_t)kTile * (D + 1) * 2 + (size_t)kTile * D * 4 + 2 * kTile * kTile) * sizeof(float);
  prepare_smem(flash_dkdv_kernel<T>, dkdv_bytes);
  flash_dkdv_kernel<<<dim3(tiles, G, B), kFlashThreads, dkdv_bytes, stream()>>>(
      dk, dv, dout, q, k, v, o, lse, A, G, S, D, scale, dropout_p, seed, rng_stream);
  KERNEL_CHECK();
}

void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* o, const float* lse,
                              int B, int A, int G, int S, int D, float scale, float dropout_p,
                              uint64_t seed, uint64_t rng_stream) {
  flash_backward_launch(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, S, D, scale, dropout_p, seed,
                        rng_stream);
}
void flash_attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                              const bf16* k, const bf16* v, const bf16* o, const float* lse,
                              int B, int A, int G, int S, int D, float scale, float dropout_p,
                              uint64_t seed, uint64_t rng_stream) {
  flash_backward_launch(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, S, D, scale, dropout_p, seed,
                        rng_stream);
}

}  // namespace cuda
}  // namespace kernels
