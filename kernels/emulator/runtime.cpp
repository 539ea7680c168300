// kernels/emulator/runtime.cpp: the CUDA runtime calls paralab makes, on the emulated device
// (kernels/emulator/include/cuda_runtime.h declares them; device.h says how errors are kept).
//
// Device memory is host memory the emulator allocated and registered (memory_check.h), so that
// a kernel's access can be checked against it; a fresh allocation is filled with 0xff bytes
// (NaN as floats), as a GPU's holds whatever was there. Every call that takes a device range
// checks it lies in one allocation, and a copy checks each side against its direction.
//
// Streams are ordered and kernels run when launched, so most stream work is done on return.
// What is not: NCCL's operations on MPI (kernels/emulator/nccl.cpp), which a stream holds as
// pending until they complete. An event recorded on a stream holds the stream's pending work;
// cudaEventQuery tests it, cudaEventSynchronize and cudaStreamSynchronize wait for it (testing
// and yielding, never a blocking wait: the ranks may share cores), and work queued on a stream
// first waits for what the stream waits for (cudaStreamWaitEvent adds an event's work to it).
// Events carry the CPU clock's time when recorded: elapsed times are the emulation's, which
// measure nothing about a GPU.
//
// defines: the cuda* functions of cuda_runtime.h, emu::{device, set_launch_error,
//          set_sticky_error, sticky_error, emulated_device_name, stream_pending, AsyncOp}
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/emulator/device.h"
#include "kernels/emulator/memory_check.h"
#include "kernels/emulator/streams.h"

struct CUstream_st {
  unsigned flags = 0;
  std::vector<std::shared_ptr<emu::AsyncOp>> pending;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point time;
  bool recorded = false;
  std::vector<std::shared_ptr<emu::AsyncOp>> waits;
};

namespace emu {

namespace {

// Sources: CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (shared
// memory, registers, threads and blocks per SM and per block: 9.0, 8.0, 7.5, 7.0); the H100 and
// A100 datasheets and nvidia-smi (SMs, memory, boost clock, L2, bus width).
const Device kDevices[] = {
    {"h100", "NVIDIA H100 80GB HBM3", 9, 0, 132, 85520809984ull, 49152, 232448, 233472, 65536,
     1024, 2048, 32, 1980000, 52428800, 5120},
    {"h200", "NVIDIA H200", 9, 0, 132, 150754820096ull, 49152, 232448, 233472, 65536, 1024, 2048,
     32, 1980000, 52428800, 6144},
    {"a100", "NVIDIA A100-SXM4-80GB", 8, 0, 108, 85198045184ull, 49152, 166912, 167936, 65536,
     1024, 2048, 32, 1410000, 41943040, 5120},
    // The older GPUs the binary runs on in fp32 and fp16 (docs/setup.md): the guide's 7.0 and 7.5
    // columns (96 KiB and 64 KiB of shared memory per SM and per block opted in; 2048 and 1024
    // threads, 32 and 16 blocks per SM); the V100 SXM2 (80 SMs, 32 GB HBM2 on a 4096-bit bus, 6
    // MiB of L2, 1530 MHz boost) and T4 (40 SMs, 16 GB GDDR6 on a 256-bit bus, 4 MiB of L2, 1590
    // MHz boost) from NVIDIA's Volta and Turing architecture whitepapers; the memory sizes as
    // cudaGetDeviceProperties reports them (deviceQuery: 32 GB less the driver's reserve).
    {"v100", "Tesla V100-SXM2-32GB", 7, 0, 80, 34089730048ull, 49152, 98304, 98304, 65536, 1024,
     2048, 32, 1530000, 6291456, 4096},
    {"t4", "Tesla T4", 7, 5, 40, 15843721216ull, 49152, 65536, 65536, 65536, 1024, 1024, 16,
     1590000, 4194304, 256},
};

cudaError_t g_last = cudaSuccess;
cudaError_t g_message_error = cudaSuccess;  // the error g_last_message explains (kept after
std::string g_last_message;                 // cudaGetLastError clears g_last)
cudaError_t g_sticky = cudaSuccess;
std::string g_sticky_message;
size_t g_allocated = 0;
int g_current = 0;

const char* standard_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

// A call's refusal: the error and the one line that says why (cudaGetErrorString returns it).
cudaError_t refuse(cudaError_t e, const std::string& why) {
  return set_launch_error(e, "emulator: " + why);
}

std::string direction_error(const void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            const char* call) {
  std::string e;
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice)
    e = device_range_error(dst, bytes, std::string(call) + "'s destination");
  if (e.empty() && (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice))
    e = device_range_error(src, bytes, std::string(call) + "'s source");
  return e;
}

}  // namespace

