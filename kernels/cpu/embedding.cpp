// kernels/cpu/embedding.cpp: the token embedding over a range of the vocabulary, and the
// learned position embedding.
//
// Tensor parallelism splits the token table by rows (vocabulary ids): rank r holds ids
// [vocab_start, vocab_start + vocab_rows). Each rank writes the rows of the tokens it owns
// and zeros for the others, so the sum of the ranks' outputs (the all-reduce or
// reduce-scatter that follows, parallel/tensor_parallel.h) is the full embedding. With one
// rank, vocab_start = 0 and vocab_rows = V: every token is in range.
//
// Positions are separate so that a rank holding only some token rows (sequence parallelism:
// rows [first_row, first_row + N) of the (batch, seq_len) layout) adds the right positions.
// Row first_row + i sits at local position s = (first_row + i) % seq_len and global position
// pos.at(s): a context-parallel rank's sequence is a slice of the full one (kernels/math.h).
//
// 16-bit storage: only the table rows the tokens (or positions) reach are widened and, for a
// gradient, rounded back (kernels/cpu/widen.h).
//
// defines the CPU twins of kernels/ops/embedding.h: embedding_forward, embedding_backward,
//          position_embedding_forward, position_embedding_backward
#include <algorithm>

#include "kernels/cpu/widen.h"  // defines: Input, Widened, positions_used
#include "kernels/ops/embedding.h"

