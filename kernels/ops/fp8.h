// kernels/ops/fp8.h: FP8 quantisation and the FP8 GEMM (the formats and the scale arithmetic:
// kernels/fp8.h). Twins: kernels/cpu/fp8.cpp, kernels/cuda/fp8.cu (quantisation, scales) and
// kernels/cuda/fp8_gemm.cu (cuBLASLt, and the emulated block-scaled path).
//
// A quantised matrix is its codes (uint8, row-major, rows x cols, cols contiguous) and its
// dequantisation factors scale_inv (fp32, one per scaling block): element (r, c) reads back as
// fp8_decode(code) * scale_inv[block of (r, c)]. The blocks (Fp8Blocks):
//   Tensor   one factor for the whole matrix (delayed and current scaling: Transformer Engine)
//   Tiles    1 x 128: one per row and 128 columns, rows x ceil(cols / 128) factors (DeepSeek-V3's
//            activations and gradients, arXiv:2412.19437 section 3.3.2)
//   Blocks   128 x 128: ceil(rows / 128) x ceil(cols / 128) factors (its weights)
// each laid out row-major over the blocks. The last tile or block of a row or column may be
// short.
//
// The GEMM reads both operands with K contiguous: C(m,n) = alpha A(m,k) B(n,k)^T + beta C,
// the only FP8 layout Hopper's tensor cores take ("TN" in cuBLAS's column-major words: FP8
// GEMMs on sm_90 require A transposed and B not). A linear layer's three GEMMs therefore need
// transposed copies (fp8_quantize with transpose): fprop Y = X W^T reads X and W as stored;
// dgrad dX = dY W reads W^T; wgrad dW = dY^T X reads dY^T and X^T.
//
// Storage types: T, the high-precision tensor quantised from or dequantised into, is float or
// bf16; the GEMM's C (TC) is float or bf16, accumulated in fp32 either way.
//
// A ZeRO shard of a weight (--fp8-param-gather, parallel/data_parallel_fp8.cpp) is a flat run of
// n elements [first, first + n) of the row-major (rows, cols) weight: element i of the run is
// the weight's (r, c) = ((first + i) / cols, (first + i) % cols), in the weight's block
// fp8_block_of(blocks, r, c, cols) (Tensor: the one scale; Blocks: 128 x 128). A shard's
// boundaries cut through blocks, so the fp8_shard_* casts index the whole weight's scales and
// amaxes: a block's amax is the max of its shards' parts (the ZeRO group's MAX all-reduce), its
// codes cast at the one scale every shard shares.
//
// defines: Fp8Matrix, fp8_amax, fp8_quantize, fp8_cast_count, fp8_quantize_blocks,
//          fp8_dequantize, fp8_current_scale, fp8_scale_inverse, fp8_delayed_update,
//          fp8_shard_amax, fp8_shard_quantize, fp8_shard_dequantize, gemm_fp8, gemm_fp8_path
#pragma once
#include <string>

#include "kernels/dispatch.h"
#include "kernels/fp8.h"  // Fp8Format, Fp8AmaxAlgo, Fp8Blocks, fp8_scale_count, fp8_block_of

