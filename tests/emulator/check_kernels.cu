// tests/emulator/check_kernels.cu: one small kernel per defect the emulated device must report,
// each beside its correct twin, which must run clean (tests/emulator/test_checks.cpp). The
// defects are the ones compute-sanitizer's tools report (racecheck, memcheck, synccheck) and the
// launch errors a GPU returns.
#include <stdexcept>

#include "kernels/cuda/flash_mma.cuh"  // the tensor-core kernels' ldmatrix and cp.async
#include "tests/emulator/test_kernels.h"

namespace emulator_test {

namespace {

// ---- racecheck ---------------------------------------------------------------------------------
// Each thread writes its slot, then reads its neighbour's: the barrier between them is the point.
__global__ void neighbour_kernel(float* out, bool barrier) {
  __shared__ float s[128];
  const int t = threadIdx.x;
  s[t] = (float)t;
  if (barrier) __syncthreads();
  out[t] = s[(t + 1) % 128];
}
// Each thread reads its neighbour's slot, then writes its own: write-after-read.
__global__ void read_then_write_kernel(float* out, bool barrier) {
  __shared__ float s[128];
  const int t = threadIdx.x;
  s[t] = 1.0f;
  __syncthreads();
  out[t] = s[(t + 1) % 128];
  if (barrier) __syncthreads();
  s[t] = 2.0f;
}
// Within one warp: lanes exchange through shared memory, ordered by __syncwarp or not at all.
__global__ void warp_exchange_kernel(float* out, bool syncwarp) {
  __shared__ float s[32];
  const int lane = threadIdx.x;
  s[lane] = (float)lane;
  if (syncwarp) __syncwarp();
  out[lane] = s[lane ^ 1];
}
// Two bf16 halves of one word written by two threads: separate bytes, no race.
__global__ void halves_kernel(kernels::bf16* out) {
  __shared__ kernels::bf16 s[64];
  const int t = threadIdx.x;
  s[t] = kernels::bf16{(uint16_t)t};
  __syncthreads();
  out[t] = s[63 - t];
}

// ---- synccheck ----------------------------------------------------------------------------------
// Warp 0 waits at one __syncthreads, warp 1 at another (in a different order with its store,
// so that no compiler can merge the two calls into one).
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
    out[threadIdx.x] = 1.0f;
  } else {
    out[threadIdx.x] = 2.0f;
    __syncthreads();
  }
}
// Half of warp 0 waits at a full-warp shuffle, the other half and the other warps at a barrier.
__global__ void stuck_kernel(float* out) {
  float v = (float)threadIdx.x;
  if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  __syncthreads();
  out[threadIdx.x] = v;
}
// Lane 31 has ended before the others' full-mask shuffle.
__global__ void missing_lane_kernel(float* out) {
  if (threadIdx.x == 31) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
}

// ---- memcheck ------------------------------------------------------------------------------------
__global__ void read_past_end_kernel(float* out, const float* in, int n) {
  const int i = threadIdx.x;
  out[i] = in[i + n - 32 + 1];  // the last thread reads in[n]
}
__global__ void shared_past_end_kernel(float* out, int n) {
  extern __shared__ float dyn[];
  const int i = threadIdx.x;
  dyn[i] = 1.0f;
  __syncthreads();
  out[i] = dyn[(i + n - 32 + 1) % (n + 1)];  // thread 31 reads dyn[n]
}
__global__ void misaligned_vector_kernel(float* out, const float* in) {
  const float4 v = *reinterpret_cast<const float4*>(in + 1 + 4 * threadIdx.x);
  out[threadIdx.x] = v.x;
}
__global__ void host_pointer_kernel(float* out, const float* in) { out[threadIdx.x] = in[threadIdx.x]; }
// A warp's ldmatrix with one lane's row 8 bytes off its 16-byte boundary.
__global__ void ldmatrix_misaligned_kernel(uint32_t* out) {
  __shared__ __align__(16) kernels::bf16 s[16 * 24];
  for (int i = threadIdx.x; i < 16 * 24; i += 32) s[i] = kernels::bf16{1};
  __syncwarp();
  uint32_t r[4];
  const kernels::bf16* row = s + (threadIdx.x % 16) * 24 + (threadIdx.x == 5 ? 4 : 0);
  kernels::cuda::flash_mma::ldsm_x4(r, row);
  out[threadIdx.x] = r[0];
}
__global__ void cp_async_misaligned_kernel(kernels::bf16* out, const kernels::bf16* in) {
  __shared__ __align__(16) kernels::bf16 s[32 * 8];
  kernels::cuda::flash_mma::cp_async_16(s + 8 * threadIdx.x, in + 8 * threadIdx.x + 1, true);
  kernels::cuda::flash_mma::cp_async_commit();
  kernels::cuda::flash_mma::cp_async_wait<0>();
  out[threadIdx.x] = s[8 * threadIdx.x];
}

