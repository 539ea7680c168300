// cli/flags_check.cpp: resolve_and_check, every topic's checks in the order they depend on each
// other (each topic's are in its file, cli/flags_<topic>.cpp), and the pipeline's check. A bad
// combination becomes one line naming the flags, the constraint and the values (FlagError,
// cli/flags.h); the defaults derived from other flags are filled in on the way.
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: RawFlags, resolve_and_check, and through cli/flags.h Options

namespace paralab {

namespace {

// Pipeline: virtual stages, the schedule, the layers of each stage (pipeline_schedule.h).
void check_pipeline(Options& o, const RawFlags& raw) {
  ParallelConfig& p = o.parallel;
  const int pp = p.pipeline_parallel, L = o.model.num_layers;
  const int first = p.first_stage_layers, last = p.last_stage_layers;
  check_at_least("--virtual-pipeline-model-parallel-size", raw.virtual_pipeline, 0);
  check_at_least("--num-layers-per-virtual-pipeline-stage", raw.layers_per_virtual_stage, 0);
  check_at_least("--decoder-first-pipeline-num-layers", first, 0);
  check_at_least("--decoder-last-pipeline-num-layers", last, 0);
  const bool uneven = first > 0 || last > 0;
  std::ostringstream given;  // the uneven flags as typed, for the messages
  if (first > 0) given << "--decoder-first-pipeline-num-layers (" << first << ")";
  if (first > 0 && last > 0) given << " + ";
  if (last > 0) given << "--decoder-last-pipeline-num-layers (" << last << ")";
  if (uneven && pp == 1) fail(given.str(), " needs --pp > 1");

  int v = raw.virtual_pipeline > 0 ? raw.virtual_pipeline : 1;
  if (raw.layers_per_virtual_stage > 0) {
    const int n = raw.layers_per_virtual_stage;
    if (raw.virtual_pipeline > 0)
      fail("give --virtual-pipeline-model-parallel-size (", raw.virtual_pipeline,
           ") or --num-layers-per-virtual-pipeline-stage (", n, "), not both");
    if (uneven)
      fail("--num-layers-per-virtual-pipeline-stage needs the even split; with ", given.str(),
           " give --virtual-pipeline-model-parallel-size");
    if (L % (pp * n) != 0)
      fail("--num-layers (", L, ") must be divisible by --pp (", pp,
           ") x --num-layers-per-virtual-pipeline-stage (", n, ") = ", pp * n);
    v = L / (pp * n);
  }
  if (v > 1 && pp == 1)
    fail(raw.virtual_pipeline > 0 ? "--virtual-pipeline-model-parallel-size ("
                                  : "--num-layers-per-virtual-pipeline-stage (",
         raw.virtual_pipeline > 0 ? raw.virtual_pipeline : raw.layers_per_virtual_stage,
         ") needs --pp > 1");

  PipelineSchedule kind = v > 1 ? PipelineSchedule::INTERLEAVED : PipelineSchedule::ONE_F_ONE_B;
  if (!raw.pipeline_schedule.empty()) parse_schedule_name(raw.pipeline_schedule, &kind);
  if (kind == PipelineSchedule::INTERLEAVED && v == 1)
    fail("--pipeline-schedule interleaved needs virtual stages: "
         "--virtual-pipeline-model-parallel-size > 1 or --num-layers-per-virtual-pipeline-stage");
  if (kind != PipelineSchedule::INTERLEAVED && v > 1)
    fail("--pipeline-schedule ", schedule_name(kind), " takes no virtual stages, got ", v,
         " (use --pipeline-schedule interleaved)");

  if (!uneven) {
    if (L % pp != 0) fail("--pp (", pp, ") must divide --num-layers (", L, ")");
    if (L / pp % v != 0)
      fail("--num-layers (", L, ") must be divisible by --pp (", pp, ") x virtual stages (", v,
           ") = ", pp * v);
  } else {
    const int middle = pp - (first > 0) - (last > 0), rest = L - first - last;
    if (middle == 0 && rest != 0)
      fail(given.str(), " must add up to --num-layers (", L, ") with --pp ", pp);
    if (middle > 0 && (rest <= 0 || rest % middle != 0))
      fail(given.str(), ": the other ", middle, " stage(s) of --pp ", pp,
           " cannot split the remaining ", rest, " of --num-layers (", L, ") evenly");
    const int rest_each = middle > 0 ? rest / middle : 0;
    for (int n : {first, last, rest_each})
      if (n > 0 && n % v != 0)
        fail("virtual stages (", v, ") must divide every stage's layers: ", given.str(),
             ", the others ", rest_each);
  }
  p.virtual_pipeline = v;
  p.pipeline_schedule = kind;
}

}  // namespace

// Fills the derived values and checks every constraint, each topic after those it reads.
void resolve_and_check(Options& o, const RawFlags& raw, int visible_gpus) {
  const ModelConfig& m = o.model;
  const TrainConfig& t = o.train;
  const ParallelConfig& p = o.parallel;
  check_run_modes(o, raw);         // cli/flags_output.cpp: --plan, --json, --benchmark
  resolve_tokenizer(o, raw);       // cli/flags_data.cpp: the vocabulary a tokenizer fixes
  check_model(o, raw);             // cli/flags_model.cpp: sizes, heads, norms, dropout
  check_parallel_layout(o, raw);   // cli/flags_parallel.cpp: world = tp x cp x pp x dp
  check_pipeline(o, raw);
  check_recompute(o, raw);         // cli/flags_recompute.cpp: after the pipeline's stages
  check_moe(o, raw);               // cli/flags_moe.cpp: after the layout and recompute
  check_sequence_parallel(o);      // cli/flags_parallel.cpp
  // zb-h1's W reads the inputs of the weight GEMMs as the layer kept them (model/layer.h,
  // BackwardPart): selective mlp and norm drop fc1's activation and the norms' outputs.
  // The plan refuses it too: it would predict a run that cannot happen.
  if (p.pipeline_parallel > 1 && p.pipeline_schedule == PipelineSchedule::ZB_H1 &&
      (m.recompute.recompute_mlp() || m.recompute.recompute_norm()))
    fail("--pipeline-schedule zb-h1 does not train with --recompute-modules mlp or norm (its W "
         "reads the outputs they drop); use core_attn, full recompute, or 1f1b");
  check_zero(o, raw);              // cli/flags_parallel.cpp: ZeRO's stage, CPU offload
  check_deepspeed_batch(o, raw);   // cli/flags_deepspeed.cpp: the config's batch triad
  check_batch(o, raw);             // cli/flags_training.cpp: the global batch, samples
  const int dp = p.data_parallel(), pp = p.pipeline_parallel;
  const int microbatches = t.global_batch_size / (t.micro_batch_size * dp);
  if (p.pipeline_schedule == PipelineSchedule::INTERLEAVED && microbatches % pp != 0)
    fail("--pipeline-schedule interleaved needs the microbatches per step, --global-batch-size (",
         t.global_batch_size, ") / (--micro-batch-size (", t.micro_batch_size,
         ") x data-parallel size (", dp, ")) = ", microbatches, ", to be a multiple of --pp (",
         pp, ")");
  check_optimizer(o, raw);         // cli/flags_training.cpp: AdamW, the schedule
  check_backend(o, raw, visible_gpus);  // cli/flags_backend.cpp: --device, --comm
  check_data(o, raw);              // cli/flags_data.cpp: it reads the files
  check_checkpoint_flags(o);       // cli/flags_checkpoint.cpp: --load's manifest against the run
  check_outputs(o);                // cli/flags_output.cpp: every output tried
}

}  // namespace paralab
