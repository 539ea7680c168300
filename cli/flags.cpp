// cli/flags.cpp: the parse (design in cli/flags.h): the manual's layout, every topic's flags
// (add_flags: one call a topic, each in its file, cli/flags_<topic>.cpp, beside its checks),
// the --config files, CLI11's errors as one line, then resolve_and_check (cli/flags_check.cpp).
#include "cli/flags.h"

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "cli/flags_impl.h"  // defines: RawFlags, resolve_and_check (cli/flags_check.cpp)

namespace paralab {

namespace {

constexpr size_t kHelpColumn = 46, kHelpWidth = 100;  // where help text starts and ends

// Help text wrapped to `width` columns; CLI11 indents the lines after a newline.
std::string wrap(const std::string& text, size_t width) {
  std::istringstream words(text);
  std::string out, line, word;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

// CLI11's messages, made one line that names the flag.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void add_flags(CLI::App& app, Options& o, RawFlags& raw) {
  const char* kParallel = "Parallelism";
  add_model_flags(app, o, raw);       // cli/flags_model.cpp: --arch, the sizes, attention
  add_moe_flags(app, o, raw);         // cli/flags_moe.cpp: --num-experts, --moe-*
  add_training_flags(app, o, raw);    // cli/flags_training.cpp: batch, steps, AdamW, schedule, eval
  add_recompute_flags(app, raw);      // cli/flags_recompute.cpp: --recompute-*
  add_precision_flags(app, o);        // cli/flags_precision.cpp: --bf16, --fp16, loss scale
  add_precision_optimizer_flags(app, raw);  // cli/flags_precision_optimizer.cpp: bf16 moments
  add_fp8_flags(app, o, raw);         // cli/flags_fp8.cpp: --fp8-*
  add_parallel_flags(app, o, raw);    // cli/flags_parallel.cpp: tp, sp, cp, ep, ZeRO, offload
  add_pipeline_flags(app, o, raw, kParallel);  // cli/flags_pipeline.cpp: --pp, --pipeline-*
  add_backend_flags(app, o, raw);     // cli/flags_backend.cpp: --device, --comm, the watchdog
  add_data_flags(app, o, raw);        // cli/flags_data.cpp: --data-path and its kin, the tokenizer
  add_output_flags(app, o, raw);      // cli/flags_output.cpp: --plan, reports, outputs
  add_checkpoint_flags(app, o);       // cli/flags_checkpoint.cpp: --save, --load, --export-hf, ...
  add_megatron_flags(app, o, raw);    // cli/flags_megatron.cpp: a pasted Megatron script's flags
  add_deepspeed_flags(app, o, raw);   // cli/flags_deepspeed.cpp: --deepspeed --deepspeed_config
}

// CLI11 says "INI was not able to parse KEY" for a config key that is no flag.
std::string config_error_message(const std::string& what) {
  const std::string prefix = "INI was not able to parse ";
  if (what.rfind(prefix, 0) == 0)
    return "--config: unknown key '" + what.substr(prefix.size()) +
           "' (keys are long flag names without the dashes, e.g. num-layers = 4)";
  return "--config: " + what;
}

}  // namespace

Options parse_flags(int argc, const char* const* argv, int launched_world_size,
                    int visible_gpus) {
  Options o;
  RawFlags raw;
  o.launched_world_size = launched_world_size;

  CLI::App app{wrap("paralab trainer: trains a GPT- or Llama-style transformer with every "
                    "parallel dimension behind a flag, and prints where memory, bytes and time "
                    "went.", kHelpWidth) +
                   "\nLaunch N ranks with `mpirun -np N ./trainer ...`; world = tp x cp x pp x dp.",
               "trainer"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto manual = std::make_shared<ManualFormatter>();
  manual->column_width(kHelpColumn);
  app.formatter(manual);
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.config_formatter(toml_config_for_cli11());  // cli/flags_toml.cpp
  add_flags(app, o, raw);
  // Several --config files are all read; a later file overrides an earlier one.
  app.set_config("--config", "", "TOML file of flags: key = value lines, the keys the long "
                 "flag names without dashes (num-layers = 4); command-line flags override it, "
                 "a later --config overrides an earlier one")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("FILE")->group("Run, data and backends");
  // Made again last, so that it is listed in a group of the manual rather than alone atop it.
  app.set_help_flag("-h,--help", "print this manual and exit")->group("Run, data and backends");
  for (CLI::Option* opt : app.get_options()) {
    opt->description(wrap(opt->get_description(), kHelpWidth - kHelpColumn));
    // An integer flag takes a whole number however it is written: 2e9, 4.0 (Megatron's
    // argparse reads int("2e9") as an error, but launch scripts write 2e9 for its float flags)
    const std::string type = opt->get_type_name();
    if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) opt->transform(whole_number());
  }

  // The --config files are read as TOML here, after CLI11 has read them its lenient way:
  // their syntax and type errors (file, line) come before CLI11's (a mangled value), and
  // CLI11's errors about a value from a file name its line.
  std::vector<ConfigEntry> config;
  auto config_files = [&]() {
    std::vector<std::string> files;
    for (const std::string& f : app.get_config_ptr()->results())
      if (!f.empty()) files.push_back(f);
    return files;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested(app.help());
  } catch (const CLI::CallForAllHelp&) {
    throw HelpRequested(app.help("", CLI::AppFormatMode::All));
  } catch (const CLI::ParseError& e) {
    config = check_config_files(app, config_files());
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
      std::string extras, hint;
      for (const std::string& s : app.remaining()) {
        extras += (extras.empty() ? "" : " ") + s;
        if (hint.empty() && s.rfind("-", 0) == 0) {
          const std::string instead = megatron_alias(s);  // cli/flags_megatron.cpp's table
          const std::string meant = instead.empty() ? closest_flag(app, s) : "";
          if (!instead.empty()) hint = instead;
          else if (!meant.empty()) hint = "did you mean " + meant + "?";
        }
      }
      throw FlagError("unknown flag or argument: " + extras +
                      (hint.empty() ? " (--help lists the flags)" : " (" + hint + ")"));
    }
    if (dynamic_cast<const CLI::ConfigError*>(&e))
      throw FlagError(one_line(config_error_message(e.what())));
    if (dynamic_cast<const CLI::FileError*>(&e))
      throw FlagError(one_line(std::string("--config: ") + e.what()));
    throw FlagError(cli11_error_message(app, e, argc, argv, config));
  }
  o.config_files = config_files();
  config = check_config_files(app, o.config_files);
  raw.recompute_num_layers_given = app.count("--recompute-num-layers") > 0;
  raw.world_size_given = app.count("--world-size") > 0;
  raw.kv_channels_given = app.count("--kv-channels") > 0;
  raw.expert_tensor_parallel_given = app.count("--expert-tensor-parallel-size") > 0;
  raw.rotary_base_given = app.count("--rotary-base") > 0;
  raw.vocab_size_given = app.count("--vocab-size") > 0;
  raw.zero_stage_given = app.count("--zero-stage") > 0;
  record_moe_flags_given(app, raw);
  record_precision_flags_given(app, raw);
  resolve_megatron_flags(app, o, raw);  // may choose --arch llama from Megatron's parts
  resolve_deepspeed(o, raw, app);       // the config's keys set the batch, ZeRO, bf16 flags
  auto typed = [&](const char* flag) {
    return typed_on_command_line(*app.get_option(flag), argc, argv);
  };
  raw.warmup_on_command_line = typed("--lr-warmup-iters");
  raw.train_iters_on_command_line = typed("--train-iters");
  raw.decay_iters_on_command_line = typed("--lr-decay-iters");
  raw.bf16_on_command_line = typed("--bf16");
  raw.fp16_on_command_line = typed("--fp16");
  resolve_precision(o, raw);
  // --verbose compares each value as parsed with the one resolve_and_check leaves.
  std::vector<std::string> given;
  if (o.verbose)
    for (CLI::Option* opt : app.get_options())
      given.push_back(opt->capture_default_str()->get_default_str());
  resolve_and_check(o, raw, visible_gpus);
  const std::string no_effect = megatron_no_effect_warning(raw);
  if (!no_effect.empty()) o.warnings.push_back(no_effect);
  if (!raw.deepspeed_no_effect.empty()) {
    std::string keys;
    for (const std::string& k : raw.deepspeed_no_effect) keys += (keys.empty() ? " " : ", ") + k;
    o.warnings.push_back("DeepSpeed config keys with no effect in paralab:" + keys);
  }
  if (o.verbose) {
    // The defaults resolve_and_check derived into Options, shown under their flags.
    raw.device = kernels::device_name(o.device);
    raw.comm = comm_name(o.comm);
    raw.pipeline_schedule = schedule_name(o.parallel.pipeline_schedule);
    raw.virtual_pipeline = o.parallel.virtual_pipeline;
    raw.world_size = o.parallel.world_size;
    raw.expert_tensor_parallel = o.parallel.expert_tensor_parallel;
    const Recompute& r = o.model.recompute;
    if (r.selective() && raw.recompute_modules.empty()) raw.recompute_modules = {"core_attn"};
    o.resolved_options =
        resolved_options_text(app, argc, argv, config, given, o.model.moe.enabled());
  }
  return o;
}

void exit_on_input_error(const InputError& e, int rank,
                         const std::function<void(int)>& before_exit) {
  if (rank == 0) std::fprintf(stderr, "paralab: error: %s\n", e.what());
  if (before_exit) before_exit(2);
  std::exit(2);
}

void exit_with_help(const HelpRequested& h, int rank,
                    const std::function<void(int)>& before_exit) {
  if (rank == 0) std::fputs(h.text.c_str(), stdout);
  std::fflush(stdout);
  if (before_exit) before_exit(0);
  std::exit(0);
}

}  // namespace paralab
