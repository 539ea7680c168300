// app/benchmark.h: `trainer --benchmark`, the node-acceptance step of a cluster: measure the
// machine before training on it, and write what was measured as a hardware profile
// (measure/hardware.h) that `--plan --hardware FILE.toml` and the training runs' projected
// step time use.
//
// Three files: app/benchmark.cpp measures one rank's compute (GEMM by size and its efficiency
// curve, memory bandwidth, launch overhead, flash attention) and runs the whole;
// app/benchmark_collectives.cpp measures the collectives per group size, as nccl-tests do;
// app/benchmark_report.cpp prints the tables (or --json), names slow ranks' lines and builds the
// profile. The structs below are what a benchmark measures.
//
// defines: run_benchmark, GemmPoint, GemmFit, AttentionShape, ComputeResults, CollectiveRow,
//          BenchmarkReport, benchmark_group_sizes, measure_collectives, collective_tables,
//          benchmark_text, benchmark_json, benchmark_profile, benchmark_profile_comment
#pragma once
#include <cstddef>
#include <string>
#include <vector>
#include "cli/flags.h"
// defines: HardwareProfile
#include "measure/hardware.h"
#include "parallel/comm.h"  // World, CommOp (measure/comm_stats.h)

namespace paralab {

// Every rank of the world takes part; rank 0 prints (and with --benchmark-save writes the
// profile). Returns the exit status.
int run_benchmark(const Options& o, const World& w);

// ---- what is measured ---------------------------------------------------------------------

// One square GEMM size: n x n x n, 2 n^3 FLOPs, the best trial's seconds per call.
struct GemmPoint {
  std::string dtype;  // "fp32", "bf16", "fp8" (per tensor), "fp8-blk" (1 x 128 by 128 x 128)
  int n = 0;
  double flops = 0, seconds = 0;
  double rate() const { return flops / seconds; }  // FLOP/s
};
// rate(F) = R x F / (F + F_half), R = peak x gemm_efficiency (app/benchmark.cpp fits it).
struct GemmFit {
  double rate = 0;        // R, FLOP/s
  double half_flops = 0;  // F_half, FLOPs
};
struct AttentionShape {
  int B = 1, A = 12, S = 256, D = 64;  // batch, heads, sequence, head dim
};

// One rank's compute measurements.
struct ComputeResults {
  double launch_s = 0;                   // per call of a 1-element add
  double timer_pair_s = 0;               // host time of one timed call's pair of marks
                                         // (--timing-log-level 1 and 2: kernels/counters.h)
  std::vector<GemmPoint> gemm;           // fp32 sizes, then bf16 ones (CUDA), then FP8's
  double best_fp32 = 0, best_bf16 = 0;   // FLOP/s
  // The GPU's compute capability (10 major + minor; 0 on the CPU), and FP8's best per-tensor
  // ("fp8") and block-scaled ("fp8-blk") rates, FLOP/s (0: not measured, a GPU before sm_89)
  int compute_capability = 0;
  double best_fp8 = 0, best_fp8_blocks = 0;
  double bw_bytes = 0, bw_seconds = 0;   // out = a + b: bytes per call, seconds per call
  // The trainer's own elementwise kernels (norms, activations, AdamW) on the same buffers:
  // their bytes (kernels::kernel_counts' convention) and seconds per pass.
  double mix_bytes = 0, mix_seconds = 0;
  AttentionShape att;
  std::string att_dtype = "fp32";
  double att_flops = 0, att_seconds = 0; // flash forward + backward, per call
  // CPU offload (parallel/offload.h): copies between the device and pinned host memory of
  // pcie_bytes each way, seconds per copy, a 4-byte copy's seconds (the latency), and the
  // host AdamW's parameters per second on one thread (model/host_adamw.h), fp32.
  double pcie_bytes = 0, d2h_seconds = 0, h2d_seconds = 0, pcie_latency_s = 0;
  double host_adam_rate = 0;
};

// One message size of one operation on one group size, as rank 0's group measured it.
struct CollectiveRow {
  CommOp op = CommOp::ALL_REDUCE;
  int group_size = 0;
  bool in_node = true;     // every member on one host (by hostname)
  double bytes = 0;        // payload S, measure/comm_stats.h's convention
  double time_us = 0;      // per call: the slowest member's, best of the trials
  double algbw_gbs = 0;    // S / time
  double bus_factor = 0;   // bus_factor(op, n)
  double busbw_gbs = 0;    // algbw x bus_factor
};

// What rank 0 reports and saves.
struct BenchmarkReport {
  int ranks = 1, nodes = 1, ranks_per_node = 1;
  std::string device, comm, gpu_name, host, date, command;
  double max_mib = 0;
  const HardwareProfile* base = nullptr;   // the configs/hardware profile matching the GPU
  ComputeResults mine;                     // rank 0's
  std::vector<std::string> hosts;          // per rank
  std::vector<double> rank_gemm, rank_bw;  // per rank: best FLOP/s (the fit's dtype), B/s
  bool fit_bf16 = false;                   // the curve and peak are bf16's (CUDA)
  double peak = 0;                         // FLOP/s the efficiencies are relative to
  std::string peak_source;
  GemmFit fit;
  double gemm_efficiency = 0, attention_efficiency = 0, memory_efficiency = 1;
  double bandwidth = 0;                    // B/s, the median over ranks
  std::vector<CollectiveRow> coll;
  std::vector<std::string> slow;           // one line per slow rank
};

// ---- app/benchmark_collectives.cpp ---------------------------------------------------------

// 2, 4, 8, ... below world, then world itself; empty for a world of 1.
std::vector<int> benchmark_group_sizes(int world);
// Collective over the world: for each group size, groups of consecutive ranks run every
// operation at every size 1 KiB x 4^k <= max_bytes, all groups at once. Returns this rank's
// group's rows. hosts: every rank's hostname.
std::vector<CollectiveRow> measure_collectives(const Options& o, const World& w,
                                               const std::vector<std::string>& hosts,
                                               size_t max_bytes);
// nccl-tests-like tables, one per operation and group size:
//   size (B)  size  count  time (us)  algbw GB/s  busbw GB/s
std::string collective_tables(const std::vector<CollectiveRow>& rows);

// ---- app/benchmark_report.cpp --------------------------------------------------------------

// The compute section, the collective tables and the per-rank table with its verdict.
std::string benchmark_text(const BenchmarkReport& r);
// One JSON object with every measurement (--json); `saved`: the --benchmark-save file or "".
std::string benchmark_json(const BenchmarkReport& r, const std::string& saved);
// The profile --benchmark-save writes, and its # comment (command, machine, tables' summary).
HardwareProfile benchmark_profile(const BenchmarkReport& r);
std::string benchmark_profile_comment(const BenchmarkReport& r, const HardwareProfile& p);

}  // namespace paralab
