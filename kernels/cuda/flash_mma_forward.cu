// kernels/cuda/flash_mma_forward.cu: flash attention forward on tensor cores (FlashAttention-2,
// Dao 2023) for 16-bit storage (bf16 or fp16, H): mirrors cpu::flash_attention_forward
// (kernels/cpu/flash_attention.cpp: the recurrence and the views are explained there) and
// replaces, where it handles the shape (kernels/cuda/flash_mma.h), the scalar flash_attention.cu.
//
// Tiling. One block of 8 warps per (query tile of kBr = 128 rows, head h, batch b); warp w owns
// the 16 query rows [16w, 16w + 16) of the tile. Key and value tiles of kBc = 64 rows stream
// through shared memory, double-buffered: cp.async fetches tile t + 1 while the warps compute
// on tile t. Shared memory (H, rows padded to D + 8):
//   sQ (128, D+8)   sK [2] (64, D+8)   sV [2] (64, D+8)   = 104 KiB (D 128), 54 KiB (D 64)
// Per warp and key tile, in registers (lane = 4 group + tig, mma_layout.h):
//   q  (16 x D)  A fragments, loaded once by ldmatrix:            D/16 x 4 regs
//   s  (16 x 64) S = Q K^T, C fragments of 8 n-tiles:             8 x 4 fp32
//   o  (16 x D)  O accumulator, C fragments of D/8 n-tiles:       D/8 x 4 fp32
//
// The accumulator of one m16n8k16 (16 rows x 8 columns), lane = 4 group + tig:
//
//              col 0  1 | 2  3 | 4  5 | 6  7
//     row  0   lane 0   | 1    | 2    | 3        c0 c1 at (group, 2tig), (group, 2tig+1)
//     row  1        4   | 5    | 6    | 7
//     ...                                        (row g: lanes 4g .. 4g+3, a "quad")
//     row  7        28  | 29   | 30   | 31
//     row  8   lane 0   | 1    | 2    | 3        c2 c3 at (group+8, 2tig), (group+8, 2tig+1)
//     ...
//     row 15        28  | 29   | 30   | 31
//
// and S (16 x 64) is 8 of them side by side (n-tile nt: keys 8nt .. 8nt+7 of the tile),
// so each lane holds 16 scores of 2 rows; a row's 64 scores are spread over the 4 lanes of a
// quad, and its max and sum are two xor-shuffles (quad_max, quad_sum). The P tile goes back in
// as the A operand of O += P V straight from these registers (mma_layout.h, c_to_a), rounded to
// H; V's B fragments come from ldmatrix.trans.
//
// Online softmax, per row, in base 2 with c = scale log2 e folded into one FFMA per score
// (s raw dot products, m the running max of raw scores, l the running sum):
//   m' = max(m, max_j s_j)      corr = 2^(c m - c m')     p_j = 2^(c s_j - c m')
//   l' = corr l + sum_j p_j     O' = corr O + sum_j keep_j p_j v_j
// and at the end o = O (1/(1-p)) / l, lse = scale m + ln l (natural log, as the CPU twin). A
// row with every key masked so far has m = -inf: c m' is then taken as 0, so corr = 2^-inf = 0
// and p = 0 (never -inf - -inf = NaN). l sums the probabilities before dropout, as on the CPU.
// Each lane keeps its own part of l (corr is the same in the quad) and the quad sums at the end.
//
// Masking. Query i sees keys j < n_i = blk.visible(i), a prefix growing with i. The block
// skips key tiles from the last row's n_i on; a warp skips the tiles its own last row does not
// reach (it still joins the barriers); the per-element mask runs only on tiles that cut one of
// the warp's prefixes (flash_mma_tiles.h tile_needs_mask: k0 + 64 > n_i of the warp's first
// row, or rows past the view). Causal on the whole sequence a warp masks 1 tile of its row's
// S/64. Dropout: the lane's 32 keep bits of the tile are drawn first, in a rolled loop (the
// 64-bit hash must not compete with the fragments for registers), and applied to P after l.
//
// Pipeline. Prologue: Q (one cp.async group), K, V tile 0 (a second); wait for Q, ldmatrix it
// into registers. Tile t: issue tile t + 1 into the other stage, wait for tile t, barrier,
// compute, barrier (the stage is free for tile t + 2).
//
// Per (query tile, key tile): 4 kBr kBc D FLOPs (S and P V: 4.2 MFLOP at D 128), 2 kBc D 2 bytes
// of K and V from global/L2 (32 KiB at D 128: 128 FLOP per byte), and each warp reads K and V
// once from shared memory (8 x 32 KiB: 16 FLOP per shared byte, the binding limit of mma.sync
// at 16 rows per warp: ~128 B/clk/SM of ldmatrix for ~2048 FLOP/clk/SM).
#include "kernels/cuda/flash_mma.cuh"

