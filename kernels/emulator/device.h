// kernels/emulator/device.h: the GPU the emulated device plays, and the runtime's error state
// (kernels/emulator/runtime.cpp).
//
// The properties are those of a named GPU, H100 SXM by default; PARALAB_EMULATED_GPU=h200,
// a100, v100 or t4 picks another (sources beside each in runtime.cpp): v100 and t4 (compute
// capability 7.0 and 7.5) let a test see the trainer refuse bf16 and FP8 there, and run fp32 and
// fp16 on the kernels those GPUs take (the flash attention's scalar tiles: no mma.sync). They are what cudaGetDeviceProperties
// and cudaDeviceGetAttribute return, what the launch checks hold a kernel to (threads per block,
// shared memory per block), and the name paralab's hardware profiles match (measure/hardware.h):
// an emulated H100 run projects onto configs/hardware/h100-sxm.toml.
//
// Errors as the runtime keeps them: a launch error (bad configuration, too much shared memory)
// is returned once by cudaGetLastError, which clears it; a fault while a kernel ran (memcheck,
// racecheck, synccheck) is sticky: every later call returns it, as after a GPU fault, and the
// process must start again. The message is the emulator's report.
//
// defines: emu::{Device, device, set_launch_error, set_sticky_error, sticky_error}
#pragma once
#include <cstddef>
#include <string>

#include "kernels/emulator/include/cuda_runtime.h"

namespace emu {

struct Device {
  const char* key;   // PARALAB_EMULATED_GPU's value
  const char* name;  // the CUDA device name
  int major, minor;
  int sm_count;
  size_t memory_bytes;
  int shared_per_block, shared_per_block_optin, shared_per_sm;
  int registers_per_sm, max_threads_per_block, max_threads_per_sm, max_blocks_per_sm;
  int clock_khz;
  int l2_bytes;
  int memory_bus_bits;
};
const Device& device();

// Records a launch error (cudaGetLastError returns it once) and returns it.
cudaError_t set_launch_error(cudaError_t error, const std::string& message);
// Records a fault: every later call returns it.
void set_sticky_error(cudaError_t error, const std::string& message);
cudaError_t sticky_error();

}  // namespace emu
