// kernels/emulator/kernel_counters.h: what the emulated device counts of every kernel launch,
// as a profiler would measure it on a GPU (the anchors: Nsight Compute's metrics of the same
// names), and the per-kernel records op_check --kernel-table prints and plan/kernel_time.h
// turns into a projected time on a GPU.
//
// Counted from every access and instruction the kernel's threads make:
//   tensor-core FLOPs     mma.sync m16n8k16 instructions (warp-level) x 2 16 8 16
//   global requests       warp-level load/store instructions to global memory; their 32-byte
//                         sectors (a fully coalesced 4-byte access: 4 sectors per request),
//                         the bytes asked for, and the distinct sectors the launch touched
//                         (what DRAM must supply at least, with a large enough L2)
//   shared requests       warp-level shared-memory instructions (ld/st.shared, ldmatrix,
//                         cp.async's writes) and their wavefronts: a request takes as many
//                         passes as the most-used bank has distinct 4-byte words in one phase
//                         (32 lanes for <= 4-byte accesses, 16 for 8, 8 for 16 bytes; ldmatrix
//                         one phase per 8x8 matrix). Ideal: bytes / 128 per request.
//   barriers, shuffles, ldmatrix, cp.async bytes
// Registers, static shared memory and spills per thread come from the nvcc build's objects
// (cuobjdump --dump-resource-usage, sm_90: kernel_resources.txt beside the emulated binary).
//
// defines: emu::{BlockWork, LaunchCounters, LaunchRecord, KernelRecord, kernel_records,
//          reset_kernel_records, record_launches, MmaTrace, trace_mma, mma_traces,
//          library_call, emulated_device_name}
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace emu {

// One block's work: what decides how long the SM that runs it is busy.
struct BlockWork {
  uint64_t tensor_flops = 0;
  uint64_t shared_wavefronts = 0;
  uint64_t global_sectors = 0;
};

struct LaunchCounters {
  uint64_t blocks = 0, threads = 0, barriers = 0;
  uint64_t mma = 0, tensor_flops = 0;
  uint64_t global_requests = 0, global_sectors = 0, global_bytes = 0;
  uint64_t global_unique_sectors = 0;
  uint64_t shared_requests = 0, shared_wavefronts = 0, shared_ideal_wavefronts = 0;
  uint64_t shared_bytes = 0;
  uint64_t ldmatrix = 0, shuffles = 0, cp_async_bytes = 0;
  void add(const LaunchCounters& other);
};

// One launch, for the projection: its shape and each block's work.
struct LaunchRecord {
  uint64_t blocks = 0;
  unsigned threads_per_block = 0;
  size_t dynamic_shared = 0, static_shared = 0;
  std::vector<BlockWork> block_work;
  LaunchCounters counters;
};

// Every launch of one kernel (one instantiation: forward_kernel<64> and <128> are two), or
// every call of one library routine (library: cuBLAS's GEMMs, counted by their FLOPs and the
// bytes of their matrices, as tensor_flops and global_bytes).
struct KernelRecord {
  std::string name;   // demangled, without its parameter list
  bool library = false;
  const void* address = nullptr;
  std::string site;   // file:line of its (first) launch
  LaunchCounters totals;
  size_t launches = 0;
  double host_seconds = 0;  // the emulation's own time (how slow emulating it is)
  // From the nvcc build (sm_90), -1 when unknown (no nvcc build beside this one).
  int registers = -1, static_shared = -1, local_bytes = -1;
  std::vector<LaunchRecord> records;  // each launch, when record_launches(true)
};

// Every kernel launched since the last reset, in the order first launched.
std::vector<KernelRecord> kernel_records();
void reset_kernel_records();
// Keep each launch's per-block work (for the projection), and take the request counters
// (global sectors, shared wavefronts of plain loads and stores: the per-access log they need
// costs a third of the emulation). Off by default: a training run launches thousands of
// kernels and reads none of it; launches, blocks, threads, tensor FLOPs, barriers, ldmatrix
// wavefronts and cp.async bytes are counted either way.
void record_launches(bool on);
// mma.sync instructions as the lanes saw them, for a student to see which lane holds which
// element (op_check --lane-map): every mma of warp 0 of block (0,0,0) of each launch while
// tracing is on, in order, each lane's A (4 registers), B (2), C and D (4 floats each).
struct MmaTrace {
  uint32_t a[32][4], b[32][2];
  float c[32][4], d[32][4];
};
void trace_mma(bool on);
std::vector<MmaTrace> mma_traces();  // and clears them

// A library routine ran (kernels/emulator/cublas.cpp): its FLOPs and the bytes it moved.
void library_call(const std::string& name, double flops, double bytes);
// "NVIDIA H100 80GB HBM3 (emulated)": the device the emulator plays (kernels/emulator/runtime.cpp).
std::string emulated_device_name();

}  // namespace emu
