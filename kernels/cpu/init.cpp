// kernels/cpu/init.cpp: the CPU twins of kernels/ops/init.h, the parameters' first values.
//
// The draw is the loop over the rectangle's elements, the value kernels/math.h's
// init_normal_value (the CUDA kernel's too); elements are independent, so the loop is split
// over the threads OpenBLAS runs with on this rank (cores / ranks on the node: the trainer sets
// it), each a contiguous chunk. A 124M-parameter model drew in ~8 s on one thread, every tp
// rank every full tensor (issue 26); now each rank draws only what it stores, on its threads.
// 16-bit storage (bf16, fp16) rounds each value once.
//
// defines the CPU twins of kernels/ops/init.h: init_normal, fill
#include <cblas.h>  // openblas_get_num_threads
#include <algorithm>
#include <thread>
#include <vector>

#include "kernels/math.h"
#include "kernels/ops/init.h"

namespace kernels {
namespace {

// body(lo, hi) over [0, n) in one contiguous chunk per thread.
template <class Body>
void parallel_chunks(int64_t n, Body&& body) {
  const int64_t threads = std::max<int64_t>(
      1, std::min<int64_t>(openblas_get_num_threads(), n / 65536));  // not for small tensors
  if (threads == 1) {
    body(0, n);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { body(n * t / threads, n * (t + 1) / threads); });
  for (std::thread& th : pool) th.join();
}

template <class T>
void init_normal_cpu(T* out, int64_t first, int64_t count, int64_t cols, int64_t full_offset,
                     int64_t full_stride, uint64_t seed, uint64_t stream, float sigma) {
  parallel_chunks(count, [&](int64_t lo, int64_t hi) {
    // row by row of the rectangle: element r = first + j sits at row r / cols, column r % cols
    for (int64_t j = lo; j < hi;) {
      const int64_t r = first + j, row = r / cols, col = r % cols;
      const int64_t n = std::min(cols - col, hi - j);
      const int64_t index = full_offset + row * full_stride + col;
      for (int64_t c = 0; c < n; ++c)
        store(out[j + c], init_normal_value(seed, stream, (uint64_t)(index + c), sigma));
      j += n;
    }
  });
}

}  // namespace

template <> void init_normal<Device::CPU, float>(float* out, int64_t first, int64_t count,
                                                 int64_t cols, int64_t full_offset,
                                                 int64_t full_stride, uint64_t seed,
                                                 uint64_t stream, float sigma) {
  init_normal_cpu(out, first, count, cols, full_offset, full_stride, seed, stream, sigma);
}
template <class H>
static void init_normal_16(H* out, int64_t first, int64_t count, int64_t cols, int64_t full_offset,
                           int64_t full_stride, uint64_t seed, uint64_t stream, float sigma) {
  init_normal_cpu(out, first, count, cols, full_offset, full_stride, seed, stream, sigma);
}
template <> void init_normal<Device::CPU, bf16>(bf16* out, int64_t first, int64_t count,
                                                int64_t cols, int64_t full_offset,
                                                int64_t full_stride, uint64_t seed, uint64_t stream,
                                                float sigma) {
  init_normal_16(out, first, count, cols, full_offset, full_stride, seed, stream, sigma);
}
template <> void init_normal<Device::CPU, fp16>(fp16* out, int64_t first, int64_t count,
                                                int64_t cols, int64_t full_offset,
                                                int64_t full_stride, uint64_t seed, uint64_t stream,
                                                float sigma) {
  init_normal_16(out, first, count, cols, full_offset, full_stride, seed, stream, sigma);
}

template <> void fill<Device::CPU, float>(float* out, float value, size_t n) {
  std::fill(out, out + n, value);
}
template <class H>
static void fill_16(H* out, float value, size_t n) {
  std::fill(out, out + n, round_to<H>(value));
}
template <> void fill<Device::CPU, bf16>(bf16* out, float value, size_t n) {
  fill_16(out, value, n);
}
template <> void fill<Device::CPU, fp16>(fp16* out, float value, size_t n) {
  fill_16(out, value, n);
}

}  // namespace kernels
