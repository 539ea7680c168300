// kernels/ops_bf16_impl.h: what the bf16 dispatchers share (kernels/ops_bf16.cpp, and the
// attention ones in kernels/ops_bf16_attention.cpp): the widening to fp32 and rounding back
// of the CPU twins, the spans a strided view covers, the counting helpers, ON_CUDA.
// For those two files only.
//
// defines: kernels::bf16_impl::{widen, round_into, span, Widened, Input, kE, pass_probs,
//          block_pairs, view_span, positions_used}, ON_CUDA
#pragma once
#include <stdexcept>
#include <vector>
#include "kernels/math.h"
#include "kernels/ops.h"

namespace kernels {
namespace bf16_impl {

inline std::vector<float> widen(const bf16* x, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = to_float(x[i]);
  return out;
}
inline void round_into(bf16* dst, const std::vector<float>& src) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = to_bf16(src[i]);
}
// Elements a strided row-major matrix spans: rows of ld, the last one cols long.
inline size_t span(int rows, int cols, int ld) {
  return rows > 0 ? (size_t)(rows - 1) * ld + cols : 0;
}
// A widened copy that writes itself back (rounded) when it goes out of scope: the output
// (or in-out) argument of an fp32 twin.
struct Widened {
  bf16* dst;
  std::vector<float> v;
  Widened(bf16* p, size_t n) : dst(p), v(p ? widen(p, n) : std::vector<float>()) {}
  ~Widened() { if (dst) round_into(dst, v); }
  float* data() { return dst ? v.data() : nullptr; }
};
struct Input {
  std::vector<float> v;
  bool null;
  Input(const bf16* p, size_t n) : v(p ? widen(p, n) : std::vector<float>()), null(!p) {}
  const float* data() const { return null ? nullptr : v.data(); }
};

// The bytes of a stored element here (kernels/ops.cpp counts every op at it, fp32's 4 there).
constexpr double kE = sizeof(bf16);
// Elements of a naive pass's probabilities: BH heads of q.rows x k.rows.
inline double pass_probs(int BH, const AttentionBlock& blk) {
  return (double)BH * blk.q.rows * blk.k.rows;
}

// B A sum_i visible(i): the pairs kernels/ops.cpp counts the flash FLOPs by.
inline double block_pairs(int B, int A, const AttentionBlock& blk) {
  return (double)B * A * (double)visible_pairs(blk);
}
// Elements from a view's first row to the end of its last head's last row: what a kernel on
// the view (BH heads of rows.rows rows, D channels) can touch, the span to widen.
inline size_t view_span(int BH, int D, const AttentionRows& rows) {
  return BH > 0 && rows.rows > 0 ? (size_t)(BH - 1) * rows.head_stride + (size_t)rows.rows * D
                                 : 0;
}
// Rows of a position table that positions 0..seq_len-1 reach (they increase: the last one's).
inline size_t positions_used(const TokenPositions& pos, int seq_len) {
  return seq_len > 0 ? (size_t)pos.at(seq_len - 1) + 1 : 0;
}

#ifndef PARALAB_CPU_ONLY
#define ON_CUDA(CALL)        \
  if (d == Device::CUDA) {   \
    cuda::CALL;              \
    return;                  \
  }
#else
#define ON_CUDA(CALL)                                                                     \
  if (d == Device::CUDA)                                                                  \
    throw std::runtime_error("--device cuda: this binary was built without CUDA (make " \
                             "CPU_ONLY=1)");
#endif


}  // namespace bf16_impl
}  // namespace kernels
