// kernels/cpu/flash_attention.cpp: attention without materialising the S x S probabilities
// (FlashAttention, Dao et al. 2022; FlashAttention-2 loop order, 2023), on one pass of query
// rows against key rows (kernels/math.h AttentionBlock): the whole causal sequence, or one
// step of ring attention (parallel/context_parallel.cpp).
//
// The naive path stores P = softmax(Q K^T scale) for every head: B A S^2 floats. Flash
// attention walks Q in blocks of kBlockQ rows and, for each, K and V in blocks of kBlockK
// rows, keeping only one kBlockQ x kBlockK tile of scores alive. The softmax normaliser is
// not known until every key has been seen, so each query row i carries a running maximum
// m_i, a running sum l_i and an unnormalised output acc_i, and after every key block
// (scores s_ij for the block's keys j):
//
//   m_i'   = max(m_i, max_j s_ij)
//   l_i'   = l_i   e^(m_i - m_i') + sum_j e^(s_ij - m_i')
//   acc_i' = acc_i e^(m_i - m_i') + sum_j e^(s_ij - m_i') (keep_ij / (1-p)) v_j
//
// (the factor e^(m_i - m_i') rescales what was summed against the old maximum). At the end
// o_i = acc_i / l_i and lse_i = m_i + log l_i. Dropout multiplies only what reaches V: l_i is
// the softmax normaliser of the undropped probabilities.
//
// Views: head (b, h)'s Sq = blk.q.rows query rows start at (b*A + h) * q.head_stride, its
// group's Sk = blk.k.rows key rows at (b*G + g) * k.head_stride, rows D apart; lse and D_i
// at (b*A + h) * q.head_stride / D, one per row.
//
// Mask: query i sees keys j < n_i = blk.visible(i), a prefix that grows with i (by global
// position, key j is hidden when it comes after query i; a non-causal block sees all Sk). A
// key block starting at or after the block's last query's n_i is skipped whole; inside a
// tile the entries j >= n_i are zeroed. A query that sees no key has l_i = 0: o_i = 0 and
// lse_i = -inf (a ring pass may hold such rows; the merge then ignores them). On the whole
// sequence n_i = i + 1: the single-rank causal kernel, tile for tile.
//
// Dropout: keep_ij = dropout_keep(seed, stream, blk.dropout_index(b, h, i, j)), the index of
// the single-rank naive P's element at the rows' global positions, so a ring of passes drops
// what one rank drops.
//
// Backward recomputes P from q, k and the saved lse, P_ij = e^(s_ij - lse_i), and with
// P'_ij = P_ij keep_ij / (1-p) (what multiplied V) and dP' = dO V^T:
//
//   dV  = P'^T dO
//   dP  = dP' keep / (1-p)                  (the same mask, the same scaling)
//   D_i = sum_j P_ij dP_ij = sum_j P'_ij dP'_ij = dO_i . O_i     (one dot product per row)
//   dS  = P * (dP - D)                      (softmax backward, elementwise in the tile)
//   dQ  = scale dS K,   dK = scale dS^T Q
//
// A ring pass's backward is the same with the whole row's lse and O (saved by the forward
// after the last merge): then P_ij is the whole row's probability and D_i the whole row's, and
// the passes' dQ, dK, dV sum to the single-rank gradients. So the outputs accumulate (+=) and
// the caller zeroes them.
//
// Loop order: key blocks outside, query blocks inside (each key block's dK, dV tile is
// finished before moving on, as FlashAttention-2 does on the GPU), starting at the first
// query block with a row that sees the key block; dQ is accumulated across key blocks.
// Every tile product is one sgemm; the softmax bookkeeping between them is plain loops. GQA:
// query head h reads key/value group h / (A/G), and the group's dK, dV sum over its A/G query
// heads.
//
// 16-bit storage: the same tiles between a widening and a rounding (kernels/cpu/widen.h) of
// the views; dq and lse stay fp32.
//
// defines the CPU twins of kernels/ops/flash_attention.h: flash_attention_forward,
//          flash_attention_backward
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/simd_math.h"  // defines: exp_simd, row_max, row_sum
#include "kernels/cpu/widen.h"      // defines: Input, Widened, view_span
#include "kernels/math.h"
#include "kernels/ops/flash_attention.h"

