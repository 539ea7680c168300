// cli/flags.h: the command line and --config files -> one validated Options.
//
// Flag names follow Megatron-LM (DeepSpeed for --zero-stage), each with a short alias, so a
// lab command reads like a production one. CLI11 does the parsing: `--config FILE.toml`
// loads any flag by its long name without the dashes (`num-layers = 4`); the command line
// overrides the file, a later --config file overrides an earlier one, and a flag given
// twice takes the last value, so a lab appends its overrides to a preset.
//
// Every check runs here, before anything is allocated: a bad combination becomes one
// FlagError line naming the flags, the constraint and the values, e.g.
//   --num-attention-heads (6) must divide --hidden-size (64)
// and parse_flags_or_exit prints it as `paralab: error: ...` and exits with status 2.
//
// defines: Comm, Options, FlagError, HelpRequested, parse_flags, parse_flags_or_exit,
//          exit_on_input_error, exit_with_help, print_resolved_options, gpu_precision_refusal
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>
// defines: Device, cuda_device_count
#include "kernels/common.h"
// defines: ModelConfig, TrainConfig, ParallelConfig and their enums
#include "model/config.h"
// defines: InputError (the base of FlagError and DataError: exit status 2)
#include "model/data.h"
// defines: ManifestData (what a checkpoint records of the data)
#include "checkpoint/checkpoint_manifest.h"

namespace paralab {

enum class Comm { NCCL, MPI };
inline const char* comm_name(Comm c) { return c == Comm::NCCL ? "nccl" : "mpi"; }

// A DeepSpeed config's fp16 block (cli/flags_deepspeed.cpp), with DeepSpeed's defaults
// (runtime/constants.py), as read; cli/flags_deepspeed.cpp sets --fp16 and the loss-scale flags.
struct DeepSpeedFp16 {
  bool enabled = false;
  double loss_scale = 0;           // 0: dynamic
  int initial_scale_power = 16;    // the first scale, 2^16
  int loss_scale_window = 1000;    // clean steps between doublings
  int hysteresis = 2;              // overflows before a halving
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
};

struct Options {
  // Sizes are resolved: ffn_hidden_size, num_query_groups, kv_channels, global_batch_size and
  // lr_decay_iters hold their derived values, never the 0 that means "default"; with
  // --num-experts so do moe.ffn_hidden_size and moe.layer_pattern (one 0/1 per layer).
  ModelConfig model;
  TrainConfig train;
  // world_size is the launched world size, or --world-size when planning; zero_stage is
  // at least 1 with --use-distributed-optimizer; virtual_pipeline and pipeline_schedule are
  // resolved (interleaved when virtual stages are given without a schedule).
  ParallelConfig parallel;
  // Backends.
  kernels::Device device = kernels::Device::CPU;
  Comm comm = Comm::MPI;
  // The comm layer's watchdog: a wait for a collective or a pipeline message longer than this
  // ends the job with the group, the call and the step (a peer died or hangs); 0: none.
  double collective_timeout = 300;
  // --timing-log-level (kernels/counters.h): 0 no kernel timing, 1 per phase, 2 per op.
  int timing_log_level = 1;

  // Data (model/data.h): a token file, Megatron's indexed datasets or mock data, or (naming
  // nothing) the synthetic corpus; the sample counts Megatron's splits are asked for.
  DataSpec data;
  ManifestData data_record;  // the data in words and each .idx's CRC-32C (cli/flags_data.cpp)
  // --deepspeed_config (cli/flags_deepspeed.cpp): its path, the table --plan prints (every
  // effective value and its source), its fp16 block.
  struct {
    std::string path, effective;
    DeepSpeedFp16 fp16;
  } deepspeed;

  // Data parallelism (issue 3).
  bool overlap_grad_reduce = false;     // start each bucket's reduction during backward
  bool overlap_param_gather = false;    // all-gather updated params during the next forward
  int64_t ddp_bucket_size = 40000000;   // gradient elements per bucket
  int zero3_prefetch_layers = 1;        // layers whose params ZeRO-3 gathers ahead

  // Planning: print the predicted ledgers and exit, allocating nothing.
  bool plan = false;
  bool json = false;
  bool number_formats = false;          // print report/number_formats.h's table and exit
  int launched_world_size = 1;          // ranks mpirun started (parallel.world_size when training)
  bool print_schedule = false;          // with --plan: each pipeline rank's simulated timeline
  std::string trace;                    // with --plan: the simulated timeline as Chrome trace JSON

  // Time model and fit (issue 14): the hardware profile (a configs/hardware/ name or a
  // .toml file; empty: the one matched to the GPU, or configs/hardware/cpu.toml on CPU),
  // tokens to project the training time of, and running although the plan does not fit.
  std::string hardware;
  double plan_tokens = 0;               // 0: no training-time projection
  bool allow_oom = false;
  // Measure the machine (app/benchmark.h): GEMMs, memory bandwidth, collectives; the largest
  // buffer and message in MiB (0: the backend's default), and a profile to write.
  bool benchmark = false;
  double benchmark_max_mib = 0;
  std::string benchmark_save;

