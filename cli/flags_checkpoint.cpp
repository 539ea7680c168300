// cli/flags_checkpoint.cpp: the checkpoint and Hugging Face flags (Megatron's --save, --load,
// --save-interval, --exit-interval, --exit-duration-in-mins, --no-load-optim, --ckpt-step,
// --finetune, --no-save-optim, --exit-on-missing-checkpoint; paralab's --override-latest;
// --export-hf, --load-hf, --convert) and their checks. checkpoint/checkpoint.h and
// checkpoint/hugging_face.h are what they drive.
//
// The one rule: a resume cannot lose work. --load is resolved here, before anything is
// allocated (checkpoint/checkpoint.h locate_checkpoint): a file, a mistyped folder, a `latest`
// naming a missing iteration are refused with one line, never read as "start from step 1";
// and --save refuses to move its `latest` back to an earlier iteration unless told.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/flags_impl.h"  // defines: add_switch, fail; cli/flags.h Options
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/hugging_face.h"

namespace paralab {

namespace {

// The same folder, spelled either way (ck, ./ck/, an absolute path).
bool same_folder(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  auto norm = [](std::string p) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    while (p.compare(0, 2, "./") == 0) p = p.substr(2);
    return p;
  };
  return norm(a) == norm(b);
}

// --load: the iteration folder, or none (a folder without a checkpoint yet, which only the
// run that saves into it may start from: the first job of a Slurm chain).
void resolve_load(Options& o) {
  if (o.load.empty()) {
    if (o.ckpt_step != 0) fail("--ckpt-step ", o.ckpt_step, " needs --load DIR (where to load from)");
    if (o.finetune) fail("--finetune needs --load DIR (the checkpoint to start from)");
    if (o.exit_on_missing_checkpoint) fail("--exit-on-missing-checkpoint needs --load DIR");
    return;
  }
  if (o.ckpt_step < 0) fail("--ckpt-step must be >= 1, got ", o.ckpt_step);
  CheckpointLocation at;
  try {
    at = locate_checkpoint(o.load, o.ckpt_step);
  } catch (const CheckpointError& e) {
    fail("--load ", o.load, ": ", e.what());
  }
  if (!at.found) {
    struct stat st;
    const char* what = stat(o.load.c_str(), &st) == 0 ? "no checkpoint there" : "no such folder";
    if (o.convert) fail("--convert --load ", o.load, ": ", what, " (no latest, no iter_NNNNNNN/)");
    const bool first_job = !o.save.empty() && same_folder(o.load, o.save);
    if (o.ckpt_step > 0 || o.exit_on_missing_checkpoint || !first_job) {
      fail("--load ", o.load, ": ", what,
           " (no latest, no iter_NNNNNNN/); to start from step 1, drop --load",
           o.exit_on_missing_checkpoint || o.save.empty()
               ? ""
               : " (or give --save the same folder: a run that saves where it loads starts "
                 "fresh while the folder has no checkpoint)");
    }
    return;  // the first job: trains from step 1 and says so
  }
  o.load_folder = at.folder;
  o.load_iteration = at.iteration;
  o.load_chosen_by = at.chosen_by;
}

// What the run will refuse or be told once it reads --load's manifest, said here so that
// --plan says it too: a checkpoint of another model (check_manifest), one without optimizer
// state for a run that resumes it, one at --train-iters already, another --seed or global
// batch (the data order follows them); and, on a warning line, other data than it recorded.
void check_resumable(Options& o) {
  if (o.load_folder.empty() || o.convert) return;
  const std::string path = o.load_folder + "/manifest.json";
  Manifest m;
  try {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw CheckpointError(path + ": cannot read");
    m = parse_manifest(text.str(), path);
    check_manifest(m, o.model, path);
  } catch (const CheckpointError& e) {
    fail("--load ", o.load, ": ", e.what());
  }
  if (!m.optimizer && !o.no_load_optim && !o.finetune)
    fail("--load ", o.load, ": ", o.load_folder, " was saved with --no-save-optim (no optimizer "
         "state): add --no-load-optim (resume at its iteration, Adam afresh) or --finetune "
         "(start at iteration 0)");
  if (o.finetune) return;  // a new run from these weights (Megatron's): nothing else carries
  if (m.seed != o.train.seed)
    fail("--seed ", o.train.seed, ": the checkpoint ", o.load_folder, " was trained with --seed ",
         m.seed, " (the data order and dropout follow it)");
  if (m.global_batch_size != o.train.global_batch_size)
    fail("--global-batch-size ", o.train.global_batch_size, ": the checkpoint ", o.load_folder,
         " was trained with ", m.global_batch_size, " (the samples of each step follow it)");
  if (m.iteration >= o.train.train_iters)
    fail("--train-iters ", o.train.train_iters, ": the checkpoint ", o.load_folder,
         " is at iteration ", m.iteration, " already (give more steps)");
  const ManifestData& was = m.data;
  const ManifestData& now = o.data_record;
  if (was.description.empty()) return;
  if (was.description != now.description) {
    o.warnings.push_back("--load " + o.load_folder + " was trained on " + was.description +
                         "; this run reads " + now.description);
    return;
  }
  for (size_t i = 0; i < was.files.size() && i < now.files.size(); ++i)
    if (was.crc32c[i] != now.crc32c[i])
      o.warnings.push_back("--load " + o.load_folder + ": " + now.files[i] + " has changed since "
                           "the checkpoint was saved (CRC-32C " + std::to_string(now.crc32c[i]) +
                           ", was " + std::to_string(was.crc32c[i]) + ")");
}

// --save into a folder whose `latest` is past where this run starts: each save would move it
// back, and the next --load would resume from there, days earlier.
void check_latest_kept(const Options& o) {
  if (o.save.empty() || o.override_latest) return;
  int latest = 0;
  try {
    latest = read_latest(o.save);
  } catch (const CheckpointError& e) {
    fail("--save ", o.save, ": ", e.what());
  }
  const int start = o.finetune ? 0 : o.load_iteration;
  if (latest <= start) return;
  fail("--save ", o.save, ": its latest is iteration ", latest, " and this run starts at iteration ",
       start, o.load_folder.empty() ? "" : " (" + o.load_folder + ")",
       ": its saves would move latest back; resume from it with --load ", o.save,
       ", save into another folder, or give --override-latest");
}

}  // namespace

