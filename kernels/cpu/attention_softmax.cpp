// kernels/cpu/attention_softmax.cpp: the naive path's pieces of one attention pass (softmax, its
// backward, the rescale to the whole row's lse, dropout, delta) and ring attention's
// log-sum-exp merge: the CPU twins of the softmax half of kernels/ops/attention.h (the CUDA
// twins: kernels/cuda/attention_softmax.cu). The layout ops are in attention_layout.cpp, the
// flash kernels in flash_attention.cpp.
//
// The naive pieces work on one pass (kernels/math.h AttentionBlock): the probabilities of a
// pass are (BH, q.rows, k.rows), contiguous, row i of head bh keeping its first
// blk.visible(i) keys. Every lse and delta sits at the q view, as the flash kernels' do: row i
// of head bh at bh * (q.head_stride / D) + i, so a pass on half of the local rows reads and
// writes the very entries the merge and the backward use. The merge and delta work at the
// view's rows (o: head_stride apart per head, D per row).
//
// 16-bit storage (bf16, fp16): the same loops between a widening and a rounding
// (kernels/cpu/widen.h); lse, delta and the merge's accumulator o stay fp32.
//
// defines the CPU twins of kernels/ops/attention.h: attention_softmax_forward,
//          attention_softmax_backward, attention_probs_rescale, attention_dropout_forward,
//          attention_delta, attention_merge
#include <cmath>

#include "kernels/cpu/simd_math.h"  // defines: exp_simd, row_max, row_sum
#include "kernels/cpu/widen.h"      // defines: Input, Widened, view_span
#include "kernels/math.h"
#include "kernels/ops/attention.h"

