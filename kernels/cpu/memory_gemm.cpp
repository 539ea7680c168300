// kernels/cpu/memory_gemm.cpp: CPU "device" memory and GEMM.
//
// On the CPU backend the device is the host: a device buffer is an ordinary heap block,
// and every copy direction is one memcpy. Blocks are 64-byte aligned (one cache line, one
// AVX-512 register) and zero-filled, as the CUDA twin's cudaMalloc + cudaMemset are, so
// code that forgets to initialise a buffer behaves the same on both backends.
//
// Freed blocks are cached by size and handed out again instead of going back to the OS.
// The trainer allocates the same activations and logits every microbatch (hundreds of MiB);
// glibc serves such blocks with mmap and returns them with munmap, so without the cache
// every step page-faults and the kernel zeroes each 4 KiB page again on first touch: that
// was a third of a step's non-GEMM time. The cache never shrinks, except to retry an
// allocation that failed.
//
// GEMM is OpenBLAS sgemm. Row-major C = alpha op(A) op(B) + beta C maps directly onto
// cblas' CblasRowMajor; the strided-batched form is a loop of sgemm calls (each large
// enough in our use, one per attention head or per expert, for OpenBLAS's own threads). The
// grouped form is the same loop over its groups (group i at A + a_offset_i ...), calling the
// very gemm below, so a grouped call is bit for bit the per-group gemm calls it stands for.
//
// defines: device_malloc, device_free, memcpy_to_host, memcpy_from_host, memcpy_device,
//          memset_zero, synchronize, gemm, gemm_strided_batched, gemm_grouped
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "kernels/cpu_ops.h"
#include "kernels/ops.h"  // GemmGroup

namespace kernels {
namespace cpu {

namespace {
constexpr size_t kAlign = 64;

// Locked so that the allocator stays as thread-safe as malloc is.
std::mutex g_mutex;
std::unordered_map<void*, size_t> g_live;         // block in use -> its padded size
std::unordered_multimap<size_t, void*> g_cached;  // padded size -> a freed block

void release_cache() {
  for (auto& entry : g_cached) std::free(entry.second);
  g_cached.clear();
}
}  // namespace

void* device_malloc(size_t bytes) {
  // aligned_alloc wants a size that is a multiple of the alignment; a 0-byte request still
  // returns a unique pointer that device_free accepts.
  size_t padded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (padded == 0) padded = kAlign;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto hit = g_cached.find(padded);
    if (hit != g_cached.end()) {
      p = hit->second;
      g_cached.erase(hit);
    } else {
      p = std::aligned_alloc(kAlign, padded);
      if (p == nullptr) {  // the cached blocks may be what is missing
        release_cache();
        p = std::aligned_alloc(kAlign, padded);
      }
      if (p == nullptr) throw std::bad_alloc();
    }
    g_live[p] = padded;
  }
  std::memset(p, 0, padded);
  return p;
}

void device_free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_live.find(p);
  if (it == g_live.end()) {  // not from device_malloc: do what the plain allocator did
    std::free(p);
    return;
  }
  g_cached.emplace(it->second, p);
  g_live.erase(it);
}

void memcpy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, src, bytes);
}

void memcpy_from_host(void* dst, const void* host_src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, host_src, bytes);
}

void memcpy_device(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memmove(dst, src, bytes);
}

void memset_zero(void* p, size_t bytes) {
  if (bytes > 0) std::memset(p, 0, bytes);
}

// CPU ops run to completion before they return.
void synchronize() {}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* A, int lda, long long stride_a, const float* B, int ldb,
                          long long stride_b, float beta, float* C, int ldc, long long stride_c,
                          int batch) {
  for (int i = 0; i < batch; i++) {
    gemm(trans_a, trans_b, m, n, k, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
         C + i * stride_c, ldc);
  }
}

// A group with k == 0 has an empty product: C_i = beta C_i, which ops.h allows for beta 1 only
// (the caller has nothing to add), so it is skipped like an m == 0 or n == 0 group.
void gemm_grouped(bool trans_a, bool trans_b, float alpha, const float* A, int lda, const float* B,
                  int ldb, float beta, float* C, int ldc, const GemmGroup* groups, int count) {
  for (int i = 0; i < count; i++) {
    const GemmGroup& g = groups[i];
    if (g.k == 0 && g.m > 0 && g.n > 0 && beta != 1.0f)
      throw std::invalid_argument("gemm_grouped: a group with k == 0 needs beta == 1");
  }
  for (int i = 0; i < count; i++) {
    const GemmGroup& g = groups[i];
    if (g.m == 0 || g.n == 0 || g.k == 0) continue;
    gemm(trans_a, trans_b, g.m, g.n, g.k, alpha, A + g.a_offset, lda, B + g.b_offset, ldb, beta,
         C + g.c_offset, ldc);
  }
}

}  // namespace cpu
}  // namespace kernels
