// cli/flags_impl.h: what the files of cli/ share: the string flags as typed (RawFlags), the
// checks' helpers, and each topic's three functions: add_<topic>_flags (its flags and help text,
// in its group of the manual), and the checks that resolve and refuse them, called in order by
// resolve_and_check (cli/flags_check.cpp). One file a topic: cli/flags_model.cpp,
// flags_training.cpp, flags_recompute.cpp, flags_precision.cpp, flags_fp8.cpp, flags_parallel.cpp,
// flags_offload.cpp, flags_moe.cpp, flags_pipeline.cpp, flags_backend.cpp, flags_data.cpp,
// flags_output.cpp, flags_checkpoint.cpp, flags_megatron.cpp, flags_deepspeed.cpp; the --config
// files in flags_toml.cpp, the messages in flags_messages.cpp. Not for other files: cli/flags.h is the interface.
//
// defines: RawFlags, fail, check_at_least, check_finite, check_unit_interval, add_switch,
//          resolve_and_check, and per topic add_*_flags and check_*; closest_flag,
//          check_output_file, check_output_folder, kIntOrList, ConfigEntry, check_config_files,
//          typed_on_command_line, cli11_error_message, ManualFormatter, one_of, seed_range,
//          resolved_options_text
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>
#include "cli/flags.h"  // defines: Options, FlagError

namespace paralab {

// String flags are kept as text while parsing (so --help lists the choices by name) and
// mapped to the enums of model/config.h once parsing is done.
struct RawFlags {
  std::string arch = "gpt", attention = "flash", lr_decay_style = "cosine";
  std::string attention_flops = "full", device, comm;
  bool use_distributed_optimizer = false;
  bool zero_stage_given = false;  // set after parsing
  int world_size = 0;  // --world-size
  bool world_size_given = false;  // set after parsing: 0 is an error, not "unset"
  std::string pipeline_schedule;   // empty: 1f1b, or interleaved with virtual stages
  int virtual_pipeline = 0;        // 0 = not given
  int layers_per_virtual_stage = 0;
  // Recompute (model/config.h Recompute), as typed; "" / empty / 0: not given.
  std::string recompute_granularity, recompute_method;
  int recompute_num_layers = 0;
  bool recompute_num_layers_given = false;  // set after parsing: 0 is an error, not "unset"
  std::vector<std::string> recompute_modules;
  // Expert parallelism: --expert-tensor-parallel-size as typed (unset: --tp, Megatron's
  // default) and --moe-token-dispatcher-type.
  int expert_tensor_parallel = 0;
  bool expert_tensor_parallel_given = false;  // set after parsing: 0 is an error, not "unset"
  std::string moe_token_dispatcher = "allgather";
  std::string cp_comm_type = "p2p";
  // The data (cli/flags_data.cpp): --data-path and the per-split paths as typed (a prefix, a
  // file, or a blend's words), Megatron's --split, --mock-data, the tokenizer's flags.
  std::vector<std::string> data_path, train_data_path, valid_data_path, test_data_path;
  std::string split;
  bool mock_data = false;
  std::string tokenizer_type, vocab_file, merge_file, tokenizer_model;
  bool vocab_size_given = false;  // set after parsing
  // DeepSpeed (cli/flags_deepspeed.cpp): --deepspeed, --deepspeed_config, the batch triad as the
  // config gives it (0: absent or "auto"), the config's keys that change nothing here.
  bool deepspeed = false, deepspeed_checkpointing = false;
  std::string deepspeed_config;
  std::tuple<int64_t, int64_t, int64_t> deepspeed_batch{0, 0, 0};
  std::vector<std::string> deepspeed_batch_sources;  // each of the triad's, for --plan
  std::vector<std::string> deepspeed_no_effect;
  std::string cp_layout = "zigzag";
  // FP8 (cli/flags_fp8.cpp), as typed: --fp8-format ("" = off), --fp8-recipe,
  // --fp8-amax-compute-algo.
  std::string fp8_format, fp8_recipe = "delayed", fp8_amax_compute_algo = "most_recent";
  // The loss scale's flags given on the command line (cli/flags_precision.cpp): the dynamic
  // scaler's, and --loss-scale.
  std::vector<std::string> dynamic_loss_scale_flags_given;
  bool loss_scale_given = false;
  // Megatron's precision-aware optimizer (cli/flags_precision_optimizer.cpp), as typed.
  bool use_precision_aware_optimizer = false;
  std::string exp_avg_dtype = "fp32", exp_avg_sq_dtype = "fp32", main_params_dtype = "fp32",
              main_grads_dtype = "fp32";
  // Typed on the command line (not read from a --config file): a preset's warm-up may be
  // clamped to a decay the user shortened there (cli/flags_training.cpp), the user's own never.
  bool warmup_on_command_line = false, train_iters_on_command_line = false,
       decay_iters_on_command_line = false;
  // --bf16 or --fp16 typed there: it turns a --config file's other one off (cli/flags.cpp).
  bool bf16_on_command_line = false, fp16_on_command_line = false;
  bool kv_channels_given = false;  // set after parsing: 0 is an error, not "h/a"
  bool rotary_base_given = false;  // set after parsing: gpt warns that it ignores it
  // Mixture of experts (cli/flags_moe.cpp), as typed.
  std::string moe_layer_freq = "1";  // an int N or a list expression, read by check_moe
  std::string moe_score_function = "softmax", moe_load_balancing = "aux_loss",
              moe_drop_policy = "probs";
  // Set after parsing: the --moe-* flags given (a switch: given true), in the manual's order,
  // and which of the "unset = none" numbers were given (0 is then an error, not "none").
  std::vector<std::string> moe_flags_given;
  bool moe_ffn_given = false, moe_capacity_given = false, moe_topk_scaling_given = false;
  // Megatron-LM's spellings (cli/flags_megatron.cpp), as typed.
  struct Megatron {
    bool swiglu = false, untie = false, no_bias = false, gqa = false, rotary = false,
         no_position_embedding = false, recompute_activations = false, check_nan = false,
         validation_ppl = false;
    std::string normalization, position_embedding_type;
    int max_position_embeddings = 0;
    double rotary_percent = 1.0, lr_warmup_fraction = 0, timeout_minutes = 0;
    int64_t train_samples = 0, lr_warmup_samples = 0, lr_decay_samples = 0;
    bool samples = false, fraction = false;  // set after parsing: given
    std::map<std::string, std::string> no_effect_values;  // the no-effect flags' values
    std::vector<std::string> no_effect;  // set after parsing: "--flag (why)", as given
  } megatron;
};

// Streams its arguments into one FlagError: fail("--x (", 3, ") must ...").
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  throw FlagError(s.str());
}

