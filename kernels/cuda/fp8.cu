// kernels/cuda/fp8.cu: the CUDA twins of kernels/ops/fp8.h's casts and scales, mirroring
// kernels/cpu/fp8.cpp (the GEMM is kernels/cuda/fp8_gemm.cu).
//
// Each kernel is its CPU twin's loop body on kernels/fp8.h's arithmetic, with one difference:
// on sm_89 and later the cast is the hardware's cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (through
// cuda_fp8.h's __nv_cvt_float_to_fp8 with __NV_SATFINITE), which rounds to nearest even and
// saturates as fp8_encode does; sm_80 has no FP8 instructions and runs fp8_encode itself.
// op_check (tests/gpu/op_check_fp8.cpp) holds the two equal, code for code.
//
// An amax is a max of absolute values, exact and independent of order: each block reduces its
// elements (block_max), and its first thread folds the result into the output with an integer
// atomicMax on the float's bits, which orders non-negative floats as their values.
//
//   fp8_amax               grid-stride max, then atomicMax into a zeroed amax
//   fp8_quantize           grid-stride cast over x at each element's block scale (reads
//                          coalesced; a transposed output is written with a stride: a
//                          shared-memory tile would coalesce it too); a block's first element
//                          writes its factor
//   fp8_shard_quantize,    grid-stride over the run, each element's block from its index in the
//   fp8_shard_dequantize   weight
//   fp8_shard_amax         Tensor: as fp8_amax; Blocks: one thread block per 128 x 128 block
//                          the run's rows reach (128 threads, one column each), its part of
//                          the run max-reduced and folded into the block's amax
//   fp8_cast_count         grid-stride count (the cast's own arithmetic, fp8_encode's), block
//                          sums, atomicAdd into zeroed counts
//   fp8_quantize_blocks    one thread block per scaling block (128 threads, one column each):
//                          the block's amax, its scale, its codes
//   fp8_dequantize         grid-stride decode times the element's block factor
//   fp8_current_scale,     one thread per tensor (or factor)
//   fp8_scale_inverse,
//   fp8_delayed_update
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/fp8.h"
#include "kernels/ops/fp8.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), kThreads, grid_1d, block_max

