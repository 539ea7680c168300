// kernels/cpu/memory_gemm.cpp: CPU "device" memory and GEMM.
//
// On the CPU backend the device is the host: a device buffer is an ordinary heap block,
// and every copy direction is one memcpy. Blocks are 64-byte aligned (one cache line, one
// AVX-512 register) and zero-filled, as the CUDA twin's cudaMalloc + cudaMemset are, so
// code that forgets to initialise a buffer behaves the same on both backends.
//
// Freed blocks are cached (kernels/block_cache.h) and handed out again instead of going back
// to the OS. The trainer allocates the same activations and logits every microbatch (hundreds
// of MiB); glibc serves such blocks with mmap and returns them with munmap, so without the
// cache every step page-faults and the kernel zeroes each 4 KiB page again on first touch:
// that was a third of a step's non-GEMM time.
//
// GEMM is OpenBLAS sgemm. Row-major C = alpha op(A) op(B) + beta C maps directly onto
// cblas' CblasRowMajor; the strided-batched form is a loop of sgemm calls (each large
// enough in our use, one per attention head or per expert, for OpenBLAS's own threads). The
// grouped form is the same loop over its groups (group i at A + a_offset_i ...), calling the
// very gemm below, so a grouped call is bit for bit the per-group gemm calls it stands for.
//
// 16-bit storage (bf16, fp16): widen A, B (and C), the fp32 sgemm, round C
// (kernels/cpu/widen.h); the logits GEMM keeps its fp32 C as it is.
//
// defines the CPU twins of kernels/ops/memory_gemm.h: device_malloc, device_free,
//          memcpy_to_host, memcpy_to_host_strided, memcpy_from_host, memcpy_device,
//          memset_zero, synchronize, gemm, gemm_strided_batched, gemm_grouped; and the timer marks of kernels/counters.h
//          (timer_mark, timer_seconds: the steady clock)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include "kernels/block_cache.h"
#include "kernels/cpu/widen.h"  // defines: Input, Widened, span
#include "kernels/ops/memory_gemm.h"

namespace kernels {

namespace {
constexpr size_t kAlign = 64;

BlockCache& cache() {
  // never destroyed: a static object's destructor may free a buffer after it
  static BlockCache* c = new BlockCache([](size_t bytes) { return std::aligned_alloc(kAlign, bytes); },
                                        [](void* p) { std::free(p); });
  return *c;
}
}  // namespace

template <> void* device_malloc<Device::CPU>(size_t bytes) {
  void* p = cache().take(bytes);
  std::memset(p, 0, bytes);
  return p;
}

template <> void device_free<Device::CPU>(void* p) {
  if (p == nullptr) return;
  if (!cache().give(p)) std::free(p);  // not from device_malloc: what the plain allocator did
}

template <> void memcpy_to_host<Device::CPU>(void* host_dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, src, bytes);
}

template <> void memcpy_to_host_strided<Device::CPU>(void* host_dst, const void* src,
                                                     size_t row_bytes, size_t src_pitch,
                                                     size_t rows) {
  for (size_t r = 0; r < rows && row_bytes > 0; ++r)
    std::memcpy(static_cast<char*>(host_dst) + r * row_bytes,
                static_cast<const char*>(src) + r * src_pitch, row_bytes);
}

template <> void memcpy_from_host<Device::CPU>(void* dst, const void* host_src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
}

template <> void memcpy_device<Device::CPU>(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memmove(dst, src, bytes);
}

template <> void memset_zero<Device::CPU>(void* p, size_t bytes) {
  if (bytes > 0) std::memset(p, 0, bytes);
}

