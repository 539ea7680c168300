// kernels/cuda/attention.cu: attention layout (fused QKV split with RoPE, head merge), the
// naive path's pieces of one attention pass (kernels/math.h AttentionBlock: softmax, its
// backward, the rescale to the whole row's lse, dropout, delta) and ring attention's merge:
// the CUDA twins of kernels/ops/attention.h, mirroring kernels/cpu/attention.cpp.
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
// One pass of attention, materialised: probs, scores and dprobs are (BH, q.rows, k.rows)
// (BH = B*A), contiguous. Query row i sees keys j < blk.visible(i) (a prefix: positions
// increase along the rows); the rest is masked. Every lse and delta sits at the q view: row i
// of head bh at bh * (q.head_stride / D) + i (attention.h). The row ops run one block per
// row, threads striding over its columns; delta and the merge work at the rows of a view (rows
// of head bh start at bh * head_stride, D apart) with one warp per row, lanes striding over
// the D channels.
//
// Every kernel is templated on the storage type T (float or bf16): loads widen with
// to_float, RoPE and the softmax compute in fp32, store rounds. Without RoPE the layout ops
// move values unchanged, so their bf16 instantiations are exact copies.
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

// ---- one attention pass, materialised --------------------------------------------------------
// mirrors attention_softmax_forward<Device::CPU>. Block = one row (bh, i); over the visible keys
// j < n = blk.visible(i), with x_j = scale s_j and m = max_j x_j:
//   p_j = exp(x_j - m) / sum_j' exp(x_j' - m),  lse_i = m + log sum_j' exp(x_j' - m)
// (exp_simd, as the CPU twin), p_j = 0 for j >= n; a row that sees no key gets lse = -inf.
// probs may alias scores: every pass before the last only reads, and in the last each thread
// reads then writes its own j.
template <typename T>
__global__ void attention_softmax_forward_kernel(T* probs, float* lse, const T* scores,
                                                 size_t lse_stride, float scale,
                                                 AttentionBlock blk) {
  const size_t row = blockIdx.x, bh = row / blk.q.rows;
  const int i = (int)(row % blk.q.rows), L = blk.k.rows, n = blk.visible(i);
  const T* sr = scores + row * L;
  T* pr = probs + row * L;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, scale * to_float(sr[j]));
  mx = block_max(mx);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) sum += exp_simd(scale * to_float(sr[j]) - mx);
  sum = block_sum(sum);
  const float inv = n > 0 ? 1.0f / sum : 0.0f;
  for (int j = threadIdx.x; j < L; j += blockDim.x)
    store(pr[j], j < n ? exp_simd(scale * to_float(sr[j]) - mx) * inv : 0.0f);
  if (lse && threadIdx.x == 0) lse[bh * lse_stride + i] = n > 0 ? mx + logf(sum) : -INFINITY;
}

// mirrors attention_softmax_backward<Device::CPU>: ds_j = scale P_j (dP_j - t) over the visible
// keys, 0 for the rest, with t = delta_i (the whole row's dout . o) or, without delta, this pass's
// sum_j P_j dP_j. dscores may alias dprobs, as in the forward.
template <typename T>
__global__ void attention_softmax_backward_kernel(T* dscores, const T* dprobs, const T* probs,
                                                  const float* delta, size_t delta_stride,
                                                  float scale, AttentionBlock blk) {
  const size_t row = blockIdx.x, bh = row / blk.q.rows;
  const int i = (int)(row % blk.q.rows), L = blk.k.rows, n = blk.visible(i);
  const T* dpr = dprobs + row * L;
  const T* pr = probs + row * L;
  T* dsr = dscores + row * L;
  float t;
  if (delta) {
    t = delta[bh * delta_stride + i];
  } else {
    float dot = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) dot += to_float(dpr[j]) * to_float(pr[j]);
    t = block_sum(dot);
  }
  for (int j = threadIdx.x; j < L; j += blockDim.x)
    store(dsr[j], j < n ? scale * to_float(pr[j]) * (to_float(dpr[j]) - t) : 0.0f);
}

