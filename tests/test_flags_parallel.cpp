// tests/test_flags_parallel.cpp: the pipeline and recompute flags: schedules, virtual
// stages, uneven stages, Megatron's recompute constraints, and their one-line messages.
#include <gtest/gtest.h>
#include <string>
#include <vector>
#include "cli/flags.h"
#include "tests/test_flags_helpers.h"

namespace paralab {
namespace {

using flags_test::BadInput;
using flags_test::TempFile;
using flags_test::error_of;
using flags_test::parse;

TEST(Flags, PipelineSchedules) {
  Options o = parse({"--plan", "--world-size", "4", "--pp", "4", "--layers", "8", "--vpp", "2",
                     "--gbs", "16", "--print-schedule", "--trace", "/tmp/t.json"});
  EXPECT_EQ(o.parallel.virtual_pipeline, 2);
  EXPECT_EQ(o.parallel.pipeline_schedule, PipelineSchedule::INTERLEAVED);
  EXPECT_TRUE(o.print_schedule);
  EXPECT_EQ(o.trace, "/tmp/t.json");
  o = parse({"--pp", "2", "--layers", "8", "--num-layers-per-virtual-pipeline-stage", "2",
             "--gbs", "8"}, 2);
  EXPECT_EQ(o.parallel.virtual_pipeline, 2);
  o = parse({"--pp", "2", "--pipeline-schedule", "zb-h1"}, 2);
  EXPECT_EQ(o.parallel.pipeline_schedule, PipelineSchedule::ZB_H1);
  // while training they show the measured timeline of the last step
  o = parse({"--pp", "2", "--print-schedule", "--trace", "t.json"}, 2);
  EXPECT_TRUE(o.print_schedule);
  EXPECT_EQ(o.trace, "t.json");
  EXPECT_EQ(o.parallel.virtual_pipeline, 1);
  EXPECT_EQ(parse({}).parallel.pipeline_schedule, PipelineSchedule::ONE_F_ONE_B);
  o = parse({"--pp", "4", "--layers", "10", "--decoder-first-pipeline-num-layers", "1",
             "--decoder-last-pipeline-num-layers", "3"}, 4);
  EXPECT_EQ(o.parallel.first_stage_layers, 1);
  EXPECT_EQ(o.parallel.last_stage_layers, 3);
  EXPECT_NE(error_of({"--pipeline-schedule", "zb-h2"}).find("--pipeline-schedule"),
            std::string::npos);

  const std::vector<BadInput> cases = {
      {{"--pp", "2", "--layers", "6", "--vpp", "2"}, 2,
       "--num-layers (6) must be divisible by --pp (2) x virtual stages (2) = 4"},
      {{"--pp", "2", "--layers", "6", "--num-layers-per-virtual-pipeline-stage", "2"}, 2,
       "--num-layers (6) must be divisible by --pp (2) x "
       "--num-layers-per-virtual-pipeline-stage (2) = 4"},
      {{"--pp", "2", "--layers", "4", "--vpp", "2", "--mbs", "4", "--gbs", "12"}, 2,
       "--pipeline-schedule interleaved needs the microbatches per step, --global-batch-size "
       "(12) / (--micro-batch-size (4) x data-parallel size (1)) = 3, to be a multiple of "
       "--pp (2)"},
      {{"--pp", "2", "--pipeline-schedule", "zb-h1", "--recompute-granularity", "selective",
        "--recompute-modules", "core_attn", "mlp"}, 2,
       "--pipeline-schedule zb-h1 does not train with --recompute-modules mlp or norm (its W "
       "reads the outputs they drop); use core_attn, full recompute, or 1f1b"},
      // --plan refuses it too: one validation for the plan and the run
      {{"--plan", "--world-size", "2", "--pp", "2", "--pipeline-schedule", "zb-h1",
        "--recompute-granularity", "selective", "--recompute-modules", "mlp"}, 1,
       "--pipeline-schedule zb-h1 does not train with --recompute-modules mlp or norm (its W "
       "reads the outputs they drop); use core_attn, full recompute, or 1f1b"},
      {{"--pp", "2", "--layers", "4", "--vpp", "2", "--pipeline-schedule", "zb-h1"}, 2,
       "--pipeline-schedule zb-h1 takes no virtual stages, got 2 (use --pipeline-schedule "
       "interleaved)"},
      {{"--pp", "2", "--layers", "4", "--pipeline-schedule", "interleaved"}, 2,
       "--pipeline-schedule interleaved needs virtual stages: "
       "--virtual-pipeline-model-parallel-size > 1 or --num-layers-per-virtual-pipeline-stage"},
      {{"--pp", "2", "--layers", "8", "--decoder-first-pipeline-num-layers", "3",
        "--decoder-last-pipeline-num-layers", "3"}, 2,
       "--decoder-first-pipeline-num-layers (3) + --decoder-last-pipeline-num-layers (3) must "
       "add up to --num-layers (8) with --pp 2"},
      {{"--pp", "4", "--layers", "8", "--decoder-first-pipeline-num-layers", "3"}, 4,
       "--decoder-first-pipeline-num-layers (3): the other 3 stage(s) of --pp 4 cannot split "
       "the remaining 5 of --num-layers (8) evenly"},
      {{"--pp", "2", "--layers", "8", "--vpp", "2", "--decoder-last-pipeline-num-layers", "3"}, 2,
       "virtual stages (2) must divide every stage's layers: "
       "--decoder-last-pipeline-num-layers (3), the others 5"},
      {{"--decoder-first-pipeline-num-layers", "1"}, 1,
       "--decoder-first-pipeline-num-layers (1) needs --pp > 1"},
      {{"--vpp", "2"}, 1, "--virtual-pipeline-model-parallel-size (2) needs --pp > 1"},
      {{"--pp", "2", "--layers", "8", "--vpp", "2", "--num-layers-per-virtual-pipeline-stage",
        "2"}, 2,
       "give --virtual-pipeline-model-parallel-size (2) or "
       "--num-layers-per-virtual-pipeline-stage (2), not both"},
  };
  for (const BadInput& c : cases) {
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    EXPECT_EQ(error_of(c.args, c.world), c.message) << "args: " << joined;
  }
}

// The DeepSeek-era schedules: their two chunks by placement, their constraints one line
// each; Megatron's --account-for-embedding/loss-in-pipeline-split and its exclusions.
TEST(Flags, VAndMirroredSchedules) {
  Options o = parse({"--pp", "2", "--layers", "8", "--pipeline-schedule", "zb-v"}, 2);
  EXPECT_EQ(o.parallel.pipeline_schedule, PipelineSchedule::ZB_V);
  EXPECT_EQ(o.parallel.virtual_pipeline, 2);  // the V's two chunks, without --vpp
  o = parse({"--pp", "2", "--layers", "8", "--pipeline-schedule", "dualpipe", "--mbs", "1",
             "--gbs", "4"}, 2);
  EXPECT_EQ(o.parallel.pipeline_schedule, PipelineSchedule::DUALPIPE);
  o = parse({"--pp", "2", "--layers", "6", "--account-for-embedding-in-pipeline-split",
             "--account-for-loss-in-pipeline-split"}, 2);
  EXPECT_TRUE(o.parallel.account_for_embedding && o.parallel.account_for_loss);
  o = parse({"--account-for-loss-in-pipeline-split"});  // pp 1: nothing to split
  EXPECT_FALSE(o.parallel.account_for_loss);
  ASSERT_FALSE(o.warnings.empty());
  const std::vector<BadInput> cases = {
      {{"--pp", "2", "--layers", "8", "--vpp", "2", "--pipeline-schedule", "zb-v"}, 2,
       "--pipeline-schedule zb-v takes no virtual stages, got 2 (it holds two chunks per rank "
       "by its placement)"},
      {{"--pp", "3", "--layers", "6", "--pipeline-schedule", "dualpipe"}, 3,
       "--pipeline-schedule dualpipe needs --pp even (rank r and pp - 1 - r hold the same two "
       "stages), got 3"},
      {{"--pp", "2", "--layers", "6", "--pipeline-schedule", "dualpipev"}, 2,
       "--num-layers (6) must be divisible by --pp (2) x the chunks of a rank (2) = 4"},
      {{"--pp", "2", "--layers", "8", "--pipeline-schedule", "dualpipev", "--mbs", "2", "--gbs",
        "6"}, 2,
       "--pipeline-schedule dualpipev needs the microbatches per step, --global-batch-size (6) "
       "/ (--micro-batch-size (2) x data-parallel size (1)) = 3, to be at least 2 x --pp (4) "
       "(DualPipe's num_chunks >= 2 num_ranks)"},
      {{"--pp", "2", "--layers", "8", "--pipeline-schedule", "dualpipe", "--mbs", "1", "--gbs",
        "5"}, 2,
       "--pipeline-schedule dualpipe needs the microbatches per step, --global-batch-size (5) "
       "/ (--micro-batch-size (1) x data-parallel size (1)) = 5, to be even (half go each way)"},
      {{"--pp", "2", "--layers", "8", "--pipeline-schedule", "zb-v", "--recompute-granularity",
        "selective", "--recompute-modules", "norm"}, 2,
       "--pipeline-schedule zb-v does not train with --recompute-modules mlp or norm (its W "
       "reads the outputs they drop); use core_attn, full recompute, or 1f1b"},
      {{"--pp", "2", "--layers", "8", "--pipeline-schedule", "dualpipe", "--mbs", "1", "--gbs",
        "4", "--optimizer-cpu-offload"}, 2,
       "--pipeline-schedule dualpipe does not run with --optimizer-cpu-offload (its mirror sum "
       "reads the gradients on the device)"},
      {{"--pp", "2", "--layers", "8", "--account-for-loss-in-pipeline-split"}, 2,
       "--num-layers (8) + the 1 counted by --account-for-loss-in-pipeline-split = 9 must be "
       "divisible by --pp (2)"},
      {{"--pp", "2", "--layers", "8", "--decoder-first-pipeline-num-layers", "3",
        "--account-for-embedding-in-pipeline-split"}, 2,
       "--decoder-first-pipeline-num-layers (3) and --account-for-embedding-in-pipeline-split "
       "exclude each other (Megatron: no standalone embedding or loss stage with uneven pp)"},
      {{"--pp", "2", "--layers", "8", "--vpp", "2", "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split"}, 2,
       "the 5 layers per pipeline rank (--account-for-embedding/loss-in-pipeline-split) must "
       "split evenly over its 2 chunks"},
  };
  for (const BadInput& c : cases) {
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    EXPECT_EQ(error_of(c.args, c.world), c.message) << "args: " << joined;
  }
}

// Recompute (Megatron's names and constraints): full needs a method and a layer count,
// selective takes neither; modules default to core_attn; a TOML list works too.
TEST(Flags, Recompute) {
  Options o = parse({"--recompute-granularity", "full", "--recompute-method", "block",
                     "--recompute-num-layers", "2", "--pp", "2", "--layers", "4"}, 2);
  EXPECT_TRUE(o.model.recompute.full());
  EXPECT_EQ(o.model.recompute.method, Recompute::Method::BLOCK);
  EXPECT_EQ(o.model.recompute.num_layers, 2);
  o = parse({"--recompute-granularity", "selective"});
  EXPECT_TRUE(o.model.recompute.recompute_core_attn());
  EXPECT_FALSE(o.model.recompute.mlp || o.model.recompute.norm);
  o = parse({"--recompute-granularity", "selective", "--recompute-modules", "mlp", "layernorm"});
  EXPECT_TRUE(o.model.recompute.mlp && o.model.recompute.norm && !o.model.recompute.core_attn);
  TempFile cfg("recompute-granularity = \"selective\"\nrecompute-modules = [\"core_attn\", "
               "\"norm\"]\n");
  o = parse({"--config", cfg.path()});
  EXPECT_TRUE(o.model.recompute.core_attn && o.model.recompute.norm && !o.model.recompute.mlp);
  EXPECT_FALSE(parse({}).model.recompute.selective() || parse({}).model.recompute.full());

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--recompute-granularity", "full"},
       "--recompute-granularity full needs --recompute-method uniform or block"},
      {{"--recompute-granularity", "full", "--recompute-method", "uniform"},
       "--recompute-granularity full needs --recompute-num-layers (1 to the layers of a "
       "pipeline rank, 2)"},
      {{"--recompute-granularity", "full", "--recompute-method", "block",
        "--recompute-num-layers", "3"},
       "--recompute-num-layers (3) must be between 1 and the layers of a pipeline rank (2)"},
      {{"--recompute-granularity", "full", "--recompute-method", "uniform",
        "--recompute-num-layers", "0"},
       "--recompute-num-layers (0) must be between 1 and the layers of a pipeline rank (2)"},
      {{"--recompute-granularity", "selective", "--recompute-method", "uniform"},
       "--recompute-method (uniform) needs --recompute-granularity full, got selective"},
      {{"--recompute-granularity", "selective", "--recompute-num-layers", "1"},
       "--recompute-num-layers (1) needs --recompute-granularity full, got selective"},
      {{"--recompute-num-layers", "1"},
       "--recompute-num-layers (1) needs --recompute-granularity full"},
      {{"--recompute-modules", "mlp"},
       "--recompute-modules (mlp) needs --recompute-granularity selective"},
      {{"--recompute-granularity", "selective", "--recompute-modules", "core_attn,moe"},
       "--recompute-modules: unknown module 'moe' (choices: core_attn, mlp, norm)"},
  };
  for (const auto& [args, message] : bad) EXPECT_EQ(error_of(args), message);
}

