// kernels/cuda/flash_mma_backward.cu: flash attention backward on tensor cores (FlashAttention-2,
// Dao 2023) for 16-bit storage (bf16 or fp16, H): mirrors cpu::flash_attention_backward
// (kernels/cpu/flash_attention.cpp) and replaces, where it handles the shape
// (kernels/cuda/flash_mma.h), the scalar flash_attention_backward.cu. The forward's fragments,
// mask and pipeline are explained in flash_mma_forward.cu; the lane layout in mma_layout.h.
//
// With s = q_i . k_j (raw), c = scale log2 e, P_ij = 2^(c s - lse_i log2 e) = e^(scale s - lse_i)
// rebuilt from the forward's lse (0 where j >= n_i = visible(i)), z_ij = keep_ij / (1-p):
//   delta_i = dO_i . o_i                                    delta_kernel, fp32 scratch
//   dP_ij   = z_ij (dO_i . v_j)        dS_ij = P_ij (dP_ij - delta_i)
//   dV_j   += sum_i P_ij z_ij dO_i     dK_j += scale sum_i dS_ij q_i   dkdv_kernel
//   dQ_i   += scale sum_j dS_ij k_j                                    dq_kernel
// Each output element is owned by one thread of one block, so there are no atomics and the
// result is the same bits on every run. The price: S and dP are computed in both kernels, 7
// tile products instead of a fused backward's 5 (14 D FLOPs per visible pair against the
// 10 D the benchmarks count).
//
// dq_kernel: the forward's shape. One block of 8 warps per (query tile of 128 rows, head,
// batch); warp w owns rows [16w, 16w + 16); K and V tiles of 64 keys double-buffered by cp.async.
// Per warp and key tile: S, dP (16 x 64, C fragments: 2 x 32 fp32) from A fragments of the warp's
// Q and dO rows (ldmatrix from sQ, sdO) and B fragments of K and V (ldmatrix); dS is rounded to
// H into A fragments (c_to_a) and dQ (16 x D, D/2 fp32) += dS K with K's B fragments from
// ldmatrix.trans. Shared: sQ, sdO (128, D+8), sK[2], sV[2] (64, D+8) = 136 KiB at D 128.
//
// dkdv_kernel: transposed. One block of 8 warps per (key tile of 128 rows, query head, batch);
// warp w owns keys [16w, 16w + 16) and holds dK, dV (16 x D each, fp32 C fragments: D fp32). It
// loops over the query tiles of 64 rows that see the key tile (from first_query_seeing(k0)),
// double-buffering Q, dO and the rows' lse and delta (all by cp.async) and n_i. With GQA the
// group's heads are separate blocks, their shares summed afterwards by group_sum_kernel:
//
//   S^T  (16 keys x 64 queries) = K_w Q^T    A: K_w (ldmatrix)   B: Q rows (ldmatrix)
//   dP^T (16 x 64)              = V_w dO^T   A: V_w              B: dO rows
//   P^T, dS^T elementwise, on the accumulator layout of mma_layout.h (lane = 4 group + tig):
//     key kw0 + group      queries 8 nt + 2 tig, 8 nt + 2 tig + 1   (c0, c1 of n-tile nt)
//     key kw0 + group + 8  the same two queries                     (c2, c3)
//   so a lane's keys are fixed and its 16 queries read their lse, delta and n_i from shared
//   memory (two floats and an int per query, per stage)
//   dV (16 x D) += (P z)^T dO    A: (P z)^T from registers (c_to_a)   B: dO, ldmatrix.trans
//   dK (16 x D) += dS^T Q        A: dS^T from registers               B: Q, ldmatrix.trans
//
// Shared: sK, sV (128, D+8), sQ[2], sdO[2] (64, D+8), 1.5 KiB of row terms = 137.5 KiB at D 128.
// At the end each lane adds its fp32 dK (times scale) and dV to the widened old H values and
// rounds once (with GQA it writes them to scratch, and group_sum_kernel does that: 2 B A Sk D
// fp32 written and read, 4 bytes an element, against the block's 8 kBc kBr D FLOPs per query
// tile). Per (key tile, query tile): 4 tile products, 8 kBc kBr D FLOPs (8.4 MFLOP at D 128);
// global/L2 reads of Q and dO: 2 kBr D 2 bytes (32 KiB: 256 FLOP per byte).
#include "kernels/cuda/flash_mma.cuh"

