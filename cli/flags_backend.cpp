// cli/flags_backend.cpp: the backends (--device, --comm) and the communication watchdog
// (--collective-timeout), with their defaults: cuda and nccl when a GPU is visible, else cpu
// and mpi.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/flags_impl.h"  // defines: RawFlags, one_of, check_at_least; cli/flags.h Options

namespace paralab {

void add_backend_flags(CLI::App& app, Options& o, RawFlags& raw) {
  const char* kRun = "Run, data and backends";
  app.add_option("--device", raw.device,
                 "compute backend; default cuda when a GPU is visible, else cpu")
      ->check(one_of({"cuda", "cpu"}))->group(kRun);
  app.add_option("--comm", raw.comm,
                 "communication backend; default nccl with --device cuda, mpi with cpu; "
                 "nccl needs --device cuda")
      ->check(one_of({"nccl", "mpi"}))->group(kRun);
  app.add_option("--collective-timeout", o.collective_timeout,
                 "seconds a rank waits for one collective or pipeline message before it ends "
                 "the job, naming the group, the operation and the step (a rank died or "
                 "hangs); 0: wait forever")
      ->capture_default_str()->group(kRun);
}

void check_backend(Options& o, const RawFlags& raw, int visible_gpus) {
  // Backends. A plan may describe GPUs this machine does not have.
  if (raw.device.empty())
    o.device = visible_gpus > 0 ? kernels::Device::CUDA : kernels::Device::CPU;
  else
    o.device = raw.device == "cuda" ? kernels::Device::CUDA : kernels::Device::CPU;
  if (o.device == kernels::Device::CUDA && visible_gpus <= 0 && !o.plan)
    fail("--device cuda, but no GPU is visible (use --device cpu)");
  if (raw.comm.empty())
    o.comm = o.device == kernels::Device::CUDA ? Comm::NCCL : Comm::MPI;
  else
    o.comm = raw.comm == "nccl" ? Comm::NCCL : Comm::MPI;
  if (o.comm == Comm::NCCL && o.device != kernels::Device::CUDA)
    fail("--comm nccl needs --device cuda (use --comm mpi on the CPU backend)");
  check_at_least("--collective-timeout", o.collective_timeout, 0);
  check_finite("--collective-timeout", o.collective_timeout);
}

}  // namespace paralab
