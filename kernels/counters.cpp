// kernels/counters.cpp: the FLOP counter and its labels, the non-GEMM kernel counter and the
// GEMM wall time (kernels/counters.h declares them and says what each counts).
#include "kernels/counters.h"
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace kernels {

// ---- FLOP counter -----------------------------------------------------------------------

static double g_flops = 0.0;
static const char* g_label = nullptr;  // the innermost live GemmLabel's, null: "other"
static std::vector<std::pair<std::string, GemmCount>> g_counts;  // sorted by label

// The count of the label in force, created (in sorted place) at its first use.
static GemmCount& current_count() {
  const char* label = g_label ? g_label : "other";
  auto it = g_counts.begin();
  while (it != g_counts.end() && std::strcmp(it->first.c_str(), label) < 0) ++it;
  if (it == g_counts.end() || it->first != label) it = g_counts.insert(it, {label, GemmCount{}});
  return it->second;
}

double flop_counter() { return g_flops; }
void reset_flop_counter() { g_flops = 0.0; }
void add_flops(double f) {
  g_flops += f;
  current_count().flops += f;
}
void count_gemm(double flops) {
  add_flops(flops);
  current_count().calls += 1;
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
}
void count_attention_kernel(int launches) { g_kernels.attention_launches += launches; }
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

// ---- GEMM wall time ----------------------------------------------------------------------

static double g_gemm_seconds = 0.0;
static bool g_gemm_on_cuda = false;  // a CUDA GEMM since the reset: the time is unknown

GemmTimer::GemmTimer(Device d) : start_(std::chrono::steady_clock::now()) {
  if (d == Device::CUDA) g_gemm_on_cuda = true;
}
GemmTimer::~GemmTimer() {
  g_gemm_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double gemm_seconds() { return g_gemm_on_cuda ? -1.0 : g_gemm_seconds; }
void reset_gemm_seconds() {
  g_gemm_seconds = 0.0;
  g_gemm_on_cuda = false;
}

}  // namespace kernels