// Written as !(value >= min) so that a NaN fails too.
inline void check_at_least(const char* flag, double value, double min) {
  if (!(value >= min)) fail(flag, " must be >= ", min, ", got ", value);
}
inline void check_finite(const char* flag, double value) {
  if (!std::isfinite(value)) fail(flag, " must be a finite number, got ", value);
}
inline void check_unit_interval(const char* flag, double value) {  // [0, 1)
  if (!(value >= 0.0 && value < 1.0)) fail(flag, " must be in [0, 1), got ", value);
}

// A switch whose final value --verbose can show (CLI11 reads a flag's variable only to set it).
inline CLI::Option* add_switch(CLI::App& app, const std::string& names, bool& value,
                               const std::string& help) {
  return app.add_flag(names, value, help)->default_function([&value] {
    return std::string(value ? "true" : "false");
  });
}

// Fills the derived values and checks every constraint, each topic after those it reads
// (cli/flags_check.cpp).
// Throws FlagError (or check_data_file's DataError) naming the flags, the constraint, the values.
void resolve_and_check(Options& o, const RawFlags& raw, int visible_gpus);

// ---- one topic a file; add_* in the manual's order, check_* in resolve_and_check's ----
// cli/flags_model.cpp: --arch and the sizes; check_model derives ffn, query groups, head dim.
void add_model_flags(CLI::App& app, Options& o, RawFlags& raw);
void check_model(Options& o, const RawFlags& raw);
// cli/flags_training.cpp: batch, steps, AdamW, the learning-rate schedule, seed, evaluation.
// check_batch (after the layout: dp) derives the global batch; check_optimizer the schedule.
void add_training_flags(CLI::App& app, Options& o, RawFlags& raw);
void check_batch(Options& o, const RawFlags& raw);
void check_optimizer(Options& o, const RawFlags& raw);
// cli/flags_recompute.cpp: --recompute-*; checked after the pipeline's stages are known.
void add_recompute_flags(CLI::App& app, RawFlags& raw);
void check_recompute(Options& o, const RawFlags& raw);
// cli/flags_precision.cpp: --bf16, --fp16 and the loss scale; record_precision_flags_given
// after parsing, check_precision after the backend.
void add_precision_flags(CLI::App& app, Options& o);
// cli/flags_fp8.cpp: --fp8-format, --fp8-recipe, --fp8-margin, --fp8-amax-*; check_fp8 fills
// o.model.fp8 and refuses what FP8 does not run with (--fp16, --num-experts).
void add_fp8_flags(CLI::App& app, Options& o, RawFlags& raw);
void check_fp8(Options& o, const RawFlags& raw);
void record_precision_flags_given(const CLI::App& app, RawFlags& raw);
void resolve_precision(Options& o, const RawFlags& raw);  // --bf16/--fp16 typed over a config's
void check_precision(Options& o, const RawFlags& raw);
// cli/flags_precision_optimizer.cpp: --use-precision-aware-optimizer and its dtypes;
// checked after ZeRO's stage and CPU offload are resolved.
void add_precision_optimizer_flags(CLI::App& app, RawFlags& raw);
void check_precision_optimizer(Options& o, const RawFlags& raw);
// cli/flags_parallel.cpp: tp, sp, cp, ep, etp, the dispatcher, ZeRO, DDP's buckets (and
// add_offload_flags). check_parallel_layout: the world and what tp and cp ask of the model;
// check_sequence_parallel after MoE; check_zero (and check_offload_flags) the stage.
void add_parallel_flags(CLI::App& app, Options& o, RawFlags& raw);
void check_parallel_layout(Options& o, const RawFlags& raw);
void check_sequence_parallel(Options& o);
void check_zero(Options& o, const RawFlags& raw);
// cli/flags_backend.cpp: --device, --comm, --collective-timeout.
void add_backend_flags(CLI::App& app, Options& o, RawFlags& raw);
void check_backend(Options& o, const RawFlags& raw, int visible_gpus);
// cli/flags_data.cpp: --data-path and its kin, --split, --mock-data, the tokenizer's flags;
// resolve_tokenizer (first: it may fix --vocab-size), check_data (last: it reads the files).
void add_data_flags(CLI::App& app, Options& o, RawFlags& raw);
void resolve_tokenizer(Options& o, const RawFlags& raw);
void check_data(Options& o, const RawFlags& raw);
// cli/flags_output.cpp: --plan and the reports; check_run_modes first, check_outputs last.
void add_output_flags(CLI::App& app, Options& o, RawFlags& raw);
void check_run_modes(Options& o, const RawFlags& raw);
void check_outputs(const Options& o);
// cli/flags_deepspeed.cpp: --deepspeed --deepspeed_config FILE. resolve_deepspeed (after
// parsing, before the checks: the config sets flags) reads the file; check_deepspeed_batch
// (once dp is known) completes the batch triad.
void add_deepspeed_flags(CLI::App& app, Options& o, RawFlags& raw);
void resolve_deepspeed(Options& o, RawFlags& raw, const CLI::App& app);
void check_deepspeed_batch(Options& o, const RawFlags& raw);
// ---- cli/flags_moe.cpp ----
// The type name of an option that takes an integer or a quoted string (--moe-layer-freq): the
// --config reader accepts either for it.
constexpr const char* kIntOrList = "N|LIST";
// --num-experts and the --moe-* flags, in their own group of the manual.
void add_moe_flags(CLI::App& app, Options& o, RawFlags& raw);
// After parsing: which --moe-* flags were given (raw.moe_flags_given and the *_given bools).
void record_moe_flags_given(const CLI::App& app, RawFlags& raw);
// Resolves o.model.moe (the layer pattern, the expert width) and checks the MoE flags; after
// the parallel layout and recompute are resolved. Throws FlagError.
void check_moe(Options& o, const RawFlags& raw);
// ---- cli/flags_pipeline.cpp ----
// --pp, --pipeline-schedule, --vpp and the uneven splits, in the manual's `group`.
void add_pipeline_flags(CLI::App& app, Options& o, RawFlags& raw, const char* group);
// Resolves the schedule and its chunks per rank (o.parallel) and checks the layers of each
// stage; after the parallel sizes. Throws FlagError.
void check_pipeline(Options& o, const RawFlags& raw);
// Once the microbatches per step and recompute are known: the schedule's constraints on them.
void check_pipeline_run(const Options& o, int microbatches);
// ---- cli/flags_megatron.cpp ----
// Megatron-LM's flags for a pasted launch script, in their own group of the manual.
void add_megatron_flags(CLI::App& app, Options& o, RawFlags& raw);
// After parsing, before resolve_and_check: the model's parts against --arch (raw.arch may
// become llama), the settings given under Megatron's names, the no-effect flags. FlagError.
void resolve_megatron_flags(const CLI::App& app, Options& o, RawFlags& raw);
// Once the global batch is resolved: --train-samples, the samples schedule, the warm-up
// fraction. FlagError.
void apply_megatron_schedule(Options& o, const RawFlags& raw);
// The warning line naming the no-effect flags given ("" when none).
std::string megatron_no_effect_warning(const RawFlags& raw);
// What to use instead of a flag paralab does not take but a Megatron-LM or Megatron-DeepSpeed
// script may ("use --num-query-groups" for --num-groups), or "" (cli/flags_megatron.cpp).
std::string megatron_alias(const std::string& typed);
// cli/flags_messages.cpp: the flag an unknown flag or --config key was meant to be: `_` read
// as `-`, then the closest long name by edit distance (at most 1 edit in 4 characters, and 1
// for short names); "" when nothing is close. "--num-layer" -> "--num-layers".
std::string closest_flag(const CLI::App& app, const std::string& typed);

