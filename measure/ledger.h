// measure/ledger.h: the one tagged allocator (notes/design.md, "Memory: one allocator,
// tagged").
//
// Every byte the trainer holds on its device goes through Ledger::allocate with a category;
// the ledger keeps current and peak bytes per category and the peak of the total. The
// memory table prints these "measured" numbers beside plan/'s predictions.
//
// Host memory (CPU offload, parallel/offload.h) is a second column: allocate_host keeps its
// own current and peak bytes per category, apart from the device's. On CUDA with pinned
// set it is page-locked (cudaHostAlloc: the copies over PCIe run by DMA at the link's
// speed, pageable memory is staged through a driver buffer); otherwise, and always on the
// CPU backend (where host and device are one memory), an ordinary zero-filled block.
//
// defines: Category, category_name, Ledger, Buffer (RAII handle to a tagged allocation)
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include "kernels/common.h"

namespace paralab {

enum class Category : int {
  PARAMS = 0,
  GRADS,
  MASTER_PARAMS,
  OPTIMIZER_STATES,
  ACTIVATIONS,
  RECOMPUTE,
  COMM_BUFFERS,
  LOGITS,
  WORKSPACE,
  FP8_OPERANDS,  // the FP8 GEMMs' quantised operands and factors (plan/fp8.h)
  FP8_STATE,     // FP8 scaling state: amax histories, scales, counters (plan/fp8.h)
  COUNT
};
constexpr int kNumCategories = static_cast<int>(Category::COUNT);
const char* category_name(Category c);

class Ledger {
 public:
  static Ledger& instance();

  void* allocate(kernels::Device device, size_t bytes, Category c);
  void release(kernels::Device device, void* p, size_t bytes, Category c);
  // Host memory of a run on `device`: page-locked when pinned and device is CUDA.
  void* allocate_host(kernels::Device device, size_t bytes, Category c, bool pinned);
  void release_host(kernels::Device device, void* p, size_t bytes, Category c, bool pinned);

  size_t current(Category c) const { return current_[static_cast<int>(c)]; }
  size_t peak(Category c) const { return peak_[static_cast<int>(c)]; }
  size_t current_total() const { return current_total_; }
  size_t peak_total() const { return peak_total_; }
  size_t host_current(Category c) const { return host_current_[static_cast<int>(c)]; }
  size_t host_peak(Category c) const { return host_peak_[static_cast<int>(c)]; }
  size_t host_current_total() const { return host_current_total_; }
  size_t host_peak_total() const { return host_peak_total_; }
  // Starts a new peak window (e.g. per step): peaks become the current values.
  void reset_peaks();

 private:
  std::array<size_t, kNumCategories> current_{};
  std::array<size_t, kNumCategories> peak_{};
  size_t current_total_ = 0;
  size_t peak_total_ = 0;
  std::array<size_t, kNumCategories> host_current_{};
  std::array<size_t, kNumCategories> host_peak_{};
  size_t host_current_total_ = 0;
  size_t host_peak_total_ = 0;
};

// An owned, tagged, zero-initialised device (or, allocate_host, host) buffer of `count`
// elements of T.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(kernels::Device device, size_t count, Category c) { allocate(device, count, c); }
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = static_cast<Buffer&&>(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = o.data_; count_ = o.count_; device_ = o.device_; category_ = o.category_;
      host_ = o.host_; pinned_ = o.pinned_;
      o.data_ = nullptr; o.count_ = 0;
    }
    return *this;
  }
  void allocate(kernels::Device device, size_t count, Category c) {
    reset();
    device_ = device; category_ = c; count_ = count; host_ = pinned_ = false;
    data_ = count ? static_cast<T*>(Ledger::instance().allocate(device, count * sizeof(T), c))
                  : nullptr;
  }
  // In host memory, for a run on `device` (the ledger's host column).
  void allocate_host(kernels::Device device, size_t count, Category c, bool pinned) {
    reset();
    device_ = device; category_ = c; count_ = count; host_ = true; pinned_ = pinned;
    data_ = count ? static_cast<T*>(Ledger::instance().allocate_host(device, count * sizeof(T),
                                                                     c, pinned))
                  : nullptr;
  }
  void reset() {
    if (data_ && host_)
      Ledger::instance().release_host(device_, data_, count_ * sizeof(T), category_, pinned_);
    else if (data_)
      Ledger::instance().release(device_, data_, count_ * sizeof(T), category_);
    data_ = nullptr; count_ = 0;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }
  kernels::Device device() const { return device_; }
  Category category() const { return category_; }
  bool on_host() const { return host_; }
  // The Device whose copies and ops reach the data: CPU for a host buffer.
  kernels::Device where() const { return host_ ? kernels::Device::CPU : device_; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
  kernels::Device device_ = kernels::Device::CPU;
  Category category_ = Category::WORKSPACE;
  bool host_ = false, pinned_ = false;
};

}  // namespace paralab
