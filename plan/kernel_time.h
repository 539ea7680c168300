// plan/kernel_time.h: one kernel launch's projected time on a GPU, from what the emulated
// device counted of it (kernels/emulator/kernel_counters.h: each block's tensor-core FLOPs and
// shared-memory wavefronts, the launch's distinct DRAM sectors) and the kernel's resources
// (registers and static shared memory from ptxas). The start of a kernel-level "predicted vs
// measured": the table that prints it (report/kernel_table.h) sits beside the GPU's measured
// times in notes/performance.md once a GPU has run the kernels.
//
// The model, a roofline per streaming multiprocessor with the grid's blocks placed on the SMs:
//   occupancy   blocks per SM = the fewest of: the compute capability's block and thread
//               limits, the registers (per warp, in units of 256) and the shared memory
//               (the block's, plus the 1 KiB the driver reserves per block) an SM holds
//               (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
//               and the Occupancy Calculator's rules)
//   a block     t_b = max(F_b / (mma.sync rate / SMs), W_b / clock): its tensor FLOPs at an
//               SM's share of mma_sync_tflops, its shared-memory wavefronts at one per clock
//               (32 banks x 4 bytes a clock: the guide's "Shared Memory")
//   the grid    blocks dispatched in grid order, each to the SM that frees first: the makespan
//               is the longest SM's sum (waves and unequal blocks, the dK/dV grid's tail,
//               count; the resident blocks of an SM share its throughput)
//   DRAM        the distinct 32-byte sectors the launch touched / HBM bandwidth (each byte
//               from DRAM once: an L2 large enough for the launch's working set)
//   launch      max(makespan, DRAM) + launch_overhead_us
// Not modelled: latency an occupancy too low cannot hide, instruction issue (the exp2 and the
// dropout hash), L2 bandwidth. The bound named is the largest term.
//
// defines: paralab::{KernelLaunch, KernelProjection, occupancy, project_kernel}
#pragma once
#include <string>
#include <vector>

#include "measure/hardware.h"

namespace paralab {

// One launch as the emulated device counted it.
struct KernelLaunch {
  unsigned threads_per_block = 0;
  double shared_bytes = 0;  // dynamic + static per block
  int registers = -1;       // per thread (ptxas, sm_90); -1: unknown
  // Each block's tensor-core FLOPs and shared wavefronts, in grid order; replicas: how many
  // copies of this grid the projection places (an emulated launch of one head standing for
  // heads x batch identical grids), each block repeated in place.
  std::vector<double> block_flops, block_wavefronts;
  int replicas = 1;
  double dram_bytes = 0;    // distinct sectors x 32, for one replica
};

struct KernelProjection {
  int blocks_per_sm = 0;        // 0: the profile lacks the SM figures
  std::string occupancy_limit;  // "registers", "shared memory", "threads", "blocks"
  double tensor_s = 0, shared_s = 0, dram_s = 0;  // each resource alone, the whole GPU busy
  double makespan_s = 0;        // the blocks placed on the SMs
  double seconds = 0;           // max(makespan, DRAM) + launch
  std::string bound;            // "tensor cores", "shared memory", "DRAM", "tail" (makespan
                                // above both totals: waves or unequal blocks)
};

// Blocks of a kernel one SM holds at once, and what limits it.
int occupancy(const KernelLaunch& k, const HardwareProfile& gpu, std::string* limit);
// The launch's projected time; throws when the profile has no SM figures (sm_count 0).
KernelProjection project_kernel(const KernelLaunch& k, const HardwareProfile& gpu);

}  // namespace paralab
