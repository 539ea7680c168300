// app/benchmark_report.cpp: `trainer --benchmark`, what rank 0 prints and saves: the compute
// section, the nccl-tests-like collective tables, the per-rank table and its verdict (text,
// or one JSON object with --json), and the hardware profile of --benchmark-save.
//
// The profile (measure/hardware.h), figure by figure:
//   name, match           "cpu" and [] on the CPU backend (used only through --hardware);
//                         "<matched name> (measured)" and the GPU's words on CUDA
//   peaks                 CPU: fp32_tflops = the best sgemm per rank (median over ranks,
//                         all ranks running at once: they share the cores); CUDA: the matched
//                         profile's datasheet figures (without one, the best measured rate)
//   memory_gib            CUDA: the device's total memory; CPU: MemTotal / ranks on the node
//   memory_bandwidth_gbs  CPU: measured (out = a + b); CUDA: the datasheet HBM figure
//   memory_efficiency     the kernel mix's rate over memory_bandwidth_gbs (app/benchmark.cpp)
//   gpus_per_node         the ranks per node (World::local_size)
//   intra_node_gbs        the largest in-node group's all-reduce busbw at the largest size;
//   collective_latency_us its time at the smallest size
//   inter_node_*          the same for the smallest group that spans nodes; on one node not
//                         measured: copied from the matched profile (CUDA) or set equal to
//                         the in-node figures (CPU), and listed in `assumed`
//   launch, efficiencies  measured (app/benchmark.cpp); each fraction kept in (0, 1], as the
//                         profile's parser requires
//
// defines: benchmark_text, benchmark_json, benchmark_profile, benchmark_profile_comment
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include "app/benchmark.h"
#include "report/text.h"  // strprintf
// defines: JsonWriter
#include "checkpoint/json.h"
#ifndef PARALAB_CPU_ONLY
#include <cuda_runtime_api.h>  // cudaMemGetInfo: the device's total memory
#endif

