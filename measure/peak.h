// measure/peak.h: the peak FLOP/s of one rank, the denominator of MFU and HFU.
//
// Where it comes from, in order (the report always prints the source):
//   1. --peak-tflops X                                   source "flag"
//   2. the configs/hardware/*.toml profile whose `match` names the GPU; dense figures
//      from vendor datasheets (dense = half the "with sparsity" number; notes/formulas.md).
//      bf16 training uses bf16_tflops; fp32 uses fp32_tflops (CUDA-core fp32) when the
//      profile has it, else the bf16 figure with a note.  source "configs/hardware/<file>"
//   3. a timed GEMM at start-up (the CPU backend): the caller passes the GEMM as a
//      callable, so measure/ needs no GEMM of its own.   source "measured sgemm, ..."
//      A shared CPU makes one timing noisy (0.01-0.07 TFLOP/s per rank were seen between
//      runs of one configuration), so the best of kPeakTrials trials of kPeakTrialSeconds
//      counts (about 0.2 s of start-up), and the header says how to make MFU comparable
//      between runs: pass the printed value back as --peak-tflops.
// A profile with confirmed = false (H20) says "unconfirmed" in the source: the number may
// be wrong, and the output says so rather than print it as fact.
//
// defines: HardwareProfile, Peak, parse_hardware_profile, load_hardware_profiles,
//          match_hardware_profile, measure_peak_tflops, resolve_peak, describe_peak
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace paralab {

struct HardwareProfile {
  std::string file;                // path it was read from
  std::string name;                // "H100 SXM"
  std::vector<std::string> match;  // substrings of the CUDA device name
  double bf16_tflops = 0;          // dense
  double fp32_tflops = 0;          // dense, non-tensor; 0 = not stated
  double memory_bandwidth_gbs = 0; // 0 = not stated
  bool confirmed = true;
};

struct Peak {
  double tflops = 0;   // per rank; 0 = unknown (MFU prints n/a)
  std::string source;  // "flag", "configs/hardware/h200.toml, bf16 dense", "measured sgemm"
};

// Reads the flat `key = value` subset of TOML the profiles use (strings, numbers, booleans,
// one-line string arrays, # comments). Throws std::runtime_error naming file and line.
HardwareProfile parse_hardware_profile(const std::string& text, const std::string& file);
// Every *.toml in dir, sorted by file name; empty when dir does not exist.
std::vector<HardwareProfile> load_hardware_profiles(const std::string& dir);
// The profile with the longest `match` pattern found in gpu_name as a whole word
// ("H20" does not match "NVIDIA H200"; "H100 PCIe" beats "H100"); nullptr when none.
const HardwareProfile* match_hardware_profile(const std::vector<HardwareProfile>& profiles,
                                              const std::string& gpu_name);

constexpr int kPeakTrials = 5;
constexpr double kPeakTrialSeconds = 0.04;

// TFLOP/s of `gemm`, which does flops_per_call FLOPs: one warm-up call, then `trials`
// trials, each of calls until trial_seconds have passed (at least one); a trial's rate is
// its FLOPs over its time, and the best trial counts (a peak: the least disturbed trial).
// worst, when given, gets the slowest trial's rate (the spread the header prints).
double measure_peak_tflops(const std::function<void()>& gemm, double flops_per_call,
                           double trial_seconds = kPeakTrialSeconds, int trials = kPeakTrials,
                           double* worst = nullptr);

// flag_tflops <= 0: not given. gpu_name empty: no GPU. measure may be empty; it returns
// TFLOP/s (e.g. wrapping measure_peak_tflops around the CPU sgemm).
Peak resolve_peak(double flag_tflops, const std::string& gpu_name, bool bf16,
                  const std::string& hardware_dir, const std::function<double()>& measure);

// "989.00 TFLOP/s/rank (configs/hardware/h100-sxm.toml, bf16 dense)"; "unknown (...)";
// a measured peak adds how to fix it: "...; it varies between runs: --peak-tflops 0.0512 ...""
std::string describe_peak(const Peak& p);

}  // namespace paralab