  // Reporting.
  std::string metrics_jsonl;            // one JSON object per step; empty: off
  std::string save_tensors;             // tests: final parameters and gradients, a tensor file
  // Checkpoints (checkpoint/checkpoint.h; Megatron's names) and Hugging Face (checkpoint/hugging_face.h).
  std::string save;                     // --save DIR: checkpoints; empty: off
  int save_interval = 0;                // every N steps (and at the end); 0: at the end only
  std::string load;                     // --load DIR: resume from DIR/latest (none: step 1)
  bool no_load_optim = false;           // weights (and position) only; Adam starts afresh
  int exit_interval = 0;                // stop after a step divisible by N (saving first)
  // Resuming (cli/flags_checkpoint.cpp, Megatron's names): the iteration to load (0: latest),
  // weights only at iteration 0 (--finetune), no optimizer state in the saves; a run that
  // starts before --save's latest moves it back only when told; --load of a folder without a
  // checkpoint refused even when it is --save's folder; minutes after which to stop (saving).
  int ckpt_step = 0;
  bool finetune = false, no_save_optim = false, override_latest = false;
  bool exit_on_missing_checkpoint = false;
  double exit_duration_in_mins = 0;     // 0: off
  // Resolved from --load (checkpoint/checkpoint.h locate_checkpoint): the iteration folder to
  // read (empty: none, start at step 1), its iteration and what chose it.
  std::string load_folder, load_chosen_by;
  int load_iteration = 0;
  // TensorBoard (report/tensorboard.h): event files of the scalars, every N steps.
  std::string tensorboard_dir;          // empty: off
  int tensorboard_log_interval = 1;
  bool tensorboard_validation_ppl = false;
  std::string export_hf;                // --export-hf DIR: the weights at the end, HF layout
  std::string export_hf_dtype;          // --export-hf-dtype fp32|bf16|fp16; "": the run's storage
  std::string load_hf;                  // --load-hf DIR: start from a Hugging Face export
  bool convert = false;                 // --convert: --load DIR to --export-hf OUT, no training
  int report_interval = 0;              // full ledger tables every N steps; 0: first and last only
  int log_interval = 1;                 // step line every N steps; its loss: the mean since the last
  int eval_interval = 0;                // validation loss every N steps and at the end; 0: off
  int eval_iters = 10;                  // validation batches (of the global batch) per evaluation
  double peak_tflops = 0.0;             // per rank; 0: configs/hardware/ or a timed GEMM
  AttentionFlops attention_flops = AttentionFlops::FULL;
  bool verbose = false;

  std::vector<std::string> config_files;  // as given, in order
  std::vector<std::string> warnings;      // adjustments the trainer prints (rank 0)
  std::string resolved_options;           // with --verbose: every flag's value and source
};

// A flag or config value the user can fix; the message is one line, without "error:".
struct FlagError : InputError {
  using InputError::InputError;
};

// Thrown by parse_flags for --help; text is the whole manual.
struct HelpRequested : std::exception {
  std::string text;
  explicit HelpRequested(std::string t) : text(std::move(t)) {}
  const char* what() const noexcept override { return "help requested"; }
};

// Parses, loads --config files, resolves defaults and checks every constraint (including
// the --data-path file). visible_gpus decides the --device default (cuda when > 0).
// Throws InputError — FlagError (any CLI11 parse error included) or DataError (from
// check_data_file) — or HelpRequested.
Options parse_flags(int argc, const char* const* argv, int launched_world_size,
                    int visible_gpus);

// The same, asking the CUDA runtime how many GPUs are visible (inline, so that a test binary
// that never calls it need not link kernels/).
inline Options parse_flags(int argc, const char* const* argv, int launched_world_size) {
  return parse_flags(argc, argv, launched_world_size, kernels::cuda_device_count());
}

// Prints `paralab: error: <message>` on stderr (print_rank 0 only: every rank parses the
// same flags and reaches the same verdict), runs before_exit(2) when set (e.g. to finalize
// MPI) and exits with status 2. Also the exit path for the DataLoader's DataError.
[[noreturn]] void exit_on_input_error(const InputError& e, int rank = 0,
                                      const std::function<void(int)>& before_exit = {});
// Prints the manual on stdout (rank 0 only), runs before_exit(0) and exits with status 0.
[[noreturn]] void exit_with_help(const HelpRequested& h, int rank = 0,
                                 const std::function<void(int)>& before_exit = {});
// The one line refusing the run's --bf16 or --fp8-format on this GPU (its name and compute
// capability as 10 major + minor; 0: no GPU), "" when it runs them (cli/flags_gpu.cpp). Every
// rank asks once its GPU is chosen (app/training_build.cpp).
std::string gpu_precision_refusal(const Options& o, const std::string& gpu,
                                  int compute_capability);

// --verbose: prints the resolved options (every flag's final value and where it came from:
// default, a --config file's line, the command line) on rank 0, on stdout (stderr with
// --plan --json); nothing without --verbose.
void print_resolved_options(const Options& o, int rank = 0);

// The trainer's entry point: the Options, or one of the exits above.
inline Options parse_flags_or_exit(int argc, const char* const* argv, int launched_world_size,
                                   int rank = 0,
                                   const std::function<void(int)>& before_exit = {}) {
  try {
    return parse_flags(argc, argv, launched_world_size, kernels::cuda_device_count());
  } catch (const HelpRequested& h) {
    exit_with_help(h, rank, before_exit);
  } catch (const InputError& e) {
    exit_on_input_error(e, rank, before_exit);
  }
}

}  // namespace paralab