// Context parallelism: the comm type (Megatron's allgather spelling too) and the layout; at
// cp 1 they change nothing, and say so.
TEST(Flags, ContextParallel) {
  Options o = parse({"--cp", "2", "--cp-comm-type", "allgather", "--cp-layout", "contiguous"}, 2);
  EXPECT_EQ(o.parallel.context_parallel, 2);
  EXPECT_EQ(o.parallel.cp_comm_type, CpCommType::ALL_GATHER);
  EXPECT_EQ(o.parallel.cp_layout, CpLayout::CONTIGUOUS);
  EXPECT_EQ(o.parallel.data_parallel(), 1);
  o = parse({"--cp", "2", "--cp-comm-type", "a2a"}, 4);
  EXPECT_EQ(o.parallel.cp_comm_type, CpCommType::A2A);
  EXPECT_EQ(o.parallel.cp_layout, CpLayout::ZIGZAG);
  EXPECT_EQ(o.parallel.data_parallel(), 2);
  EXPECT_TRUE(o.warnings.empty());
  EXPECT_EQ(parse({"--cp-comm-type", "a2a"}).warnings,
            (std::vector<std::string>{
                "--cp-comm-type and --cp-layout have no effect with --cp 1"}));
  EXPECT_EQ(error_of({"--cp-comm-type", "ring"}),
            "--cp-comm-type must be one of p2p, all_gather, allgather, a2a, got ring");
}

}  // namespace
}  // namespace paralab

