// kernels/emulator/simt.cpp: the SIMT machine's scheduler (kernels/emulator/machine.h says
// what it holds): a launch runs its blocks one after another; a block's threads are fibers,
// run in thread order, each until it waits at a rendezvous or ends. The block barrier is here;
// the warp collectives are warp.cpp, the PTX instructions ptx.cpp.
//
// A launch is checked as the GPU checks it before anything runs (block size, grid limits,
// dynamic shared memory against the kernel's attribute: cudaErrorInvalidConfiguration or
// cudaErrorInvalidValue, a launch error that cudaGetLastError returns and clears), and while it
// runs by memory_check.cpp (memcheck), race_check.cpp (racecheck) and the synccheck here:
//   - a barrier released with its threads at different __syncthreads (divergence),
//   - a block where no thread can run and not all have ended (a barrier or a collective that
//     some thread never reaches): each waiting thread is named with where it waits.
// A defect found while the kernel runs is a sticky error, as a fault on a GPU is: every later
// runtime call returns it (kernels/emulator/runtime.cpp), and its message names the check, the
// kernel, the block, the threads and the source lines.
//
// defines: emu::run_launch, thread_idx, block_idx, block_dim, grid_dim, syncthreads,
//          syncthreads_reduce, func_set_attribute, current_lane/block/launch, fail,
//          wait_for_others, kernel_entered (kernels/emulator/hooks.cpp calls it)
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>

#include "kernels/emulator/device.h"
#include "kernels/emulator/machine.h"
#include "kernels/emulator/memory_check.h"
#include "kernels/emulator/ptx.h"
#include "kernels/emulator/race_check.h"
#include "kernels/emulator/streams.h"

