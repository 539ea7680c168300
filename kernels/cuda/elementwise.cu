// kernels/cuda/elementwise.cu: elementwise ops, bias, embedding, activations, dropout, and the
// fp32 <-> bf16 conversion.
//
// Each kernel is the loop body of its CPU twin (kernels::cpu::NAME) run by one thread per
// element (GRID_STRIDE_LOOP), calling the same kernels/math.h function. Kernels are
// templated on the storage type T (float or bf16): they load with to_float, compute in fp32
// and write with store, so for T = float they are the plain fp32 loops and for T = bf16 the
// "widen, compute, round" of the CPU's bf16 twins. Each op has one template launcher; the
// entry points of cuda_ops.h are its float and bf16 instantiations.
//
// The only reductions here are over rows of a (N, C) matrix (bias_backward, the position
// embedding's gradient); they sum each column in a fixed order, so they are deterministic.
// The fp32 token embedding's gradient uses float atomicAdd (tokens repeat), so its
// summation order, and with it the last bits, vary from run to run. The bf16 one cannot:
// an atomic add into a bf16 table would round at every add, so there each token's first
// row owns the token and sums all its rows itself (deterministic; see
// embedding_backward_wte_owner_kernel). The token table may be a vocabulary range (tensor
// parallelism): tokens outside it embed as 0 and add no gradient.
#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda_ops.h"
#include "kernels/math.h"

namespace kernels {
namespace cuda {

// ---- elementwise ---------------------------------------------------------------------------
// mirrors cpu::add
template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(out[i], to_float(a[i]) + to_float(b[i]));
}
// mirrors cpu::accumulate
template <typename T>
__global__ void accumulate_kernel(T* out, const T* a, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(out[i], to_float(out[i]) + to_float(a[i]));
}
// mirrors cpu::scale (fp32 only: ops.h has no bf16 scale)
__global__ void scale_kernel(float* x, float s, size_t n) { GRID_STRIDE_LOOP(i, n) x[i] *= s; }
// mirrors cpu::add_bias: element (row, c) of the flat index i is c = i % C.
template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, size_t n, int C) {
  GRID_STRIDE_LOOP(i, n) store(y[i], to_float(y[i]) + to_float(bias[i % C]));
}
// out = round(in) (float -> bf16, nearest even) or widen(in) (bf16 -> float).
template <typename Out, typename In>
__global__ void convert_kernel(Out* out, const In* in, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(out[i], to_float(in[i]));
}

template <typename T>
static void add_launch(T* out, const T* a, const T* b, size_t n) {
  if (n == 0) return;
  add_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, a, b, n);
  KERNEL_CHECK();
}
template <typename T>
static void accumulate_launch(T* out, const T* a, size_t n) {
  if (n == 0) return;
  accumulate_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, a, n);
  KERNEL_CHECK();
}
template <typename T>
static void add_bias_launch(T* y, const T* bias, int N, int C) {
  size_t n = (size_t)N * C;
  if (n == 0) return;
  add_bias_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(y, bias, n, C);
  KERNEL_CHECK();
}
template <typename Out, typename In>
static void convert_launch(Out* out, const In* in, size_t n) {
  if (n == 0) return;
  convert_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, in, n);
  KERNEL_CHECK();
}

void add(float* out, const float* a, const float* b, size_t n) { add_launch(out, a, b, n); }
void add(bf16* out, const bf16* a, const bf16* b, size_t n) { add_launch(out, a, b, n); }
void accumulate(float* out, const float* a, size_t n) { accumulate_launch(out, a, n); }
void accumulate(bf16* out, const bf16* a, size_t n) { accumulate_launch(out, a, n); }
void scale(float* x, float s, size_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(x, s, n);
  KERNEL_CHECK();
}
void add_bias(float* y, const float* bias, int N, int C) { add_bias_launch(y, bias, N, C); }
void add_bias(bf16* y, const bf16* bias, int N, int C) { add_bias_launch(y, bias, N, C); }
void convert(bf16* out, const float* in, size_t n) { convert_launch(out, in, n); }
void convert(float* out, const bf16* in, size_t n) { convert_launch(out, in, n); }

