// kernels/emulator/kernel_counters.cpp: the counters of kernels/emulator/kernel_counters.h —
// a warp's accesses grouped into requests, each launch's totals, the per-kernel records — and
// the names they carry: the kernel's from the executable's symbol table, a source line's from
// addr2line, registers and shared memory from the nvcc build's ptxas report.
//
// A request is one instruction of one warp: the k-th access a lane made at a given instruction
// (since the warp's last rendezvous) belongs to the same request as every other lane's k-th
// access there, as the lanes of a warp issue an instruction together.
#include "kernels/emulator/kernel_counters.h"

#include <cxxabi.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "kernels/emulator/machine.h"

namespace emu {

void LaunchCounters::add(const LaunchCounters& o) {
  blocks += o.blocks;
  threads += o.threads;
  barriers += o.barriers;
  mma += o.mma;
  tensor_flops += o.tensor_flops;
  global_requests += o.global_requests;
  global_sectors += o.global_sectors;
  global_bytes += o.global_bytes;
  global_unique_sectors += o.global_unique_sectors;
  shared_requests += o.shared_requests;
  shared_wavefronts += o.shared_wavefronts;
  shared_ideal_wavefronts += o.shared_ideal_wavefronts;
  shared_bytes += o.shared_bytes;
  ldmatrix += o.ldmatrix;
  shuffles += o.shuffles;
  cp_async_bytes += o.cp_async_bytes;
}

namespace {

// ---- requests -------------------------------------------------------------------------------
struct RequestKey {
  uintptr_t site;
  uint32_t occurrence;
  uint8_t space, write;
  bool operator==(const RequestKey& o) const {
    return site == o.site && occurrence == o.occurrence && space == o.space && write == o.write;
  }
};
struct RequestHash {
  size_t operator()(const RequestKey& k) const {
    return std::hash<uintptr_t>()(k.site) ^ (std::hash<uint32_t>()(k.occurrence) << 1) ^
           ((size_t)k.space << 3) ^ ((size_t)k.write << 4);
  }
};
struct LaneAccess {
  int lane;
  uintptr_t address;
  uint32_t bytes;
};

// Shared-memory passes of one request: lanes in phases of 128 bytes of accesses (32 lanes of
// <= 4 bytes, 16 of 8, 8 of 16), each phase as many passes as its busiest bank has distinct
// words (CUDA C++ Programming Guide, "Shared Memory" of compute capability 5.x and later:
// 32 banks of 4 bytes; a word read by several lanes is broadcast).
uint64_t wavefronts(const LaneAccess* request, int count) {
  uint32_t widest = 0;
  for (int i = 0; i < count; i++) widest = std::max(widest, request[i].bytes);
  const int per_phase = widest <= 4 ? 32 : (widest <= 8 ? 16 : 8);
  uint64_t total = 0;
  for (int phase = 0; phase < 32 / per_phase; phase++) {
    uintptr_t words[32][32];
    int used[32] = {};
    int worst = 0;
    for (int i = 0; i < count; i++) {
      const LaneAccess& a = request[i];
      if (a.lane / per_phase != phase) continue;
      for (uintptr_t w = a.address / 4; w < (a.address + a.bytes + 3) / 4; w++) {
        const int bank = (int)(w % 32);
        bool seen = false;
        for (int j = 0; j < used[bank] && !seen; j++) seen = words[bank][j] == w;
        if (!seen && used[bank] < 32) words[bank][used[bank]++] = w;
        worst = std::max(worst, used[bank]);
      }
    }
    total += worst;
  }
  return total;
}

// The distinct 32-byte sectors a launch touched in global memory: open addressing, kept for the
// process and emptied per launch.
class SectorSet {
 public:
  void clear() {
    if (count_ > 0) std::fill(slots_.begin(), slots_.end(), kEmpty);
    count_ = 0;
  }
  void insert(uint64_t sector) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    size_t i = hash(sector) & (slots_.size() - 1);
    while (slots_[i] != kEmpty) {
      if (slots_[i] == sector) return;
      i = (i + 1) & (slots_.size() - 1);
    }
    slots_[i] = sector;
    count_++;
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static size_t hash(uint64_t x) { return (size_t)(x * 0x9e3779b97f4a7c15ull >> 17); }
  void grow() {
    std::vector<uint64_t> old = std::move(slots_);
    slots_.assign(std::max<size_t>(1024, 2 * old.size()), kEmpty);
    count_ = 0;
    for (uint64_t s : old)
      if (s != kEmpty) insert(s);
  }
  std::vector<uint64_t> slots_;
  size_t count_ = 0;
};
SectorSet& launch_sectors() {
  static SectorSet* s = new SectorSet();
  return *s;
}

// One request of a warp: count it into the launch and the block.
void count_request(Block& block, Space space, const LaneAccess* request, int count) {
  LaunchCounters& c = current_launch()->counters;
  uint64_t bytes = 0;
  for (int i = 0; i < count; i++) bytes += request[i].bytes;
  if (space == Space::Global) {
    uint64_t sectors[256];
    int n = 0;
    for (int i = 0; i < count; i++)
      for (uint64_t s = request[i].address / 32;
           s <= (request[i].address + request[i].bytes - 1) / 32 && n < 256; s++)
        sectors[n++] = s;
    std::sort(sectors, sectors + n);
    const int distinct = (int)(std::unique(sectors, sectors + n) - sectors);
    c.global_requests++;
    c.global_sectors += distinct;
    c.global_bytes += bytes;
    block.work.global_sectors += distinct;
    for (int i = 0; i < distinct; i++) launch_sectors().insert(sectors[i]);
  } else {
    const uint64_t passes = wavefronts(request, count);
    c.shared_requests++;
    c.shared_wavefronts += passes;
    c.shared_ideal_wavefronts += std::max<uint64_t>(1, (bytes + 127) / 128);
    c.shared_bytes += bytes;
    block.work.shared_wavefronts += passes;
  }
}

// A warp whose lanes ran the same instructions (the common case): access i of every lane is
// one request.
bool converged(const Block& block, int first, int last, size_t* length) {
  const std::vector<Access>* reference = nullptr;
  for (int t = first; t < last; t++) {
    const std::vector<Access>& log = block.lanes[t].log;
    if (log.empty()) continue;
    if (reference == nullptr) {
      reference = &log;
      continue;
    }
    if (log.size() != reference->size()) return false;
    for (size_t i = 0; i < log.size(); i++)
      if (log[i].site != (*reference)[i].site || log[i].space != (*reference)[i].space ||
          log[i].write != (*reference)[i].write)
        return false;
  }
  *length = reference == nullptr ? 0 : reference->size();
  return true;
}

// ---- names ------------------------------------------------------------------------------------
std::string demangled(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                          std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(mangled);
}
// "ns::kernel<64>(float*, int)" -> "ns::kernel<64>": the last top-level parenthesis group.
std::string without_parameters(const std::string& name) {
  int depth = 0;
  for (size_t i = name.size(); i-- > 0;) {
    if (name[i] == ')') depth++;
    if (name[i] == '(' && --depth == 0) return name.substr(0, i);
  }
  return name;
}

uintptr_t load_base() {
  static uintptr_t base = [] {
    uintptr_t b = 0;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) -> int {
          *static_cast<uintptr_t*>(out) = info->dlpi_addr;
          return 1;
        },
        &b);
    return b;
  }();
  return base;
}