namespace kernels {

// The row of the local table that holds token id t, or -1 when another rank owns it.
static int local_row(int t, int vocab_start, int vocab_rows) {
  const int row = t - vocab_start;
  return row >= 0 && row < vocab_rows ? row : -1;
}

template <> void embedding_forward<Device::CPU, float>(float* out, const int* tokens,
                                                       const float* wte, int vocab_start,
                                                       int vocab_rows, int N, int C) {
  for (int i = 0; i < N; i++) {
    float* out_i = out + (size_t)i * C;  // seek to token i's output row
    const int row = local_row(tokens[i], vocab_start, vocab_rows);
    if (row < 0) {
      for (int c = 0; c < C; c++) out_i[c] = 0.0f;
      continue;
    }
    const float* wte_t = wte + (size_t)row * C;  // seek to the row of its token id
    for (int c = 0; c < C; c++) out_i[c] = wte_t[c];
  }
}

// A token id that occurs several times gathers the sum of its rows' gradients, in row order;
// the sequential loop needs no atomics (the CUDA twin does).
template <> void embedding_backward<Device::CPU, float>(float* dwte, const float* dout,
                                                        const int* tokens, int vocab_start,
                                                        int vocab_rows, int N, int C) {
  for (int i = 0; i < N; i++) {
    const int row = local_row(tokens[i], vocab_start, vocab_rows);
    if (row < 0) continue;
    const float* dout_i = dout + (size_t)i * C;  // seek to token i's gradient row
    float* dwte_t = dwte + (size_t)row * C;
    for (int c = 0; c < C; c++) dwte_t[c] += dout_i[c];
  }
}

template <> void position_embedding_forward<Device::CPU, float>(float* out, const float* wpe, int N,
                                                                int seq_len, int first_row, int C,
                                                                const TokenPositions& pos) {
  for (int i = 0; i < N; i++) {
    float* out_i = out + (size_t)i * C;
    const float* wpe_s = wpe + (size_t)pos.at((first_row + i) % seq_len) * C;  // its position
    for (int c = 0; c < C; c++) out_i[c] += wpe_s[c];
  }
}

template <> void position_embedding_backward<Device::CPU, float>(float* dwpe, const float* dout,
                                                                 int N, int seq_len, int first_row,
                                                                 int C, const TokenPositions& pos) {
  for (int i = 0; i < N; i++) {
    const float* dout_i = dout + (size_t)i * C;
    float* dwpe_s = dwpe + (size_t)pos.at((first_row + i) % seq_len) * C;
    for (int c = 0; c < C; c++) dwpe_s[c] += dout_i[c];
  }
}

// ---- 16-bit storage (bf16, fp16): widen, the fp32 twin above, round ----------------------------
using cpu::Input;
using cpu::Widened;
using cpu::positions_used;

// Rows of a vocab-range table that the tokens in range reach: the fp32 twin touches no other,
// so only these are widened (and, for a gradient, rounded back).
static int rows_used(const int* tokens, int vocab_start, int vocab_rows, int N) {
  int rows = 0;
  for (int i = 0; i < N; i++) {
    const int row = local_row(tokens[i], vocab_start, vocab_rows);
    if (row >= 0) rows = std::max(rows, row + 1);
  }
  return rows;
}

template <class H>
static void embedding_forward_16(H* out, const int* tokens, const H* wte, int vocab_start,
                                 int vocab_rows, int N, int C) {
  Input e(wte, (size_t)rows_used(tokens, vocab_start, vocab_rows, N) * C);
  Widened o(out, (size_t)N * C);
  embedding_forward<Device::CPU>(o.data(), tokens, e.data(), vocab_start, vocab_rows, N, C);
}
template <> void embedding_forward<Device::CPU, bf16>(bf16* out, const int* tokens, const bf16* wte,
                                                      int vocab_start, int vocab_rows, int N,
                                                      int C) {
  embedding_forward_16(out, tokens, wte, vocab_start, vocab_rows, N, C);
}
template <> void embedding_forward<Device::CPU, fp16>(fp16* out, const int* tokens, const fp16* wte,
                                                      int vocab_start, int vocab_rows, int N,
                                                      int C) {
  embedding_forward_16(out, tokens, wte, vocab_start, vocab_rows, N, C);
}
template <class H>
static void embedding_backward_16(H* dwte, const H* dout, const int* tokens, int vocab_start,
                                  int vocab_rows, int N, int C) {
  Widened de(dwte, (size_t)rows_used(tokens, vocab_start, vocab_rows, N) * C);
  Input g(dout, (size_t)N * C);
  embedding_backward<Device::CPU>(de.data(), g.data(), tokens, vocab_start, vocab_rows, N, C);
}
template <> void embedding_backward<Device::CPU, bf16>(bf16* dwte, const bf16* dout,
                                                       const int* tokens, int vocab_start,
                                                       int vocab_rows, int N, int C) {
  embedding_backward_16(dwte, dout, tokens, vocab_start, vocab_rows, N, C);
}
template <> void embedding_backward<Device::CPU, fp16>(fp16* dwte, const fp16* dout,
                                                       const int* tokens, int vocab_start,
                                                       int vocab_rows, int N, int C) {
  embedding_backward_16(dwte, dout, tokens, vocab_start, vocab_rows, N, C);
}
template <class H>
static void position_embedding_forward_16(H* out, const H* wpe, int N, int seq_len, int first_row,
                                          int C, const TokenPositions& pos) {
  Input p(wpe, positions_used(pos, seq_len) * C);
  Widened o(out, (size_t)N * C);
  position_embedding_forward<Device::CPU>(o.data(), p.data(), N, seq_len, first_row, C, pos);
}
template <> void position_embedding_forward<Device::CPU, bf16>(bf16* out, const bf16* wpe, int N,
    int seq_len, int first_row, int C, const TokenPositions& pos) {
  position_embedding_forward_16(out, wpe, N, seq_len, first_row, C, pos);
}
template <> void position_embedding_forward<Device::CPU, fp16>(fp16* out, const fp16* wpe, int N,
    int seq_len, int first_row, int C, const TokenPositions& pos) {
  position_embedding_forward_16(out, wpe, N, seq_len, first_row, C, pos);
}
template <class H>
static void position_embedding_backward_16(H* dwpe, const H* dout, int N, int seq_len,
                                           int first_row, int C, const TokenPositions& pos) {
  Widened dp(dwpe, positions_used(pos, seq_len) * C);
  Input g(dout, (size_t)N * C);
  position_embedding_backward<Device::CPU>(dp.data(), g.data(), N, seq_len, first_row, C, pos);
}
template <> void position_embedding_backward<Device::CPU, bf16>(bf16* dwpe, const bf16* dout, int N,
    int seq_len, int first_row, int C, const TokenPositions& pos) {
  position_embedding_backward_16(dwpe, dout, N, seq_len, first_row, C, pos);
}
template <> void position_embedding_backward<Device::CPU, fp16>(fp16* dwpe, const fp16* dout, int N,
    int seq_len, int first_row, int C, const TokenPositions& pos) {
  position_embedding_backward_16(dwpe, dout, N, seq_len, first_row, C, pos);
}

}  // namespace kernels