// ---- column sums ---------------------------------------------------------------------------
// mirrors cpu::bias_backward: dbias[c] += sum_n dy[n, c].
// A (32 x 16) block owns 32 adjacent columns: threadIdx.x picks the column, so each warp
// reads 32 consecutive elements of one row (coalesced); threadIdx.y walks the rows with
// stride 16; the 16 partial sums of a column then meet in shared memory in a fixed order.
// The sum stays fp32 and is added into a bf16 dbias once, so it is rounded once.
constexpr int kColumnRows = 16;
template <typename T>
__global__ void bias_backward_kernel(T* dbias, const T* dy, int N, int C) {
  __shared__ float partial[kColumnRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < C)
    for (int n = threadIdx.y; n < N; n += kColumnRows) s += to_float(dy[(size_t)n * C + c]);
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
    for (int r = 0; r < kColumnRows; r++) total += partial[r][threadIdx.x];
    store(dbias[c], to_float(dbias[c]) + total);
  }
}

template <typename T>
static void bias_backward_launch(T* dbias, const T* dy, int N, int C) {
  if (N == 0 || C == 0) return;
  bias_backward_kernel<<<(C + 31) / 32, dim3(32, kColumnRows), 0, stream()>>>(dbias, dy, N, C);
  KERNEL_CHECK();
}
void bias_backward(float* dbias, const float* dy, int N, int C) {
  bias_backward_launch(dbias, dy, N, C);
}
void bias_backward(bf16* dbias, const bf16* dy, int N, int C) {
  bias_backward_launch(dbias, dy, N, C);
}

// ---- embedding -----------------------------------------------------------------------------
// The token table holds ids [vocab_start, vocab_start + vocab_rows): a tensor-parallel rank's
// slice of the vocabulary, or all of it. The older whole-vocabulary ops with wpe are the
// range [0, INT_MAX) followed by the position op.

// Row of the table holding token id `token`, or -1 when another rank owns it.
__device__ inline int table_row(int token, int vocab_start, int vocab_rows) {
  const int row = token - vocab_start;
  return row >= 0 && row < vocab_rows ? row : -1;
}

// mirrors cpu::embedding_forward: out[n, c] = wte[tok[n] - vocab_start, c], 0 for a token
// outside the range.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int* tokens, const T* wte, int vocab_start,
                                         int vocab_rows, size_t total, int C) {
  GRID_STRIDE_LOOP(i, total) {
    const int row = table_row(tokens[i / C], vocab_start, vocab_rows);
    store(out[i], row >= 0 ? to_float(wte[(size_t)row * C + i % C]) : 0.0f);
  }
}

// mirrors cpu::position_embedding_forward: out[n, c] += wpe[pos.at(s), c], s = (first_row + n)
// mod seq_len the local position, pos.at(s) the global one.
template <typename T>
__global__ void position_embedding_forward_kernel(T* out, const T* wpe, size_t total, int seq_len,
                                                  int first_row, int C, TokenPositions pos) {
  GRID_STRIDE_LOOP(i, total) {
    const size_t s = (size_t)pos.at((int)(((size_t)first_row + i / C) % seq_len));
    store(out[i], to_float(out[i]) + to_float(wpe[s * C + i % C]));
  }
}

// mirrors cpu::embedding_backward, fp32: dwte[tok[n] - vocab_start, c] += dout[n, c]. Several
// rows may carry the same token, hence atomicAdd (order-nondeterministic).
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int* tokens,
                                              int vocab_start, int vocab_rows, size_t total,
                                              int C) {
  GRID_STRIDE_LOOP(i, total) {
    const int row = table_row(tokens[i / C], vocab_start, vocab_rows);
    if (row >= 0) atomicAdd(&dwte[(size_t)row * C + i % C], dout[i]);
  }
}

