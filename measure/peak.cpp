// measure/peak.cpp: see peak.h.
#include "measure/peak.h"
#include <algorithm>
#include <chrono>
#include <cstdio>

namespace paralab {

double measure_peak_tflops(const std::function<void()>& gemm, double flops_per_call,
                           double trial_seconds, int trials, double* worst) {
  using clock = std::chrono::steady_clock;
  gemm();  // warm-up: thread pool start, page faults, caches
  double best = 0, slowest = 1e300;
  for (int t = 0; t < std::max(1, trials); ++t) {
    const auto t0 = clock::now();
    double spent = 0;
    int calls = 0;
    while (calls == 0 || spent < trial_seconds) {
      gemm();
      ++calls;
      spent = std::chrono::duration<double>(clock::now() - t0).count();
    }
    const double rate = flops_per_call * calls / spent / 1e12;
    best = std::max(best, rate);
    slowest = std::min(slowest, rate);
  }
  if (worst) *worst = slowest;
  return best;
}

Peak peak_from_profile(const HardwareProfile& p, Precision precision) {
  // the figure p.peak_tflops(precision) took; one other than the run's own precision says so
  const char* figure = p.peak_figure(precision);
  Peak peak{p.peak_tflops(precision), (p.file.empty() ? p.name : p.file) + ", " + figure};
  if (!p.confirmed) peak.source += ", unconfirmed";
  return peak;
}

Peak resolve_peak(double flag_tflops, const std::string& gpu_name, Precision precision,
                  const std::string& hardware_dir, const std::function<double()>& measure) {
  if (flag_tflops > 0) return {flag_tflops, "flag"};
  std::string why_not;
  if (!gpu_name.empty()) {
    const auto profiles = load_hardware_profiles(hardware_dir);
    if (const HardwareProfile* p = match_hardware_profile(profiles, gpu_name))
      return peak_from_profile(*p, precision);
    why_not = "no profile in " + hardware_dir + " matches '" + gpu_name + "'";
  }
  if (measure) {
    char how[64];
    std::snprintf(how, sizeof how, "measured sgemm, best of %d trials of %.0f ms", kPeakTrials,
                  kPeakTrialSeconds * 1e3);
    Peak peak{measure(), how};
    if (!why_not.empty()) peak.source += "; " + why_not;
    return peak;
  }
  return {0, why_not.empty() ? "unknown: pass --peak-tflops" : why_not + ": pass --peak-tflops"};
}

std::string describe_peak(const Peak& p) {
  if (p.tflops <= 0) return "unknown (" + p.source + ")";
  char buf[160];
  // CPU peaks are small: three significant digits, not two decimals
  std::snprintf(buf, sizeof buf, p.tflops < 10 ? "%.3g TFLOP/s/rank" : "%.2f TFLOP/s/rank",
                p.tflops);
  std::string s = std::string(buf) + " (" + p.source;
  if (p.source.rfind("measured", 0) == 0) {
    std::snprintf(buf, sizeof buf,
                  "; it varies between runs: pass --peak-tflops %.3g to compare MFU across runs",
                  p.tflops);
    s += buf;
  }
  return s + ")";
}

}  // namespace paralab
