// kernels/device.cpp: what the process asks of its devices (kernels/common.h), and the error
// of a CUDA dispatch in a binary built without CUDA (kernels/dispatch.h).
//
// In a CPU_ONLY build (g++ -DPARALAB_CPU_ONLY, no CUDA toolkit) nothing here touches CUDA:
// there are no GPUs, and asking for one throws no_cuda's message.
//
// defines: device_name, cuda_compiled, cuda_device_count, cuda_select_device, cuda_device_name,
//          cuda_compute_capability, no_cuda, flash_attention_kernel (and cuda_current_stream in
//          the CPU_ONLY build; kernels/cuda/memory_gemm.cu's else)
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/dispatch.h"
#include "kernels/math.h"  // whole_sequence
#ifndef PARALAB_CPU_ONLY
#include <cuda_runtime_api.h>
#include "kernels/cuda/flash_mma.h"  // flash_mma_handles, flash_mma_name
#endif

namespace kernels {

#if defined(PARALAB_EMULATED)
const char* device_name(Device d) { return d == Device::CUDA ? "cuda-emulated" : "cpu"; }
#else
const char* device_name(Device d) { return d == Device::CUDA ? "cuda" : "cpu"; }
#endif

void no_cuda() {
  throw std::runtime_error("--device cuda: this binary was built without CUDA (make CPU_ONLY=1)");
}

#ifndef PARALAB_CPU_ONLY
bool cuda_compiled() { return true; }
// 0 when there is no driver or no GPU; never throws.
int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the error so that it does not surface at a later check
    return 0;
  }
  return n;
}
void cuda_select_device(int local_rank) {
  const int n = cuda_device_count();
  if (n == 0) throw std::runtime_error("--device cuda: no GPU is visible");
  if (cudaSetDevice(local_rank % n) != cudaSuccess)
    throw std::runtime_error("cudaSetDevice(" + std::to_string(local_rank % n) + ") failed");
}
std::string flash_attention_kernel(Device d, bool half, int S, int A, int G, int D,
                                   float dropout_p) {
  if (d != Device::CUDA) return "the CPU twin (kernels/cpu/flash_attention.cpp)";
  if (half && cuda::flash_mma_handles(A, G, D, 1.0f / std::sqrt((float)D), dropout_p,
                                      whole_sequence(S, A, D)))
    return cuda::flash_mma_name();
  return std::string("scalar fp32 tiles (kernels/cuda/flash_attention.cu; the tensor-core ") +
         "kernels take bf16 or fp16 at head dim 64 or 128)";
}
std::string cuda_device_name() {
  int device = 0;
  cudaDeviceProp prop;
  if (cuda_device_count() == 0 || cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "";
  return prop.name;
}
int cuda_compute_capability() {
  int device = 0, major = 0, minor = 0;
  if (cuda_device_count() == 0 || cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return 0;
  return 10 * major + minor;
}
#else
bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_name() { return ""; }
int cuda_compute_capability() { return 0; }
std::string flash_attention_kernel(Device, bool, int, int, int, int, float) {
  return "the CPU twin (kernels/cpu/flash_attention.cpp)";
}
void cuda_select_device(int) { no_cuda(); }
void* cuda_current_stream() { return nullptr; }
#endif

}  // namespace kernels
