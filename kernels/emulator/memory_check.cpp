// kernels/emulator/memory_check.cpp: memcheck and the memory it checks against
// (kernels/emulator/memory_check.h says what is checked).
#include "kernels/emulator/memory_check.h"

#include <link.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "kernels/emulator/device.h"
#include "kernels/emulator/race_check.h"

namespace emu {

namespace {

std::map<uintptr_t, Allocation>& allocations() {
  static std::map<uintptr_t, Allocation>* all = new std::map<uintptr_t, Allocation>();
  return *all;
}
uint64_t g_serial = 0;

// The executable's own read-only segments: code and constants the compiler may read from (a
// table it made of a switch, say). Its writable data (a host array) is no memory of the device.
struct Image {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  Image() {
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* self) -> int {
          Image* image = static_cast<Image*>(self);
          for (int i = 0; i < info->dlpi_phnum; i++) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W)) continue;
            const uintptr_t low = info->dlpi_addr + ph.p_vaddr;
            image->ranges.push_back({low, low + ph.p_memsz});
          }
          return 1;  // the first object is the executable
        },
        this);
  }
  bool contains(uintptr_t a) const {
    for (const auto& r : ranges)
      if (a >= r.first && a < r.second) return true;
    return false;
  }
};
const Image& image() {
  static Image* i = new Image();
  return *i;
}

std::string hex(uintptr_t a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%lx", (unsigned long)a);
  return buf;
}

// Where an access of `bytes` at `a` lies relative to the allocations: past the end of one, or
// before one.
std::string nearest(uintptr_t a, size_t bytes) {
  auto& all = allocations();
  auto above = all.upper_bound(a);
  std::string s;
  if (above != all.begin()) {
    const Allocation& below = std::prev(above)->second;
    s = "bytes [" + std::to_string(a - below.base) + ", " + std::to_string(a - below.base + bytes) +
        ") of a " + std::to_string(below.bytes) + "-byte allocation (#" +
        std::to_string(below.serial) + "): " + std::to_string(a + bytes - below.base - below.bytes) +
        " bytes past its end";
  }
  if (above != all.end() && (s.empty() || above->first - a < 4096))
    s += std::string(s.empty() ? "" : "; ") + std::to_string(above->first - a) +
         " bytes before a " + std::to_string(above->second.bytes) + "-byte allocation (#" +
         std::to_string(above->second.serial) + ")";
  return s.empty() ? "no allocation is near" : s;
}

std::string access_text(uint32_t bytes, bool write, const char* space, uintptr_t a) {
  return std::string("invalid ") + space + (write ? " write" : " read") + " of " +
         std::to_string(bytes) + " bytes at " + hex(a);
}

bool misaligned(uintptr_t a, uint32_t bytes) {
  return (bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16) && (a & (bytes - 1)) != 0;
}

void shared_access(Lane& lane, Block& block, size_t offset, uint32_t bytes, bool write,
                   uintptr_t site, int flags) {
  const SharedArena& arena = *block.shared;
  if (!arena.inside(offset, bytes)) {
    EmulatorCode inside;
    fail("memcheck",
         access_text(bytes, write, "__shared__", (uintptr_t)arena.base + offset) + " (offset " +
             std::to_string(offset) + "; the launch has " + std::to_string(arena.dynamic_bytes) +
             " dynamic bytes and " + std::to_string(arena.variables.size()) +
             " __shared__ variables) by " + where(lane) + " at " + site_name(site),
         cudaErrorIllegalAddress, true);
  }
  if ((flags & kAligned) && misaligned(offset, bytes)) {
    EmulatorCode inside;
    fail("memcheck",
         "misaligned __shared__ access of " + std::to_string(bytes) + " bytes at offset " +
             std::to_string(offset) + " by " + where(lane) + " at " + site_name(site),
         cudaErrorMisalignedAddress, true);
  }
  if (!(flags & kAtomic)) race_shared_access(lane, block, offset, bytes, write, site);
  if (g_count_requests) lane.log.push_back(Access{site, offset, bytes, Space::Shared, write});
}

void global_access(Lane& lane, uintptr_t a, uint32_t bytes, bool write, uintptr_t site,
                   int flags) {
  const Allocation* hit = static_cast<const Allocation*>(lane.last_allocation);
  if (hit == nullptr || a < hit->base || a >= hit->base + hit->bytes) {
    hit = find_allocation(a);
    lane.last_allocation = hit;
  }
  if (hit == nullptr) {
    if (!write && image().contains(a)) return;  // a constant the compiler placed
    EmulatorCode inside;
    fail("memcheck",
         access_text(bytes, write, "global", a) + " by " + where(lane) + " at " +
             site_name(site) + ": " + nearest(a, bytes),
         cudaErrorIllegalAddress, true);
  }
  if (a + bytes > hit->base + hit->bytes) {
    EmulatorCode inside;
    fail("memcheck",
         access_text(bytes, write, "global", a) + " by " + where(lane) + " at " +
             site_name(site) + ": it runs " + std::to_string(a + bytes - hit->base - hit->bytes) +
             " bytes past the end of a " + std::to_string(hit->bytes) + "-byte allocation (#" +
             std::to_string(hit->serial) + ")",
         cudaErrorIllegalAddress, true);
  }
  if ((flags & kAligned) && misaligned(a, bytes)) {
    EmulatorCode inside;
    fail("memcheck",
         "misaligned global access of " + std::to_string(bytes) + " bytes at " + hex(a) +
             " by " + where(lane) + " at " + site_name(site),
         cudaErrorMisalignedAddress, true);
  }
  if (g_count_requests) lane.log.push_back(Access{site, a, bytes, Space::Global, write});
}

}  // namespace