namespace paralab {
namespace {

// The all-reduce rows of the largest in-node group (in_node) or of the smallest group that
// spans nodes: the largest message's busbw and the smallest's time; false when none.
bool link_figures(const std::vector<CollectiveRow>& rows, bool in_node, double* gbs, double* us) {
  int best = 0;
  for (const CollectiveRow& r : rows)
    if (r.op == CommOp::ALL_REDUCE && r.in_node == in_node &&
        (best == 0 || (in_node ? r.group_size > best : r.group_size < best)))
      best = r.group_size;
  if (best == 0) return false;
  bool first = true;
  for (const CollectiveRow& r : rows)
    if (r.op == CommOp::ALL_REDUCE && r.group_size == best) {
      if (first) *us = r.time_us;
      first = false;
      *gbs = r.busbw_gbs;
    }
  return true;
}

// FP8's line (app/benchmark.cpp): the best rates beside bf16's (the CPU's: fp32's) and the
// datasheet's FP8 peak, or why there are none.
std::string fp8_text(const BenchmarkReport& r) {
  const ComputeResults& m = r.mine;
  const int cc = m.compute_capability;
  if (m.best_fp8 <= 0)
    return strprintf("FP8 GEMM: not measured (compute capability %d.%d: FP8 tensor cores need "
                     "sm_89 or later)\n", cc / 10, cc % 10);
  const bool gpu = cc > 0;
  const double base = gpu ? m.best_bf16 : m.best_fp32, fp8_peak = r.base ? r.base->fp8_tflops : 0;
  std::string s = strprintf(
      "FP8 GEMM (e4m3 x e4m3 into bf16%s):\n  per tensor best %.4g TFLOP/s, %.2f x %s's best; "
      "1 x 128 by 128 x 128 blocks %.4g TFLOP/s, %.2f x %s's",
      gpu ? "; per tensor cuBLASLt, blocks the emulated path"
          : "; the CPU twin: dequantise to fp32 and sgemm, what --fp8-format costs here",
      m.best_fp8 / 1e12, base > 0 ? m.best_fp8 / base : 0, gpu ? "bf16" : "fp32",
      m.best_fp8_blocks / 1e12, base > 0 ? m.best_fp8_blocks / base : 0, gpu ? "bf16" : "fp32");
  if (gpu && fp8_peak > 0)
    s += strprintf("; FP8 peak %.4g TFLOP/s (datasheet): per tensor at %.3f of it", fp8_peak,
                   m.best_fp8 / 1e12 / fp8_peak);
  return s + "\n";
}

std::string compute_text(const BenchmarkReport& r) {
  const ComputeResults& m = r.mine;
  std::string s =
      strprintf("launch overhead: %.3f us per call (a 1-element add); timer marks: %.3f us of host "
                "time per timed call (--timing-log-level 1 and 2; 0 takes none)\n\n",
                m.launch_s * 1e6, m.timer_pair_s * 1e6);
  s += "GEMM, rank 0 (square n x n x n, 2 n^3 FLOPs, best of 3 trials)\n"
       "  dtype        n      GFLOP    time (us)    TFLOP/s\n";
  for (const GemmPoint& p : m.gemm)
    s += strprintf("  %-7s  %5d %10.4f %12.1f %10.4f\n", p.dtype.c_str(), p.n, p.flops / 1e9,
             p.seconds * 1e6, p.rate() / 1e12);
  s += strprintf("fit (%s): rate(F) = peak x eff x F / (F + F_half): gemm_efficiency %.3f, "
           "gemm_half_gflop %.4g\n  peak %.4g TFLOP/s (%s)\n", r.fit_bf16 ? "bf16" : "fp32",
           r.gemm_efficiency, r.fit.half_flops / 1e9, r.peak / 1e12, r.peak_source.c_str());
  s += fp8_text(r) + "\n";
  s += strprintf("memory bandwidth: out = a + b, 3 x %.4g MiB per call: %.2f GB/s (median "
                 "over ranks "
           "%.2f GB/s)\n", m.bw_bytes / 3 / 1048576, m.bw_bytes / m.bw_seconds / 1e9,
           r.bandwidth / 1e9);
  s += strprintf("kernel mix (layernorm, rmsnorm, gelu, swiglu forward and backward, AdamW): "
                 "%.4g MB "
           "in %.1f us, %.2f GB/s: memory_efficiency %.3f\n", m.mix_bytes / 1e6,
           m.mix_seconds * 1e6, m.mix_bytes / m.mix_seconds / 1e9, r.memory_efficiency);
  s += strprintf("CPU offload: device -> host %.2f GB/s, host -> device %.2f GB/s (%.4g MiB "
                 "copies, %s host memory), %.2f us per 4-byte copy; host AdamW %.4g "
                 "parameters/s on one thread (fp32)\n",
                 m.pcie_bytes / m.d2h_seconds / 1e9, m.pcie_bytes / m.h2d_seconds / 1e9,
                 m.pcie_bytes / 1048576, r.device != "cpu" ? "pinned" : "the same",
                 m.pcie_latency_s * 1e6, m.host_adam_rate);
  s += strprintf("attention: flash forward + backward (%s, causal), B %d, %d heads, seq %d, "
                 "head dim "
           "%d:\n  %.4g GFLOP in %.1f us, %.4g TFLOP/s, attention_efficiency %.3f\n\n",
           m.att_dtype.c_str(), m.att.B, m.att.A, m.att.S, m.att.D, m.att_flops / 1e9,
           m.att_seconds * 1e6, m.att_flops / m.att_seconds / 1e12, r.attention_efficiency);
  return s;
}

std::string ranks_text(const BenchmarkReport& r) {
  std::string s = "per rank: best GEMM and memory bandwidth\n"
                  "  rank  node                  TFLOP/s       GB/s\n";
  for (size_t i = 0; i < r.hosts.size(); ++i)
    s += strprintf("  %4zu  %-18s %10.4f %10.2f\n", i, r.hosts[i].c_str(), r.rank_gemm[i] / 1e12,
             r.rank_bw[i] / 1e9);
  if (r.slow.empty()) s += "all ranks within 0.7x of the median\n";
  for (const std::string& l : r.slow) s += l + "\n";
  return s;
}

}  // namespace

std::string benchmark_text(const BenchmarkReport& r) {
  std::string s = strprintf("paralab --benchmark: %d rank%s on %d node%s, %s + %s, operands and "
                      "messages up to %g MiB; every rank measures at once\n\n", r.ranks,
                      r.ranks > 1 ? "s" : "", r.nodes, r.nodes > 1 ? "s" : "", r.device.c_str(),
                      r.comm.c_str(), r.max_mib);
  s += compute_text(r);
  s += r.coll.empty() ? "collectives: none (a world of one rank)\n\n" : collective_tables(r.coll);
  return s + ranks_text(r);
}

std::string benchmark_json(const BenchmarkReport& r, const std::string& saved) {
  JsonWriter j(true);
  j.begin_object();
  j.field("ranks", r.ranks).field("nodes", r.nodes).field("ranks_per_node", r.ranks_per_node);
  j.field("device", r.device).field("comm", r.comm).field("gpu_name", r.gpu_name);
  j.field("max_mib", r.max_mib);
  j.key("hosts").begin_array();
  for (const std::string& h : r.hosts) j.value(h);
  j.end_array();
  const ComputeResults& m = r.mine;
  j.field("launch_overhead_us", m.launch_s * 1e6);
  j.field("timer_marks_us", m.timer_pair_s * 1e6);
  j.key("gemm").begin_array();
  for (const GemmPoint& p : m.gemm)
    j.begin_object().field("dtype", p.dtype).field("n", p.n).field("flops", p.flops)
        .field("time_us", p.seconds * 1e6).field("tflops", p.rate() / 1e12).end_object();
  j.end_array();
  j.field("gemm_fit_dtype", r.fit_bf16 ? "bf16" : "fp32").field("peak_tflops", r.peak / 1e12);
  j.field("peak_source", r.peak_source).field("gemm_efficiency", r.gemm_efficiency);
  j.field("gemm_half_gflop", r.fit.half_flops / 1e9);
  j.field("compute_capability", m.compute_capability);
  j.field("fp8_best_tflops", m.best_fp8 / 1e12).field("fp8_blocks_best_tflops",
                                                      m.best_fp8_blocks / 1e12);
  j.key("memory").begin_object().field("bytes", m.bw_bytes).field("time_us", m.bw_seconds * 1e6)
      .field("bandwidth_gbs", m.bw_bytes / m.bw_seconds / 1e9)
      .field("median_bandwidth_gbs", r.bandwidth / 1e9)
      .field("mix_bytes", m.mix_bytes).field("mix_time_us", m.mix_seconds * 1e6)
      .field("memory_efficiency", r.memory_efficiency).end_object();
  j.key("offload").begin_object().field("bytes", m.pcie_bytes)
      .field("device_to_host_gbs", m.pcie_bytes / m.d2h_seconds / 1e9)
      .field("host_to_device_gbs", m.pcie_bytes / m.h2d_seconds / 1e9)
      .field("latency_us", m.pcie_latency_s * 1e6)
      .field("host_adam_params_per_s", m.host_adam_rate).end_object();
  j.key("attention").begin_object().field("dtype", m.att_dtype).field("batch", m.att.B)
      .field("heads", m.att.A).field("seq", m.att.S).field("head_dim", m.att.D)
      .field("flops", m.att_flops).field("time_us", m.att_seconds * 1e6)
      .field("tflops", m.att_flops / m.att_seconds / 1e12)
      .field("attention_efficiency", r.attention_efficiency).end_object();
  j.key("collectives").begin_array();
  for (const CollectiveRow& c : r.coll)
    j.begin_object().field("op", op_name(c.op)).field("group_size", c.group_size)
        .field("in_node", c.in_node).field("bytes", c.bytes).field("time_us", c.time_us)
        .field("algbw_gbs", c.algbw_gbs).field("bus_factor", c.bus_factor)
        .field("busbw_gbs", c.busbw_gbs).end_object();
  j.end_array();
  j.key("per_rank").begin_array();
  for (size_t i = 0; i < r.hosts.size(); ++i)
    j.begin_object().field("rank", int(i)).field("host", r.hosts[i])
        .field("gemm_tflops", r.rank_gemm[i] / 1e12).field("bandwidth_gbs", r.rank_bw[i] / 1e9)
        .end_object();
  j.end_array();
  j.key("slow_ranks").begin_array();
  for (const std::string& l : r.slow) j.value(l);
  j.end_array();
  j.field("saved", saved);
  j.end_object();
  return j.str();
}

HardwareProfile benchmark_profile(const BenchmarkReport& r) {
  const bool gpu = r.device != "cpu";
  HardwareProfile p;
  if (r.base) p = *r.base;
  p.file.clear();
  p.assumed.clear();
  p.name = gpu ? (r.base ? r.base->name : r.gpu_name) + " (measured)" : "cpu";
  if (!gpu) p.match.clear();
  if (gpu && !r.base) p.match = {r.gpu_name};
  if (!gpu || !r.base) p.confirmed = true;  // measured peaks; a datasheet's keep their status
  p.source = strprintf("trainer --benchmark, %s, %s, %d rank%s", r.date.c_str(), r.host.c_str(),
                 r.ranks, r.ranks > 1 ? "s" : "");
  if (!gpu) p.fp32_tflops = r.peak / 1e12;
  else if (!r.base) (r.fit_bf16 ? p.bf16_tflops : p.fp32_tflops) = r.peak / 1e12;
  p.memory_gib = 0;
#ifndef PARALAB_CPU_ONLY
  size_t free_b = 0, total_b = 0;
  if (gpu && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
    p.memory_gib = total_b / 1073741824.0;
#endif
  if (!gpu) {  // the host's MemTotal, which the node's ranks share
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    double kib = 0;
    while (meminfo >> key >> kib >> unit && key != "MemTotal:") {}
    p.memory_gib = kib / 1048576.0 / r.ranks_per_node;
  }
  if (!(gpu && r.base && r.base->memory_bandwidth_gbs > 0))
    p.memory_bandwidth_gbs = r.bandwidth / 1e9;
  p.memory_efficiency = r.memory_efficiency;
  p.gpus_per_node = r.ranks_per_node;
  if (!gpu || r.comm == "mpi") p.intra_node_link = "shared memory (MPI)";
  else if (p.intra_node_link.empty()) p.intra_node_link = "NVLink";
  double gbs = 0, us = 0;
  if (link_figures(r.coll, true, &gbs, &us)) {
    p.intra_node_gbs = gbs;
    p.collective_latency_us = us;
  } else {
    // One rank per node: nothing measured in a node. Without a profile to copy from, an
    // estimate: a shared-memory transfer reads and writes each byte, so half the bandwidth.
    if (!r.base || p.intra_node_gbs <= 0) p.intra_node_gbs = r.bandwidth / 1e9 / 2;
    if (!r.base || p.collective_latency_us <= 0) p.collective_latency_us = 10;
    p.assumed.insert(p.assumed.end(), {"intra_node_gbs", "collective_latency_us"});
  }
  if (link_figures(r.coll, false, &gbs, &us)) {
    p.inter_node_gbs = gbs;
    p.inter_node_latency_us = us;
  } else {
    if (!gpu || p.inter_node_gbs <= 0) p.inter_node_gbs = p.intra_node_gbs;
    if (!gpu || p.inter_node_latency_us <= 0) p.inter_node_latency_us = p.collective_latency_us;
    p.assumed.insert(p.assumed.end(), {"inter_node_gbs", "inter_node_latency_us"});
  }
  p.launch_overhead_us = r.mine.launch_s * 1e6;
  p.gemm_efficiency = r.gemm_efficiency;
  p.gemm_half_gflop = r.fit.half_flops / 1e9;
  p.attention_efficiency = r.attention_efficiency;
  // CPU offload: the slower direction, the latency, the host (the node's RAM and cores), the
  // host AdamW per thread
  const ComputeResults& m = r.mine;
  p.pcie_gbs = m.pcie_bytes / std::max(m.d2h_seconds, m.h2d_seconds) / 1e9;
  p.pcie_latency_us = m.pcie_latency_s * 1e6;
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    double kib = 0;
    while (meminfo >> key >> kib >> unit && key != "MemTotal:") {}
    p.host_memory_gib = kib / 1048576.0;
  }
  p.host_cores = (double)sysconf(_SC_NPROCESSORS_ONLN);
  p.host_adam_params_per_s = m.host_adam_rate;
  return p;
}

// Why a link figure of the profile is an assumption (benchmark_profile's choices).
static std::string why_assumed(const BenchmarkReport& r, const std::string& key) {
  if (key.rfind("inter", 0) == 0)
    return r.device == "cpu" ? "one node: set equal to the in-node figure"
                             : "one node: the matched profile's, else the in-node figure";
  return r.base ? "no two ranks share a node: the matched profile's"
                : "no two ranks share a node: estimated as half the memory bandwidth, 10 us";
}

std::string benchmark_profile_comment(const BenchmarkReport& r, const HardwareProfile& p) {
  std::string c = "Measured by `" + r.command + "`\n" +
                  strprintf("on %s, %s: %d rank%s on %d node%s%s.\n", r.host.c_str(), r.date.c_str(),
                      r.ranks, r.ranks > 1 ? "s" : "", r.nodes, r.nodes > 1 ? "s" : "",
                      r.ranks > 1 ? ", all measuring at once (what training sees)" : "");
  if (r.device == "cpu")
    c += strprintf("fp32_tflops: the best sgemm rate per rank (median over ranks); memory_gib: the "
             "host's MemTotal / %d rank%s on the node.\n", r.ranks_per_node,
             r.ranks_per_node > 1 ? "s" : "");
  else
    c += "Peaks, memory_bandwidth_gbs: " + r.peak_source + "; the efficiencies are measured "
         "against them.\n";
  c += "GEMM, rank 0 (n: TFLOP/s):";
  for (const GemmPoint& g : r.mine.gemm)
    c += strprintf(" %s %d: %.4g;", g.dtype.c_str(), g.n, g.rate() / 1e12);
  c += strprintf("\nmemory %.2f GB/s (out = a + b, median over ranks), launch %.3f us, attention "
           "%.4g TFLOP/s (flash forward + backward).\n", r.bandwidth / 1e9,
           r.mine.launch_s * 1e6, r.mine.att_flops / r.mine.att_seconds / 1e12);
  for (size_t i = 0, first = 0; i < r.coll.size(); ++i) {
    const CollectiveRow& row = r.coll[i];
    if (i + 1 < r.coll.size() && r.coll[i + 1].op == row.op &&
        r.coll[i + 1].group_size == row.group_size)
      continue;  // not the last row of its table
    c += strprintf("%s, %d ranks%s: latency %.2f us, busbw %.3f GB/s at %.4g MiB\n", op_name(row.op),
             row.group_size, row.in_node ? "" : " (across nodes)", r.coll[first].time_us,
             row.busbw_gbs, row.bytes / 1048576);
    first = i + 1;
  }
  for (const std::string& k : p.assumed) c += k + ": not measured (" + why_assumed(r, k) + ")\n";
  return c;
}

}  // namespace paralab