namespace {

// The cast of one value: the hardware's where it has one (see the header).
__device__ inline uint8_t encode(float v, Fp8Format f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE,
                                        f == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
#else
  return fp8_encode(v, f);
#endif
}

// *out = max(*out, a) for non-negative floats a and *out (their bits order as ints).
__device__ inline void fold_max(float* out, float a) {
  atomicMax(reinterpret_cast<int*>(out), __float_as_int(a));
}

// mirrors fp8_amax<Device::CPU>
template <typename T>
__global__ void amax_kernel(float* amax, const T* x, size_t n) {
  float a = 0.0f;
  GRID_STRIDE_LOOP(i, n) a = fmaxf(a, fabsf(to_float(x[i])));
  a = block_max(a);
  if (threadIdx.x == 0) fold_max(amax, a);
}

// mirrors fp8_quantize<Device::CPU>; i runs over x, (r, c) = its row and column, in x's block
// `b`; the element at a block's corner writes the factor of the output block it becomes.
template <typename T>
__global__ void quantize_kernel(uint8_t* q, float* scale_inv, float* amax, const T* x, int rows,
                                int cols, Fp8Format f, const float* scale, bool transpose,
                                Fp8Blocks blocks) {
  float a = 0.0f;
  GRID_STRIDE_LOOP(i, (size_t)rows * cols) {
    const float v = to_float(x[i]);
    a = fmaxf(a, fabsf(v));
    const int r = (int)(i / cols), c = (int)(i % cols);
    const size_t b = fp8_block_of(blocks, r, c, cols);
    q[transpose ? (size_t)c * rows + r : i] = encode(v * scale[b], f);
    if (blocks == Fp8Blocks::Blocks && r % kFp8Block == 0 && c % kFp8Block == 0)
      scale_inv[transpose ? fp8_block_of(blocks, c, r, rows) : b] = 1.0f / scale[b];
  }
  if (amax != nullptr) {  // the same for every thread: all of them reach block_max
    a = block_max(a);
    if (threadIdx.x == 0) fold_max(amax, a);
  }
  if (blocks == Fp8Blocks::Tensor && blockIdx.x == 0 && threadIdx.x == 0)
    *scale_inv = 1.0f / *scale;
}

// mirrors fp8_shard_amax<Device::CPU> for Blocks: thread block (br, bc) over the 128 x 128 blocks
// of rows [row0, ...), thread t column bc 128 + t, the run's elements of the block max-reduced
template <typename T>
__global__ void shard_amax_blocks_kernel(float* amax, const T* x, int64_t first, int64_t n,
                                         int cols, int first_block_row, int rows_end) {
  const int across = fp8_blocks_across(cols);
  const int br = first_block_row + (int)(blockIdx.x / across);
  const int c = (int)(blockIdx.x % across) * kFp8Block + threadIdx.x;
  const int r1 = min((br + 1) * kFp8Block, rows_end);
  float a = 0.0f;
  if (c < cols)
    for (int r = br * kFp8Block; r < r1; r++) {
      const int64_t i = (int64_t)r * cols + c - first;
      if (i >= 0 && i < n) a = fmaxf(a, fabsf(to_float(x[i])));
    }
  a = block_max(a);
  if (threadIdx.x == 0) fold_max(amax + fp8_block_of(Fp8Blocks::Blocks, br * kFp8Block,
                                                     (int)(blockIdx.x % across) * kFp8Block, cols),
                                 a);
}

// mirrors fp8_shard_quantize<Device::CPU>
template <typename T>
__global__ void shard_quantize_kernel(uint8_t* q, float* amax, const T* x, int64_t first,
                                      int64_t n, int cols, Fp8Format f, Fp8Blocks blocks,
                                      const float* scale) {
  float a = 0.0f;
  GRID_STRIDE_LOOP(i, (size_t)n) {
    const float v = to_float(x[i]);
    a = fmaxf(a, fabsf(v));
    q[i] = encode(v * scale[fp8_shard_block_of(blocks, first, (int64_t)i, cols)], f);
  }
  if (amax != nullptr) {
    a = block_max(a);
    if (threadIdx.x == 0) fold_max(amax, a);
  }
}

// mirrors fp8_shard_dequantize<Device::CPU>
template <typename T>
__global__ void shard_dequantize_kernel(T* x, Fp8Matrix q, int64_t first, int64_t n, int cols) {
  GRID_STRIDE_LOOP(i, (size_t)n)
    store(x[i], fp8_decode(q.data[i], q.format) *
                    q.scale_inv[fp8_shard_block_of(q.blocks, first, (int64_t)i, cols)]);
}

// mirrors fp8_cast_count<Device::CPU>: per-thread counts, summed over the block, added to
// counts zeroed by the launch
template <typename T>
__global__ void cast_count_kernel(unsigned long long* counts, const T* x, size_t n, Fp8Format f,
                                  const float* scale) {
  const float s = *scale;
  unsigned long long saturated = 0, flushed = 0;
  GRID_STRIDE_LOOP(i, n) {
    const float v = to_float(x[i]) * s;
    saturated += fp8_saturates(v, f);
    flushed += to_float(x[i]) != 0.0f && (fp8_encode(v, f) & 0x7Fu) == 0;  // NaN: 0x7F
  }
  saturated = block_sum(saturated);
  flushed = block_sum(flushed);
  if (threadIdx.x == 0) {
    if (saturated) atomicAdd(&counts[0], saturated);
    if (flushed) atomicAdd(&counts[1], flushed);
  }
}

// mirrors fp8_quantize_blocks<Device::CPU>: block b of the output's blocks (row-major), thread t
// its column c0 + t, rows r0 .. r0 + down - 1 of the (out_rows, out_cols) output.
constexpr int kBlockThreads = kFp8Block;
template <typename T>
__global__ void quantize_blocks_kernel(uint8_t* q, float* scale_inv, const T* x, int out_rows,
                                       int out_cols, int x_cols, bool transpose, int down,
                                       Fp8Format f) {
  const int across = fp8_blocks_across(out_cols);
  const int r0 = (int)(blockIdx.x / across) * down;
  const int r1 = min(r0 + down, out_rows);
  const int c = (int)(blockIdx.x % across) * kFp8Block + threadIdx.x;
  auto at = [&](int r) {  // x's element under output (r, c)
    return to_float(x[transpose ? (size_t)c * x_cols + r : (size_t)r * x_cols + c]);
  };
  float a = 0.0f;
  if (c < out_cols)
    for (int r = r0; r < r1; r++) a = fmaxf(a, fabsf(at(r)));
  a = block_max(a);
  const float s = fp8_scale_from_amax(a, fp8_max(f));
  if (c < out_cols)
    for (int r = r0; r < r1; r++) q[(size_t)r * out_cols + c] = encode(at(r) * s, f);
  if (threadIdx.x == 0) scale_inv[blockIdx.x] = 1.0f / s;
}

// mirrors fp8_dequantize<Device::CPU>
template <typename T>
__global__ void dequantize_kernel(T* x, Fp8Matrix q, int rows, int cols) {
  GRID_STRIDE_LOOP(i, (size_t)rows * cols) {
    const int r = (int)(i / cols), c = (int)(i % cols);
    store(x[i], fp8_decode(q.data[i], q.format) * q.scale_inv[fp8_block_of(q.blocks, r, c, cols)]);
  }
}

__global__ void current_scale_kernel(float* scale, const float* amax, int n, Fp8Format f) {
  GRID_STRIDE_LOOP(i, n) scale[i] = fp8_scale_from_amax(amax[i], fp8_max(f));
}

__global__ void scale_inverse_kernel(float* scale_inv, const float* scale, int n) {
  GRID_STRIDE_LOOP(i, n) scale_inv[i] = 1.0f / scale[i];
}

__global__ void delayed_update_kernel(float* history, float* scale, int len, int n,
                                      Fp8AmaxAlgo algo, float scaled_max) {
  GRID_STRIDE_LOOP(t, n) fp8_history_update(history + t, len, n, algo, scaled_max, scale + t);
}

template <typename T> void amax_launch(float* amax, const T* x, size_t n) {
  CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream()));
  if (n == 0) return;
  amax_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(amax, x, n);
  KERNEL_CHECK();
}

