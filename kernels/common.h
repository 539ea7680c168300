// kernels/common.h: what every kernel file needs, on both backends, and what the process
// asks of its devices (defined in kernels/device.cpp; cuda_current_stream in
// kernels/cuda/memory_gemm.cu).
//
// HD marks a function the CUDA kernel and its CPU twin share, so that the CPU tests
// exercise the very arithmetic the GPU runs. Under g++ (CPU_ONLY build) it is empty.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define HD __host__ __device__ inline
#else
#define HD inline
#endif

namespace kernels {

// bfloat16 storage: the upper 16 bits of an IEEE-754 float (sign, 8-bit exponent, 7-bit
// mantissa), so it keeps fp32's range with ~3 significant digits. paralab stores --bf16
// parameters, gradients and activations in it and computes in fp32: every op widens its
// inputs (exact), computes, and rounds its outputs to nearest even (kernels/math.h).
struct bf16 {
  uint16_t bits;
};
// IEEE-754 binary16 (fp16, "half") storage: sign, 5-bit exponent (bias 15), 10-bit mantissa,
// so ~3.3 significant digits but a range of only 6.0e-8 (smallest subnormal) to 65504: the
// gradients of --fp16 underflow without a loss scale (model/loss_scaler.h). Stored like bf16
// and computed in fp32 the same way; the encoding is kernels/float16.h.
struct fp16 {
  uint16_t bits;
};

// Where a buffer lives and which twin runs an op on it.
enum class Device { CPU, CUDA };

// The --device word of a device: Device::CUDA is a GPU in the main build and the emulated GPU
// in the emulated one (make emulated; kernels/emulator/README.md), which says so wherever the
// run names its device. Defined in kernels/device.cpp, not inline here: the layers above
// kernels/ then compile the same in both builds, and the emulated one links the main build's
// objects of them (Makefile, SHARED_HOST_SRCS).
const char* device_name(Device d);

// True when this binary was built with the CUDA toolkit (nvcc build).
bool cuda_compiled();
// Number of visible GPUs (0 in the CPU_ONLY build or without a driver).
int cuda_device_count();
// Binds this process to GPU (local_rank mod visible GPUs); before any CUDA allocation.
void cuda_select_device(int local_rank);
// Name of the current GPU ("NVIDIA H200"), "" without one.
std::string cuda_device_name();
// Compute capability of the current GPU as 10 major + minor (90 for an H100, 75 for a T4), 0
// without one.
int cuda_compute_capability();
// The flash attention kernels a run on device d takes for its shape (sequence S, A query heads,
// G groups, head dim D; half: 16-bit storage): on CUDA the tensor-core ones
// (kernels/cuda/flash_mma.h) or the scalar fallback; the run's header names it
// (kernels/device.cpp).
std::string flash_attention_kernel(Device d, bool half, int S, int A, int G, int D,
                                   float dropout_p);
// The cudaStream_t every op is queued on, as void* (NCCL enqueues on it to stay ordered with
// the compute); created on the current device at first use. nullptr in the CPU_ONLY build.
void* cuda_current_stream();

}  // namespace kernels
