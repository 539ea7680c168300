// kernels/cuda/memory_gemm.cu: the CUDA backend's state (one stream, one cuBLAS handle, both
// created on the current device at first use: cudaSetDevice comes first), memory, and GEMM:
// the CUDA twins of kernels/ops/memory_gemm.h, mirroring kernels/cpu/memory_gemm.cpp's heap
// blocks and OpenBLAS sgemm.
//
// The one trick is GEMM's layout. memory_gemm.h is row-major; cuBLAS is column-major. A row-major
// matrix X (rows x cols, row stride ld) is, byte for byte, the column-major matrix X^T
// with leading dimension ld. So instead of C = op(A) op(B) we ask cuBLAS for
//     C^T = op(B)^T op(A)^T          (an n x m column-major product)
// by passing B first and A second, each with its own transpose flag, and m and n
// swapped: no data moves, and the strides are the row strides the caller gave.
//
// Precision: CUBLAS_DEFAULT_MATH with cublasSgemm is plain fp32 (TF32 only if the
// NVIDIA_TF32_OVERRIDE environment variable forces it), so results match the CPU twin to
// fp32 rounding. The 16-bit GEMMs (cublasGemmEx, CUDA_R_16BF or CUDA_R_16F operands,
// CUBLAS_COMPUTE_32F) multiply exact bf16 or fp16 values on tensor cores and accumulate in
// fp32; C is rounded to the storage type once at the end, or kept fp32 for the logits. That is
// the CPU twin's "widen, sgemm, round" up to the summation order.
//
// Grouped GEMM (the MoE experts): cublasGemmGroupedBatchedEx with one problem per group
// (group_size 1 each, empty groups left out), the same operand swap per problem. Its m, n, k,
// transposes, leading dimensions, alpha and beta are host arrays; the A, B and C pointer
// arrays must be device arrays, so each call uploads them (3 pointers per problem) into a
// scratch kept for the process, grown (scratch_free / scratch_alloc: the caching allocator)
// when a call has more problems. The upload is queued on the stream, so the previous call's GEMM has
// read its pointers before the next call overwrites them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/block_cache.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/ops/memory_gemm.h"

// cuBLAS reads kernels::bf16 buffers as __nv_bfloat16: both are the upper 16 bits of an
// IEEE float, so only the size and alignment have to agree.
static_assert(sizeof(kernels::bf16) == sizeof(__nv_bfloat16) &&
                  alignof(kernels::bf16) == alignof(__nv_bfloat16),
              "kernels::bf16 must be layout-compatible with __nv_bfloat16");
// and kernels::fp16 buffers as __half: both IEEE-754 binary16.
static_assert(sizeof(kernels::fp16) == sizeof(__half) && alignof(kernels::fp16) == alignof(__half),
              "kernels::fp16 must be layout-compatible with __half");

namespace kernels {
namespace cuda {

// ---- device state --------------------------------------------------------------------------
// A blocking stream (not cudaStreamNonBlocking): work that other code queues on the legacy
// default stream stays ordered with ours.
cudaStream_t stream() {
  static cudaStream_t s = [] {
    cudaStream_t created;
    CUDA_CHECK(cudaStreamCreate(&created));
    return created;
  }();
  return s;
}

cublasHandle_t cublas() {
  static cublasHandle_t h = [] {
    cublasHandle_t created;
    CUBLAS_CHECK(cublasCreate(&created));
    CUBLAS_CHECK(cublasSetStream(created, stream()));
    // Without the second flag cuBLAS may add split-K partial sums of a bf16-output GEMM in
    // bf16; memory_gemm.h promises fp32 accumulation. It does not affect the fp32 sgemm.
    CUBLAS_CHECK(cublasSetMathMode(
        created, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    return created;
  }();
  return h;
}

}  // namespace cuda

using namespace cuda;  // cuda_check.cuh: stream(), cublas(), KERNEL_CHECK's helpers

void* cuda_current_stream() { return (void*)stream(); }

// ---- memory --------------------------------------------------------------------------------
// The caching allocator (kernels/block_cache.h) over cudaMalloc: after the first step no
// cudaMalloc or cudaFree (each of which synchronises the whole device) runs inside a step.
// A failed cudaMalloc clears its error and returns nullptr, so that the cache can give its
// blocks back (cudaFree) and try once more.
//
// Stream-ordered, as PyTorch's caching allocator and cudaMallocAsync's pools are: neither
// device_malloc nor device_free waits for the device. A block freed while kernels queued on the
// compute stream still use it may be handed out at once, because whoever takes it queues its
// own work on the same stream, after theirs (the zero-fill below is such work). Work on another
// stream is ordered the same way: NCCL's operations wait for an event of the compute stream
// recorded when they are posted (parallel/comm_nccl.cpp), and a buffer given to one is freed only
// after the host has waited for it (the comm layer's wait), so the compute stream's order is the
// only one a freed block needs (PyTorch's record_stream covers the case this design rules out).
static BlockCache& cache() {
  // never destroyed: a static object's destructor may free a buffer after it
  static BlockCache* c = new BlockCache(
      [](size_t bytes) -> void* {
        void* p = nullptr;
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
          cudaGetLastError();
          return nullptr;
        }
        return p;
      },
      [](void* p) { CUDA_CHECK(cudaFree(p)); });
  return *c;
}

template <> void* device_malloc<Device::CUDA>(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = cache().take(bytes);
  // A reused block is zeroed as a fresh one: a write of `bytes` at the memory's bandwidth
  // (1 GiB in about 0.4 ms on an H100), queued on the stream after the block's last use.
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream()));
  return p;
}

