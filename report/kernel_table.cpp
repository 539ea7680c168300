// report/kernel_table.cpp: the emulated device's kernel table (report/kernel_table.h).
#include "report/kernel_table.h"

#include <algorithm>

#include "plan/kernel_time.h"
#include "report/text.h"

namespace paralab {

namespace {

// "void kernels::cuda::flash_mma::(anonymous namespace)::forward_kernel<64>" ->
// "flash_mma::forward_kernel<64>"
std::string short_name(std::string name) {
  for (const char* noise : {"void ", "kernels::", "cuda::", "(anonymous namespace)::"}) {
    for (size_t at = name.find(noise); at != std::string::npos; at = name.find(noise))
      name.erase(at, std::string(noise).size());
  }
  return name;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

std::string kernel_table(const std::vector<emu::KernelRecord>& records, const HardwareProfile& gpu,
                         int replicas) {
  std::string out = strprintf(
      "kernels on the emulated device, projected on %s (%s; plan/kernel_time.h), each launch "
      "x%d\n",
      gpu.name.c_str(), gpu.file.c_str(), replicas);
  int name_width = 34;  // the longest kernel name, so that no name is cut
  for (const emu::KernelRecord& r : records)
    name_width = std::max(name_width, (int)short_name(r.name).size());
  out += strprintf("%-*s %6s %8s %6s %5s %9s %9s %13s %9s %8s %8s %9s %8s  %s\n", name_width, "kernel",
                   "launch", "blocks", "thr", "regs", "blk/SM", "GFLOP", "wf/req (ideal)",
                   "wf/kFLOP", "sect/req", "DRAM MB", "proj us", "TFLOP/s", "bound");
  double total_s = 0;
  bool registers_unknown = false;
  for (const emu::KernelRecord& r : records) {
    registers_unknown |= !r.library && r.registers < 0;
    const emu::LaunchCounters& c = r.totals;
    const double flops = (double)c.tensor_flops * (r.library ? 1 : replicas);
    double seconds = 0;
    std::string bound, per_sm = "-";
    uint64_t blocks = 0;
    unsigned threads = 0;
    if (r.library) {
      seconds = gpu.gemm_seconds((double)c.tensor_flops / std::max<size_t>(r.launches, 1),
                                 (double)c.global_bytes / std::max<size_t>(r.launches, 1),
                                 r.name.find("bf16") != std::string::npos   ? Precision::BF16
                                 : r.name.find("fp16") != std::string::npos ? Precision::FP16
                                                                            : Precision::FP32) *
                r.launches;
      bound = "cuBLAS (the time model's GEMM curve)";
    } else {
      for (const emu::LaunchRecord& l : r.records) {
        KernelLaunch k;
        k.threads_per_block = l.threads_per_block;
        k.shared_bytes = (double)(l.dynamic_shared + l.static_shared);
        k.registers = r.registers;
        for (const emu::BlockWork& w : l.block_work) {
          k.block_flops.push_back((double)w.tensor_flops);
          k.block_wavefronts.push_back((double)w.shared_wavefronts);
        }
        k.replicas = replicas;
        k.dram_bytes = 32.0 * l.counters.global_unique_sectors;
        const KernelProjection p = project_kernel(k, gpu);
        seconds += p.seconds;
        bound = p.bound;
        const std::string& why = p.occupancy_limit;
        per_sm = strprintf("%d %s", p.blocks_per_sm,
                           why == "registers" ? "regs" : why == "shared memory" ? "smem"
                                                       : why == "threads" ? "thr" : "blks");
        blocks += l.blocks * replicas;
        threads = l.threads_per_block;
      }
    }
    total_s += seconds;
    out += strprintf(
        "%-*s %6zu %8llu %6u %5s %9s %9.3f %6.2f (%4.2f) %9.3f %8.2f %8.2f %9.1f %8.1f  %s\n",
        name_width, short_name(r.name).c_str(), r.launches, (unsigned long long)blocks, threads,
        r.registers >= 0 ? std::to_string(r.registers).c_str() : "?", per_sm.c_str(), flops / 1e9,
        ratio((double)c.shared_wavefronts, (double)c.shared_requests),
        ratio((double)c.shared_ideal_wavefronts, (double)c.shared_requests),
        ratio((double)c.shared_wavefronts * replicas * 1e3, flops),
        ratio((double)c.global_sectors, (double)c.global_requests),
        32.0 * c.global_unique_sectors * (r.library ? 1 : replicas) / 1e6 +
            (r.library ? c.global_bytes / 1e6 : 0),
        seconds * 1e6, ratio(flops, seconds) / 1e12, bound.c_str());
  }
  out += strprintf("total projected %.1f us (a roofline: the busiest resource at its full rate; "
                   "kernels reach a fraction of it)\n",
                   total_s * 1e6);
  if (registers_unknown)
    out += "regs ?: no ptxas report of the kernel beside this binary (kernel_resources.txt, from the "
           "nvcc build); its occupancy then ignores registers\n";
  return out;
}

}  // namespace paralab
