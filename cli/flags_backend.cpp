// cli/flags_backend.cpp: the backends (--device, --comm), the communication watchdog
// (--collective-timeout) and the kernels' timing (--timing-log-level), with their defaults:
// cuda and nccl when a GPU is visible, else cpu and mpi. The emulated build's CUDA device
// answers to cuda-emulated (kernels/common.h device_name), the main build's to cuda.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/flags_impl.h"  // defines: RawFlags, one_of, check_at_least; cli/flags.h Options

namespace paralab {

void add_backend_flags(CLI::App& app, Options& o, RawFlags& raw) {
  const char* kRun = "Run, data and backends";
  app.add_option("--device", raw.device,
                 "compute backend; default cuda when a GPU is visible, else cpu; cuda-emulated: "
                 "the CUDA code run on the CPU by the emulated device (build/emulated/trainer, "
                 "make emulated), for testing and reading, not speed")
      ->check(one_of({"cuda", "cpu", "cuda-emulated"}))->group(kRun);
  app.add_option("--comm", raw.comm,
                 "communication backend; default nccl with --device cuda, mpi with cpu; "
                 "nccl needs --device cuda")
      ->check(one_of({"nccl", "mpi"}))->group(kRun);
  app.add_option("--collective-timeout", o.collective_timeout,
                 "seconds a rank waits for one collective or pipeline message before it ends "
                 "the job, naming the group, the operation and the step (a rank died or "
                 "hangs); 0: wait forever")
      ->capture_default_str()->group(kRun);
  app.add_option("--timing-log-level", o.timing_log_level,
                 "kernel timing (Megatron-LM's levels): 0 none, so the step carries no timer "
                 "events; 1 each phase's kernels (GEMMs, attention, memory-bound, optimizer) "
                 "timed and printed beside their projection; 2 also each op's; Megatron's "
                 "default is 0")
      ->capture_default_str()->group(kRun);
}

void check_backend(Options& o, const RawFlags& raw, int visible_gpus) {
  // Backends. A plan may describe GPUs this machine does not have. The emulated build's CUDA
  // device answers to its own word and the main build's to "cuda", so a run cannot take one
  // for the other.
  const std::string cuda_word = kernels::device_name(kernels::Device::CUDA);
  if (!raw.device.empty() && raw.device != "cpu" && raw.device != cuda_word)
    fail("--device ", raw.device, ": this binary's CUDA device is --device ", cuda_word,
         cuda_word == "cuda" ? " (the emulated device is build/emulated/trainer: make emulated)"
                             : " (a GPU runs the main build's ./trainer)");
  if (raw.device.empty())
    o.device = visible_gpus > 0 ? kernels::Device::CUDA : kernels::Device::CPU;
  else
    o.device = raw.device == cuda_word ? kernels::Device::CUDA : kernels::Device::CPU;
  if (o.device == kernels::Device::CUDA && visible_gpus <= 0 && !o.plan)
    fail("--device cuda, but no GPU is visible (use --device cpu)");
  if (raw.comm.empty())
    o.comm = o.device == kernels::Device::CUDA ? Comm::NCCL : Comm::MPI;
  else
    o.comm = raw.comm == "nccl" ? Comm::NCCL : Comm::MPI;
  if (o.comm == Comm::NCCL && o.device != kernels::Device::CUDA)
    fail("--comm nccl needs --device ", cuda_word, " (use --comm mpi on the CPU backend)");
  check_at_least("--collective-timeout", o.collective_timeout, 0);
  check_finite("--collective-timeout", o.collective_timeout);
  if (o.timing_log_level < 0 || o.timing_log_level > 2)
    fail("--timing-log-level must be 0, 1 or 2, got ", o.timing_log_level);
}

}  // namespace paralab