namespace kernels {
namespace cuda {
namespace flash_mma {
namespace {

// mirrors cpu::flash_attention_forward for one (query tile, head, batch). Grid: (query tiles,
// A, B), the query tiles in reverse so that the longest (causal: the last) start first.
// Occupancy: at D 64 two blocks share an SM (54 KiB of shared memory each; the launch bound
// caps the registers at 128 a thread, which ptxas meets without spilling), so one block's
// barrier stalls hide behind the other's products; at D 128 one (104 KiB, ~227 registers).
template <class H, int D>
__global__ void __launch_bounds__(kThreads, Fwd<D>::kBlocksPerSm)
    forward_kernel(H* o, float* lse, const H* q, const H* k, const H* v, int A, int G,
                   float scale, float dropout_p, uint64_t seed, uint64_t rng_stream,
                   AttentionBlock blk) {
  using F = Fwd<D>;
  constexpr int kBr = F::kBr, kBc = F::kBc, kStride = F::kStride;
  extern __shared__ __align__(16) unsigned char smem[];
  H* sQ = reinterpret_cast<H*>(smem);  // (kBr, kStride)
  H* sK = sQ + kBr * kStride;           // 2 stages of (kBc, kStride)
  H* sV = sK + 2 * kBc * kStride;       // 2 stages of (kBc, kStride)

  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = mma::group_of(lane), tig = mma::tig_of(lane);
  const int Sq = blk.q.rows, q0 = qt * kBr;
  const size_t bh = (size_t)b * A + h, bg = (size_t)b * G + h / (A / G);
  const H* Qh = q + bh * blk.q.head_stride;  // head (b, h): (Sq, D)
  const H* Kh = k + bg * blk.k.head_stride;  // its group's keys and values: (Sk, D)
  const H* Vh = v + bg * blk.k.head_stride;
  const float c = scale * kLog2e;
  const float kept_scale = 1.0f / (1.0f - dropout_p);

  // The block reads keys [0, n_last): the last existing row sees the most.
  const int n_last = blk.visible(min(q0 + kBr, Sq) - 1);
  const int key_tiles = (n_last + kBc - 1) / kBc;
  // The warp's rows [w0, w0 + 16): its first sees the fewest keys, its last the most (none
  // when the warp lies past the view).
  const int w0 = q0 + 16 * warp;
  const int warp_first = blk.visible(min(w0, Sq - 1));
  const int warp_keys = w0 < Sq ? blk.visible(min(w0 + 15, Sq - 1)) : 0;
  // This lane's two rows (half 0: group, half 1: group + 8 of the warp's 16); a row past the
  // view copies the last row's prefix (finite arithmetic, never stored).
  int row[2], row_keys[2];
  for (int hf = 0; hf < 2; hf++) {
    row[hf] = w0 + group + 8 * hf;
    row_keys[hf] = blk.visible(min(row[hf], Sq - 1));
  }

  // Prologue: Q (group 0), then K, V tile 0 (group 1); wait for Q alone.
  load_rows_async<D, kBr, kThreads>(sQ, Qh, q0, Sq);
  cp_async_commit();
  if (key_tiles > 0) {
    load_rows_async<D, kBc, kThreads>(sK, Kh, 0, blk.k.rows);
    load_rows_async<D, kBc, kThreads>(sV, Vh, 0, blk.k.rows);
  }
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qf[D / 16][4];  // the warp's Q rows as A fragments, one per 16 channels
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    const mma::Coord a = mma::ldsm_a(lane);
    ldsm_x4(qf[kk], sQ + (16 * warp + a.row) * kStride + 16 * kk + a.col);
  }