// The executable's function symbols (its .symtab: local ones too, which is where a kernel in an
// anonymous namespace is), sorted by address.
struct Symbol {
  uintptr_t address, size;
  std::string name;
};
const std::vector<Symbol>& symbols() {
  static std::vector<Symbol>* table = [] {
    auto* out = new std::vector<Symbol>();
    std::ifstream f("/proc/self/exe", std::ios::binary);
    std::string elf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (elf.size() < sizeof(Elf64_Ehdr)) return out;
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(elf.data());
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(elf.data() + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
      if (sh[i].sh_type != SHT_SYMTAB) continue;
      const char* strings = elf.data() + sh[sh[i].sh_link].sh_offset;
      const auto* sym = reinterpret_cast<const Elf64_Sym*>(elf.data() + sh[i].sh_offset);
      for (size_t s = 0; s < sh[i].sh_size / sizeof(Elf64_Sym); s++)
        if (ELF64_ST_TYPE(sym[s].st_info) == STT_FUNC && sym[s].st_value != 0)
          out->push_back(Symbol{sym[s].st_value, sym[s].st_size, strings + sym[s].st_name});
    }
    std::sort(out->begin(), out->end(),
              [](const Symbol& a, const Symbol& b) { return a.address < b.address; });
    return out;
  }();
  return *table;
}

