// flags_impl.h: what flags.cpp (the flags), flags_check.cpp (the checks), flags_toml.cpp
// (the --config files) and flags_messages.cpp (CLI11's errors, the manual's layout,
// --verbose) share: the string flags as typed, and the steps that turn them and the parsed
// Options into one validated Options. Not for other files: flags.h is the interface.
//
// defines: RawFlags, resolve_and_check, ConfigEntry, check_config_files, typed_on_command_line,
//          cli11_error_message, ManualFormatter, one_of, seed_range, resolved_options_text
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>
#include "flags.h"  // defines: Options, FlagError

namespace paralab {

// String flags are kept as text while parsing (so --help lists the choices by name) and
// mapped to the enums of model/config.h once parsing is done.
struct RawFlags {
  std::string arch = "gpt", attention = "flash", lr_decay_style = "cosine";
  std::string attention_flops = "full", device, comm;
  bool use_distributed_optimizer = false;
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
  // Typed on the command line (not read from a --config file): a preset's warm-up may be
  // clamped to a decay the user shortened there (flags_check.cpp), the user's own never.
  bool warmup_on_command_line = false, train_iters_on_command_line = false,
       decay_iters_on_command_line = false;
};

// Fills the derived values and checks every constraint, the cheap ones first (flags_check.cpp).
// Throws FlagError (or check_data_file's DataError) naming the flags, the constraint, the values.
void resolve_and_check(Options& o, const RawFlags& raw, int visible_gpus);

// ---- flags_toml.cpp ----
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

// ---- flags_messages.cpp ----
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
// --verbose: every option's final value and where it came from (default, a --config
// file's line, the command line); `given` holds each option's value as parsed, before
// resolve_and_check derived the defaults. The options' default functions read the values.
std::string resolved_options_text(CLI::App& app, int argc, const char* const* argv,
                                  const std::vector<ConfigEntry>& config,
                                  const std::vector<std::string>& given);

}  // namespace paralab
