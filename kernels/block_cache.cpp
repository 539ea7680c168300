// kernels/block_cache.cpp: see block_cache.h.
#include "kernels/block_cache.h"
#include <new>
#include "kernels/counters.h"  // count_allocation

namespace kernels {

void* BlockCache::take(size_t bytes) {
  const size_t size = rounded(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  auto fit = free_.lower_bound(size);  // the smallest cached block that is large enough
  if (fit != free_.end() && fit->first <= size + size / 8) {
    void* p = fit->second;
    live_[p] = fit->first;
    free_.erase(fit);
    count_allocation(false, 0);
    return p;
  }
  void* p = fresh_(size);
  if (p == nullptr) {  // the cached blocks may be what is missing
    for (auto& block : free_) release_(block.second);
    free_.clear();
    p = fresh_(size);
  }
  if (p == nullptr) throw std::bad_alloc();
  live_[p] = size;
  count_allocation(true, size);
  return p;
}

bool BlockCache::give(void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(p);
  if (it == live_.end()) return false;
  free_.emplace(it->second, p);
  live_.erase(it);
  return true;
}

void BlockCache::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& block : free_) release_(block.second);
  free_.clear();
}

size_t BlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t total = 0;
  for (auto& block : free_) total += block.first;
  return total;
}

size_t BlockCache::live_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.size();
}

}  // namespace kernels
