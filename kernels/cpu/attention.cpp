// kernels/cpu/attention.cpp: the attention layout ops (QKV split with RoPE, heads merge), the
// naive path's pieces of one attention pass (softmax, rescale, dropout, delta) and ring
// attention's log-sum-exp merge. The flash kernels are in flash_attention.cpp.
//
// Layouts (ops/attention.h): the fused projection row of token n = b*S + s holds G groups,
//   group g = [ query heads g*A/G .. (g+1)*A/G - 1 | key head g | value head g ], each D wide,
// so group g starts at channel g*(A/G + 2)*D. Attention wants head-major tensors
// q(B,A,S,D), k(B,G,S,D), v(B,G,S,D), where a head's S x D matrix is contiguous.
//
// RoPE, rotate-half form: pair i < D/2 of a head at global position t = pos.at(s) (s itself
// on a single rank) rotates by angle = t * theta^(-2i/D):
//   x'_i       = x_i cos - x_{i+D/2} sin
//   x'_{i+D/2} = x_{i+D/2} cos + x_i sin
// Its backward is the transposed rotation, i.e. the rotation by -angle.
//
// rope_forward / rope_backward apply the same rotation alone, in place on a (B,H,S,D) tensor
// (qk-layernorm puts the norm between the split and RoPE): split with theta 0 then rope_forward
// computes what the split with theta does, bit for bit (the same rope_angles and copy_head).
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
// defines the CPU twins of kernels/ops/attention.h: qkv_split_forward, qkv_split_backward,
//          heads_merge_forward, heads_merge_backward, rope_forward, rope_backward,
//          attention_softmax_forward, attention_softmax_backward, attention_probs_rescale,
//          attention_dropout_forward, attention_delta, attention_merge
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/simd_math.h"  // defines: exp_simd, row_max, row_sum
#include "kernels/cpu/widen.h"      // defines: Input, Widened, view_span
#include "kernels/math.h"
#include "kernels/ops/attention.h"

