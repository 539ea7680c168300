// report/kernel_table.h: the emulated device's kernel table — every kernel a run launched, what
// the emulator counted of it (kernels/emulator/kernel_counters.h) and its projected time on a
// GPU (plan/kernel_time.h), one row per kernel, the launches summed. What a student reads to
// learn why a kernel is slow: which resource bounds it, how many shared-memory wavefronts each
// tensor-core FLOP costs, how coalesced its global accesses are.
//
//   kernel            the instantiation (flash_mma::forward_kernel<64>), or a library routine
//   blocks, thr/blk   the grid (times the replicas the projection places) and the block
//   regs, blk/SM      registers per thread (ptxas, sm_90) and the blocks an SM holds (limit)
//   GFLOP             tensor-core FLOPs (mma.sync count x 4096)
//   wf/req            shared wavefronts per request (the ideal in parentheses: bank conflicts
//                     are the difference); wf/kFLOP: wavefronts per thousand tensor FLOPs
//   sect/req          32-byte global sectors per request (4 for a coalesced 4-byte access)
//   DRAM MB           distinct sectors x 32 (all replicas)
//   proj us, TFLOP/s  the projection, and the tensor FLOPs over it; bound: what limits it
//
// defines: paralab::kernel_table
#pragma once
#include <string>
#include <vector>

#include "kernels/emulator/kernel_counters.h"
#include "measure/hardware.h"

namespace paralab {

// The table of `records` (kept with emu::record_launches(true): each launch's blocks), each
// launch placed `replicas` times on `gpu`.
std::string kernel_table(const std::vector<emu::KernelRecord>& records, const HardwareProfile& gpu,
                         int replicas);

}  // namespace paralab