// Registers, static shared memory and local memory per kernel, sm_90, from the nvcc build's
// ptxas reports (kernel_resources.txt beside this binary: "mangled registers smem local").
struct Resources {
  int registers, shared, local;
};
const std::map<std::string, Resources>& resources() {
  static std::map<std::string, Resources>* table = [] {
    auto* out = new std::map<std::string, Resources>();
    char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return out;
    path[n] = 0;
    std::string file(path);
    file = file.substr(0, file.rfind('/') + 1) + "kernel_resources.txt";
    std::ifstream in(file);
    std::string mangled;
    Resources r;
    while (in >> mangled >> r.registers >> r.shared >> r.local)
      (*out)[without_parameters(demangled(mangled.c_str()))] = r;
    return out;
  }();
  return *table;
}

// ---- the records --------------------------------------------------------------------------------
std::vector<KernelRecord>& records() {
  static std::vector<KernelRecord>* r = new std::vector<KernelRecord>();
  return *r;
}
bool g_record_launches = false;

}  // namespace

namespace {
// The function symbol holding an address, demangled, without its parameters.
std::string symbol_name(const void* function) {
  const uintptr_t a = (uintptr_t)function - load_base();
  const std::vector<Symbol>& table = symbols();
  auto it = std::upper_bound(table.begin(), table.end(), a,
                             [](uintptr_t x, const Symbol& s) { return x < s.address; });
  if (it != table.begin() && a < std::prev(it)->address + std::max<uintptr_t>(std::prev(it)->size, 1))
    return without_parameters(demangled(std::prev(it)->name.c_str()));
  char buf[32];
  std::snprintf(buf, sizeof buf, "kernel at %p", function);
  return buf;
}
}  // namespace

std::string kernel_name_of(const void* function) {
  static std::unordered_map<const void*, std::string>* names =
      new std::unordered_map<const void*, std::string>();
  auto hit = names->find(function);
  if (hit != names->end()) return hit->second;
  return (*names)[function] = symbol_name(function);
}

// "flash_mma.cuh:88 (in flash_mma_forward.cu:140)": the innermost source line of an
// instruction outside the emulator's own headers and, when that was inlined, the line of the
// function it was inlined into.
std::string site_name(uintptr_t site) {
  static std::map<uintptr_t, std::string>* cache = new std::map<uintptr_t, std::string>();
  auto hit = cache->find(site);
  if (hit != cache->end()) return hit->second;
  char command[256];
  std::snprintf(command, sizeof command, "addr2line -e /proc/%d/exe -i 0x%lx 2>/dev/null",
                (int)getpid(), (unsigned long)(site - 1 - load_base()));
  std::vector<std::string> lines;  // innermost first
  if (FILE* p = popen(command, "r")) {
    char line[1024];
    while (std::fgets(line, sizeof line, p)) {
      std::string s(line);
      while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
      const size_t paren = s.find(" (");
      if (paren != std::string::npos) s = s.substr(0, paren);
      if (s.find("kernels/emulator/") != std::string::npos || s.find("??") == 0) continue;
      const size_t slash = s.rfind('/');
      lines.push_back(slash == std::string::npos ? s : s.substr(slash + 1));
    }
    pclose(p);
  }
  std::string name;
  if (lines.empty()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "pc 0x%lx", (unsigned long)(site - load_base()));
    name = buf;
  } else {
    name = lines[0];
    if (lines.size() > 1 && lines.back() != lines[0]) name += " (in " + lines.back() + ")";
  }
  (*cache)[site] = name;
  return name;
}