void register_allocation(const void* p, size_t bytes, AllocationKind kind) {
  const uintptr_t a = (uintptr_t)p;
  allocations()[a] = Allocation{a, bytes, kind, ++g_serial};
}

bool unregister_allocation(const void* p) { return allocations().erase((uintptr_t)p) == 1; }

const Allocation* find_allocation(uintptr_t a) {
  auto& all = allocations();
  auto above = all.upper_bound(a);
  if (above == all.begin()) return nullptr;
  const Allocation& below = std::prev(above)->second;
  return a < below.base + below.bytes ? &below : nullptr;
}

std::string device_range_error(const void* p, size_t bytes, const std::string& what) {
  if (bytes == 0) return "";
  const uintptr_t a = (uintptr_t)p;
  const Allocation* hit = find_allocation(a);
  if (hit == nullptr)
    return what + " at " + hex(a) + " (" + std::to_string(bytes) +
           " bytes) is not device memory: " + nearest(a, bytes);
  if (a + bytes > hit->base + hit->bytes)
    return what + " at " + hex(a) + " (" + std::to_string(bytes) + " bytes) runs " +
           std::to_string(a + bytes - hit->base - hit->bytes) + " bytes past the end of a " +
           std::to_string(hit->bytes) + "-byte allocation (#" + std::to_string(hit->serial) + ")";
  return "";
}

void on_access(uintptr_t a, uint32_t bytes, bool write, uintptr_t site, int flags) {
  Lane* lane = g_lane;
  if (lane == nullptr || lane->in_emulator) return;
  if (a >= lane->stack_low && a < lane->stack_high) return;  // local memory
  Block& block = *current_block();
  const size_t offset = a - (uintptr_t)block.shared->base;
  if (offset < SharedArena::kCapacity) {
    shared_access(*lane, block, offset, bytes, write, site, flags);
    return;
  }
  const Launch& launch = *current_launch();
  if (a >= launch.params_low && a < launch.params_high) return;
  global_access(*lane, a, bytes, write, site, flags);
}

// ---- shared memory ---------------------------------------------------------------------------

bool SharedArena::inside(size_t offset, size_t bytes) const {
  if (offset + bytes <= dynamic_bytes) return true;
  for (const Variable& v : variables)
    if (offset >= v.offset && offset + bytes <= v.offset + v.bytes) return true;
  return false;
}

void arena_new_launch(SharedArena& arena, size_t dynamic_bytes) {
  if (arena.base == nullptr) {
    arena.base = static_cast<unsigned char*>(std::aligned_alloc(1024, SharedArena::kCapacity));
    std::memset(arena.base, 0xff, SharedArena::kCapacity);
  }
  arena.dynamic_bytes = dynamic_bytes;
  arena.static_begin = arena.static_end =
      (dynamic_bytes + 15) / 16 * 16 + SharedArena::kRedZone;
  arena.variables.clear();
}

void arena_new_block(SharedArena& arena) {
  std::memset(arena.base, 0xff, arena.static_end);
}

void* shared_variable(const SharedVariable& declared, size_t bytes, size_t align) {
  EmulatorCode inside;
  SharedArena& arena = *current_block()->shared;
  for (const SharedArena::Variable& v : arena.variables)
    if (v.declared == &declared) return arena.base + v.offset;
  // The first thread of the launch to reach the declaration places the variable; every block
  // of the launch finds it at the same offset, as the GPU's static shared memory is.
  const size_t offset = (arena.static_end + std::max<size_t>(align, 16) - 1) /
                        std::max<size_t>(align, 16) * std::max<size_t>(align, 16);
  const size_t total = arena.dynamic_bytes + (offset + bytes - arena.static_begin);
  if (offset + bytes > SharedArena::kCapacity || total > (size_t)device().shared_per_block_optin) {
    fail("memcheck",
         std::string("__shared__ ") + declared.name + " (" + std::to_string(bytes) +
             " bytes) takes the block's shared memory to " + std::to_string(total) +
             " bytes, above the device's " + std::to_string(device().shared_per_block_optin),
         cudaErrorLaunchOutOfResources, true);
  }
  arena.variables.push_back(SharedArena::Variable{&declared, offset, bytes});
  arena.static_end = offset + bytes;
  std::memset(arena.base + offset, 0xff, bytes);
  return arena.base + offset;
}

void* dynamic_shared() { return current_block()->shared->base; }

size_t shared_offset(const void* p) {
  return (uintptr_t)p - (uintptr_t)current_block()->shared->base;
}

}  // namespace emu
