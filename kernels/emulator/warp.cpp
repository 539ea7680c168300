// kernels/emulator/warp.cpp: the warp collectives of the emulated device. A lane that reaches
// one (a shuffle, a ballot, __syncwarp, ldmatrix, mma) leaves what it brings in its Collective
// and waits; the last lane of the mask to arrive completes the collective for all of them —
// computes each lane's result as the CUDA guide or the PTX ISA defines it — and makes the
// others ready. synccheck, as compute-sanitizer's: the calling lane must be in its own mask, a
// lane of the mask that has ended can never arrive, and every lane of the mask must be at the
// same kind of collective with the same mask.
//
// Shuffles (CUDA C++ Programming Guide, "Warp Shuffle Functions"), within sections of `width`
// lanes: idx reads lane (src mod width) of the caller's section; up reads lane - delta unless
// that leaves the section (then its own value), down lane + delta likewise; xor reads
// lane ^ mask unless that lies in a later section (then its own value). Reading a lane outside
// the mask is undefined: a synccheck error here.
//
// defines: emu::warp_collective, emu::shuffle, emu::ballot, emu::syncwarp, the atomics
#include <cstring>
#include <string>

#include "kernels/emulator/machine.h"
#include "kernels/emulator/memory_check.h"

namespace emu {

namespace {

const char* kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::Shuffle: return "a shuffle";
    case CollectiveKind::Ballot: return "a ballot";
    case CollectiveKind::Syncwarp: return "__syncwarp";
    case CollectiveKind::Ldmatrix: return "ldmatrix";
    case CollectiveKind::Mma: return "mma.sync";
  }
  return "a collective";
}

int shuffle_source(const Collective& c, int lane) {
  const int width = c.width, section = lane / width * width;
  switch (c.variant) {
    case 0: return section + ((c.arg % width) + width) % width;
    case 1: return lane - section >= c.arg ? lane - c.arg : lane;
    case 2: return lane - section + c.arg < width ? lane + c.arg : lane;
    default: {
      const int src = lane ^ c.arg;
      return src >= section + width ? lane : src;
    }
  }
}

// Every lane of `mask` is here: check they agree, then compute each one's result.
void complete(Block& block, int warp, const Collective& first, unsigned mask) {
  Lane* lanes[32] = {};
  for (int l = 0; l < 32; l++)
    if ((mask >> l) & 1u) lanes[l] = &block.lanes[warp * 32 + l];
  for (int l = 0; l < 32; l++) {
    if (lanes[l] == nullptr) continue;
    const Collective& c = lanes[l]->collective;
    if (c.kind != first.kind || c.mask != first.mask || c.variant != first.variant ||
        c.width != first.width)
      fail("synccheck",
           "lanes of warp " + std::to_string(warp) + " at different collectives: " +
               kind_name(first.kind) + " at " + site_name(first.site) + " and " + kind_name(c.kind) +
               " at " + site_name(c.site) + " (" + where(*lanes[l]) + ")",
           cudaErrorLaunchFailure, true);
  }
  Launch& launch = *current_launch();
  switch (first.kind) {
    case CollectiveKind::Shuffle:
      launch.counters.shuffles++;
      for (int l = 0; l < 32; l++) {
        if (lanes[l] == nullptr) continue;
        const int src = shuffle_source(lanes[l]->collective, l);
        if (lanes[src] == nullptr)
          fail("synccheck",
               "lane " + std::to_string(l) + " of warp " + std::to_string(warp) +
                   " shuffles from lane " + std::to_string(src) + ", which is not in the mask " +
                   std::to_string(mask) + " (" + site_name(first.site) + ")",
               cudaErrorLaunchFailure, true);
        lanes[l]->collective.out[0] = lanes[src]->collective.in[0];
        lanes[l]->collective.out[1] = lanes[src]->collective.in[1];
      }
      break;
    case CollectiveKind::Ballot: {
      unsigned bits = 0;
      for (int l = 0; l < 32; l++)
        if (lanes[l] != nullptr && lanes[l]->collective.in[0] != 0) bits |= 1u << l;
      for (int l = 0; l < 32; l++)
        if (lanes[l] != nullptr) lanes[l]->collective.out[0] = bits;
      break;
    }
    case CollectiveKind::Syncwarp:
      if (mask == block.warps[warp].live) block.warps[warp].syncwarps++;
      break;
    case CollectiveKind::Ldmatrix:
      ldmatrix_complete(block, warp, lanes, first.variant == 1);
      break;
    case CollectiveKind::Mma:
      mma_complete(block, lanes);
      break;
  }
}

}  // namespace