void flush_warp_log(Block& block, int warp) {
  const int first = warp * 32, last = std::min<int>(first + 32, (int)block.lanes.size());
  size_t length = 0;
  LaneAccess request[32];
  if (converged(block, first, last, &length)) {
    for (size_t i = 0; i < length; i++) {
      int n = 0;
      Space space = Space::Global;
      for (int t = first; t < last; t++) {
        const std::vector<Access>& log = block.lanes[t].log;
        if (log.empty()) continue;
        request[n++] = LaneAccess{t - first, log[i].address, log[i].bytes};
        space = log[i].space;
      }
      count_request(block, space, request, n);
    }
  } else {  // diverged lanes: the k-th access of each lane at one instruction is one request
    std::unordered_map<RequestKey, std::vector<LaneAccess>, RequestHash> requests;
    std::vector<RequestKey> order;
    for (int t = first; t < last; t++) {
      std::unordered_map<RequestKey, uint32_t, RequestHash> seen;
      for (const Access& a : block.lanes[t].log) {
        RequestKey key{a.site, 0, (uint8_t)a.space, (uint8_t)a.write};
        key.occurrence = seen[key]++;
        auto it = requests.find(key);
        if (it == requests.end()) {
          order.push_back(key);
          it = requests.emplace(key, std::vector<LaneAccess>()).first;
        }
        it->second.push_back(LaneAccess{t - first, a.address, a.bytes});
      }
    }
    for (const RequestKey& key : order) {
      const std::vector<LaneAccess>& r = requests[key];
      count_request(block, (Space)key.space, r.data(), (int)r.size());
    }
  }
  for (int t = first; t < last; t++) block.lanes[t].log.clear();
}

void block_finished(Launch& launch, Block& block) {
  launch.counters.blocks++;
  launch.counters.threads += block.lanes.size();
  if (g_record_launches) launch.block_work.push_back(block.work);
}

void launch_finished(Launch& launch, const SharedArena& arena) {
  launch.counters.global_unique_sectors = launch_sectors().size();
  launch_sectors().clear();
  if (launch.kernel == nullptr) return;  // refused before any thread entered it
  std::vector<KernelRecord>& all = records();
  auto it = std::find_if(all.begin(), all.end(),
                         [&](const KernelRecord& r) { return r.address == launch.kernel; });
  if (it == all.end()) {
    KernelRecord r;
    r.name = launch.kernel_name;
    r.address = launch.kernel;
    const char* slash = std::strrchr(launch.site.file, '/');
    r.site = std::string(slash ? slash + 1 : launch.site.file) + ":" + std::to_string(launch.site.line);
    auto res = resources().find(r.name);
    if (res != resources().end()) {
      r.registers = res->second.registers;
      r.static_shared = res->second.shared;
      r.local_bytes = res->second.local;
    }
    all.push_back(r);
    it = all.end() - 1;
  }
  it->launches++;
  it->totals.add(launch.counters);
  it->host_seconds += launch.host_seconds;
  if (g_record_launches) {
    LaunchRecord rec;
    rec.blocks = launch.counters.blocks;
    const dim3 b = launch.config.block;
    rec.threads_per_block = b.x * b.y * b.z;
    rec.dynamic_shared = launch.config.shared_bytes;
    rec.static_shared = arena.static_end - arena.static_begin;
    rec.block_work = std::move(launch.block_work);
    rec.counters = launch.counters;
    it->records.push_back(std::move(rec));
  }
}

void library_call(const std::string& name, double flops, double bytes) {
  std::vector<KernelRecord>& all = records();
  auto it = std::find_if(all.begin(), all.end(),
                         [&](const KernelRecord& r) { return r.library && r.name == name; });
  if (it == all.end()) {
    KernelRecord r;
    r.name = name;
    r.library = true;
    all.push_back(r);
    it = all.end() - 1;
  }
  it->launches++;
  it->totals.tensor_flops += (uint64_t)flops;
  it->totals.global_bytes += (uint64_t)bytes;
}

std::vector<KernelRecord> kernel_records() { return records(); }

void reset_kernel_records() { records().clear(); }
bool g_count_requests = false;
void record_launches(bool on) { g_record_launches = g_count_requests = on; }

}  // namespace emu
