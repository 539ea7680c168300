// model/host_adamw.h: AdamW on the host's cores, for CPU offload (parallel/offload.h).
//
// ZeRO-Offload (Ren et al. 2021, §4.2 and §5.1: "CPU-Adam") keeps the fp32 master weights and
// Adam's moments in host memory and runs the update there: it is elementwise and reads and
// writes 28 bytes per parameter (p, g, m, v in; p, m, v out) for ~15 FLOPs, so it is bound by
// memory, and a host's cores on their own DRAM reach a useful rate. Each element's arithmetic
// here is the device kernel's own, kernels/math.h adamw_step (the CUDA kernel and the CPU twin
// call it too), so an offloaded fp32 run updates bit for bit as the run without offload does
// (on the CPU backend; on a GPU as far as nvcc and g++ round the same expression alike), and a
// bf16 or fp16 run rounds its parameter with the same round_to.
//
// The work of a step is a list of runs (kernels::AdamRun: an owned segment cut at the tensors'
// edges, each with its weight decay), the device's own op's list; `threads` threads take equal
// shares of their concatenated elements and each runs the op's CPU twin on its share, so the
// result does not depend on the thread count (each element is updated once, alone). The twin
// is called itself, not through the dispatcher: this is host memory whatever the device, and
// not a device kernel to count or time.
//
// defines: host_adamw, host_adamw_rate
#pragma once
#include <cstdint>
#include <vector>
#include "kernels/ops/loss_optimizer.h"  // AdamRun, AdamStep
#include "parallel/comm.h"                // DType

namespace paralab {

// storage: the runs' gradients' and parameters' type, F32, or BF16 or F16 (the masters fp32).
void host_adamw(const std::vector<kernels::AdamRun>& runs, const kernels::AdamStep& step,
                DType storage, int threads);

// Parameters per second one thread updates (fp32 gradients), timed on `n` elements, the best
// of a few trials: --benchmark's host AdamW rate (the time model's host_adam_params_per_s).
double host_adamw_rate(int64_t n);

}  // namespace paralab
