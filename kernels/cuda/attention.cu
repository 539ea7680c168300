// kernels/cuda/attention.cu: attention layout (fused QKV split with RoPE, head merge) and
// the naive path's causal softmax.
//
// Layout ops are pure gathers: one thread per element of the fused tensor computes where
// its element lives in the head-major tensors. The QKV row of a token holds G groups, each
// [A/G query heads | key head | value head] of D channels (ops.h), so column c of the row
// is group c / ((A/G + 2) D), slot (c mod (A/G + 2) D) / D within the group (slots < A/G
// are query heads, then k, then v), channel c mod D.
//
// RoPE, rotate-half form, for pair i < D/2 at position s with angle t = s * theta^(-2i/D):
//   forward   y_i = x_i cos t - x_{i+D/2} sin t      y_{i+D/2} = x_{i+D/2} cos t + x_i sin t
//   backward  dx_i = dy_i cos t + dy_{i+D/2} sin t   dx_{i+D/2} = dy_{i+D/2} cos t - dy_i sin t
// (the transpose of a rotation is the rotation by -t). Each thread reads its partner
// channel, so forward and backward stay one thread per element.
//
// rope_forward / rope_backward rotate a (B,H,S,D) tensor in place: one thread per pair
// (i, i + D/2), which reads both before writing either, through the same rope_rotate as the
// split, so split(theta 0) then rope_forward equals split(theta) bit for bit.
//
// Causal softmax: one block per score row, threads stride over the row's columns.
//
// Every kernel is templated on the storage type T (float or bf16): loads widen with
// to_float, RoPE and the softmax compute in fp32, store rounds. Without RoPE the layout ops
// move values unchanged, so their bf16 instantiations are exact copies.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda_ops.h"
#include "kernels/math.h"

