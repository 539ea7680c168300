// kernels/cuda/attention_layout.cu: the attention layout ops (the fused QKV split with RoPE, its
// backward, the heads merge) and RoPE alone: the CUDA twins of the layout half of
// kernels/ops/attention.h, mirroring kernels/cpu/attention_layout.cpp. The softmax of one pass
// and ring attention's merge are in attention_softmax.cu.
//
// Each thread holds one element (the split, the merge) or one RoPE pair (rope_forward/backward);
// nothing is shared between threads. Per element the split moves 2 sizeof(T) bytes (one read,
// one write) and computes nothing without RoPE; with RoPE a rotated element reads its partner
// too (3 sizeof(T) bytes) and costs its angle (rope_inv_freq's power, a multiply), a cos, a sin,
// 3 multiplies and an add (rope_rotate). Memory-bound.
//
// Layout ops are pure gathers: one thread per element of the fused tensor computes where
// its element lives in the head-major tensors. The QKV row of a token holds G groups, each
// [A/G query heads | key head | value head] of D channels (attention.h), so column c of the row
// is group c / ((A/G + 2) D), slot (c mod (A/G + 2) D) / D within the group (slots < A/G
// are query heads, then k, then v), channel c mod D.
//
// RoPE, rotate-half form, for pair i < D/2 of the token at local row s, global position
// pos.at(s) (context parallelism; s itself by default), with angle t = pos.at(s) theta^(-2i/D):
//   forward   y_i = x_i cos t - x_{i+D/2} sin t      y_{i+D/2} = x_{i+D/2} cos t + x_i sin t
//   backward  dx_i = dy_i cos t + dy_{i+D/2} sin t   dx_{i+D/2} = dy_{i+D/2} cos t - dy_i sin t
// (the transpose of a rotation is the rotation by -t). Each thread reads its partner
// channel, so forward and backward stay one thread per element.
//
// rope_forward / rope_backward rotate a (B,H,S,D) tensor in place: one thread per pair
// (i, i + D/2), which reads both before writing either, through the same rope_rotate as the
// split, so split(theta 0) then rope_forward equals split(theta) bit for bit.
//
// Every kernel is templated on the storage type T (float, bf16 or fp16): loads widen with
// to_float, RoPE computes in fp32, store rounds. Without RoPE the layout ops move values
// unchanged, so their 16-bit instantiations are exact copies.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/math.h"
#include "kernels/ops/attention.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), cublas(), kThreads, grid_1d, the reductions

// Where element `idx` of qkv(B*S, (A+2G)*D) lives: tensor (0 q, 1 k, 2 v), offset of the
// element in that (B, heads, S, D) tensor, its channel dd and its position s.
struct QkvSlot {
  int which;
  size_t offset;
  int dd;
  int s;
};

__device__ inline QkvSlot locate_qkv(size_t idx, int S, int A, int G, int D) {
  const int heads_per_group = A / G;
  const int width = (A + 2 * G) * D;
  const int group_width = (heads_per_group + 2) * D;
  const size_t token = idx / width;
  const int c = (int)(idx % width);
  const int b = (int)(token / S), s = (int)(token % S);
  const int g = c / group_width, slot = (c % group_width) / D, dd = c % D;
  QkvSlot r;
  r.dd = dd;
  r.s = s;
  if (slot < heads_per_group) {
    r.which = 0;
    r.offset = (((size_t)b * A + g * heads_per_group + slot) * S + s) * D + dd;
  } else {
    r.which = slot == heads_per_group ? 1 : 2;
    r.offset = (((size_t)b * G + g) * S + s) * D + dd;
  }
  return r;
}

// Rotates channel dd of a head row by RoPE (direction +1 forward, -1 backward); x is the
// channel's own value and partner the value at channel (dd + D/2) mod D; position is global.
// The products and the sum round one by one (__fmul_rn, __fadd_rn): nvcc contracts
// `x c + s p` into a fused multiply-add as it sees fit in each kernel that inlines this, and
// did so differently in the split and in rope_kernel, so "split(theta 0) + rope ==
// split(theta)" differed in 1.4e3 elements on an H200 (issue 26); now both round as the CPU
// twin (built with -ffp-contract=off) does.
__device__ inline float rope_rotate(float x, float partner, int dd, int position, int D,
                                    float theta, float direction) {
  const int half = D / 2;
  const int i = dd < half ? dd : dd - half;
  const float angle = __fmul_rn((float)position, rope_inv_freq(i, D, theta));
  const float sign = dd < half ? -direction : direction;
  return __fadd_rn(__fmul_rn(x, cosf(angle)), __fmul_rn(__fmul_rn(sign, partner), sinf(angle)));
}