// mirrors cpu::embedding_backward without atomics, for bf16 tables. Block n (kThreads
// threads) works only if row n's token is in the range and row n is its first occurrence; it
// then sums, per channel, dout over every row m >= n with that token, in row order and in
// fp32, and adds the sum into dwte once (one rounding, like the CPU twin's). Deterministic;
// the price is O(N^2) token comparisons (the tokens, 4N bytes, stay in cache).
template <typename T>
__global__ void embedding_backward_wte_owner_kernel(T* dwte, const T* dout, const int* tokens,
                                                    int vocab_start, int vocab_rows, int N,
                                                    int C) {
  __shared__ int rows[kThreads];  // this chunk's rows carrying the token, ascending
  __shared__ int warp_matches[kThreads / 32];
  const int n = blockIdx.x, tok = tokens[n];
  const int row = table_row(tok, vocab_start, vocab_rows);
  if (row < 0) return;  // the same answer in every thread, before any barrier
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  bool seen_before = false;
  for (int m = threadIdx.x; m < n; m += blockDim.x) seen_before |= tokens[m] == tok;
  if (__syncthreads_or(seen_before)) return;  // the same answer in every thread
  for (int c0 = 0; c0 < C; c0 += blockDim.x) {
    const int c = c0 + threadIdx.x;
    float acc = 0.0f;
    for (int base = n; base < N; base += blockDim.x) {
      // Compact the chunk's matches: a thread's slot is the matches in earlier warps plus
      // those in lower lanes of its own warp.
      const int m = base + threadIdx.x;
      const bool match = m < N && tokens[m] == tok;
      const unsigned ballot = __ballot_sync(0xffffffffu, match);
      if (lane == 0) warp_matches[warp] = __popc(ballot);
      __syncthreads();
      int offset = 0, count = 0;
      for (int w = 0; w < kThreads / 32; w++) {
        offset += w < warp ? warp_matches[w] : 0;
        count += warp_matches[w];
      }
      if (match) rows[offset + __popc(ballot & ((1u << lane) - 1u))] = m;
      __syncthreads();
      if (c < C)
        for (int r = 0; r < count; r++) acc += to_float(dout[(size_t)rows[r] * C + c]);
      __syncthreads();  // the next chunk rewrites rows[] and warp_matches[]
    }
    if (c < C) {
      T& dst = dwte[(size_t)row * C + c];
      store(dst, to_float(dst) + acc);
    }
  }
}

// mirrors cpu::position_embedding_backward: dwpe[pos.at(s), c] += sum over the rows n whose
// local position (first_row + n) % seq_len is s, i.e. n = n0, n0 + seq_len, ... with
// n0 = (s - first_row) mod seq_len. One thread per (s, c) walks its rows in order:
// deterministic, and summed in fp32 before the one rounding into a bf16 dwpe. pos.at is one
// to one, so no two threads write the same table element.
template <typename T>
__global__ void position_embedding_backward_kernel(T* dwpe, const T* dout, int N, int seq_len,
                                                   int first_row, int C, TokenPositions pos) {
  GRID_STRIDE_LOOP(i, (size_t)seq_len * C) {
    const int s = (int)(i / C);
    const size_t c = i % C;
    const int n0 = ((s - first_row) % seq_len + seq_len) % seq_len;
    float acc = 0.0f;
    for (size_t n = n0; n < (size_t)N; n += seq_len) acc += to_float(dout[n * C + c]);
    T& dst = dwpe[(size_t)pos.at(s) * C + c];
    store(dst, to_float(dst) + acc);
  }
}

template <typename T>
static void embedding_forward_launch(T* out, const int* tokens, const T* wte, int vocab_start,
                                     int vocab_rows, int N, int C) {
  const size_t total = (size_t)N * C;
  if (total == 0) return;
  embedding_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, tokens, wte,
                                                                      vocab_start, vocab_rows,
                                                                      total, C);
  KERNEL_CHECK();
}

template <typename T>
static void embedding_backward_launch(T* dwte, const T* dout, const int* tokens, int vocab_start,
                                      int vocab_rows, int N, int C) {
  const size_t total = (size_t)N * C;
  if (total == 0) return;
  if constexpr (std::is_same<T, float>::value)
    embedding_backward_wte_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(
        dwte, dout, tokens, vocab_start, vocab_rows, total, C);
  else
    embedding_backward_wte_owner_kernel<<<N, kThreads, 0, stream()>>>(dwte, dout, tokens,
                                                                     vocab_start, vocab_rows, N, C);
  KERNEL_CHECK();
}

template <typename T>
static void position_embedding_forward_launch(T* out, const T* wpe, int N, int seq_len,
                                              int first_row, int C, const TokenPositions& pos) {
  const size_t total = (size_t)N * C;
  if (total == 0) return;
  position_embedding_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(
      out, wpe, total, seq_len, first_row, C, pos);
  KERNEL_CHECK();
}

