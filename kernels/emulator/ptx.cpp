// kernels/emulator/ptx.cpp: the PTX instructions of kernels/emulator/ptx.h, as the PTX ISA
// defines them (the fragment tables are written out here from the ISA's text, independently of
// kernels/cuda/mma_layout.h, which the kernels use: tests/test_emulator_ptx.cpp holds the two
// to each other).
#include "kernels/emulator/ptx.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/emulator/kernel_counters.h"
#include "kernels/emulator/machine.h"
#include "kernels/emulator/memory_check.h"
#include "kernels/emulator/race_check.h"

namespace emu {

namespace {

float bf16_value(uint16_t bits) {
  const uint32_t u = (uint32_t)bits << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// binary16 (IEEE-754): the value of a code, and a float rounded to nearest even (the ISA's .rn)
// with overflow to infinity and NaN to the canonical 0x7fff; written from the format's
// definition, in double, apart from paralab's kernels/float16.h (the emulator's tests hold the
// two to each other).
float f16_value(uint16_t bits) {
  const int e = (bits >> 10) & 31, m = bits & 1023;
  double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (float)((bits & 0x8000) ? -v : v);
}
uint16_t round_f16(float f) {
  if (std::isnan(f)) return 0x7fff;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs((double)f);
  if (a == 0) return sign;
  // the quantum: 2^(e - 10) for |f| in [2^e, 2^(e+1)), e >= -14 (below, the subnormals' 2^-24)
  const int e = std::max(std::ilogb(a), -14);
  const double q = std::nearbyint(std::ldexp(a, 10 - e));  // ties to even: the default mode
  const double r = std::ldexp(q, e - 10);
  if (r > 65504.0) return sign | 0x7c00;
  const int re = std::max(std::ilogb(r), -14);
  if (r < std::ldexp(1.0, -14)) return sign | (uint16_t)std::ldexp(r, 24);  // subnormal or 0
  return sign | (uint16_t)(((re + 15) << 10) | ((int)std::ldexp(r, 10 - re) - 1024));
}

uint16_t low_half(uint32_t r) { return (uint16_t)(r & 0xffffu); }
uint16_t high_half(uint32_t r) { return (uint16_t)(r >> 16); }

// Round to nearest, ties to even (PTX ISA, cvt: .rn); NaN to the canonical 0x7fff.
uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return 0x7fff;
  const uint32_t lsb = (u >> 16) & 1u;
  return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

// The shared-memory passes of one phase of a request: the most distinct 4-byte words any of the
// 32 banks serves (a word read by several lanes is broadcast: one pass).
int phase_wavefronts(const size_t* offsets, int count, size_t bytes) {
  uint64_t words[32][8];
  int used[32] = {};
  int worst = 0;
  for (int i = 0; i < count; i++)
    for (size_t w = offsets[i] / 4; w < (offsets[i] + bytes + 3) / 4; w++) {
      const int bank = (int)(w % 32);
      bool seen = false;
      for (int j = 0; j < used[bank]; j++) seen |= words[bank][j] == w;
      if (!seen && used[bank] < 8) words[bank][used[bank]++] = w;
      if (used[bank] > worst) worst = used[bank];
    }
  return worst;
}

size_t shared_offset_checked(Lane& lane, const void* p, size_t bytes, const char* what,
                             uintptr_t site) {
  Block& block = *current_block();
  const size_t offset = (uintptr_t)p - (uintptr_t)block.shared->base;
  if (offset >= SharedArena::kCapacity || !block.shared->inside(offset, bytes))
    fail("memcheck",
         std::string(what) + " of " + std::to_string(bytes) + " bytes at " +
             std::to_string((uintptr_t)p) + ", outside the block's shared memory, by " +
             where(lane) + " at " + site_name(site),
         cudaErrorIllegalAddress, true);
  if (offset % bytes != 0)
    fail("memcheck",
         std::string(what) + ": shared address offset " + std::to_string(offset) + " is not " +
             std::to_string(bytes) + "-byte aligned, by " + where(lane) + " at " + site_name(site),
         cudaErrorMisalignedAddress, true);
  return offset;
}

}  // namespace

// ---- ldmatrix ---------------------------------------------------------------------------------
void ldmatrix_complete(Block& block, int warp, Lane* const (&lanes)[32], bool trans) {
  Launch& launch = *current_launch();
  uint16_t m8[4][8][8];  // matrix, row, element
  size_t offsets[8];
  uint64_t wavefronts = 0;
  for (int m = 0; m < 4; m++) {
    for (int r = 0; r < 8; r++) {
      Lane& owner = *lanes[8 * m + r];
      const void* row = owner.collective.address;
      const size_t offset = shared_offset_checked(owner, row, 16, "ldmatrix row", owner.collective.site);
      race_shared_access(owner, block, offset, 16, false, owner.collective.site);
      std::memcpy(m8[m][r], row, 16);
      offsets[r] = offset;
    }
    wavefronts += phase_wavefronts(offsets, 8, 16);
  }
  for (int l = 0; l < 32; l++)
    for (int m = 0; m < 4; m++) {
      const int a = l / 4, b = 2 * (l % 4);
      const uint16_t lo = trans ? m8[m][b][a] : m8[m][a][b];
      const uint16_t hi = trans ? m8[m][b + 1][a] : m8[m][a][b + 1];
      lanes[l]->collective.out[m] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
  (void)warp;
  launch.counters.ldmatrix++;
  launch.counters.shared_requests++;
  launch.counters.shared_wavefronts += wavefronts;
  launch.counters.shared_ideal_wavefronts += 4;  // 512 bytes
  launch.counters.shared_bytes += 512;
  block.work.shared_wavefronts += wavefronts;
}

// ---- mma.m16n8k16 bf16 or f16 -> fp32 ---------------------------------------------------------
namespace {
bool g_trace_mma = false;
std::vector<MmaTrace>& traces() {
  static std::vector<MmaTrace>* t = new std::vector<MmaTrace>();
  return *t;
}
}  // namespace

void trace_mma(bool on) { g_trace_mma = on; }
std::vector<MmaTrace> mma_traces() {
  std::vector<MmaTrace> out;
  out.swap(traces());
  return out;
}

void mma_complete(Block& block, Lane* const (&lanes)[32]) {
  float A[16][16], B[16][8], C[16][8];
  // the inputs' type: variant 0 bf16, 1 f16 (every lane's the same: warp_collective checks)
  float (*value)(uint16_t) = lanes[0]->collective.variant == 1 ? f16_value : bf16_value;
  for (int l = 0; l < 32; l++) {
    const Collective& c = lanes[l]->collective;
    const int g = l / 4, t = l % 4;
    // A: registers 0..3 at (g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8), two columns each
    const int a_row[4] = {g, g + 8, g, g + 8}, a_col[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int r = 0; r < 4; r++) {
      A[a_row[r]][a_col[r]] = value(low_half(c.in[r]));
      A[a_row[r]][a_col[r] + 1] = value(high_half(c.in[r]));
    }
    // B: register 0 rows 2t, 2t + 1 of column g; register 1 rows 2t + 8, 2t + 9
    B[2 * t][g] = value(low_half(c.in[4]));
    B[2 * t + 1][g] = value(high_half(c.in[4]));
    B[2 * t + 8][g] = value(low_half(c.in[5]));
    B[2 * t + 9][g] = value(high_half(c.in[5]));
    float cf[4];
    std::memcpy(cf, &c.in[6], sizeof cf);
    C[g][2 * t] = cf[0];
    C[g][2 * t + 1] = cf[1];
    C[g + 8][2 * t] = cf[2];
    C[g + 8][2 * t + 1] = cf[3];
  }
  for (int l = 0; l < 32; l++) {
    const int g = l / 4, t = l % 4;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    float d[4];
    for (int e = 0; e < 4; e++) {
      double sum = C[rows[e]][cols[e]];
      for (int k = 0; k < 16; k++) sum += (double)A[rows[e]][k] * (double)B[k][cols[e]];
      d[e] = (float)sum;
    }
    std::memcpy(lanes[l]->collective.out, d, sizeof d);
  }
  if (g_trace_mma && lanes[0]->warp == 0 && block.index.x == 0 && block.index.y == 0 &&
      block.index.z == 0) {
    MmaTrace t;
    for (int l = 0; l < 32; l++) {
      std::memcpy(t.a[l], lanes[l]->collective.in, 16);
      std::memcpy(t.b[l], &lanes[l]->collective.in[4], 8);
      std::memcpy(t.c[l], &lanes[l]->collective.in[6], 16);
      std::memcpy(t.d[l], lanes[l]->collective.out, 16);
    }
    traces().push_back(t);
  }
  Launch& launch = *current_launch();
  launch.counters.mma++;
  launch.counters.tensor_flops += 2 * 16 * 8 * 16;
  block.work.tensor_flops += 2 * 16 * 8 * 16;
}

// ---- cp.async ---------------------------------------------------------------------------------
void complete_async_copies(Lane& lane, size_t keep, bool everything) {
  size_t upto = lane.async_done;
  if (everything)
    upto = lane.async_copies.size();
  else if (lane.group_end.size() > keep)
    upto = lane.group_end[lane.group_end.size() - 1 - keep];
  Block& block = *current_block();
  for (size_t i = lane.async_done; i < upto; i++) {
    const AsyncCopy& c = lane.async_copies[i];
    if (c.src_bytes > 0) std::memcpy(c.dst, c.src, c.src_bytes);
    std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);
    race_shared_access(lane, block, (uintptr_t)c.dst - (uintptr_t)block.shared->base, c.bytes,
                       true, c.site);
  }
  if (upto > lane.async_done) lane.async_done = upto;
}

namespace ptx {

void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans) {
  EmulatorCode inside;
  Collective c{};
  c.kind = CollectiveKind::Ldmatrix;
  c.mask = 0xffffffffu;
  c.variant = trans ? 1 : 0;
  c.width = 32;
  c.site = (uintptr_t)__builtin_return_address(0);
  c.address = row;
  warp_collective(c);
  std::memcpy(r, c.out, sizeof r);
}

namespace {
void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int type) {
  Collective c{};
  c.kind = CollectiveKind::Mma;
  c.variant = type;
  c.mask = 0xffffffffu;
  c.width = 32;
  c.site = (uintptr_t)__builtin_return_address(0);
  std::memcpy(c.in, a, 16);
  c.in[4] = b0;
  c.in[5] = b1;
  std::memcpy(&c.in[6], d, 16);
  warp_collective(c);
  std::memcpy(d, c.out, 16);
}
}  // namespace

void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  EmulatorCode inside;
  mma(d, a, b0, b1, 0);
}
void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  EmulatorCode inside;
  mma(d, a, b0, b1, 1);
}

