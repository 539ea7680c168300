// cli/flags_output.cpp: what the run prints and writes, and the jobs that only report: --plan
// (and --json, --world-size, --print-schedule, --trace), the time model's --hardware and
// --plan-tokens, --benchmark, --metrics-jsonl, --save-tensors, the report and log intervals,
// --peak-tflops, --verbose; their checks: which modes go together, and every output file or
// folder tried before the first step (a run that fails at its end has trained for nothing).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cli/flags_impl.h"  // defines: RawFlags, add_switch, one_of, check_at_least; cli/flags.h Options

namespace paralab {

namespace {

// Can a file be made in `folder`? Tried, not asked (access() says yes to root in /proc and
// /sys): a uniquely named empty file is created and removed at once, so that ranks probing the
// same folder never meet and a refused command line leaves nothing behind. "" or the reason.
std::string probe_folder(const std::string& folder) {
  const std::string probe = folder + "/.paralab-probe." + std::to_string(getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return std::strerror(errno);
  close(fd);
  unlink(probe.c_str());
  return "";
}

std::string parent_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
}

}  // namespace

// An output file written during or after the run (--trace, --metrics-jsonl, ...): its folder
// must exist and take a new file; an existing file must be a writable file.
void check_output_file(const char* flag, const std::string& path) {
  if (path.empty()) return;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail(flag, ": cannot write ", path, ": it is a directory");
    const int fd = open(path.c_str(), O_WRONLY | O_APPEND);  // changes nothing
    if (fd < 0) fail(flag, ": cannot write ", path, " (", std::strerror(errno), ")");
    close(fd);
    return;
  }
  const std::string dir = parent_of(path);
  if (stat(dir.c_str(), &st) != 0) fail(flag, ": cannot write ", path, ": no such directory ", dir);
  if (!S_ISDIR(st.st_mode)) fail(flag, ": cannot write ", path, ": ", dir, " is not a directory");
  const std::string why = probe_folder(dir);
  if (!why.empty()) fail(flag, ": cannot write ", path, " (", why, " in ", dir, ")");
}

// An output folder the run makes as mkdir -p does (--save, --export-hf, --tensorboard-dir):
// the deepest part of it that exists must be a folder that takes new entries.
void check_output_folder(const char* flag, const std::string& path) {
  if (path.empty()) return;
  std::string existing = path;
  struct stat st;
  while (stat(existing.c_str(), &st) != 0) {
    const std::string up = parent_of(existing);
    if (up == existing) break;
    existing = up;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (existing == path) fail(flag, ": ", path, " is a file, not a folder");
    fail(flag, ": cannot make ", path, ": ", existing, " is not a directory");
  }
  const std::string why = probe_folder(existing);
  if (!why.empty())
    fail(flag, ": cannot ", existing == path ? "write into " : "make ", path, " (", why,
         existing == path ? "" : " in " + existing, ")");
}

// Two outputs naming one file would overwrite each other, and an output naming an input
// (--data-path, a --config file) would destroy it when the run opens it: refused, naming both.
static void check_outputs_distinct(const Options& o) {
  std::vector<std::pair<std::string, std::string>> files = {
      {"--trace", o.trace}, {"--metrics-jsonl", o.metrics_jsonl},
      {"--save-tensors", o.save_tensors}, {"--benchmark-save", o.benchmark_save}};
  const size_t outputs = files.size();
  files.push_back({"--data-path", o.data.path});
  for (const std::string& c : o.config_files) files.push_back({"--config", c});
  auto same = [](const std::string& a, const std::string& b) {
    struct stat sa, sb;
    if (stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0)
      return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return a == b;
  };
  for (size_t i = 0; i < outputs; ++i)
    for (size_t j = i + 1; j < files.size() && !files[i].second.empty(); ++j)
      if (!files[j].second.empty() && same(files[i].second, files[j].second))
        fail(files[i].first, " ", files[i].second, " is also ", files[j].first, j < outputs ?
             ": two outputs would overwrite each other" : ": the output would overwrite the input");
}

// What a training run prints and writes (the jobs that only report are above).
static void add_run_output_flags(CLI::App& app, Options& o, RawFlags& raw, const char* kReport) {
  app.add_option("--metrics-jsonl", o.metrics_jsonl,
                 "write one JSON object per step, with every reported field, to this file "
                 "(replacing it)")
      ->type_name("FILE")->group(kReport);
  app.add_option("--save-tensors", o.save_tensors,
                 "tests: at the end, write every parameter and, as grad.<name>, the last "
                 "step's summed gradient, at full shape (gathered over dp and tp), to this "
                 "tensor file (checkpoint/tensor_file.h)")
      ->type_name("FILE")->group(kReport);
  app.add_option("--report-interval", o.report_interval,
                 "print the full ledger tables every N steps (always at step 1 and at the "
                 "end); 0: only then")
      ->capture_default_str()->group(kReport);
  app.add_option("--log-interval", o.log_interval,
                 "print the step line every N steps (and at step 1 and the last); its loss "
                 "is the mean over the steps since the previous line")
      ->capture_default_str()->group(kReport);
  app.add_option("--peak-tflops", o.peak_tflops,
                 "peak TFLOP/s of one rank for MFU/HFU; 0: the GPU's entry in "
                 "configs/hardware/, or on CPU the best of 5 timed GEMMs at start-up, which "
                 "varies between runs: give it to compare MFU across runs")
      ->capture_default_str()->group(kReport);
  app.add_option("--attention-flops", raw.attention_flops,
                 "count attention FLOPs as full (s x s, Korthikanti/PaLM; compare with "
                 "papers) or causal (half); model FLOPs and MFU use it")
      ->check(one_of({"full", "causal"}))->capture_default_str()->group(kReport);
  add_switch(app, "--verbose,-v", o.verbose,
             "print every flag's final value and where it came from (default, a --config "
             "file's line, the command line) before the run or the plan, and the rank grid "
             "when training; rank 0 only")
      ->group(kReport);
}