namespace emu {

thread_local Lane* g_lane = nullptr;
namespace {
thread_local Block* g_block = nullptr;
thread_local Launch* g_launch = nullptr;
uint64_t g_interval = 0;  // race_check's epochs: one per block start and barrier release

// ---- the threads' stacks --------------------------------------------------------------------
// One stack per thread of a block (up to 1024), reused by every block: mapped once, each below a
// guard page, so an overflow faults instead of writing into the next thread's frames.
constexpr size_t kStackBytes = 256 * 1024, kGuardBytes = 4096, kMaxThreads = 1024;
unsigned char* stack_pool() {
  static unsigned char* pool = [] {
    const size_t total = kMaxThreads * (kStackBytes + kGuardBytes);
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("emulator: cannot map the threads' stacks");
    unsigned char* base = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < kMaxThreads; i++)
      mprotect(base + i * (kStackBytes + kGuardBytes), kGuardBytes, PROT_NONE);
    return base;
  }();
  return pool;
}
struct PooledStack {  // Boost.Context's StackAllocator concept over one slot of the pool
  unsigned char* low;
  ctx::stack_context allocate() {
    ctx::stack_context sc;
    sc.size = kStackBytes;
    sc.sp = low + kStackBytes;
    return sc;
  }
  void deallocate(ctx::stack_context&) noexcept {}
};

// ---- the kernels' attributes ---------------------------------------------------------------
std::map<const void*, int>& max_dynamic_shared() {
  static std::map<const void*, int> limits;
  return limits;
}
constexpr int kDefaultSharedLimit = 48 * 1024;  // dynamic + static without cudaFuncSetAttribute

std::string dims(uint3 v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

// The kernel's name for messages before its first thread has entered it (a launch refused by
// its configuration): the expression as written and the launching function's template
// arguments.
std::string written_name(const LaunchSite& site) {
  std::string name = site.kernel;
  const char* with = std::strstr(site.caller, "[with ");
  if (with != nullptr) name += " " + std::string(with);
  return name;
}
std::string launch_site(const LaunchSite& site) {
  const char* slash = std::strrchr(site.file, '/');
  return std::string(slash ? slash + 1 : site.file) + ":" + std::to_string(site.line);
}

// ---- the barrier ---------------------------------------------------------------------------
void release_barrier(Block& block) {
  // Every live thread must wait at the same __syncthreads: threads at two different ones would
  // each be released by the other's arrival on a GPU (bar.sync 0), which is undefined.
  uintptr_t site = 0;
  int op = -1, count = 0, all = 1, any = 0;
  for (Lane& lane : block.lanes) {
    if (lane.state != LaneState::AtBarrier) continue;
    if (site == 0) {
      site = lane.wait_site;
      op = lane.barrier_op;
    } else if (lane.wait_site != site) {
      const Lane& first = *std::find_if(block.lanes.begin(), block.lanes.end(),
                                        [&](const Lane& l) { return l.wait_site == site; });
      fail("synccheck",
           "divergent __syncthreads: " + where(first) + " waits at " + site_name(site) +
               ", thread " + dims(lane.index) + " at " + site_name(lane.wait_site),
           cudaErrorLaunchFailure, false);
      break;
    }
    count += lane.predicate != 0;
    all &= lane.predicate != 0;
    any |= lane.predicate != 0;
  }
  const int result = op == 0 ? any : (op == 1 ? all : count);
  for (int w = 0; w < (int)block.warps.size(); w++) flush_warp_log(block, w);
  for (Lane& lane : block.lanes) {
    if (lane.state != LaneState::AtBarrier) continue;
    lane.state = LaneState::Ready;
    lane.barrier_result = result;
  }
  block.at_barrier = 0;
  block.interval = ++g_interval;
  race_new_interval(block);
  g_launch->counters.barriers++;
}

void maybe_release_barrier(Block& block) {
  if (block.at_barrier > 0 && block.at_barrier == block.live) release_barrier(block);
}

int arrive_at_barrier(int op, int predicate, uintptr_t site) {
  Lane& lane = *g_lane;
  Block& block = *g_block;
  lane.state = LaneState::AtBarrier;
  lane.wait_site = site;
  lane.barrier_op = op;
  lane.predicate = predicate;
  block.at_barrier++;
  maybe_release_barrier(block);
  if (lane.state == LaneState::AtBarrier) wait_for_others();
  return lane.barrier_result;
}

// ---- a thread ends ---------------------------------------------------------------------------
void lane_exited(Lane& lane) {
  Block& block = *g_block;
  complete_async_copies(lane, 0);  // what the thread never waited for still lands
  lane.state = LaneState::Exited;
  block.live--;
  Warp& warp = block.warps[lane.warp];
  warp.live &= ~(1u << lane.lane);
  // Lanes of its warp waiting at a collective that names it can never complete it.
  for (int l = 0; l < 32 && !g_launch->aborted; l++) {
    const Lane* other = nullptr;
    if (!((warp.waiting >> l) & 1u)) continue;
    other = &block.lanes[lane.warp * 32 + l];
    if ((other->collective.mask >> lane.lane) & 1u)
      fail("synccheck",
           "thread " + dims(lane.index) + " ended while lane " + std::to_string(l) +
               " of its warp waits for it at a warp collective (" +
               site_name(other->collective.site) + ")",
           cudaErrorLaunchFailure, false);
  }
  if (warp.live == 0) flush_warp_log(block, lane.warp);
  maybe_release_barrier(block);
}

// No thread can run and not all have ended: name each waiting thread and where it waits.
void deadlock(Block& block) {
  std::string waits;
  int shown = 0, waiting = 0;
  for (const Lane& lane : block.lanes) {
    if (lane.state == LaneState::Exited) continue;
    waiting++;
    if (shown++ < 4)
      waits += std::string(shown > 1 ? "; " : "") + "thread " + dims(lane.index) +
               (lane.state == LaneState::AtBarrier
                    ? " at __syncthreads " + site_name(lane.wait_site)
                    : " at a warp collective " + site_name(lane.collective.site));
  }
  fail("synccheck",
       "block " + dims(block.index) + " cannot go on: " + std::to_string(waiting) +
           " threads wait at a barrier or collective that not every thread reaches (" +
           std::to_string(block.live) + " live, " + std::to_string(block.at_barrier) +
           " at the barrier): " + waits,
       cudaErrorLaunchFailure, false);
}

// ---- switching threads -----------------------------------------------------------------------
// A thread that waits hands the host thread straight to the next ready thread of its block (in
// thread order, wrapping), or to the scheduler when none is ready: one context switch per wait,
// not two. Whoever switches names itself in g_from, and the one resumed stores the switcher's
// continuation in the switcher's slot (its Lane::fiber, or g_scheduler).
ctx::fiber g_scheduler;  // the scheduler's continuation while a thread runs
Lane* g_from = nullptr;  // who switched last (null: the scheduler)

void adopt(ctx::fiber&& continuation) {
  if (!continuation) return;  // the switcher ended: nothing to resume it by
  if (g_from == nullptr) g_scheduler = std::move(continuation);
  else g_from->fiber = std::move(continuation);
}

// The first ready thread after `after` (thread order, wrapping), null when none is.
Lane* next_ready(Block& block, int after) {
  const int n = (int)block.lanes.size();
  for (int i = 1; i <= n; i++) {
    Lane& l = block.lanes[(after + i + n) % n];
    if (l.state == LaneState::Ready) return &l;
  }
  return nullptr;
}

ctx::fiber new_thread(Launch& launch, Lane& lane);

// The continuation that runs `to` (its first run or where it waited), or the scheduler's.
ctx::fiber continuation_of(Lane* to) {
  if (to == nullptr) return std::move(g_scheduler);
  return to->started ? std::move(to->fiber) : new_thread(*g_launch, *to);
}

// From the running context (`me`: null for the scheduler) to `to` (null: the scheduler);
// returns when someone switches back to `me`.
void switch_to(Lane* me, Lane* to) {
  g_from = me;
  g_lane = to;
  ctx::fiber back = continuation_of(to).resume();
  adopt(std::move(back));
  g_lane = me;
}

ctx::fiber new_thread(Launch& launch, Lane& lane) {
  lane.started = true;
  unsigned char* low = stack_pool() + lane.tid * (kStackBytes + kGuardBytes) + kGuardBytes;
  lane.stack_low = (uintptr_t)low;
  lane.stack_high = (uintptr_t)(low + kStackBytes);
  return ctx::fiber(std::allocator_arg, PooledStack{low}, [&launch, &lane](ctx::fiber&& from) {
    adopt(std::move(from));
    g_lane = &lane;
    launch.body(launch.context);
    lane.in_emulator++;
    lane_exited(lane);
    Lane* next = launch.aborted ? nullptr : next_ready(*g_block, lane.tid);
    g_from = &lane;  // ended: the next one adopts nothing
    g_lane = next;
    return continuation_of(next);
  });
}

// A block's threads, made afresh for each block from objects kept for the process: their logs
// and cp.async lists keep their capacity, so a block allocates nothing once the first has run.
void reset_lanes(Block& block, dim3 b) {
  const int threads = (int)(b.x * b.y * b.z);
  block.lanes.resize(threads);
  block.warps.assign((threads + 31) / 32, Warp());
  for (int t = 0; t < threads; t++) {
    Lane& lane = block.lanes[t];
    lane.tid = t;
    lane.index = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
    lane.warp = t / 32;
    lane.lane = t % 32;
    lane.state = LaneState::Ready;
    lane.started = false;
    lane.in_emulator = 0;
    lane.async_copies.clear();
    lane.group_end.clear();
    lane.async_done = 0;
    lane.log.clear();
    lane.last_allocation = nullptr;
    block.warps[lane.warp].live |= 1u << lane.lane;
  }
  block.live = threads;
  block.at_barrier = 0;
  block.work = BlockWork();
}

void run_block(Launch& launch, SharedArena& arena, uint3 index) {
  static Block* kept = new Block();
  Block& block = *kept;
  const dim3 b = launch.config.block;
  block.index = index;
  reset_lanes(block, b);
  block.shared = &arena;
  block.interval = ++g_interval;
  arena_new_block(arena);
  race_new_interval(block);
  g_block = &block;
  launch.block = &block;
  // The scheduler starts the block's first thread; threads hand over to one another and come
  // back here when none is ready: all ended, a fault, or a deadlock.
  for (;;) {
    if (launch.aborted || block.live == 0) break;
    Lane* first = next_ready(block, -1);
    if (first == nullptr) {
      deadlock(block);
      break;
    }
    switch_to(nullptr, first);
  }
  for (int w = 0; w < (int)block.warps.size(); w++) flush_warp_log(block, w);
  // Threads still suspended (a fault, a deadlock) are abandoned, never resumed: unwinding them
  // would cross the access hooks, which the compiler declares as throwing nothing. Their stacks
  // are reused by the next block; what their frames held is leaked, once, on a failed launch.
  for (Lane& lane : block.lanes)
    if (lane.fiber) new ctx::fiber(std::move(lane.fiber));
  block_finished(launch, block);
  g_block = nullptr;
  launch.block = nullptr;
}

bool valid_configuration(Launch& launch) {
  const dim3 g = launch.config.grid, b = launch.config.block;
  const Device& dev = device();
  std::string why;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0)
    why = "a grid or block dimension is 0";
  else if ((size_t)b.x * b.y * b.z > (size_t)dev.max_threads_per_block)
    why = std::to_string((size_t)b.x * b.y * b.z) + " threads per block, more than " +
          std::to_string(dev.max_threads_per_block);
  else if (b.x > 1024 || b.y > 1024 || b.z > 64)
    why = "block " + dims(uint3{b.x, b.y, b.z}) + " beyond (1024, 1024, 64)";
  else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    why = "grid " + dims(uint3{g.x, g.y, g.z}) + " beyond (2^31 - 1, 65535, 65535)";
  if (why.empty()) return true;
  launch.error = cudaErrorInvalidConfiguration;
  launch.message = "emulator: launch of " + written_name(launch.site) + " at " +
                   launch_site(launch.site) + ": " + why;
  return false;
}

}  // namespace