uint32_t cvt_bf16x2(float a, float b) {
  return ((uint32_t)round_bf16(a) << 16) | (uint32_t)round_bf16(b);
}
uint32_t cvt_f16x2(float a, float b) {
  return ((uint32_t)round_f16(a) << 16) | (uint32_t)round_f16(b);
}

void cp_async(void* dst, const void* src, uint32_t bytes, uint32_t src_bytes) {
  EmulatorCode inside;
  Lane& lane = *g_lane;
  const uintptr_t site = (uintptr_t)__builtin_return_address(0);
  if (bytes != 4 && bytes != 8 && bytes != 16)
    fail("memcheck", "cp.async of " + std::to_string(bytes) + " bytes (4, 8 or 16)",
         cudaErrorIllegalAddress, true);
  const size_t offset = shared_offset_checked(lane, dst, bytes, "cp.async destination", site);
  if ((uintptr_t)src % bytes != 0)
    fail("memcheck",
         "cp.async source " + std::to_string((uintptr_t)src) + " is not " + std::to_string(bytes) +
             "-byte aligned, by " + where(lane) + " at " + site_name(site),
         cudaErrorMisalignedAddress, true);
  if (src_bytes > bytes)
    fail("memcheck", "cp.async src-size " + std::to_string(src_bytes) + " above its " +
                         std::to_string(bytes) + " bytes",
         cudaErrorIllegalAddress, true);
  if (src_bytes > 0) {
    const std::string bad = device_range_error(src, src_bytes, "cp.async source");
    if (!bad.empty())
      fail("memcheck", bad + ", by " + where(lane) + " at " + site_name(site),
           cudaErrorIllegalAddress, true);
    if (g_count_requests) lane.log.push_back(Access{site, (uintptr_t)src, src_bytes, Space::Global, false});
  }
  Block& block = *current_block();
  race_shared_access(lane, block, offset, bytes, true, site);
  if (g_count_requests) lane.log.push_back(Access{site, offset, bytes, Space::Shared, true});
  lane.async_copies.push_back(AsyncCopy{dst, src, bytes, src_bytes, site});
  current_launch()->counters.cp_async_bytes += bytes;
}

void cp_async_commit() {
  EmulatorCode inside;
  Lane& lane = *g_lane;
  lane.group_end.push_back(lane.async_copies.size());
}

void cp_async_wait(int groups_in_flight) {
  EmulatorCode inside;
  complete_async_copies(*g_lane, (size_t)groups_in_flight, false);
}

}  // namespace ptx
}  // namespace emu
