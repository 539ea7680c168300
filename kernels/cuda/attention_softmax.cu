// kernels/cuda/attention_softmax.cu: the naive path's pieces of one attention pass
// (kernels/math.h AttentionBlock: the softmax, its backward, the rescale to the whole row's
// lse, dropout, delta) and ring attention's log-sum-exp merge: the CUDA twins of the softmax
// half of kernels/ops/attention.h, mirroring kernels/cpu/attention_softmax.cpp. The layout ops
// (QKV split, RoPE, heads merge) are in attention_layout.cu.
//
// What each thread holds: the row ops (softmax forward and backward) run one block per
// probability row, each thread striding over the row's columns and meeting in block_max /
// block_sum; the rescale and dropout hold one element per thread; delta and the merge hold one
// view row per warp, lanes striding over its D channels and meeting in warp_sum.
// Per probability entry the softmax forward reads the score three times (the max, the sum and
// the writing pass, each recomputing scale x and its exp) and writes P once: 4 sizeof(T) bytes
// for about 10 FLOPs (an exp counted as one). Its backward reads P and dP and writes dS,
// 3 sizeof(T) bytes for 3 FLOPs (without delta the row's dot reads P and dP once more: 5 and
// 5). The rescale reads and writes P (an exp and a multiply); dropout reads P and writes the
// kept value and a mask byte. delta reads 2 D sizeof(T) bytes a row for 2 D FLOPs; the merge
// reads o (fp32) and o_pass and writes o, 8 + sizeof(T) bytes for 3 FLOPs a channel. All of
// them are memory-bound.
//
// One pass of attention, materialised: probs, scores and dprobs are (BH, q.rows, k.rows)
// (BH = B*A), contiguous. Query row i sees keys j < blk.visible(i) (a prefix: positions
// increase along the rows); the rest is masked. Every lse and delta sits at the q view: row i
// of head bh at bh * (q.head_stride / D) + i (attention.h). Delta and the merge work at the
// rows of a view (rows of head bh start at bh * head_stride, D apart).
//
// Every kernel is templated on the storage type T (float, bf16 or fp16): loads widen with
// to_float, the softmax computes in fp32, store rounds; lse, delta and the merge's
// accumulator o stay fp32.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/math.h"
#include "kernels/ops/attention.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), cublas(), kThreads, grid_1d, the reductions

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
