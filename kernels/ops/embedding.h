// kernels/ops/embedding.h: the token embedding over a range of the vocabulary, and the learned
// position embedding.
// Twins: kernels/cpu/embedding.cpp, kernels/cuda/embedding.cu.
//
// A table of vocab_rows rows holds token ids [vocab_start, vocab_start + vocab_rows) (the
// whole vocabulary on one rank; a tensor-parallel rank's slice otherwise). tokens are int32.
// The gradients into the tables accumulate (+=). T is the storage of the tables and rows.
//
// defines: embedding_forward, embedding_backward, position_embedding_forward,
//          position_embedding_backward
#pragma once
#include <algorithm>  // std::min

#include "kernels/dispatch.h"

namespace kernels {

// out(N,C) ("=") = wte[tokens[i] - vocab_start] for the tokens in range, 0 for the others.
template <Device Dev, class T>
void embedding_forward(T* out, const int* tokens, const T* wte, int vocab_start, int vocab_rows,
                       int N, int C);
template <class T>
void embedding_forward(Device d, T* out, const int* tokens, const T* wte, int vocab_start,
                       int vocab_rows, int N, int C) {
  count_kernel(4.0 * N + 2.0 * N * C * sizeof(T));
  ON_DEVICE(embedding_forward, T)(out, tokens, wte, vocab_start, vocab_rows, N, C);
}

// dwte[tokens[i] - vocab_start] += dout[i] for the tokens in range. CUDA fp32: atomicAdd, so
// the summation order (the last bits) varies from run to run; CUDA bf16 and the CPU:
// deterministic.
template <Device Dev, class T>
void embedding_backward(T* dwte, const T* dout, const int* tokens, int vocab_start,
                        int vocab_rows, int N, int C);
template <class T>
void embedding_backward(Device d, T* dwte, const T* dout, const int* tokens, int vocab_start,
                        int vocab_rows, int N, int C) {
  count_kernel(4.0 * N + 3.0 * N * C * sizeof(T));
  ON_DEVICE(embedding_backward, T)(dwte, dout, tokens, vocab_start, vocab_rows, N, C);
}

// Learned positions: row i of out(N,C) is token row first_row + i of a (batch, seq_len)
// layout, at local position s = (first_row + i) % seq_len, global position pos.at(s)
// (context parallelism; the identity by default): out[i] += wpe[pos.at(s)].
template <Device Dev, class T>
void position_embedding_forward(T* out, const T* wpe, int N, int seq_len, int first_row, int C,
                                const TokenPositions& pos);
template <class T>
void position_embedding_forward(Device d, T* out, const T* wpe, int N, int seq_len,
                                int first_row, int C,
                                const TokenPositions& pos = TokenPositions()) {
  count_kernel((2.0 * N + std::min(N, seq_len)) * C * sizeof(T));
  ON_DEVICE(position_embedding_forward, T)(out, wpe, N, seq_len, first_row, C, pos);
}

// dwpe[pos.at((first_row + i) % seq_len)] += dout[i].
template <Device Dev, class T>
void position_embedding_backward(T* dwpe, const T* dout, int N, int seq_len, int first_row, int C,
                                 const TokenPositions& pos);
template <class T>
void position_embedding_backward(Device d, T* dwpe, const T* dout, int N, int seq_len,
                                 int first_row, int C,
                                 const TokenPositions& pos = TokenPositions()) {
  count_kernel(((double)N + 2.0 * std::min(N, seq_len)) * C * sizeof(T));
  ON_DEVICE(position_embedding_backward, T)(dwpe, dout, N, seq_len, first_row, C, pos);
}

}  // namespace kernels
