// measure/peak.h: the peak FLOP/s of one rank, the denominator of MFU and HFU.
//
// Where it comes from, in order (the report always prints the source):
//   1. --peak-tflops X                                   source "flag"
//   2. the configs/hardware/*.toml profile whose `match` names the GPU; dense figures
//      from vendor datasheets (dense = half the "with sparsity" number; notes/formulas.md).
//      bf16 training uses bf16_tflops, fp16 fp16_tflops; fp32 uses fp32_tflops (CUDA-core
//      fp32) when the profile has it, else the 16-bit figure with a note (peak_tflops,
//      peak_from_profile).                              source "configs/hardware/<file>"
//   3. a timed GEMM at start-up (the CPU backend): the caller passes the GEMM as a
//      callable, so measure/ needs no GEMM of its own.   source "measured sgemm, ..."
//      A shared CPU makes one timing noisy (0.01-0.07 TFLOP/s per rank were seen between
//      runs of one configuration), so the best of kPeakTrials trials of kPeakTrialSeconds
//      counts (about 0.2 s of start-up), and the header says how to make MFU comparable
//      between runs: pass the printed value back as --peak-tflops.
// A profile with confirmed = false (H20) says "unconfirmed" in the source: the number may
// be wrong, and the output says so rather than print it as fact.
//
// The profiles themselves (their file format, parser, matching) live in measure/hardware.h.
//
// defines: Peak, peak_from_profile, measure_peak_tflops, resolve_peak, describe_peak
#pragma once
#include <functional>
#include <string>
#include "measure/hardware.h"  // defines: HardwareProfile, load_hardware_profiles,
                               //          match_hardware_profile

namespace paralab {

struct Peak {
  double tflops = 0;   // per rank; 0 = unknown (MFU prints n/a)
  std::string source;  // "flag", "configs/hardware/h200.toml, bf16 dense", "measured sgemm"
};

constexpr int kPeakTrials = 5;
constexpr double kPeakTrialSeconds = 0.04;

// TFLOP/s of `gemm`, which does flops_per_call FLOPs: one warm-up call, then `trials`
// trials, each of calls until trial_seconds have passed (at least one); a trial's rate is
// its FLOPs over its time, and the best trial counts (a peak: the least disturbed trial).
// worst, when given, gets the slowest trial's rate (the spread the header prints).
double measure_peak_tflops(const std::function<void()>& gemm, double flops_per_call,
                           double trial_seconds = kPeakTrialSeconds, int trials = kPeakTrials,
                           double* worst = nullptr);

// The peak a profile gives a run: p.peak_tflops(precision), and a source naming the file and
// the figure: "configs/hardware/h200.toml, bf16 dense", "..., fp32 dense", "..., bf16 dense (no
// fp32 figure)"; ", unconfirmed" added when !p.confirmed.
Peak peak_from_profile(const HardwareProfile& p, Precision precision);

// flag_tflops <= 0: not given. gpu_name empty: no GPU. measure may be empty; it returns
// TFLOP/s (e.g. wrapping measure_peak_tflops around the CPU sgemm).
Peak resolve_peak(double flag_tflops, const std::string& gpu_name, Precision precision,
                  const std::string& hardware_dir, const std::function<double()>& measure);

// "989.00 TFLOP/s/rank (configs/hardware/h100-sxm.toml, bf16 dense)"; "unknown (...)";
// a measured peak adds how to fix it: "...; it varies between runs: --peak-tflops 0.0512 ...""
std::string describe_peak(const Peak& p);

}  // namespace paralab