namespace kernels {

using cpu::row_max;
using cpu::row_sum;

namespace {

// cos and sin of every pair's angle at position t: the same for all heads of a token.
void rope_angles(std::vector<float>& cos_s, std::vector<float>& sin_s, int t, int D,
                 float theta) {
  for (int i = 0; i < D / 2; i++) {
    float angle = (float)t * rope_inv_freq(i, D, theta);
    cos_s[i] = cosf(angle);
    sin_s[i] = sinf(angle);
  }
}

// Copies one D-wide head from src to dst, rotating by +angle (sign = 1, forward) or by
// -angle (sign = -1, backward); with no table (rope off) it is a plain copy.
void copy_head(float* dst, const float* src, int D, const float* cos_s, const float* sin_s,
               float sign) {
  if (cos_s == nullptr) {
    for (int c = 0; c < D; c++) dst[c] = src[c];
    return;
  }
  const int half = D / 2;
  for (int i = 0; i < half; i++) {
    float c = cos_s[i], s = sign * sin_s[i];
    dst[i] = src[i] * c - src[i + half] * s;
    dst[i + half] = src[i + half] * c + src[i] * s;
  }
}

void check_shapes(int A, int G, int D, float rope_theta) {
  if (G <= 0 || A % G != 0) throw std::invalid_argument("qkv_split: A % G != 0");
  if (rope_theta > 0.0f && D % 2 != 0) throw std::invalid_argument("qkv_split: RoPE, odd D");
}

}  // namespace

// Forward copies each head out of the fused row, rotating q and k by +angle; backward is the
// same walk with source and destination swapped and the rotation by -angle.
template <> void qkv_split_forward<Device::CPU, float>(
    float* q, float* k, float* v, const float* qkv, int B, int S, int A, int G, int D,
    float rope_theta, const TokenPositions& pos) {
  check_shapes(A, G, D, rope_theta);
  const int heads_per_group = A / G;
  const int row_width = (A + 2 * G) * D;
  const bool rope = rope_theta > 0.0f;
  std::vector<float> cos_s(D / 2), sin_s(D / 2);
  for (int b = 0; b < B; b++) {
    for (int s = 0; s < S; s++) {
      if (rope) rope_angles(cos_s, sin_s, pos.at(s), D, rope_theta);
      const float* cs = rope ? cos_s.data() : nullptr;
      const float* sn = rope ? sin_s.data() : nullptr;
      const float* row = qkv + ((size_t)b * S + s) * row_width;  // seek to token (b, s)'s row
      for (int g = 0; g < G; g++) {
        const float* group = row + (size_t)g * (heads_per_group + 2) * D;  // seek to group g
        for (int j = 0; j < heads_per_group; j++) {
          int h = g * heads_per_group + j;
          float* q_hs = q + (((size_t)b * A + h) * S + s) * D;  // seek to q[b, h, s, :]
          copy_head(q_hs, group + j * D, D, cs, sn, 1.0f);
        }
        float* k_gs = k + (((size_t)b * G + g) * S + s) * D;  // seek to k[b, g, s, :]
        float* v_gs = v + (((size_t)b * G + g) * S + s) * D;  // and v[b, g, s, :]
        copy_head(k_gs, group + heads_per_group * D, D, cs, sn, 1.0f);
        copy_head(v_gs, group + (heads_per_group + 1) * D, D, nullptr, nullptr, 1.0f);
      }
    }
  }
}

template <> void qkv_split_backward<Device::CPU, float>(
    float* dqkv, const float* dq, const float* dk, const float* dv, int B, int S, int A, int G,
    int D, float rope_theta, const TokenPositions& pos) {
  check_shapes(A, G, D, rope_theta);
  const int heads_per_group = A / G;
  const int row_width = (A + 2 * G) * D;
  const bool rope = rope_theta > 0.0f;
  std::vector<float> cos_s(D / 2), sin_s(D / 2);
  for (int b = 0; b < B; b++) {
    for (int s = 0; s < S; s++) {
      if (rope) rope_angles(cos_s, sin_s, pos.at(s), D, rope_theta);
      const float* cs = rope ? cos_s.data() : nullptr;
      const float* sn = rope ? sin_s.data() : nullptr;
      float* row = dqkv + ((size_t)b * S + s) * row_width;  // seek to token (b, s)'s row
      for (int g = 0; g < G; g++) {
        float* group = row + (size_t)g * (heads_per_group + 2) * D;  // seek to group g
        for (int j = 0; j < heads_per_group; j++) {
          int h = g * heads_per_group + j;
          const float* dq_hs = dq + (((size_t)b * A + h) * S + s) * D;  // seek to dq[b, h, s, :]
          copy_head(group + j * D, dq_hs, D, cs, sn, -1.0f);
        }
        const float* dk_gs = dk + (((size_t)b * G + g) * S + s) * D;  // dk[b, g, s, :]
        const float* dv_gs = dv + (((size_t)b * G + g) * S + s) * D;  // dv[b, g, s, :]
        copy_head(group + heads_per_group * D, dk_gs, D, cs, sn, -1.0f);
        copy_head(group + (heads_per_group + 1) * D, dv_gs, D, nullptr, nullptr, -1.0f);
      }
    }
  }
}

// In place: each head row is rotated into a copy and copied back (copy_head reads both halves
// of a pair before writing either, but not in place).
static void rope_apply(float* x, int B, int H, int S, int D, float theta, float sign,
                       const TokenPositions& pos) {
  if (theta <= 0.0f) return;
  if (D % 2 != 0) throw std::invalid_argument("rope: odd D");
  std::vector<float> cos_s(D / 2), sin_s(D / 2), row(D);
  for (int s = 0; s < S; s++) {
    rope_angles(cos_s, sin_s, pos.at(s), D, theta);
    for (long long bh = 0; bh < (long long)B * H; bh++) {
      float* x_s = x + ((size_t)bh * S + s) * D;  // seek to x[b, h, s, :]
      copy_head(row.data(), x_s, D, cos_s.data(), sin_s.data(), sign);
      for (int c = 0; c < D; c++) x_s[c] = row[c];
    }
  }
}

template <> void rope_forward<Device::CPU, float>(float* x, int B, int H, int S, int D, float theta,
                                                  const TokenPositions& pos) {
  rope_apply(x, B, H, S, D, theta, 1.0f, pos);
}
template <> void rope_backward<Device::CPU, float>(float* dx, int B, int H, int S, int D,
                                                   float theta, const TokenPositions& pos) {
  rope_apply(dx, B, H, S, D, theta, -1.0f, pos);
}

// o(B,A,S,D) -> out(B*S, A*D): token (b, s)'s row is its A heads side by side.
template <> void heads_merge_forward<Device::CPU, float>(float* out, const float* o, int B, int S,
                                                         int A, int D) {
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < A; h++) {
      for (int s = 0; s < S; s++) {
        const float* o_hs = o + (((size_t)b * A + h) * S + s) * D;         // o[b, h, s, :]
        float* out_hs = out + ((size_t)b * S + s) * A * D + (size_t)h * D;  // out[b*S+s, h*D:]
        for (int c = 0; c < D; c++) out_hs[c] = o_hs[c];
      }
    }
  }
}

template <> void heads_merge_backward<Device::CPU, float>(float* d_o, const float* dout, int B,
                                                          int S, int A, int D) {
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < A; h++) {
      for (int s = 0; s < S; s++) {
        float* do_hs = d_o + (((size_t)b * A + h) * S + s) * D;
        const float* dout_hs = dout + ((size_t)b * S + s) * A * D + (size_t)h * D;
        for (int c = 0; c < D; c++) do_hs[c] = dout_hs[c];
      }
    }
  }
}

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

