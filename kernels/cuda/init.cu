// kernels/cuda/init.cu: the CUDA twins of kernels/ops/init.h, mirroring kernels/cpu/init.cpp.
//
// One thread per element of the rectangle (GRID_STRIDE_LOOP), computing its full index and
// kernels/math.h's init_normal_value, the CPU twin's function: a GPU draws its rank's share
// of a 7B model in milliseconds, where the host drew every full tensor on one thread
// (~16M parameters/s: minutes per rank; issue 26). The values equal the CPU twin's up to the
// device's logf and cosf (a few ulp); storage rounds once (store).
//
// defines the CUDA twins of kernels/ops/init.h: init_normal, fill
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/math.h"
#include "kernels/ops/init.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), kThreads, grid_1d, GRID_STRIDE_LOOP

// mirrors init_normal<Device::CPU>
template <typename T>
__global__ void init_normal_kernel(T* out, int64_t first, size_t count, int64_t cols,
                                   int64_t full_offset, int64_t full_stride, uint64_t seed,
                                   uint64_t stream, float sigma) {
  GRID_STRIDE_LOOP(j, count) {
    const int64_t r = first + (int64_t)j;
    const int64_t index = full_offset + r / cols * full_stride + r % cols;
    store(out[j], init_normal_value(seed, stream, (uint64_t)index, sigma));
  }
}
// mirrors fill<Device::CPU>
template <typename T>
__global__ void fill_kernel(T* out, float value, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(out[i], value);
}

template <typename T>
static void init_normal_launch(T* out, int64_t first, int64_t count, int64_t cols,
                               int64_t full_offset, int64_t full_stride, uint64_t seed,
                               uint64_t rng_stream, float sigma) {
  if (count <= 0) return;
  init_normal_kernel<<<grid_1d((size_t)count), kThreads, 0, stream()>>>(
      out, first, (size_t)count, cols, full_offset, full_stride, seed, rng_stream, sigma);
  KERNEL_CHECK();
}
template <typename T>
static void fill_launch(T* out, float value, size_t n) {
  if (n == 0) return;
  fill_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, value, n);
  KERNEL_CHECK();
}

template <> void init_normal<Device::CUDA, float>(float* out, int64_t first, int64_t count,
                                                  int64_t cols, int64_t full_offset,
                                                  int64_t full_stride, uint64_t seed,
                                                  uint64_t rng_stream, float sigma) {
  init_normal_launch(out, first, count, cols, full_offset, full_stride, seed, rng_stream, sigma);
}
template <> void init_normal<Device::CUDA, bf16>(bf16* out, int64_t first, int64_t count,
                                                 int64_t cols, int64_t full_offset,
                                                 int64_t full_stride, uint64_t seed,
                                                 uint64_t rng_stream, float sigma) {
  init_normal_launch(out, first, count, cols, full_offset, full_stride, seed, rng_stream, sigma);
}
template <> void init_normal<Device::CUDA, fp16>(fp16* out, int64_t first, int64_t count,
                                                 int64_t cols, int64_t full_offset,
                                                 int64_t full_stride, uint64_t seed,
                                                 uint64_t rng_stream, float sigma) {
  init_normal_launch(out, first, count, cols, full_offset, full_stride, seed, rng_stream, sigma);
}
template <> void fill<Device::CUDA, float>(float* out, float value, size_t n) {
  fill_launch(out, value, n);
}
template <> void fill<Device::CUDA, bf16>(bf16* out, float value, size_t n) {
  fill_launch(out, value, n);
}
template <> void fill<Device::CUDA, fp16>(fp16* out, float value, size_t n) {
  fill_launch(out, value, n);
}

}  // namespace kernels