void warp_collective(Collective& c) {
  Lane& lane = *g_lane;
  Block& block = *current_block();
  Warp& warp = block.warps[lane.warp];
  if (!((c.mask >> lane.lane) & 1u))
    fail("synccheck",
         std::string(kind_name(c.kind)) + " with mask " + std::to_string(c.mask) +
             " called by lane " + std::to_string(lane.lane) + ", which is not in it (" +
             where(lane) + ", " + site_name(c.site) + ")",
         cudaErrorLaunchFailure, true);
  const unsigned missing = c.mask & ~warp.live;
  if (missing != 0) {
    const int l = __builtin_ctz(missing);
    fail("synccheck",
         std::string(kind_name(c.kind)) + " at " + site_name(c.site) + " names lane " +
             std::to_string(l) + " of warp " + std::to_string(lane.warp) +
             ", which has ended or does not exist (" + where(lane) + ")",
         cudaErrorLaunchFailure, true);
  }
  lane.collective = c;
  lane.state = LaneState::AtCollective;
  warp.waiting |= 1u << lane.lane;
  if ((warp.waiting & c.mask) == c.mask) {
    complete(block, lane.warp, c, c.mask);
    // Every lane of the warp is here: a moment to count its logged requests, once they are long
    // (counting at every shuffle would cost more than the shuffles).
    if (c.mask == warp.live && block.lanes[lane.warp * 32].log.size() > 512)
      flush_warp_log(block, lane.warp);
    warp.waiting &= ~c.mask;
    for (int l = 0; l < 32; l++)
      if ((c.mask >> l) & 1u) block.lanes[lane.warp * 32 + l].state = LaneState::Ready;
  } else {
    wait_for_others();
  }
  c = lane.collective;
}

void shuffle(unsigned mask, const void* in, void* out, size_t bytes, int kind, int arg, int width) {
  EmulatorCode inside;
  Collective c{};
  c.kind = CollectiveKind::Shuffle;
  c.mask = mask;
  c.variant = kind;
  c.arg = arg;
  c.width = width;
  c.site = (uintptr_t)__builtin_return_address(0);
  std::memcpy(c.in, in, bytes);
  warp_collective(c);
  std::memcpy(out, c.out, bytes);
}

unsigned ballot(unsigned mask, int predicate) {
  EmulatorCode inside;
  Collective c{};
  c.kind = CollectiveKind::Ballot;
  c.mask = mask;
  c.width = 32;
  c.site = (uintptr_t)__builtin_return_address(0);
  c.in[0] = predicate != 0;
  warp_collective(c);
  return c.out[0];
}

void syncwarp(unsigned mask) {
  EmulatorCode inside;
  Collective c{};
  c.kind = CollectiveKind::Syncwarp;
  c.mask = mask;
  c.width = 32;
  c.site = (uintptr_t)__builtin_return_address(0);
  warp_collective(c);
}

// ---- atomics: checked as an access (never a race with one another), then done ------------------
namespace {
template <class T, class F>
T atomic(T* p, F update, uintptr_t site) {
  EmulatorCode inside;
  Lane& lane = *g_lane;
  lane.in_emulator--;  // checked as the kernel's own access
  on_access((uintptr_t)p, sizeof(T), true, site, kAligned | kAtomic);
  lane.in_emulator++;
  const T old = *p;
  *p = update(old);
  return old;
}
}  // namespace

#define SITE (uintptr_t) __builtin_return_address(0)
int atomic_add_int(int* p, int v) { return atomic(p, [v](int o) { return o + v; }, SITE); }
unsigned atomic_add_unsigned(unsigned* p, unsigned v) {
  return atomic(p, [v](unsigned o) { return o + v; }, SITE);
}
unsigned long long atomic_add_u64(unsigned long long* p, unsigned long long v) {
  return atomic(p, [v](unsigned long long o) { return o + v; }, SITE);
}
float atomic_add_float(float* p, float v) { return atomic(p, [v](float o) { return o + v; }, SITE); }
double atomic_add_double(double* p, double v) {
  return atomic(p, [v](double o) { return o + v; }, SITE);
}
int atomic_max_int(int* p, int v) { return atomic(p, [v](int o) { return o > v ? o : v; }, SITE); }
int atomic_cas_int(int* p, int compare, int v) {
  return atomic(p, [compare, v](int o) { return o == compare ? v : o; }, SITE);
}
#undef SITE

}  // namespace emu
