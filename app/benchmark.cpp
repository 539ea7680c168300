// app/benchmark.cpp: `trainer --benchmark`: measure the machine, name slow ranks, and write the
// measurements as a hardware profile (measure/hardware.h). Every rank measures at once, so
// ranks that share a node's cores or memory see what a training run sees. This file is one
// rank's compute and the run as a whole; the collectives are app/benchmark_collectives.cpp's,
// the tables, the JSON and the profile app/benchmark_report.cpp's.
//
// What one rank measures, each the best of 3 trials of ~0.05 s (CPU) after a warm-up (a
// shared machine only adds time), through kernels/ops.h, so CPU and CUDA run the same code:
//   launch     a 1-element add, time per call: the CPU's function call, a CUDA launch.
//   GEMM       square n x n x n, n = 64, 128, ... while an operand fits --benchmark-max-mib
//              (and, on the CPU, while the next size's call would take under 0.4 s: about
//              3 s per rank in all), 2 n^3 FLOPs per call; fp32, and bf16 on CUDA (the CPU's
//              bf16 GEMM widens to fp32: the same sgemm, nothing new to measure); and FP8,
//              E4M3 x E4M3 into bf16 (kernels::gemm_fp8), per-tensor factors ("fp8": delayed
//              and tensorwise, cuBLASLt's FP8 path on a GPU) and 1 x 128 tiles by 128 x 128
//              blocks ("fp8-blk": blockwise, the emulated path), at bf16's sizes and printed
//              beside its best (on the CPU at fp32's and beside fp32's: its FP8 GEMM is the
//              twin, dequantise and sgemm, what --fp8-format costs there); not on a GPU
//              without FP8 tensor cores (before sm_89).
//   the curve  measure/hardware.h's rate(F) = peak x eff_max x F / (F + F_half) is, in time,
//                t(F) = F / R + F_half / R,   R = peak x eff_max,
//              a line in F. Weighted least squares of t - launch (the time model adds the
//              launch itself) against F, weights 1/t^2 (relative errors: the 64^3 GEMM counts
//              as much as the 2048^3 one), gives R and F_half in closed form;
//              gemm_efficiency = R / peak, gemm_half_gflop = F_half / 1e9 (R capped at the
//              peak: the profile keeps efficiencies in (0, 1]). The peak: on CUDA
//              the matched configs/hardware profile's datasheet figure; on the CPU the best
//              sgemm rate (the median over ranks of each rank's best), which is what
//              fp32_tflops means there.
//   memory     out = a + b on three buffers of the largest size, 3 x 4 n bytes per call
//              (STREAM's "add" count, McCalpin: two reads and a write; the write-allocate
//              read is not counted), the best rate.
//   kernel mix the trainer's own norms, activations and AdamW on those buffers (rows of 768),
//              their bytes as kernels::kernel_counts counts them (plan/kernel_traffic.h):
//              memory_efficiency = their rate / the profile's HBM figure on CUDA, / the add
//              rate above on the CPU, where expf, tanh and row reductions keep them well
//              below the streaming rate.
//   attention  flash forward + backward on one shape (CPU B 1, 12 heads, seq 256, head dim
//              64; CUDA B 4, 16 heads, seq 2048: enough work to hide the launches), FLOPs as
//              kernels/ops/ counts them (4 D B A pairs forward, 10 D B A pairs backward,
//              causal pairs), attention_efficiency = FLOPs / time / peak (bf16 on CUDA).
// Slow ranks: each rank's best GEMM rate and bandwidth go to rank 0; a rank below 0.7 x the
// ranks' median of either is named, with its host.
//
// defines: run_benchmark
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <limits>
#include "app/benchmark.h"
// defines: kernels::gemm, add, flash_attention_forward/backward, flop_counter, synchronize
#include "kernels/ops.h"
// defines: write_hardware_profile, load_hardware_profiles, match_hardware_profile
#include "measure/hardware.h"
#include "measure/clock.h"  // now_seconds
#include "measure/ledger.h"  // Buffer::allocate_host: pinned host memory
#include "model/host_adamw.h"  // host_adamw_rate

