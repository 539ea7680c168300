// cli/flags_precision_optimizer.cpp: Megatron's precision-aware optimizer, its names, choices
// and defaults (megatron/training/arguments.py, "Args of precision-aware optimizer";
// megatron/core/optimizer/optimizer_config.py OptimizerConfig):
//   --use-precision-aware-optimizer   store_true; Megatron asserts adam and the distributed
//                                     optimizer (optimizer_config.py __post_init__)
//   --exp-avg-dtype fp32|fp16|bf16|fp8      default fp32: Adam's first moment as stored
//   --exp-avg-sq-dtype fp32|fp16|bf16|fp8   default fp32: the second moment
//   --main-params-dtype fp32|fp16     default fp32: the master weights
//   --main-grads-dtype fp32|bf16      default fp32: the main gradients
// Megatron passes the moments' dtypes to Transformer Engine's FusedAdam (optimizer/__init__.py),
// which computes the update in fp32 and stores a bf16 moment rounded to nearest even, with no
// scale (fused_adam.py: fuse_unscale; common/multi_tensor/adam.cu: MATH_T float, the store a
// static_cast). paralab builds that: fp32 and bf16 moments, separately for each. FusedAdam keeps
// fp16 and fp8 moments and fp16 master weights with a per-tensor scale (absmax / (65504 / 2),
// absmax / 448: fused_adam.py _apply_scale) taken over the rank's shard, so their values
// depend on the sharding; those, and bf16 main gradients, are refused with one line.
// Without --use-precision-aware-optimizer a dtype other than fp32 is refused, as Megatron
// asserts ("exp_avg_dtype can only be fp32 when not using precision-aware optimizer").
#include <CLI/CLI.hpp>
#include <string>

#include "cli/flags_impl.h"  // defines: RawFlags, add_switch, one_of, fail; cli/flags.h Options

namespace paralab {

void add_precision_optimizer_flags(CLI::App& app, RawFlags& raw) {
  const char* kPrecision = "Precision";
  add_switch(app, "--use-precision-aware-optimizer", raw.use_precision_aware_optimizer,
             "Megatron's precision-aware optimizer: Adam's moments stored in the dtypes "
             "--exp-avg-dtype and --exp-avg-sq-dtype give, the update computed in fp32 (as "
             "Transformer Engine's FusedAdam); needs the distributed optimizer (ZeRO >= 1)")
      ->group(kPrecision);
  app.add_option("--exp-avg-dtype", raw.exp_avg_dtype,
                 "with --use-precision-aware-optimizer: Adam's first moment stored in fp32 or "
                 "bf16 (rounded to nearest even after the fp32 update); Megatron's fp16 and fp8 "
                 "(scaled per tensor) are refused")
      ->check(one_of({"fp32", "fp16", "bf16", "fp8"}))->capture_default_str()->group(kPrecision);
  app.add_option("--exp-avg-sq-dtype", raw.exp_avg_sq_dtype,
                 "with --use-precision-aware-optimizer: Adam's second moment, as --exp-avg-dtype")
      ->check(one_of({"fp32", "fp16", "bf16", "fp8"}))->capture_default_str()->group(kPrecision);
  app.add_option("--main-params-dtype", raw.main_params_dtype,
                 "with --use-precision-aware-optimizer: the master weights' dtype; fp32 only "
                 "(Megatron's fp16 masters are refused)")
      ->check(one_of({"fp32", "fp16"}))->capture_default_str()->group(kPrecision);
  app.add_option("--main-grads-dtype", raw.main_grads_dtype,
                 "with --use-precision-aware-optimizer: the main gradients' dtype; fp32 only "
                 "(Megatron's bf16 is refused)")
      ->check(one_of({"fp32", "bf16"}))->capture_default_str()->group(kPrecision);
}

void check_precision_optimizer(Options& o, const RawFlags& raw) {
  struct Dtype {
    const char* flag;
    const std::string& value;
    const char* allowed;  // what paralab builds of Megatron's choices
  };
  const Dtype dtypes[] = {{"--exp-avg-dtype", raw.exp_avg_dtype, "fp32 or bf16"},
                          {"--exp-avg-sq-dtype", raw.exp_avg_sq_dtype, "fp32 or bf16"},
                          {"--main-params-dtype", raw.main_params_dtype, "fp32"},
                          {"--main-grads-dtype", raw.main_grads_dtype, "fp32"}};
  for (const Dtype& d : dtypes) {
    if (d.value == "fp32") continue;
    // optimizer_config.py: "exp_avg_dtype can only be fp32 when not using precision-aware
    // optimizer"
    if (!raw.use_precision_aware_optimizer)
      fail(d.flag, " other than fp32 needs --use-precision-aware-optimizer, got ", d.value);
    if (d.value != "bf16" || std::string(d.allowed) == "fp32")
      fail(d.flag, " must be ", d.allowed, " (Megatron's ", d.value, " is not built here), got ",
           d.value);
  }
  // optimizer_config.py: "--use-precision-aware-optimizer only supported with distributed
  // optimizer"
  if (raw.use_precision_aware_optimizer && o.parallel.zero_stage < 1)
    fail("--use-precision-aware-optimizer needs the distributed optimizer (--zero-stage >= 1 "
         "or --use-distributed-optimizer), got --zero-stage ", o.parallel.zero_stage);
  o.train.exp_avg_bf16 = raw.exp_avg_dtype == "bf16";
  o.train.exp_avg_sq_bf16 = raw.exp_avg_sq_dtype == "bf16";
}

}  // namespace paralab