template <typename T>
void quantize_launch(uint8_t* q, float* scale_inv, float* amax, const T* x, int rows, int cols,
                     Fp8Format f, const float* scale, bool transpose, Fp8Blocks blocks) {
  if (blocks == Fp8Blocks::Tiles || (blocks == Fp8Blocks::Blocks && amax != nullptr))
    throw std::invalid_argument("fp8_quantize: at given scales per tensor or per 128 x 128 "
                                "block, an amax per tensor only");
  const size_t n = (size_t)rows * cols;
  quantize_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(q, scale_inv, amax, x, rows, cols, f,
                                                         scale, transpose, blocks);
  KERNEL_CHECK();
}

template <typename T>
void shard_amax_launch(float* amax, const T* x, int64_t first, int64_t n, int cols,
                       Fp8Blocks blocks) {
  if (n == 0) return;
  if (blocks == Fp8Blocks::Tiles)
    throw std::invalid_argument("fp8_shard_amax: a weight's amax per tensor or 128 x 128 block");
  if (blocks == Fp8Blocks::Tensor) {
    amax_kernel<<<grid_1d((size_t)n), kThreads, 0, stream()>>>(amax, x, (size_t)n);
  } else {
    const int row0 = (int)(first / cols), rows_end = (int)((first + n - 1) / cols) + 1;
    const int block_rows = (rows_end - 1) / kFp8Block - row0 / kFp8Block + 1;
    const unsigned grid = (unsigned)block_rows * fp8_blocks_across(cols);
    shard_amax_blocks_kernel<<<grid, kBlockThreads, 0, stream()>>>(amax, x, first, n, cols,
                                                                   row0 / kFp8Block, rows_end);
  }
  KERNEL_CHECK();
}

