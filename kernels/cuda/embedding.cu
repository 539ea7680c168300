// kernels/cuda/embedding.cu: the token embedding over a range of the vocabulary and the learned
// position embedding: the CUDA twins of kernels/ops/embedding.h, mirroring
// kernels/cpu/embedding.cpp.
//
// Kernels are templated on the storage type T (float or bf16), as in elementwise.cu. The fp32
// token embedding's gradient uses float atomicAdd (tokens repeat), so its summation order, and
// with it the last bits, vary from run to run. The bf16 one cannot: an atomic add into a bf16
// table would round at every add, so there each token's first row owns the token and sums all
// its rows itself (deterministic, O(N^2) token comparisons; see
// embedding_backward_wte_owner_kernel). The token table may be a vocabulary range (tensor
// parallelism): tokens outside it embed as 0 and add no gradient. The position embedding's
// gradient is deterministic: one thread per (local position, channel) sums its rows in order
// into dwpe[pos.at(s)] (at() is one to one, so no two threads share a table row).
#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/math.h"
#include "kernels/ops/embedding.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), cublas(), kThreads, grid_1d, the reductions

// ---- embedding -----------------------------------------------------------------------------
// The token table holds ids [vocab_start, vocab_start + vocab_rows): a tensor-parallel rank's
// slice of the vocabulary, or all of it. The older whole-vocabulary ops with wpe are the
// range [0, INT_MAX) followed by the position op.

// Row of the table holding token id `token`, or -1 when another rank owns it.
__device__ inline int table_row(int token, int vocab_start, int vocab_rows) {
  const int row = token - vocab_start;
  return row >= 0 && row < vocab_rows ? row : -1;
}

// mirrors embedding_forward<Device::CPU>: out[n, c] = wte[tok[n] - vocab_start, c], 0 for a token
// outside the range.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int* tokens, const T* wte, int vocab_start,
                                         int vocab_rows, size_t total, int C) {
  GRID_STRIDE_LOOP(i, total) {
    const int row = table_row(tokens[i / C], vocab_start, vocab_rows);
    store(out[i], row >= 0 ? to_float(wte[(size_t)row * C + i % C]) : 0.0f);
  }
}

// mirrors position_embedding_forward<Device::CPU>: out[n, c] += wpe[pos.at(s), c], s = (first_row +
// n) mod seq_len the local position, pos.at(s) the global one.
template <typename T>
__global__ void position_embedding_forward_kernel(T* out, const T* wpe, size_t total, int seq_len,
                                                  int first_row, int C, TokenPositions pos) {
  GRID_STRIDE_LOOP(i, total) {
    const size_t s = (size_t)pos.at((int)(((size_t)first_row + i / C) % seq_len));
    store(out[i], to_float(out[i]) + to_float(wpe[s * C + i % C]));
  }
}

// mirrors embedding_backward<Device::CPU>, fp32: dwte[tok[n] - vocab_start, c] += dout[n, c].
// Several rows may carry the same token, hence atomicAdd (order-nondeterministic).
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int* tokens,
                                              int vocab_start, int vocab_rows, size_t total,
                                              int C) {
  GRID_STRIDE_LOOP(i, total) {
    const int row = table_row(tokens[i / C], vocab_start, vocab_rows);
    if (row >= 0) atomicAdd(&dwte[(size_t)row * C + i % C], dout[i]);
  }
}

// mirrors embedding_backward<Device::CPU> without atomics, for bf16 tables. Block n (kThreads
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

// mirrors position_embedding_backward<Device::CPU>: dwpe[pos.at(s), c] += sum over the rows n whose
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

template <> void embedding_forward<Device::CUDA, float>(float* out, const int* tokens,
                                                        const float* wte, int vocab_start,
                                                        int vocab_rows, int N, int C) {
  embedding_forward_launch(out, tokens, wte, vocab_start, vocab_rows, N, C);
}
template <> void embedding_forward<Device::CUDA, bf16>(
    bf16* out, const int* tokens, const bf16* wte, int vocab_start, int vocab_rows, int N, int C) {
  embedding_forward_launch(out, tokens, wte, vocab_start, vocab_rows, N, C);
}
template <> void embedding_forward<Device::CUDA, fp16>(
    fp16* out, const int* tokens, const fp16* wte, int vocab_start, int vocab_rows, int N, int C) {
  embedding_forward_launch(out, tokens, wte, vocab_start, vocab_rows, N, C);
}
template <> void embedding_backward<Device::CUDA, float>(float* dwte, const float* dout,
                                                         const int* tokens, int vocab_start,
                                                         int vocab_rows, int N, int C) {
  embedding_backward_launch(dwte, dout, tokens, vocab_start, vocab_rows, N, C);
}
template <> void embedding_backward<Device::CUDA, bf16>(bf16* dwte, const bf16* dout,
                                                        const int* tokens, int vocab_start,
                                                        int vocab_rows, int N, int C) {
  embedding_backward_launch(dwte, dout, tokens, vocab_start, vocab_rows, N, C);
}
template <> void embedding_backward<Device::CUDA, fp16>(fp16* dwte, const fp16* dout,
                                                        const int* tokens, int vocab_start,
                                                        int vocab_rows, int N, int C) {
  embedding_backward_launch(dwte, dout, tokens, vocab_start, vocab_rows, N, C);
}
template <> void position_embedding_forward<Device::CUDA, float>(float* out, const float* wpe,
                                                                 int N, int seq_len, int first_row,
                                                                 int C, const TokenPositions& pos) {
  position_embedding_forward_launch(out, wpe, N, seq_len, first_row, C, pos);
}
template <> void position_embedding_forward<Device::CUDA, bf16>(bf16* out, const bf16* wpe, int N,
                                                                int seq_len, int first_row, int C,
                                                                const TokenPositions& pos) {
  position_embedding_forward_launch(out, wpe, N, seq_len, first_row, C, pos);
}
template <> void position_embedding_forward<Device::CUDA, fp16>(fp16* out, const fp16* wpe, int N,
                                                                int seq_len, int first_row, int C,
                                                                const TokenPositions& pos) {
  position_embedding_forward_launch(out, wpe, N, seq_len, first_row, C, pos);
}
template <> void position_embedding_backward<Device::CUDA, float>(
    float* dwpe, const float* dout, int N, int seq_len, int first_row, int C,
    const TokenPositions& pos) {
  position_embedding_backward_launch(dwpe, dout, N, seq_len, first_row, C, pos);
}
template <> void position_embedding_backward<Device::CUDA, bf16>(bf16* dwpe, const bf16* dout,
                                                                 int N, int seq_len, int first_row,
                                                                 int C, const TokenPositions& pos) {
  position_embedding_backward_launch(dwpe, dout, N, seq_len, first_row, C, pos);
}
template <> void position_embedding_backward<Device::CUDA, fp16>(fp16* dwpe, const fp16* dout,
                                                                 int N, int seq_len, int first_row,
                                                                 int C, const TokenPositions& pos) {
  position_embedding_backward_launch(dwpe, dout, N, seq_len, first_row, C, pos);
}

}  // namespace kernels
