// kernels/emulator/memory_check.h: memcheck, the emulated device's check of every memory
// access a kernel's thread makes (compute-sanitizer's memcheck is the anchor), and the memory
// it checks against: the allocations the runtime made, and each block's shared memory.
//
// A kernel's load or store reaches on_access (through kernels/emulator/hooks.cpp) with its
// address, size and instruction, and is sorted by where it points:
//   the thread's own stack           local memory: nothing to check
//   the block's shared memory        inside the launch's dynamic bytes or a __shared__
//                                    variable, naturally aligned; then race_check.h
//   the launch's parameter space     the copied arguments: reads only
//   a device allocation              the whole access inside one allocation (cudaMalloc,
//                                    cudaMallocAsync, cudaHostAlloc: mapped pinned memory),
//                                    naturally aligned (a 16-byte vector access 16-aligned)
//   anything else                    an invalid address: the launch stops (a GPU faults)
// and each valid access is logged for the counters (kernel_counters.h). The runtime, cuBLAS
// and NCCL calls check their ranges with device_range_error before they touch them.
//
// defines: emu::{Allocation, register_allocation, unregister_allocation, find_allocation,
//          device_range_error, on_access, arena_new_launch, arena_new_block}
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/emulator/machine.h"

namespace emu {

enum class AllocationKind : uint8_t { Device, Pinned };
struct Allocation {
  uintptr_t base;
  size_t bytes;
  AllocationKind kind;
  uint64_t serial;  // the n-th allocation of the process, for messages
};
void register_allocation(const void* p, size_t bytes, AllocationKind kind);
// False when p is not the start of an allocation.
bool unregister_allocation(const void* p);
const Allocation* find_allocation(uintptr_t address);
// "" when [p, p + bytes) lies inside one device (or pinned) allocation, else why not, naming
// `what` ("cublasSgemm's A").
std::string device_range_error(const void* p, size_t bytes, const std::string& what);

// A kernel's access (hooks.cpp); site is the instruction. kAligned: the access must be
// naturally aligned (a plain load or store of 2, 4, 8 or 16 bytes; not a copy of a struct);
// kAtomic: an atomic, which races with no other atomic.
constexpr int kAligned = 1, kAtomic = 2;
void on_access(uintptr_t address, uint32_t bytes, bool write, uintptr_t site, int flags);

// The shared memory of a launch (its dynamic size) and of each new block (poisoned, fresh).
void arena_new_launch(SharedArena& arena, size_t dynamic_bytes);
void arena_new_block(SharedArena& arena);

}  // namespace emu
