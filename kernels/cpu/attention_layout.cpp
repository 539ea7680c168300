// kernels/cpu/attention_layout.cpp: the attention layout ops (the fused QKV split with RoPE, its
// backward, the heads merge) and RoPE alone: the CPU twins of the layout half of
// kernels/ops/attention.h (the CUDA twins: kernels/cuda/attention_layout.cu). The softmax of one
// pass and ring attention's merge are in attention_softmax.cpp, the flash kernels in
// flash_attention.cpp.
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
// 16-bit storage (bf16, fp16): the same loops between a widening and a rounding
// (kernels/cpu/widen.h).
//
// defines the CPU twins of kernels/ops/attention.h: qkv_split_forward, qkv_split_backward,
//          heads_merge_forward, heads_merge_backward, rope_forward, rope_backward
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/widen.h"  // defines: Input, Widened
#include "kernels/math.h"
#include "kernels/ops/attention.h"

namespace kernels {

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

// ---- 16-bit storage (bf16, fp16): widen, the fp32 twin above, round ----------------------------
using cpu::Input;
using cpu::Widened;

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

}  // namespace kernels