// mirrors qkv_split_forward<Device::CPU>
template <typename T>
__global__ void qkv_split_forward_kernel(T* q, T* k, T* v, const T* qkv, size_t total, int S,
                                         int A, int G, int D, float rope_theta,
                                         TokenPositions pos) {
  GRID_STRIDE_LOOP(idx, total) {
    QkvSlot slot = locate_qkv(idx, S, A, G, D);
    float x = to_float(qkv[idx]);
    if (rope_theta > 0.0f && slot.which < 2) {
      float partner = to_float(qkv[idx - slot.dd + (slot.dd + D / 2) % D]);
      x = rope_rotate(x, partner, slot.dd, pos.at(slot.s), D, rope_theta, 1.0f);
    }
    T* dst = slot.which == 0 ? q : (slot.which == 1 ? k : v);
    store(dst[slot.offset], x);
  }
}

// mirrors qkv_split_backward<Device::CPU>: dqkv ("=") gathers from dq, dk, dv, un-rotating.
template <typename T>
__global__ void qkv_split_backward_kernel(T* dqkv, const T* dq, const T* dk, const T* dv,
                                          size_t total, int S, int A, int G, int D,
                                          float rope_theta, TokenPositions pos) {
  GRID_STRIDE_LOOP(idx, total) {
    QkvSlot slot = locate_qkv(idx, S, A, G, D);
    const T* src = slot.which == 0 ? dq : (slot.which == 1 ? dk : dv);
    float g = to_float(src[slot.offset]);
    if (rope_theta > 0.0f && slot.which < 2) {
      float partner = to_float(src[slot.offset - slot.dd + (slot.dd + D / 2) % D]);
      g = rope_rotate(g, partner, slot.dd, pos.at(slot.s), D, rope_theta, -1.0f);
    }
    store(dqkv[idx], g);
  }
}

// mirrors heads_merge_forward<Device::CPU> / backward: out[(b S + s), h D + dd] <-> o[b, h, s, dd].
// `to_tokens` picks the direction; idx runs over the token-major tensor.
template <typename T>
__global__ void heads_merge_kernel(T* dst, const T* src, size_t total, int S, int A, int D,
                                   bool to_tokens) {
  GRID_STRIDE_LOOP(idx, total) {
    const size_t token = idx / ((size_t)A * D);
    const int c = (int)(idx % ((size_t)A * D));
    const size_t b = token / S, s = token % S;
    const int h = c / D, dd = c % D;
    const size_t head_major = ((b * A + h) * S + s) * D + dd;
    if (to_tokens)
      dst[idx] = src[head_major];
    else
      dst[head_major] = src[idx];
  }
}

// One template launcher per op; its twins are one-liners over its float and bf16 instances.
template <typename T>
static void qkv_split_forward_launch(T* q, T* k, T* v, const T* qkv, int B, int S, int A, int G,
                                     int D, float rope_theta, const TokenPositions& pos) {
  size_t total = (size_t)B * S * (A + 2 * G) * D;
  if (total == 0) return;
  qkv_split_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(q, k, v, qkv, total, S, A, G,
                                                                      D, rope_theta, pos);
  KERNEL_CHECK();
}

template <typename T>
static void qkv_split_backward_launch(T* dqkv, const T* dq, const T* dk, const T* dv, int B, int S,
                                      int A, int G, int D, float rope_theta,
                                      const TokenPositions& pos) {
  size_t total = (size_t)B * S * (A + 2 * G) * D;
  if (total == 0) return;
  qkv_split_backward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(dqkv, dq, dk, dv, total, S,
                                                                       A, G, D, rope_theta, pos);
  KERNEL_CHECK();
}

template <typename T>
static void heads_merge_launch(T* dst, const T* src, int B, int S, int A, int D, bool to_tokens) {
  size_t total = (size_t)B * S * A * D;
  if (total == 0) return;
  heads_merge_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(dst, src, total, S, A, D,
                                                                to_tokens);
  KERNEL_CHECK();
}