template <> void device_free<Device::CUDA>(void* p) {
  if (p == nullptr) return;
  if (!cache().give(p)) CUDA_CHECK(cudaFree(p));
}

namespace cuda {
void* scratch_alloc(size_t bytes) { return bytes == 0 ? nullptr : cache().take(bytes); }
void scratch_free(void* p) {
  if (p != nullptr) cache().give(p);
}
}  // namespace cuda

// The host copies block: the caller reads (or reuses) the host buffer right after.
template <> void memcpy_to_host<Device::CUDA>(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

template <> void memcpy_to_host_strided<Device::CUDA>(void* host_dst, const void* src,
                                                      size_t row_bytes, size_t src_pitch,
                                                      size_t rows) {
  if (row_bytes == 0 || rows == 0) return;
  CUDA_CHECK(cudaMemcpy2DAsync(host_dst, row_bytes, src, src_pitch, row_bytes, rows,
                               cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

template <> void memcpy_from_host<Device::CUDA>(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

template <> void memcpy_device<Device::CUDA>(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
}

template <> void memset_zero<Device::CUDA>(void* p, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream()));
}

template <> void synchronize<Device::CUDA>() { CUDA_CHECK(cudaStreamSynchronize(stream())); }

// ---- timer marks (kernels/counters.h) ------------------------------------------------------
// A mark is an event recorded on the stream: it completes when the work queued before it has.
// The pool grows (doubling) the first time a step takes more marks than it holds, and its
// events are recorded again every step after: no cudaEventCreate per call.
static std::vector<cudaEvent_t> g_events;
template <> void timer_mark<Device::CUDA>(int mark) {
  if ((size_t)mark >= g_events.size()) {
    const size_t grown = std::max<size_t>(mark + 1, std::max<size_t>(256, 2 * g_events.size()));
    while (g_events.size() < grown) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      g_events.push_back(e);
    }
  }
  CUDA_CHECK(cudaEventRecord(g_events[mark], stream()));
}
template <> double timer_seconds<Device::CUDA>(int from, int to) {
  CUDA_CHECK(cudaEventSynchronize(g_events.at(to)));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, g_events.at(from), g_events.at(to)));
  return ms * 1e-3;
}

// ---- GEMM ----------------------------------------------------------------------------------
static cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// Row-major C(m,n) = alpha op(A) op(B) + beta C, computed as column-major
// C^T(n,m) = alpha op(B)^T op(A)^T + beta C^T (see the header comment).
template <> void gemm<Device::CUDA, float, float>(
    bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* A, int lda,
    const float* B, int ldb, float beta, float* C, int ldc) {
  if (m == 0 || n == 0) return;
  CUBLAS_CHECK(cublasSgemm(cublas(), op(trans_b), op(trans_a), n, m, k, &alpha, B, ldb, A, lda,
                           &beta, C, ldc));
}

template <> void gemm_strided_batched<Device::CUDA, float>(
    bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* A, int lda,
    long long stride_a, const float* B, int ldb, long long stride_b, float beta, float* C, int ldc,
    long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  CUBLAS_CHECK(cublasSgemmStridedBatched(cublas(), op(trans_b), op(trans_a), n, m, k, &alpha, B,
                                         ldb, stride_b, A, lda, stride_a, &beta, C, ldc, stride_c,
                                         batch));
}

// cuBLAS's name of a 16-bit storage type.
template <typename H>
static cudaDataType_t data_type() {
  return std::is_same<H, bf16>::value ? CUDA_R_16BF : CUDA_R_16F;
}

