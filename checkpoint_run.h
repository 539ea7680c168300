// checkpoint_run.h: the trainer's side of checkpoints and Hugging Face exports (model/
// checkpoint.h, model/hugging_face.h hold the formats): what a resumed run must share with the
// saved one, the export at the end of training, and --convert.
//
// defines: check_resumable, export_weights, run_convert
#pragma once
#include <string>
#include "flags.h"
#include "model/checkpoint_manifest.h"
#include "model/transformer.h"
#include "parallel/comm.h"

namespace paralab {

// The data order (model/data.h) and dropout follow (--seed, the global batch, the step): a run
// that resumes must keep the first two, and have steps left. FlagError otherwise.
void check_resumable(const Options& o, const Manifest& m, const std::string& folder);
// --export-hf at the end of training: every parameter gathered (collective), rank 0 writes.
void export_weights(Transformer& model, const Options& o, bool rank0);
// --convert: --load's checkpoint to --export-hf, on one rank, no model built. Exit status.
int run_convert(const Options& o, const World& w);

}  // namespace paralab
