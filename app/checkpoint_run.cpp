// app/checkpoint_run.cpp: see app/checkpoint_run.h.
#include "app/checkpoint_run.h"

#include <cstdio>
#include "checkpoint/checkpoint.h"
#include "checkpoint/hugging_face.h"
#include "model/param_table.h"
#include "checkpoint/reshard.h"
#include "kernels/ops.h"
#include "measure/clock.h"  // now_seconds

namespace paralab {

namespace {
// Where --load's checkpoint is (cli/flags_checkpoint.cpp resolved it before anything else).
CheckpointLocation location_of(const Options& o) {
  CheckpointLocation at;
  at.found = !o.load_folder.empty();
  at.folder = o.load_folder;
  at.iteration = o.load_iteration;
  at.chosen_by = o.load_chosen_by;
  return at;
}

// "hybrid delayed, margin 0, history 4, max": an FP8 recipe in words.
std::string fp8_words(const Fp8Config& f) {
  return std::string(f.hybrid ? "hybrid " : "e4m3 ") + fp8_recipe_name(f.recipe) + ", margin " +
         std::to_string(f.margin) + ", history " + std::to_string(f.amax_history_len) + ", " +
         (f.amax_compute_algo == kernels::Fp8AmaxAlgo::Max ? "max" : "most_recent");
}

// FP8 delayed scaling's amax histories and scales, each layer's from the checkpoint when the
// run trains with the recipe they were saved with (format, margin, history length, algorithm
// all equal); otherwise one line on rank 0 saying what is dropped, or that the histories start
// fresh (scale 1), and training goes on (notes/decisions.md).
void load_fp8_state(CheckpointReader& checkpoint, const ModelConfig& run, Transformer& model,
                    bool rank0) {
  const Fp8Config& saved = checkpoint.manifest().fp8;
  const bool saved_state = checkpoint.has_fp8_state();
  const bool run_delayed = run.fp8.enabled && run.fp8.recipe == Fp8Recipe::Delayed;
  const bool same = saved_state && run_delayed && saved.hybrid == run.fp8.hybrid &&
                    saved.margin == run.fp8.margin &&
                    saved.amax_history_len == run.fp8.amax_history_len &&
                    saved.amax_compute_algo == run.fp8.amax_compute_algo;
  if (same) {
    for (int l = 0; l < run.num_layers; ++l) {
      if (model.fp8_layer_state(l).empty()) continue;  // not this stage's
      const std::vector<float> state = checkpoint.fp8_state(l);
      if (state.empty())
        fail(checkpoint.folder() + ": no FP8 state of layer " + std::to_string(l) +
                 " in any shard (the manifest lists others')", 2);
      model.set_fp8_layer_state(l, state);
    }
    for (int l = 0; l < run.num_layers; ++l)  // the experts this rank holds
      for (int e = 0; e < run.moe.num_experts; ++e) {
        if (model.fp8_expert_state(l, e).empty()) continue;
        const std::vector<float> state = checkpoint.fp8_expert_state(l, e);
        if (state.empty())
          fail(checkpoint.folder() + ": no FP8 state of expert " + std::to_string(e) +
                   " of layer " + std::to_string(l) + " in any shard", 2);
        model.set_fp8_expert_state(l, e, state);
      }
    return;
  }
  if (!rank0 || (!saved_state && !run_delayed)) return;
  const std::string run_words = run.fp8.enabled ? "--fp8-format " + fp8_words(run.fp8)
                                                : std::string("no --fp8-format");
  if (saved_state && !run_delayed) {
    int moe_layers = 0;  // each holds 2 expert linears per expert
    for (int l = 0; l < run.num_layers; ++l) moe_layers += run.moe.is_moe_layer(l);
    const size_t bytes = Fp8Scaling::state_bytes(
        saved, 4 * run.num_layers + 2 * run.moe.num_experts * moe_layers);
    std::printf("checkpoint: dropping its FP8 state (%s: amax histories and scales, %zu bytes): "
                "this run has %s\n", fp8_words(saved).c_str(), bytes, run_words.c_str());
  } else {
    std::printf("checkpoint: FP8 delayed scaling's amax histories start fresh (scale 1): the "
                "checkpoint %s, this run has %s\n",
                saved_state ? ("saved them for " + fp8_words(saved)).c_str()
                            : "has none (saved without --fp8-format delayed)",
                run_words.c_str());
  }
}

size_t count_elements(const LogicalTensors& tensors) {
  size_t n = 0;
  for (const auto& t : tensors) n += t.second.size();
  return n;
}
}  // namespace

ResumePoint load_parameters_to_resume(const Options& o, Transformer& model, Communicator& world,
                                      int rank) {
  ResumePoint resume;
  resume.start_seconds = now_seconds();
  try {
    if (!o.load.empty() && o.load_folder.empty() && rank == 0)
      std::printf("checkpoint: none in %s yet (no latest, no iter_NNNNNNN/): training from step "
                  "1, saving there (--save)\n", o.load.c_str());
    if (!o.load_folder.empty()) {
      resume.checkpoint.reset(new CheckpointReader(location_of(o), &world, &o.model,
                                                   o.train.precision()));
      // the manifest was checked against the run with the flags (cli/flags_checkpoint.cpp)
      // --finetune: a new run from these weights (Megatron's): iteration 0, no counters
      if (!o.finetune) resume.position = resume.checkpoint->position();
      load_parameters(model, resume.checkpoint->source());
    }
    if (!o.load_hf.empty()) {
      check_hugging_face_config(o.load_hf, o.model);
      const LogicalTensors weights = import_hugging_face(o.load_hf, o.model);
      load_parameters(model, [&](const ParamSpec& spec, const std::string&) {
        return weights.at(spec.name);
      });
      if (rank == 0)
        std::printf("hugging face: loaded %s (%zu tensors, %s parameters, every one at its "
                    "shape and finite) in %.3f s: training starts from these weights\n",
                    o.load_hf.c_str(), weights.size(),
                    std::to_string(count_elements(weights)).c_str(),
                    now_seconds() - resume.start_seconds);
    }
  } catch (const InputError& e) {
    exit_on_input_error(e, rank, [](int) { finalize_world(); });
  }
  return resume;
}

void load_optimizer_to_resume(ResumePoint& resume, const Options& o, Transformer& model,
                              AdamW& optimizer, bool rank0) {
  CheckpointReader* checkpoint = resume.checkpoint.get();
  if (!checkpoint) return;
  const bool optimizer_state = !o.no_load_optim && !o.finetune;
  if (optimizer_state) {
    load_optimizer_state(model, optimizer, checkpoint->source());
    optimizer.set_steps_taken(resume.position.adam_steps);
    // the dynamic loss scale where it was (megatron-core loads the grad scaler with the
    // optimizer); a checkpoint without one (another precision's) leaves it at
    // --initial-loss-scale
    if (optimizer.loss_scaler().dynamic() && resume.position.dynamic_loss_scale)
      optimizer.set_loss_scaler_state(resume.position.loss_scaler);
  }
  for (int l = 0; l < (int)model.moe_layers().size(); ++l)
    if (!model.moe_layers()[l].expert_bias.empty()) {
      const std::vector<float> bias = checkpoint->expert_bias(l);
      if (!bias.empty()) model.set_expert_bias(l, bias);
    }
  load_fp8_state(*checkpoint, o.model, model, rank0);
  kernels::synchronize(model.device());
  if (rank0) {
    const std::string what =
        o.finetune ? "weights only: --finetune, starting at iteration 0"
        : o.no_load_optim ? "weights only: --no-load-optim" : "weights and optimizer";
    std::printf("checkpoint: resumed from %s at iteration %d (%s; chosen by %s) in %.3f s, "
                "rank 0 read %.1f MB\n",
                checkpoint->folder().c_str(), checkpoint->manifest().iteration, what.c_str(),
                o.load_chosen_by.c_str(), now_seconds() - resume.start_seconds,
                checkpoint->bytes_read() / 1e6);
  }
  resume.checkpoint.reset();  // its shard files closed
}

namespace {

LogicalTensors by_name(const ModelConfig& m, const std::vector<float>& flat) {
  LogicalTensors tensors;
  size_t offset = 0;
  for (const ParamSpec& p : param_table(m)) {
    tensors[p.name].assign(flat.begin() + offset, flat.begin() + offset + p.numel());
    offset += p.numel();
  }
  return tensors;
}

void print_export(const HfExport& e, const std::string& folder) {
  std::printf("hugging face: wrote %s (%s, %zu file%s, %.1f MB of tensors)\n", folder.c_str(),
              e.architecture.c_str(), e.files.size(), e.files.size() == 1 ? "" : "s",
              e.payload_bytes / 1e6);
}

// The type the export writes: --export-hf-dtype, else the weights' own (16-bit parameters
// as BF16 or F16, exact; else F32).
SafeDType export_type(const Options& o, Precision weights) {
  if (o.export_hf_dtype.empty()) return float_type(weights);
  return o.export_hf_dtype == "bf16"   ? SafeDType::BF16
         : o.export_hf_dtype == "fp16" ? SafeDType::F16
                                       : SafeDType::F32;
}

}  // namespace

void export_weights(Transformer& model, const Options& o, bool rank0) {
  const std::vector<float> flat = model.gather_full(false);
  if (!rank0) return;
  // the weights the model computes with
  const HfExport e = export_hugging_face(o.export_hf, o.model, by_name(o.model, flat),
                                         export_type(o, o.train.precision()));
  print_export(e, o.export_hf);
}

int run_convert(const Options& o, const World& w) {
  if (w.size != 1) throw FlagError("--convert runs on one rank (launched on " +
                                   std::to_string(w.size) + ")");
  CheckpointReader checkpoint(location_of(o), nullptr, nullptr, Precision::FP32);
  const ModelConfig& m = checkpoint.manifest().model;
  const std::string why = hugging_face_refusal(m);
  if (!why.empty()) throw FlagError("--export-hf: " + why);
  // 16-bit runs export their 16-bit parameters (what the model computed with), as BF16 or F16;
  // the reader, told the run is fp32, would give the master weights: read "param" as stored
  const Precision saved = checkpoint.manifest().precision();
  LogicalTensors tensors;
  for (const ParamSpec& p : param_table(m))
    tensors[p.name] = checkpoint.full(p, saved == Precision::FP32 ? "param" : "stored");
  const HfExport e = export_hugging_face(o.export_hf, m, tensors, export_type(o, saved));
  std::printf("convert: %s (iteration %d) -> ", checkpoint.folder().c_str(),
              checkpoint.manifest().iteration);
  print_export(e, o.export_hf);
  return 0;
}

}  // namespace paralab
