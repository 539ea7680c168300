// kernels/emulator/race_check.cpp: racecheck (kernels/emulator/race_check.h says what it
// holds and reports).
#include "kernels/emulator/race_check.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace emu {

namespace {

constexpr uint16_t kNone = 0xffff;

// What one shared byte saw in its block's current barrier period.
struct Shadow {
  uint64_t write_interval = 0, read_interval = 0;
  uintptr_t write_site = 0, read_site = 0, read2_site = 0;
  uint64_t write_syncwarps = 0, read_syncwarps = 0, read2_syncwarps = 0;
  uint16_t writer = kNone, reader = kNone, reader2 = kNone;
};

std::vector<Shadow>& shadow() {
  static std::vector<Shadow>* s = new std::vector<Shadow>();
  return *s;
}

// Pairs of source lines already reported in this launch.
std::set<std::pair<uintptr_t, uintptr_t>>& reported() {
  static std::set<std::pair<uintptr_t, uintptr_t>>* r = new std::set<std::pair<uintptr_t, uintptr_t>>();
  return *r;
}
const Launch* g_reported_launch = nullptr;

std::string thread_of(const Block& block, uint16_t tid) {
  const uint3 i = block.lanes[tid].index;
  return "thread (" + std::to_string(i.x) + "," + std::to_string(i.y) + "," + std::to_string(i.z) +
         ")";
}

// Which variable (or the dynamic region) holds a shared offset, for the report.
std::string located(const Block& block, size_t offset) {
  const SharedArena& arena = *block.shared;
  if (offset < arena.dynamic_bytes)
    return "dynamic shared memory + " + std::to_string(offset);
  for (const SharedArena::Variable& v : arena.variables)
    if (offset >= v.offset && offset < v.offset + v.bytes)
      return std::string("__shared__ ") + v.declared->name + " + " + std::to_string(offset - v.offset);
  return "shared offset " + std::to_string(offset);
}

void hazard(const Block& block, const char* kind, size_t offset, uint16_t first,
            uintptr_t first_site, const char* first_did, const Lane& second, uintptr_t second_site,
            const char* second_did) {
  Launch& launch = *current_launch();
  if (g_reported_launch != &launch) {
    reported().clear();
    g_reported_launch = &launch;
  }
  if (!reported().insert({first_site, second_site}).second) return;
  EmulatorCode inside;
  const bool same_warp = first / 32 == second.tid / 32;
  fail("racecheck",
       std::string(kind) + " hazard on " + located(block, offset) + " in block (" +
           std::to_string(block.index.x) + "," + std::to_string(block.index.y) + "," +
           std::to_string(block.index.z) + "): " + thread_of(block, first) + " " + first_did +
           " at " + site_name(first_site) + ", " + thread_of(block, (uint16_t)second.tid) + " " +
           second_did + " at " + site_name(second_site) + ", with no __syncthreads between" +
           (same_warp ? " and no __syncwarp (one warp)" : ""),
       cudaErrorLaunchFailure, false);
}

}  // namespace

void race_shared_access(const Lane& lane, const Block& block, size_t offset, size_t bytes,
                        bool write, uintptr_t site) {
  std::vector<Shadow>& cells = shadow();
  if (cells.size() < offset + bytes) cells.resize(std::max(offset + bytes, 2 * cells.size()));
  const uint64_t now = block.interval;
  const uint16_t me = (uint16_t)lane.tid;
  const uint64_t syncwarps = block.warps[lane.warp].syncwarps;
  // Whether an access of thread `other` (at its warp's syncwarp count `then`) in this period is
  // unordered with this one.
  auto unordered = [&](uint16_t other, uint64_t then) {
    if (other == kNone || other == me) return false;
    return !(other / 32 == me / 32 && syncwarps > then);
  };
  for (size_t i = offset; i < offset + bytes; i++) {
    Shadow& s = cells[i];
    if (s.write_interval == now && unordered(s.writer, s.write_syncwarps)) {
      hazard(block, write ? "write-after-write" : "read-after-write", i, s.writer, s.write_site,
             "wrote", lane, site, write ? "writes" : "reads");
      break;
    }
    if (write && s.read_interval == now) {
      if (unordered(s.reader, s.read_syncwarps)) {
        hazard(block, "write-after-read", i, s.reader, s.read_site, "read", lane, site, "writes");
        break;
      }
      if (unordered(s.reader2, s.read2_syncwarps)) {
        hazard(block, "write-after-read", i, s.reader2, s.read2_site, "read", lane, site,
               "writes");
        break;
      }
    }
  }
  for (size_t i = offset; i < offset + bytes; i++) {
    Shadow& s = cells[i];
    if (write) {
      s.write_interval = now;
      s.writer = me;
      s.write_site = site;
      s.write_syncwarps = syncwarps;
    } else if (s.read_interval != now) {
      s.read_interval = now;
      s.reader = me;
      s.read_site = site;
      s.read_syncwarps = syncwarps;
      s.reader2 = kNone;
    } else if (s.reader != me && s.reader2 == kNone) {
      s.reader2 = me;
      s.read2_site = site;
      s.read2_syncwarps = syncwarps;
    }
  }
}

void race_new_interval(Block& block) {
  for (Lane& lane : block.lanes)
    for (size_t c = lane.async_done; c < lane.async_copies.size(); c++) {
      const AsyncCopy& copy = lane.async_copies[c];
      race_shared_access(lane, block, (uintptr_t)copy.dst - (uintptr_t)block.shared->base,
                         copy.bytes, true, copy.site);
    }
}

}  // namespace emu