// ---- launch errors ---------------------------------------------------------------------------------
__global__ void big_shared_kernel(float* out) {
  extern __shared__ float dyn[];
  dyn[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = dyn[(threadIdx.x + 1) % 32];
}
__global__ void other_kernel(float* out) { out[threadIdx.x] = 0.0f; }

float* device_floats(size_t n) {
  float* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
  CUDA_CHECK(cudaMemset(p, 0, n * sizeof(float)));
  return p;
}

}  // namespace

const Scenario kScenarios[] = {
    {"race: neighbour read without a barrier", true},
    {"race: neighbour read after a barrier", false},
    {"race: write after another thread's read", true},
    {"race: write after a barrier", false},
    {"race: warp exchange without __syncwarp", true},
    {"race: warp exchange with __syncwarp", false},
    {"race: bf16 halves of one word", false},
    {"sync: divergent __syncthreads", true},
    {"sync: a barrier some threads never reach", true},
    {"sync: a shuffle naming an ended lane", true},
    {"mem: global read past the end", true},
    {"mem: shared read past the dynamic bytes", true},
    {"mem: misaligned float4 load", true},
    {"mem: a host pointer in a kernel", true},
    {"mem: ldmatrix row not 16-byte aligned", true},
    {"mem: cp.async source not 16-byte aligned", true},
    {"launch: 64 KiB of dynamic shared memory, no attribute", true},
    {"launch: 64 KiB with the kernel's attribute", false},
    {"launch: 64 KiB with another kernel's attribute", true},
    {"launch: 2048 threads per block", true},
};
const int kScenarioCount = sizeof(kScenarios) / sizeof(kScenarios[0]);

Outcome run_scenario(const std::string& name) {
  float* out = device_floats(1024);
  float* in = device_floats(64);
  const std::string n = name;
  if (n == "race: neighbour read without a barrier") neighbour_kernel<<<1, 128>>>(out, false);
  else if (n == "race: neighbour read after a barrier") neighbour_kernel<<<1, 128>>>(out, true);
  else if (n == "race: write after another thread's read") read_then_write_kernel<<<1, 128>>>(out, false);
  else if (n == "race: write after a barrier") read_then_write_kernel<<<1, 128>>>(out, true);
  else if (n == "race: warp exchange without __syncwarp") warp_exchange_kernel<<<1, 32>>>(out, false);
  else if (n == "race: warp exchange with __syncwarp") warp_exchange_kernel<<<1, 32>>>(out, true);
  else if (n == "race: bf16 halves of one word")
    halves_kernel<<<1, 64>>>(reinterpret_cast<kernels::bf16*>(out));
  else if (n == "sync: divergent __syncthreads") divergent_barrier_kernel<<<1, 64>>>(out);
  else if (n == "sync: a barrier some threads never reach") stuck_kernel<<<1, 64>>>(out);
  else if (n == "sync: a shuffle naming an ended lane") missing_lane_kernel<<<1, 32>>>(out);
  else if (n == "mem: global read past the end") read_past_end_kernel<<<1, 32>>>(out, in, 64);
  else if (n == "mem: shared read past the dynamic bytes")
    shared_past_end_kernel<<<1, 32, 40 * sizeof(float)>>>(out, 40);
  else if (n == "mem: misaligned float4 load") misaligned_vector_kernel<<<1, 8>>>(out, in);
  else if (n == "mem: a host pointer in a kernel") {
    static float host[32];
    host_pointer_kernel<<<1, 32>>>(out, host);
  } else if (n == "mem: ldmatrix row not 16-byte aligned")
    ldmatrix_misaligned_kernel<<<1, 32>>>(reinterpret_cast<uint32_t*>(out));
  else if (n == "mem: cp.async source not 16-byte aligned")
    cp_async_misaligned_kernel<<<1, 32>>>(reinterpret_cast<kernels::bf16*>(out),
                                         reinterpret_cast<const kernels::bf16*>(in));
  else if (n == "launch: 64 KiB of dynamic shared memory, no attribute")
    big_shared_kernel<<<1, 32, 65536>>>(out);
  else if (n == "launch: 64 KiB with the kernel's attribute") {
    CUDA_CHECK(cudaFuncSetAttribute(big_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
    big_shared_kernel<<<1, 32, 65536>>>(out);
  } else if (n == "launch: 64 KiB with another kernel's attribute") {
    CUDA_CHECK(cudaFuncSetAttribute(other_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
    big_shared_kernel<<<1, 32, 65536>>>(out);
  } else if (n == "launch: 2048 threads per block")
    other_kernel<<<1, 2048>>>(out);
  else
    throw std::invalid_argument("no scenario " + name);
  Outcome o;
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  o.error = (int)e;
  o.message = e == cudaSuccess ? "" : cudaGetErrorString(e);
  return o;
}

}  // namespace emulator_test
