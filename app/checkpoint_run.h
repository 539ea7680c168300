// app/checkpoint_run.h: the trainer's side of checkpoints and Hugging Face exports (model/
// checkpoint.h, checkpoint/hugging_face.h hold the formats): what a resumed run must share with the
// saved one, the export at the end of training, and --convert.
//
// defines: ResumePoint, load_parameters_to_resume, load_optimizer_to_resume, export_weights,
//          run_convert (what a resumed run must share with the saved one is checked with the
//          flags: cli/flags_checkpoint.cpp check_resumable)
#pragma once
#include <memory>
#include <string>
#include "cli/flags.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_manifest.h"
#include "model/optimizer.h"
#include "model/transformer.h"
#include "parallel/comm.h"

namespace paralab {

// Where a run starts: --load's checkpoint (held open until the optimizer has its state) and
// its position (step 0 without one).
struct ResumePoint {
  std::unique_ptr<CheckpointReader> checkpoint;
  TrainingPosition position;
  double start_seconds = 0;  // when loading began (the resumed line's time)
};
// --load / --load-hf: the parameters at this layout (checkpoint/reshard.h), before the optimizer
// exists. Collective over the world; bad input ends every rank with one line (exit 2).
ResumePoint load_parameters_to_resume(const Options& o, Transformer& model, Communicator& world,
                                      int rank);
// After the optimizer is built on those parameters: the checkpoint's moments, master weights
// and update count (not with --no-load-optim), the expert bias; the resumed line; the
// checkpoint's files closed.
void load_optimizer_to_resume(ResumePoint& resume, const Options& o, Transformer& model,
                              AdamW& optimizer, bool rank0);

// --export-hf at the end of training: every parameter gathered (collective), rank 0 writes.
void export_weights(Transformer& model, const Options& o, bool rank0);
// --convert: --load's checkpoint to --export-hf, on one rank, no model built. Exit status.
int run_convert(const Options& o, const World& w);

}  // namespace paralab