namespace kernels {
namespace cuda {

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
// channel's own value and partner the value at channel (dd + D/2) mod D.
__device__ inline float rope_rotate(float x, float partner, int dd, int s, int D, float theta,
                                    float direction) {
  const int half = D / 2;
  const int i = dd < half ? dd : dd - half;
  const float angle = (float)s * rope_inv_freq(i, D, theta);
  const float sign = dd < half ? -direction : direction;
  return x * cosf(angle) + sign * partner * sinf(angle);
}

// mirrors cpu::qkv_split_forward
template <typename T>
__global__ void qkv_split_forward_kernel(T* q, T* k, T* v, const T* qkv, size_t total, int S,
                                         int A, int G, int D, float rope_theta) {
  GRID_STRIDE_LOOP(idx, total) {
    QkvSlot slot = locate_qkv(idx, S, A, G, D);
    float x = to_float(qkv[idx]);
    if (rope_theta > 0.0f && slot.which < 2) {
      float partner = to_float(qkv[idx - slot.dd + (slot.dd + D / 2) % D]);
      x = rope_rotate(x, partner, slot.dd, slot.s, D, rope_theta, 1.0f);
    }
    T* dst = slot.which == 0 ? q : (slot.which == 1 ? k : v);
    store(dst[slot.offset], x);
  }
}

// mirrors cpu::qkv_split_backward: dqkv ("=") gathers from dq, dk, dv, un-rotating.
template <typename T>
__global__ void qkv_split_backward_kernel(T* dqkv, const T* dq, const T* dk, const T* dv,
                                          size_t total, int S, int A, int G, int D,
                                          float rope_theta) {
  GRID_STRIDE_LOOP(idx, total) {
    QkvSlot slot = locate_qkv(idx, S, A, G, D);
    const T* src = slot.which == 0 ? dq : (slot.which == 1 ? dk : dv);
    float g = to_float(src[slot.offset]);
    if (rope_theta > 0.0f && slot.which < 2) {
      float partner = to_float(src[slot.offset - slot.dd + (slot.dd + D / 2) % D]);
      g = rope_rotate(g, partner, slot.dd, slot.s, D, rope_theta, -1.0f);
    }
    store(dqkv[idx], g);
  }
}

// mirrors cpu::heads_merge_forward / backward: out[(b S + s), h D + dd] <-> o[b, h, s, dd].
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

// One template launcher per op; the entry points are its float and bf16 instantiations.
template <typename T>
static void qkv_split_forward_launch(T* q, T* k, T* v, const T* qkv, int B, int S, int A, int G,
                                     int D, float rope_theta) {
  size_t total = (size_t)B * S * (A + 2 * G) * D;
  if (total == 0) return;
  qkv_split_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(q, k, v, qkv, total, S, A, G,
                                                                      D, rope_theta);
  KERNEL_CHECK();
}

template <typename T>
static void qkv_split_backward_launch(T* dqkv, const T* dq, const T* dk, const T* dv, int B, int S,
                                      int A, int G, int D, float rope_theta) {
  size_t total = (size_t)B * S * (A + 2 * G) * D;
  if (total == 0) return;
  qkv_split_backward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(dqkv, dq, dk, dv, total, S,
                                                                       A, G, D, rope_theta);
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

void qkv_split_forward(float* q, float* k, float* v, const float* qkv, int B, int S, int A, int G,
                       int D, float rope_theta) {
  qkv_split_forward_launch(q, k, v, qkv, B, S, A, G, D, rope_theta);
}
void qkv_split_forward(bf16* q, bf16* k, bf16* v, const bf16* qkv, int B, int S, int A, int G,
                       int D, float rope_theta) {
  qkv_split_forward_launch(q, k, v, qkv, B, S, A, G, D, rope_theta);
}
void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int B,
                        int S, int A, int G, int D, float rope_theta) {
  qkv_split_backward_launch(dqkv, dq, dk, dv, B, S, A, G, D, rope_theta);
}
void qkv_split_backward(bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv, int B, int S,
                        int A, int G, int D, float rope_theta) {
  qkv_split_backward_launch(dqkv, dq, dk, dv, B, S, A, G, D, rope_theta);
}
void heads_merge_forward(float* out, const float* o, int B, int S, int A, int D) {
  heads_merge_launch(out, o, B, S, A, D, true);
}
void heads_merge_forward(bf16* out, const bf16* o, int B, int S, int A, int D) {
  heads_merge_launch(out, o, B, S, A, D, true);
}
void heads_merge_backward(float* d_o, const float* dout, int B, int S, int A, int D) {
  heads_merge_launch(d_o, dout, B, S, A, D, false);
}
void heads_merge_backward(bf16* d_o, const bf16* dout, int B, int S, int A, int D) {
  heads_merge_launch(d_o, dout, B, S, A, D, false);
}

// ---- RoPE alone ----------------------------------------------------------------------------
// mirrors cpu::rope_forward / rope_backward (direction +1 / -1): pair idx is pair i < D/2 of
// head row idx / (D/2) of the (B*H*S, D) tensor, at position s = row % S.
template <typename T>
__global__ void rope_kernel(T* x, size_t pairs, int S, int D, float theta, float direction) {
  GRID_STRIDE_LOOP(idx, pairs) {
    const int half = D / 2;
    const size_t row = idx / half;
    const int i = (int)(idx % half), s = (int)(row % S);
    T* x_row = x + row * D;
    const float lo = to_float(x_row[i]), hi = to_float(x_row[i + half]);
    store(x_row[i], rope_rotate(lo, hi, i, s, D, theta, direction));
    store(x_row[i + half], rope_rotate(hi, lo, i + half, s, D, theta, direction));
  }
}

template <typename T>
static void rope_launch(T* x, int B, int H, int S, int D, float theta, float direction) {
  if (theta <= 0.0f) return;
  if (D % 2 != 0) throw std::invalid_argument("rope: odd D");
  const size_t pairs = (size_t)B * H * S * (D / 2);
  if (pairs == 0) return;
  rope_kernel<<<grid_1d(pairs), kThreads, 0, stream()>>>(x, pairs, S, D, theta, direction);
  KERNEL_CHECK();
}

void rope_forward(float* x, int B, int H, int S, int D, float theta) {
  rope_launch(x, B, H, S, D, theta, 1.0f);
}
void rope_forward(bf16* x, int B, int H, int S, int D, float theta) {
  rope_launch(x, B, H, S, D, theta, 1.0f);
}
void rope_backward(float* dx, int B, int H, int S, int D, float theta) {
  rope_launch(dx, B, H, S, D, theta, -1.0f);
}
void rope_backward(bf16* dx, int B, int H, int S, int D, float theta) {
  rope_launch(dx, B, H, S, D, theta, -1.0f);
}

// ---- causal softmax ------------------------------------------------------------------------
// mirrors cpu::causal_softmax_forward. Block = one row i of one (S, S) matrix; columns
// j <= i get exp(scale s_j - max) / sum, the rest 0. probs may alias scores: every pass
// before the last only reads, and in the last each thread reads then writes its own j.
template <typename T>
__global__ void causal_softmax_forward_kernel(T* probs, const T* scores, int S, float scale) {
  const size_t row = blockIdx.x;
  const int i = (int)(row % S);
  const T* sr = scores + row * S;
  T* pr = probs + row * S;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, scale * to_float(sr[j]));
  mx = block_max(mx);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) sum += expf(scale * to_float(sr[j]) - mx);
  const float inv = 1.0f / block_sum(sum);
  for (int j = threadIdx.x; j < S; j += blockDim.x)
    store(pr[j], j <= i ? expf(scale * to_float(sr[j]) - mx) * inv : 0.0f);
}