namespace kernels {

using cpu::row_max;
using cpu::row_sum;

// ---- one attention pass, naive pieces -----------------------------------------------------
// Row i of head bh sees keys j < n_i = blk.visible(i) (a prefix: positions increase). Over
// them, with x_j = scale s_ij and m_i = max_j x_j subtracted so that no exp overflows,
//   P_ij = e^(x_j - m_i) / l_i,  l_i = sum_j e^(x_j - m_i),  lse_i = m_i + log l_i,
// and P_ij = 0 for j >= n_i; a row that sees no key is all 0 with lse_i = -inf. Each row is
// read before it is written, so probs == scores (in place) is fine. On the whole sequence
// (n_i = i + 1) this is the single-rank causal softmax, loop for loop.

template <> void attention_softmax_forward<Device::CPU, float>(
    float* probs, float* lse, const float* scores, int BH, int D, float scale,
    const AttentionBlock& blk) {
  const int Sq = blk.q.rows, Sk = blk.k.rows;
  const long long lse_stride = blk.q.head_stride / D;
  for (long long r = 0; r < (long long)BH * Sq; r++) {
    const int i = (int)(r % Sq);            // query row inside its head's Sq x Sk matrix
    const float* s_row = scores + r * Sk;  // seek to row i of head r / Sq
    float* p_row = probs + r * Sk;
    float* lse_i = lse ? lse + r / Sq * lse_stride + i : nullptr;  // and to its lse
    const int n = blk.visible(i);
    if (n == 0) {
      for (int j = 0; j < Sk; j++) p_row[j] = 0.0f;
      if (lse_i) *lse_i = -INFINITY;
      continue;
    }
    // One tight loop per pass, so that each vectorises (kernels/cpu/simd_math.h).
    for (int j = 0; j < n; j++) p_row[j] = scale * s_row[j];
    const float m = row_max(p_row, n);
    for (int j = 0; j < n; j++) p_row[j] = exp_simd(p_row[j] - m);
    const float l = row_sum(p_row, n);
    const float inv = 1.0f / l;
    for (int j = 0; j < n; j++) p_row[j] *= inv;
    for (int j = n; j < Sk; j++) p_row[j] = 0.0f;
    if (lse_i) *lse_i = m + logf(l);
  }
}

// Softmax Jacobian dP_j/dx_k = P_j (delta_jk - P_k), and x = scale * s, so
//   dscores_j = scale * P_j (dP_j - t_i),  t_i = sum_k P_ik dP_ik.
// When the pass is the whole row t_i is the sum over its own keys (delta == nullptr); a ring
// pass sees only some of the row's keys, so t_i comes from the whole row, t_i = dO_i . O_i
// (attention_delta; P is then the whole row's, attention_probs_rescale). Masked entries have
// P = 0 and get gradient 0.
template <> void attention_softmax_backward<Device::CPU, float>(
    float* dscores, const float* dprobs, const float* probs, const float* delta, int BH, int D,
    float scale, const AttentionBlock& blk) {
  const int Sq = blk.q.rows, Sk = blk.k.rows;
  const long long delta_stride = blk.q.head_stride / D;
  for (long long r = 0; r < (long long)BH * Sq; r++) {
    const int i = (int)(r % Sq);
    const float* p_row = probs + r * Sk;  // seek to row i of head r / Sq
    const float* dp_row = dprobs + r * Sk;
    float* ds_row = dscores + r * Sk;
    const int n = blk.visible(i);
    float t = 0.0f;
    if (delta) {
      t = delta[r / Sq * delta_stride + i];
    } else {
      for (int j = 0; j < n; j++) t += p_row[j] * dp_row[j];
    }
    for (int j = 0; j < n; j++) ds_row[j] = scale * p_row[j] * (dp_row[j] - t);
    for (int j = n; j < Sk; j++) ds_row[j] = 0.0f;
  }
}

// A pass's row was normalised by its own l_pass = e^(lse_pass - m); the whole row's softmax
// divides by e^(lse - m) instead, so P_row = P_pass e^(lse_pass - lse). A row whose pass saw
// no key (lse_pass = -inf) is 0 and stays 0.
template <> void attention_probs_rescale<Device::CPU, float>(float* probs, const float* lse_pass,
                                                             const float* lse, int BH, int D,
                                                             const AttentionBlock& blk) {
  const int Sq = blk.q.rows, Sk = blk.k.rows;
  const long long lse_stride = blk.q.head_stride / D;
  for (long long r = 0; r < (long long)BH * Sq; r++) {
    const int i = (int)(r % Sq);
    const long long at = r / Sq * lse_stride + i;  // row i of head r / Sq in the q view
    if (lse_pass[at] == -INFINITY) continue;
    const float f = expf(lse_pass[at] - lse[at]);
    float* p_row = probs + r * Sk;  // seek to row i of head r / Sq
    const int n = blk.visible(i);
    for (int j = 0; j < n; j++) p_row[j] *= f;
  }
}

// Dropout on a pass's probabilities with the single-rank P's keep bits: element (b, h, i, j)
// draws at blk.dropout_index(b, h, i, j), which on the whole sequence is the element's own
// index ((b*A + h)*S + i)*S + j, so this is dropout_forward on P there, bit for bit.
template <> void attention_dropout_forward<Device::CPU, float>(
    float* out, uint8_t* mask, const float* probs, int B, int A, float p, uint64_t seed,
    uint64_t stream, const AttentionBlock& blk) {
  const int Sq = blk.q.rows, Sk = blk.k.rows;
  const float keep_scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < A; h++) {
      for (int i = 0; i < Sq; i++) {
        const size_t row = (((size_t)b * A + h) * Sq + i) * Sk;  // seek to P[b, h, i, :]
        for (int j = 0; j < Sk; j++) {
          const bool keep =
              p <= 0.0f || dropout_keep(seed, stream, blk.dropout_index(b, h, i, j), p);
          mask[row + j] = keep ? 1 : 0;
          out[row + j] = keep ? probs[row + j] * keep_scale : 0.0f;
        }
      }
    }
  }
}

