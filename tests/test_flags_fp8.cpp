// tests/test_flags_fp8.cpp: the --fp8-* flags (cli/flags_fp8.cpp): Megatron-Core's defaults
// (megatron/training/arguments.py: format off, recipe delayed, margin 0, history 1,
// most_recent), each value read into Fp8Config, the bad values refused with one line naming
// the flag, and --fp8-format refused with --fp16, with a shared expert and tensorwise with the
// experts' width split (one line each); MoE itself is read (the experts run in FP8).
#include <gtest/gtest.h>

#include <string>
#include "cli/flags.h"
#include "tests/test_flags_helpers.h"

namespace paralab {
namespace {

using flags_test::error_of;
using flags_test::parse;

TEST(FlagsFp8, MegatronsDefaults) {
  const Options o = parse({});
  EXPECT_FALSE(o.model.fp8.enabled);
  EXPECT_EQ(o.model.fp8.recipe, Fp8Recipe::Delayed);
  EXPECT_EQ(o.model.fp8.margin, 0);
  EXPECT_EQ(o.model.fp8.amax_history_len, 1);  // Transformer Engine's DelayedScaling: 1024
  EXPECT_EQ(o.model.fp8.amax_compute_algo, kernels::Fp8AmaxAlgo::MostRecent);  // TE's: max
}

TEST(FlagsFp8, ValuesAreRead) {
  const Options o = parse({"--fp8-recipe", "blockwise", "--fp8-margin", "2",
                           "--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max"});
  EXPECT_EQ(o.model.fp8.recipe, Fp8Recipe::Blockwise);
  EXPECT_EQ(o.model.fp8.margin, 2);
  EXPECT_EQ(o.model.fp8.amax_history_len, 1024);
  EXPECT_EQ(o.model.fp8.amax_compute_algo, kernels::Fp8AmaxAlgo::Max);
  EXPECT_EQ(parse({"--fp8-recipe", "tensorwise"}).model.fp8.recipe, Fp8Recipe::Tensorwise);
}

TEST(FlagsFp8, BadValuesAreRefusedNamingTheFlag) {
  EXPECT_EQ(error_of({"--fp8-format", "e5m2"}),
            "--fp8-format must be one of e4m3, hybrid, got e5m2");
  EXPECT_EQ(error_of({"--fp8-recipe", "mxfp8"}),
            "--fp8-recipe must be one of delayed, tensorwise, blockwise, got mxfp8");
  EXPECT_EQ(error_of({"--fp8-amax-compute-algo", "mean"}),
            "--fp8-amax-compute-algo must be one of most_recent, max, got mean");
  EXPECT_EQ(error_of({"--fp8-margin", "-1"}), "--fp8-margin must be >= 0, got -1");
  EXPECT_EQ(error_of({"--fp8-amax-history-len", "0"}),
            "--fp8-amax-history-len must be >= 1, got 0");
  const std::string fp16 = error_of({"--fp8-format", "hybrid", "--fp16"});
  EXPECT_EQ(fp16.rfind("--fp8-format hybrid needs fp32 or --bf16 storage, got --fp16", 0), 0u)
      << fp16;
  const std::string shared = error_of({"--fp8-format", "e4m3", "--num-experts", "4",
                                        "--moe-shared-expert-intermediate-size", "32"});
  EXPECT_EQ(shared.rfind("--fp8-format e4m3 runs the routed experts in FP8, not a shared expert, "
                         "got --moe-shared-expert-intermediate-size 32", 0), 0u)
      << shared;
  const std::string etp =
      error_of({"--fp8-format", "e4m3", "--fp8-recipe", "tensorwise", "--num-experts", "4",
                "--tp", "2", "--sequence-parallel", "--plan", "--world-size", "2"});
  EXPECT_EQ(etp.rfind("--fp8-recipe tensorwise takes each expert GEMM's own amax and needs the "
                      "experts whole, got --expert-tensor-parallel-size 2", 0), 0u)
      << etp;
}

TEST(FlagsFp8, ExpertsAreRead) {
  const Options moe = parse({"--fp8-format", "hybrid", "--num-experts", "4"});
  EXPECT_TRUE(moe.model.fp8.enabled);
  EXPECT_EQ(moe.model.moe.num_experts, 4);
  // tensorwise with the experts whole (--etp 1) under tp 2: allowed
  const Options folded =
      parse({"--fp8-format", "e4m3", "--fp8-recipe", "tensorwise", "--num-experts", "4", "--tp",
             "2", "--sequence-parallel", "--etp", "1", "--plan", "--world-size", "2"});
  EXPECT_EQ(folded.parallel.expert_tensor_parallel, 1);
}

TEST(FlagsFp8, FormatIsReadWithEitherStorage) {
  const Options e4m3 = parse({"--fp8-format", "e4m3", "--bf16"});
  EXPECT_TRUE(e4m3.model.fp8.enabled);
  EXPECT_FALSE(e4m3.model.fp8.hybrid);
  const Options hybrid = parse({"--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"});
  EXPECT_TRUE(hybrid.model.fp8.enabled);  // fp32 storage: allowed
  EXPECT_TRUE(hybrid.model.fp8.hybrid);
  EXPECT_EQ(hybrid.model.fp8.backward_format(), kernels::Fp8Format::E5M2);
}

}  // namespace
}  // namespace paralab