void add_checkpoint_flags(CLI::App& app, Options& o) {
  const char* kCheckpoint = "Checkpoints and Hugging Face";
  app.add_option("--save", o.save,
                 "write checkpoints into DIR: DIR/iter_NNNNNNN/ (a shard per rank and a "
                 "manifest) and DIR/latest, every --save-interval steps, at the end and before "
                 "an early stop; refuses to move an existing DIR/latest back (--override-latest)")
      ->type_name("DIR")->group(kCheckpoint);
  app.add_option("--save-interval", o.save_interval,
                 "with --save: a checkpoint every N steps (and after the last); 0: after the "
                 "last only")
      ->capture_default_str()->group(kCheckpoint);
  app.add_option("--load", o.load,
                 "resume from the checkpoint DIR/latest names (or --ckpt-step's, or DIR itself "
                 "when it is an iter_NNNNNNN folder), at this run's layout (any tp, pp, vpp, dp, "
                 "ZeRO stage, cp, ep, etp); a folder without a checkpoint is refused, unless it "
                 "is also --save's (the first job of a chain: step 1)")
      ->type_name("DIR")->group(kCheckpoint);
  app.add_option("--ckpt-step", o.ckpt_step,
                 "with --load: load iteration N (DIR/iter_NNNNNNN) instead of the one DIR/latest "
                 "names (Megatron's)")
      ->group(kCheckpoint);
  add_switch(app, "--no-load-optim", o.no_load_optim,
             "with --load: load the weights and the iteration only; Adam's moments start at 0")
      ->group(kCheckpoint);
  add_switch(app, "--finetune", o.finetune,
             "with --load: load the weights only and start at iteration 0 (Adam's moments at 0, "
             "the learning-rate schedule and the data from step 1; the checkpoint's --seed and "
             "--global-batch-size need not be this run's), as Megatron's")
      ->group(kCheckpoint);
  add_switch(app, "--no-save-optim", o.no_save_optim,
             "with --save: save the weights (and the expert bias) without Adam's moments or the "
             "bf16 master weights; resuming from them needs --no-load-optim or --finetune")
      ->group(kCheckpoint);
  add_switch(app, "--override-latest", o.override_latest,
             "with --save: let this run's saves move DIR/latest back to an earlier iteration "
             "(it starts before the latest one saved there); refused without it")
      ->group(kCheckpoint);
  add_switch(app, "--exit-on-missing-checkpoint", o.exit_on_missing_checkpoint,
             "with --load: refuse a folder without a checkpoint even when it is --save's "
             "(Megatron's)")
      ->group(kCheckpoint);
  app.add_option("--exit-interval", o.exit_interval,
                 "stop after the first step whose number is divisible by N (saving first "
                 "with --save): exit status 16 (saved, resume me) or 4 (nothing saved); 0: off")
      ->capture_default_str()->group(kCheckpoint);
  app.add_option("--exit-duration-in-mins", o.exit_duration_in_mins,
                 "stop after the first step that ends more than M minutes after the run started "
                 "(saving first with --save): exit status 16 or 4, as --exit-interval; 0: off")
      ->group(kCheckpoint);
  app.add_option("--export-hf", o.export_hf,
                 "after the last step, write the weights as a Hugging Face checkpoint "
                 "(config.json, model.safetensors) that transformers loads as GPT-2, Llama, "
                 "Qwen3, Mixtral or Qwen3-MoE")
      ->type_name("DIR")->group(kCheckpoint);
  app.add_option("--export-hf-dtype", o.export_hf_dtype,
                 "the type --export-hf writes the weights in: fp32, bf16 or fp16 (rounded to "
                 "nearest even; default: the parameters' storage type, F32 or the 16-bit copy "
                 "the run computed with); never FP8")
      ->check(one_of({"fp32", "bf16", "fp16"}))->type_name("TYPE")->group(kCheckpoint);
  app.add_option("--load-hf", o.load_hf,
                 "start training from a Hugging Face checkpoint (an --export-hf folder) at any "
                 "layout; its config.json must match the flags' model")
      ->type_name("DIR")->group(kCheckpoint);
  add_switch(app, "--convert", o.convert,
             "no training: read the checkpoint --load names and write it with --export-hf "
             "(the model comes from the checkpoint's manifest)")
      ->group(kCheckpoint);
}

