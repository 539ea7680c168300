// plan/kernel_time.cpp: a launch's projected time from its counters (plan/kernel_time.h says
// the model and its sources).
#include "plan/kernel_time.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <stdexcept>
#include <vector>

namespace paralab {

namespace {

// Per-SM limits by compute capability (CUDA C++ Programming Guide, "Technical Specifications
// per Compute Capability"): resident blocks, resident threads, 32-bit registers, shared memory
// (bytes, the SM's whole carve-out), and what the driver reserves of it per block (1 KiB from
// 8.0 on, none before).
struct SmLimits {
  int blocks, threads, registers;
  double shared_bytes, reserved_per_block;
};
SmLimits limits_of(double cc) {
  if (cc >= 9.0) return SmLimits{32, 2048, 65536, 228.0 * 1024, 1024};
  if (cc >= 8.0 && cc < 8.5) return SmLimits{32, 2048, 65536, 164.0 * 1024, 1024};
  if (cc >= 8.5) return SmLimits{16, 1536, 65536, 100.0 * 1024, 1024};  // 8.6, 8.9
  if (cc >= 7.5) return SmLimits{16, 1024, 65536, 64.0 * 1024, 0};      // 7.5 (T4)
  return SmLimits{32, 2048, 65536, 96.0 * 1024, 0};                     // 7.0 (V100)
}
constexpr int kRegisterUnit = 256;        // registers are allocated per warp in these units

}  // namespace

int occupancy(const KernelLaunch& k, const HardwareProfile& gpu, std::string* limit) {
  const SmLimits sm = limits_of(gpu.compute_capability);
  int best = sm.blocks;
  *limit = "blocks";
  auto take = [&](int n, const char* why) {
    if (n < best) {
      best = n;
      *limit = why;
    }
  };
  const int warps = (int)(k.threads_per_block + 31) / 32;
  take(sm.threads / std::max(1, warps * 32), "threads");
  if (k.registers > 0) {
    const int per_warp = (k.registers * 32 + kRegisterUnit - 1) / kRegisterUnit * kRegisterUnit;
    take(sm.registers / std::max(1, per_warp * warps), "registers");
  }
  take((int)(sm.shared_bytes / (k.shared_bytes + sm.reserved_per_block)), "shared memory");
  return std::max(best, 0);
}

KernelProjection project_kernel(const KernelLaunch& k, const HardwareProfile& gpu) {
  if (gpu.sm_count <= 0 || gpu.sm_clock_ghz <= 0 || gpu.mma_sync_tflops <= 0)
    throw std::runtime_error("hardware profile '" + gpu.name +
                             "' has no sm_count, sm_clock_ghz or mma_sync_tflops: no kernel projection");
  KernelProjection p;
  p.blocks_per_sm = occupancy(k, gpu, &p.occupancy_limit);
  const int sms = (int)gpu.sm_count;
  const double tensor_rate = gpu.mma_sync_tflops * 1e12 / sms;  // FLOP/s of one SM
  const double wavefront_rate = gpu.sm_clock_ghz * 1e9;         // one wavefront per clock
  double flops = 0, wavefronts = 0;
  for (double f : k.block_flops) flops += f;
  for (double w : k.block_wavefronts) wavefronts += w;
  flops *= k.replicas;
  wavefronts *= k.replicas;
  p.tensor_s = flops / (tensor_rate * sms);
  p.shared_s = wavefronts / (wavefront_rate * sms);
  p.dram_s = gpu.memory_bandwidth_gbs > 0 ? k.dram_bytes * k.replicas / (gpu.memory_bandwidth_gbs * 1e9) : 0;
  // The makespan: each block to the SM that frees first, in dispatch order.
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int s = 0; s < sms; s++) free_at.push(0.0);
  double makespan = 0;
  for (size_t b = 0; b < k.block_flops.size(); b++)
    for (int r = 0; r < k.replicas; r++) {
      const double t = std::max(k.block_flops[b] / tensor_rate, k.block_wavefronts[b] / wavefront_rate);
      const double done = free_at.top() + t;
      free_at.pop();
      free_at.push(done);
      makespan = std::max(makespan, done);
    }
  p.makespan_s = makespan;
  const double body = std::max(makespan, p.dram_s);
  p.seconds = body + gpu.launch_overhead_us * 1e-6;
  if (p.dram_s >= makespan) p.bound = "DRAM";
  else if (makespan > 1.05 * std::max(p.tensor_s, p.shared_s)) p.bound = "tail";
  else p.bound = p.tensor_s >= p.shared_s ? "tensor cores" : "shared memory";
  return p;
}

}  // namespace paralab