// delta_i = dO_i . O_i = sum_j P_ij dP_ij over the whole row (the flash backward's D_i).
template <> void attention_delta<Device::CPU, float>(
    float* delta, const float* dout, const float* o, int BH, int D, const AttentionRows& rows) {
  const long long delta_stride = rows.head_stride / D;
  for (int bh = 0; bh < BH; bh++) {
    for (int i = 0; i < rows.rows; i++) {
      const size_t at = (size_t)bh * rows.head_stride + (size_t)i * D;  // seek to row i
      float dot = 0.0f;
      for (int c = 0; c < D; c++) dot += dout[at + c] * o[at + c];
      delta[(size_t)bh * delta_stride + i] = dot;
    }
  }
}

// o_i = sum_j e^(x_ij - lse_i) v_j over the keys seen so far, so two partial results over
// disjoint key sets combine by their weights in the union's normaliser
// (kernels/math.h attention_merge_weights).
template <> void attention_merge<Device::CPU, float>(float* o, float* lse, const float* o_pass,
                                                     const float* lse_pass, int BH, int D,
                                                     const AttentionRows& rows) {
  const long long lse_stride = rows.head_stride / D;
  for (int bh = 0; bh < BH; bh++) {
    for (int i = 0; i < rows.rows; i++) {
      const size_t at = (size_t)bh * rows.head_stride + (size_t)i * D;  // seek to row i
      const size_t r = (size_t)bh * lse_stride + i;
      float w, w_pass;
      if (!attention_merge_weights(lse[r], lse_pass[r], &w, &w_pass, &lse[r])) continue;
      for (int c = 0; c < D; c++) o[at + c] = attention_merge_value(o[at + c], o_pass[at + c],
                                                                    w, w_pass);
    }
  }
}

// ---- 16-bit storage (bf16, fp16): widen, the fp32 twin above, round ----------------------------
using cpu::Input;
using cpu::Widened;
using cpu::view_span;

