// report/report_time.cpp: see report_time.h.
#include "report/report_time.h"
#include <algorithm>
#include <cmath>
#include "report/report.h"  // format_si
#include "report/text.h"

namespace paralab {

namespace {

std::string gib(double bytes) { return strprintf("%.2f GiB", bytes / 1073741824.0); }

// Seconds in the unit a reader wants: ms below 10 s, else s, min, h, days.
std::string seconds_text(double s) {
  if (s < 10) return strprintf("%.2f ms", s * 1e3);
  if (s < 600) return strprintf("%.1f s", s);
  if (s < 3 * 3600) return strprintf("%.1f min", s / 60);
  if (s < 3 * 86400) return strprintf("%.1f h", s / 3600);
  return strprintf("%.1f days", s / 86400);
}

std::string group_op(const GroupTime& g) {
  return std::string(group_name(g.group)) + " " + op_name(g.op);
}

// The measured exposed seconds of a group (every operation), -1 when not measured.
double measured_exposed(const CommStats* comm, CommGroup g) {
  if (!comm) return -1;
  double s = 0;
  for (int op = 0; op < kNumCommOps; ++op) s += comm->get(g, CommOp(op)).exposed_s;
  return s;
}

// The projection's exposed seconds per group, in first-seen order.
std::vector<std::pair<CommGroup, double>> exposed_by_group(const StepTime& t) {
  std::vector<std::pair<CommGroup, double>> out;
  for (const GroupTime& g : t.comm) {
    auto it = std::find_if(out.begin(), out.end(), [&](auto& x) { return x.first == g.group; });
    if (it == out.end()) out.push_back({g.group, g.exposed});
    else it->second += g.exposed;
  }
  return out;
}

}  // namespace

std::string fit_line(const FitCheck& f) {
  if (!f.checked()) return "memory fit: not checked (" + f.capacity_source + ")\n";
  const double peak = (double)f.peak_bytes;
  if (f.fits())
    return strprintf("memory fit: fits: peak %s on rank %d of %s (%s), %s to spare\n",
                     gib(peak).c_str(), f.peak_rank, gib(f.capacity_bytes).c_str(),
                     f.capacity_source.c_str(), gib(f.capacity_bytes - peak).c_str());
  std::string would;
  if (f.largest_micro_batch > 0)
    would += strprintf("--micro-batch-size %d", f.largest_micro_batch);
  if (f.smallest_zero_stage >= 0)
    would += (would.empty() ? "" : ", or ") + strprintf("--zero-stage %d", f.smallest_zero_stage);
  if (f.smallest_tp > 0)
    would += (would.empty() ? "" : ", or ") + strprintf("--tp %d", f.smallest_tp);
  return strprintf("memory fit: does NOT fit: peak %s on rank %d > %s (%s), short by %s; %s\n",
                   gib(peak).c_str(), f.peak_rank, gib(f.capacity_bytes).c_str(),
                   f.capacity_source.c_str(), gib(peak - f.capacity_bytes).c_str(),
                   would.empty() ? "no single change of micro batch, ZeRO stage or tp fits"
                                 : ("would fit with " + would + " (one change each)").c_str());
}

// CPU offload: the fullest node's host memory against its RAM.
std::string host_fit_line(const FitCheck& f) {
  if (f.host_node_bytes == 0) return "";
  const double need = (double)f.host_node_bytes;
  if (!f.host_checked())
    return strprintf("host memory fit: not checked (%s): node %d's %d ranks hold %s on the host\n",
                     f.host_capacity_source.c_str(), f.host_node, f.ranks_per_node,
                     gib(need).c_str());
  if (f.host_fits())
    return strprintf("host memory fit: fits: node %d's %d ranks hold %s of %s (%s), %s to spare\n",
                     f.host_node, f.ranks_per_node, gib(need).c_str(),
                     gib(f.host_capacity_bytes).c_str(), f.host_capacity_source.c_str(),
                     gib(f.host_capacity_bytes - need).c_str());
  return strprintf("host memory fit: does NOT fit: node %d's %d ranks hold %s > %s (%s), short by "
                   "%s; a smaller --optimizer-offload-fraction, more nodes, or NVMe "
                   "(ZeRO-Infinity, not built)\n",
                   f.host_node, f.ranks_per_node, gib(need).c_str(),
                   gib(f.host_capacity_bytes).c_str(), f.host_capacity_source.c_str(),
                   gib(need - f.host_capacity_bytes).c_str());
}

std::string fit_error(const FitCheck& f) {
  if (f.fits() && !f.host_fits())
    return strprintf("CPU offload: node %d's %d ranks hold %s (%.0f bytes) in host memory, more "
                     "than the %s available (%s); lower --optimizer-offload-fraction or pass "
                     "--allow-oom to try anyway",
                     f.host_node, f.ranks_per_node, gib((double)f.host_node_bytes).c_str(),
                     (double)f.host_node_bytes, gib(f.host_capacity_bytes).c_str(),
                     f.host_capacity_source.c_str());
  return strprintf("the plan's peak memory %s (%.0f bytes, rank %d) exceeds the %s available "
                   "(%s); lower --micro-batch-size, raise --zero-stage or --tp, or pass "
                   "--allow-oom to try anyway",
                   gib((double)f.peak_bytes).c_str(), (double)f.peak_bytes, f.peak_rank,
                   gib(f.capacity_bytes).c_str(), f.capacity_source.c_str());
}

namespace {
// --fp8-format: the linears' GEMMs in the run's precision and in FP8, the casts, the step.
std::string fp8_plan_text(const Fp8StepTime& f) {
  std::string s = strprintf(
      "FP8 (--fp8-recipe %s), PROJECTED: the linear layers' GEMMs at %.4g TFLOP/s (fp8 dense) "
      "instead of %.4g (%s), plus the casts to FP8 (plan/time_model_fp8.h)\n",
      f.recipe.c_str(), f.fp8_peak_tflops, f.high_peak_tflops, f.high_figure.c_str());
  s += strprintf("  %-20s %14s %14s %14s %14s\n", "rank 0, per step", "GEMMs as run",
                 "GEMMs in FP8", "casts", "cast bytes");
  auto row = [&](const std::string& name, double high, double fp8, double casts, double bytes) {
    s += strprintf("  %-20s %14s %14s %14s %14s\n", name.c_str(), seconds_text(high).c_str(),
                   seconds_text(fp8).c_str(), seconds_text(casts).c_str(),
                   (format_si(bytes) + "B").c_str());
  };
  for (const Fp8LinearTime& l : f.linears)
    row(l.name, l.gemm_high, l.gemm_fp8, l.casts, l.cast_bytes);
  row("all linears", f.gemm_high, f.gemm_fp8, f.casts, f.cast_bytes);
  s += strprintf("  step %s -> %s with FP8 (%+.1f%%): the GEMMs save %s, the casts cost %s "
                 "(%.0f launches)\n",
                 seconds_text(f.step_high).c_str(), seconds_text(f.step_fp8).c_str(),
                 f.step_high > 0 ? 100 * (f.step_fp8 / f.step_high - 1) : 0.0,
                 seconds_text(f.gemm_high - f.gemm_fp8).c_str(), seconds_text(f.casts).c_str(),
                 f.cast_launches);
  s += "  assumptions:\n";
  for (const std::string& a : f.assumptions) s += "    - " + a + "\n";
  return s;
}
}  // namespace

std::string time_plan_text(const Plan& plan, const PlanProjection& p) {
  std::string s;
  if (!p.time) {
    s += "time per step: no projection (" + p.no_time + ")\n";
  } else {
    const StepTime& t = *p.time;
    s += strprintf("time per step, PROJECTED on %s, peak %.4g TFLOP/s/rank, %s "
                   "(plan/time_model.h; a model, not a measurement)\n",
                   t.hardware.c_str(), t.peak_tflops, t.peak_figure.c_str());
    s += strprintf("  %-34s %14s %8s\n", "rank 0", "seconds", "of step");
    auto row = [&](const std::string& name, double sec, const std::string& note) {
      s += strprintf("  %-34s %14s %7.1f%%  %s\n", name.c_str(), seconds_text(sec).c_str(),
                     t.step > 0 ? 100 * sec / t.step : 0.0, note.c_str());
    };
    row("GEMMs", t.gemm, strprintf("%lld calls", (long long)t.gemm_calls));
    row("attention (flash kernels)", t.attention, "");
    row("memory-bound kernels", t.memory, "");
    if (t.recompute > 0) row("recompute", t.recompute, "in backward");
    row("optimizer and step kernels", t.optimizer, "");
    if (t.host_elements > 0)
      row("host AdamW (CPU offload)", t.host_optimizer,
          strprintf("%s parameters on the host's cores", format_si((double)t.host_elements).c_str()));
    s += strprintf("  %-34s %14s %8s  %lld launches (%lld GEMM calls + %lld other kernels) x "
                   "%.3g us = %s, inside the rows above\n",
                   "  (launch overhead)", "", "", (long long)t.kernel_launches,
                   (long long)t.gemm_calls, (long long)(t.kernel_launches - t.gemm_calls),
                   t.launch_seconds / std::max<int64_t>(1, t.kernel_launches) * 1e6,
                   seconds_text(t.launch_seconds).c_str());
    for (const GroupTime& g : t.comm)
      row("exposed " + group_op(g), g.exposed,
          strprintf("of %s; %s, %s %.0f GB/s", seconds_text(g.seconds).c_str(),
                    g.overlap.c_str(), g.intra_node ? "in node" : "across nodes",
                    g.bandwidth_gbs));
    if (plan.pipeline.shape.p > 1) row("pipeline bubble", t.bubble, "rank 0's idle, simulated");
    row("step", t.step, "the slowest pipeline rank's view");
    s += strprintf("  tokens/s %s; MFU %.1f%% (model FLOPs, %s attention); HFU %.1f%% "
                   "(hardware FLOPs as run, recompute included)\n",
                   format_si(t.tokens_per_second).c_str(), 100 * t.mfu,
                   attention_flops_name(plan.flops.convention), 100 * t.hfu);
    if (p.training) {
      const TrainingTime& r = *p.training;
      s += strprintf("  training %s tokens: %.0f steps x %s = %s; Narayanan et al. eq. 4 "
                     "(%dTP/(nX), P = %s%s, X = %s FLOP/s/GPU projected): %s\n",
                     format_si(r.tokens).c_str(), r.steps, seconds_text(t.step).c_str(),
                     seconds_text(r.seconds).c_str(), r.narayanan_factor,
                     format_si(r.narayanan_params).c_str(),
                     plan.model.moe.enabled() ? " active" : "",
                     format_si(t.step > 0 ? plan.flops.hardware_per_step / t.step /
                                                plan.parallel.world_size
                                          : 0).c_str(),
                     seconds_text(r.narayanan_seconds).c_str());
    }
    s += "  assumptions:\n";
    for (const std::string& a : t.assumptions) s += "    - " + a + "\n";
    if (!t.sensitivity.empty()) {
      s += "  what moves it: the step if one profile figure were 2x worse (efficiency or "
           "bandwidth halved, latency doubled)\n   ";
      for (const StepTime::Sensitivity& x : t.sensitivity)
        if (x.change > 0.0005)
          s += strprintf(" %s%s %+.1f%%;", x.key.c_str(), x.assumed ? " (assumed)" : "",
                         100 * x.change);
      s += "\n";
    }
  }
  if (p.fp8) s += fp8_plan_text(*p.fp8);
  else if (!p.no_fp8.empty()) s += "FP8: no projection (" + p.no_fp8 + ")\n";
  if (p.fit) s += fit_line(*p.fit) + host_fit_line(*p.fit);
  return s;
}

// --plan --json's "fp8": what FP8 buys on this profile (plan/time_model_fp8.h), or why not.
static void fp8_time_json(JsonWriter& j, const PlanProjection& p) {
  if (p.fp8) {
    const Fp8StepTime& f = *p.fp8;
    j.key("fp8").begin_object().field("projected", true).field("recipe", f.recipe);
    j.field("fp8_peak_tflops", f.fp8_peak_tflops).field("peak_tflops", f.high_peak_tflops);
    j.field("gemm_s", f.gemm_high).field("gemm_fp8_s", f.gemm_fp8);
    j.field("cast_s", f.casts).field("cast_bytes", f.cast_bytes);
    j.field("cast_launches", f.cast_launches);
    j.field("step_s", f.step_high).field("step_fp8_s", f.step_fp8);
    j.key("linears").begin_array();
    for (const Fp8LinearTime& l : f.linears)
      j.begin_object().field("name", l.name).field("gemm_s", l.gemm_high)
          .field("gemm_fp8_s", l.gemm_fp8).field("cast_s", l.casts)
          .field("cast_bytes", l.cast_bytes).end_object();
    j.end_array();
    j.key("assumptions").begin_array();
    for (const std::string& a : f.assumptions) j.value(a);
    j.end_array().end_object();
  } else if (!p.no_fp8.empty()) {
    j.key("fp8").begin_object().field("projected", false).field("reason", p.no_fp8).end_object();
  }
}

void time_plan_json(JsonWriter& j, const Plan& plan, const PlanProjection& p) {
  if (p.time) {
    const StepTime& t = *p.time;
    j.key("time").begin_object();
    j.field("projected", true).field("hardware", t.hardware).field("peak_tflops", t.peak_tflops);
    j.field("step_s", t.step).field("gemm_s", t.gemm).field("attention_s", t.attention);
    j.field("memory_s", t.memory).field("recompute_s", t.recompute);
    j.field("optimizer_s", t.optimizer).field("compute_s", t.compute);
    j.field("host_optimizer_s", t.host_optimizer).field("host_elements", t.host_elements);
    j.field("exposed_pcie_s", t.exposed_pcie);
    j.field("launch_overhead_s", t.launch_seconds).field("kernel_launches", t.kernel_launches);
    j.field("gemm_calls", t.gemm_calls);
    j.field("exposed_comm_s", t.exposed_comm).field("bubble_s", t.bubble);
    j.key("comm").begin_array();
    for (const GroupTime& g : t.comm) {
      j.begin_object().field("group", group_name(g.group)).field("op", op_name(g.op));
      j.field("calls", g.calls).field("bus_bytes", g.bus_bytes);
      j.field("intra_node", g.intra_node).field("bandwidth_gbs", g.bandwidth_gbs);
      j.field("latency_us", g.latency_us).field("seconds", g.seconds);
      j.field("exposed_s", g.exposed).field("overlap", g.overlap).end_object();
    }
    j.end_array();
    j.key("stages").begin_array();
    for (const StageTime& st : t.stages)
      j.begin_object().field("F_s", st.F).field("B_s", st.B).field("W_s", st.W).end_object();
    j.end_array();
    j.field("tokens_per_second", t.tokens_per_second).field("mfu", t.mfu).field("hfu", t.hfu);
    j.field("mfu_convention", std::string("model FLOPs, ") +
                                  attention_flops_name(plan.flops.convention) + " attention");
    j.field("hfu_convention", "hardware FLOPs as run, recompute included");
    j.key("assumptions").begin_array();
    for (const std::string& a : t.assumptions) j.value(a);
    j.end_array();
    j.key("sensitivity").begin_array();
    for (const StepTime::Sensitivity& x : t.sensitivity)
      j.begin_object().field("key", x.key).field("assumed", x.assumed)
          .field("step_change", x.change).end_object();
    j.end_array().end_object();
  } else {
    j.key("time").begin_object().field("projected", false).field("reason", p.no_time).end_object();
  }
  fp8_time_json(j, p);
  if (p.training) {
    const TrainingTime& r = *p.training;
    j.key("training").begin_object().field("tokens", r.tokens).field("steps", r.steps);
    j.field("seconds", r.seconds).field("narayanan_seconds", r.narayanan_seconds);
    j.field("narayanan_factor", r.narayanan_factor);
    j.field("narayanan_params", r.narayanan_params).end_object();
  }
  if (p.fit) {
    const FitCheck& f = *p.fit;
    j.key("fit").begin_object().field("checked", f.checked()).field("fits", f.fits());
    j.field("peak_bytes", f.peak_bytes).field("peak_rank", f.peak_rank);
    j.field("capacity_bytes", f.capacity_bytes).field("capacity_source", f.capacity_source);
    if (f.largest_micro_batch > 0) j.field("largest_micro_batch", f.largest_micro_batch);
    if (f.smallest_zero_stage >= 0) j.field("smallest_zero_stage", f.smallest_zero_stage);
    if (f.smallest_tp > 0) j.field("smallest_tp", f.smallest_tp);
    if (f.host_node_bytes > 0) {  // CPU offload: the fullest node's host memory
      j.key("host").begin_object().field("checked", f.host_checked()).field("fits", f.host_fits());
      j.field("node", f.host_node).field("ranks_per_node", f.ranks_per_node);
      j.field("node_bytes", f.host_node_bytes).field("capacity_bytes", f.host_capacity_bytes);
      j.field("capacity_source", f.host_capacity_source).end_object();
    }
    j.end_object();
  }
}

std::string time_measured_text(const StepTime& t, const MeasuredTime& m) {
  std::string s = strprintf("time per step, rank 0: projected on %s vs measured\n",
                            t.hardware.c_str());
  s += strprintf("  %-26s %13s %13s %8s\n", "phase", "projected ms", "measured ms",
                 "ratio");
  auto row = [&](const std::string& name, double projected, double measured) {
    if (measured < 0)
      s += strprintf("  %-26s %13.2f %13s %8s\n", name.c_str(), projected * 1e3, "-", "");
    else
      s += strprintf("  %-26s %13.2f %13.2f %8.2f\n", name.c_str(), projected * 1e3,
                     measured * 1e3, measured > 0 ? projected / measured : 0.0);
  };
  // "the rest" is the step less every row above it: the kernels' phases, the exposed
  // communication and the bubble (unknown when the run could not time its kernels);
  // projected, the recompute and the launch overhead stay in it
  double projected_rest = t.step, measured_rest = m.gemm >= 0 ? m.step : -1;
  auto phase = [&](const char* name, double projected, double measured) {
    row(name, projected, measured);
    projected_rest -= projected;
    if (measured >= 0 && measured_rest >= 0) measured_rest -= measured;
  };
  row("step", t.step, m.step);
  phase("GEMMs", t.gemm, m.gemm);
  phase("attention (flash kernels)", t.attention, m.attention);
  phase("memory-bound kernels", t.memory, m.memory);
  phase("optimizer and step kernels", t.optimizer, m.optimizer);
  for (const auto& [group, exposed] : exposed_by_group(t)) {
    const double measured = measured_exposed(m.comm, group);
    if (group == CommGroup::PP) {
      // a stage blocked on its pp messages is idle: the bubble (below) counts that time
      row("exposed pp (in the bubble)", exposed, measured);
      continue;
    }
    row(std::string("exposed ") + group_name(group), exposed, measured);
    projected_rest -= exposed;
    if (measured >= 0 && measured_rest >= 0) measured_rest -= measured;
  }
  if (t.host_elements > 0 || m.host_optimizer > 0) {
    row("host AdamW (CPU offload)", t.host_optimizer, m.host_optimizer);
    projected_rest -= t.host_optimizer;
    if (m.host_optimizer >= 0 && measured_rest >= 0) measured_rest -= m.host_optimizer;
  }
  if (t.bubble > 0 || m.bubble >= 0) {
    row("pipeline bubble", t.bubble, m.bubble);
    projected_rest -= t.bubble;
    if (m.bubble >= 0 && measured_rest >= 0) measured_rest -= m.bubble;
  }
  row("other compute (the rest)", projected_rest, measured_rest);
  s += "  ratio = projected / measured; the projection's assumptions: trainer --plan "
       "--hardware ...\n";
  if (!m.ops.empty()) {  // --timing-log-level 2
    std::vector<std::pair<std::string, kernels::OpTime>> ops = m.ops;
    std::sort(ops.begin(), ops.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    s += strprintf("  each op, measured (--timing-log-level 2)   %8s %13s\n", "calls", "ms");
    for (const auto& [name, t] : ops)
      s += strprintf("    %-38s %8lld %13.3f\n", name.c_str(), t.calls, t.seconds * 1e3);
  }
  return s;
}

void time_step_json(JsonWriter& j, const StepTime& t, const MeasuredTime& m) {
  j.key("time").begin_object().field("hardware", t.hardware);
  j.key("step_s").begin_object().field("projected", t.step).field("measured", m.step).end_object();
  auto phase = [&](const char* key, double projected, double measured) {
    j.key(key).begin_object().field("projected", projected);
    if (measured >= 0) j.field("measured", measured);
    j.end_object();
  };
  phase("gemm_s", t.gemm, m.gemm);
  phase("attention_s", t.attention, m.attention);
  phase("memory_s", t.memory, m.memory);
  phase("optimizer_s", t.optimizer, m.optimizer);
  j.key("exposed_comm_s").begin_array();
  for (const auto& [group, exposed] : exposed_by_group(t)) {
    j.begin_object().field("group", group_name(group)).field("projected", exposed);
    const double measured = measured_exposed(m.comm, group);
    if (measured >= 0) j.field("measured", measured);
    j.end_object();
  }
  j.end_array();
  j.key("bubble_s").begin_object().field("projected", t.bubble);
  if (m.bubble >= 0) j.field("measured", m.bubble);
  j.end_object();
  if (t.host_elements > 0 || m.host_optimizer >= 0) {
    j.key("host_optimizer_s").begin_object().field("projected", t.host_optimizer);
    if (m.host_optimizer >= 0) j.field("measured", m.host_optimizer);
    j.end_object();
  }
  j.end_object();
}

}  // namespace paralab
