// parallel/offload.h: CPU offload (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity's
// offload_param, Rajbhandari et al. 2021), the arithmetic of where a rank's model states
// live. Pure: parallel/data_parallel.cpp allocates and copies by it, plan/ predicts by it.
//
// The idea: the optimizer's states are 12 of the 16 bytes a parameter costs (fp32 master 4,
// Adam m 4, v 4; ZeRO's K = 12) and its update is elementwise, so they can live in host
// memory, which is large and cheap, and the update can run on the host's cores. What crosses
// PCIe per step is what the update reads and writes that the device also needs: the summed
// gradient down, the updated parameter up.
//
// Which elements. The rank's optimizer state is a vector of N elements (N = Ψ at ZeRO-0, its
// shard S of padded bucket slices at ZeRO >= 1; data_parallel.h). With --optimizer-offload-
// fraction f the first H = floor(f N) of them live on the host (Megatron's
// --optimizer-offload-fraction, which splits the parameters by count the same way), the rest
// on the device. With experts apart each vector (dense, experts) is split on its own.
// On the host, per offloaded element: its gradient (storage type, e bytes), its parameter
// (e bytes: with fp32 the master copy itself; with --bf16 the rounding AdamW writes), the
// fp32 master with --bf16 (4), Adam m and v (8): 2e + 4 [bf16] + 8 = 16 bytes either way.
//
// What moves per step (each bucket j's state range R_j = [begin_j, end_j): at ZeRO-0 its
// flat elements, at ZeRO >= 1 its slice [shard_offset_j, + slice_j), padding included so
// every rank moves the same bytes; the host part R_j ∩ [0, H)):
//   device -> host  the summed gradient of R_j ∩ [0, H), once the step's reduction of bucket
//                   j is complete (its all-reduce at ZeRO-0, its reduce-scatter at 1-3): one
//                   call per bucket with a host part, e bytes per element
//   host -> device  after the update, the parameter of R_j ∩ [0, H), before bucket j's
//                   all-gather (ZeRO 1-2): one call per such bucket, e bytes per element;
//                   with offload_params (ZeRO-3) none: the host shard IS the parameter, and
//                   instead every gather of a unit copies the rank's slice up (slice e bytes)
//                   into the gathered buffer, which the all-gather then completes in place.
// So per step, Ψ_h = the offloaded elements: 2 e Ψ_h bytes over PCIe without offload_params;
// with it e S down plus e S per gather pass (twice a microbatch: forward, backward) up.
//
// Overlap, where DeepSpeed overlaps: a bucket's copy down runs as soon as its reduction is
// complete, beside the next bucket's reduction (in flight on the communicator, or posted
// right before the copy); a bucket's copy up right before its all-gather, beside the
// previous bucket's. The copies themselves block the host (kernels' memcpy_to_host and
// memcpy_from_host); each is recorded in CommStats as group pcie, its whole duration
// exposed, so what hides is the collectives' time, which shows as less exposed dp time.
//
// defines: offloaded_elements, host_count, OffloadCopy, offload_copies, copy_to_host,
//          copy_to_device
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>
#include "kernels/common.h"  // Device
#include "parallel/buckets.h"

namespace paralab {

// H = floor(f N): the rank's optimizer-state elements on the host (0 <= H <= N).
inline int64_t offloaded_elements(int64_t state_numel, double fraction) {
  if (fraction <= 0 || state_numel <= 0) return 0;
  const int64_t h = (int64_t)std::floor(fraction * (double)state_numel);
  return std::min(state_numel, std::max<int64_t>(0, h));
}

// Of `count` state elements from state index `begin`, how many lie below H (on the host).
inline int64_t host_count(int64_t begin, int64_t count, int64_t H) {
  return std::max<int64_t>(0, std::min(count, H - begin));
}

// One copy of a step: bucket j's host part, count state elements from state_begin.
struct OffloadCopy {
  int bucket = 0;
  int64_t state_begin = 0, count = 0;
};

// The step's copies, one per bucket with a host part, in reduction order (data_parallel's
// order of completion). zero_stage picks the state range (flat at 0, the slice at 1-3).
inline std::vector<OffloadCopy> offload_copies(const BucketLayout& l, int zero_stage, int64_t H) {
  std::vector<OffloadCopy> out;
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    const int64_t begin = zero_stage == 0 ? b.begin : b.shard_offset;
    const int64_t size = zero_stage == 0 ? b.numel() : b.slice;
    const int64_t n = host_count(begin, size, H);
    if (n > 0) out.push_back({(int)j, begin, n});
  }
  return out;
}

// ---- the copies (parallel/offload.cpp) -----------------------------------------------------
// One copy over PCIe between the run's device and host memory, recorded in CommStats as group
// pcie (device-to-host or host-to-device: one call, `bytes` of payload and bus, its time all
// exposed). On the CPU backend one memcpy, recorded alike. Nothing for 0 bytes.
void copy_to_host(kernels::Device device, void* host_dst, const void* src, size_t bytes);
void copy_to_device(kernels::Device device, void* dst, const void* host_src, size_t bytes);

}  // namespace paralab