template <typename T>
void shard_quantize_launch(uint8_t* q, float* amax, const T* x, int64_t first, int64_t n,
                           int cols, Fp8Format f, Fp8Blocks blocks, const float* scale) {
  if (blocks == Fp8Blocks::Tiles || (blocks == Fp8Blocks::Blocks && amax != nullptr))
    throw std::invalid_argument("fp8_shard_quantize: a weight's scales per tensor or per "
                                "128 x 128 block, an amax per tensor only");
  if (n == 0) return;
  shard_quantize_kernel<<<grid_1d((size_t)n), kThreads, 0, stream()>>>(q, amax, x, first, n,
                                                                       cols, f, blocks, scale);
  KERNEL_CHECK();
}

template <typename T>
void shard_dequantize_launch(T* x, Fp8Matrix q, int64_t first, int64_t n, int cols) {
  if (n == 0) return;
  shard_dequantize_kernel<<<grid_1d((size_t)n), kThreads, 0, stream()>>>(x, q, first, n, cols);
  KERNEL_CHECK();
}

template <typename T>
void cast_count_launch(unsigned long long* counts, const T* x, size_t n, Fp8Format f,
                       const float* scale) {
  CUDA_CHECK(cudaMemsetAsync(counts, 0, 2 * sizeof(unsigned long long), stream()));
  if (n == 0) return;
  cast_count_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(counts, x, n, f, scale);
  KERNEL_CHECK();
}

template <typename T>
void quantize_blocks_launch(uint8_t* q, float* scale_inv, const T* x, int rows, int cols,
                            Fp8Format f, Fp8Blocks blocks, bool transpose) {
  if (blocks == Fp8Blocks::Tensor)
    throw std::invalid_argument("fp8_quantize_blocks: Tensor scaling is fp8_quantize's");
  const int out_rows = transpose ? cols : rows, out_cols = transpose ? rows : cols;
  const size_t grid = fp8_scale_count(blocks, out_rows, out_cols);
  if ((size_t)out_rows * out_cols == 0) return;
  const int down = blocks == Fp8Blocks::Tiles ? 1 : kFp8Block;
  quantize_blocks_kernel<<<(unsigned)grid, kBlockThreads, 0, stream()>>>(
      q, scale_inv, x, out_rows, out_cols, cols, transpose, down, f);
  KERNEL_CHECK();
}

template <typename T> void dequantize_launch(T* x, Fp8Matrix q, int rows, int cols) {
  const size_t n = (size_t)rows * cols;
  if (n == 0) return;
  dequantize_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(x, q, rows, cols);
  KERNEL_CHECK();
}

}  // namespace

template <> void fp8_amax<Device::CUDA, float>(float* amax, const float* x, size_t n) {
  amax_launch(amax, x, n);
}
template <> void fp8_amax<Device::CUDA, bf16>(float* amax, const bf16* x, size_t n) {
  amax_launch(amax, x, n);
}

template <> void fp8_quantize<Device::CUDA, float>(uint8_t* q, float* scale_inv, float* amax,
                                                   const float* x, int rows, int cols,
                                                   Fp8Format f, const float* scale,
                                                   bool transpose, Fp8Blocks blocks) {
  quantize_launch(q, scale_inv, amax, x, rows, cols, f, scale, transpose, blocks);
}
template <> void fp8_quantize<Device::CUDA, bf16>(uint8_t* q, float* scale_inv, float* amax,
                                                  const bf16* x, int rows, int cols, Fp8Format f,
                                                  const float* scale, bool transpose,
                                                  Fp8Blocks blocks) {
  quantize_launch(q, scale_inv, amax, x, rows, cols, f, scale, transpose, blocks);
}

