// kernels/cpu/fp8.cpp: the CPU twins of kernels/ops/fp8.h: the casts to and from FP8, the
// scales, and the FP8 GEMM as what it means: the product of the dequantised operands in fp32.
//
// Every element goes through kernels/fp8.h (fp8_encode, fp8_decode, the block of an element),
// which the CUDA twins share; a block's scale is taken from its amax once, then its elements
// are cast. The max of absolute values does not depend on the order it is taken in, so every
// twin gets the same amax, scale and codes, bit for bit.
//
// defines the CPU twins of kernels/ops/fp8.h: fp8_amax, fp8_quantize, fp8_cast_count,
//          fp8_quantize_blocks, fp8_dequantize, fp8_current_scale, fp8_scale_inverse,
//          fp8_shard_amax, fp8_shard_quantize, fp8_shard_dequantize, fp8_delayed_update,
//          gemm_fp8; and gemm_fp8_path,
//          gemm_fp8_uses_cublaslt (the CUDA twin's choice, answered without CUDA)
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/widen.h"  // Widened
#include "kernels/ops/fp8.h"
#include "kernels/ops/memory_gemm.h"

namespace kernels {

namespace {

float abs_max(float a, float x) { return fmaxf(a, fabsf(x)); }

// The (rows, cols) matrix the output of a cast holds: x, or x^T.
struct CastShape {
  int rows, cols;  // of the output
  bool transpose;
  // Index into x (its rows are the output's columns when transposed) of output element (r, c).
  size_t source(int r, int c, int x_cols) const {
    return transpose ? (size_t)c * x_cols + r : (size_t)r * x_cols + c;
  }
};

}  // namespace

template <class T> static void amax_of(float* amax, const T* x, size_t n) {
  float a = 0.0f;
  for (size_t i = 0; i < n; i++) a = abs_max(a, to_float(x[i]));
  *amax = a;
}
template <> void fp8_amax<Device::CPU, float>(float* amax, const float* x, size_t n) {
  amax_of(amax, x, n);
}
template <> void fp8_amax<Device::CPU, bf16>(float* amax, const bf16* x, size_t n) {
  amax_of(amax, x, n);
}

// Element by element of the output at its block's scale, then each output block's factor from
// the scale of the x block it is (transposed: x's block (j, i) is q's (i, j)).
template <class T>
static void quantize(uint8_t* q, float* scale_inv, float* amax, const T* x, int rows, int cols,
                     Fp8Format f, const float* scale, bool transpose, Fp8Blocks blocks) {
  if (blocks == Fp8Blocks::Tiles || (blocks == Fp8Blocks::Blocks && amax != nullptr))
    throw std::invalid_argument("fp8_quantize: at given scales per tensor or per 128 x 128 "
                                "block, an amax per tensor only");
  const CastShape out{transpose ? cols : rows, transpose ? rows : cols, transpose};
  // the x block of output element (r, c)
  auto block = [&](int r, int c) {
    return transpose ? fp8_block_of(blocks, c, r, cols) : fp8_block_of(blocks, r, c, cols);
  };
  float a = 0.0f;
  for (int r = 0; r < out.rows; r++)
    for (int c = 0; c < out.cols; c++) {
      const float v = to_float(x[out.source(r, c, cols)]);
      a = abs_max(a, v);
      q[(size_t)r * out.cols + c] = fp8_encode(v * scale[block(r, c)], f);
    }
  const size_t factors = fp8_scale_count(blocks, out.rows, out.cols);
  const int across = fp8_blocks_across(out.cols);
  for (size_t b = 0; b < factors; b++)
    scale_inv[b] =
        1.0f / scale[block((int)(b / across) * kFp8Block, (int)(b % across) * kFp8Block)];
  if (amax != nullptr) *amax = fmaxf(*amax, a);
}
template <> void fp8_quantize<Device::CPU, float>(uint8_t* q, float* scale_inv, float* amax,
                                                  const float* x, int rows, int cols, Fp8Format f,
                                                  const float* scale, bool transpose,
                                                  Fp8Blocks blocks) {
  quantize(q, scale_inv, amax, x, rows, cols, f, scale, transpose, blocks);
}
template <> void fp8_quantize<Device::CPU, bf16>(uint8_t* q, float* scale_inv, float* amax,
                                                 const bf16* x, int rows, int cols, Fp8Format f,
                                                 const float* scale, bool transpose,
                                                 Fp8Blocks blocks) {
  quantize(q, scale_inv, amax, x, rows, cols, f, scale, transpose, blocks);
}

template <class T>
static void cast_count(unsigned long long* counts, const T* x, size_t n, Fp8Format f,
                       const float* scale) {
  const float s = scale[0];
  unsigned long long saturated = 0, flushed = 0;
  for (size_t i = 0; i < n; i++) {
    const float v = to_float(x[i]) * s;
    saturated += fp8_saturates(v, f);
    flushed += to_float(x[i]) != 0.0f && (fp8_encode(v, f) & 0x7Fu) == 0;  // NaN: 0x7F
  }
  counts[0] = saturated;
  counts[1] = flushed;
}
template <> void fp8_cast_count<Device::CPU, float>(unsigned long long* counts, const float* x,
                                                    size_t n, Fp8Format f, const float* scale) {
  cast_count(counts, x, n, f, scale);
}
template <> void fp8_cast_count<Device::CPU, bf16>(unsigned long long* counts, const bf16* x,
                                                   size_t n, Fp8Format f, const float* scale) {
  cast_count(counts, x, n, f, scale);
}

// Block by block of the output: its amax, its scale, its codes.
template <class T>
static void quantize_blocks(uint8_t* q, float* scale_inv, const T* x, int rows, int cols,
                            Fp8Format f, Fp8Blocks blocks, bool transpose) {
  if (blocks == Fp8Blocks::Tensor)
    throw std::invalid_argument("fp8_quantize_blocks: Tensor scaling is fp8_quantize's");
  const CastShape out{transpose ? cols : rows, transpose ? rows : cols, transpose};
  const int down = blocks == Fp8Blocks::Tiles ? 1 : kFp8Block;  // rows of a block
  const int across = fp8_blocks_across(out.cols);
  for (int r0 = 0; r0 < out.rows; r0 += down)
    for (int b = 0; b < across; b++) {
      const int r1 = std::min(r0 + down, out.rows), c0 = b * kFp8Block;
      const int c1 = std::min(c0 + kFp8Block, out.cols);
      float a = 0.0f;
      for (int r = r0; r < r1; r++)
        for (int c = c0; c < c1; c++) a = abs_max(a, to_float(x[out.source(r, c, cols)]));
      const float s = fp8_scale_from_amax(a, fp8_max(f));
      for (int r = r0; r < r1; r++)
        for (int c = c0; c < c1; c++)
          q[(size_t)r * out.cols + c] = fp8_encode(to_float(x[out.source(r, c, cols)]) * s, f);
      scale_inv[fp8_block_of(blocks, r0, c0, out.cols)] = 1.0f / s;
    }
}
template <> void fp8_quantize_blocks<Device::CPU, float>(uint8_t* q, float* scale_inv,
                                                         const float* x, int rows, int cols,
                                                         Fp8Format f, Fp8Blocks blocks,
                                                         bool transpose) {
  quantize_blocks(q, scale_inv, x, rows, cols, f, blocks, transpose);
}
template <> void fp8_quantize_blocks<Device::CPU, bf16>(uint8_t* q, float* scale_inv,
                                                        const bf16* x, int rows, int cols,
                                                        Fp8Format f, Fp8Blocks blocks,
                                                        bool transpose) {
  quantize_blocks(q, scale_inv, x, rows, cols, f, blocks, transpose);
}

template <class T> static void dequantize(T* x, Fp8Matrix q, int rows, int cols) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const size_t i = (size_t)r * cols + c;
      store(x[i], fp8_decode(q.data[i], q.format) * q.scale_inv[fp8_block_of(q.blocks, r, c, cols)]);
    }
}
template <> void fp8_dequantize<Device::CPU, float>(float* x, Fp8Matrix q, int rows, int cols) {
  dequantize(x, q, rows, cols);
}
template <> void fp8_dequantize<Device::CPU, bf16>(bf16* x, Fp8Matrix q, int rows, int cols) {
  dequantize(x, q, rows, cols);
}