// ---- timer marks (kernels/counters.h) ------------------------------------------------------
// A CPU op has finished when it returns, so the clock read after it is its end.
static std::vector<std::chrono::steady_clock::time_point> g_marks;
template <> void timer_mark<Device::CPU>(int mark) {
  if ((size_t)mark >= g_marks.size()) g_marks.resize(std::max<size_t>(mark + 1, 2 * g_marks.size()));
  g_marks[mark] = std::chrono::steady_clock::now();
}
template <> double timer_seconds<Device::CPU>(int from, int to) {
  return std::chrono::duration<double>(g_marks.at(to) - g_marks.at(from)).count();
}

// CPU ops run to completion before they return.
template <> void synchronize<Device::CPU>() {}

template <> void gemm<Device::CPU, float, float>(
    bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* A, int lda,
    const float* B, int ldb, float beta, float* C, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <> void gemm_strided_batched<Device::CPU, float>(
    bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* A, int lda,
    long long stride_a, const float* B, int ldb, long long stride_b, float beta, float* C, int ldc,
    long long stride_c, int batch) {
  for (int i = 0; i < batch; i++) {
    gemm<Device::CPU>(trans_a, trans_b, m, n, k, alpha, A + i * stride_a, lda, B + i * stride_b,
                      ldb, beta, C + i * stride_c, ldc);
  }
}

// A group with k == 0 has an empty product: C_i = beta C_i, which memory_gemm.h allows for
// beta 1 only (the caller has nothing to add), so it is skipped like an m == 0 or n == 0 group.
template <> void gemm_grouped<Device::CPU, float>(
    bool trans_a, bool trans_b, float alpha, const float* A, int lda, const float* B, int ldb,
    float beta, float* C, int ldc, const GemmGroup* groups, int count) {
  for (int i = 0; i < count; i++) {
    const GemmGroup& g = groups[i];
    if (g.k == 0 && g.m > 0 && g.n > 0 && beta != 1.0f)
      throw std::invalid_argument("gemm_grouped: a group with k == 0 needs beta == 1");
  }
  for (int i = 0; i < count; i++) {
    const GemmGroup& g = groups[i];
    if (g.m == 0 || g.n == 0 || g.k == 0) continue;
    gemm<Device::CPU>(trans_a, trans_b, g.m, g.n, g.k, alpha, A + g.a_offset, lda,
                      B + g.b_offset, ldb, beta, C + g.c_offset, ldc);
  }
}

// ---- 16-bit storage (bf16, fp16): widen, the fp32 twin above, round --------------------------
using cpu::Input;
using cpu::Widened;
using cpu::span;

// Elements of op(X)(rows, cols) stored with row stride ld.
static size_t op_span(bool trans, int rows, int cols, int ld) {
  return trans ? span(cols, rows, ld) : span(rows, cols, ld);
}

// C in the storage type, or (the overload below) in fp32: the logits, which stay unrounded.
template <class H>
static void gemm_16(bool ta, bool tb, int m, int n, int k, float alpha, const H* A, int lda,
                    const H* B, int ldb, float beta, H* C, int ldc) {
  Input a(A, op_span(ta, m, k, lda)), b(B, op_span(tb, k, n, ldb));
  Widened c(C, span(m, n, ldc));
  gemm<Device::CPU>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
}
template <class H>
static void gemm_16(bool ta, bool tb, int m, int n, int k, float alpha, const H* A, int lda,
                    const H* B, int ldb, float beta, float* C, int ldc) {
  Input a(A, op_span(ta, m, k, lda)), b(B, op_span(tb, k, n, ldb));
  gemm<Device::CPU>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
}
template <> void gemm<Device::CPU, bf16, bf16>(bool ta, bool tb, int m, int n, int k, float alpha,
                                               const bf16* A, int lda, const bf16* B, int ldb,
                                               float beta, bf16* C, int ldc) {
  gemm_16(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <> void gemm<Device::CPU, fp16, fp16>(bool ta, bool tb, int m, int n, int k, float alpha,
                                               const fp16* A, int lda, const fp16* B, int ldb,
                                               float beta, fp16* C, int ldc) {
  gemm_16(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <> void gemm<Device::CPU, bf16, float>(bool ta, bool tb, int m, int n, int k,
                                                float alpha, const bf16* A, int lda,
                                                const bf16* B, int ldb, float beta, float* C,
                                                int ldc) {
  gemm_16(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <> void gemm<Device::CPU, fp16, float>(bool ta, bool tb, int m, int n, int k,
                                                float alpha, const fp16* A, int lda,
                                                const fp16* B, int ldb, float beta, float* C,
                                                int ldc) {
  gemm_16(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class H>
static void gemm_strided_batched_16(bool ta, bool tb, int m, int n, int k, float alpha, const H* A,
                                    int lda, long long sa, const H* B, int ldb, long long sb,
                                    float beta, H* C, int ldc, long long sc, int batch) {
  Input a(A, (size_t)sa * (batch - 1) + op_span(ta, m, k, lda));
  Input b(B, (size_t)sb * (batch - 1) + op_span(tb, k, n, ldb));
  Widened c(C, (size_t)sc * (batch - 1) + span(m, n, ldc));
  gemm_strided_batched<Device::CPU>(ta, tb, m, n, k, alpha, a.data(), lda, sa, b.data(), ldb, sb,
                                    beta, c.data(), ldc, sc, batch);
}
template <> void gemm_strided_batched<Device::CPU, bf16>(bool ta, bool tb, int m, int n, int k,
                                                         float alpha, const bf16* A, int lda,
                                                         long long sa, const bf16* B, int ldb,
                                                         long long sb, float beta, bf16* C, int ldc,
                                                         long long sc, int batch) {
  gemm_strided_batched_16(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
template <> void gemm_strided_batched<Device::CPU, fp16>(bool ta, bool tb, int m, int n, int k,
                                                         float alpha, const fp16* A, int lda,
                                                         long long sa, const fp16* B, int ldb,
                                                         long long sb, float beta, fp16* C, int ldc,
                                                         long long sc, int batch) {
  gemm_strided_batched_16(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

// The widened spans cover every group (the furthest element any group reaches); C elements
// outside the groups round-trip exactly, so this is the per-group 16-bit gemm calls.
template <class H>
static void gemm_grouped_16(bool ta, bool tb, float alpha, const H* A, int lda, const H* B, int ldb,
                            float beta, H* C, int ldc, const GemmGroup* groups, int count) {
  size_t na = 0, nb = 0, nc = 0;
  for (int i = 0; i < count; i++) {
    const GemmGroup& g = groups[i];
    if (g.m == 0 || g.n == 0 || g.k == 0) continue;
    na = std::max(na, (size_t)g.a_offset + op_span(ta, g.m, g.k, lda));
    nb = std::max(nb, (size_t)g.b_offset + op_span(tb, g.k, g.n, ldb));
    nc = std::max(nc, (size_t)g.c_offset + span(g.m, g.n, ldc));
  }
  Input a(A, na), b(B, nb);
  Widened c(C, nc);
  gemm_grouped<Device::CPU>(ta, tb, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc,
                            groups, count);
}
template <> void gemm_grouped<Device::CPU, bf16>(bool ta, bool tb, float alpha, const bf16* A,
                                                 int lda, const bf16* B, int ldb, float beta,
                                                 bf16* C, int ldc, const GemmGroup* groups,
                                                 int count) {
  gemm_grouped_16(ta, tb, alpha, A, lda, B, ldb, beta, C, ldc, groups, count);
}
template <> void gemm_grouped<Device::CPU, fp16>(bool ta, bool tb, float alpha, const fp16* A,
                                                 int lda, const fp16* B, int ldb, float beta,
                                                 fp16* C, int ldc, const GemmGroup* groups,
                                                 int count) {
  gemm_grouped_16(ta, tb, alpha, A, lda, B, ldb, beta, C, ldc, groups, count);
}

}  // namespace kernels