// 16-bit A and B (bf16 or fp16), C of type c_type (A's, or CUDA_R_32F); the same operand swap
// as above. alpha and beta are fp32, as CUBLAS_COMPUTE_32F requires.
template <typename H>
static void gemm_16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const H* A,
                    int lda, const H* B, int ldb, float beta, void* C, cudaDataType_t c_type,
                    int ldc) {
  if (m == 0 || n == 0) return;
  CUBLAS_CHECK(cublasGemmEx(cublas(), op(trans_b), op(trans_a), n, m, k, &alpha, B,
                            data_type<H>(), ldb, A, data_type<H>(), lda, &beta, C, c_type, ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <> void gemm<Device::CUDA, bf16, bf16>(bool trans_a, bool trans_b, int m, int n, int k,
                                                float alpha, const bf16* A, int lda, const bf16* B,
                                                int ldb, float beta, bf16* C, int ldc) {
  gemm_16(trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, CUDA_R_16BF, ldc);
}
template <> void gemm<Device::CUDA, fp16, fp16>(bool trans_a, bool trans_b, int m, int n, int k,
                                                float alpha, const fp16* A, int lda, const fp16* B,
                                                int ldb, float beta, fp16* C, int ldc) {
  gemm_16(trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, CUDA_R_16F, ldc);
}
template <> void gemm<Device::CUDA, bf16, float>(bool trans_a, bool trans_b, int m, int n, int k,
                                                 float alpha, const bf16* A, int lda, const bf16* B,
                                                 int ldb, float beta, float* C, int ldc) {
  gemm_16(trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, CUDA_R_32F, ldc);
}
template <> void gemm<Device::CUDA, fp16, float>(bool trans_a, bool trans_b, int m, int n, int k,
                                                 float alpha, const fp16* A, int lda, const fp16* B,
                                                 int ldb, float beta, float* C, int ldc) {
  gemm_16(trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, CUDA_R_32F, ldc);
}

template <typename H>
static void gemm_strided_batched_16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                    const H* A, int lda, long long stride_a, const H* B, int ldb,
                                    long long stride_b, float beta, H* C, int ldc,
                                    long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const cudaDataType_t t = data_type<H>();
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas(), op(trans_b), op(trans_a), n, m, k, &alpha, B, t, ldb, stride_b, A, t, lda,
      stride_a, &beta, C, t, ldc, stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
template <> void gemm_strided_batched<Device::CUDA, bf16>(
    bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* A, int lda,
    long long stride_a, const bf16* B, int ldb, long long stride_b, float beta, bf16* C, int ldc,
    long long stride_c, int batch) {
  gemm_strided_batched_16(trans_a, trans_b, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b,
                          beta, C, ldc, stride_c, batch);
}
template <> void gemm_strided_batched<Device::CUDA, fp16>(
    bool trans_a, bool trans_b, int m, int n, int k, float alpha, const fp16* A, int lda,
    long long stride_a, const fp16* B, int ldb, long long stride_b, float beta, fp16* C, int ldc,
    long long stride_c, int batch) {
  gemm_strided_batched_16(trans_a, trans_b, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b,
                          beta, C, ldc, stride_c, batch);
}

// ---- grouped GEMM --------------------------------------------------------------------------
// Device array of `n` pointers, valid for work queued after this call on the stream.
static void** grouped_pointer_scratch(size_t n) {
  static void** scratch = nullptr;
  static size_t capacity = 0;
  if (n > capacity) {
    scratch_free(scratch);
    capacity = std::max(n, 2 * capacity);
    scratch = (void**)scratch_alloc(capacity * sizeof(void*));
  }
  return scratch;
}

// cuBLAS's grouped kernels read each problem's matrices through pointers in device memory,
// which it does not inspect: its kernels assume every matrix 16-byte aligned and every leading
// dimension a whole number of 16-byte rows. A bf16 group that starts at an odd column (op_check's
// TN case: A at column offset 37) took an H200 to "misaligned address" (issue 27), a sticky error
// that poisons the CUDA context. So a call whose groups are not all aligned runs one cuBLAS GEMM
// per group instead (cublasGemmEx checks the pointers it is given and picks a kernel that
// can), and the pointer arrays each start at a 256-byte boundary.
static bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

template <typename T>
static void gemm_one(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* A,
                     int lda, const T* B, int ldb, float beta, T* C, int ldc) {
  if constexpr (std::is_same<T, float>::value)
    gemm<Device::CUDA, float, float>(trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C,
                                     ldc);
  else
    gemm_16(trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, data_type<T>(), ldc);
}

// T the storage of A, B and C (CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F); fp32 compute always.
template <typename T>
static void gemm_grouped_launch(bool trans_a, bool trans_b, float alpha, const T* A, int lda,
                                const T* B, int ldb, float beta, T* C, int ldc,
                                const GemmGroup* groups, int count, cudaDataType_t type) {
  std::vector<int> m, n, k;  // of the column-major problems: (n_i, m_i, k_i)
  std::vector<const void*> a_ptrs, b_ptrs;
  std::vector<void*> c_ptrs;
  for (int i = 0; i < count; i++) {
    const GemmGroup& g = groups[i];
    if (g.m == 0 || g.n == 0) continue;
    if (g.k == 0) {
      if (beta != 1.0f)
        throw std::invalid_argument("gemm_grouped: a group with k == 0 needs beta == 1");
      continue;  // C_i = 1 * C_i
    }
    m.push_back(g.n);
    n.push_back(g.m);
    k.push_back(g.k);
    a_ptrs.push_back(B + g.b_offset);  // the swap: cuBLAS's A is our B
    b_ptrs.push_back(A + g.a_offset);
    c_ptrs.push_back(C + g.c_offset);
  }
  const int problems = (int)m.size();
  if (problems == 0) return;
  bool aligned = (lda * sizeof(T)) % 16 == 0 && (ldb * sizeof(T)) % 16 == 0 &&
                 (ldc * sizeof(T)) % 16 == 0;
  for (int i = 0; i < problems && aligned; i++)
    aligned = aligned16(a_ptrs[i]) && aligned16(b_ptrs[i]) && aligned16(c_ptrs[i]);
  if (!aligned) {  // the groups one by one (each GemmGroup as gemm would run it)
    for (int i = 0; i < count; i++) {
      const GemmGroup& g = groups[i];
      if (g.m == 0 || g.n == 0 || g.k == 0) continue;
      gemm_one(trans_a, trans_b, g.m, g.n, g.k, alpha, A + g.a_offset, lda, B + g.b_offset, ldb,
               beta, C + g.c_offset, ldc);
    }
    return;
  }
  // the three arrays (cuBLAS's A, B, C pointers), each at a multiple of 32 entries
  const size_t stride = ((size_t)problems + 31) / 32 * 32;
  std::vector<void*> host(3 * stride, nullptr);
  for (int i = 0; i < problems; i++) {
    host[i] = const_cast<void*>(a_ptrs[i]);
    host[stride + i] = const_cast<void*>(b_ptrs[i]);
    host[2 * stride + i] = c_ptrs[i];
  }
  void** dev = grouped_pointer_scratch(host.size());
  // From pageable memory: the copy is staged before the call returns, so `host` may go.
  CUDA_CHECK(cudaMemcpyAsync(dev, host.data(), host.size() * sizeof(void*),
                             cudaMemcpyHostToDevice, stream()));
  const std::vector<cublasOperation_t> op_a(problems, op(trans_b)), op_b(problems, op(trans_a));
  const std::vector<int> ld_a(problems, ldb), ld_b(problems, lda), ld_c(problems, ldc),
      sizes(problems, 1);
  const std::vector<float> alphas(problems, alpha), betas(problems, beta);
  CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      cublas(), op_a.data(), op_b.data(), m.data(), n.data(), k.data(), alphas.data(),
      (const void* const*)dev, type, ld_a.data(), (const void* const*)(dev + stride), type,
      ld_b.data(), betas.data(), dev + 2 * stride, type, ld_c.data(), problems, sizes.data(),
      CUBLAS_COMPUTE_32F));
}

template <> void gemm_grouped<Device::CUDA, float>(
    bool trans_a, bool trans_b, float alpha, const float* A, int lda, const float* B, int ldb,
    float beta, float* C, int ldc, const GemmGroup* groups, int count) {
  gemm_grouped_launch(trans_a, trans_b, alpha, A, lda, B, ldb, beta, C, ldc, groups, count,
                      CUDA_R_32F);
}
template <> void gemm_grouped<Device::CUDA, bf16>(
    bool trans_a, bool trans_b, float alpha, const bf16* A, int lda, const bf16* B, int ldb,
    float beta, bf16* C, int ldc, const GemmGroup* groups, int count) {
  gemm_grouped_launch(trans_a, trans_b, alpha, A, lda, B, ldb, beta, C, ldc, groups, count,
                      CUDA_R_16BF);
}
template <> void gemm_grouped<Device::CUDA, fp16>(
    bool trans_a, bool trans_b, float alpha, const fp16* A, int lda, const fp16* B, int ldb,
    float beta, fp16* C, int ldc, const GemmGroup* groups, int count) {
  gemm_grouped_launch(trans_a, trans_b, alpha, A, lda, B, ldb, beta, C, ldc, groups, count,
                      CUDA_R_16F);
}

}  // namespace kernels
