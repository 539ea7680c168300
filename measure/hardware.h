// measure/hardware.h: a hardware profile, the machine facts the plan's time model and fit
// check read (configs/hardware/*.toml; `trainer --benchmark --benchmark-save FILE.toml`
// writes one from measurements).
//
// A profile is one device kind and the node it sits in. Each figure says where it comes
// from: a vendor datasheet (the file's comments name it), a measurement (the benchmark's
// file), or an assumption; the keys listed in `assumed` are assumptions and every report
// that uses them says so. `confirmed = false` marks a profile whose datasheet figures are
// not confirmed against a vendor document (H20): its peak prints as "unconfirmed".
//
// Units: TFLOP/s = 1e12 FLOP/s, dense (half the datasheet's "with sparsity" figure);
// GB/s = 1e9 B/s; memory_gib in GiB (2^30 B: an "80GB" H100 shows 81559 MiB in nvidia-smi,
// of which the driver keeps a little); microseconds for latencies.
//
// The time model (plan/time_model.h) uses:
//   GEMM           max(F / (peak x eff(F)), bytes / HBM) + launch, with the efficiency curve
//                  eff(F) = gemm_efficiency x F / (F + gemm_half_gflop x 1e9)
//                  (F the call's FLOPs: small GEMMs reach less of the peak)
//   attention      flash kernels: F / (peak x attention_efficiency) + launch
//   memory-bound   bytes / (HBM x memory_efficiency) + launch
//   collective     latency + bus bytes / link bandwidth (nccl-tests' bus-bandwidth
//                  convention), the link intra_node_gbs when the group fits in a node of
//                  gpus_per_node ranks, else inter_node_gbs and inter_node_latency_us
//   CPU offload    a copy pcie_latency_us + bytes / pcie_gbs; the host AdamW elements /
//                  (host_adam_params_per_s x host_cores / gpus_per_node)
//
// defines: HardwareProfile, parse_hardware_profile, write_hardware_profile,
//          load_hardware_profiles, find_hardware_profile, match_hardware_profile
#pragma once
#include <string>
#include <vector>

namespace paralab {

// The element type a run's parameters, gradients, activations and GEMM inputs are stored in
// (TrainConfig::precision: --bf16, --fp16, else fp32); the tensor peak a run's GEMMs reach.
enum class Precision { FP32, BF16, FP16 };
const char* precision_name(Precision p);  // "fp32", "bf16", "fp16"

struct HardwareProfile {
  std::string file;                // path it was read from ("" when built in memory)
  std::string name;                // "H100 SXM"
  std::vector<std::string> match;  // whole words of the CUDA device name
  bool confirmed = true;           // false: datasheet figures not confirmed (H20)
  std::string source;              // where the figures come from, one line
  // Dense peaks per device, TFLOP/s; 0 = not stated.
  double bf16_tflops = 0, fp16_tflops = 0, fp8_tflops = 0;
  double fp32_tflops = 0;          // what fp32 training's GEMMs reach (CUDA cores; on the
                                   // CPU backend the benchmark's sgemm per rank)
  // Memory per device.
  double memory_gib = 0;             // capacity; 0 = not stated (no fit check)
  double memory_bandwidth_gbs = 0;   // HBM (CPU: one rank's streaming bandwidth)
  // The node and its links.
  int gpus_per_node = 8;
  std::string intra_node_link;       // "NVLink 4", "PCIe 4", "shared memory"
  double intra_node_gbs = 0;         // per device, per direction: a collective's bus
                                     // bandwidth ceiling inside a node
  double inter_node_gbs = 0;         // per device, per direction, across nodes
  // Latencies, microseconds.
  double launch_overhead_us = 0;     // one kernel launch (CPU: one call of a tiny kernel)
  double collective_latency_us = 0;  // α of one collective inside a node
  double inter_node_latency_us = 0;  // α of one collective across nodes
  // Achieved fractions (the benchmark measures them; else assumptions).
  double gemm_efficiency = 0.75;     // of the dense peak, for large GEMMs
  double gemm_half_gflop = 1.0;      // the GEMM size (GFLOP per call) reaching half of it
  double attention_efficiency = 0.4; // flash attention kernels, of the dense peak
  double memory_efficiency = 0.8;    // elementwise kernels, of memory_bandwidth_gbs
  // Storage: what one node writes a checkpoint at, GB/s; 0 = not stated (no save time).
  double storage_write_gbs = 0;
  // The host side, for CPU offload (parallel/offload.h); 0 = not stated (not projected, not
  // checked). pcie_gbs: one GPU's link to host memory, per direction (the CPU backend: one
  // rank's memcpy); pcie_latency_us: one copy's fixed cost; host_memory_gib: the node's RAM;
  // host_cores: the node's cores; host_adam_params_per_s: parameters per second one core's
  // AdamW updates (model/host_adamw.h; --benchmark measures it).
  double pcie_gbs = 0;
  double pcie_latency_us = 0;
  double host_memory_gib = 0;
  double host_cores = 0;
  double host_adam_params_per_s = 0;
  // The GPU's streaming multiprocessors, for one kernel's projected time from its counters
  // (plan/kernel_time.h; the emulated device's kernel table); 0 = not stated (no projection).
  // sm_clock_ghz: the clock the dense tensor peak is quoted at; mma_sync_tflops: the dense bf16
  // rate mma.sync reaches (all of it before Hopper; on Hopper only wgmma reaches the peak);
  // compute_capability: 9.0, 8.0, ... (the per-SM limits of occupancy: plan/kernel_time.cpp).
  double sm_count = 0;
  double sm_clock_ghz = 0;
  double mma_sync_tflops = 0;
  double compute_capability = 0;
  std::vector<std::string> assumed;  // keys that are assumptions, not datasheet or measured

