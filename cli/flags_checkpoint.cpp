// cli/flags_checkpoint.cpp: the checkpoint and Hugging Face flags (Megatron's --save, --load,
// --save-interval, --exit-interval, --no-load-optim; --export-hf, --load-hf, --convert) and
// their checks. checkpoint/checkpoint.h and checkpoint/hugging_face.h are what they drive.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <string>

#include "cli/flags_impl.h"  // defines: add_switch, fail; cli/flags.h Options
#include "checkpoint/hugging_face.h"

namespace paralab {

namespace {
// A folder the run makes (or writes into): absent with a writable parent, or a writable folder.
void check_folder_path(const char* flag, const std::string& path) {
  if (path.empty()) return;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) fail(flag, ": ", path, " is a file, not a folder");
    if (access(path.c_str(), W_OK | X_OK) != 0) fail(flag, ": cannot write into ", path, ": permission denied");
    return;
  }
  std::string parent = path;
  while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
  const size_t slash = parent.rfind('/');
  parent = slash == std::string::npos ? "." : slash == 0 ? "/" : parent.substr(0, slash);
  if (stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail(flag, ": cannot make ", path, ": no such directory ", parent);
  if (access(parent.c_str(), W_OK | X_OK) != 0)
    fail(flag, ": cannot make ", path, ": permission denied in ", parent);
}
}  // namespace

void add_checkpoint_flags(CLI::App& app, Options& o) {
  const char* kCheckpoint = "Checkpoints and Hugging Face";
  app.add_option("--save", o.save,
                 "write checkpoints into DIR: DIR/iter_NNNNNNN/ (a shard per rank and a "
                 "manifest) and DIR/latest, every --save-interval steps and at the end")
      ->type_name("DIR")->group(kCheckpoint);
  app.add_option("--save-interval", o.save_interval,
                 "with --save: a checkpoint every N steps (and after the last); 0: after the "
                 "last only")
      ->capture_default_str()->group(kCheckpoint);
  app.add_option("--load", o.load,
                 "resume from the checkpoint DIR/latest names, at this run's layout (any tp, "
                 "pp, vpp, dp, ZeRO stage, cp, ep, etp); without DIR/latest: train from step 1")
      ->type_name("DIR")->group(kCheckpoint);
  add_switch(app, "--no-load-optim", o.no_load_optim,
             "with --load: load the weights and the iteration only; Adam's moments start at 0")
      ->group(kCheckpoint);
  app.add_option("--exit-interval", o.exit_interval,
                 "stop after the first step whose number is divisible by N (saving first "
                 "with --save); 0: off")
      ->capture_default_str()->group(kCheckpoint);
  app.add_option("--export-hf", o.export_hf,
                 "after the last step, write the weights as a Hugging Face checkpoint "
                 "(config.json, model.safetensors) that transformers loads as GPT-2, Llama, "
                 "Qwen3, Mixtral or Qwen3-MoE")
      ->type_name("DIR")->group(kCheckpoint);
  app.add_option("--load-hf", o.load_hf,
                 "start training from a Hugging Face checkpoint (an --export-hf folder) at any "
                 "layout; its config.json must match the flags' model")
      ->type_name("DIR")->group(kCheckpoint);
  add_switch(app, "--convert", o.convert,
             "no training: read the checkpoint --load names and write it with --export-hf "
             "(the model comes from the checkpoint's manifest)")
      ->group(kCheckpoint);
}

void check_checkpoint_flags(const Options& o) {
  check_folder_path("--save", o.save);
  check_folder_path("--export-hf", o.export_hf);
  if (o.save_interval < 0) fail("--save-interval must be >= 0, got ", o.save_interval);
  if (o.exit_interval < 0) fail("--exit-interval must be >= 0, got ", o.exit_interval);
  if (o.save_interval > 0 && o.save.empty())
    fail("--save-interval ", o.save_interval, " needs --save DIR (where to write)");
  if (o.no_load_optim && o.load.empty()) fail("--no-load-optim needs --load DIR");
  if (!o.load.empty() && !o.load_hf.empty())
    fail("--load ", o.load, " and --load-hf ", o.load_hf, ": start from one checkpoint, not two");
  if (o.convert && (o.load.empty() || o.export_hf.empty()))
    fail("--convert needs --load DIR (the checkpoint) and --export-hf OUT (where to write)");
  if (!o.export_hf.empty() && !o.convert) {
    const std::string why = hugging_face_refusal(o.model);
    if (!why.empty()) fail("--export-hf: ", why);
  }
}

}  // namespace paralab