namespace paralab {
namespace {

using kernels::Device;
constexpr double kSlowRank = 0.7;  // a rank below this fraction of the median is named

// Seconds per call of `call`: two warm-up calls, then `trials` trials of enough calls to
// last trial_s; the best trial's mean. The device is synchronised around each trial.
double best_seconds(Device d, const std::function<void()>& call, double trial_s, int trials = 3) {
  call();
  kernels::synchronize(d);
  double t0 = now_seconds();
  call();
  kernels::synchronize(d);
  const double warm = std::max(now_seconds() - t0, 1e-9);
  const int calls = static_cast<int>(std::clamp(std::ceil(trial_s / warm), 1.0, 1e6));
  double best = std::numeric_limits<double>::infinity();
  for (int t = 0; t < trials; ++t) {
    t0 = now_seconds();
    for (int i = 0; i < calls; ++i) call();
    kernels::synchronize(d);
    best = std::min(best, (now_seconds() - t0) / calls);
  }
  return best;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

template <typename T>
void time_gemms(Device d, const char* dtype, size_t max_bytes, double trial_s, double max_call_s,
                std::vector<GemmPoint>& out) {
  int n_max = 64;
  while (size_t(2 * n_max) * size_t(2 * n_max) * sizeof(T) <= max_bytes) n_max *= 2;
  const size_t bytes = size_t(n_max) * n_max * sizeof(T);
  T* a = static_cast<T*>(kernels::device_malloc(d, bytes));
  T* b = static_cast<T*>(kernels::device_malloc(d, bytes));
  T* c = static_cast<T*>(kernels::device_malloc(d, bytes));
  double last = 0;
  for (int n = 64; n <= n_max && last * 8 <= max_call_s; n *= 2) {
    last = best_seconds(d, [&] {
      kernels::gemm(d, false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    }, trial_s);
    out.push_back({dtype, n, 2.0 * n * n * n, last});
  }
  for (T* p : {a, b, c}) kernels::device_free(d, p);
}

// FP8 GEMMs (see the header) at the sizes of the GEMMs they are printed beside (elements of
// `beside` bytes: bf16's on a GPU, fp32's on the CPU), operands of blocks a_blocks and
// b_blocks: codes 0x38 (1.0) and factors 1 (a tensor core's speed does not depend on the
// values), C in bf16.
void time_fp8_gemms(Device d, kernels::Fp8Blocks a_blocks, kernels::Fp8Blocks b_blocks,
                    const char* dtype, size_t beside, size_t max_bytes, double trial_s,
                    double max_call_s, std::vector<GemmPoint>& out) {
  int n_max = 64;
  while (size_t(2 * n_max) * size_t(2 * n_max) * beside <= max_bytes) n_max *= 2;
  const size_t codes = size_t(n_max) * n_max;
  const size_t factors = std::max(kernels::fp8_scale_count(a_blocks, n_max, n_max),
                                  kernels::fp8_scale_count(b_blocks, n_max, n_max));
  auto* a = static_cast<uint8_t*>(kernels::device_malloc(d, codes));
  auto* b = static_cast<uint8_t*>(kernels::device_malloc(d, codes));
  auto* c = static_cast<kernels::bf16*>(kernels::device_malloc(d, codes * sizeof(kernels::bf16)));
  auto* f = static_cast<float*>(kernels::device_malloc(d, factors * sizeof(float)));
  const std::vector<uint8_t> one(codes, 0x38);
  const std::vector<float> unit(factors, 1.0f);
  kernels::memcpy_from_host(d, a, one.data(), codes);
  kernels::memcpy_from_host(d, b, one.data(), codes);
  kernels::memcpy_from_host(d, f, unit.data(), factors * sizeof(float));
  const kernels::Fp8Matrix A{a, f, kernels::Fp8Format::E4M3, a_blocks};
  const kernels::Fp8Matrix B{b, f, kernels::Fp8Format::E4M3, b_blocks};
  double last = 0;
  for (int n = 64; n <= n_max && last * 8 <= max_call_s; n *= 2) {
    last = best_seconds(d, [&] { kernels::gemm_fp8(d, n, n, n, 1.0f, A, B, 0.0f, c, n); },
                        trial_s);
    out.push_back({dtype, n, 2.0 * n * n * n, last});
  }
  for (void* p : std::initializer_list<void*>{a, b, c, f}) kernels::device_free(d, p);
}

// R and F_half of the line t = F/R + F_half/R (the header), R at most max_rate: where the
// free fit overshoots the peak (on the CPU the peak is itself a measured point), R is the
// peak and F_half the weighted least squares for that slope. Normal equations of
// min sum w (a F + b - t)^2: a = (Sw Sft - Sf St) / (Sw Sff - Sf^2), b = (St - a Sf) / Sw.
GemmFit fit_gemm_curve(const std::vector<GemmPoint>& pts, double launch_s, double max_rate) {
  double sw = 0, sf = 0, sff = 0, st = 0, sft = 0, best = 0;
  for (const GemmPoint& p : pts) {
    const double t = std::max(p.seconds - launch_s, 0.5 * p.seconds), w = 1 / (t * t);
    sw += w; sf += w * p.flops; sff += w * p.flops * p.flops; st += w * t; sft += w * p.flops * t;
    best = std::max(best, p.rate());
  }
  double a = (sw * sft - sf * st) / (sw * sff - sf * sf), b = (st - a * sf) / sw;
  if (!(b >= 0)) { a = sft / sff; b = 0; }  // no fixed cost: the line through the origin
  if (!(a > 0) || pts.size() < 2) return {std::min(best, max_rate), 0};
  if (1 / a > max_rate) {
    a = 1 / max_rate;
    b = std::max(0.0, (st - a * sf) / sw);
  }
  return {1 / a, b / a};
}

// Seconds of one flash forward + backward, and its FLOPs as the kernels count them.
template <typename T>
double time_attention(Device d, const AttentionShape& s, double trial_s, double* flops) {
  const size_t n = size_t(s.B) * s.A * s.S * s.D, rows = size_t(s.B) * s.A * s.S;
  auto alloc = [&](size_t bytes) { return kernels::device_malloc(d, bytes); };
  T *q = (T*)alloc(n * sizeof(T)), *k = (T*)alloc(n * sizeof(T)), *v = (T*)alloc(n * sizeof(T));
  T *o = (T*)alloc(n * sizeof(T)), *dout = (T*)alloc(n * sizeof(T));
  T *dk = (T*)alloc(n * sizeof(T)), *dv = (T*)alloc(n * sizeof(T));
  float* dq = (float*)alloc(n * sizeof(float));
  float* lse = (float*)alloc(rows * sizeof(float));
  const kernels::AttentionBlock blk = kernels::whole_sequence(s.S, s.A, s.D);
  const float scale = 1.0f / std::sqrt(float(s.D));
  auto pass = [&] {
    kernels::flash_attention_forward(d, o, lse, q, k, v, s.B, s.A, s.A, s.D, scale, 0.0f, 0, 0,
                                     blk);
    kernels::flash_attention_backward(d, dq, dk, dv, dout, q, k, v, o, lse, s.B, s.A, s.A, s.D,
                                      scale, 0.0f, 0, 0, blk);
  };
  kernels::reset_flop_counter();
  pass();
  *flops = kernels::flop_counter();
  const double t = best_seconds(d, pass, trial_s);
  for (void* p : std::initializer_list<void*>{q, k, v, o, dout, dk, dv, dq, lse})
    kernels::device_free(d, p);
  return t;
}

// The GEMM rows of every dtype (the header) into c.gemm, and each dtype's best rate.
void measure_gemms(Device d, size_t max_bytes, double trial_s, ComputeResults& c) {
  const bool gpu = d == Device::CUDA;
  time_gemms<float>(d, "fp32", max_bytes, trial_s, gpu ? 1.0 : 0.4, c.gemm);
  if (gpu) time_gemms<kernels::bf16>(d, "bf16", max_bytes, trial_s, 1.0, c.gemm);
  c.compute_capability = gpu ? kernels::cuda_compute_capability() : 0;
  if (!gpu || c.compute_capability >= 89) {
    const size_t beside = gpu ? sizeof(kernels::bf16) : sizeof(float);
    time_fp8_gemms(d, kernels::Fp8Blocks::Tensor, kernels::Fp8Blocks::Tensor, "fp8", beside,
                   max_bytes, trial_s, gpu ? 1.0 : 0.4, c.gemm);
    time_fp8_gemms(d, kernels::Fp8Blocks::Tiles, kernels::Fp8Blocks::Blocks, "fp8-blk", beside,
                   max_bytes, trial_s, gpu ? 1.0 : 0.4, c.gemm);
  }
  for (const GemmPoint& p : c.gemm) {
    double& best = p.dtype == "fp32" ? c.best_fp32 : p.dtype == "bf16" ? c.best_bf16
                   : p.dtype == "fp8" ? c.best_fp8 : c.best_fp8_blocks;
    best = std::max(best, p.rate());
  }
}

ComputeResults measure_compute(Device d, size_t max_bytes) {
  const bool gpu = d == Device::CUDA;
  const double trial_s = gpu ? 0.02 : 0.05;
  ComputeResults c;
  float* one = static_cast<float*>(kernels::device_malloc(d, 3 * sizeof(float)));
  c.launch_s = best_seconds(d, [&] { kernels::add(d, one, one + 1, one + 2, 1); }, 0.01);
  kernels::device_free(d, one);
  c.timer_pair_s = kernels::timer_overhead_seconds(d);
  measure_gemms(d, max_bytes, trial_s, c);

  const size_t n = std::max<size_t>(max_bytes / sizeof(float), 1);
  float* a = static_cast<float*>(kernels::device_malloc(d, n * sizeof(float)));
  float* b = static_cast<float*>(kernels::device_malloc(d, n * sizeof(float)));
  float* out = static_cast<float*>(kernels::device_malloc(d, n * sizeof(float)));
  c.bw_bytes = 3.0 * n * sizeof(float);
  c.bw_seconds = best_seconds(d, [&] { kernels::add(d, out, a, b, n); }, trial_s);
  // The kernel mix: what a layer and the optimizer launch besides GEMMs, rows of C = 768
  // (a ~100M model's width) filling the same buffers. On a CPU these are not bandwidth-bound
  // (expf, tanh, a row reduction per row), so their rate, not add's, is what the time
  // model's memory-bound kernels run at. Weighted as a step moves them: AdamW over all n
  // elements is about half the mix's bytes, as the optimizer is about half a ~100M model's
  // non-GEMM bytes at seq 256 (plan/kernel_traffic.h: 4.46 of 8.58 GB for gpt2-124m).
  {
    const int C = 768, N = std::max<int>(1, int(n / 2 / C)), F = C / 2;
    const size_t rows = size_t(N) * C;
    float* g = static_cast<float*>(kernels::device_malloc(d, n * sizeof(float)));
    float* w = static_cast<float*>(kernels::device_malloc(d, 4 * C * sizeof(float)));
    float* stats = static_cast<float*>(kernels::device_malloc(d, 2 * size_t(N) * sizeof(float)));
    for (float* p : {a, b, out, g}) kernels::memset_zero(d, p, n * sizeof(float));
    kernels::memset_zero(d, w, 4 * C * sizeof(float));  // weight, bias, their gradients
    kernels::AdamRun adam;  // over a (the weights), b (gradients), out and g (moments)
    adam.master = a, adam.grads = b, adam.m = out, adam.v = g, adam.n = n, adam.weight_decay = 0.1f;
    kernels::AdamStep adam_step;
    adam_step.lr = 1e-4f, adam_step.beta1 = 0.9f, adam_step.beta2 = 0.95f, adam_step.eps = 1e-8f;
    adam_step.bias1 = 0.5f, adam_step.bias2 = 0.5f;
    auto mix = [&] {
      kernels::layernorm_forward(d, out, stats, stats + N, a, w, w + C, N, C, 1e-5f);
      kernels::layernorm_backward(d, g, w + 2 * C, w + 3 * C, b, a, w, stats, stats + N, N, C);
      kernels::rmsnorm_forward(d, out, stats, a, w, N, C, 1e-5f);
      kernels::gelu_forward(d, out, a, rows);
      kernels::gelu_backward(d, g, b, a, rows);
      kernels::swiglu_forward(d, out, a, N, F);
      kernels::swiglu_backward(d, g, b, a, N, F);
      kernels::adamw_update<float>(d, &adam, 1, adam_step);
    };
    mix();  // warm-up, and the bytes one pass moves
    kernels::reset_kernel_counts();
    mix();
    c.mix_bytes = kernels::kernel_counts().bytes;
    c.mix_seconds = best_seconds(d, mix, trial_s);
    for (float* p : {g, w, stats}) kernels::device_free(d, p);
  }
  for (float* p : {a, b, out}) kernels::device_free(d, p);

  // CPU offload: copies to and from page-locked host memory (on the CPU backend, memcpy), and
  // the host AdamW's rate on one thread over 4M parameters (112 MiB of states, past the caches)
  {
    Buffer<char> host, dev;
    host.allocate_host(d, max_bytes, Category::WORKSPACE, true);
    dev.allocate(d, max_bytes, Category::WORKSPACE);
    c.pcie_bytes = (double)max_bytes;
    c.d2h_seconds = best_seconds(d, [&] {
      kernels::memcpy_to_host(d, host.data(), dev.data(), max_bytes); }, trial_s);
    c.h2d_seconds = best_seconds(d, [&] {
      kernels::memcpy_from_host(d, dev.data(), host.data(), max_bytes); }, trial_s);
    c.pcie_latency_s = best_seconds(d, [&] {
      kernels::memcpy_to_host(d, host.data(), dev.data(), 4); }, 0.01);
    c.host_adam_rate = host_adamw_rate(int64_t(1) << 22);
  }

  c.att = gpu ? AttentionShape{4, 16, 2048, 64} : AttentionShape{1, 12, 256, 64};
  c.att_dtype = gpu ? "bf16" : "fp32";
  c.att_seconds = gpu ? time_attention<kernels::bf16>(d, c.att, trial_s, &c.att_flops)
                      : time_attention<float>(d, c.att, trial_s, &c.att_flops);
  return c;
}

// A rank below kSlowRank x the median of v: one line naming it and its node.
void name_slow_ranks(BenchmarkReport& r, const std::vector<double>& v, const char* what,
                     const char* unit, double to_unit) {
  const double m = median(v);
  char line[256];
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < kSlowRank * m) {
      std::snprintf(line, sizeof line, "rank %zu (node %s): %s %.4g %s, %.2f x the median %.4g "
                    "\u2014 a bad node?", i, r.hosts[i].c_str(), what, v[i] * to_unit, unit,
                    v[i] / m, m * to_unit);
      r.slow.push_back(line);
    }
}

// The command as typed: /proc/self/cmdline, with the mpirun in front of a multi-rank run.
std::string command_line(int ranks) {
  std::ifstream f("/proc/self/cmdline");
  std::string arg, cmd = ranks > 1 ? "mpirun -np " + std::to_string(ranks) + " " : "";
  while (std::getline(f, arg, '\0')) cmd += arg + " ";
  return cmd.empty() ? "trainer --benchmark" : cmd.substr(0, cmd.size() - 1);
}

// Who takes part: every rank's host name (gathered over the world), the nodes, the device and
// its configs/hardware profile, for the report's header and the slow-rank lines.
void describe_world(BenchmarkReport& r, Communicator& world, const Options& o, const World& w) {
  const Device d = o.device;
  const bool gpu = d == Device::CUDA;
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(64 * size_t(w.size));
  world.all_gather(host, hosts.data(), 64, DType::U8);
  for (int i = 0; i < w.size; ++i) r.hosts.emplace_back(&hosts[64 * size_t(i)]);
  std::vector<std::string> distinct = r.hosts;
  std::sort(distinct.begin(), distinct.end());
  r.nodes = int(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  r.ranks = w.size;
  r.ranks_per_node = w.local_size;
  r.device = kernels::device_name(d);
  r.comm = comm_name(o.comm);
  r.host = host;
  const std::vector<HardwareProfile> profiles = load_hardware_profiles("configs/hardware");
  if (gpu) {
    r.gpu_name = kernels::cuda_device_name();
    r.base = match_hardware_profile(profiles, r.gpu_name);
  }
  r.fit_bf16 = gpu;  // a GPU trains in bf16 on its tensor cores: the curve and peak are bf16's
}

// Every rank at once: the compute, then each rank's best GEMM and bandwidth to everyone (a slow
// rank shows against the median), then the collectives.
void measure_every_rank(BenchmarkReport& r, Communicator& world, const Options& o,
                        const World& w, size_t max_bytes) {
  world.barrier();
  r.mine = measure_compute(o.device, max_bytes);
  const float mine[2] = {float((r.fit_bf16 ? r.mine.best_bf16 : r.mine.best_fp32) / 1e9),
                         float(r.mine.bw_bytes / r.mine.bw_seconds / 1e9)};
  std::vector<float> every(2 * size_t(w.size));
  world.all_gather(mine, every.data(), 2);
  for (int i = 0; i < w.size; ++i) {
    r.rank_gemm.push_back(every[2 * i] * 1e9);
    r.rank_bw.push_back(every[2 * i + 1] * 1e9);
  }
  r.coll = measure_collectives(o, w, r.hosts, max_bytes);
  world.barrier();
}

// The peak the efficiencies are relative to (the datasheet's, else the best measured), then the
// GEMM curve capped at it, the efficiencies the time model uses and the slow ranks (rank 0).
void fit_rates(BenchmarkReport& r, bool gpu) {
  r.bandwidth = median(r.rank_bw);
  const Precision fit = r.fit_bf16 ? Precision::BF16 : Precision::FP32;
  if (gpu && r.base && r.base->peak_tflops(fit) > 0) {
    r.peak = r.base->peak_tflops(fit) * 1e12;
    r.peak_source = r.base->file + (r.fit_bf16 ? ", bf16 dense" : ", fp32") + " (datasheet)";
    if (r.base->memory_bandwidth_gbs > 0)
      r.memory_efficiency = std::min(1.0, r.mine.mix_bytes / r.mine.mix_seconds / 1e9 /
                                              r.base->memory_bandwidth_gbs);
  } else {
    // the elementwise kernels' rate over the streaming rate both measured here
    r.memory_efficiency = std::min(1.0, r.mine.mix_bytes / r.mine.mix_seconds /
                                            (r.mine.bw_bytes / r.mine.bw_seconds));
    r.peak = median(r.rank_gemm);
    r.peak_source = gpu ? "no configs/hardware profile matches \"" + r.gpu_name +
                              "\": the best measured rate, median over ranks"
                        : "the best measured sgemm, median over ranks";
  }
  std::vector<GemmPoint> curve;
  for (const GemmPoint& p : r.mine.gemm)
    if (p.dtype == (r.fit_bf16 ? "bf16" : "fp32")) curve.push_back(p);
  r.fit = fit_gemm_curve(curve, r.mine.launch_s, r.peak);
  r.gemm_efficiency = std::min(1.0, r.fit.rate / r.peak);  // 1 when the fit is capped
  r.attention_efficiency = std::min(1.0, r.mine.att_flops / r.mine.att_seconds / r.peak);
  name_slow_ranks(r, r.rank_gemm, "GEMM", "TFLOP/s", 1e-12);
  name_slow_ranks(r, r.rank_bw, "memory", "GB/s", 1e-9);
}

// Rank 0's output: --benchmark-save's profile (a configs/hardware file, stamped with the date and
// the command), then the report as text or --json.
void write_benchmark(BenchmarkReport& r, const Options& o, int ranks) {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  r.date = date;
  r.command = command_line(ranks);
  if (!o.benchmark_save.empty()) {
    const HardwareProfile p = benchmark_profile(r);
    std::ofstream f(o.benchmark_save);
    f << write_hardware_profile(p, benchmark_profile_comment(r, p));
    if (!f) fail("--benchmark-save: cannot write " + o.benchmark_save, 2);
  }
  if (o.json) {
    std::printf("%s\n", benchmark_json(r, o.benchmark_save).c_str());
  } else {
    std::printf("%s", benchmark_text(r).c_str());
    if (!o.benchmark_save.empty())
      std::printf("\nwrote %s (use it with --hardware %s)\n", o.benchmark_save.c_str(),
                  o.benchmark_save.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int run_benchmark(const Options& o, const World& w) {
  const bool gpu = o.device == Device::CUDA;
  if (gpu) kernels::cuda_select_device(w.local_rank);
  BenchmarkReport r;
  r.max_mib = o.benchmark_max_mib > 0 ? o.benchmark_max_mib : gpu ? 1024 : 64;
  const size_t max_bytes = static_cast<size_t>(r.max_mib * 1048576);
  // A host communicator over the world for the gathers, whatever --comm measures.
  std::vector<int> all(w.size);
  for (int i = 0; i < w.size; ++i) all[i] = i;
  Communicator world(CommGroup::WORLD, all, detail::make_mpi_backend(0, w.rank, Device::CPU),
                     CommBackend::MPI, Device::CPU);
  describe_world(r, world, o, w);
  measure_every_rank(r, world, o, w, max_bytes);
  if (w.rank != 0) return 0;
  fit_rates(r, gpu);
  write_benchmark(r, o, w.size);
  return 0;
}

}  // namespace paralab
