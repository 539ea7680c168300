// kernels/emulator/machine.h: the state of the SIMT machine that runs a kernel's threads on the
// CPU, shared by the emulator's files (simt.cpp runs it, memory_check.cpp and race_check.cpp
// check it, ptx.cpp and warp.cpp are its collectives, kernel_counters.cpp counts it).
//
// One host thread runs a launch: its blocks one after another, and a block's threads as
// fibers (Boost.Context), each a full thread of the kernel with its own stack. A thread runs
// until it reaches a rendezvous — __syncthreads (every live thread of the block), a warp
// collective (every lane of its mask) — or ends, and hands over to the next ready thread, in
// thread order. The last thread to reach a rendezvous completes it (computes the shuffle,
// the mma, releases the barrier) and makes the others ready. So the interleaving is
// deterministic, and a rendezvous that can never complete is seen (a deadlock: synccheck).
//
// What each thread, warp and block holds:
//   Lane   its indices, its fiber, what it waits at (a barrier or a collective, and where in
//          the code), its cp.async groups, its log of memory accesses since the warp's last
//          rendezvous (coalescing and bank conflicts are properties of a warp's request)
//   Warp   which lanes live, which wait at a collective, its __syncwarp count (race_check)
//   Block  its lanes and warps, the barrier's arrivals, the interval number (which barrier
//          period the block is in: race_check's epoch), its shared memory
//   Launch the configuration, the kernel (its address, learnt at the first thread's entry),
//          the parameter space, the first error, and the counters
//
// defines: emu::{Lane, Warp, Block, Launch, SharedArena, Access, Collective, current_*,
//          fail, wait_for_others}
#pragma once
#include <boost/context/fiber.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/emulator/include/cuda_runtime.h"  // cudaError_t, the CUDA language
#include "kernels/emulator/kernel_counters.h"