// cli/flags_checkpoint.cpp: --save, --load, --export-hf and their kin, and their checks
// (--load resolved into o.load_folder).
void add_checkpoint_flags(CLI::App& app, Options& o);
void check_checkpoint_flags(Options& o);
// cli/flags_output.cpp: an output file (its folder must exist) or folder (made as mkdir -p)
// the run writes: tried, one FlagError naming the flag, the path and why.
void check_output_file(const char* flag, const std::string& path);
void check_output_folder(const char* flag, const std::string& path);
// cli/flags_offload.cpp: --optimizer-cpu-offload, --optimizer-offload-fraction,
// --offload-params, --offload-pin-memory; the checks after the ZeRO stage is resolved.
void add_offload_flags(CLI::App& app, Options& o);
void check_offload_flags(Options& o);

// ---- cli/flags_toml.cpp ----
// One key = value of a --config file and the option it sets.
struct ConfigEntry {
  std::string file;
  int line = 0;
  std::string key;  // as written
  const CLI::Option* option = nullptr;
};
// Reads each file as the TOML subset paralab accepts and checks that every key names a flag
// and every value has its type. Returns the entries of all files, in order (a later file
// overrides an earlier one). Throws FlagError "--config FILE:LINE: ...".
std::vector<ConfigEntry> check_config_files(const CLI::App& app,
                                            const std::vector<std::string>& files);