// mirrors attention_probs_rescale<Device::CPU>: P_ij *= exp(lse_pass_i - lse_i) for the visible
// keys, turning a pass's softmax into its share of the whole row's (masked entries are 0 and are
// left alone). A row that saw no key here (lse_pass = -inf) is all zeros and stays so (the
// factor is not computed: lse may be -inf too).
template <typename T>
__global__ void attention_probs_rescale_kernel(T* probs, const float* lse_pass, const float* lse,
                                               size_t total, size_t lse_stride,
                                               AttentionBlock blk) {
  GRID_STRIDE_LOOP(e, total) {
    const size_t row = e / blk.k.rows;
    const int i = (int)(row % blk.q.rows), j = (int)(e % blk.k.rows);
    const size_t at = row / blk.q.rows * lse_stride + i;
    if (lse_pass[at] == -INFINITY || j >= blk.visible(i)) continue;
    store(probs[e], to_float(probs[e]) * expf(lse_pass[at] - lse[at]));
  }
}

// Kept values are scaled by 1/(1-p); p >= 1 drops everything, and the scale 0 avoids 0 * inf.
static float keep_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

// mirrors attention_dropout_forward<Device::CPU>: element (bh, i, j), bh = b A + h, is kept when
// dropout_keep(seed, stream, blk.dropout_index(b, h, i, j), p), the bit the flash kernels
// and the single-rank naive pass draw for the same probability.
template <typename T>
__global__ void attention_dropout_forward_kernel(T* out, uint8_t* mask, const T* probs,
                                                 size_t total, int A, float p, float kept_scale,
                                                 uint64_t seed, uint64_t rng_stream,
                                                 AttentionBlock blk) {
  GRID_STRIDE_LOOP(e, total) {
    const size_t row = e / blk.k.rows, bh = row / blk.q.rows;
    const int i = (int)(row % blk.q.rows), j = (int)(e % blk.k.rows);
    const int b = (int)(bh / A), h = (int)(bh % A);
    const bool keep = p <= 0.0f || dropout_keep(seed, rng_stream, blk.dropout_index(b, h, i, j), p);
    mask[e] = keep ? 1 : 0;
    store(out[e], keep ? to_float(probs[e]) * kept_scale : 0.0f);
  }
}

// Warp-per-row kernels: warp r of the grid takes view row r = bh * rows.rows + i, striding by
// the grid's warp count.
#define WARP_ROW_LOOP(r, n)                                                           \
  for (size_t r = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < (size_t)(n); \
       r += (size_t)gridDim.x * blockDim.x / 32)

// mirrors attention_delta<Device::CPU>: delta_i = sum_c dout_ic o_ic, at the view's rows (delta
// with stride head_stride / D per head).
template <typename T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* o, size_t n_rows,
                                       int D, AttentionRows rows) {
  const int lane = threadIdx.x % 32;
  WARP_ROW_LOOP(r, n_rows) {
    const size_t bh = r / rows.rows, i = r % rows.rows;
    const size_t off = bh * rows.head_stride + i * D;
    float s = 0.0f;
    for (int c = lane; c < D; c += 32) s += to_float(dout[off + c]) * to_float(o[off + c]);
    s = warp_sum(s);
    if (lane == 0) delta[bh * (rows.head_stride / D) + i] = s;
  }
}

// mirrors attention_merge<Device::CPU>, through the same kernels/math.h helpers: per row (lse,
// lse_pass with stride head_stride / D) attention_merge_weights gives lse' = log(e^lse +
// e^lse_pass) and the weights w, w_pass (false: the pass saw no key, the row stays), then
// o' = o w + o_pass w_pass per channel (attention_merge_value). Every lane reads the row's lse
// before lane 0 rewrites it (__syncwarp between).
template <typename T>
__global__ void attention_merge_kernel(float* o, float* lse, const T* o_pass,
                                       const float* lse_pass, size_t n_rows, int D,
                                       AttentionRows rows) {
  const int lane = threadIdx.x % 32;
  WARP_ROW_LOOP(r, n_rows) {
    const size_t bh = r / rows.rows, i = r % rows.rows;
    const size_t off = bh * rows.head_stride + i * D, at = bh * (rows.head_stride / D) + i;
    float w, w_pass, merged;
    // The same answer in every lane of the warp.
    if (!attention_merge_weights(lse[at], lse_pass[at], &w, &w_pass, &merged)) continue;
    for (int c = lane; c < D; c += 32)
      o[off + c] = attention_merge_value(o[off + c], to_float(o_pass[off + c]), w, w_pass);
    __syncwarp();
    if (lane == 0) lse[at] = merged;
  }
}
#undef WARP_ROW_LOOP

