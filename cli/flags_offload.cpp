// cli/flags_offload.cpp: CPU offload's flags (parallel/offload.h) with the ecosystem's names:
// Megatron-LM's --optimizer-cpu-offload and --optimizer-offload-fraction, DeepSpeed ZeRO-3's
// offload_param as --offload-params, and pin_memory as --offload-pin-memory; their checks.
#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

#include "cli/flags_impl.h"  // defines: add_switch, fail; cli/flags.h Options

namespace paralab {

void add_offload_flags(CLI::App& app, Options& o) {
  const char* kParallel = "Parallelism";
  OffloadConfig& f = o.parallel.offload;
  add_switch(app, "--optimizer-cpu-offload", f.optimizer,
             "CPU offload (ZeRO-Offload, Megatron's flag): the fp32 master weights and Adam "
             "moments of --optimizer-offload-fraction of the rank's parameters live in host "
             "memory and AdamW updates them on the host; their gradients go down and their "
             "updated parameters up over PCIe every step (the comm table's pcie rows)")
      ->group(kParallel);
  app.add_option("--optimizer-offload-fraction", f.fraction,
                 "with --optimizer-cpu-offload: the share, in [0, 1], of the rank's optimizer "
                 "states (the first floor(f N) of its N elements) kept on the host")
      ->capture_default_str()->group(kParallel);
  add_switch(app, "--offload-params", f.params,
             "ZeRO-3's offload_param: the rank's parameter shard lives in host memory, each "
             "unit's all-gather starts from a copy of its slice up; needs --zero-stage 3 and "
             "puts the whole optimizer on the host too")
      ->group(kParallel);
  add_switch(app, "--offload-pin-memory,!--no-offload-pin-memory", f.pin_memory,
             "offload's host buffers page-locked (cudaHostAlloc) so the PCIe copies run by "
             "DMA at the link's speed; --no-offload-pin-memory: pageable (staged by the "
             "driver); nothing changes on the CPU backend")
      ->group(kParallel);
}

void check_offload_flags(Options& o) {
  OffloadConfig& f = o.parallel.offload;
  if (!std::isfinite(f.fraction) || f.fraction < 0 || f.fraction > 1)
    fail("--optimizer-offload-fraction must be in [0, 1], got ", f.fraction);
  if (f.params && o.parallel.zero_stage != 3)
    fail("--offload-params needs --zero-stage 3 (the parameter shard it moves to the host), "
         "got --zero-stage ", o.parallel.zero_stage);
  if (f.params && f.optimizer && f.fraction != 1)
    fail("--offload-params keeps the whole optimizer on the host (the shard it updates lives "
         "there): --optimizer-offload-fraction must be 1, got ", f.fraction);
  if (f.params) f.optimizer = true;
  if (!f.optimizer && f.fraction != 1)
    o.warnings.push_back("--optimizer-offload-fraction " + std::to_string(f.fraction) +
                         " does nothing without --optimizer-cpu-offload");
}

}  // namespace paralab