template <typename T>
static void position_embedding_backward_launch(T* dwpe, const T* dout, int N, int seq_len,
                                               int first_row, int C, const TokenPositions& pos) {
  const size_t total = (size_t)seq_len * C;
  if (N == 0 || total == 0) return;
  position_embedding_backward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(
      dwpe, dout, N, seq_len, first_row, C, pos);
  KERNEL_CHECK();
}

void embedding_forward(float* out, const int* tokens, const float* wte, int vocab_start,
                       int vocab_rows, int N, int C) {
  embedding_forward_launch(out, tokens, wte, vocab_start, vocab_rows, N, C);
}
void embedding_forward(bf16* out, const int* tokens, const bf16* wte, int vocab_start,
                       int vocab_rows, int N, int C) {
  embedding_forward_launch(out, tokens, wte, vocab_start, vocab_rows, N, C);
}
void embedding_backward(float* dwte, const float* dout, const int* tokens, int vocab_start,
                        int vocab_rows, int N, int C) {
  embedding_backward_launch(dwte, dout, tokens, vocab_start, vocab_rows, N, C);
}
void embedding_backward(bf16* dwte, const bf16* dout, const int* tokens, int vocab_start,
                        int vocab_rows, int N, int C) {
  embedding_backward_launch(dwte, dout, tokens, vocab_start, vocab_rows, N, C);
}
void position_embedding_forward(float* out, const float* wpe, int N, int seq_len, int first_row,
                                int C, const TokenPositions& pos) {
  position_embedding_forward_launch(out, wpe, N, seq_len, first_row, C, pos);
}
void position_embedding_forward(bf16* out, const bf16* wpe, int N, int seq_len, int first_row,
                                int C, const TokenPositions& pos) {
  position_embedding_forward_launch(out, wpe, N, seq_len, first_row, C, pos);
}
void position_embedding_backward(float* dwpe, const float* dout, int N, int seq_len,
                                 int first_row, int C, const TokenPositions& pos) {
  position_embedding_backward_launch(dwpe, dout, N, seq_len, first_row, C, pos);
}
void position_embedding_backward(bf16* dwpe, const bf16* dout, int N, int seq_len, int first_row,
                                 int C, const TokenPositions& pos) {
  position_embedding_backward_launch(dwpe, dout, N, seq_len, first_row, C, pos);
}

// ---- activations ---------------------------------------------------------------------------
// mirrors cpu::gelu_forward
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* in, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(out[i], gelu(to_float(in[i])));
}
// mirrors cpu::gelu_backward: din = dout * gelu'(in)
template <typename T>
__global__ void gelu_backward_kernel(T* din, const T* dout, const T* in, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(din[i], to_float(dout[i]) * gelu_grad(to_float(in[i])));
}
// mirrors cpu::swiglu_forward: row r of in is [gate(F) | up(F)]; out[r, f] = silu(gate) * up.
template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* in, size_t total, int F) {
  GRID_STRIDE_LOOP(i, total) {
    size_t r = i / F, f = i % F;
    const T* row = in + r * 2 * F;
    store(out[i], silu(to_float(row[f])) * to_float(row[F + f]));
  }
}
// mirrors cpu::swiglu_backward: d gate = dout * up * silu'(gate), d up = dout * silu(gate).
template <typename T>
__global__ void swiglu_backward_kernel(T* din, const T* dout, const T* in, size_t total, int F) {
  GRID_STRIDE_LOOP(i, total) {
    size_t r = i / F, f = i % F;
    const T* row = in + r * 2 * F;
    T* drow = din + r * 2 * F;
    float gate = to_float(row[f]), up = to_float(row[F + f]), g = to_float(dout[i]);
    store(drow[f], g * up * silu_grad(gate));
    store(drow[F + f], g * silu(gate));
  }
}

template <typename T>
static void gelu_forward_launch(T* out, const T* in, size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, in, n);
  KERNEL_CHECK();
}
template <typename T>
static void gelu_backward_launch(T* din, const T* dout, const T* in, size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(din, dout, in, n);
  KERNEL_CHECK();
}
template <typename T>
static void swiglu_forward_launch(T* out, const T* in, int N, int F) {
  size_t total = (size_t)N * F;
  if (total == 0) return;
  swiglu_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, in, total, F);
  KERNEL_CHECK();
}
template <typename T>
static void swiglu_backward_launch(T* din, const T* dout, const T* in, int N, int F) {
  size_t total = (size_t)N * F;
  if (total == 0) return;
  swiglu_backward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(din, dout, in, total, F);
  KERNEL_CHECK();
}

