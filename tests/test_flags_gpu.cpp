// tests/test_flags_gpu.cpp: cli/flags_gpu.cpp, the precision flags a GPU cannot run: --bf16
// below compute capability 8.0, --fp8-format delayed and tensorwise below 8.9, blockwise below
// 8.0; each refusal names the flag, the GPU and its capability. (tests/emulator/older_gpus.sh
// sees the trainer exit with it on an emulated V100 and T4.)
#include <gtest/gtest.h>

#include <string>

#include "cli/flags.h"

namespace paralab {
namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(FlagsGpu, Bf16NeedsAmpere) {
  Options o;
  o.train.bf16 = true;
  const std::string why = gpu_precision_refusal(o, "Tesla V100-SXM2-32GB", 70);
  EXPECT_TRUE(has(why, "--bf16: Tesla V100-SXM2-32GB (compute capability 7.0)")) << why;
  EXPECT_TRUE(has(why, "8.0")) << why;
  EXPECT_TRUE(has(gpu_precision_refusal(o, "Tesla T4", 75), "(compute capability 7.5)"));
  EXPECT_EQ(gpu_precision_refusal(o, "NVIDIA A100-SXM4-80GB", 80), "");
  EXPECT_EQ(gpu_precision_refusal(o, "", 0), "");  // no GPU: nothing to check
  // fp32 and fp16 run everywhere
  o.train.bf16 = false;
  EXPECT_EQ(gpu_precision_refusal(o, "Tesla V100-SXM2-32GB", 70), "");
  o.train.fp16 = true;
  EXPECT_EQ(gpu_precision_refusal(o, "Tesla T4", 75), "");
}

TEST(FlagsGpu, Fp8NeedsFp8TensorCoresButBlockwiseRunsFromAmpere) {
  Options o;
  o.train.bf16 = true;
  o.model.fp8.enabled = true;
  for (Fp8Recipe r : {Fp8Recipe::Delayed, Fp8Recipe::Tensorwise}) {
    o.model.fp8.recipe = r;
    const std::string why = gpu_precision_refusal(o, "NVIDIA A100-SXM4-80GB", 80);
    EXPECT_TRUE(has(why, "--fp8-format: NVIDIA A100-SXM4-80GB (compute capability 8.0)")) << why;
    EXPECT_TRUE(has(why, std::string("--fp8-recipe ") + fp8_recipe_name(r))) << why;
    EXPECT_TRUE(has(why, "8.9")) << why;
    EXPECT_EQ(gpu_precision_refusal(o, "NVIDIA L40S", 89), "");
    EXPECT_EQ(gpu_precision_refusal(o, "NVIDIA H100 80GB HBM3", 90), "");
  }
  o.model.fp8.recipe = Fp8Recipe::Blockwise;  // emulated GEMMs: an A100 runs it
  EXPECT_EQ(gpu_precision_refusal(o, "NVIDIA A100-SXM4-80GB", 80), "");
  o.train.bf16 = false;  // (so that the FP8 refusal, not --bf16's, is the one below)
  const std::string why = gpu_precision_refusal(o, "Tesla T4", 75);
  EXPECT_TRUE(has(why, "--fp8-format: Tesla T4 (compute capability 7.5)")) << why;
  EXPECT_TRUE(has(why, "blockwise")) << why;
}

}  // namespace
}  // namespace paralab
