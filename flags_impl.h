// flags_impl.h: what flags.cpp (the flags) and flags_check.cpp (the checks) share: the
// string flags as typed, and the step that turns them and the parsed Options into one
// validated Options. Not for other files: flags.h is the interface.
//
// defines: RawFlags, resolve_and_check
#pragma once
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
  int world_size = 0;  // --world-size; 0 = not given
  std::string pipeline_schedule;   // empty: 1f1b, or interleaved with virtual stages
  int virtual_pipeline = 0;        // 0 = not given
  int layers_per_virtual_stage = 0;
  // Recompute (model/config.h Recompute), as typed; "" / empty / 0: not given.
  std::string recompute_granularity, recompute_method;
  int recompute_num_layers = 0;
  bool recompute_num_layers_given = false;  // set after parsing: 0 is an error, not "unset"
  std::vector<std::string> recompute_modules;
};

// Fills the derived values and checks every constraint, the cheap ones first (flags_check.cpp).
// Throws FlagError (or check_data_file's DataError) naming the flags, the constraint, the values.
void resolve_and_check(Options& o, const RawFlags& raw, int visible_gpus);

}  // namespace paralab