// mirrors cpu::causal_softmax_backward: ds_j = scale P_j (dP_j - sum_k dP_k P_k), 0 above
// the diagonal (P is 0 there). dscores may alias dprobs, as in the forward.
template <typename T>
__global__ void causal_softmax_backward_kernel(T* dscores, const T* dprobs, const T* probs, int S,
                                               float scale) {
  const size_t row = blockIdx.x;
  const int i = (int)(row % S);
  const T* dpr = dprobs + row * S;
  const T* pr = probs + row * S;
  T* dsr = dscores + row * S;
  float dot = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) dot += to_float(dpr[j]) * to_float(pr[j]);
  dot = block_sum(dot);
  for (int j = threadIdx.x; j < S; j += blockDim.x)
    store(dsr[j], j <= i ? scale * to_float(pr[j]) * (to_float(dpr[j]) - dot) : 0.0f);
}

template <typename T>
static void causal_softmax_forward_launch(T* probs, const T* scores, int rows, int S,
                                          float scale) {
  size_t blocks = (size_t)rows * S;
  if (blocks == 0) return;
  causal_softmax_forward_kernel<<<(unsigned)blocks, kThreads, 0, stream()>>>(probs, scores, S,
                                                                             scale);
  KERNEL_CHECK();
}

template <typename T>
static void causal_softmax_backward_launch(T* dscores, const T* dprobs, const T* probs, int rows,
                                           int S, float scale) {
  size_t blocks = (size_t)rows * S;
  if (blocks == 0) return;
  causal_softmax_backward_kernel<<<(unsigned)blocks, kThreads, 0, stream()>>>(dscores, dprobs,
                                                                              probs, S, scale);
  KERNEL_CHECK();
}

void causal_softmax_forward(float* probs, const float* scores, int rows, int S, float scale) {
  causal_softmax_forward_launch(probs, scores, rows, S, scale);
}
void causal_softmax_forward(bf16* probs, const bf16* scores, int rows, int S, float scale) {
  causal_softmax_forward_launch(probs, scores, rows, S, scale);
}
void causal_softmax_backward(float* dscores, const float* dprobs, const float* probs, int rows,
                             int S, float scale) {
  causal_softmax_backward_launch(dscores, dprobs, probs, rows, S, scale);
}
void causal_softmax_backward(bf16* dscores, const bf16* dprobs, const bf16* probs, int rows, int S,
                             float scale) {
  causal_softmax_backward_launch(dscores, dprobs, probs, rows, S, scale);
}

}  // namespace cuda
}  // namespace kernels
