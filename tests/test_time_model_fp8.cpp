// tests/test_time_model_fp8.cpp: plan/time_model_fp8.h, the FP8 projection: the casts' bytes of
// one linear counted by hand for each recipe, then on an ideal device (every GEMM at its peak,
// launches free) the linears' GEMMs at twice the peak take half the time, and on a device whose
// only cost is memory the casts take their bytes over the bandwidth; a profile without an FP8
// peak is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "plan/time_model_fp8.h"
#include "tests/test_flags_helpers.h"
#include "tests/test_plan_helpers.h"

namespace paralab {
namespace {

using plan_test::batch;
using plan_test::gpt;
using plan_test::world;
using flags_test::error_of;
using flags_test::parse;

// bf16 1 TFLOP/s and FP8 2, every GEMM at the peak, memory and launches free.
HardwareProfile ideal_fp8() {
  HardwareProfile hw;
  hw.name = "ideal";
  hw.file = "ideal.toml";
  hw.bf16_tflops = hw.fp32_tflops = 1;
  hw.fp8_tflops = 2;
  hw.gemm_efficiency = 1, hw.gemm_half_gflop = 0, hw.attention_efficiency = 1;
  hw.memory_bandwidth_gbs = 0, hw.memory_efficiency = 1, hw.launch_overhead_us = 0;
  hw.gpus_per_node = 8, hw.intra_node_gbs = 1, hw.inter_node_gbs = 1;
  return hw;
}

double relative(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

TEST(TimeModelFp8, EachLinearCastsXWAndDyTwice) {
  // X (256, 128), W (384, 128), dY (256, 384) in bf16: each cast reads 2 bytes and writes 1
  const double X = 256 * 128, W = 384 * 128, dY = 256 * 384;
  const Fp8Casts delayed = fp8_linear_casts(256, 384, 128, 1, 2, Fp8Recipe::Delayed);
  EXPECT_EQ(delayed.bytes, 2 * 3 * (X + W + dY) + 6 * 12);  // 12 bytes of scale, factor, amax
  EXPECT_EQ(delayed.launches, 6);
  // current scaling: an amax pass over each tensor first (2 bytes each, a 4-byte amax)
  const Fp8Casts tensorwise = fp8_linear_casts(256, 384, 128, 1, 2, Fp8Recipe::Tensorwise);
  EXPECT_EQ(tensorwise.bytes, delayed.bytes + 2 * (X + W + dY) + 3 * 4);
  EXPECT_EQ(tensorwise.launches, 9);
  // blockwise: 4-byte factors, 1 x 128 tiles for X and dY (each copy in its own layout),
  // 128 x 128 blocks for W
  const double tiles = 256 * 1 + 128 * 2 + 256 * 3 + 384 * 2;  // X, X^T, dY, dY^T
  const double blocks = 3 * 1 + 1 * 3;                         // W, W^T
  const Fp8Casts blockwise = fp8_linear_casts(256, 384, 128, 1, 2, Fp8Recipe::Blockwise);
  EXPECT_EQ(blockwise.bytes, 2 * 3 * (X + W + dY) + 4 * (tiles + blocks));
  EXPECT_EQ(blockwise.launches, 6);
  // fp32 storage: 4 bytes read per element; 8 experts: 8 weight matrices, 8 launches each way
  const Fp8Casts experts = fp8_linear_casts(256, 384, 128, 8, 4, Fp8Recipe::Delayed);
  EXPECT_EQ(experts.bytes, 2 * 5 * (X + 8 * W + dY) + (4 + 2 * 8) * 12);
  EXPECT_EQ(experts.launches, 2 * (2 + 8));
}

TEST(TimeModelFp8, LinearGemmsAtTwiceThePeakTakeHalfTheTime) {
  const Plan plan = make_plan(gpt(2, 64, 4, 32, 100), batch(2, 4, true), world(1, 0));
  const HardwareProfile hw = ideal_fp8();
  const StepTime base = project_step_time(plan, hw, false);
  const Fp8StepTime f = project_fp8_step(plan, hw, base, Fp8Recipe::Delayed);
  // the linears' hardware FLOPs (the FLOPs plan's rows, all layers, one microbatch) x 2
  // microbatches at 1 TFLOP/s
  double linear_flops = 0;
  for (const MatmulFlops& mm : plan.flops.matmuls)
    if (mm.name == "qkv" || mm.name == "proj" || mm.name == "fc1" || mm.name == "fc2")
      linear_flops += mm.hardware;
  ASSERT_EQ(f.linears.size(), 4u);
  EXPECT_LT(relative(f.gemm_high, 2 * linear_flops / 1e12), 1e-12);
  EXPECT_LT(relative(f.gemm_fp8, f.gemm_high / 2), 1e-12);
  EXPECT_EQ(f.casts, 0);  // memory free
  EXPECT_LT(relative(f.step_fp8, base.step - f.gemm_high / 2), 1e-12);
  EXPECT_EQ(f.fp8_peak_tflops, 2);
  EXPECT_EQ(f.recipe, "delayed");
}

TEST(TimeModelFp8, CastsCostTheirBytesOverTheBandwidth) {
  const ModelConfig m = gpt(2, 64, 4, 32, 100);
  const Plan plan = make_plan(m, batch(2, 4, true), world(1, 0));
  HardwareProfile hw = ideal_fp8();
  hw.memory_bandwidth_gbs = 1;  // 1 GB/s at efficiency 1
  const StepTime base = project_step_time(plan, hw, false);
  const Fp8StepTime f = project_fp8_step(plan, hw, base, Fp8Recipe::Tensorwise);
  // qkv, proj, fc1, fc2 of each of the 2 layers, each of the 2 microbatches, bf16 (2 bytes)
  const LocalSizes ls = local_sizes(m, 2);
  const double N = (double)ls.N, h = 64;
  double bytes = 0;
  const std::pair<double, double> nk[] = {{(double)ls.qkv, h}, {h, h}, {(double)ls.fc1, h},
                                          {h, (double)ls.ffn}};  // qkv, proj, fc1, fc2
  for (const auto& [n, k] : nk)
    bytes += fp8_linear_casts(N, n, k, 1, 2, Fp8Recipe::Tensorwise).bytes;
  EXPECT_LT(relative(f.cast_bytes, 2 * 2 * bytes), 1e-12);
  EXPECT_LT(relative(f.casts, f.cast_bytes / 1e9), 1e-12);
  EXPECT_EQ(f.cast_launches, 2 * 2 * 4 * 9);
  EXPECT_LT(relative(f.step_fp8, base.step - f.gemm_high + f.gemm_fp8 + f.casts), 1e-12);
}

TEST(TimeModelFp8, AProfileWithoutAnFp8PeakIsRefused) {
  const Plan plan = make_plan(gpt(2, 64, 4, 32, 100), batch(2, 4, true), world(1, 0));
  HardwareProfile hw = ideal_fp8();
  hw.fp8_tflops = 0;  // an A100: no FP8 tensor cores
  const StepTime base = project_step_time(plan, hw, false);
  try {
    project_fp8_step(plan, hw, base, Fp8Recipe::Delayed);
    FAIL() << "no FP8 peak: expected a refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ideal.toml: the profile states no fp8_tflops"),
              std::string::npos) << e.what();
  }
}

TEST(TimeModelFp8, PlanTakesFp8Format) {
  const Options o = parse({"--plan", "--bf16", "--fp8-format", "hybrid", "--fp8-recipe",
                           "blockwise"});
  EXPECT_TRUE(o.model.fp8.enabled);
  EXPECT_TRUE(o.model.fp8.hybrid);
  EXPECT_EQ(o.model.fp8.recipe, Fp8Recipe::Blockwise);
  EXPECT_EQ(error_of({"--fp16", "--fp8-format", "hybrid"}).rfind("--fp8-format hybrid needs", 0), 0u);
}

}  // namespace
}  // namespace paralab
