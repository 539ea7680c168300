// tests/test_flags_deepspeed.cpp: a DeepSpeed config read as Megatron-DeepSpeed passes it
// (cli/flags_deepspeed.cpp): the batch triad with "auto", each block into paralab's flags with
// DeepSpeed's defaults, the JSON winning over a flag with a warning, and every bad key or
// value refused with the file, line and column.
#include <gtest/gtest.h>

#include <string>
#include <vector>
#include "cli/flags.h"
#include "tests/test_flags_helpers.h"

namespace paralab {
namespace {

using flags_test::TempFile;
using flags_test::error_of;
using flags_test::parse;

std::vector<std::string> with(const TempFile& f, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"--deepspeed", "--deepspeed_config", f.path()};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(FlagsDeepSpeed, TheBatchTriadAnyTwoFixTheThird) {
  TempFile micro_gas(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3})",
                     ".json");
  Options o = parse(with(micro_gas, {"--plan", "--world-size", "4"}), 1);
  EXPECT_EQ(o.train.micro_batch_size, 2);
  EXPECT_EQ(o.train.global_batch_size, 24);  // 2 x 3 x dp 4
  TempFile total_gas(R"({"train_batch_size": 24, "gradient_accumulation_steps": 3})", ".json");
  o = parse(with(total_gas, {"--plan", "--world-size", "4"}), 1);
  EXPECT_EQ(o.train.micro_batch_size, 2);
  TempFile autos(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"})",
                 ".json");
  o = parse(with(autos, {"--micro-batch-size", "3", "--global-batch-size", "6"}));
  EXPECT_EQ(o.train.micro_batch_size, 3);
  EXPECT_EQ(o.train.global_batch_size, 6);
  EXPECT_NE(o.deepspeed.effective.find("\"auto\": --global-batch-size"), std::string::npos)
      << o.deepspeed.effective;
  TempFile wrong(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 2,
                     "gradient_accumulation_steps": 2})", ".json");
  EXPECT_EQ(error_of(with(wrong, {"--plan", "--world-size", "2"})),
            "--deepspeed_config " + wrong.path() + ": train_batch_size (10) must be "
            "train_micro_batch_size_per_gpu (2) x gradient_accumulation_steps (2) x "
            "data-parallel size (2) = 8 (DeepSpeed's assertion)");
}

TEST(FlagsDeepSpeed, BlocksBecomeFlagsWithDeepSpeedsDefaults) {
  TempFile f(R"({
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e5,
                        "offload_optimizer": {"device": "cpu", "ratio": 0.5}},
  "bf16": {"enabled": true},
  "gradient_clipping": 0.5,
  "fp16": {"enabled": false, "initial_scale_power": 12, "hysteresis": 3}
})", ".json");
  const Options o = parse(with(f, {"--plan", "--world-size", "2"}));
  EXPECT_EQ(o.parallel.zero_stage, 2);
  EXPECT_EQ(o.ddp_bucket_size, 200000);  // 2e5 is whole
  EXPECT_TRUE(o.parallel.offload.optimizer);
  EXPECT_DOUBLE_EQ(o.parallel.offload.fraction, 0.5);
  EXPECT_FALSE(o.parallel.offload.pin_memory);  // offload_config.py: pin_memory False
  EXPECT_FALSE(o.overlap_grad_reduce);          // overlap_comm None: true iff stage 3
  EXPECT_TRUE(o.train.bf16);
  EXPECT_FLOAT_EQ(o.train.clip_grad, 0.5f);
  EXPECT_EQ(o.deepspeed.fp16.initial_scale_power, 12);
  EXPECT_EQ(o.deepspeed.fp16.hysteresis, 3);
  EXPECT_EQ(o.deepspeed.fp16.loss_scale_window, 1000);  // constants.py's default
  EXPECT_FALSE(o.train.fp16);  // fp16.enabled false: the scaler's keys carried, unused
  EXPECT_EQ(o.train.loss_scaling.initial_loss_scale, 4294967296.0);
  // an empty config: DeepSpeed's defaults, stage 0 and 5e8-element buckets
  TempFile empty("{}", ".json");
  const Options e = parse(with(empty, {"--zero-stage", "1"}));
  EXPECT_EQ(e.parallel.zero_stage, 0);
  EXPECT_EQ(e.ddp_bucket_size, 500000000);
  EXPECT_EQ(e.warnings, std::vector<std::string>{"--deepspeed_config zero_optimization.stage 0 "
                                                 "overrides --zero-stage 1 (DeepSpeed's engine "
                                                 "runs the config)"});
  TempFile three(R"({"zero_optimization": {"stage": 3}})", ".json");
  EXPECT_TRUE(parse(with(three)).overlap_grad_reduce);
}

// fp16.enabled is --fp16, the block's keys Megatron's loss-scale flags with DeepSpeed's
// defaults (constants.py: initial_scale_power 16, not Megatron's 2^32); the JSON wins over a
// flag that disagrees, and says so.
TEST(FlagsDeepSpeed, Fp16BlockBecomesTheLossScaleFlags) {
  TempFile f(R"({"fp16": {"enabled": true, "hysteresis": 3, "consecutive_hysteresis": true,
                          "min_loss_scale": 0.25, "auto_cast": true}})", ".json");
  const Options o = parse(with(f, {"--plan", "--loss-scale-window", "7"}));
  EXPECT_TRUE(o.train.fp16);
  EXPECT_FALSE(o.train.bf16);
  const paralab::LossScaleConfig& l = o.train.loss_scaling;
  EXPECT_EQ(l.loss_scale, 0);                // dynamic
  EXPECT_EQ(l.initial_loss_scale, 65536.0);  // 2^16
  EXPECT_EQ(l.min_loss_scale, 0.25);
  EXPECT_EQ(l.loss_scale_window, 1000);
  EXPECT_EQ(l.hysteresis, 3);
  EXPECT_TRUE(l.consecutive_hysteresis);
  const std::string warnings = testing::PrintToString(o.warnings);
  EXPECT_NE(warnings.find("fp16.loss_scale_window 1000 overrides --loss-scale-window 7"),
            std::string::npos) << warnings;
  EXPECT_NE(warnings.find("fp16.auto_cast"), std::string::npos) << warnings;
  TempFile fixed(R"({"fp16": {"enabled": true, "loss_scale": 128}})", ".json");
  const Options s = parse(with(fixed, {"--plan"}));
  EXPECT_TRUE(s.train.fp16);
  EXPECT_EQ(s.train.loss_scaling.loss_scale, 128);
}

