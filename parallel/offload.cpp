// parallel/offload.cpp: CPU offload's copies over PCIe, each timed and recorded in CommStats
// as group pcie (parallel/offload.h). A copy blocks until the bytes have landed (kernels'
// memcpy_to_host / memcpy_from_host synchronise the stream), so its time is all exposed.
#include "parallel/offload.h"
#include "kernels/math.h"         // to_bf16, to_float: host_accumulate's bf16
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

void host_accumulate(bool bf16, void* out, const void* in, int64_t n) {
  if (!bf16) {
    float* o = static_cast<float*>(out);
    const float* x = static_cast<const float*>(in);
    for (int64_t i = 0; i < n; ++i) o[i] += x[i];
    return;
  }
  kernels::bf16* o = static_cast<kernels::bf16*>(out);
  const kernels::bf16* x = static_cast<const kernels::bf16*>(in);
  for (int64_t i = 0; i < n; ++i)
    o[i] = kernels::to_bf16(kernels::to_float(o[i]) + kernels::to_float(x[i]));
}

}  // namespace paralab
