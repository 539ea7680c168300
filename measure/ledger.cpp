// measure/ledger.cpp: see ledger.h.
#include "measure/ledger.h"
#include <algorithm>
#include <cstring>
#include <new>
#include "kernels/ops.h"
#ifndef PARALAB_CPU_ONLY
#include <cuda_runtime_api.h>
#endif

namespace paralab {

const char* category_name(Category c) {
  switch (c) {
    case Category::PARAMS: return "params";
    case Category::GRADS: return "grads";
    case Category::MASTER_PARAMS: return "master_params";
    case Category::OPTIMIZER_STATES: return "optimizer_states";
    case Category::ACTIVATIONS: return "activations";
    case Category::RECOMPUTE: return "recompute";
    case Category::COMM_BUFFERS: return "comm_buffers";
    case Category::LOGITS: return "logits";
    case Category::WORKSPACE: return "workspace";
    case Category::FP8_OPERANDS: return "fp8_operands";
    case Category::FP8_STATE: return "fp8_state";
    default: return "?";
  }
}

Ledger& Ledger::instance() {
  static Ledger ledger;
  return ledger;
}

void* Ledger::allocate(kernels::Device device, size_t bytes, Category c) {
  void* p = kernels::device_malloc(device, bytes);
  int i = static_cast<int>(c);
  current_[i] += bytes;
  peak_[i] = std::max(peak_[i], current_[i]);
  current_total_ += bytes;
  peak_total_ = std::max(peak_total_, current_total_);
  return p;
}

void Ledger::release(kernels::Device device, void* p, size_t bytes, Category c) {
  kernels::device_free(device, p);
  current_[static_cast<int>(c)] -= bytes;
  current_total_ -= bytes;
}

// Page-locked on CUDA (cudaHostAlloc, zero-filled like every ledger buffer); otherwise the
// CPU backend's allocator, which is the host's.
static bool pins(kernels::Device device, bool pinned) {
  return pinned && device == kernels::Device::CUDA && kernels::cuda_compiled();
}

void* Ledger::allocate_host(kernels::Device device, size_t bytes, Category c, bool pinned) {
  void* p = nullptr;
  if (pins(device, pinned)) {
#ifndef PARALAB_CPU_ONLY
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      throw std::bad_alloc();
    }
    std::memset(p, 0, bytes);
#endif
  } else {
    p = kernels::device_malloc(kernels::Device::CPU, bytes);
  }
  const int i = static_cast<int>(c);
  host_current_[i] += bytes;
  host_peak_[i] = std::max(host_peak_[i], host_current_[i]);
  host_current_total_ += bytes;
  host_peak_total_ = std::max(host_peak_total_, host_current_total_);
  return p;
}

void Ledger::release_host(kernels::Device device, void* p, size_t bytes, Category c,
                          bool pinned) {
  if (pins(device, pinned)) {
#ifndef PARALAB_CPU_ONLY
    if (device == kernels::Device::CUDA) kernels::synchronize(device);  // a copy may read p
    cudaFreeHost(p);
#endif
  } else {
    kernels::device_free(kernels::Device::CPU, p);
  }
  host_current_[static_cast<int>(c)] -= bytes;
  host_current_total_ -= bytes;
}

void Ledger::reset_peaks() {
  peak_ = current_;
  peak_total_ = current_total_;
  host_peak_ = host_current_;
  host_peak_total_ = host_current_total_;
}

}  // namespace paralab
