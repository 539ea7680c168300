// kernels/ops/memory_gemm.h: device memory and the matrix products.
// Twins: kernels/cpu/memory_gemm.cpp (heap blocks, OpenBLAS sgemm), kernels/cuda/memory_gemm.cu
// (cudaMalloc, cuBLAS), each allocating through a kernels/block_cache.h.
//
// Memory is untyped (bytes). Only the device-to-device copy and the memset count as kernels
// (kernels/counters.h); malloc and free go to the allocator, the host copies cross PCIe.
//
// GEMM is row-major: C(m,n) = alpha * op(A)(m,k) * op(B)(k,n) + beta * C, op = transpose if
// its flag is set, lda/ldb/ldc the row strides of the matrices as stored. Every call is one
// GEMM call of 2 m n k FLOPs per product, to the label in force (kernels/counters.h), and its
// time is measured (the CPU's clock, CUDA events: kernels/counters.h, time per phase). T is the storage of A, B and C: for bf16 the products of exact
// bf16 values are accumulated in fp32 and C is rounded once (CPU: widen, sgemm, round).
//
// defines: device_malloc, device_free, memcpy_to_host, memcpy_to_host_strided,
//          memcpy_from_host, memcpy_device,
//          memset_zero, synchronize, gemm, gemm_strided_batched, GemmGroup, gemm_grouped,
//          grouped_flops
#pragma once
#include "kernels/dispatch.h"

namespace kernels {

// ---- memory ---------------------------------------------------------------------------------
// From the backend's caching allocator (kernels/block_cache.h: a freed block is reused, a
// fresh one made only when none fits), zero-filled, as the other twin's is (a reused block is
// zeroed again: callers rely on it, gradients accumulate with +=); CPU: 64-byte aligned;
// CUDA: 256-byte aligned, ready on return. The zero-fill is a memset of `bytes` (counted: kernels::allocation_counts).
template <Device Dev> void* device_malloc(size_t bytes);
template <class = void> void* device_malloc(Device d, size_t bytes) {
  count_zero_fill(bytes);
  return ON_DEVICE(device_malloc)(bytes);
}
template <Device Dev> void device_free(void* p);
template <class = void> void device_free(Device d, void* p) { ON_DEVICE(device_free)(p); }

// The host copies block: the caller reads (or reuses) the host buffer right after.
template <Device Dev> void memcpy_to_host(void* host_dst, const void* src, size_t bytes);
template <class = void>
void memcpy_to_host(Device d, void* host_dst, const void* src, size_t bytes) {
  ON_DEVICE(memcpy_to_host)(host_dst, src, bytes);
}
// `rows` rows of `row_bytes` each, src_pitch bytes apart on the device, packed on the host:
// one copy and one wait however many rows (the allgather dispatcher's rows per expert out of
// every rank's block of its gathered routing map).
template <Device Dev>
void memcpy_to_host_strided(void* host_dst, const void* src, size_t row_bytes, size_t src_pitch,
                            size_t rows);
template <class = void>
void memcpy_to_host_strided(Device d, void* host_dst, const void* src, size_t row_bytes,
                            size_t src_pitch, size_t rows) {
  ON_DEVICE(memcpy_to_host_strided)(host_dst, src, row_bytes, src_pitch, rows);
}
template <Device Dev> void memcpy_from_host(void* dst, const void* host_src, size_t bytes);
template <class = void>
void memcpy_from_host(Device d, void* dst, const void* host_src, size_t bytes) {
  ON_DEVICE(memcpy_from_host)(dst, host_src, bytes);
}

// Device to device, queued like any op. Traffic: reads and writes `bytes`.
template <Device Dev> void memcpy_device(void* dst, const void* src, size_t bytes);
template <class = void> void memcpy_device(Device d, void* dst, const void* src, size_t bytes) {
  count_kernel(2.0 * bytes);
  ON_DEVICE(memcpy_device)(dst, src, bytes);
}
template <Device Dev> void memset_zero(void* p, size_t bytes);
template <class = void> void memset_zero(Device d, void* p, size_t bytes) {
  count_kernel((double)bytes);
  ON_DEVICE(memset_zero)(p, bytes);
}

// Waits for every op queued on the device (the CPU's ops have finished when they return).
template <Device Dev> void synchronize();
template <class = void> void synchronize(Device d) { ON_DEVICE(synchronize)(); }

// ---- GEMM -----------------------------------------------------------------------------------
// C = alpha op(A) op(B) + beta C. TC, the storage of C, is T, or float with bf16 A and B: the
// logits, which the loss needs in fp32 (a second template parameter, not a second name: it is
// the same product, and cuBLAS computes both in one call).
template <Device Dev, class T, class TC>
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* A, int lda,
          const T* B, int ldb, float beta, TC* C, int ldc);
template <class T, class TC>
void gemm(Device d, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* A,
          int lda, const T* B, int ldb, float beta, TC* C, int ldc) {
  count_gemm(2.0 * m * n * k);
  ON_DEVICE(gemm, T, TC)(trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The same for `batch` independent products, matrix i at A + i*stride_a etc.
template <Device Dev, class T>
void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const T* A, int lda, long long stride_a, const T* B, int ldb,
                          long long stride_b, float beta, T* C, int ldc, long long stride_c,
                          int batch);
template <class T>
void gemm_strided_batched(Device d, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const T* A, int lda, long long stride_a, const T* B, int ldb,
                          long long stride_b, float beta, T* C, int ldc, long long stride_c,
                          int batch) {
  count_gemm(2.0 * m * n * k * batch);
  ON_DEVICE(gemm_strided_batched, T)(trans_a, trans_b, m, n, k, alpha, A, lda, stride_a, B, ldb,
                                     stride_b, beta, C, ldc, stride_c, batch);
}

// Grouped GEMM: `count` independent products in ONE call (one launch: the MoE experts'
// projections, --moe-grouped-gemm). Group i is C_i(m_i, n_i) = alpha op(A_i) op(B_i) + beta
// C_i with A_i = A + a_offset_i etc. (elements), the row strides shared by every group. A
// group with m or n == 0 does nothing; one with k == 0 leaves C_i = beta C_i (beta must be 1
// there: its product is empty). `groups` is a host array. CPU: one function running the
// group's products one after another with the same sgemm as gemm (bit for bit the per-group
// gemm calls); CUDA: cublasGemmGroupedBatchedEx. Counts as one GEMM call, sum 2 m n k FLOPs.
struct GemmGroup {
  int m = 0, n = 0, k = 0;
  long long a_offset = 0, b_offset = 0, c_offset = 0;
};
// sum over the groups of 2 m n k: what gemm_grouped counts.
inline double grouped_flops(const GemmGroup* groups, int count) {
  double f = 0.0;
  for (int i = 0; i < count; i++) f += 2.0 * groups[i].m * groups[i].n * groups[i].k;
  return f;
}
template <Device Dev, class T>
void gemm_grouped(bool trans_a, bool trans_b, float alpha, const T* A, int lda, const T* B,
                  int ldb, float beta, T* C, int ldc, const GemmGroup* groups, int count);
template <class T>
void gemm_grouped(Device d, bool trans_a, bool trans_b, float alpha, const T* A, int lda,
                  const T* B, int ldb, float beta, T* C, int ldc, const GemmGroup* groups,
                  int count) {
  count_gemm(grouped_flops(groups, count));
  ON_DEVICE(gemm_grouped, T)(trans_a, trans_b, alpha, A, lda, B, ldb, beta, C, ldc, groups,
                             count);
}

}  // namespace kernels
