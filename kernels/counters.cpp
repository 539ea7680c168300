// kernels/counters.cpp: the FLOP counter and its labels, the non-GEMM kernel counter and the
// time per phase (kernels/counters.h declares them and says what each counts).
#include "kernels/counters.h"
#include "kernels/dispatch.h"  // twin_for: the timer_* twins
#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace kernels {

// ---- FLOP counter -----------------------------------------------------------------------

static double g_flops = 0.0;
// The phase of the next twin call: what its dispatcher counted (none: nothing to time).
static Phase g_counted = Phase::none;
static const char* g_label = nullptr;  // the innermost live GemmLabel's, null: "other"
static std::vector<std::pair<std::string, GemmCount>> g_counts;  // sorted by label

// The count of the label in force, created (in sorted place) at its first use.
static GemmCount& count_of(const char* label) {
  auto it = g_counts.begin();
  while (it != g_counts.end() && std::strcmp(it->first.c_str(), label) < 0) ++it;
  if (it == g_counts.end() || it->first != label) it = g_counts.insert(it, {label, GemmCount{}});
  return it->second;
}
static GemmCount& current_count() { return count_of(g_label ? g_label : "other"); }

double flop_counter() { return g_flops; }
void reset_flop_counter() { g_flops = 0.0; }
void add_flops(double f) {
  g_flops += f;
  current_count().flops += f;
}
void count_gemm(double flops) {
  add_flops(flops);
  current_count().calls += 1;
  g_counted = Phase::gemm;
}

std::vector<std::pair<std::string, GemmCount>> gemm_counts() { return g_counts; }
void reset_gemm_counts() { g_counts.clear(); }
GemmLabel::GemmLabel(const char* label) : previous_(g_label) { g_label = label; }
GemmLabel::~GemmLabel() { g_label = previous_; }

// ---- kernel counter -----------------------------------------------------------------------

static KernelCount g_kernels;

KernelCount kernel_counts() { return g_kernels; }
void reset_kernel_counts() { g_kernels = KernelCount(); }
void count_kernel(double bytes, int launches) {
  if (bytes <= 0) return;  // nothing to move: the CUDA twin returns without a launch
  g_kernels.launches += launches;
  g_kernels.bytes += bytes;
  if (launches > 0 && g_counted == Phase::none) g_counted = Phase::memory;
}
void count_attention_kernel(int launches) {
  g_kernels.attention_launches += launches;
  g_counted = Phase::attention;
}
void count_routing_copy(double bytes) {
  g_kernels.routing_copies += 1;
  g_kernels.routing_copy_bytes += bytes;
}
void count_moe_permute(int M, int C, bool gates, bool fused, int e) {
  count_kernel(4.0 * M + 2.0 * M * C * e, 1);  // the rows (with the gates when fused)
  if (!gates) return;
  if (fused) count_kernel(8.0 * M, 0);  // inside the same launch
  else count_kernel(12.0 * M, 1);       // a second kernel reads row_pair again
}
void count_moe_unpermute(int N, int C, int k, bool fused, int e) {
  const double NC = (double)N * C;
  if (fused) {
    count_kernel(4.0 * N * k + NC * k * e + NC * e);
    return;
  }
  count_kernel(4.0 * NC);                              // zero the fp32 accumulator
  for (int s = 0; s < k; ++s) count_kernel(4.0 * N + NC * e + 8.0 * NC);  // one slot each
  if (e != 4) count_kernel(6.0 * NC);                  // bf16: round it into out
}

// ---- allocations ---------------------------------------------------------------------------

static AllocationCount g_allocations;

AllocationCount allocation_counts() { return g_allocations; }
void reset_allocation_counts() { g_allocations = AllocationCount(); }
void count_allocation(bool fresh, size_t block_bytes) {
  if (fresh) g_allocations.fresh += 1, g_allocations.fresh_bytes += (double)block_bytes;
  else g_allocations.reused += 1;
}
void count_zero_fill(size_t bytes) { g_allocations.zeroed_bytes += (double)bytes; }

// ---- time per phase ------------------------------------------------------------------------
// Each device has its pool of marks, handed out in order from 0 and reused after every resolve
// or reset; a pair is a timed call waiting to be resolved.

