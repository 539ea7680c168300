// app/projection.cpp: see app/projection.h.
#include "app/projection.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <vector>

#include "report/checkpoint_report.h"
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include "kernels/common.h"           // cuda_device_name
#include "measure/device_memory.h"
#include "report/rank_metrics.h"      // all_gather_doubles
#include "report/report.h"
#include "report/timeline.h"

namespace paralab {

// The profiles: configs/hardware under the working directory (a checkout's root), else
// beside the binary (./trainer links to build/<flavour>/trainer: the checkout holding it),
// so a run started in a scratch folder finds them too.
static std::string hardware_dir() {
  namespace fs = std::filesystem;
  const fs::path here = "configs/hardware";
  std::error_code missing;  // a folder that is not there is an answer here, not an error
  if (fs::is_directory(here, missing)) return here.string();
  std::error_code unreadable;
  fs::path dir = fs::canonical("/proc/self/exe", unreadable).parent_path();
  for (int up = 0; !unreadable && up < 4 && !dir.empty(); ++up, dir = dir.parent_path()) {
    if (fs::is_directory(dir / here, missing)) return (dir / here).string();
    if (dir == dir.root_path()) break;
  }
  return here.string();  // its absence is reported where a profile is looked up
}

PlanOptions plan_options(const Options& o) {
  PlanOptions p;
  p.attention_flops = o.attention_flops;
  p.overlap_grad_reduce = o.overlap_grad_reduce;
  p.overlap_param_gather = o.overlap_param_gather;
  p.ddp_bucket_size = o.ddp_bucket_size;
  p.zero3_prefetch_layers = o.zero3_prefetch_layers;
  p.flash_ring_by_group = o.comm == Comm::MPI;
  p.checkpoint_optimizer = !o.no_save_optim;
  return p;
}

namespace {
// --benchmark-save writes source = "trainer --benchmark, DATE, HOST, N rank(s)": a profile
// measured elsewhere, or with another number of ranks sharing the node, projects that
// machine's steps. Said beside the time table instead of printing ratios as if they were
// this machine's.
std::string foreign_profile_note(const HardwareProfile& p, int ranks) {
  std::vector<std::string> parts;
  std::stringstream in(p.source);
  for (std::string part; std::getline(in, part, ',');)
    parts.push_back(part.substr(part.find_first_not_of(' ')));
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  const std::string measure = "; measure this one: mpirun -np " + std::to_string(ranks) +
                              " ./trainer --device cpu --benchmark --benchmark-save my.toml, "
                              "then --hardware my.toml";
  if (parts.size() != 4 || parts[0] != "trainer --benchmark")
    return "note: " + p.file + " was not measured here (" + p.source + ")" + measure;
  const int measured_ranks = std::atoi(parts[3].c_str());
  if (parts[2] == host && measured_ranks == ranks) return "";
  return "note: " + p.file + " was measured on " + parts[2] + " with " + parts[3] + ", this run is " +
         host + " with " + std::to_string(ranks) + " rank" + (ranks == 1 ? "" : "s") +
         ": its projections are that machine's" + measure;
}
}  // namespace

HardwareChoice choose_hardware(const Options& o, bool training) {
  HardwareChoice c;
  const std::string directory = hardware_dir();
  if (!o.hardware.empty()) {
    try {
      c.profile = find_hardware_profile(o.hardware, directory);
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      throw FlagError(what.rfind("--hardware", 0) == 0 ? what : "--hardware: " + what);
    }
    c.found = true;
    return c;
  }
  if (o.device == kernels::Device::CUDA) {
    const std::string gpu = kernels::cuda_device_name();
    const std::vector<HardwareProfile> all = load_hardware_profiles(directory);
    if (const HardwareProfile* p = match_hardware_profile(all, gpu)) {
      c.profile = *p;
      c.found = true;
    } else {
      c.reason = "no configs/hardware profile matches \"" + gpu + "\"; give --hardware";
    }
    return c;
  }
  const std::string cpu = directory + "/cpu.toml";
  if (training && std::ifstream(cpu).good()) {
    c.profile = find_hardware_profile(cpu, directory);
    c.found = true;
    c.note = foreign_profile_note(c.profile, o.launched_world_size);
    return c;
  }
  c.reason = training ? "no " + cpu + ": make it with trainer --benchmark --benchmark-save " + cpu
                      : "give --hardware NAME (configs/hardware: h100-sxm, a100-80gb, cpu, ...)";
  return c;
}

void plan_extras(PlanExtras& out, const Options& o, const Plan& plan, const HardwareChoice& hw) {
  out.view = PlanProjection{};
  if (!hw.found) {
    out.view.no_time = hw.reason;
    out.fit = check_fit(plan, 0, "no hardware profile", false);
    out.view.fit = &out.fit;
    return;
  }
  try {
    out.time = project_step_time(plan, hw.profile);
  } catch (const std::invalid_argument& e) {
    throw FlagError(std::string("--hardware: ") + e.what());
  }
  out.view.time = &out.time;
  if (o.model.fp8.enabled) {  // what FP8 buys on this profile (plan/time_model_fp8.h)
    try {
      out.fp8 = project_fp8_step(plan, hw.profile, out.time, o.model.fp8.recipe);
      out.view.fp8 = &out.fp8;
    } catch (const std::invalid_argument& e) {
      out.view.no_fp8 = e.what();
    }
  }
  out.view.checkpoint_seconds = checkpoint_seconds(plan, &hw.profile);
  const double capacity = hw.profile.memory_gib * 1073741824.0;
  out.fit = check_fit(plan, capacity,
                      capacity > 0 ? hw.profile.name + " memory_gib"
                                   : "the profile states no memory_gib",
                      true);
  // CPU offload: each node's host memory (gpus_per_node ranks) against its RAM
  check_host_fit(out.fit, plan, hw.profile.gpus_per_node,
                 hw.profile.host_memory_gib * 1073741824.0,
                 hw.profile.host_memory_gib > 0 ? hw.profile.name + " host_memory_gib"
                                                : "the profile states no host_memory_gib");
  out.view.fit = &out.fit;
  if (o.plan_tokens > 0) {
    out.training = project_training_time(plan, out.time, o.plan_tokens);
    out.view.training = &out.training;
  }
}

void check_run_fits(const Options& o, const Plan& plan, const World& w, Topology& topo) {
  const bool cuda = o.device == kernels::Device::CUDA;
  const AvailableMemory mine = available_memory(cuda, w.local_size);
  // this rank's own predicted peak (its stage, its tp and cp share); CPU offload's host bytes
  // come from the same memory on the CPU backend, from the node's RAM on a GPU
  const int64_t host = plan.ranks.at(w.rank).memory.host.total();
  const int64_t peak = plan.ranks.at(w.rank).memory.total() + (cuda ? 0 : host);
  if (cuda && host > 0) {
    FitCheck f;
    check_host_fit(f, plan, w.local_size, available_memory(false, 1).bytes,
                   "the host's MemAvailable");
    if (!f.host_fits() && !o.allow_oom) exit_all_ranks("error: " + fit_error(f), 2);
  }
  std::vector<double> all = {mine.bytes, (double)peak};
  if (w.size > 1) all = all_gather_doubles(topo.world(), all);
  for (int r = 0; r < (int)all.size() / 2; ++r) {
    const double capacity = all[2 * r], needed = all[2 * r + 1];
    if (capacity <= 0 || needed <= capacity || o.allow_oom) continue;
    FitCheck f;
    f.capacity_bytes = capacity;
    f.capacity_source = r == w.rank ? mine.source
                        : "rank " + std::to_string(r) +
                              (o.device == kernels::Device::CUDA
                                   ? "'s GPU free memory"
                                   : "'s share of its host's MemAvailable");
    f.peak_bytes = (int64_t)needed;
    f.peak_rank = r;
    exit_all_ranks("error: " + fit_error(f), 2);
  }
}

int run_plan(const Options& o, const World& w) {
  Plan plan;
  try {
    plan = make_plan(o.model, o.train, o.parallel, plan_options(o));
  } catch (const std::invalid_argument& e) {
    exit_on_input_error(FlagError(e.what()), w.rank, [](int) { finalize_world(); });
  }
  // the time model and the fit check on the hardware profile
  PlanExtras extras;
  Peak peak{o.peak_tflops, o.peak_tflops > 0 ? "flag" : "give --peak-tflops or --hardware for MFU"};
  HardwareChoice hw;
  try {
    hw = choose_hardware(o, false);
    plan_extras(extras, o, plan, hw);
    if (hw.found && o.peak_tflops <= 0) peak = peak_from_profile(hw.profile, o.train.precision());
  } catch (const InputError& e) {
    exit_on_input_error(e, w.rank, [](int) { finalize_world(); });
  }
  if (w.rank != 0) return 0;
  // what the flags adjusted, as training says it (stderr: --json keeps stdout parseable)
  for (const std::string& warning : o.warnings)
    std::fprintf(stderr, "paralab: warning: %s\n", warning.c_str());
  if (o.json)
    std::printf("%s\n", plan_json(plan, &peak, true, &extras.view).c_str());
  else
    std::printf("%s\n%s\n%s%s", plan_text(plan, &peak).c_str(),
                time_plan_text(plan, extras.view).c_str(),
                checkpoint_plan_text(plan, hw.found ? &hw.profile : nullptr).c_str(),
                o.deepspeed.effective.empty() ? "" : ("\n" + o.deepspeed.effective).c_str());
  // The pipeline's simulated timeline: text beside the plan (stderr keeps --json parseable),
  // and as a Chrome trace at 1 ms per cost unit.
  const PipelinePlan& pp = plan.pipeline;
  if (o.print_schedule)
    std::fprintf(o.json ? stderr : stdout, "%s",
                 render_timeline(pp.schedule, pp.sim, pp.costs).c_str());
  if (!o.trace.empty()) {
    std::vector<TraceSpan> spans;
    std::vector<TraceFlow> flows;
    schedule_trace(pp.schedule, pp.sim, pp.costs, 1000.0, &spans, &flows);
    try {
      write_chrome_trace(o.trace, spans, flows,
                         std::string("paralab --plan: simulated ") +
                             schedule_name(pp.shape.kind) + " schedule, 1 ms per cost unit");
    } catch (const std::runtime_error& e) {
      exit_on_input_error(FlagError(e.what()), w.rank, [](int) { finalize_world(); });
    }
    std::fprintf(o.json ? stderr : stdout,
                 "trace: wrote %s (simulated, 1 ms per cost unit; open in ui.perfetto.dev)\n",
                 o.trace.c_str());
  }
  return 0;
}

}  // namespace paralab