const Device& device() {
  static const Device* d = [] {
    const char* key = std::getenv("PARALAB_EMULATED_GPU");
    for (const Device& dev : kDevices)
      if (key != nullptr && std::strcmp(key, dev.key) == 0) return &dev;
    return &kDevices[0];
  }();
  return *d;
}

std::string emulated_device_name() { return std::string(device().name) + " (emulated)"; }

cudaError_t set_launch_error(cudaError_t error, const std::string& message) {
  g_last = error;
  g_message_error = error;
  g_last_message = message;
  return error;
}
void set_sticky_error(cudaError_t error, const std::string& message) {
  if (g_sticky != cudaSuccess) return;
  g_sticky = error;
  g_sticky_message = message;
}
cudaError_t sticky_error() { return g_sticky; }

void wait_for(std::vector<std::shared_ptr<AsyncOp>>& ops) {
  for (;;) {
    bool done = true;
    for (auto& op : ops) done = op->test() && done;
    if (done) break;
    sched_yield();
  }
  ops.clear();
}

void stream_pending(cudaStream_t stream, std::shared_ptr<AsyncOp> op) {
  static CUstream_st legacy;
  (stream ? stream : &legacy)->pending.push_back(std::move(op));
}

void stream_ready(cudaStream_t stream) {
  if (stream != nullptr) wait_for(stream->pending);
}

}  // namespace emu

using emu::refuse;

#define STICKY                                                           \
  do {                                                                   \
    if (emu::g_sticky != cudaSuccess) return emu::g_sticky;              \
  } while (0)

// ---- devices and errors -----------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  STICKY;
  if (device != 0) return refuse(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): one emulated device per process");
  emu::g_current = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = emu::g_current;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return refuse(cudaErrorInvalidDevice, "cudaGetDeviceProperties: no device " + std::to_string(device));
  const emu::Device& d = emu::device();
  std::memset(p, 0, sizeof *p);
  std::strncpy(p->name, d.name, sizeof p->name - 1);
  p->totalGlobalMem = d.memory_bytes;
  p->sharedMemPerBlock = d.shared_per_block;
  p->sharedMemPerBlockOptin = d.shared_per_block_optin;
  p->sharedMemPerMultiprocessor = d.shared_per_sm;
  p->regsPerBlock = 65536;
  p->regsPerMultiprocessor = d.registers_per_sm;
  p->warpSize = 32;
  p->maxThreadsPerBlock = d.max_threads_per_block;
  p->maxThreadsPerMultiProcessor = d.max_threads_per_sm;
  p->maxBlocksPerMultiProcessor = d.max_blocks_per_sm;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->clockRate = d.clock_khz;
  p->multiProcessorCount = d.sm_count;
  p->major = d.major;
  p->minor = d.minor;
  p->l2CacheSize = d.l2_bytes;
  p->memoryBusWidth = d.memory_bus_bits;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return refuse(cudaErrorInvalidDevice, "cudaDeviceGetAttribute: no device " + std::to_string(device));
  const emu::Device& d = emu::device();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = d.max_threads_per_block; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = d.shared_per_block; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = d.sm_count; break;
    case cudaDevAttrComputeCapabilityMajor: *value = d.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = d.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = d.shared_per_block_optin; break;
    default:
      return refuse(cudaErrorNotSupported, "cudaDeviceGetAttribute: attribute " + std::to_string((int)attr) + " is not emulated");
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  STICKY;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  STICKY;
  *total_bytes = emu::device().memory_bytes;
  *free_bytes = *total_bytes - std::min(*total_bytes, emu::g_allocated);
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  if (emu::g_sticky != cudaSuccess) return emu::g_sticky;
  const cudaError_t e = emu::g_last;
  emu::g_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return emu::g_sticky != cudaSuccess ? emu::g_sticky : emu::g_last; }
const char* cudaGetErrorString(cudaError_t e) {
  if (e != cudaSuccess && e == emu::g_sticky) return emu::g_sticky_message.c_str();
  if (e != cudaSuccess && e == emu::g_message_error) return emu::g_last_message.c_str();
  return emu::standard_string(e);
}
const char* cudaGetErrorName(cudaError_t e) { return emu::standard_string(e); }