// One block per probability row: BH * q.rows blocks.
static unsigned row_blocks(int BH, const AttentionBlock& blk) {
  const size_t rows = (size_t)BH * blk.q.rows;
  if (rows > 0x7FFFFFFFu) throw std::invalid_argument("attention: too many rows for one grid");
  return (unsigned)rows;
}
// Elements between the lse (or delta) of consecutive heads: the view's rows per head.
static size_t row_stride(const AttentionRows& rows, int D) {
  if (D <= 0 || rows.head_stride % D != 0)
    throw std::invalid_argument("attention: the view's head_stride must be whole rows of D");
  return (size_t)(rows.head_stride / D);
}

template <typename T>
static void attention_softmax_forward_launch(T* probs, float* lse, const T* scores, int BH, int D,
                                             float scale, const AttentionBlock& blk) {
  if (BH == 0 || blk.q.rows == 0) return;
  attention_softmax_forward_kernel<<<row_blocks(BH, blk), kThreads, 0, stream()>>>(
      probs, lse, scores, lse ? row_stride(blk.q, D) : 0, scale, blk);
  KERNEL_CHECK();
}

template <typename T>
static void attention_softmax_backward_launch(T* dscores, const T* dprobs, const T* probs,
                                              const float* delta, int BH, int D, float scale,
                                              const AttentionBlock& blk) {
  if (BH == 0 || blk.q.rows == 0 || blk.k.rows == 0) return;
  attention_softmax_backward_kernel<<<row_blocks(BH, blk), kThreads, 0, stream()>>>(
      dscores, dprobs, probs, delta, delta ? row_stride(blk.q, D) : 0, scale, blk);
  KERNEL_CHECK();
}

template <typename T>
static void attention_probs_rescale_launch(T* probs, const float* lse_pass, const float* lse,
                                           int BH, int D, const AttentionBlock& blk) {
  const size_t total = (size_t)BH * blk.q.rows * blk.k.rows;
  if (total == 0) return;
  attention_probs_rescale_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(
      probs, lse_pass, lse, total, row_stride(blk.q, D), blk);
  KERNEL_CHECK();
}

template <typename T>
static void attention_dropout_forward_launch(T* out, uint8_t* mask, const T* probs, int B, int A,
                                             float p, uint64_t seed, uint64_t rng_stream,
                                             const AttentionBlock& blk) {
  const size_t total = (size_t)B * A * blk.q.rows * blk.k.rows;
  if (total == 0) return;
  attention_dropout_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(
      out, mask, probs, total, A, p, keep_scale(p), seed, rng_stream, blk);
  KERNEL_CHECK();
}

template <typename T>
static void attention_delta_launch(float* delta, const T* dout, const T* o, int BH, int D,
                                   const AttentionRows& rows) {
  const size_t n_rows = (size_t)BH * rows.rows;
  if (n_rows == 0) return;
  row_stride(rows, D);  // throws unless whole rows
  attention_delta_kernel<<<grid_1d(n_rows * 32), kThreads, 0, stream()>>>(delta, dout, o, n_rows,
                                                                          D, rows);
  KERNEL_CHECK();
}

template <typename T>
static void attention_merge_launch(float* o, float* lse, const T* o_pass, const float* lse_pass,
                                   int BH, int D, const AttentionRows& rows) {
  const size_t n_rows = (size_t)BH * rows.rows;
  if (n_rows == 0) return;
  row_stride(rows, D);  // throws unless whole rows
  attention_merge_kernel<<<grid_1d(n_rows * 32), kThreads, 0, stream()>>>(o, lse, o_pass,
                                                                          lse_pass, n_rows, D,
                                                                          rows);
  KERNEL_CHECK();
}

