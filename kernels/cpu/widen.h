// kernels/cpu/widen.h: how a CPU twin on 16-bit storage (bf16 or fp16, H below) runs the fp32
// twin. Widen the 16-bit inputs to fp32 (exact), run the fp32 twin, round the outputs back
// (nearest even, kernels/float16.h): so a 16-bit run computes exactly what the fp32 code
// computes, on inputs and outputs rounded to its format ("storage only", notes/design.md). An
// op that accumulates (dw += ...) widens its output first so that the fp32 twin adds into it.
// The fp32 scratch lives on the host only while the op runs; it is the twin's working memory,
// like cuBLAS's workspace, not a tensor the ledger tracks. The 16-bit twin calls the fp32 TWIN
// (NAME<Device::CPU>(...)), never the dispatcher, which has counted the call already. Each op's
// 16-bit body is one template on H
// (NAME_16 in the twin's file), and its two twins, NAME<Device::CPU, bf16> and
// NAME<Device::CPU, fp16>, are one-liners over it, as the CUDA files' launchers are.
//
// defines: kernels::cpu::{widen, round_into, Widened, Input, span, view_span, positions_used}
#pragma once
#include <vector>
#include "kernels/math.h"

namespace kernels {
namespace cpu {

template <class H>
std::vector<float> widen(const H* x, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = to_float(x[i]);
  return out;
}
template <class H>
void round_into(H* dst, const std::vector<float>& src) {
  for (size_t i = 0; i < src.size(); ++i) store(dst[i], src[i]);
}

// A widened copy that writes itself back (rounded) when it goes out of scope: the output
// (or in-out) argument of an fp32 twin. A null pointer stays null.
template <class H>
struct Widened {
  H* dst;
  std::vector<float> v;
  Widened(H* p, size_t n) : dst(p), v(p ? widen(p, n) : std::vector<float>()) {}
  ~Widened() { if (dst) round_into(dst, v); }
  float* data() { return dst ? v.data() : nullptr; }
};
// A widened copy of an input. A null pointer stays null.
struct Input {
  std::vector<float> v;
  bool null;
  template <class H>
  Input(const H* p, size_t n) : v(p ? widen(p, n) : std::vector<float>()), null(!p) {}
  const float* data() const { return null ? nullptr : v.data(); }
};

// ---- how much to widen: the elements an fp32 twin can touch
// Elements a strided row-major matrix spans: rows of ld, the last one cols long.
inline size_t span(int rows, int cols, int ld) {
  return rows > 0 ? (size_t)(rows - 1) * ld + cols : 0;
}
// Elements from a view's first row to the end of its last head's last row: what a kernel on
// the view (BH heads of rows.rows rows, D channels) can touch.
inline size_t view_span(int BH, int D, const AttentionRows& rows) {
  return BH > 0 && rows.rows > 0 ? (size_t)(BH - 1) * rows.head_stride + (size_t)rows.rows * D
                                 : 0;
}
// Rows of a position table that positions 0..seq_len-1 reach (they increase: the last one's).
inline size_t positions_used(const TokenPositions& pos, int seq_len) {
  return seq_len > 0 ? (size_t)pos.at(seq_len - 1) + 1 : 0;
}

}  // namespace cpu
}  // namespace kernels