Lane* current_lane() { return g_lane; }
Block* current_block() { return g_block; }
Launch* current_launch() { return g_launch; }

uint3 thread_idx() { return g_lane->index; }
uint3 block_idx() { return g_block->index; }
dim3 block_dim() { return g_launch->config.block; }
dim3 grid_dim() { return g_launch->config.grid; }

void wait_for_others() {
  Lane* me = g_lane;
  switch_to(me, g_launch->aborted ? nullptr : next_ready(*g_block, me->tid));
}

void fail(const std::string& check, const std::string& what, cudaError_t error, bool fatal) {
  Launch& launch = *g_launch;
  const std::string report = "emulator: " + check + ": " + launch.kernel_name + ": " + what;
  if (launch.reports++ < 10) std::fprintf(stderr, "%s\n", report.c_str());
  if (launch.error == cudaSuccess) {
    launch.error = error;
    launch.message = report;
  }
  if (fatal) {
    launch.aborted = true;
    if (g_lane != nullptr) wait_for_others();  // to the scheduler (aborted): never resumed
  }
}

std::string where(const Lane& lane) {
  return "block " + dims(g_block->index) + " thread " + dims(lane.index);
}

void syncthreads() {
  EmulatorCode inside;
  arrive_at_barrier(0, 0, (uintptr_t)__builtin_return_address(0));
}
int syncthreads_reduce(int predicate, int op) {
  EmulatorCode inside;
  return arrive_at_barrier(op, predicate, (uintptr_t)__builtin_return_address(0));
}

cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      value > device().shared_per_block_optin)
    return set_launch_error(cudaErrorInvalidValue,
                            "emulator: cudaFuncSetAttribute: " + std::to_string(value) +
                                " bytes of dynamic shared memory, above the device's " +
                                std::to_string(device().shared_per_block_optin));
  max_dynamic_shared()[kernel] = value;
  return cudaSuccess;
}

// The first thread of a launch enters its kernel: now the kernel is known by its address, and
// the dynamic shared memory is checked against its attribute before any statement runs.
void kernel_entered(const void* function) {
  Launch& launch = *g_launch;
  if (launch.kernel != nullptr) return;
  launch.kernel = function;
  launch.kernel_name = kernel_name_of(function);
  auto limit = max_dynamic_shared().find(function);
  const int allowed = limit == max_dynamic_shared().end() ? kDefaultSharedLimit : limit->second;
  if (launch.config.shared_bytes > (size_t)allowed) {
    launch.error = cudaErrorInvalidValue;
    launch.message = "emulator: launch of " + launch.kernel_name + " at " +
                     launch_site(launch.site) + ": " +
                     std::to_string(launch.config.shared_bytes) +
                     " bytes of dynamic shared memory, above the kernel's limit of " +
                     std::to_string(allowed) +
                     " (cudaFuncAttributeMaxDynamicSharedMemorySize: 48 KiB unless "
                     "cudaFuncSetAttribute raised it)";
    launch.aborted = true;
    wait_for_others();  // to the scheduler (aborted): never resumed
  }
}

void run_launch(const LaunchConfig& config, const LaunchSite& site, void (*body)(void*),
                void* context, const void* params, size_t params_bytes) {
  if (g_launch != nullptr) throw std::logic_error("emulator: a kernel launched a kernel");
  if (sticky_error() != cudaSuccess) return;  // a faulted context runs nothing
  stream_ready(config.stream);                // after what the stream waits for
  Launch launch(config, site);
  launch.body = body;
  launch.context = context;
  launch.params_low = (uintptr_t)params;
  launch.params_high = (uintptr_t)params + params_bytes;
  launch.kernel_name = written_name(site);
  if (!valid_configuration(launch)) {
    set_launch_error(launch.error, launch.message);
    return;
  }
  static SharedArena* arena = new SharedArena();  // one per process, as the scheduler is
  arena_new_launch(*arena, config.shared_bytes);
  g_launch = &launch;
  const auto start = std::chrono::steady_clock::now();
  const dim3 g = config.grid;
  for (unsigned z = 0; z < g.z && !launch.aborted; z++)
    for (unsigned y = 0; y < g.y && !launch.aborted; y++)
      for (unsigned x = 0; x < g.x && !launch.aborted; x++) run_block(launch, *arena, uint3{x, y, z});
  g_launch = nullptr;
  launch.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  launch_finished(launch, *arena);
  if (launch.error == cudaErrorInvalidValue)
    set_launch_error(launch.error, launch.message);  // refused before it ran: not sticky
  else if (launch.error != cudaSuccess)
    set_sticky_error(launch.error, launch.message);
}

}  // namespace emu