void check_checkpoint_flags(Options& o) {
  if (o.save_interval < 0) fail("--save-interval must be >= 0, got ", o.save_interval);
  if (o.exit_interval < 0) fail("--exit-interval must be >= 0, got ", o.exit_interval);
  if (!(o.exit_duration_in_mins >= 0) || !std::isfinite(o.exit_duration_in_mins))
    fail("--exit-duration-in-mins must be a finite number >= 0, got ", o.exit_duration_in_mins);
  if (o.save_interval > 0 && o.save.empty())
    fail("--save-interval ", o.save_interval, " needs --save DIR (where to write)");
  if (o.no_save_optim && o.save.empty()) fail("--no-save-optim needs --save DIR");
  if (o.override_latest && o.save.empty()) fail("--override-latest needs --save DIR");
  if (o.no_load_optim && o.load.empty()) fail("--no-load-optim needs --load DIR");
  if (!o.load.empty() && !o.load_hf.empty())
    fail("--load ", o.load, " and --load-hf ", o.load_hf, ": start from one checkpoint, not two");
  if (!o.export_hf_dtype.empty() && o.export_hf.empty())
    fail("--export-hf-dtype ", o.export_hf_dtype, " needs --export-hf DIR (what to write)");
  if (o.convert && (o.load.empty() || o.export_hf.empty()))
    fail("--convert needs --load DIR (the checkpoint) and --export-hf OUT (where to write)");
  if (!o.export_hf.empty() && !o.convert) {
    const std::string why = hugging_face_refusal(o.model);
    if (!why.empty()) fail("--export-hf: ", why);
  }
  if (!o.load_hf.empty()) {  // what --export-hf would refuse, --load-hf cannot describe
    const std::string why = hugging_face_refusal(o.model);
    if (!why.empty()) fail("--load-hf ", o.load_hf, ": ", why);
    struct stat st;
    if (stat(o.load_hf.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      fail("--load-hf ", o.load_hf, ": no such folder (a Hugging Face checkpoint folder holds "
           "config.json and model.safetensors)");
    if (stat((o.load_hf + "/config.json").c_str(), &st) != 0)
      fail("--load-hf ", o.load_hf, ": no ", o.load_hf, "/config.json (a Hugging Face checkpoint "
           "folder holds config.json and model.safetensors)");
  }
  resolve_load(o);
  check_resumable(o);
  if (!o.plan && !o.convert) check_latest_kept(o);
}

}  // namespace paralab