namespace {
struct MarkPair {
  Phase phase;
  const char* label;  // the GEMM label in force (null: "other")
  const char* op;     // the op's name (level 2), null otherwise
  int start;          // the end mark is start + 1
};
int g_timing_level = 1;
std::vector<std::pair<std::string, OpTime>> g_ops;  // level 2, by name
OpTime& op_time_of(const char* op) {
  auto it = std::lower_bound(g_ops.begin(), g_ops.end(), op,
                             [](const std::pair<std::string, OpTime>& e, const char* name) {
                               return e.first.compare(name) < 0;
                             });
  if (it == g_ops.end() || it->first != op) it = g_ops.insert(it, {op, OpTime()});
  return it->second;
}
struct MarkPool {
  int next = 0;
  std::vector<MarkPair> pairs;
};
MarkPool g_pools[2];  // by Device
double g_phase_s[kNumPhases] = {};
bool g_phase_timed[kNumPhases] = {};
Phase g_scope = Phase::none;

MarkPool& pool_of(Device d) { return g_pools[d == Device::CUDA ? 1 : 0]; }

void mark(Device d, int m) {
#ifndef PARALAB_CPU_ONLY
  twin_for(d, timer_mark<Device::CPU>, timer_mark<Device::CUDA>)(m);
#else
  twin_for(d, timer_mark<Device::CPU>)(m);
#endif
}
double seconds_between(Device d, int from, int to) {
#ifndef PARALAB_CPU_ONLY
  return twin_for(d, timer_seconds<Device::CPU>, timer_seconds<Device::CUDA>)(from, to);
#else
  return twin_for(d, timer_seconds<Device::CPU>)(from, to);
#endif
}

// Sums the device's pairs into their phases (and GEMM labels) and frees its marks. The
// pairs were taken in stream order, so once the last end mark is resolved every other one is.
void resolve(Device d) {
  MarkPool& pool = pool_of(d);
  for (int i = (int)pool.pairs.size() - 1; i >= 0; --i) {
    const MarkPair& p = pool.pairs[i];
    const double s = seconds_between(d, p.start, p.start + 1);
    g_phase_s[(int)p.phase] += s;
    g_phase_timed[(int)p.phase] = true;
    if (p.phase == Phase::gemm) count_of(p.label ? p.label : "other").seconds += s;
    if (p.op != nullptr) {
      OpTime& t = op_time_of(p.op);
      t.calls++;
      t.seconds += s;
    }
  }
  pool.pairs.clear();
  pool.next = 0;
}
}  // namespace

PhaseSeconds phase_seconds() {
  resolve(Device::CPU);
  if (!pool_of(Device::CUDA).pairs.empty()) resolve(Device::CUDA);
  auto of = [](Phase p) { return g_phase_timed[(int)p] ? g_phase_s[(int)p] : -1.0; };
  return PhaseSeconds{of(Phase::gemm), of(Phase::attention), of(Phase::memory),
                      of(Phase::optimizer)};
}
void reset_phase_seconds() {
  for (MarkPool& pool : g_pools) pool.pairs.clear(), pool.next = 0;
  g_ops.clear();
  for (int p = 0; p < kNumPhases; ++p) g_phase_s[p] = 0, g_phase_timed[p] = false;
}

PhaseScope::PhaseScope(Phase phase) : previous_(g_scope) { g_scope = phase; }
PhaseScope::~PhaseScope() { g_scope = previous_; }

void set_timing_level(int level) { g_timing_level = level; }
int timing_level() { return g_timing_level; }
std::vector<std::pair<std::string, OpTime>> op_times() { return g_ops; }

double timer_overhead_seconds(Device d) {
  // The two marks past the ones the step has taken (never a timed call's), resolved by nothing.
  const int first = pool_of(d).next, rounds = 400;
  auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  std::vector<double> each;
  for (int r = 0; r < rounds; r++) {
    const double start = now();
    mark(d, first);
    mark(d, first + 1);
    each.push_back(now() - start);
  }
  std::nth_element(each.begin(), each.begin() + rounds / 2, each.end());
  return each[rounds / 2];
}

KernelTimer::KernelTimer(Device d, const char* op) : device_(d) {
  Phase phase = g_counted;
  g_counted = Phase::none;  // consumed: the next call counts its own
  if (phase == Phase::none || g_timing_level == 0) return;
  if (g_scope != Phase::none) phase = g_scope;
  MarkPool& pool = pool_of(d);
  if (pool.next + 2 > kMaxTimerMarks) resolve(d);
  start_ = pool.next;
  pool.next += 2;
  pool.pairs.push_back({phase, g_label, g_timing_level >= 2 ? op : nullptr, start_});
  mark(d, start_);
}
// A call that threw (a CUDA error, say) is not timed: its pair is dropped, and no second
// runtime call is made while the first error unwinds (a throwing destructor would end the
// process before the error's message is printed).
KernelTimer::~KernelTimer() {
  if (start_ < 0) return;
  if (std::uncaught_exceptions() > 0) {
    std::vector<MarkPair>& pairs = pool_of(device_).pairs;
    pairs.erase(std::remove_if(pairs.begin(), pairs.end(),
                               [this](const MarkPair& p) { return p.start == start_; }),
                pairs.end());
    return;
  }
  mark(device_, start_ + 1);
}

}  // namespace kernels
