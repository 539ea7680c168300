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

ResumePoint load_parameters_to_resume(const Options& o, Transformer& model, Communicator& world,
                                      int rank) {
  ResumePoint resume;
  resume.start_seconds = now_seconds();
  try {
    if (!o.load.empty()) {
      resume.checkpoint.reset(new CheckpointReader(o.load, &world, &o.model, o.train.bf16));
      if (!resume.checkpoint->found()) {
        if (rank == 0)
          std::printf("checkpoint: none in %s (no %s/latest): training from step 1\n",
                      o.load.c_str(), o.load.c_str());
        resume.checkpoint.reset();
      } else {
        check_resumable(o, resume.checkpoint->manifest(), resume.checkpoint->folder());
        resume.position = resume.checkpoint->position();
        load_parameters(model, resume.checkpoint->source());
      }
    }
    if (!o.load_hf.empty()) {
      check_hugging_face_config(o.load_hf, o.model);
      const LogicalTensors weights = import_hugging_face(o.load_hf, o.model);
      load_parameters(model, [&](const ParamSpec& spec, const std::string&) {
        return weights.at(spec.name);
      });
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
  if (!o.no_load_optim) {
    load_optimizer_state(model, optimizer, checkpoint->source());
    optimizer.set_steps_taken(resume.position.adam_steps);
  }
  for (int l = 0; l < (int)model.moe_layers().size(); ++l)
    if (!model.moe_layers()[l].expert_bias.empty()) {
      const std::vector<float> bias = checkpoint->expert_bias(l);
      if (!bias.empty()) model.set_expert_bias(l, bias);
    }
  kernels::synchronize(model.device());
  if (rank0)
    std::printf("checkpoint: resumed from %s at iteration %d (%s) in %.3f s, rank 0 read "
                "%.1f MB\n",
                checkpoint->folder().c_str(), resume.position.iteration,
                o.no_load_optim ? "weights only: --no-load-optim" : "weights and optimizer",
                now_seconds() - resume.start_seconds, checkpoint->bytes_read() / 1e6);
  resume.checkpoint.reset();  // its shard files closed
}

void check_resumable(const Options& o, const Manifest& m, const std::string& folder) {
  if (m.seed != o.train.seed)
    throw FlagError("--seed " + std::to_string(o.train.seed) + ": the checkpoint " + folder +
                    " was trained with --seed " + std::to_string(m.seed) +
                    " (the data order and dropout follow it)");
  if (m.global_batch_size != o.train.global_batch_size)
    throw FlagError("--global-batch-size " + std::to_string(o.train.global_batch_size) +
                    ": the checkpoint " + folder + " was trained with " +
                    std::to_string(m.global_batch_size) +
                    " (the samples of each step follow it)");
  if (m.iteration >= o.train.train_iters)
    throw FlagError("--train-iters " + std::to_string(o.train.train_iters) + ": the checkpoint " +
                    folder + " is at iteration " + std::to_string(m.iteration) +
                    " already (give more steps)");
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

}  // namespace

void export_weights(Transformer& model, const Options& o, bool rank0) {
  const std::vector<float> flat = model.gather_full(false);
  if (!rank0) return;
  // the weights the model computes with: bf16 parameters stored as BF16 (exact), else F32
  const HfExport e = export_hugging_face(o.export_hf, o.model, by_name(o.model, flat),
                                         o.train.bf16 ? SafeDType::BF16 : SafeDType::F32);
  print_export(e, o.export_hf);
}

int run_convert(const Options& o, const World& w) {
  if (w.size != 1) throw FlagError("--convert runs on one rank (launched on " +
                                   std::to_string(w.size) + ")");
  CheckpointReader checkpoint(o.load, nullptr, nullptr, true);  // "param": as stored
  if (!checkpoint.found())
    throw FlagError("--convert --load " + o.load + ": no checkpoint there (no " + o.load +
                    "/latest)");
  const ModelConfig& m = checkpoint.manifest().model;
  const std::string why = hugging_face_refusal(m);
  if (!why.empty()) throw FlagError("--export-hf: " + why);
  // bf16 runs export their bf16 parameters (what the model computed with), as BF16
  const bool bf16 = checkpoint.manifest().bf16;
  LogicalTensors tensors;
  for (const ParamSpec& p : param_table(m)) tensors[p.name] = checkpoint.full(p, "param");
  const HfExport e = export_hugging_face(o.export_hf, m, tensors,
                                         bf16 ? SafeDType::BF16 : SafeDType::F32);
  std::printf("convert: %s (iteration %d) -> ", checkpoint.folder().c_str(),
              checkpoint.manifest().iteration);
  print_export(e, o.export_hf);
  return 0;
}

}  // namespace paralab