  float acc[D / 8][4];  // O (16 x D)
#pragma unroll
  for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[dt][e] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int t = 0; t < key_tiles; t++) {
    const int k0 = t * kBc, stage = t & 1;
    if (t + 1 < key_tiles) {  // fetch the next tile into the other stage, wait for this one
      load_rows_async<D, kBc, kThreads>(sK + (stage ^ 1) * kBc * kStride, Kh, k0 + kBc,
                                           blk.k.rows);
      load_rows_async<D, kBc, kThreads>(sV + (stage ^ 1) * kBc * kStride, Vh, k0 + kBc,
                                           blk.k.rows);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    if (k0 < warp_keys) {  // warp-uniform: some row of this warp sees a key of the tile
      const H* tK = sK + stage * kBc * kStride;
      const H* tV = sV + stage * kBc * kStride;
      const uint32_t keep = dropout_p > 0.0f
                                ? keep_bits(blk, b, h, row, k0, lane, dropout_p, dropout_key(seed, rng_stream))
                                : 0xffffffffu;
      // S (16 x 64) = Q K^T: per 16 channels, one ldmatrix gives B fragments of 2 n-tiles.
      float s[kBc / 8][4];
#pragma unroll
      for (int nt = 0; nt < kBc / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[nt][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
        for (int np = 0; np < kBc / 16; np++) {
          uint32_t kf[4];
          const mma::Coord bc = mma::ldsm_b(lane);
          ldsm_x4(kf, tK + (16 * np + bc.row) * kStride + 16 * kk + bc.col);
          mma_16<H>(s[2 * np], qf[kk], kf[0], kf[1]);
          mma_16<H>(s[2 * np + 1], qf[kk], kf[2], kf[3]);
        }
      }
      if (tile_needs_mask(k0, kBc, warp_first, w0, 16, Sq)) {
#pragma unroll
        for (int nt = 0; nt < kBc / 8; nt++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int j = k0 + 8 * nt + mma::c_coord(lane, e).col;
            if (j >= row_keys[e >> 1]) s[nt][e] = -INFINITY;
          }
      }
      // Online softmax on the lane's two rows.
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        float mx = m[hf];
#pragma unroll
        for (int nt = 0; nt < kBc / 8; nt++)
          mx = fmaxf(mx, fmaxf(s[nt][2 * hf], s[nt][2 * hf + 1]));
        mx = quad_max(mx);
        const float cm = mx == -INFINITY ? 0.0f : c * mx;  // c m', 0 while nothing is visible
        const float corr = exp2f(c * m[hf] - cm);          // 0 on the first visible tile
        m[hf] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kBc / 8; nt++)
#pragma unroll
          for (int e = 2 * hf; e < 2 * hf + 2; e++) {
            s[nt][e] = exp2f(fmaf(s[nt][e], c, -cm));  // masked: 2^-inf = 0
            sum += s[nt][e];
          }
        l[hf] = l[hf] * corr + sum;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
          acc[dt][2 * hf] *= corr;
          acc[dt][2 * hf + 1] *= corr;
        }
      }
      // Dropout: what reaches V loses the dropped elements (l keeps the undropped sum).
#pragma unroll
      for (int nt = 0; nt < kBc / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          if (!((keep >> (4 * nt + e)) & 1u)) s[nt][e] = 0.0f;
      // O (16 x D) += P (16 x 64) V (64 x D): P's C fragments of n-tiles 2kt, 2kt+1 are the A
      // fragment of keys [16kt, 16kt + 16) (mma_layout.h c_to_a).
#pragma unroll
      for (int kt = 0; kt < kBc / 16; kt++) {
        uint32_t pf[4];
        pf[0] = pack_16x2<H>(s[2 * kt][0], s[2 * kt][1]);
        pf[1] = pack_16x2<H>(s[2 * kt][2], s[2 * kt][3]);
        pf[2] = pack_16x2<H>(s[2 * kt + 1][0], s[2 * kt + 1][1]);
        pf[3] = pack_16x2<H>(s[2 * kt + 1][2], s[2 * kt + 1][3]);
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
          uint32_t vf[4];
          const mma::Coord bt = mma::ldsm_bt(lane);
          ldsm_x4_trans(vf, tV + (16 * kt + bt.row) * kStride + 16 * dp + bt.col);
          mma_16<H>(acc[2 * dp], pf, vf[0], vf[1]);
          mma_16<H>(acc[2 * dp + 1], pf, vf[2], vf[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before tile t + 2 overwrites it
  }

  // o = O (1/(1-p)) / l, lse = scale m + ln l; l = 0 (no key seen): o = 0, lse = -inf.
#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    const float sum = quad_sum(l[hf]);
    if (row[hf] >= Sq) continue;
    const float inv = sum > 0.0f ? kept_scale / sum : 0.0f;
    H* o_row = o + bh * blk.q.head_stride + (size_t)row[hf] * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) {
      const int col = 8 * dt + 2 * tig;
      *reinterpret_cast<uint32_t*>(o_row + col) =
          pack_16x2<H>(acc[dt][2 * hf] * inv, acc[dt][2 * hf + 1] * inv);
    }
    if (tig == 0)
      lse[bh * (blk.q.head_stride / D) + row[hf]] =
          sum > 0.0f ? scale * m[hf] + logf(sum) : -INFINITY;
  }
}

template <class H, int D>
bool launch_forward(H* o, float* lse, const H* q, const H* k, const H* v, int B,
                    int A, int G, float scale, float dropout_p, uint64_t seed, uint64_t rng_stream,
                    const AttentionBlock& blk) {
  using F = Fwd<D>;
  if (!set_smem(forward_kernel<H, D>, F::kSmemBytes)) return false;
  const dim3 grid((blk.q.rows + F::kBr - 1) / F::kBr, A, B);
  forward_kernel<H, D><<<grid, kThreads, F::kSmemBytes, stream()>>>(
      o, lse, q, k, v, A, G, scale, dropout_p, seed, rng_stream, blk);
  KERNEL_CHECK();
  return true;
}

}  // namespace
}  // namespace flash_mma

const char* flash_mma_name() { return "flash-mma (FA2, mma.sync m16n8k16 bf16/fp16)"; }

bool flash_mma_handles(int A, int G, int D, float scale, float dropout_p,
                       const AttentionBlock& blk) {
  return flash_mma::flash_mma_shape_ok(1, A, G, D, scale, dropout_p, blk) &&
         flash_mma::has_mma_sync();
}

namespace {
template <class H>
bool forward_16(H* o, float* lse, const H* q, const H* k, const H* v, int B, int A, int G, int D,
                float scale, float dropout_p, uint64_t seed, uint64_t rng_stream,
                const AttentionBlock& blk) {
  using namespace flash_mma;
  if (!flash_mma_shape_ok(B, A, G, D, scale, dropout_p, blk) || !has_mma_sync()) return false;
  if (!aligned16(o) || !aligned16(q) || !aligned16(k) || !aligned16(v)) return false;
  if (B == 0 || blk.q.rows == 0) return true;  // nothing to compute
  return D == 64 ? launch_forward<H, 64>(o, lse, q, k, v, B, A, G, scale, dropout_p, seed,
                                         rng_stream, blk)
                 : launch_forward<H, 128>(o, lse, q, k, v, B, A, G, scale, dropout_p, seed,
                                          rng_stream, blk);
}
}  // namespace

bool flash_mma_forward(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v, int B,
                       int A, int G, int D, float scale, float dropout_p, uint64_t seed,
                       uint64_t rng_stream, const AttentionBlock& blk) {
  return forward_16(o, lse, q, k, v, B, A, G, D, scale, dropout_p, seed, rng_stream, blk);
}
bool flash_mma_forward(fp16* o, float* lse, const fp16* q, const fp16* k, const fp16* v, int B,
                       int A, int G, int D, float scale, float dropout_p, uint64_t seed,
                       uint64_t rng_stream, const AttentionBlock& blk) {
  return forward_16(o, lse, q, k, v, B, A, G, D, scale, dropout_p, seed, rng_stream, blk);
}

}  // namespace cuda
}  // namespace kernels
