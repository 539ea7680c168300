// kernels/block_cache.h: the caching allocator behind device_malloc and device_free, one for
// each backend (kernels/cpu/memory_gemm.cpp over aligned_alloc, kernels/cuda/memory_gemm.cu
// over cudaMalloc), as PyTorch's CUDA caching allocator does it without its block splitting.
//
// A training step allocates and frees the same buffers every microbatch (activations, logits,
// workspace). Asking the backend each time costs: cudaMalloc and cudaFree synchronise the
// device, and on the host glibc returns large blocks to the OS (munmap), so the next step
// page-faults and the kernel zeroes every page again. So a freed block is kept in a free list
// binned by its size, and a request is served by the smallest cached block that fits (at most
// 1/8 larger, so that a small request does not pin a large block); only when none fits does
// the cache ask the backend, a "fresh" allocation (counted: kernels/counters.h
// allocation_counts). After the first step has made every buffer once, a step allocates
// nothing new. The cache never shrinks, except to retry a fresh allocation that failed.
//
// The ledger (measure/ledger.h) counts the bytes asked for, not the block's: what a cached
// block holds beyond them (the rounding to kGranule, up to 1/8 of a reused block) is the
// allocator's, as PyTorch's reserved-but-not-allocated memory is.
//
// defines: BlockCache
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

namespace kernels {

class BlockCache {
 public:
  // Every block is a whole number of granules (512 B: cudaMalloc's blocks are 256-aligned,
  // the CPU's 64-aligned; the rounding lets nearly equal requests share a bin).
  static constexpr size_t kGranule = 512;
  // fresh(bytes): a new block from the backend, nullptr when it has none; release(p): give a
  // cached block back to the backend.
  BlockCache(std::function<void*(size_t)> fresh, std::function<void(void*)> release)
      : fresh_(std::move(fresh)), release_(std::move(release)) {}
  // A block of at least `bytes` (a 0-byte request still gets a unique block), cached or fresh;
  // throws std::bad_alloc when the backend has none even with the cache emptied.
  void* take(size_t bytes);
  // Back to its bin; false when p was not taken here (the caller frees it its own way).
  bool give(void* p);
  // Every cached block back to the backend.
  void release_cached();
  size_t cached_bytes() const;  // in the free lists
  size_t live_blocks() const;   // taken and not given back

  static size_t rounded(size_t bytes) {
    return bytes == 0 ? kGranule : (bytes + kGranule - 1) / kGranule * kGranule;
  }

 private:
  std::function<void*(size_t)> fresh_;
  std::function<void(void*)> release_;
  // Locked so that the allocator stays as thread-safe as malloc is.
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;  // block in use -> its size
  std::multimap<size_t, void*> free_;       // size -> a freed block: the bins, ordered
};

}  // namespace kernels