namespace emu {

namespace ctx = boost::context;

// A memory access the kernel's code made (memory_check.cpp logs it; a warp's lanes' logs are
// grouped into requests at its next rendezvous).
enum class Space : uint8_t { Global, Shared };
struct Access {
  uintptr_t site;  // the instruction: the hook's return address
  uintptr_t address;
  uint32_t bytes;
  Space space;
  bool write;
};

// What a lane brings to a warp collective, and what it takes away.
enum class CollectiveKind : uint8_t { Shuffle, Ballot, Syncwarp, Ldmatrix, Mma };
struct Collective {
  CollectiveKind kind;
  unsigned mask;
  uintptr_t site;
  int variant;        // shuffle: 0 idx, 1 up, 2 down, 3 xor; ldmatrix: 1 = .trans; mma: 1 = f16
  int arg, width;     // shuffle's lane argument and width
  uint32_t in[10];    // shuffle: value (2 words); ballot: predicate; mma: a0-3, b0-1, c0-3 (floats)
  const void* address;  // ldmatrix: this lane's row
  uint32_t out[4];    // shuffle: value; ballot: bits; ldmatrix: 4 registers; mma: d0-3 (floats)
};

// One cp.async of up to 16 bytes, completed (copied) when a wait_group covers its group.
struct AsyncCopy {
  void* dst;
  const void* src;
  uint32_t bytes, src_bytes;  // copy size and how much is read (the rest zero-filled)
  uintptr_t site;
};

enum class LaneState : uint8_t { Ready, AtBarrier, AtCollective, Exited };

struct Lane {
  int tid = 0;  // linear index in the block: x + y bx + z bx by
  uint3 index{0, 0, 0};
  int warp = 0, lane = 0;
  LaneState state = LaneState::Ready;
  bool started = false;
  ctx::fiber fiber;  // this thread, where it waits (simt.cpp: threads hand over to one another)
  uintptr_t stack_low = 0, stack_high = 0;
  // At a barrier: where, which reduction, its predicate; the result when released.
  uintptr_t wait_site = 0;
  int barrier_op = -1, predicate = 0, barrier_result = 0;
  Collective collective{};
  // cp.async: copies committed into groups (group_end[g] = copies in groups <= g), and the
  // ones issued since the last commit.
  std::vector<AsyncCopy> async_copies;
  std::vector<size_t> group_end;
  size_t async_done = 0;  // copies [0, async_done) completed
  std::vector<Access> log;
  // memory_check's cache of the last allocation a global access hit
  const void* last_allocation = nullptr;
  // > 0 while the thread runs the emulator's own code (a collective, a report): the access
  // hooks then ignore what they see (library code the kernels' units share may be hooked).
  int in_emulator = 0;
};

struct Warp {
  unsigned live = 0;     // lanes that exist and have not exited
  unsigned waiting = 0;  // lanes at a collective
  uint64_t syncwarps = 0;  // completed __syncwarp of the whole warp (race_check's ordering)
};

// The block's shared memory: the launch's dynamic bytes at offset 0, then each __shared__
// variable the kernel reaches, 16-byte aligned after a 256-byte red zone. Bytes outside those
// ranges are out of bounds (memory_check). Fresh blocks see 0xff bytes, not the last block's
// values: a kernel reading shared memory it never wrote gets NaNs, not plausible numbers.
struct SharedArena {
  static constexpr size_t kCapacity = 512 * 1024;  // more than any GPU's 228 KiB per SM
  static constexpr size_t kRedZone = 256;
  unsigned char* base = nullptr;
  size_t dynamic_bytes = 0;
  size_t static_begin = 0, static_end = 0;  // [begin, end): the variables' region, as used
  struct Variable {
    const SharedVariable* declared;
    size_t offset, bytes;
  };
  std::vector<Variable> variables;
  bool inside(size_t offset, size_t bytes) const;
};

struct Block {
  uint3 index{0, 0, 0};
  std::vector<Lane> lanes;
  std::vector<Warp> warps;
  int live = 0, at_barrier = 0;
  uint64_t interval = 0;  // race_check: unique across blocks and barriers
  SharedArena* shared = nullptr;
  BlockWork work;  // kernel_counters.h: what this block cost
};

struct Launch {
  LaunchConfig config;
  LaunchSite site;
  void (*body)(void*) = nullptr;
  void* context = nullptr;
  uintptr_t params_low = 0, params_high = 0;
  const void* kernel = nullptr;  // its address, learnt when the first thread enters it
  std::string kernel_name;
  bool aborted = false;   // a fault: no thread runs further
  cudaError_t error = cudaSuccess;
  std::string message;    // the first report (the error string cudaGetErrorString gives)
  int reports = 0;
  LaunchCounters counters;
  std::vector<BlockWork> block_work;  // each block's, when records are kept
  double host_seconds = 0;            // how long the emulation took
  Block* block = nullptr;
  explicit Launch(const LaunchConfig& c, const LaunchSite& s) : config(c), site(s) {}
};

// The running thread (null outside a kernel: the hooks then do nothing), block and launch.
extern thread_local Lane* g_lane;
// Whether accesses are logged for the request counters (kernel_counters.h: record_launches):
// the logging and grouping cost a third of the emulation, and only the kernel table reads them.
extern bool g_count_requests;
Lane* current_lane();
Block* current_block();
Launch* current_launch();

// Reports a defect of the running kernel (the first one becomes the launch's error; the check
// names itself: "racecheck", "memcheck", "synccheck"). fatal: the access must not happen (an
// address outside memory), so the launch stops here, as a GPU's would with a fault.
void fail(const std::string& check, const std::string& what, cudaError_t error, bool fatal);
// "kernel K, block (x,y,z), thread (x,y,z)" for messages; the lane's site as file:line.
std::string where(const Lane& lane);
std::string site_name(uintptr_t site);

// Marks the running thread as inside the emulator's code for its scope (Lane::in_emulator).
struct EmulatorCode {
  Lane* lane;
  EmulatorCode() : lane(g_lane) {
    if (lane != nullptr) lane->in_emulator++;
  }
  ~EmulatorCode() {
    if (lane != nullptr) lane->in_emulator--;
  }
  EmulatorCode(const EmulatorCode&) = delete;
  EmulatorCode& operator=(const EmulatorCode&) = delete;
};

// The running thread waits: the next ready thread of the block runs (the scheduler, when
// none is or the launch stopped); returns when the thread is run again.
void wait_for_others();

// Warp collectives (warp.cpp): the calling lane arrives; returns once the collective has
// completed, with the lane's collective.out filled.
void warp_collective(Collective& c);
// The PTX collectives' completion (ptx.cpp): every lane of the warp (lanes[l], null for a lane
// outside the mask) has brought its part.
void ldmatrix_complete(Block& block, int warp, Lane* const (&lanes)[32], bool trans);
void mma_complete(Block& block, Lane* const (&lanes)[32]);
// Groups every lane's log of the warp into requests and counts them (kernel_counters.cpp).
void flush_warp_log(Block& block, int warp);
// A block, a launch ended: their counts join the launch's, the kernel's record.
void block_finished(Launch& launch, Block& block);
void launch_finished(Launch& launch, const SharedArena& arena);
// The kernel's demangled name (without its parameters) from the executable's symbol table.
std::string kernel_name_of(const void* function);

}  // namespace emu
