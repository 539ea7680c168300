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
// shard S of padded bucket slices at ZeRO >= 1; data_parallel.h), bucket j holding the state
// range R_j (at ZeRO-0 its flat elements, at ZeRO >= 1 its slice [shard_offset_j, + slice_j),
// padding included, so every rank moves the same bytes). With --optimizer-offload-fraction f
// the buckets whose ranges end within the first floor(f N) elements live on the host: the
// first H elements, H rounded down to a bucket boundary (Megatron's --optimizer-offload-
// fraction rounds to whole parameters the same way; a bucket is this trainer's unit of
// completion, so a bucket is on one side only). With experts apart each vector (dense,
// experts) is split on its own. On the host, per offloaded element: its summed gradient
// (storage type, e bytes), its parameter (e bytes: with fp32 the master copy itself; with
// --bf16 the rounding AdamW writes), the fp32 master with --bf16 (4), Adam m and v (8):
// 2e + 4 [bf16] + 8 = 16 bytes either way. At ZeRO-2/3 the device keeps no gradient of a
// host bucket (ZeRO-Offload's "gradients to CPU"): each reduce-scatter's slice lands in a host
// buffer of the largest host slice and is added to the host's sum there.
//
// What moves per step, a host bucket j:
//   device -> host  its summed gradient: at ZeRO 0-1 once, R_j, after the step's reduction
//                   (all-reduce, reduce-scatter) is complete; at ZeRO 2-3 its slice after
//                   every reduce-scatter (once per microbatch): e bytes per element
//   host -> device  after the update its parameter R_j, before bucket j's all-gather (ZeRO
//                   1-2): one call, e bytes per element; with offload_params (ZeRO-3) none:
//                   the host shard IS the parameter, and instead every gather of a unit copies
//                   the rank's slice up (slice x e bytes) into the gathered buffer, which the
//                   all-gather then completes in place.
// So per step, Ψ_h offloaded elements and k microbatches: 2 e Ψ_h bytes over PCIe at ZeRO
// 0-1, (k + 1) e Ψ_h at ZeRO-2/3; with offload_params e S k down plus e S per gather pass
// (twice a microbatch: forward, backward) up.
//
// Overlap, where DeepSpeed overlaps: at ZeRO 0-1 a bucket's copy down runs as soon as its
// reduction is complete, beside the next bucket's reduction (posted right before the copy,
// or in flight since backward with --overlap-grad-reduce); a bucket's copy up right before
// its all-gather, beside the previous bucket's. The copies themselves block the host
// (kernels' memcpy_to_host and memcpy_from_host, on the compute stream); each is recorded in
// CommStats as group pcie, its whole duration exposed, so what hides is the collectives'
// time, which shows as less exposed dp time. At ZeRO 2-3 the copy follows each reduce-
// scatter's completion, blocking (DeepSpeed's copies on their own stream, behind backward's
// compute, are not built).
//
// defines: host_buckets_elements, OffloadCopy, offload_copies, state_range, copy_to_host,
//          copy_to_device, host_accumulate
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>
#include "kernels/common.h"  // Device
#include "parallel/buckets.h"
#include "parallel/comm.h"     // DType, with_storage

namespace paralab {

// Bucket j's state range [begin, begin + size): its flat elements at ZeRO-0, its slice at 1-3.
inline void state_range(const BucketLayout& l, int zero_stage, int j, int64_t* begin,
                        int64_t* size) {
  const Bucket& b = l.buckets[j];
  *begin = zero_stage == 0 ? b.begin : b.shard_offset;
  *size = zero_stage == 0 ? b.numel() : b.slice;
}

// H: the state elements on the host, the largest bucket boundary (in state order) at or
// below floor(f N); 0 <= H <= N.
inline int64_t host_buckets_elements(const BucketLayout& l, int zero_stage, double fraction) {
  const int64_t n = zero_stage == 0 ? l.total : l.shard_numel;
  if (fraction <= 0 || n <= 0) return 0;
  const int64_t limit = std::min(n, (int64_t)std::floor(fraction * (double)n));
  int64_t H = 0;
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    int64_t begin, size;
    state_range(l, zero_stage, (int)j, &begin, &size);
    if (begin + size <= limit) H = std::max(H, begin + size);
  }
  // the ranges tile [0, N) in state order: a boundary at or below the limit covers all below
  return H;
}

// One host bucket: its index and state range.
struct OffloadCopy {
  int bucket = 0;
  int64_t state_begin = 0, count = 0;
};

// The host buckets (state range within [0, H)), in reduction order.
inline std::vector<OffloadCopy> offload_copies(const BucketLayout& l, int zero_stage, int64_t H) {
  std::vector<OffloadCopy> out;
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    int64_t begin, size;
    state_range(l, zero_stage, (int)j, &begin, &size);
    if (size > 0 && begin + size <= H) out.push_back({(int)j, begin, size});
  }
  return out;
}

// ---- the copies (parallel/offload.cpp) -----------------------------------------------------
// One copy over PCIe between the run's device and host memory, recorded in CommStats as group
// pcie (device-to-host or host-to-device: one call, `bytes` of payload and bus, its time all
// exposed). On the CPU backend one memcpy, recorded alike. Nothing for 0 bytes.
void copy_to_host(kernels::Device device, void* host_dst, const void* src, size_t bytes);
void copy_to_device(kernels::Device device, void* dst, const void* host_src, size_t bytes);
// out += in over n host elements of the storage type (fp32, or bf16 and fp16 widened, added in
// fp32, rounded): the device's accumulate (kernels/ops.h) as a host loop, ZeRO-2/3's sum of a
// host bucket's slices.
void host_accumulate(DType storage, void* out, const void* in, int64_t n);

}  // namespace paralab