void add_output_flags(CLI::App& app, Options& o, RawFlags& raw) {
  const char* kReport = "Report and plan";
  add_switch(app, "--plan", o.plan,
             "print the predicted memory, FLOPs, communication and pipeline bubble of "
             "this configuration and exit, allocating nothing; --world-size N plans for N "
             "ranks")
      ->group(kReport);
  add_switch(app, "--json", o.json,
             "with --plan, --benchmark or --number-formats: print JSON")->group(kReport);
  add_switch(app, "--number-formats", o.number_formats,
             "print the range of each number format paralab computes in (fp32, bf16, fp16, "
             "E4M3, E5M2: max, min normal, min subnormal, epsilon), measured from the "
             "kernels' own decoders, and exit")
      ->group(kReport);
  app.add_option("--world-size", raw.world_size,
                 "with --plan: plan for this many ranks (>= 1) without launching them (a run's "
                 "world size is the number of ranks mpirun starts)")
      ->group(kReport);
  add_switch(app, "--print-schedule", o.print_schedule,
             "each pipeline rank's timeline, to scale, idle as dots: simulated with --plan "
             "(on stderr with --json), else the last step's as measured")
      ->group(kReport);
  app.add_option("--trace", o.trace,
                 "write the pipeline timeline as Chrome trace JSON, one process per rank "
                 "(ui.perfetto.dev): simulated with --plan, else the last step's as measured")
      ->type_name("FILE")->group(kReport);
  app.add_option("--hardware", o.hardware,
                 "hardware profile for the time model and the fit check: a name in "
                 "configs/hardware/ (h100-sxm, a100-80gb, cpu, ...) or a .toml file (from "
                 "--benchmark-save); default: the profile matching the GPU, on CPU "
                 "configs/hardware/cpu.toml")
      ->type_name("NAME|FILE")->group(kReport);
  app.add_option("--plan-tokens", o.plan_tokens,
                 "with --plan: project the wall-clock time to train this many tokens (e.g. "
                 "300e9), by the time model and by Narayanan et al. eq. 4")
      ->group(kReport);
  add_switch(app, "--allow-oom", o.allow_oom,
             "train even when the plan's peak memory per rank exceeds what the device (GPU: "
             "its free memory; CPU: the host's available memory over the ranks on the node) "
             "has")
      ->group(kReport);
  add_switch(app, "--benchmark", o.benchmark,
             "measure the machine and exit: GEMM TFLOP/s by size, memory bandwidth, kernel "
             "launch overhead, and per group size the bus bandwidth and latency of "
             "all-reduce, all-gather, reduce-scatter, all-to-all and send/recv (nccl-tests' "
             "convention); names a rank far slower than its peers")
      ->group(kReport);
  app.add_option("--benchmark-max-mib", o.benchmark_max_mib,
                 "with --benchmark: the largest GEMM operand and message, MiB; 0: 64 on CPU, "
                 "1024 on GPU")
      ->capture_default_str()->group(kReport);
  app.add_option("--benchmark-save", o.benchmark_save,
                 "with --benchmark: write the measured hardware profile to this .toml file "
                 "(use it with --hardware FILE)")
      ->type_name("FILE")->group(kReport);
  add_run_output_flags(app, o, raw, kReport);
}

void check_run_modes(Options& o, const RawFlags& raw) {
  // Planning may describe a machine this one is not; a run may not.
  if (raw.world_size_given && !o.plan)
    fail("--world-size (", raw.world_size,
         ") is only for --plan; a run's world size is the number of ranks mpirun starts");
  if (o.json && !o.plan && !o.benchmark && !o.number_formats)
    fail("--json only applies to --plan, --benchmark and --number-formats");
  if (o.number_formats && (o.plan || o.benchmark))
    fail("--number-formats prints a table and exits: give it without --plan and --benchmark");
  // --benchmark measures the machine and exits: it neither plans nor trains.
  if (o.benchmark && o.plan)
    fail("--benchmark measures this machine and --plan predicts without running: give one");
  if (!o.benchmark_save.empty() && !o.benchmark)
    fail("--benchmark-save (", o.benchmark_save,
         ") writes what --benchmark measures: add --benchmark");
  o.attention_flops = raw.attention_flops == "causal" ? AttentionFlops::CAUSAL
                                                      : AttentionFlops::FULL;
  check_at_least("--report-interval", o.report_interval, 0);
  check_at_least("--log-interval", o.log_interval, 1);
  check_at_least("--peak-tflops", o.peak_tflops, 0);
  check_finite("--peak-tflops", o.peak_tflops);
  check_at_least("--plan-tokens", o.plan_tokens, 0);
  check_finite("--plan-tokens", o.plan_tokens);
  check_at_least("--benchmark-max-mib", o.benchmark_max_mib, 0);
  check_finite("--benchmark-max-mib", o.benchmark_max_mib);
}

void check_outputs(const Options& o) {
  // Every output, written during the run or after it, is tried before the first step (a run
  // that fails at its end has trained for nothing), for a run and for --plan alike.
  check_output_file("--trace", o.trace);
  check_output_file("--metrics-jsonl", o.metrics_jsonl);
  check_output_file("--save-tensors", o.save_tensors);
  check_output_file("--benchmark-save", o.benchmark_save);
  check_output_folder("--save", o.save);
  check_output_folder("--export-hf", o.export_hf);
  check_output_folder("--tensorboard-dir", o.tensorboard_dir);
  check_outputs_distinct(o);
}

}  // namespace paralab
