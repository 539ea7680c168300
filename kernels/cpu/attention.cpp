// kernels/cpu/attention.cpp: the attention layout ops (QKV split with RoPE, heads merge) and
// the naive path's causal softmax. The flash kernels are in flash_attention.cpp.
//
// Layouts (kernels/ops.h): the fused projection row of token n = b*S + s holds G groups,
//   group g = [ query heads g*A/G .. (g+1)*A/G - 1 | key head g | value head g ], each D wide,
// so group g starts at channel g*(A/G + 2)*D. Attention wants head-major tensors
// q(B,A,S,D), k(B,G,S,D), v(B,G,S,D), where a head's S x D matrix is contiguous.
//
// RoPE, rotate-half form: pair i < D/2 of a head at position s rotates by
// angle = s * theta^(-2i/D):
//   x'_i       = x_i cos - x_{i+D/2} sin
//   x'_{i+D/2} = x_{i+D/2} cos + x_i sin
// Its backward is the transposed rotation, i.e. the rotation by -angle.
//
// rope_forward / rope_backward apply the same rotation alone, in place on a (B,H,S,D) tensor
// (qk-layernorm puts the norm between the split and RoPE): split with theta 0 then rope_forward
// computes what the split with theta does, bit for bit (the same rope_angles and copy_head).
//
// defines: qkv_split_forward, qkv_split_backward, heads_merge_forward, heads_merge_backward,
//          rope_forward, rope_backward, causal_softmax_forward, causal_softmax_backward
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/simd_math.h"  // defines: exp_simd, row_max, row_sum
#include "kernels/cpu_ops.h"
#include "kernels/math.h"

namespace kernels {
namespace cpu {

namespace {

// cos and sin of every pair's angle at position s: the same for all heads of a token.
void rope_angles(std::vector<float>& cos_s, std::vector<float>& sin_s, int s, int D,
                 float theta) {
  for (int i = 0; i < D / 2; i++) {
    float angle = (float)s * rope_inv_freq(i, D, theta);
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
void qkv_split_forward(float* q, float* k, float* v, const float* qkv, int B, int S, int A,
                       int G, int D, float rope_theta) {
  check_shapes(A, G, D, rope_theta);
  const int heads_per_group = A / G;
  const int row_width = (A + 2 * G) * D;
  const bool rope = rope_theta > 0.0f;
  std::vector<float> cos_s(D / 2), sin_s(D / 2);
  for (int b = 0; b < B; b++) {
    for (int s = 0; s < S; s++) {
      if (rope) rope_angles(cos_s, sin_s, s, D, rope_theta);
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

void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int B,
                        int S, int A, int G, int D, float rope_theta) {
  check_shapes(A, G, D, rope_theta);
  const int heads_per_group = A / G;
  const int row_width = (A + 2 * G) * D;
  const bool rope = rope_theta > 0.0f;
  std::vector<float> cos_s(D / 2), sin_s(D / 2);
  for (int b = 0; b < B; b++) {
    for (int s = 0; s < S; s++) {
      if (rope) rope_angles(cos_s, sin_s, s, D, rope_theta);
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
static void rope_apply(float* x, int B, int H, int S, int D, float theta, float sign) {
  if (theta <= 0.0f) return;
  if (D % 2 != 0) throw std::invalid_argument("rope: odd D");
  std::vector<float> cos_s(D / 2), sin_s(D / 2), row(D);
  for (int s = 0; s < S; s++) {
    rope_angles(cos_s, sin_s, s, D, theta);
    for (long long bh = 0; bh < (long long)B * H; bh++) {
      float* x_s = x + ((size_t)bh * S + s) * D;  // seek to x[b, h, s, :]
      copy_head(row.data(), x_s, D, cos_s.data(), sin_s.data(), sign);
      for (int c = 0; c < D; c++) x_s[c] = row[c];
    }
  }
}

void rope_forward(float* x, int B, int H, int S, int D, float theta) {
  rope_apply(x, B, H, S, D, theta, 1.0f);
}
void rope_backward(float* dx, int B, int H, int S, int D, float theta) {
  rope_apply(dx, B, H, S, D, theta, -1.0f);
}

// o(B,A,S,D) -> out(B*S, A*D): token (b, s)'s row is its A heads side by side.
void heads_merge_forward(float* out, const float* o, int B, int S, int A, int D) {
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

void heads_merge_backward(float* d_o, const float* dout, int B, int S, int A, int D) {
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

// ---- causal softmax -----------------------------------------------------------------------
// P_ij = exp(scale s_ij - m_i) / sum_{j' <= i} exp(scale s_ij' - m_i) for j <= i, 0 above the
// diagonal, with m_i = max_{j <= i} scale s_ij subtracted so no exp overflows. Each row is read
// before it is written, so probs == scores (in place) is fine.

void causal_softmax_forward(float* probs, const float* scores, int rows, int S, float scale) {
  for (long long r = 0; r < (long long)rows * S; r++) {
    const int i = (int)(r % S);            // query index inside its S x S matrix
    const float* s_row = scores + r * S;  // seek to row i of matrix r / S
    float* p_row = probs + r * S;
    // One tight loop per pass, so that each vectorises (kernels/cpu/simd_math.h).
    for (int j = 0; j <= i; j++) p_row[j] = scale * s_row[j];
    const float m = row_max(p_row, i + 1);
    for (int j = 0; j <= i; j++) p_row[j] = exp_simd(p_row[j] - m);
    const float inv = 1.0f / row_sum(p_row, i + 1);
    for (int j = 0; j <= i; j++) p_row[j] *= inv;
    for (int j = i + 1; j < S; j++) p_row[j] = 0.0f;
  }
}

// Softmax Jacobian dP_j/dx_k = P_j (delta_jk - P_k), and x = scale * s, so
//   dscores_j = scale * P_j (dP_j - sum_k P_k dP_k).
// Masked entries have P = 0 and get gradient 0.
void causal_softmax_backward(float* dscores, const float* dprobs, const float* probs, int rows,
                             int S, float scale) {
  for (long long r = 0; r < (long long)rows * S; r++) {
    const int i = (int)(r % S);
    const float* p_row = probs + r * S;  // seek to row i of matrix r / S
    const float* dp_row = dprobs + r * S;
    float* ds_row = dscores + r * S;
    float dot = 0.0f;
    for (int j = 0; j <= i; j++) dot += p_row[j] * dp_row[j];
    for (int j = 0; j <= i; j++) ds_row[j] = scale * p_row[j] * (dp_row[j] - dot);
    for (int j = i + 1; j < S; j++) ds_row[j] = 0.0f;
  }
}

}  // namespace cpu
}  // namespace kernels