namespace kernels {

using cpu::row_max;
using cpu::row_sum;

namespace {

constexpr int kBlockQ = 64;  // query rows per tile
constexpr int kBlockK = 64;  // key rows per tile

// C(m,n) = alpha op(A) op(B) + beta C, row-major: one tile product.
void tile_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
              n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Number of keys of the block starting at j0 (bk wide) that a query seeing the first n keys
// sees: j0 <= j < n.
int visible_keys(int n, int j0, int bk) { return std::max(0, std::min(bk, n - j0)); }

// The first query row that sees key j (visible(i) > j), Sq when none: visible grows with i,
// so a binary search.
int first_query_seeing(const AttentionBlock& blk, int j) {
  int lo = 0, hi = blk.q.rows;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (blk.visible(mid) > j) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

void check_groups(int A, int G) {
  if (G <= 0 || A % G != 0) throw std::invalid_argument("flash_attention: A % G != 0");
}

}  // namespace

template <> void flash_attention_forward<Device::CPU, float>(
    float* o, float* lse, const float* q, const float* k, const float* v, int B, int A, int G,
    int D, float scale, float dropout_p, uint64_t seed, uint64_t stream,
    const AttentionBlock& blk) {
  check_groups(A, G);
  const int heads_per_group = A / G;
  const int Sq = blk.q.rows, Sk = blk.k.rows;
  const float keep_scale = dropout_p > 0.0f ? 1.0f / (1.0f - dropout_p) : 1.0f;
  std::vector<float> s_tile((size_t)kBlockQ * kBlockK);  // scores, then P' of one tile
  std::vector<float> acc((size_t)kBlockQ * D);            // unnormalised o of a query block
  std::vector<float> m(kBlockQ), l(kBlockQ);

  for (int b = 0; b < B; b++) {
    for (int h = 0; h < A; h++) {
      const int g = h / heads_per_group;
      const size_t bh = (size_t)b * A + h;
      const float* Q = q + bh * blk.q.head_stride;  // seek to head (b, h): an Sq x D matrix
      const float* K = k + ((size_t)b * G + g) * blk.k.head_stride;  // its group's keys, values
      const float* V = v + ((size_t)b * G + g) * blk.k.head_stride;
      float* O = o + bh * blk.q.head_stride;
      float* LSE = lse + bh * (blk.q.head_stride / D);

      for (int i0 = 0; i0 < Sq; i0 += kBlockQ) {
        const int bq = std::min(kBlockQ, Sq - i0);
        std::fill(m.begin(), m.end(), -INFINITY);
        std::fill(l.begin(), l.end(), 0.0f);
        std::fill(acc.begin(), acc.end(), 0.0f);

        // Key blocks at or after the last query's visible count are fully masked: skipped.
        const int keys = blk.visible(i0 + bq - 1);
        for (int j0 = 0; j0 < keys; j0 += kBlockK) {
          const int bk = std::min(kBlockK, Sk - j0);
          // s_tile(bq, bk) = scale * Q[i0:i0+bq] K[j0:j0+bk]^T
          tile_gemm(false, true, bq, bk, D, scale, Q + (size_t)i0 * D, D, K + (size_t)j0 * D,
                    D, 0.0f, s_tile.data(), kBlockK);

          for (int r = 0; r < bq; r++) {
            const int i = i0 + r;
            float* s_r = s_tile.data() + (size_t)r * kBlockK;  // seek to query i's scores
            const int nk = visible_keys(blk.visible(i), j0, bk);
            if (nk == 0) {  // the whole row is masked: contributes nothing
              std::fill(s_r, s_r + bk, 0.0f);
              continue;
            }
            // One tight loop per pass, so that each vectorises (kernels/cpu/simd_math.h).
            const float m_new = std::max(m[r], row_max(s_r, nk));
            const float correction = expf(m[r] - m_new);  // e^(m_i - m_i'); 0 on the first block
            for (int j = 0; j < nk; j++) s_r[j] = exp_simd(s_r[j] - m_new);
            l[r] = l[r] * correction + row_sum(s_r, nk);
            if (dropout_p > 0.0f) {
              for (int j = 0; j < nk; j++) {
                bool keep = dropout_keep(seed, stream, blk.dropout_index(b, h, i, j0 + j),
                                         dropout_p);
                s_r[j] = keep ? s_r[j] * keep_scale : 0.0f;
              }
            }
            std::fill(s_r + nk, s_r + bk, 0.0f);
            m[r] = m_new;
            float* acc_r = acc.data() + (size_t)r * D;
            for (int c = 0; c < D; c++) acc_r[c] *= correction;
          }
          // acc(bq, D) += P'(bq, bk) V[j0:j0+bk]
          tile_gemm(false, false, bq, D, bk, 1.0f, s_tile.data(), kBlockK, V + (size_t)j0 * D,
                    D, 1.0f, acc.data(), D);
        }

        for (int r = 0; r < bq; r++) {
          float* O_i = O + (size_t)(i0 + r) * D;  // seek to output row i
          const float* acc_r = acc.data() + (size_t)r * D;
          if (l[r] == 0.0f) {  // saw no key
            for (int c = 0; c < D; c++) O_i[c] = 0.0f;
            LSE[i0 + r] = -INFINITY;
            continue;
          }
          const float inv_l = 1.0f / l[r];
          for (int c = 0; c < D; c++) O_i[c] = acc_r[c] * inv_l;
          LSE[i0 + r] = m[r] + logf(l[r]);
        }
      }
    }
  }
}

template <> void flash_attention_backward<Device::CPU, float>(
    float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
    const float* v, const float* o, const float* lse, int B, int A, int G, int D, float scale,
    float dropout_p, uint64_t seed, uint64_t stream, const AttentionBlock& blk) {
  check_groups(A, G);
  const int heads_per_group = A / G;
  const int Sq = blk.q.rows, Sk = blk.k.rows;
  const float keep_scale = dropout_p > 0.0f ? 1.0f / (1.0f - dropout_p) : 1.0f;
  std::vector<float> p_tile((size_t)kBlockQ * kBlockK);   // scores, then P'
  std::vector<float> ds_tile((size_t)kBlockQ * kBlockK);  // dP', then dS
  std::vector<float> delta(Sq);                           // D_i = dO_i . O_i
  std::vector<int> visible(Sq);                           // n_i, keys query i sees
  for (int i = 0; i < Sq; i++) visible[i] = blk.visible(i);

  for (int b = 0; b < B; b++) {
    for (int h = 0; h < A; h++) {
      const int g = h / heads_per_group;
      const size_t bh = (size_t)b * A + h;
      const size_t bg = (size_t)b * G + g;
      const float* Q = q + bh * blk.q.head_stride;  // seek to head (b, h) in the q view
      const float* O = o + bh * blk.q.head_stride;
      const float* dO = dout + bh * blk.q.head_stride;
      const float* LSE = lse + bh * (blk.q.head_stride / D);
      float* dQ = dq + bh * blk.q.head_stride;
      const float* K = k + bg * blk.k.head_stride;  // and to group g in the k view
      const float* V = v + bg * blk.k.head_stride;
      float* dK = dk + bg * blk.k.head_stride;
      float* dV = dv + bg * blk.k.head_stride;

      for (int i = 0; i < Sq; i++) {
        const float* O_i = O + (size_t)i * D;  // seek to row i of O and dO
        const float* dO_i = dO + (size_t)i * D;
        float dot = 0.0f;
        for (int c = 0; c < D; c++) dot += dO_i[c] * O_i[c];
        delta[i] = dot;
      }

      for (int j0 = 0; j0 < Sk; j0 += kBlockK) {
        const int bk = std::min(kBlockK, Sk - j0);
        // Query blocks before the first query that sees key j0 cannot see this key block.
        for (int i0 = first_query_seeing(blk, j0) / kBlockQ * kBlockQ; i0 < Sq; i0 += kBlockQ) {
          const int bq = std::min(kBlockQ, Sq - i0);
          // p_tile = scale * Q_blk K_blk^T (recomputed scores), ds_tile = dO_blk V_blk^T = dP'
          tile_gemm(false, true, bq, bk, D, scale, Q + (size_t)i0 * D, D, K + (size_t)j0 * D,
                    D, 0.0f, p_tile.data(), kBlockK);
          tile_gemm(false, true, bq, bk, D, 1.0f, dO + (size_t)i0 * D, D, V + (size_t)j0 * D,
                    D, 0.0f, ds_tile.data(), kBlockK);

          for (int r = 0; r < bq; r++) {
            const int i = i0 + r;
            float* p_r = p_tile.data() + (size_t)r * kBlockK;  // seek to query i's row
            float* ds_r = ds_tile.data() + (size_t)r * kBlockK;
            const int nk = visible_keys(visible[i], j0, bk);
            const float lse_i = LSE[i], delta_i = delta[i];
            if (dropout_p == 0.0f) {  // P' = P and dP = dP': a loop that vectorises
              for (int j = 0; j < nk; j++) {
                p_r[j] = exp_simd(p_r[j] - lse_i);        // P_ij = e^(s_ij - lse_i)
                ds_r[j] = p_r[j] * (ds_r[j] - delta_i);   // dS
              }
            } else {
              for (int j = 0; j < nk; j++) {
                float p = exp_simd(p_r[j] - lse_i);
                bool keep = dropout_keep(seed, stream, blk.dropout_index(b, h, i, j0 + j),
                                         dropout_p);
                float dp = keep ? ds_r[j] * keep_scale : 0.0f;  // dP = dP' keep / (1-p)
                p_r[j] = keep ? p * keep_scale : 0.0f;          // P', for dV
                ds_r[j] = p * (dp - delta_i);                   // dS
              }
            }
            std::fill(p_r + nk, p_r + bk, 0.0f);
            std::fill(ds_r + nk, ds_r + bk, 0.0f);
          }
          // dV[j0:j0+bk] += P'^T dO_blk      (bk x D, reduces over the bq queries)
          tile_gemm(true, false, bk, D, bq, 1.0f, p_tile.data(), kBlockK, dO + (size_t)i0 * D,
                    D, 1.0f, dV + (size_t)j0 * D, D);
          // dQ[i0:i0+bq] += scale dS K_blk   (bq x D, reduces over the bk keys)
          tile_gemm(false, false, bq, D, bk, scale, ds_tile.data(), kBlockK,
                    K + (size_t)j0 * D, D, 1.0f, dQ + (size_t)i0 * D, D);
          // dK[j0:j0+bk] += scale dS^T Q_blk (bk x D, reduces over the bq queries)
          tile_gemm(true, false, bk, D, bq, scale, ds_tile.data(), kBlockK,
                    Q + (size_t)i0 * D, D, 1.0f, dK + (size_t)j0 * D, D);
        }
      }
    }
  }
}

// ---- 16-bit storage (bf16, fp16): widen, the fp32 twin above, round ----------------------------
// The widened spans cover the views (rows of other passes between them round-trip exactly).
using cpu::Input;
using cpu::Widened;
using cpu::view_span;

template <class H>
static void flash_attention_forward_16(H* o, float* lse, const H* q, const H* k, const H* v, int B,
                                       int A, int G, int D, float scale, float p, uint64_t seed,
                                       uint64_t stream, const AttentionBlock& blk) {
  const size_t nq = view_span(B * A, D, blk.q), nk = view_span(B * G, D, blk.k);
  Input Q(q, nq), K(k, nk), V(v, nk);
  Widened O(o, nq);
  flash_attention_forward<Device::CPU>(O.data(), lse, Q.data(), K.data(), V.data(), B, A, G, D,
                                       scale, p, seed, stream, blk);
}
template <> void flash_attention_forward<Device::CPU, bf16>(bf16* o, float* lse, const bf16* q,
    const bf16* k, const bf16* v, int B, int A, int G, int D, float scale, float p, uint64_t seed,
    uint64_t stream, const AttentionBlock& blk) {
  flash_attention_forward_16(o, lse, q, k, v, B, A, G, D, scale, p, seed, stream, blk);
}
template <> void flash_attention_forward<Device::CPU, fp16>(fp16* o, float* lse, const fp16* q,
    const fp16* k, const fp16* v, int B, int A, int G, int D, float scale, float p, uint64_t seed,
    uint64_t stream, const AttentionBlock& blk) {
  flash_attention_forward_16(o, lse, q, k, v, B, A, G, D, scale, p, seed, stream, blk);
}
// dq is fp32 and accumulates in place; dk, dv widen, take the fp32 pass's += and round.
template <class H>
static void flash_attention_backward_16(float* dq, H* dk, H* dv, const H* dout, const H* q,
                                        const H* k, const H* v, const H* o, const float* lse, int B,
                                        int A, int G, int D, float scale, float p, uint64_t seed,
                                        uint64_t stream, const AttentionBlock& blk) {
  const size_t nq = view_span(B * A, D, blk.q), nk = view_span(B * G, D, blk.k);
  Input G_(dout, nq), Q(q, nq), K(k, nk), V(v, nk), O(o, nq);
  Widened DK(dk, nk), DV(dv, nk);
  flash_attention_backward<Device::CPU>(dq, DK.data(), DV.data(), G_.data(), Q.data(), K.data(),
                                        V.data(), O.data(), lse, B, A, G, D, scale, p, seed,
                                        stream, blk);
}
template <> void flash_attention_backward<Device::CPU, bf16>(float* dq, bf16* dk, bf16* dv,
    const bf16* dout, const bf16* q, const bf16* k, const bf16* v, const bf16* o, const float* lse,
    int B, int A, int G, int D, float scale, float p, uint64_t seed, uint64_t stream,
    const AttentionBlock& blk) {
  flash_attention_backward_16(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale, p, seed,
                              stream, blk);
}
template <> void flash_attention_backward<Device::CPU, fp16>(float* dq, fp16* dk, fp16* dv,
    const fp16* dout, const fp16* q, const fp16* k, const fp16* v, const fp16* o, const float* lse,
    int B, int A, int G, int D, float scale, float p, uint64_t seed, uint64_t stream,
    const AttentionBlock& blk) {
  flash_attention_backward_16(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale, p, seed,
                              stream, blk);
}

}  // namespace kernels