template <> void attention_softmax_forward<Device::CUDA, float>(
    float* probs, float* lse, const float* scores, int BH, int D, float scale,
    const AttentionBlock& blk) {
  attention_softmax_forward_launch(probs, lse, scores, BH, D, scale, blk);
}
template <> void attention_softmax_forward<Device::CUDA, bf16>(
    bf16* probs, float* lse, const bf16* scores, int BH, int D, float scale,
    const AttentionBlock& blk) {
  attention_softmax_forward_launch(probs, lse, scores, BH, D, scale, blk);
}
template <> void attention_softmax_forward<Device::CUDA, fp16>(
    fp16* probs, float* lse, const fp16* scores, int BH, int D, float scale,
    const AttentionBlock& blk) {
  attention_softmax_forward_launch(probs, lse, scores, BH, D, scale, blk);
}
template <> void attention_softmax_backward<Device::CUDA, float>(
    float* dscores, const float* dprobs, const float* probs, const float* delta, int BH, int D,
    float scale, const AttentionBlock& blk) {
  attention_softmax_backward_launch(dscores, dprobs, probs, delta, BH, D, scale, blk);
}
template <> void attention_softmax_backward<Device::CUDA, bf16>(
    bf16* dscores, const bf16* dprobs, const bf16* probs, const float* delta, int BH, int D,
    float scale, const AttentionBlock& blk) {
  attention_softmax_backward_launch(dscores, dprobs, probs, delta, BH, D, scale, blk);
}
template <> void attention_softmax_backward<Device::CUDA, fp16>(
    fp16* dscores, const fp16* dprobs, const fp16* probs, const float* delta, int BH, int D,
    float scale, const AttentionBlock& blk) {
  attention_softmax_backward_launch(dscores, dprobs, probs, delta, BH, D, scale, blk);
}
template <> void attention_probs_rescale<Device::CUDA, float>(float* probs, const float* lse_pass,
                                                              const float* lse, int BH, int D,
                                                              const AttentionBlock& blk) {
  attention_probs_rescale_launch(probs, lse_pass, lse, BH, D, blk);
}
template <> void attention_probs_rescale<Device::CUDA, bf16>(bf16* probs, const float* lse_pass,
                                                             const float* lse, int BH, int D,
                                                             const AttentionBlock& blk) {
  attention_probs_rescale_launch(probs, lse_pass, lse, BH, D, blk);
}
template <> void attention_probs_rescale<Device::CUDA, fp16>(fp16* probs, const float* lse_pass,
                                                             const float* lse, int BH, int D,
                                                             const AttentionBlock& blk) {
  attention_probs_rescale_launch(probs, lse_pass, lse, BH, D, blk);
}
template <> void attention_dropout_forward<Device::CUDA, float>(
    float* out, uint8_t* mask, const float* probs, int B, int A, float p, uint64_t seed,
    uint64_t stream, const AttentionBlock& blk) {
  attention_dropout_forward_launch(out, mask, probs, B, A, p, seed, stream, blk);
}
template <> void attention_dropout_forward<Device::CUDA, bf16>(
    bf16* out, uint8_t* mask, const bf16* probs, int B, int A, float p, uint64_t seed,
    uint64_t stream, const AttentionBlock& blk) {
  attention_dropout_forward_launch(out, mask, probs, B, A, p, seed, stream, blk);
}
template <> void attention_dropout_forward<Device::CUDA, fp16>(
    fp16* out, uint8_t* mask, const fp16* probs, int B, int A, float p, uint64_t seed,
    uint64_t stream, const AttentionBlock& blk) {
  attention_dropout_forward_launch(out, mask, probs, B, A, p, seed, stream, blk);
}
template <> void attention_delta<Device::CUDA, float>(
    float* delta, const float* dout, const float* o, int BH, int D, const AttentionRows& rows) {
  attention_delta_launch(delta, dout, o, BH, D, rows);
}
template <> void attention_delta<Device::CUDA, bf16>(float* delta, const bf16* dout, const bf16* o,
                                                     int BH, int D, const AttentionRows& rows) {
  attention_delta_launch(delta, dout, o, BH, D, rows);
}
template <> void attention_delta<Device::CUDA, fp16>(float* delta, const fp16* dout, const fp16* o,
                                                     int BH, int D, const AttentionRows& rows) {
  attention_delta_launch(delta, dout, o, BH, D, rows);
}
template <> void attention_merge<Device::CUDA, float>(float* o, float* lse, const float* o_pass,
                                                      const float* lse_pass, int BH, int D,
                                                      const AttentionRows& rows) {
  attention_merge_launch(o, lse, o_pass, lse_pass, BH, D, rows);
}
template <> void attention_merge<Device::CUDA, bf16>(float* o, float* lse, const bf16* o_pass,
                                                     const float* lse_pass, int BH, int D,
                                                     const AttentionRows& rows) {
  attention_merge_launch(o, lse, o_pass, lse_pass, BH, D, rows);
}
template <> void attention_merge<Device::CUDA, fp16>(float* o, float* lse, const fp16* o_pass,
                                                     const float* lse_pass, int BH, int D,
                                                     const AttentionRows& rows) {
  attention_merge_launch(o, lse, o_pass, lse_pass, BH, D, rows);
}

}  // namespace kernels
