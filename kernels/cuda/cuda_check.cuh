// kernels/cuda/cuda_check.cuh: what every CUDA kernel file shares.
//
// Every runtime call, cuBLAS call and kernel launch is checked: a failure throws
// std::runtime_error naming file:line, the expression and CUDA's error string, so a bad
// launch is reported where it happened instead of at some later synchronisation.
// A kernel launch itself returns nothing; KERNEL_CHECK() after it reads cudaGetLastError
// (launch-configuration errors). Faults inside a running kernel surface at the next
// checked call on the stream.
//
// defines: CUDA_CHECK, CUBLAS_CHECK, KERNEL_CHECK, GRID_STRIDE_LOOP, stream(), cublas(),
//          scratch_alloc, scratch_free (memory_gemm.cu),
//          grid_1d, warp_sum, warp_max, block_sum, block_max
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace kernels {
namespace cuda {
namespace detail {

inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr + ": " +
                             cudaGetErrorString(e));
}
inline void check_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr + ": " +
                             cublasGetStatusString(s));
}

}  // namespace detail

#define CUDA_CHECK(expr) ::kernels::cuda::detail::check_cuda((expr), #expr, __FILE__, __LINE__)
#define CUBLAS_CHECK(expr) ::kernels::cuda::detail::check_cublas((expr), #expr, __FILE__, __LINE__)
#define KERNEL_CHECK() CUDA_CHECK(cudaGetLastError())

// i runs over [0, n) with the whole grid striding, so any grid size covers any n.
#define GRID_STRIDE_LOOP(i, n)                                                    \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n); \
       i += (size_t)gridDim.x * blockDim.x)

// The one stream every op is queued on, and the cuBLAS handle bound to it; both are
// created lazily on the current device at first use (memory_gemm.cu).
cudaStream_t stream();
cublasHandle_t cublas();

// A twin's scratch, from the caching allocator (kernels/block_cache.h) that device_malloc
// uses: not zeroed, for work queued on stream(). scratch_free hands the block back at once;
// whoever takes it next queues its work on the same stream, after the work that used it
// (memory_gemm.cu, "memory": the allocator is stream-ordered), so no event is needed.
void* scratch_alloc(size_t bytes);
void scratch_free(void* p);

constexpr int kThreads = 256;  // block size of the elementwise and per-row kernels

// Blocks for a grid-stride loop over n elements: one element per thread up to a cap
// (2^18 blocks = 64M threads), beyond which threads loop.
inline unsigned grid_1d(size_t n) {
  size_t blocks = (n + kThreads - 1) / kThreads;
  return (unsigned)std::min<size_t>(std::max<size_t>(blocks, 1), size_t(1) << 18);
}

// ---- reductions ----------------------------------------------------------------------------
// Butterfly (xor) shuffles leave the result in every lane of the warp.
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Block-wide reductions (blockDim.x a multiple of 32, one-dimensional block): each warp
// reduces its lanes, warp w parks its result in partial[w], then every warp reduces the
// partials itself, so all threads return the total. The leading __syncthreads keeps a
// second call from overwriting partial[] while a slow warp still reads the first.
template <typename T>
__device__ inline T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? partial[lane] : T(0));
}
__device__ inline float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? partial[lane] : -INFINITY);
}

// Reductions to the host (kernels/cuda/loss_optimizer.cu): kSumBlocks blocks each write one
// double partial into a process-lifetime device buffer; add_partials copies them back
// (blocking) and sums them in block order.
constexpr int kSumBlocks = 256;
double* sum_partials();
double add_partials(const double* partial);

}  // namespace cuda
}  // namespace kernels
