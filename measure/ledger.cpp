// measure/ledger.cpp: see ledger.h.
#include "measure/ledger.h"
#include <algorithm>
#include "kernels/ops.h"

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

void Ledger::reset_peaks() {
  peak_ = current_;
  peak_total_ = current_total_;
}

}  // namespace paralab