namespace kernels {
namespace cuda {
namespace flash_mma {
namespace {

// The two 16-bit values of a 32-bit pair, widened (kernels/float16.h).
template <class H>
__device__ inline float low_16(uint32_t x) { return to_float(H{(uint16_t)(x & 0xffffu)}); }
template <class H>
__device__ inline float high_16(uint32_t x) { return to_float(H{(uint16_t)(x >> 16)}); }

// delta (BH, Sq), one warp per row: delta_i = dO_i . o_i in fp32 from the 16-bit values.
template <class H, int D>
__global__ void delta_kernel(float* delta, const H* dout, const H* o, long long rows,
                             int Sq, long long head_stride) {
  const long long r = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // the whole warp
  const size_t at = (size_t)(r / Sq) * head_stride + (size_t)(r % Sq) * D;
  float s = 0.0f;
#pragma unroll
  for (int col = 2 * lane; col < D; col += 64) {
    const uint32_t g = *reinterpret_cast<const uint32_t*>(dout + at + col);
    const uint32_t y = *reinterpret_cast<const uint32_t*>(o + at + col);
    s += low_16<H>(g) * low_16<H>(y) + high_16<H>(g) * high_16<H>(y);
  }
  s = warp_sum(s);
  if (lane == 0) delta[r] = s;
}

// C (16 x 8NT) = A_w (16 x D, rows of a shared tile) B^T, B = 8NT rows of another shared tile:
// the scores of 16 rows against 8NT (S = Q K^T, dP = dO V^T, S^T = K Q^T, dP^T = V dO^T).
template <class H, int D, int NT>
__device__ inline void rows_times_rows_t(float (&acc)[NT][4], const H* a_rows,
                                         const H* b_rows, int lane) {
  constexpr int kStride = D + kPad;
  const mma::Coord ac = mma::ldsm_a(lane), bc = mma::ldsm_b(lane);
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[nt][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    uint32_t af[4];
    ldsm_x4(af, a_rows + ac.row * kStride + 16 * kk + ac.col);
#pragma unroll
    for (int np = 0; np < NT / 2; np++) {
      uint32_t bf[4];
      ldsm_x4(bf, b_rows + (16 * np + bc.row) * kStride + 16 * kk + bc.col);
      mma_16<H>(acc[2 * np], af, bf[0], bf[1]);
      mma_16<H>(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

// acc (16 x D) += X (16 x 8NT, C fragments in registers, rounded to H here) Y (8NT rows x D
// of a shared tile): O-style products (dQ += dS K, dV += (P z)^T dO, dK += dS^T Q).
template <class H, int D, int NT>
__device__ inline void regs_times_rows(float (&acc)[D / 8][4], const float (&x)[NT][4],
                                       const H* y_rows, int lane) {
  constexpr int kStride = D + kPad;
  const mma::Coord bt = mma::ldsm_bt(lane);
#pragma unroll
  for (int kt = 0; kt < NT / 2; kt++) {
    uint32_t xf[4];
    xf[0] = pack_16x2<H>(x[2 * kt][0], x[2 * kt][1]);
    xf[1] = pack_16x2<H>(x[2 * kt][2], x[2 * kt][3]);
    xf[2] = pack_16x2<H>(x[2 * kt + 1][0], x[2 * kt + 1][1]);
    xf[3] = pack_16x2<H>(x[2 * kt + 1][2], x[2 * kt + 1][3]);
#pragma unroll
    for (int dp = 0; dp < D / 16; dp++) {
      uint32_t yf[4];
      ldsm_x4_trans(yf, y_rows + (16 * kt + bt.row) * kStride + 16 * dp + bt.col);
      mma_16<H>(acc[2 * dp], xf, yf[0], yf[1]);
      mma_16<H>(acc[2 * dp + 1], xf, yf[2], yf[3]);
    }
  }
}

// mirrors the dQ part of cpu::flash_attention_backward. Grid (query tiles, A, B), reversed.
template <class H, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dq_kernel(float* dq, const H* dout, const H* q, const H* k, const H* v,
              const float* lse, const float* delta, int A, int G, float scale, float dropout_p,
              uint64_t seed, uint64_t rng_stream, AttentionBlock blk) {
  using T = Dq<D>;
  constexpr int kBr = T::kBr, kBc = T::kBc, kStride = T::kStride;
  extern __shared__ __align__(16) unsigned char smem[];
  H* sQ = reinterpret_cast<H*>(smem);     // (kBr, kStride)
  H* sdO = sQ + kBr * kStride;            // (kBr, kStride)
  H* sK = sdO + kBr * kStride;            // 2 stages of (kBc, kStride)
  H* sV = sK + 2 * kBc * kStride;         // 2 stages of (kBc, kStride)

  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int Sq = blk.q.rows, q0 = qt * kBr;
  const size_t bh = (size_t)b * A + h, bg = (size_t)b * G + h / (A / G);
  const H* Kh = k + bg * blk.k.head_stride;
  const H* Vh = v + bg * blk.k.head_stride;
  const float c = scale * kLog2e, kept_scale = 1.0f / (1.0f - dropout_p);

  const int key_tiles = (blk.visible(min(q0 + kBr, Sq) - 1) + kBc - 1) / kBc;
  const int w0 = q0 + 16 * warp;  // the warp's rows [w0, w0 + 16), as in the forward
  const int warp_first = blk.visible(min(w0, Sq - 1));
  const int warp_keys = w0 < Sq ? blk.visible(min(w0 + 15, Sq - 1)) : 0;
  // This lane's rows (group, group + 8): keys seen (0 past the view), lse log2 e, delta.
  int row[2], row_keys[2];
  float lse2[2], dl[2];
#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    row[hf] = w0 + mma::group_of(lane) + 8 * hf;
    const bool inside = row[hf] < Sq;
    row_keys[hf] = inside ? blk.visible(row[hf]) : 0;
    lse2[hf] = row_keys[hf] > 0 ? lse[bh * (blk.q.head_stride / D) + row[hf]] * kLog2e : 0.0f;
    dl[hf] = inside ? delta[bh * Sq + row[hf]] : 0.0f;
  }

  load_rows_async<D, kBr, kThreads>(sQ, q + bh * blk.q.head_stride, q0, Sq);
  load_rows_async<D, kBr, kThreads>(sdO, dout + bh * blk.q.head_stride, q0, Sq);
  cp_async_commit();
  if (key_tiles > 0) {
    load_rows_async<D, kBc, kThreads>(sK, Kh, 0, blk.k.rows);
    load_rows_async<D, kBc, kThreads>(sV, Vh, 0, blk.k.rows);
  }
  cp_async_commit();

  float acc[D / 8][4];  // dQ (16 x D) without the scale
#pragma unroll
  for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[dt][e] = 0.0f;

  for (int t = 0; t < key_tiles; t++) {
    const int k0 = t * kBc, stage = t & 1;
    if (t + 1 < key_tiles) {
      load_rows_async<D, kBc, kThreads>(sK + (stage ^ 1) * kBc * kStride, Kh, k0 + kBc, blk.k.rows);
      load_rows_async<D, kBc, kThreads>(sV + (stage ^ 1) * kBc * kStride, Vh, k0 + kBc, blk.k.rows);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    if (k0 < warp_keys) {
      const H* tK = sK + stage * kBc * kStride;
      const uint32_t keep = dropout_p > 0.0f
                                ? keep_bits(blk, b, h, row, k0, lane, dropout_p, dropout_key(seed, rng_stream))
                                : 0xffffffffu;
      float s[8][4], dp[8][4];  // S = Q_w K^T and dP' = dO_w V^T (16 x 64)
      rows_times_rows_t<H, D, 8>(s, sQ + 16 * warp * kStride, tK, lane);
      rows_times_rows_t<H, D, 8>(dp, sdO + 16 * warp * kStride, sV + stage * kBc * kStride, lane);
      const bool mask = tile_needs_mask(k0, kBc, warp_first, w0, 16, Sq);
#pragma unroll
      for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int hf = e >> 1, j = k0 + 8 * nt + mma::c_coord(lane, e).col;
          const float p = !mask || j < row_keys[hf] ? exp2f(fmaf(s[nt][e], c, -lse2[hf])) : 0.0f;
          const float z = (keep >> (4 * nt + e)) & 1u ? kept_scale : 0.0f;  // keep / (1-p)
          s[nt][e] = p * (dp[nt][e] * z - dl[hf]);                        // dS
        }
      regs_times_rows<H, D, 8>(acc, s, tK, lane);  // dQ += dS K
    }
    __syncthreads();
  }
  cp_async_wait<0>();  // no key tile: sQ, sdO may still be in flight; none may outlive the block

#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    if (row[hf] >= Sq) continue;
    float* dq_row = dq + bh * blk.q.head_stride + (size_t)row[hf] * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) {
      float2* at = reinterpret_cast<float2*>(dq_row + 8 * dt + 2 * mma::tig_of(lane));
      float2 x = *at;
      x.x += scale * acc[dt][2 * hf];
      x.y += scale * acc[dt][2 * hf + 1];
      *at = x;
    }
  }
}

// mirrors the dK, dV part of cpu::flash_attention_backward for one query head. Grid (key
// tiles, A, B): each block takes one (key tile, query head, batch), so a GQA group's heads run in
// parallel blocks, not one after another inside one (at Qwen3's shape, G 4 B 1 S 4096, the grid
// over groups was 128 blocks on 132 SMs and the first key tile's block ran all 8 heads' tiles).
// Without GQA (A == G) the block adds its dK, dV to the H outputs itself; with it, its fp32
// share goes to `partial` ((B A, Sk, D) for dK, then for dV) and group_sum_kernel adds a group's
// heads in head order: deterministic, no atomics.
template <class H, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dkdv_kernel(H* dk, H* dv, float* partial, const H* dout, const H* q, const H* k,
                const H* v, const float* lse, const float* delta, int A, int G, float scale,
                float dropout_p, uint64_t seed, uint64_t rng_stream, AttentionBlock blk) {
  using T = Dkv<D>;
  constexpr int kBr = T::kBr, kBc = T::kBc, kStride = T::kStride;
  extern __shared__ __align__(16) unsigned char smem[];
  H* sK = reinterpret_cast<H*>(smem);     // (kBc, kStride)
  H* sV = sK + kBc * kStride;             // (kBc, kStride)
  H* sQ = sV + kBc * kStride;             // 2 stages of (kBr, kStride)
  H* sdO = sQ + 2 * kBr * kStride;        // 2 stages of (kBr, kStride)
  // 2 stages of kBr row terms: lse_i, delta_i (cp.async, with the tiles), and n_i
  float* sLse = reinterpret_cast<float*>(smem + T::kTileBytes);
  float* sDelta = sLse + 2 * kBr;
  int* sKeys = reinterpret_cast<int*>(sDelta + 2 * kBr);

  const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int Sq = blk.q.rows, Sk = blk.k.rows, k0 = kt * kBc, kw0 = k0 + 16 * warp;
  const size_t bg = (size_t)b * G + h / (A / G), bh = (size_t)b * A + h;
  const size_t lse_stride = blk.q.head_stride / D;
  const float c = scale * kLog2e, kept_scale = 1.0f / (1.0f - dropout_p);

  // Query tiles before the first row that sees key k0 see none of the tile.
  const int first = first_query_seeing(blk, k0);
  const int qt_first = first / kBr, steps = first >= Sq ? 0 : (Sq + kBr - 1) / kBr - qt_first;

  // Step s: query tile qt_first + s, into `stage`: its Q and dO rows, and its rows' lse and
  // delta (raw, zero past the view), fetched ahead by cp.async, so no plain load stalls the
  // barrier; n_i is arithmetic.
  auto issue = [&](int s, int stage) {
    const int q0 = (qt_first + s) * kBr;
    load_rows_async<D, kBr, kThreads>(sQ + stage * kBr * kStride, q + bh * blk.q.head_stride, q0,
                                      Sq);
    load_rows_async<D, kBr, kThreads>(sdO + stage * kBr * kStride, dout + bh * blk.q.head_stride,
                                      q0, Sq);
    if (threadIdx.x < kBr) {
      const int i = q0 + threadIdx.x;
      const bool inside = i < Sq;
      sKeys[stage * kBr + threadIdx.x] = inside ? blk.visible(i) : 0;
      cp_async_4(sLse + stage * kBr + threadIdx.x, lse + bh * lse_stride + (inside ? i : 0), inside);
      cp_async_4(sDelta + stage * kBr + threadIdx.x, delta + bh * Sq + (inside ? i : 0), inside);
    }
  };

  load_rows_async<D, kBc, kThreads>(sK, k + bg * blk.k.head_stride, k0, Sk);
  load_rows_async<D, kBc, kThreads>(sV, v + bg * blk.k.head_stride, k0, Sk);
  if (steps > 0) issue(0, 0);
  cp_async_commit();

  float acc_k[D / 8][4], acc_v[D / 8][4];  // dK (without the scale), dV: 16 x D each
#pragma unroll
  for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc_k[dt][e] = acc_v[dt][e] = 0.0f;

  for (int s = 0; s < steps; s++) {
    const int stage = s & 1, q0 = (qt_first + s) * kBr;
    if (s + 1 < steps) {
      issue(s + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    const int n_first = blk.visible(q0), n_last = blk.visible(min(q0 + kBr, Sq) - 1);
    if (kw0 < n_last) {  // some query of the tile sees some key of the warp (warp-uniform)
      const H* tQ = sQ + stage * kBr * kStride;
      const H* tdO = sdO + stage * kBr * kStride;
      // Dropout's keep bits of the lane's 32 elements (bit 4 nt + e: key kw0 + row, query
      // q0 + 8 nt + col of c_coord(lane, e)), drawn while only the accumulators are live.
      uint32_t keep = 0xffffffffu;
      if (dropout_p > 0.0f) {
        keep = 0;
        const uint64_t key = dropout_key(seed, rng_stream);  // here, not live across the loop
        const uint64_t key_top = (uint64_t)blk.k.pos.at(kw0 + mma::group_of(lane)),
                       key_bottom = (uint64_t)blk.k.pos.at(kw0 + mma::group_of(lane) + 8);
#pragma unroll 1
        for (int bit = 0; bit < 32; bit++) {
          const mma::Coord at = mma::c_coord(lane, bit & 3);
          const uint64_t index =
              blk.dropout_row(b, h, q0 + 8 * (bit >> 2) + at.col) + (at.row < 8 ? key_top : key_bottom);
          keep |= (uint32_t)dropout_keep_keyed(key, index, dropout_p) << bit;
        }
      }
      // The warp's 16 keys against the tile's rows: unmasked when the first row sees them all.
      const bool mask = tile_needs_mask(kw0, 16, n_first, q0, kBr, Sq);
      // The 64 query columns in parts of 8 NT: at D 128 halves (quarters on sm_80), so that
      // S^T and dP^T (2 x 4 NT fp32) fit beside the 2 x 64 of dK, dV without spilling.
#pragma unroll
      for (int part = 0; part < T::kParts; part++) {
        constexpr int NT = 8 / T::kParts;
        const int c0 = 8 * NT * part;  // the part's first query column
        float st[NT][4], dpt[NT][4];   // S^T = K_w Q^T, dP'^T = V_w dO^T (16 keys x 8NT queries)
        rows_times_rows_t<H, D, NT>(st, sK + 16 * warp * kStride, tQ + c0 * kStride, lane);
        rows_times_rows_t<H, D, NT>(dpt, sV + 16 * warp * kStride, tdO + c0 * kStride, lane);
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const mma::Coord at = mma::c_coord(lane, e);
            const int j = kw0 + at.row, il = c0 + 8 * nt + at.col;  // key row, query column
            const float p = !mask || j < sKeys[stage * kBr + il]
                                ? exp2f(fmaf(st[nt][e], c, -sLse[stage * kBr + il] * kLog2e))
                                : 0.0f;
            const int bit = 4 * (NT * part + nt) + e;
            const float z = (keep >> bit) & 1u ? kept_scale : 0.0f;  // keep / (1-p)
            st[nt][e] = p * z;                                      // (P z)^T
            dpt[nt][e] = p * (dpt[nt][e] * z - sDelta[stage * kBr + il]);  // dS^T
          }
        regs_times_rows<H, D, NT>(acc_v, st, tdO + c0 * kStride, lane);  // dV += (P z)^T dO
        regs_times_rows<H, D, NT>(acc_k, dpt, tQ + c0 * kStride, lane);  // dK += dS^T Q
      }
    }
    __syncthreads();  // every warp is done with this stage before step s + 2 overwrites it
  }
  cp_async_wait<0>();  // no step: sK, sV may still be in flight; none may outlive the block

#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    const int j = kw0 + mma::group_of(lane) + 8 * hf;
    if (j >= Sk) continue;
    const int col = 2 * mma::tig_of(lane);
    if (partial != nullptr) {  // GQA: the head's share, summed by group_sum_kernel
      float* pk = partial + (bh * Sk + j) * D + col;
      float* pv = pk + (size_t)gridDim.z * A * Sk * D;
#pragma unroll
      for (int dt = 0; dt < D / 8; dt++) {
        *reinterpret_cast<float2*>(pk + 8 * dt) =
            make_float2(scale * acc_k[dt][2 * hf], scale * acc_k[dt][2 * hf + 1]);
        *reinterpret_cast<float2*>(pv + 8 * dt) = make_float2(acc_v[dt][2 * hf], acc_v[dt][2 * hf + 1]);
      }
      continue;
    }
    // "+=": the fp32 share added to the widened H value, rounded once.
    const size_t at = bg * blk.k.head_stride + (size_t)j * D + col;
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) {
      uint32_t* pk = reinterpret_cast<uint32_t*>(dk + at + 8 * dt);
      uint32_t* pv = reinterpret_cast<uint32_t*>(dv + at + 8 * dt);
      const uint32_t ok = *pk, ov = *pv;
      *pk = pack_16x2<H>(low_16<H>(ok) + scale * acc_k[dt][2 * hf],
                        high_16<H>(ok) + scale * acc_k[dt][2 * hf + 1]);
      *pv = pack_16x2<H>(low_16<H>(ov) + acc_v[dt][2 * hf], high_16<H>(ov) + acc_v[dt][2 * hf + 1]);
    }
  }
}

// dK, dV of a GQA group: the group's heads' fp32 shares (dkdv_kernel's partial) summed in head
// order, added to the widened H values and rounded once. One thread per pair of channels of a
// key row of a group: (B G Sk D / 2) threads.
template <class H, int D>
__global__ void group_sum_kernel(H* dk, H* dv, const float* partial, int A, int G, int Sk,
                                 int B, long long head_stride) {
  const size_t pairs = (size_t)B * G * Sk * D / 2;
  const int per_group = A / G;
  const size_t v_offset = (size_t)B * A * Sk * D;
  GRID_STRIDE_LOOP(e, pairs) {
    const size_t col = 2 * (e % (D / 2)), j = e / (D / 2) % Sk, bg = e / (D / 2) / Sk;
    const size_t b = bg / G, g = bg % G;
    float2 sk = make_float2(0.0f, 0.0f), sv = make_float2(0.0f, 0.0f);
    for (int hh = 0; hh < per_group; hh++) {
      const size_t from = (((b * A + g * per_group + hh) * Sk + j) * D + col);
      const float2 pk = *reinterpret_cast<const float2*>(partial + from);
      const float2 pv = *reinterpret_cast<const float2*>(partial + v_offset + from);
      sk.x += pk.x, sk.y += pk.y, sv.x += pv.x, sv.y += pv.y;
    }
    const size_t at = bg * head_stride + j * D + col;
    uint32_t* pk = reinterpret_cast<uint32_t*>(dk + at);
    uint32_t* pv = reinterpret_cast<uint32_t*>(dv + at);
    const uint32_t ok = *pk, ov = *pv;
    *pk = pack_16x2<H>(low_16<H>(ok) + sk.x, high_16<H>(ok) + sk.y);
    *pv = pack_16x2<H>(low_16<H>(ov) + sv.x, high_16<H>(ov) + sv.y);
  }
}

template <class H, int D>
bool launch_backward(float* dq, H* dk, H* dv, const H* dout, const H* q,
                     const H* k, const H* v, const H* o, const float* lse, int B, int A,
                     int G, float scale, float dropout_p, uint64_t seed, uint64_t rng_stream,
                     const AttentionBlock& blk) {
  if (!set_smem(dq_kernel<H, D>, Dq<D>::kSmemBytes) ||
      !set_smem(dkdv_kernel<H, D>, Dkv<D>::kSmemBytes))
    return false;
  const int Sq = blk.q.rows;
  const long long rows = (long long)B * A * Sq;
  // (B A, Sq), scratch from the caching allocator
  float* delta = (float*)scratch_alloc((size_t)rows * sizeof(float));
  delta_kernel<H, D><<<(unsigned)((rows + kWarps - 1) / kWarps), kThreads, 0, stream()>>>(
      delta, dout, o, rows, Sq, blk.q.head_stride);
  KERNEL_CHECK();
  dq_kernel<H, D><<<dim3((Sq + Dq<D>::kBr - 1) / Dq<D>::kBr, A, B), kThreads, Dq<D>::kSmemBytes,
                 stream()>>>(dq, dout, q, k, v, lse, delta, A, G, scale, dropout_p, seed,
                             rng_stream, blk);
  KERNEL_CHECK();
  // GQA: each head's share into scratch, then the group's sum (dkdv_kernel says why)
  const int Sk = blk.k.rows;
  float* partial = A == G ? nullptr : (float*)scratch_alloc(2 * (size_t)B * A * Sk * D * sizeof(float));
  dkdv_kernel<H, D><<<dim3((Sk + Dkv<D>::kBc - 1) / Dkv<D>::kBc, A, B), kThreads,
                      Dkv<D>::kSmemBytes, stream()>>>(dk, dv, partial, dout, q, k, v, lse, delta,
                                                      A, G, scale, dropout_p, seed, rng_stream,
                                                      blk);
  KERNEL_CHECK();
  if (partial != nullptr) {
    group_sum_kernel<H, D><<<grid_1d((size_t)B * G * Sk * D / 2), kThreads, 0, stream()>>>(
        dk, dv, partial, A, G, Sk, B, blk.k.head_stride);
    KERNEL_CHECK();
    scratch_free(partial);
  }
  scratch_free(delta);
  return true;
}

}  // namespace
}  // namespace flash_mma

namespace {
template <class H>
bool backward_16(float* dq, H* dk, H* dv, const H* dout, const H* q, const H* k, const H* v,
                 const H* o, const float* lse, int B, int A, int G, int D, float scale,
                 float dropout_p, uint64_t seed, uint64_t rng_stream, const AttentionBlock& blk) {
  using namespace flash_mma;
  if (!flash_mma_shape_ok(B, A, G, D, scale, dropout_p, blk) || !has_mma_sync()) return false;
  for (const void* p : {(const void*)dq, (const void*)dk, (const void*)dv, (const void*)dout,
                        (const void*)q, (const void*)k, (const void*)v, (const void*)o})
    if (!aligned16(p)) return false;
  if (B == 0 || blk.q.rows == 0 || blk.k.rows == 0) return true;  // nothing to add
  return D == 64 ? launch_backward<H, 64>(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, scale,
                                          dropout_p, seed, rng_stream, blk)
                 : launch_backward<H, 128>(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, scale,
                                           dropout_p, seed, rng_stream, blk);
}
}  // namespace

bool flash_mma_backward(float* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                        const bf16* k, const bf16* v, const bf16* o, const float* lse, int B,
                        int A, int G, int D, float scale, float dropout_p, uint64_t seed,
                        uint64_t rng_stream, const AttentionBlock& blk) {
  return backward_16(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale, dropout_p, seed,
                     rng_stream, blk);
}
bool flash_mma_backward(float* dq, fp16* dk, fp16* dv, const fp16* dout, const fp16* q,
                        const fp16* k, const fp16* v, const fp16* o, const float* lse, int B,
                        int A, int G, int D, float scale, float dropout_p, uint64_t seed,
                        uint64_t rng_stream, const AttentionBlock& blk) {
  return backward_16(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale, dropout_p, seed,
                     rng_stream, blk);
}

}  // namespace cuda
}  // namespace kernels