template <> void fp8_current_scale<Device::CPU>(float* scale, const float* amax, int n,
                                                Fp8Format f) {
  for (int i = 0; i < n; i++) scale[i] = fp8_scale_from_amax(amax[i], fp8_max(f));
}

template <> void fp8_scale_inverse<Device::CPU>(float* scale_inv, const float* scale, int n) {
  for (int i = 0; i < n; i++) scale_inv[i] = 1.0f / scale[i];
}

// ---- a weight's shard ----------------------------------------------------------------------
template <class T>
static void shard_amax(float* amax, const T* x, int64_t first, int64_t n, int cols,
                       Fp8Blocks blocks) {
  for (int64_t i = 0; i < n; i++) {
    float& a = amax[fp8_shard_block_of(blocks, first, i, cols)];
    a = abs_max(a, to_float(x[i]));
  }
}
template <> void fp8_shard_amax<Device::CPU, float>(float* amax, const float* x, int64_t first,
                                                    int64_t n, int cols, Fp8Blocks blocks) {
  shard_amax(amax, x, first, n, cols, blocks);
}
template <> void fp8_shard_amax<Device::CPU, bf16>(float* amax, const bf16* x, int64_t first,
                                                   int64_t n, int cols, Fp8Blocks blocks) {
  shard_amax(amax, x, first, n, cols, blocks);
}