template <> void fp8_cast_count<Device::CUDA, float>(unsigned long long* counts, const float* x,
                                                     size_t n, Fp8Format f, const float* scale) {
  cast_count_launch(counts, x, n, f, scale);
}
template <> void fp8_cast_count<Device::CUDA, bf16>(unsigned long long* counts, const bf16* x,
                                                    size_t n, Fp8Format f, const float* scale) {
  cast_count_launch(counts, x, n, f, scale);
}

template <> void fp8_quantize_blocks<Device::CUDA, float>(uint8_t* q, float* scale_inv,
                                                          const float* x, int rows, int cols,
                                                          Fp8Format f, Fp8Blocks blocks,
                                                          bool transpose) {
  quantize_blocks_launch(q, scale_inv, x, rows, cols, f, blocks, transpose);
}
template <> void fp8_quantize_blocks<Device::CUDA, bf16>(uint8_t* q, float* scale_inv,
                                                         const bf16* x, int rows, int cols,
                                                         Fp8Format f, Fp8Blocks blocks,
                                                         bool transpose) {
  quantize_blocks_launch(q, scale_inv, x, rows, cols, f, blocks, transpose);
}

template <> void fp8_dequantize<Device::CUDA, float>(float* x, Fp8Matrix q, int rows, int cols) {
  dequantize_launch(x, q, rows, cols);
}
template <> void fp8_dequantize<Device::CUDA, bf16>(bf16* x, Fp8Matrix q, int rows, int cols) {
  dequantize_launch(x, q, rows, cols);
}

template <> void fp8_current_scale<Device::CUDA>(float* scale, const float* amax, int n,
                                                 Fp8Format f) {
  if (n == 0) return;
  current_scale_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(scale, amax, n, f);
  KERNEL_CHECK();
}

template <> void fp8_scale_inverse<Device::CUDA>(float* scale_inv, const float* scale, int n) {
  if (n == 0) return;
  scale_inverse_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(scale_inv, scale, n);
  KERNEL_CHECK();
}

template <> void fp8_shard_amax<Device::CUDA, float>(float* amax, const float* x, int64_t first,
                                                     int64_t n, int cols, Fp8Blocks blocks) {
  shard_amax_launch(amax, x, first, n, cols, blocks);
}
template <> void fp8_shard_amax<Device::CUDA, bf16>(float* amax, const bf16* x, int64_t first,
                                                    int64_t n, int cols, Fp8Blocks blocks) {
  shard_amax_launch(amax, x, first, n, cols, blocks);
}
template <> void fp8_shard_quantize<Device::CUDA, float>(uint8_t* q, float* amax, const float* x,
                                                         int64_t first, int64_t n, int cols,
                                                         Fp8Format f, Fp8Blocks blocks,
                                                         const float* scale) {
  shard_quantize_launch(q, amax, x, first, n, cols, f, blocks, scale);
}
template <> void fp8_shard_quantize<Device::CUDA, bf16>(uint8_t* q, float* amax, const bf16* x,
                                                        int64_t first, int64_t n, int cols,
                                                        Fp8Format f, Fp8Blocks blocks,
                                                        const float* scale) {
  shard_quantize_launch(q, amax, x, first, n, cols, f, blocks, scale);
}
template <> void fp8_shard_dequantize<Device::CUDA, float>(float* x, Fp8Matrix q, int64_t first,
                                                           int64_t n, int cols) {
  shard_dequantize_launch(x, q, first, n, cols);
}
template <> void fp8_shard_dequantize<Device::CUDA, bf16>(bf16* x, Fp8Matrix q, int64_t first,
                                                          int64_t n, int cols) {
  shard_dequantize_launch(x, q, first, n, cols);
}

template <> void fp8_delayed_update<Device::CUDA>(float* history, float* scale, int len, int n,
                                                  Fp8AmaxAlgo algo, float scaled_max) {
  if (n == 0) return;
  delayed_update_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(history, scale, len, n, algo,
                                                               scaled_max);
  KERNEL_CHECK();
}

}  // namespace kernels