namespace kernels {

// A quantised matrix as the GEMM and fp8_dequantize read it (device pointers).
struct Fp8Matrix {
  const uint8_t* data = nullptr;     // (rows, cols) codes
  const float* scale_inv = nullptr;  // fp8_scale_count(blocks, rows, cols) factors
  Fp8Format format = Fp8Format::E4M3;
  Fp8Blocks blocks = Fp8Blocks::Tensor;
};

// *amax = max_i |x_i| (0 for n == 0; NaN elements are skipped, as fmaxf does). Current
// scaling's first pass over a tensor (its second is the cast).
template <Device Dev, class T> void fp8_amax(float* amax, const T* x, size_t n);
template <class T> void fp8_amax(Device d, float* amax, const T* x, size_t n) {
  count_kernel((double)n * sizeof(T) + 4.0);
  ON_DEVICE(fp8_amax, T)(amax, x, n);
}

// Cast at given scales: q = encode(x * scale[block of x]) for the (rows, cols) matrix x, written
// as is, or transposed (q is then (cols, rows)); scale_inv[block of q] = 1 / that block's scale.
// blocks Tensor (per-tensor: scale[0], *scale_inv) or Blocks (x's 128 x 128 grid of scales, a
// gathered weight's: the factors come out in q's grid, transposed with it). When amax is not
// null (Tensor only) the cast also records the tensor's amax, *amax = max(*amax, max |x|)
// (delayed scaling's fused amax: row 0 of its history collects the pass's maximum).
template <Device Dev, class T>
void fp8_quantize(uint8_t* q, float* scale_inv, float* amax, const T* x, int rows, int cols,
                  Fp8Format f, const float* scale, bool transpose, Fp8Blocks blocks);
template <class T>
void fp8_quantize(Device d, uint8_t* q, float* scale_inv, float* amax, const T* x, int rows,
                  int cols, Fp8Format f, const float* scale, bool transpose,
                  Fp8Blocks blocks = Fp8Blocks::Tensor) {
  count_kernel((double)rows * cols * (sizeof(T) + 1) +
               8.0 * fp8_scale_count(blocks, rows, cols) + 4.0);
  ON_DEVICE(fp8_quantize, T)(q, scale_inv, amax, x, rows, cols, f, scale, transpose, blocks);
}

// What a per-tensor cast at scale[0] loses, counted over the n elements of x (a twin pass over
// the tensor, run only when a run logs its FP8 scaling: --log-fp8-scaling):
//   counts[0] = saturated: fp8_saturates(x_i * scale[0]), a value the cast clipped to +-max
//   counts[1] = flushed:   x_i != 0 and fp8_encode(x_i * scale[0]) is a zero (NaN is 0x7F: not)
// Written, not accumulated. Delayed scaling's lag shows here: a scale from an earlier step's
// amax saturates the values above that amax, or flushes the small ones after a drop.
template <Device Dev, class T>
void fp8_cast_count(unsigned long long* counts, const T* x, size_t n, Fp8Format f,
                    const float* scale);
template <class T>
void fp8_cast_count(Device d, unsigned long long* counts, const T* x, size_t n, Fp8Format f,
                    const float* scale) {
  count_kernel((double)n * sizeof(T) + 20.0);
  ON_DEVICE(fp8_cast_count, T)(counts, x, n, f, scale);
}

// Block cast (Tiles or Blocks): each block's amax, its scale fp8_scale_from_amax(amax, max), its
// codes encode(x * scale) and its factor 1 / scale, all from this tensor (amax every step, fp32
// scales: DeepSeek-V3). With transpose, q is the (cols, rows) matrix x^T quantised in the given
// blocks of ITS layout: 1 x 128 tiles of x^T are 128 x 1 tiles of x, so they are made from x
// itself, not from x's tiles (Transformer Engine quantises its columnwise copy from the
// high-precision source for the same reason); 128 x 128 blocks of x^T are x's blocks transposed.
template <Device Dev, class T>
void fp8_quantize_blocks(uint8_t* q, float* scale_inv, const T* x, int rows, int cols,
                         Fp8Format f, Fp8Blocks blocks, bool transpose);
template <class T>
void fp8_quantize_blocks(Device d, uint8_t* q, float* scale_inv, const T* x, int rows, int cols,
                         Fp8Format f, Fp8Blocks blocks, bool transpose) {
  count_kernel((double)rows * cols * (sizeof(T) + 1) +
               4.0 * fp8_scale_count(blocks, transpose ? cols : rows, transpose ? rows : cols));
  ON_DEVICE(fp8_quantize_blocks, T)(q, scale_inv, x, rows, cols, f, blocks, transpose);
}

// x = decode(q) * scale_inv of its block, for the (rows, cols) matrix q ("="; rounded once to T).
template <Device Dev, class T> void fp8_dequantize(T* x, Fp8Matrix q, int rows, int cols);
template <class T> void fp8_dequantize(Device d, T* x, Fp8Matrix q, int rows, int cols) {
  count_kernel((double)rows * cols * (sizeof(T) + 1) +
               4.0 * fp8_scale_count(q.blocks, rows, cols));
  ON_DEVICE(fp8_dequantize, T)(x, q, rows, cols);
}

// Current scaling's scales: scale[i] = fp8_scale_from_amax(amax[i], fp8_max(f)), i < n.
template <Device Dev> void fp8_current_scale(float* scale, const float* amax, int n, Fp8Format f);
template <class = void>
void fp8_current_scale(Device d, float* scale, const float* amax, int n, Fp8Format f) {
  count_kernel(8.0 * n);
  ON_DEVICE(fp8_current_scale)(scale, amax, n, f);
}

// scale_inv[i] = 1 / scale[i], i < n: the factors of scales a cast did not write (a gathered
// weight's, for the ranks whose shard holds none of a block).
template <Device Dev> void fp8_scale_inverse(float* scale_inv, const float* scale, int n);
template <class = void>
void fp8_scale_inverse(Device d, float* scale_inv, const float* scale, int n) {
  count_kernel(8.0 * n);
  ON_DEVICE(fp8_scale_inverse)(scale_inv, scale, n);
}

// ---- a weight's shard (see the header) -------------------------------------------------------
// amax[b] = max(amax[b], max |x_i| over the run's elements in block b), for every block b the
// run touches (Tensor: b = 0); amax holds the weight's blocks, non-negative (zeroed by the
// caller before its first shard); NaN is skipped, as fmaxf does.
template <Device Dev, class T>
void fp8_shard_amax(float* amax, const T* x, int64_t first, int64_t n, int cols, Fp8Blocks blocks);
template <class T>
void fp8_shard_amax(Device d, float* amax, const T* x, int64_t first, int64_t n, int cols,
                    Fp8Blocks blocks) {
  count_kernel((double)n * sizeof(T) + 4.0);
  ON_DEVICE(fp8_shard_amax, T)(amax, x, first, n, cols, blocks);
}

// q_i = encode(x_i * scale[block of i]), scale the weight's scales (Tensor: scale[0]). amax, not
// null only with Tensor, records the run's max |x| as fp8_quantize does (delayed scaling).
template <Device Dev, class T>
void fp8_shard_quantize(uint8_t* q, float* amax, const T* x, int64_t first, int64_t n, int cols,
                        Fp8Format f, Fp8Blocks blocks, const float* scale);
template <class T>
void fp8_shard_quantize(Device d, uint8_t* q, float* amax, const T* x, int64_t first, int64_t n,
                        int cols, Fp8Format f, Fp8Blocks blocks, const float* scale) {
  count_kernel((double)n * (sizeof(T) + 1) + 4.0);
  ON_DEVICE(fp8_shard_quantize, T)(q, amax, x, first, n, cols, f, blocks, scale);
}

// x_i = decode(q.data[i]) * q.scale_inv[block of i] ("="; rounded once to T): q.data the run's
// n codes, q.scale_inv the weight's factors.
template <Device Dev, class T>
void fp8_shard_dequantize(T* x, Fp8Matrix q, int64_t first, int64_t n, int cols);
template <class T>
void fp8_shard_dequantize(Device d, T* x, Fp8Matrix q, int64_t first, int64_t n, int cols) {
  count_kernel((double)n * (sizeof(T) + 1) + 4.0);
  ON_DEVICE(fp8_shard_dequantize, T)(x, q, first, n, cols);
}

// Delayed scaling's step at the end of a pass, for the n tensors whose amax histories are the
// columns of history (len, n): fp8_history_update on each (kernels/fp8.h), scaled_max = max *
// 2^-margin. Row 0 holds this pass's amaxes, already reduced over the ranks that share them.
template <Device Dev>
void fp8_delayed_update(float* history, float* scale, int len, int n, Fp8AmaxAlgo algo,
                        float scaled_max);
template <class = void>
void fp8_delayed_update(Device d, float* history, float* scale, int len, int n, Fp8AmaxAlgo algo,
                        float scaled_max) {
  count_kernel(8.0 * (double)len * n + 8.0 * n);
  ON_DEVICE(fp8_delayed_update)(history, scale, len, n, algo, scaled_max);
}

// C(m,n) = alpha A(m,k) B(n,k)^T + beta C (row stride ldc): FP8 operands, fp32 accumulation, C
// in TC (float or bf16, rounded once). CPU: dequantise both operands to fp32 (fp8_dequantize's
// arithmetic) and run the fp32 GEMM, so the FP8 GEMM is exactly the dequantise-then-fp32
// product. CUDA: gemm_fp8_path says which. E5M2 x E5M2 is refused (cuBLASLt has no such
// kernel, and no recipe asks for it). One GEMM call of 2 m n k FLOPs.
template <Device Dev, class TC>
void gemm_fp8(int m, int n, int k, float alpha, Fp8Matrix A, Fp8Matrix B, float beta, TC* C,
              int ldc);
template <class TC>
void gemm_fp8(Device d, int m, int n, int k, float alpha, Fp8Matrix A, Fp8Matrix B, float beta,
              TC* C, int ldc) {
  count_gemm(2.0 * m * n * k);
  ON_DEVICE(gemm_fp8, TC)(m, n, k, alpha, A, B, beta, C, ldc);
}

// Which path the CUDA twin takes for these operands and sizes, in words for the run header:
// cuBLASLt's FP8 GEMM for per-tensor factors with m, n and k multiples of 16 (its alignment
// rule), else the emulated path (dequantise to fp32 and cuBLAS sgemm: cuBLASLt has no 1 x 128
// or 128 x 128 scaling on Hopper). Defined in kernels/cpu/fp8.cpp (no CUDA needed to answer).
std::string gemm_fp8_path(Fp8Blocks a, Fp8Blocks b, int m, int n, int k);
bool gemm_fp8_uses_cublaslt(Fp8Blocks a, Fp8Blocks b, int m, int n, int k);

}  // namespace kernels