namespace paralab {
namespace {

// CPU offload (cli/flags_offload.cpp): Megatron's and DeepSpeed's names, the defaults, what
// --offload-params implies, and the refusals (tests/cli_errors.sh has their exit status).
TEST(Flags, CpuOffload) {
  Options o = flags_test::parse({});
  EXPECT_FALSE(o.parallel.offload.enabled());
  EXPECT_EQ(o.parallel.offload.fraction, 1.0);
  EXPECT_TRUE(o.parallel.offload.pin_memory);
  EXPECT_EQ(o.parallel.offload.host_fraction(), 0.0);
  o = flags_test::parse({"--optimizer-cpu-offload", "--optimizer-offload-fraction", "0.25",
                         "--no-offload-pin-memory"});
  EXPECT_TRUE(o.parallel.offload.optimizer);
  EXPECT_EQ(o.parallel.offload.host_fraction(), 0.25);
  EXPECT_FALSE(o.parallel.offload.pin_memory);
  o = flags_test::parse({"--zero-stage", "3", "--offload-params"});
  EXPECT_TRUE(o.parallel.offload.optimizer);  // implied: the host shard is updated there
  EXPECT_EQ(o.parallel.offload.host_fraction(), 1.0);
  EXPECT_NE(flags_test::error_of({"--offload-params"}).find("needs --zero-stage 3"),
            std::string::npos);
  EXPECT_NE(flags_test::error_of({"--optimizer-cpu-offload", "--optimizer-offload-fraction", "2"})
                .find("[0, 1]"),
            std::string::npos);
  // a config file takes the long names without dashes
  flags_test::TempFile f("optimizer-cpu-offload = true\noptimizer-offload-fraction = 0.5\n", ".toml");
  o = flags_test::parse({"--config", f.path()});
  EXPECT_EQ(o.parallel.offload.host_fraction(), 0.5);
}

}  // namespace
}  // namespace paralab