template <class T>
static void shard_quantize(uint8_t* q, float* amax, const T* x, int64_t first, int64_t n,
                           int cols, Fp8Format f, Fp8Blocks blocks, const float* scale) {
  if (blocks == Fp8Blocks::Tiles || (blocks == Fp8Blocks::Blocks && amax != nullptr))
    throw std::invalid_argument("fp8_shard_quantize: a weight's scales per tensor or per "
                                "128 x 128 block, an amax per tensor only");
  float a = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    const float v = to_float(x[i]);
    a = abs_max(a, v);
    q[i] = fp8_encode(v * scale[fp8_shard_block_of(blocks, first, i, cols)], f);
  }
  if (amax != nullptr) *amax = fmaxf(*amax, a);
}
template <> void fp8_shard_quantize<Device::CPU, float>(uint8_t* q, float* amax, const float* x,
                                                        int64_t first, int64_t n, int cols,
                                                        Fp8Format f, Fp8Blocks blocks,
                                                        const float* scale) {
  shard_quantize(q, amax, x, first, n, cols, f, blocks, scale);
}
template <> void fp8_shard_quantize<Device::CPU, bf16>(uint8_t* q, float* amax, const bf16* x,
                                                       int64_t first, int64_t n, int cols,
                                                       Fp8Format f, Fp8Blocks blocks,
                                                       const float* scale) {
  shard_quantize(q, amax, x, first, n, cols, f, blocks, scale);
}

template <class T>
static void shard_dequantize(T* x, Fp8Matrix q, int64_t first, int64_t n, int cols) {
  for (int64_t i = 0; i < n; i++) {
    const float factor = q.scale_inv[fp8_shard_block_of(q.blocks, first, i, cols)];
    store(x[i], fp8_decode(q.data[i], q.format) * factor);
  }
}
template <> void fp8_shard_dequantize<Device::CPU, float>(float* x, Fp8Matrix q, int64_t first,
                                                          int64_t n, int cols) {
  shard_dequantize(x, q, first, n, cols);
}
template <> void fp8_shard_dequantize<Device::CPU, bf16>(bf16* x, Fp8Matrix q, int64_t first,
                                                         int64_t n, int cols) {
  shard_dequantize(x, q, first, n, cols);
}

template <> void fp8_delayed_update<Device::CPU>(float* history, float* scale, int len, int n,
                                                 Fp8AmaxAlgo algo, float scaled_max) {
  for (int t = 0; t < n; t++) fp8_history_update(history + t, len, n, algo, scaled_max, scale + t);
}

// ---- GEMM -----------------------------------------------------------------------------------
static void check_formats(const Fp8Matrix& A, const Fp8Matrix& B) {
  if (A.format == Fp8Format::E5M2 && B.format == Fp8Format::E5M2)
    throw std::invalid_argument("gemm_fp8: E5M2 x E5M2 has no FP8 GEMM (cuBLASLt); one operand "
                                "must be E4M3");
}

// C = alpha deq(A) deq(B)^T + beta C, deq(X) = fp8_dequantize's fp32 matrix.
template <> void gemm_fp8<Device::CPU, float>(int m, int n, int k, float alpha, Fp8Matrix A,
                                              Fp8Matrix B, float beta, float* C, int ldc) {
  check_formats(A, B);
  if (m == 0 || n == 0) return;
  std::vector<float> a((size_t)m * k), b((size_t)n * k);
  fp8_dequantize<Device::CPU, float>(a.data(), A, m, k);
  fp8_dequantize<Device::CPU, float>(b.data(), B, n, k);
  gemm<Device::CPU, float, float>(false, true, m, n, k, alpha, a.data(), k, b.data(), k, beta, C,
                                  ldc);
}
template <> void gemm_fp8<Device::CPU, bf16>(int m, int n, int k, float alpha, Fp8Matrix A,
                                             Fp8Matrix B, float beta, bf16* C, int ldc) {
  cpu::Widened c(C, cpu::span(m, n, ldc));
  gemm_fp8<Device::CPU, float>(m, n, k, alpha, A, B, beta, c.data(), ldc);
}

bool gemm_fp8_uses_cublaslt(Fp8Blocks a, Fp8Blocks b, int m, int n, int k) {
  return a == Fp8Blocks::Tensor && b == Fp8Blocks::Tensor && m % 16 == 0 && n % 16 == 0 &&
         k % 16 == 0;
}
std::string gemm_fp8_path(Fp8Blocks a, Fp8Blocks b, int m, int n, int k) {
  if (gemm_fp8_uses_cublaslt(a, b, m, n, k))
    return "cuBLASLt FP8 GEMM (per-tensor scales, fp32 accumulation)";
  if (a != Fp8Blocks::Tensor || b != Fp8Blocks::Tensor)
    return "emulated (block scales: dequantise to fp32, cuBLAS sgemm)";
  return "emulated (m, n, k not multiples of 16: dequantise to fp32, cuBLAS sgemm)";
}

}  // namespace kernels