template <> void qkv_split_forward<Device::CUDA, float>(
    float* q, float* k, float* v, const float* qkv, int B, int S, int A, int G, int D,
    float rope_theta, const TokenPositions& pos) {
  qkv_split_forward_launch(q, k, v, qkv, B, S, A, G, D, rope_theta, pos);
}
template <> void qkv_split_forward<Device::CUDA, bf16>(
    bf16* q, bf16* k, bf16* v, const bf16* qkv, int B, int S, int A, int G, int D, float rope_theta,
    const TokenPositions& pos) {
  qkv_split_forward_launch(q, k, v, qkv, B, S, A, G, D, rope_theta, pos);
}
template <> void qkv_split_forward<Device::CUDA, fp16>(
    fp16* q, fp16* k, fp16* v, const fp16* qkv, int B, int S, int A, int G, int D, float rope_theta,
    const TokenPositions& pos) {
  qkv_split_forward_launch(q, k, v, qkv, B, S, A, G, D, rope_theta, pos);
}
template <> void qkv_split_backward<Device::CUDA, float>(
    float* dqkv, const float* dq, const float* dk, const float* dv, int B, int S, int A, int G,
    int D, float rope_theta, const TokenPositions& pos) {
  qkv_split_backward_launch(dqkv, dq, dk, dv, B, S, A, G, D, rope_theta, pos);
}
template <> void qkv_split_backward<Device::CUDA, bf16>(
    bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv, int B, int S, int A, int G, int D,
    float rope_theta, const TokenPositions& pos) {
  qkv_split_backward_launch(dqkv, dq, dk, dv, B, S, A, G, D, rope_theta, pos);
}
template <> void qkv_split_backward<Device::CUDA, fp16>(
    fp16* dqkv, const fp16* dq, const fp16* dk, const fp16* dv, int B, int S, int A, int G, int D,
    float rope_theta, const TokenPositions& pos) {
  qkv_split_backward_launch(dqkv, dq, dk, dv, B, S, A, G, D, rope_theta, pos);
}
template <> void heads_merge_forward<Device::CUDA, float>(float* out, const float* o, int B, int S,
                                                          int A, int D) {
  heads_merge_launch(out, o, B, S, A, D, true);
}
template <> void heads_merge_forward<Device::CUDA, bf16>(bf16* out, const bf16* o, int B, int S,
                                                         int A, int D) {
  heads_merge_launch(out, o, B, S, A, D, true);
}
template <> void heads_merge_forward<Device::CUDA, fp16>(fp16* out, const fp16* o, int B, int S,
                                                         int A, int D) {
  heads_merge_launch(out, o, B, S, A, D, true);
}
template <> void heads_merge_backward<Device::CUDA, float>(float* d_o, const float* dout, int B,
                                                           int S, int A, int D) {
  heads_merge_launch(d_o, dout, B, S, A, D, false);
}
template <> void heads_merge_backward<Device::CUDA, bf16>(bf16* d_o, const bf16* dout, int B, int S,
                                                          int A, int D) {
  heads_merge_launch(d_o, dout, B, S, A, D, false);
}
template <> void heads_merge_backward<Device::CUDA, fp16>(fp16* d_o, const fp16* dout, int B, int S,
                                                          int A, int D) {
  heads_merge_launch(d_o, dout, B, S, A, D, false);
}

// ---- RoPE alone ----------------------------------------------------------------------------
// mirrors rope_forward<Device::CPU> / rope_backward (direction +1 / -1): pair idx is pair i < D/2
// of head row idx / (D/2) of the (B*H*S, D) tensor, at local row s = row % S, global position
// pos.at(s).
template <typename T>
__global__ void rope_kernel(T* x, size_t pairs, int S, int D, float theta, float direction,
                            TokenPositions pos) {
  GRID_STRIDE_LOOP(idx, pairs) {
    const int half = D / 2;
    const size_t row = idx / half;
    const int i = (int)(idx % half), position = pos.at((int)(row % S));
    T* x_row = x + row * D;
    const float lo = to_float(x_row[i]), hi = to_float(x_row[i + half]);
    store(x_row[i], rope_rotate(lo, hi, i, position, D, theta, direction));
    store(x_row[i + half], rope_rotate(hi, lo, i + half, position, D, theta, direction));
  }
}

template <typename T>
static void rope_launch(T* x, int B, int H, int S, int D, float theta, float direction,
                        const TokenPositions& pos) {
  if (theta <= 0.0f) return;
  if (D % 2 != 0) throw std::invalid_argument("rope: odd D");
  const size_t pairs = (size_t)B * H * S * (D / 2);
  if (pairs == 0) return;
  rope_kernel<<<grid_1d(pairs), kThreads, 0, stream()>>>(x, pairs, S, D, theta, direction, pos);
  KERNEL_CHECK();
}

template <> void rope_forward<Device::CUDA, float>(float* x, int B, int H, int S, int D,
                                                   float theta, const TokenPositions& pos) {
  rope_launch(x, B, H, S, D, theta, 1.0f, pos);
}
template <> void rope_forward<Device::CUDA, bf16>(bf16* x, int B, int H, int S, int D, float theta,
                                                  const TokenPositions& pos) {
  rope_launch(x, B, H, S, D, theta, 1.0f, pos);
}
template <> void rope_forward<Device::CUDA, fp16>(fp16* x, int B, int H, int S, int D, float theta,
                                                  const TokenPositions& pos) {
  rope_launch(x, B, H, S, D, theta, 1.0f, pos);
}
template <> void rope_backward<Device::CUDA, float>(float* dx, int B, int H, int S, int D,
                                                    float theta, const TokenPositions& pos) {
  rope_launch(dx, B, H, S, D, theta, -1.0f, pos);
}
template <> void rope_backward<Device::CUDA, bf16>(bf16* dx, int B, int H, int S, int D,
                                                   float theta, const TokenPositions& pos) {
  rope_launch(dx, B, H, S, D, theta, -1.0f, pos);
}
template <> void rope_backward<Device::CUDA, fp16>(fp16* dx, int B, int H, int S, int D,
                                                   float theta, const TokenPositions& pos) {
  rope_launch(dx, B, H, S, D, theta, -1.0f, pos);
}

}  // namespace kernels
