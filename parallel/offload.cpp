// parallel/offload.cpp: CPU offload's copies over PCIe, each timed and recorded in CommStats
// as group pcie (parallel/offload.h). A copy blocks until the bytes have landed (kernels'
// memcpy_to_host / memcpy_from_host synchronise the stream), so its time is all exposed.
#include "parallel/offload.h"
#include "kernels/math.h"         // to_float, round_to: host_accumulate's 16-bit sums
#include "kernels/ops.h"          // memcpy_to_host, memcpy_from_host
#include "measure/clock.h"        // now_seconds
#include "measure/comm_stats.h"   // CommStats, CommGroup::PCIE

namespace paralab {

namespace {
template <typename Copy>
void recorded(CommOp op, size_t bytes, Copy copy) {
  if (bytes == 0) return;
  CommStats& stats = CommStats::instance();
  stats.record_call(CommGroup::PCIE, op, bytes, 1);
  const double start = now_seconds();
  copy();
  const double end = now_seconds();
  stats.record_time(CommGroup::PCIE, op, end - start, end - start);
  stats.record_event({CommGroup::PCIE, op, start, end});
}
}  // namespace

void copy_to_host(kernels::Device device, void* host_dst, const void* src, size_t bytes) {
  recorded(CommOp::DEVICE_TO_HOST, bytes,
           [&] { kernels::memcpy_to_host(device, host_dst, src, bytes); });
}

void copy_to_device(kernels::Device device, void* dst, const void* host_src, size_t bytes) {
  recorded(CommOp::HOST_TO_DEVICE, bytes,
           [&] { kernels::memcpy_from_host(device, dst, host_src, bytes); });
}

void host_accumulate(DType storage, void* out, const void* in, int64_t n) {
  with_storage(storage, [&](auto type) {
    using T = decltype(type);
    T* o = static_cast<T*>(out);
    const T* x = static_cast<const T*>(in);
    for (int64_t i = 0; i < n; ++i)
      o[i] = kernels::round_to<T>(kernels::to_float(o[i]) + kernels::to_float(x[i]));
  });
}

}  // namespace paralab
