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

TEST(FlagsDeepSpeed, EveryBadKeyOrValueNamesItsLineAndColumn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\n  \"zero_optimization\": {\n    \"stgae\": 1\n  }\n}",
       ":3:5: unknown key \"stgae\" in zero_optimization (DeepSpeed's config refuses it: extra "
       "fields not permitted)"},
      {"{\"zero_optimization\": {\"stage\": \"two\"}}",
       ":1:24: zero_optimization.stage must be a whole number, got \"two\""},
      {"{\"zero_optimization\": {\"reduce_bucket_size\": 2500.5}}",
       ":1:24: zero_optimization.reduce_bucket_size must be a whole number, got 2500.5"},
      {"{\"fp16\": {\"enabled\": true}}",
       ":1:11: fp16.enabled: fp16 training is not built yet (its loss scaler is; use bf16)"},
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