// bf16.bf16_optimizer_states needs DeepSpeed's bf16 master weights (runtime/config.py): no
// mapping onto paralab's fp32 masters, so named with no effect, pointing at the bf16 moments
// paralab has (Megatron's precision-aware optimizer), which it does not switch on.
TEST(FlagsDeepSpeed, Bf16OptimizerStatesHaveNoEffect) {
  TempFile f(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                          "bf16_optimizer_states": true}})", ".json");
  const Options o = parse(with(f, {"--plan"}));
  EXPECT_TRUE(o.train.bf16);
  EXPECT_FALSE(o.train.exp_avg_bf16 || o.train.exp_avg_sq_bf16);
  const std::string warnings = testing::PrintToString(o.warnings);
  EXPECT_NE(warnings.find("bf16.bf16_master_weights_and_grads (paralab keeps fp32 master"),
            std::string::npos) << warnings;
  EXPECT_NE(warnings.find("bf16.bf16_optimizer_states (DeepSpeed's needs bf16 master weights"),
            std::string::npos) << warnings;
}

TEST(FlagsDeepSpeed, EveryBadKeyOrValueNamesItsLineAndColumn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\n  \"zero_optimization\": {\n    \"stgae\": 1\n  }\n}",
       ":3:5: unknown key \"stgae\" in zero_optimization (DeepSpeed's config refuses it: extra "
       "fields not permitted)"},
      {"{\"zero_optimization\": {\"stage\": \"two\"}}",
       ":1:24: zero_optimization.stage must be a whole number, got \"two\""},
      {"{\"zero_optimization\": {\"reduce_bucket_size\": 2500.5}}",
       ":1:24: zero_optimization.reduce_bucket_size must be a whole number, got 2500.5"},
      {"{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}",
       ":1:38: bf16.enabled and fp16.enabled: DeepSpeed refuses both (give one)"},
      {"{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"nvme\"}}}",
       ":1:46: zero_optimization.offload_optimizer.device nvme: only cpu offload is built (nvme "
       "is not)"},
      {"{\"optimizer\": {\"type\": \"Lamb\"}}",
       ":1:16: optimizer.type Lamb: paralab trains with AdamW (Adam, AdamW)"},
      {"{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 1, \"adam_w_mode\": false}}}",
       ":1:52: adam_w_mode false (Adam with L2 weight decay): not built, paralab's is AdamW"},
      {"{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"total_num_steps\": 9}}}",
       ":1:47: unknown key \"total_num_steps\" in scheduler.params (DeepSpeed's config refuses "
       "it: extra fields not permitted)"},
      {"{\"bf16\": {\"enabled\": 1}}", ":1:11: bf16.enabled must be true or false, got 1"},
      {"{\"a\": 1, \"a\": 2}", ": line 1, column 10: the key \"a\" is given twice in one object"},
  };
  for (const auto& [text, message] : cases) {
    TempFile f(text, ".json");
    EXPECT_EQ(error_of(with(f)), "--deepspeed_config " + f.path() + message) << text;
  }
  TempFile ok("{}", ".json");
  EXPECT_EQ(error_of({"--deepspeed_config", ok.path()}),
            "--deepspeed_config " + ok.path() + " needs --deepspeed (Megatron-DeepSpeed reads it "
            "only then)");
  EXPECT_EQ(error_of({"--deepspeed"}), "--deepspeed needs --deepspeed_config FILE "
                                       "(Megatron-DeepSpeed's)");
  EXPECT_EQ(error_of(with(ok, {"--use-distributed-optimizer"})),
            "--use-distributed-optimizer conflicts with --deepspeed_config's "
            "zero_optimization.stage 0 (DeepSpeed runs the config's stage)");
}

TEST(FlagsDeepSpeed, KeysWithoutEffectAreNamedOnOneLine) {
  TempFile f(R"({"steps_per_print": 10, "wall_clock_breakdown": false, "comms_logger": {},
                 "zero_optimization": {"stage": 1, "allgather_bucket_size": 1e8}})", ".json");
  const Options o = parse(with(f, {"--deepspeed-activation-checkpointing"}));
  ASSERT_EQ(o.warnings.size(), 2u);
  EXPECT_EQ(o.warnings[0], "Megatron flags with no effect in paralab: "
                           "--deepspeed-activation-checkpointing (paralab's recompute is "
                           "--recompute-granularity)");
  EXPECT_NE(o.warnings[1].find("DeepSpeed config keys with no effect in paralab: "
                               "zero_optimization.allgather_bucket_size 100000000 (paralab "
                               "gathers in the reduce buckets, 500000000 elements), "
                               "steps_per_print"), std::string::npos) << o.warnings[1];
  EXPECT_NE(o.warnings[1].find("comms_logger (--deepspeed_config: not read; DeepSpeed ignores an "
                               "unknown top-level key too)"), std::string::npos) << o.warnings[1];
}

}  // namespace
}  // namespace paralab
