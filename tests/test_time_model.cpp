// tests/test_time_model.cpp: plan/time_model.h and plan/fit.h on profiles whose answer is
// known by hand: an ideal device (every GEMM and attention kernel at the peak, memory and
// launches free) makes a step cost its hardware FLOPs over the peak, plus each collective's
// bus bytes over the link; then the overlaps, the links, the pipeline, the fit check and
// its suggestions, the training time, the sensitivity ranking, and CPU offload's copies and
// host AdamW.
#include <gtest/gtest.h>
#include <cmath>
#include "plan/fit.h"
#include "plan/kernel_traffic.h"
#include "plan/moe_params.h"
#include "plan/time_model.h"
#include "tests/test_plan_helpers.h"

namespace paralab {
namespace {

using plan_test::batch;
using plan_test::find_comm;
using plan_test::gpt;
using plan_test::llama;
using plan_test::tiny_moe;
using plan_test::world;

// 1 TFLOP/s, every kernel at the peak, no launch cost, memory free; links 1 GB/s, no latency.
HardwareProfile ideal() {
  HardwareProfile hw;
  hw.name = "ideal";
  hw.bf16_tflops = hw.fp32_tflops = 1;
  hw.gemm_efficiency = 1, hw.gemm_half_gflop = 0, hw.attention_efficiency = 1;
  hw.memory_bandwidth_gbs = 0, hw.memory_efficiency = 1, hw.launch_overhead_us = 0;
  hw.gpus_per_node = 8, hw.intra_node_gbs = 1, hw.inter_node_gbs = 0.5;
  hw.collective_latency_us = 0, hw.inter_node_latency_us = 0;
  return hw;
}

double relative(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

TEST(TimeModel, IdealDeviceCostsTheHardwareFlopsOverThePeak) {
  for (AttentionImpl attention : {AttentionImpl::FLASH, AttentionImpl::NAIVE})
    for (bool full_recompute : {false, true}) {
      ModelConfig m = llama(2, 64, 4, 2, 96, 32, 100);
      m.attention = attention;
      if (full_recompute) {
        m.recompute.granularity = Recompute::Granularity::FULL;
        m.recompute.num_layers = 1;
      }
      const Plan plan = make_plan(m, batch(2, 4), world(1, 0));
      const StepTime t = project_step_time(plan, ideal(), false);
      const double expected = plan.flops.hardware_per_rank_step / 1e12;
      EXPECT_LT(relative(t.step, expected), 1e-9) << (int)attention << full_recompute;
      EXPECT_LT(relative(t.gemm + t.attention + t.recompute, expected), 1e-9);
      EXPECT_EQ(t.bubble, 0);
      EXPECT_EQ(t.exposed_comm, 0);
      EXPECT_GT(t.mfu, 0);
      EXPECT_LT(relative(t.hfu, 1.0), 1e-9);  // the ideal device runs at its peak
    }
}

TEST(TimeModel, SmallGemmsReachLessOfThePeak) {
  const Plan plan = make_plan(gpt(2, 64, 4, 32, 100), batch(2, 4), world(1, 0));
  HardwareProfile hw = ideal();
  const double fast = project_step_time(plan, hw, false).gemm;
  hw.gemm_half_gflop = 1e-3;  // a 1 MFLOP GEMM reaches half the peak: these are small
  const double slow = project_step_time(plan, hw, false).gemm;
  EXPECT_GT(slow, 1.5 * fast);
  hw.launch_overhead_us = 10;  // each GEMM call costs 10 us more
  const StepTime t = project_step_time(plan, hw, false);
  EXPECT_NEAR(t.gemm - slow, t.gemm_calls * 10e-6, 1e-9);
  // every launch the overhead line counts: one per GEMM call and the other kernels'
  const KernelTrafficPlan traffic = kernel_traffic_plan(plan);
  EXPECT_EQ(t.kernel_launches,
            t.gemm_calls + traffic.step_total.launches + traffic.step_attention.launches);
  EXPECT_NEAR(t.launch_seconds, t.kernel_launches * 10e-6, 1e-12);
}

TEST(TimeModel, BlockingDataParallelAllReduceIsBusBytesOverTheLink) {
  const Plan plan = make_plan(gpt(2, 64, 4, 32, 100), batch(2, 8), world(2, 0));
  const StepTime t = project_step_time(plan, ideal(), false);
  const CommPlanEntry* ar = find_comm(plan, CommGroup::DP, CommOp::ALL_REDUCE);
  ASSERT_NE(ar, nullptr);
  double dp_seconds = -1;
  for (const GroupTime& g : t.comm)
    if (g.group == CommGroup::DP && g.op == CommOp::ALL_REDUCE) {
      dp_seconds = g.seconds;
      EXPECT_TRUE(g.intra_node);
      EXPECT_EQ(g.exposed, g.seconds);  // no --overlap-grad-reduce
    }
  EXPECT_LT(relative(dp_seconds, ar->bus_bytes / 1e9), 1e-12);
  const double compute = plan.flops.hardware_per_rank_step / 1e12;
  EXPECT_LT(relative(t.step, compute + t.exposed_comm), 1e-9);
}

TEST(TimeModel, OverlappedGradientReductionHidesBehindTheLastBackward) {
  PlanOptions o;
  o.overlap_grad_reduce = true;
  o.ddp_bucket_size = 2000;  // several buckets
  ModelConfig m = gpt(4, 64, 4, 32, 100);
  const Plan plan = make_plan(m, batch(2, 8), world(2, 0), o);
  HardwareProfile hw = ideal();
  hw.intra_node_gbs = 1000;  // fast enough to hide
  const StepTime t = project_step_time(plan, hw, false);
  for (const GroupTime& g : t.comm)
    if (g.group == CommGroup::DP && g.op == CommOp::ALL_REDUCE) {
      EXPECT_GT(g.calls, 1);
      EXPECT_NEAR(g.exposed, g.seconds / g.calls, 1e-15);  // only the last bucket shows
      EXPECT_EQ(g.overlap, "--overlap-grad-reduce");
    }
}

TEST(TimeModel, GroupsLeavingTheNodeUseTheNetwork) {
  EXPECT_TRUE(group_fits_node(1, 8, 8));
  EXPECT_FALSE(group_fits_node(2, 8, 8));
  EXPECT_TRUE(group_fits_node(4, 2, 8));
  ParallelConfig p = world(16, 1);
  p.tensor_parallel = 8;  // tp in the node, dp across the two nodes
  const Plan plan = make_plan(gpt(2, 64, 8, 32, 128), batch(1, 2), p);
  const StepTime t = project_step_time(plan, ideal(), false);
  for (const GroupTime& g : t.comm) {
    if (g.group == CommGroup::TP) {
      EXPECT_TRUE(g.intra_node);
    }
    if (g.group == CommGroup::DP) {
      EXPECT_FALSE(g.intra_node);
      EXPECT_EQ(g.bandwidth_gbs, 0.5);
    }
  }
}

TEST(TimeModel, PipelineStepIsTheSimulatedScheduleWithTheProjectedCosts) {
  ParallelConfig p = world(4, 0);
  p.pipeline_parallel = 4;
  const Plan plan = make_plan(gpt(8, 64, 4, 32, 100), batch(1, 8), p);
  HardwareProfile hw = ideal();
  hw.intra_node_gbs = 0;  // free links: the step is the schedule's makespan
  const StepTime t = project_step_time(plan, hw, false);
  ASSERT_EQ(t.stages.size(), 4u);
  ActionCosts costs;
  for (const StageTime& s : t.stages) {
    costs.stage_F.push_back(s.F), costs.stage_B.push_back(s.B), costs.stage_W.push_back(s.W);
  }
  const Simulation sim = simulate(plan.pipeline.schedule, costs);
  EXPECT_LT(relative(t.step, sim.step_time), 1e-12);
  EXPECT_LT(relative(t.bubble, sim.idle[0]), 1e-12);
  EXPECT_GT(t.bubble, 0);
  // every stage's busy time is its hardware FLOPs over the peak
  for (int s = 0; s < 4; ++s)
    EXPECT_LT(relative(sim.busy[s], plan.pipeline.stages[s].hardware_flops / 1e12), 1e-9) << s;
}

TEST(TimeModel, TrainingTimeAndNarayananEquationFour) {
  ModelConfig m = llama(2, 64, 4, 2, 96, 32, 100);
  m.recompute.granularity = Recompute::Granularity::FULL;
  m.recompute.num_layers = 1;
  const Plan plan = make_plan(m, batch(2, 4), world(1, 0));
  const StepTime t = project_step_time(plan, ideal(), false);
  const TrainingTime r = project_training_time(plan, t, 1e6);
  EXPECT_EQ(r.steps, std::ceil(1e6 / plan.tokens_per_step));
  EXPECT_NEAR(r.seconds, r.steps * t.step, 1e-9 * r.seconds);
  EXPECT_EQ(r.narayanan_factor, 8);
  const double X = plan.flops.hardware_per_step / t.step;  // one GPU
  EXPECT_LT(relative(r.narayanan_seconds, 8 * 1e6 * plan.params_total / X), 1e-12);
}

TEST(TimeModel, NarayananEquationFourTakesAnMoesActiveParameters) {
  // 6TP counts the weights a token multiplies with: k of an MoE layer's E experts
  const Plan plan = make_plan(tiny_moe(), batch(2, 4), world(1, 0));
  const StepTime t = project_step_time(plan, ideal(), false);
  const TrainingTime r = project_training_time(plan, t, 1e6);
  const double active = (double)param_counts(plan.model).active;
  EXPECT_LT(active, (double)plan.params_total);
  EXPECT_EQ(r.narayanan_params, active);
  const double X = plan.flops.hardware_per_step / t.step;
  EXPECT_LT(relative(r.narayanan_seconds, 6 * 1e6 * active / X), 1e-12);
}

TEST(TimeModel, SensitivityRanksTheFigureThatMovesTheStepMost) {
  const Plan plan = make_plan(gpt(2, 64, 4, 32, 100), batch(2, 8), world(2, 0));
  HardwareProfile hw = ideal();
  hw.intra_node_gbs = 1e6;  // compute-bound: the GEMMs decide
  hw.assumed = {"gemm_efficiency"};
  const StepTime t = project_step_time(plan, hw, true);
  ASSERT_FALSE(t.sensitivity.empty());
  EXPECT_EQ(t.sensitivity[0].key, "gemm_efficiency");
  EXPECT_TRUE(t.sensitivity[0].assumed);
  for (size_t i = 1; i < t.sensitivity.size(); ++i)
    EXPECT_LE(t.sensitivity[i].change, t.sensitivity[i - 1].change);
}

// The time model on a profile whose answer is known: every kernel free but at the peak,
// 1 GB/s PCIe, no latencies (ideal()), one bucket at ZeRO-1 (nothing to hide behind: the copy
// down follows the only reduction, the copy up precedes the only gather). The offloaded step
// is the step without offload, less the device AdamW (free here), plus both copies and the
// host AdamW, H / (rate x host_cores / gpus_per_node).
TEST(TimeModel, CpuOffloadAddsTheCopiesAndTheHostAdamW) {
  HardwareProfile hw = ideal();
  hw.pcie_gbs = 1, hw.pcie_latency_us = 0, hw.host_cores = 16, hw.host_adam_params_per_s = 1e6;
  const ModelConfig m = gpt(2, 64, 4, 32, 256);
  ParallelConfig offloaded = world(2, 1);
  offloaded.offload.optimizer = true;
  const Plan p = make_plan(m, batch(2, 4), offloaded);
  const Plan base = make_plan(m, batch(2, 4), world(2, 1));
  const StepTime t = project_step_time(p, hw, false), t0 = project_step_time(base, hw, false);
  const int64_t S = p.data_parallel.state_numel;
  EXPECT_EQ(t.host_elements, S);
  EXPECT_DOUBLE_EQ(t.host_optimizer, (double)S / (1e6 * 2));
  EXPECT_NEAR(t.exposed_pcie, 2 * 4.0 * S / 1e9, 1e-15);
  EXPECT_NEAR(t.step, t0.step + t.exposed_pcie + t.host_optimizer, 1e-12);
}

TEST(TimeModel, RefusesAProfileWithoutThePrecisionsPeak) {
  const Plan plan = make_plan(gpt(2, 64, 4, 32, 100), batch(2, 4), world(1, 0));
  HardwareProfile hw = ideal();
  hw.bf16_tflops = hw.fp32_tflops = 0;
  EXPECT_THROW(project_step_time(plan, hw), std::invalid_argument);
}

TEST(FitCheck, FitsAtItsPeakAndSuggestsWhatWouldFit) {
  const ModelConfig m = gpt(4, 128, 4, 64, 256);
  const Plan plan = make_plan(m, batch(4, 16), world(4, 0));
  FitCheck f = check_fit(plan, (double)plan.ranks[0].memory.total(), "exactly", true);
  EXPECT_TRUE(f.fits());
  f = check_fit(plan, (double)plan.ranks[0].memory.total() - 1, "one byte short", true);
  EXPECT_FALSE(f.fits());
  // each suggestion, planned again, fits
  ASSERT_GT(f.largest_micro_batch, 0);
  TrainConfig t = batch(f.largest_micro_batch, 16);
  EXPECT_LE(make_plan(m, t, world(4, 0)).ranks[0].memory.total(), f.capacity_bytes);
  ASSERT_GE(f.smallest_zero_stage, 1);
  EXPECT_LE(make_plan(m, batch(4, 16), world(4, f.smallest_zero_stage)).ranks[0].memory.total(),
            f.capacity_bytes);
  ASSERT_GT(f.smallest_tp, 1);
  ParallelConfig p = world(4, 0);
  p.tensor_parallel = f.smallest_tp;
  EXPECT_LE(make_plan(m, batch(4, 16), p).ranks[0].memory.total(), f.capacity_bytes);
  EXPECT_FALSE(check_fit(plan, 0, "unknown", true).checked());
  EXPECT_TRUE(check_fit(plan, 0, "unknown", true).fits());
}

}  // namespace
}  // namespace paralab