// The probabilities of a pass: (BH, q.rows, k.rows), contiguous.
template <class H>
static void attention_softmax_forward_16(H* probs, float* lse, const H* scores, int BH, int D,
                                         float scale, const AttentionBlock& blk) {
  const size_t n = (size_t)BH * blk.q.rows * blk.k.rows;
  Input X(scores, n);
  Widened P(probs, n);
  attention_softmax_forward<Device::CPU>(P.data(), lse, X.data(), BH, D, scale, blk);
}
template <> void attention_softmax_forward<Device::CPU, bf16>(bf16* probs, float* lse,
    const bf16* scores, int BH, int D, float scale, const AttentionBlock& blk) {
  attention_softmax_forward_16(probs, lse, scores, BH, D, scale, blk);
}
template <> void attention_softmax_forward<Device::CPU, fp16>(fp16* probs, float* lse,
    const fp16* scores, int BH, int D, float scale, const AttentionBlock& blk) {
  attention_softmax_forward_16(probs, lse, scores, BH, D, scale, blk);
}
template <class H>
static void attention_softmax_backward_16(H* dscores, const H* dprobs, const H* probs,
                                          const float* delta, int BH, int D, float scale,
                                          const AttentionBlock& blk) {
  const size_t n = (size_t)BH * blk.q.rows * blk.k.rows;
  Input G(dprobs, n), P(probs, n);
  Widened DS(dscores, n);
  attention_softmax_backward<Device::CPU>(DS.data(), G.data(), P.data(), delta, BH, D, scale,
                                          blk);
}
template <> void attention_softmax_backward<Device::CPU, bf16>(bf16* dscores, const bf16* dprobs,
    const bf16* probs, const float* delta, int BH, int D, float scale, const AttentionBlock& blk) {
  attention_softmax_backward_16(dscores, dprobs, probs, delta, BH, D, scale, blk);
}
template <> void attention_softmax_backward<Device::CPU, fp16>(fp16* dscores, const fp16* dprobs,
    const fp16* probs, const float* delta, int BH, int D, float scale, const AttentionBlock& blk) {
  attention_softmax_backward_16(dscores, dprobs, probs, delta, BH, D, scale, blk);
}
template <class H>
static void attention_probs_rescale_16(H* probs, const float* lse_pass, const float* lse, int BH,
                                       int D, const AttentionBlock& blk) {
  Widened P(probs, (size_t)BH * blk.q.rows * blk.k.rows);
  attention_probs_rescale<Device::CPU>(P.data(), lse_pass, lse, BH, D, blk);
}
template <> void attention_probs_rescale<Device::CPU, bf16>(bf16* probs, const float* lse_pass,
    const float* lse, int BH, int D, const AttentionBlock& blk) {
  attention_probs_rescale_16(probs, lse_pass, lse, BH, D, blk);
}
template <> void attention_probs_rescale<Device::CPU, fp16>(fp16* probs, const float* lse_pass,
    const float* lse, int BH, int D, const AttentionBlock& blk) {
  attention_probs_rescale_16(probs, lse_pass, lse, BH, D, blk);
}
template <class H>
static void attention_dropout_forward_16(H* out, uint8_t* mask, const H* probs, int B, int A,
                                         float p, uint64_t seed, uint64_t stream,
                                         const AttentionBlock& blk) {
  const size_t n = (size_t)B * A * blk.q.rows * blk.k.rows;
  Input P(probs, n);
  Widened O(out, n);
  attention_dropout_forward<Device::CPU>(O.data(), mask, P.data(), B, A, p, seed, stream, blk);
}
template <> void attention_dropout_forward<Device::CPU, bf16>(bf16* out, uint8_t* mask,
    const bf16* probs, int B, int A, float p, uint64_t seed, uint64_t stream,
    const AttentionBlock& blk) {
  attention_dropout_forward_16(out, mask, probs, B, A, p, seed, stream, blk);
}
template <> void attention_dropout_forward<Device::CPU, fp16>(fp16* out, uint8_t* mask,
    const fp16* probs, int B, int A, float p, uint64_t seed, uint64_t stream,
    const AttentionBlock& blk) {
  attention_dropout_forward_16(out, mask, probs, B, A, p, seed, stream, blk);
}
// delta and the merge work at a view's rows: widen the span from its first row to its last.
template <class H>
static void attention_delta_16(float* delta, const H* dout, const H* o, int BH, int D,
                               const AttentionRows& rows) {
  const size_t n = view_span(BH, D, rows);
  Input G(dout, n), O(o, n);
  attention_delta<Device::CPU>(delta, G.data(), O.data(), BH, D, rows);
}
template <> void attention_delta<Device::CPU, bf16>(float* delta, const bf16* dout, const bf16* o,
                                                    int BH, int D, const AttentionRows& rows) {
  attention_delta_16(delta, dout, o, BH, D, rows);
}
template <> void attention_delta<Device::CPU, fp16>(float* delta, const fp16* dout, const fp16* o,
                                                    int BH, int D, const AttentionRows& rows) {
  attention_delta_16(delta, dout, o, BH, D, rows);
}
template <class H>
static void attention_merge_16(float* o, float* lse, const H* o_pass, const float* lse_pass, int BH,
                               int D, const AttentionRows& rows) {
  Input P(o_pass, view_span(BH, D, rows));
  attention_merge<Device::CPU>(o, lse, P.data(), lse_pass, BH, D, rows);
}
template <> void attention_merge<Device::CPU, bf16>(float* o, float* lse, const bf16* o_pass,
                                                    const float* lse_pass, int BH, int D,
                                                    const AttentionRows& rows) {
  attention_merge_16(o, lse, o_pass, lse_pass, BH, D, rows);
}
template <> void attention_merge<Device::CPU, fp16>(float* o, float* lse, const fp16* o_pass,
                                                    const float* lse_pass, int BH, int D,
                                                    const AttentionRows& rows) {
  attention_merge_16(o, lse, o_pass, lse_pass, BH, D, rows);
}

}  // namespace kernels