void gelu_forward(float* out, const float* in, size_t n) { gelu_forward_launch(out, in, n); }
void gelu_forward(bf16* out, const bf16* in, size_t n) { gelu_forward_launch(out, in, n); }
void gelu_backward(float* din, const float* dout, const float* in, size_t n) {
  gelu_backward_launch(din, dout, in, n);
}
void gelu_backward(bf16* din, const bf16* dout, const bf16* in, size_t n) {
  gelu_backward_launch(din, dout, in, n);
}
void swiglu_forward(float* out, const float* in, int N, int F) {
  swiglu_forward_launch(out, in, N, F);
}
void swiglu_forward(bf16* out, const bf16* in, int N, int F) {
  swiglu_forward_launch(out, in, N, F);
}
void swiglu_backward(float* din, const float* dout, const float* in, int N, int F) {
  swiglu_backward_launch(din, dout, in, N, F);
}
void swiglu_backward(bf16* din, const bf16* dout, const bf16* in, int N, int F) {
  swiglu_backward_launch(din, dout, in, N, F);
}

// ---- dropout -------------------------------------------------------------------------------
// Kept values are scaled by 1/(1-p) ("inverted dropout", so inference needs no rescale);
// p >= 1 drops everything, and the scale 0 avoids 0 * inf = NaN.
static float keep_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

// mirrors cpu::dropout_forward: the mask is a pure function of (seed, stream, index), with
// index = pos.element(i, width) the element's single-rank index (i itself by default), so it
// does not depend on T.
template <typename T>
__global__ void dropout_forward_kernel(T* out, uint8_t* mask, const T* in, size_t n, float p,
                                       float kept_scale, uint64_t seed, uint64_t stream,
                                       TokenPositions pos, int width) {
  GRID_STRIDE_LOOP(i, n) {
    bool keep = p <= 0.0f || dropout_keep(seed, stream, pos.element(i, width), p);
    mask[i] = keep ? 1 : 0;
    store(out[i], keep ? to_float(in[i]) * kept_scale : 0.0f);
  }
}
// mirrors cpu::dropout_backward: din = dout * mask / (1-p)
template <typename T>
__global__ void dropout_backward_kernel(T* din, const T* dout, const uint8_t* mask, size_t n,
                                        float kept_scale) {
  GRID_STRIDE_LOOP(i, n) store(din[i], mask[i] ? to_float(dout[i]) * kept_scale : 0.0f);
}

template <typename T>
static void dropout_forward_launch(T* out, uint8_t* mask, const T* in, size_t n, float p,
                                   uint64_t seed, uint64_t stream_id, const TokenPositions& pos,
                                   int width) {
  if (n == 0) return;
  if (width <= 0) throw std::invalid_argument("dropout_forward: width must be positive");
  dropout_forward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, mask, in, n, p, keep_scale(p),
                                                                seed, stream_id, pos, width);
  KERNEL_CHECK();
}
template <typename T>
static void dropout_backward_launch(T* din, const T* dout, const uint8_t* mask, size_t n,
                                    float p) {
  if (n == 0) return;
  dropout_backward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(din, dout, mask, n, keep_scale(p));
  KERNEL_CHECK();
}

void dropout_forward(float* out, uint8_t* mask, const float* in, size_t n, float p, uint64_t seed,
                     uint64_t stream_id, const TokenPositions& pos, int width) {
  dropout_forward_launch(out, mask, in, n, p, seed, stream_id, pos, width);
}
void dropout_forward(bf16* out, uint8_t* mask, const bf16* in, size_t n, float p, uint64_t seed,
                     uint64_t stream_id, const TokenPositions& pos, int width) {
  dropout_forward_launch(out, mask, in, n, p, seed, stream_id, pos, width);
}
void dropout_backward(float* din, const float* dout, const uint8_t* mask, size_t n, float p) {
  dropout_backward_launch(din, dout, mask, n, p);
}
void dropout_backward(bf16* din, const bf16* dout, const uint8_t* mask, size_t n, float p) {
  dropout_backward_launch(din, dout, mask, n, p);
}

}  // namespace cuda
}  // namespace kernels