  bool is_assumed(const std::string& key) const;
  // The peak a run's GEMMs use: bf16 with --bf16 (fp16 when only it is stated), fp16 with
  // --fp16 (bf16 when only it is stated: the same tensor rate on every NVIDIA part that has
  // both), in either case fp32 when neither is (as in a CPU profile); else fp32 (the 16-bit
  // figure when fp32 is not stated: the caller says so, see peak_from_profile in
  // measure/peak.h). TFLOP/s.
  double peak_tflops(Precision p) const;
  // Which figure peak_tflops(p) took, named for the output: "bf16 dense", or one that is
  // not the run's own precision with the reason, e.g. "fp32 dense (no bf16 figure)".
  const char* peak_figure(Precision p) const;
  // Seconds one GEMM of `flops` FLOPs and `bytes` moved takes (the curve above + launch).
  double gemm_seconds(double flops, double bytes, Precision p) const;
  // The same at a given dense peak (TFLOP/s): the FP8 projection's fp8_tflops
  // (plan/time_model_fp8.h).
  double gemm_seconds_at(double peak_tflops, double flops, double bytes) const;
  // Seconds memory-bound kernels take: bytes at memory_efficiency of the bandwidth, plus one
  // launch_overhead_us per launch.
  double memory_seconds(double bytes, double launches) const;
};

// The flat `key = value` TOML subset the profiles use (strings, numbers, booleans, one-line
// string arrays, # comments). Throws std::runtime_error naming file and line: an unknown
// key, a bad value, a missing name / match / peak.
HardwareProfile parse_hardware_profile(const std::string& text, const std::string& file);
// The profile as a file parse_hardware_profile reads back to the same values; `comment`
// (may be several lines) goes first as # lines (the benchmark: machine, date, command).
std::string write_hardware_profile(const HardwareProfile& p, const std::string& comment);
// Every *.toml in dir, sorted by file name; empty when dir does not exist.
std::vector<HardwareProfile> load_hardware_profiles(const std::string& dir);
// --hardware VALUE: a path (contains '/' or ends in .toml) is read as a file; otherwise a
// profile in dir whose file stem ("h100-sxm") or name ("H100 SXM") equals VALUE,
// case-insensitively. Throws std::runtime_error listing the profiles when none matches.
HardwareProfile find_hardware_profile(const std::string& value, const std::string& dir);
// The profile with the longest `match` pattern found in gpu_name as a whole word
// ("H20" does not match "NVIDIA H200"; "H100 PCIe" beats "H100"); nullptr when none.
const HardwareProfile* match_hardware_profile(const std::vector<HardwareProfile>& profiles,
                                              const std::string& gpu_name);

}  // namespace paralab