// CLI11's reader of the same files: the byte-order mark dropped, TOML's integer forms (0x1F,
// 0o17, 0b101, 1_000) as decimal.
std::shared_ptr<CLI::Config> toml_config_for_cli11();

// ---- cli/flags_messages.cpp ----
// Whether one of opt's names was typed on the command line (`--x v`, `--x=v`, `-v`), as
// opposed to read from a --config file (CLI11 counts both alike).
bool typed_on_command_line(const CLI::Option& opt, int argc, const char* const* argv);
// CLI11's error, as one line in the checks' style ("--lr must be a number, got fast"),
// naming the file and the line when the value came from a --config file.
std::string cli11_error_message(const CLI::App& app, const CLI::Error& e, int argc,
                                const char* const* argv, const std::vector<ConfigEntry>& config);
// The manual's layout: a negated switch shows its --no-x name alone.
class ManualFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool positional) const override;
};
// A choice among names, checked on the value that counts (a flag given twice takes the
// last): "must be one of gpt, llama, got bert".
CLI::Validator one_of(const std::vector<std::string>& names);
// --seed: an integer in [0, 2^64 - 1] (CLI11 would wrap a negative one).
CLI::Validator seed_range();
// An integer flag's value written as a whole float (2e9, 4.0) becomes the integer's text.
CLI::Validator whole_number();
// --verbose: every option's final value and where it came from (default, a --config
// file's line, the command line); `given` holds each option's value as parsed, before
// resolve_and_check derived the defaults. The options' default functions read the values.
// The --moe-* rows only when show_moe (a MoE model).
std::string resolved_options_text(CLI::App& app, int argc, const char* const* argv,
                                  const std::vector<ConfigEntry>& config,
                                  const std::vector<std::string>& given, bool show_moe);

}  // namespace paralab