template <class H>
static void qkv_split_forward_16(H* q, H* k, H* v, const H* qkv, int B, int S, int A, int G, int D,
                                 float theta, const TokenPositions& pos) {
  const size_t N = (size_t)B * S;
  Input X(qkv, N * (A + 2 * G) * D);
  Widened Q(q, N * A * D), K(k, N * G * D), V(v, N * G * D);
  qkv_split_forward<Device::CPU>(Q.data(), K.data(), V.data(), X.data(), B, S, A, G, D, theta,
                                 pos);
}
template <> void qkv_split_forward<Device::CPU, bf16>(bf16* q, bf16* k, bf16* v, const bf16* qkv,
                                                      int B, int S, int A, int G, int D,
                                                      float theta, const TokenPositions& pos) {
  qkv_split_forward_16(q, k, v, qkv, B, S, A, G, D, theta, pos);
}
template <> void qkv_split_forward<Device::CPU, fp16>(fp16* q, fp16* k, fp16* v, const fp16* qkv,
                                                      int B, int S, int A, int G, int D,
                                                      float theta, const TokenPositions& pos) {
  qkv_split_forward_16(q, k, v, qkv, B, S, A, G, D, theta, pos);
}
template <class H>
static void qkv_split_backward_16(H* dqkv, const H* dq, const H* dk, const H* dv, int B, int S,
                                  int A, int G, int D, float theta, const TokenPositions& pos) {
  const size_t N = (size_t)B * S;
  Input Q(dq, N * A * D), K(dk, N * G * D), V(dv, N * G * D);
  Widened X(dqkv, N * (A + 2 * G) * D);
  qkv_split_backward<Device::CPU>(X.data(), Q.data(), K.data(), V.data(), B, S, A, G, D, theta,
                                  pos);
}
template <> void qkv_split_backward<Device::CPU, bf16>(bf16* dqkv, const bf16* dq, const bf16* dk,
                                                       const bf16* dv, int B, int S, int A, int G,
                                                       int D, float theta,
                                                       const TokenPositions& pos) {
  qkv_split_backward_16(dqkv, dq, dk, dv, B, S, A, G, D, theta, pos);
}
template <> void qkv_split_backward<Device::CPU, fp16>(fp16* dqkv, const fp16* dq, const fp16* dk,
                                                       const fp16* dv, int B, int S, int A, int G,
                                                       int D, float theta,
                                                       const TokenPositions& pos) {
  qkv_split_backward_16(dqkv, dq, dk, dv, B, S, A, G, D, theta, pos);
}
template <class H>
static void heads_merge_forward_16(H* out, const H* o, int B, int S, int A, int D) {
  const size_t n = (size_t)B * S * A * D;
  Input O(o, n);
  Widened R(out, n);
  heads_merge_forward<Device::CPU>(R.data(), O.data(), B, S, A, D);
}
template <> void heads_merge_forward<Device::CPU, bf16>(bf16* out, const bf16* o, int B, int S,
                                                        int A, int D) {
  heads_merge_forward_16(out, o, B, S, A, D);
}
template <> void heads_merge_forward<Device::CPU, fp16>(fp16* out, const fp16* o, int B, int S,
                                                        int A, int D) {
  heads_merge_forward_16(out, o, B, S, A, D);
}
template <class H>
static void heads_merge_backward_16(H* d_o, const H* dout, int B, int S, int A, int D) {
  const size_t n = (size_t)B * S * A * D;
  Input G(dout, n);
  Widened R(d_o, n);
  heads_merge_backward<Device::CPU>(R.data(), G.data(), B, S, A, D);
}
template <> void heads_merge_backward<Device::CPU, bf16>(bf16* d_o, const bf16* dout, int B, int S,
                                                         int A, int D) {
  heads_merge_backward_16(d_o, dout, B, S, A, D);
}
template <> void heads_merge_backward<Device::CPU, fp16>(fp16* d_o, const fp16* dout, int B, int S,
                                                         int A, int D) {
  heads_merge_backward_16(d_o, dout, B, S, A, D);
}
template <class T16>
static void rope_forward_16(T16* x, int B, int H, int S, int D, float theta,
                            const TokenPositions& pos) {
  Widened X(x, (size_t)B * H * S * D);
  rope_forward<Device::CPU>(X.data(), B, H, S, D, theta, pos);
}
template <> void rope_forward<Device::CPU, bf16>(bf16* x, int B, int H, int S, int D, float theta,
                                                 const TokenPositions& pos) {
  rope_forward_16(x, B, H, S, D, theta, pos);
}
template <> void rope_forward<Device::CPU, fp16>(fp16* x, int B, int H, int S, int D, float theta,
                                                 const TokenPositions& pos) {
  rope_forward_16(x, B, H, S, D, theta, pos);
}
template <class T16>
static void rope_backward_16(T16* dx, int B, int H, int S, int D, float theta,
                             const TokenPositions& pos) {
  Widened X(dx, (size_t)B * H * S * D);
  rope_backward<Device::CPU>(X.data(), B, H, S, D, theta, pos);
}
template <> void rope_backward<Device::CPU, bf16>(bf16* dx, int B, int H, int S, int D, float theta,
                                                  const TokenPositions& pos) {
  rope_backward_16(dx, B, H, S, D, theta, pos);
}
template <> void rope_backward<Device::CPU, fp16>(fp16* dx, int B, int H, int S, int D, float theta,
                                                  const TokenPositions& pos) {
  rope_backward_16(dx, B, H, S, D, theta, pos);
}

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