// ---- memory -----------------------------------------------------------------------------------
static cudaError_t allocate(void** p, size_t bytes, emu::AllocationKind kind, const char* call) {
  STICKY;
  *p = nullptr;
  const emu::Device& d = emu::device();
  if (kind == emu::AllocationKind::Device && emu::g_allocated + bytes > d.memory_bytes)
    return emu::set_launch_error(cudaErrorMemoryAllocation,
                                 std::string("emulator: ") + call + " of " + std::to_string(bytes) +
                                     " bytes: the emulated " + d.name + " has " +
                                     std::to_string(d.memory_bytes - emu::g_allocated) + " left");
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void* q = std::aligned_alloc(256, rounded);
  if (q == nullptr)
    return emu::set_launch_error(cudaErrorMemoryAllocation,
                                 std::string("emulator: ") + call + " of " + std::to_string(bytes) +
                                     " bytes: the host has no memory for it");
  std::memset(q, kind == emu::AllocationKind::Device ? 0xff : 0, rounded);
  emu::register_allocation(q, bytes, kind);
  if (kind == emu::AllocationKind::Device) emu::g_allocated += bytes;
  *p = q;
  return cudaSuccess;
}
static cudaError_t release(void* p, const char* call) {
  STICKY;
  if (p == nullptr) return cudaSuccess;
  const emu::Allocation* a = emu::find_allocation((uintptr_t)p);
  if (a == nullptr || a->base != (uintptr_t)p)
    return refuse(cudaErrorInvalidValue, std::string(call) + ": not the start of an allocation");
  if (a->kind == emu::AllocationKind::Device) emu::g_allocated -= a->bytes;
  emu::unregister_allocation(p);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  return allocate(p, bytes, emu::AllocationKind::Device, "cudaMalloc");
}
cudaError_t cudaFree(void* p) { return release(p, "cudaFree"); }
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  emu::stream_ready(stream);
  return allocate(p, bytes, emu::AllocationKind::Device, "cudaMallocAsync");
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  emu::stream_ready(stream);
  return release(p, "cudaFreeAsync");
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  return allocate(p, bytes, emu::AllocationKind::Pinned, "cudaHostAlloc");
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return allocate(p, bytes, emu::AllocationKind::Pinned, "cudaMallocHost");
}
cudaError_t cudaFreeHost(void* p) { return release(p, "cudaFreeHost"); }

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  STICKY;
  const std::string bad = emu::direction_error(dst, src, bytes, kind, "cudaMemcpy");
  if (!bad.empty()) return refuse(cudaErrorInvalidValue, bad);
  emu::stream_ready(stream);
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  STICKY;
  if (height == 0 || width == 0) return cudaSuccess;
  if (width > dpitch || width > spitch)
    return refuse(cudaErrorInvalidValue, "cudaMemcpy2DAsync: a row of " + std::to_string(width) +
                                             " bytes is wider than a pitch");
  const std::string bad = emu::direction_error(dst, src, 0, kind, "cudaMemcpy2DAsync");
  std::string span;
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice)
    span = emu::device_range_error(dst, (height - 1) * dpitch + width, "cudaMemcpy2DAsync's destination");
  if (span.empty() && (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice))
    span = emu::device_range_error(src, (height - 1) * spitch + width, "cudaMemcpy2DAsync's source");
  if (!span.empty()) return refuse(cudaErrorInvalidValue, span);
  emu::stream_ready(stream);
  for (size_t r = 0; r < height; r++)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                 width);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  STICKY;
  const std::string bad = emu::device_range_error(p, bytes, "cudaMemset's range");
  if (!bad.empty()) return refuse(cudaErrorInvalidValue, bad);
  emu::stream_ready(stream);
  if (bytes > 0) std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) { return cudaMemsetAsync(p, value, bytes, nullptr); }

// ---- streams and events -------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  STICKY;
  *stream = new CUstream_st();
  (*stream)->flags = flags;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return refuse(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(0)");
  emu::wait_for(stream->pending);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  STICKY;
  emu::stream_ready(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  STICKY;
  if (event == nullptr) return refuse(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: no event");
  if (stream != nullptr)
    stream->pending.insert(stream->pending.end(), event->waits.begin(), event->waits.end());
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  STICKY;
  *event = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  STICKY;
  if (event == nullptr) return refuse(cudaErrorInvalidResourceHandle, "cudaEventRecord: no event");
  event->recorded = true;
  event->time = std::chrono::steady_clock::now();
  event->waits = stream != nullptr ? stream->pending : std::vector<std::shared_ptr<emu::AsyncOp>>();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  STICKY;
  for (auto& op : event->waits)
    if (!op->test()) return cudaErrorNotReady;
  event->waits.clear();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  STICKY;
  emu::wait_for(event->waits);
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  STICKY;
  if (!start->recorded || !end->recorded)
    return refuse(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}
