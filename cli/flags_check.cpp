// cli/flags_check.cpp: resolve_and_check, every topic's checks in the order they depend on each
// other (each topic's are in its file, cli/flags_<topic>.cpp). A bad
// combination becomes one line naming the flags, the constraint and the values (FlagError,
// cli/flags.h); the defaults derived from other flags are filled in on the way.
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: RawFlags, resolve_and_check, and through cli/flags.h Options

namespace paralab {

// Fills the derived values and checks every constraint, each topic after those it reads.
void resolve_and_check(Options& o, const RawFlags& raw, int visible_gpus) {
  const TrainConfig& t = o.train;
  const ParallelConfig& p = o.parallel;
  check_run_modes(o, raw);         // cli/flags_output.cpp: --plan, --json, --benchmark
  resolve_tokenizer(o, raw);       // cli/flags_data.cpp: the vocabulary a tokenizer fixes
  check_model(o, raw);             // cli/flags_model.cpp: sizes, heads, norms, dropout
  check_parallel_layout(o, raw);   // cli/flags_parallel.cpp: world = tp x cp x pp x dp
  check_pipeline(o, raw);          // cli/flags_pipeline.cpp: virtual stages, uneven splits
  check_recompute(o, raw);         // cli/flags_recompute.cpp: after the pipeline's stages
  check_moe(o, raw);               // cli/flags_moe.cpp: after the layout and recompute
  check_sequence_parallel(o);      // cli/flags_parallel.cpp
  check_zero(o, raw);              // cli/flags_parallel.cpp: ZeRO's stage, CPU offload
  check_precision_optimizer(o, raw);  // cli/flags_precision_optimizer.cpp: after ZeRO, offload
  check_fp8(o, raw);               // cli/flags_fp8.cpp: the recipe; --fp16, MoE's limits
  check_deepspeed_batch(o, raw);   // cli/flags_deepspeed.cpp: the config's batch triad
  check_batch(o, raw);             // cli/flags_training.cpp: the global batch, samples
  check_pipeline_run(o, t.global_batch_size / (t.micro_batch_size * p.data_parallel()));
                                   // cli/flags_pipeline.cpp: the schedule's microbatches
  check_optimizer(o, raw);         // cli/flags_training.cpp: AdamW, the schedule
  check_backend(o, raw, visible_gpus);  // cli/flags_backend.cpp: --device, --comm
  check_precision(o, raw);         // cli/flags_precision.cpp: --bf16, --fp16, the loss scale
  check_data(o, raw);              // cli/flags_data.cpp: it reads the files
  check_checkpoint_flags(o);       // cli/flags_checkpoint.cpp: --load's manifest against the run
  check_outputs(o);                // cli/flags_output.cpp: every output tried
}

}  // namespace paralab
