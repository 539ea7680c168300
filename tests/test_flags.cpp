// tests/test_flags.cpp: the command line and --config files: names and aliases, TOML
// loading, which value wins (command line over file, later file over earlier, last of a
// repeated flag), the resolved defaults, and the one-line message of every check.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>
#include "flags.h"

namespace paralab {
namespace {

// Parses args as the trainer would, on a machine with `gpus` GPUs and `world` ranks.
Options parse(std::vector<std::string> args, int world = 1, int gpus = 0) {
  args.insert(args.begin(), "trainer");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_flags(static_cast<int>(argv.size()), argv.data(), world, gpus);
}

// The message of the InputError that parsing args throws ("" when it does not throw).
std::string error_of(const std::vector<std::string>& args, int world = 1, int gpus = 0) {
  try {
    parse(args, world, gpus);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A file under /tmp with the given text, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& text, const std::string& suffix = ".toml") {
    char name[] = "/tmp/paralab_test_XXXXXX";
    int fd = mkstemp(name);
    close(fd);
    std::remove(name);
    path_ = std::string(name) + suffix;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Config presets live beside this file's folder; tests run from the repository root.
std::string repo_path(const std::string& rel) {
  std::string here = __FILE__;
  size_t cut = here.rfind("tests/");
  return (cut == std::string::npos ? std::string() : here.substr(0, cut)) + rel;
}

TEST(Flags, DefaultsAreResolved) {
  Options o = parse({});
  EXPECT_EQ(o.model.arch, Arch::GPT);
  EXPECT_EQ(o.model.ffn_hidden_size, 4 * o.model.hidden_size);
  EXPECT_EQ(o.model.num_query_groups, o.model.num_attention_heads);
  EXPECT_EQ(o.train.global_batch_size, o.train.micro_batch_size);
  EXPECT_EQ(o.train.lr_decay_iters, o.train.train_iters);
  EXPECT_EQ(o.parallel.world_size, 1);
  EXPECT_EQ(o.device, kernels::Device::CPU);
  EXPECT_EQ(o.comm, Comm::MPI);
  EXPECT_TRUE(o.model.fused_cross_entropy);
  EXPECT_FALSE(o.plan);
  EXPECT_TRUE(o.config_files.empty());
}

TEST(Flags, DeviceAndCommDefaultsFollowTheGpus) {
  Options o = parse({}, 1, /*gpus=*/1);
  EXPECT_EQ(o.device, kernels::Device::CUDA);
  EXPECT_EQ(o.comm, Comm::NCCL);
  o = parse({"--device", "cpu"}, 1, 1);
  EXPECT_EQ(o.device, kernels::Device::CPU);
  EXPECT_EQ(o.comm, Comm::MPI);
  o = parse({"--comm", "mpi"}, 1, 1);
  EXPECT_EQ(o.device, kernels::Device::CUDA);
  EXPECT_EQ(o.comm, Comm::MPI);
}

TEST(Flags, LongNamesAndAliases) {
  Options o = parse({"--num-layers", "4", "--hidden", "96", "--heads", "6", "--query-groups",
                     "3", "--ffn", "200", "--seq", "48", "--vocab", "300", "--mbs", "2",
                     "--gbs", "8", "--iters", "7", "--warmup", "2", "--wd", "0.05"});
  EXPECT_EQ(o.model.num_layers, 4);
  EXPECT_EQ(o.model.hidden_size, 96);
  EXPECT_EQ(o.model.num_attention_heads, 6);
  EXPECT_EQ(o.model.num_query_groups, 3);
  EXPECT_EQ(o.model.ffn_hidden_size, 200);
  EXPECT_EQ(o.model.seq_length, 48);
  EXPECT_EQ(o.model.vocab_size, 300);
  EXPECT_EQ(o.train.micro_batch_size, 2);
  EXPECT_EQ(o.train.global_batch_size, 8);
  EXPECT_EQ(o.train.train_iters, 7);
  EXPECT_EQ(o.train.lr_warmup_iters, 2);
  EXPECT_FLOAT_EQ(o.train.weight_decay, 0.05f);

  o = parse({"--tp", "2", "--pp", "2", "--cp", "1", "--layers", "4", "--zero", "2"}, 8);
  EXPECT_EQ(o.parallel.tensor_parallel, 2);
  EXPECT_EQ(o.parallel.pipeline_parallel, 2);
  EXPECT_EQ(o.parallel.data_parallel(), 2);
  EXPECT_EQ(o.parallel.zero_stage, 2);
  EXPECT_EQ(o.train.global_batch_size, 2 * o.train.micro_batch_size);
}

TEST(Flags, ChoicesAndSwitches) {
  Options o = parse({"--arch", "llama", "--attention", "naive", "--lr-decay-style", "linear",
                     "--attention-flops", "causal", "--bf16", "--no-fused-ce", "--verbose",
                     "--seed", "99", "--metrics-jsonl", "m.jsonl", "--report-interval", "10",
                     "--log-interval", "5", "--peak-tflops", "1.5"});
  EXPECT_EQ(o.model.arch, Arch::LLAMA);
  EXPECT_EQ(o.model.attention, AttentionImpl::NAIVE);
  EXPECT_EQ(o.train.lr_decay_style, LrDecay::LINEAR);
  EXPECT_EQ(o.attention_flops, AttentionFlops::CAUSAL);
  EXPECT_TRUE(o.train.bf16);
  EXPECT_FALSE(o.model.fused_cross_entropy);
  EXPECT_TRUE(o.verbose);
  EXPECT_EQ(o.train.seed, 99u);
  EXPECT_EQ(o.metrics_jsonl, "m.jsonl");
  EXPECT_EQ(o.report_interval, 10);
  EXPECT_EQ(o.log_interval, 5);
  EXPECT_DOUBLE_EQ(o.peak_tflops, 1.5);
  EXPECT_EQ(parse({"--lr-decay-style", "constant"}).train.lr_decay_style, LrDecay::CONSTANT);
}

TEST(Flags, DataParallelKnobs) {
  Options o = parse({"--use-distributed-optimizer", "--overlap-grad-reduce",
                     "--overlap-param-gather", "--ddp-bucket-size", "1000",
                     "--zero3-prefetch-layers", "2"},
                    2);
  EXPECT_EQ(o.parallel.zero_stage, 1);
  EXPECT_TRUE(o.overlap_grad_reduce);
  EXPECT_TRUE(o.overlap_param_gather);
  EXPECT_EQ(o.ddp_bucket_size, 1000);
  EXPECT_EQ(o.zero3_prefetch_layers, 2);
  // The distributed optimizer is implied by a higher stage, never lowers it.
  EXPECT_EQ(parse({"--use-distributed-optimizer", "--zero-stage", "3"}).parallel.zero_stage, 3);
}

TEST(Flags, PlanForAnotherWorldSize) {
  Options o = parse({"--plan", "--world-size", "16", "--tp", "4", "--json"}, 1);
  EXPECT_TRUE(o.plan);
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.parallel.world_size, 16);
  EXPECT_EQ(o.launched_world_size, 1);
  EXPECT_EQ(o.parallel.data_parallel(), 4);
  // A plan may describe GPUs this machine does not have.
  EXPECT_EQ(parse({"--plan", "--device", "cuda"}).device, kernels::Device::CUDA);
}

TEST(Flags, RepeatedFlagTakesTheLastValue) {
  Options o = parse({"--lr", "0.5", "--lr", "0.25", "--layers", "8", "--num-layers", "4",
                     "--arch", "llama", "--arch", "gpt"});
  EXPECT_FLOAT_EQ(o.train.lr, 0.25f);
  EXPECT_EQ(o.model.num_layers, 4);
  EXPECT_EQ(o.model.arch, Arch::GPT);
}

TEST(Flags, TomlConfigLoadsEveryKind) {
  TempFile cfg(
      "# a comment\n"
      "arch = \"llama\"\n"
      "num-layers = 6\n"
      "hidden-size = 96\n"
      "num-attention-heads = 6\n"
      "num-query-groups = 2\n"
      "lr = 2e-3\n"
      "min-lr = 1e-4\n"
      "bf16 = true\n"
      "fused-ce = false\n"
      "tp = 2\n"
      "use-distributed-optimizer = true\n");
  Options o = parse({"--config", cfg.path()}, 4);
  EXPECT_EQ(o.model.arch, Arch::LLAMA);
  EXPECT_EQ(o.model.num_layers, 6);
  EXPECT_EQ(o.model.hidden_size, 96);
  EXPECT_EQ(o.model.num_query_groups, 2);
  EXPECT_FLOAT_EQ(o.train.lr, 2e-3f);
  EXPECT_TRUE(o.train.bf16);
  EXPECT_FALSE(o.model.fused_cross_entropy);
  EXPECT_EQ(o.parallel.tensor_parallel, 2);
  EXPECT_EQ(o.parallel.zero_stage, 1);
  ASSERT_EQ(o.config_files.size(), 1u);
  EXPECT_EQ(o.config_files[0], cfg.path());
}

TEST(Flags, NegatedSwitchInToml) {
  TempFile off("no-fused-ce = true\n");
  EXPECT_FALSE(parse({"--config", off.path()}).model.fused_cross_entropy);
  // The command line still wins over the file.
  EXPECT_TRUE(parse({"--config", off.path(), "--fused-ce"}).model.fused_cross_entropy);
}

TEST(Flags, CommandLineOverridesTheFileWhereverItStands) {
  TempFile cfg("lr = 0.5\nnum-layers = 6\n");
  EXPECT_FLOAT_EQ(parse({"--config", cfg.path(), "--lr", "0.125"}).train.lr, 0.125f);
  EXPECT_FLOAT_EQ(parse({"--lr", "0.125", "--config", cfg.path()}).train.lr, 0.125f);
  EXPECT_EQ(parse({"--lr", "0.125", "--config", cfg.path()}).model.num_layers, 6);
}

TEST(Flags, LaterConfigFileOverridesEarlier) {
  TempFile base("lr = 0.5\nnum-layers = 6\n");
  TempFile extra("lr = 0.25\n");
  Options o = parse({"--config", base.path(), "--config", extra.path()});
  EXPECT_FLOAT_EQ(o.train.lr, 0.25f);
  EXPECT_EQ(o.model.num_layers, 6);
  EXPECT_EQ(o.config_files, (std::vector<std::string>{base.path(), extra.path()}));
  EXPECT_FLOAT_EQ(parse({"--config", extra.path(), "--config", base.path()}).train.lr, 0.5f);
}

TEST(Flags, ConfigProblems) {
  TempFile typo("num-layerz = 4\n");
  EXPECT_EQ(error_of({"--config", typo.path()}),
            "--config: unknown key 'num-layerz' (keys are long flag names without the dashes, "
            "e.g. num-layers = 4)");
  TempFile bad_value("hidden-size = \"wide\"\n");
  EXPECT_NE(error_of({"--config", bad_value.path()}).find("--hidden-size"), std::string::npos);
  TempFile bad_choice("arch = \"bert\"\n");
  EXPECT_NE(error_of({"--config", bad_choice.path()}).find("--arch"), std::string::npos);
  EXPECT_NE(error_of({"--config", "/nonexistent/x.toml"}).find("--config"), std::string::npos);
  // A file's values are checked like the command line's.
  TempFile inconsistent("num-attention-heads = 6\n");
  EXPECT_EQ(error_of({"--config", inconsistent.path()}),
            "--num-attention-heads (6) must divide --hidden-size (64)");
}

TEST(Flags, EveryPresetLoads) {
  const char* models[] = {"tiny", "gpt2-124m", "llama-100m", "llama-7b", "gpt3-175b"};
  for (const char* m : models) {
    std::string path = repo_path(std::string("configs/models/") + m + ".toml");
    EXPECT_EQ(error_of({"--config", path}), "") << m;
    EXPECT_EQ(error_of({"--config", path, "--plan", "--world-size", "2"}), "") << m;
  }
  Options tiny = parse({"--config", repo_path("configs/models/tiny.toml")});
  EXPECT_EQ(tiny.model.seq_length, 64);
  EXPECT_EQ(tiny.model.vocab_size, 256);
  Options big = parse({"--config", repo_path("configs/models/gpt3-175b.toml"), "--config",
                       repo_path("configs/parallel/tp8-pp16.toml"), "--plan", "--world-size",
                       "1024"});
  EXPECT_EQ(big.model.num_layers, 96);
  EXPECT_EQ(big.parallel.data_parallel(), 8);
  EXPECT_EQ(big.parallel.zero_stage, 1);
  Options l7 = parse({"--config", repo_path("configs/models/llama-7b.toml")});
  EXPECT_EQ(l7.model.arch, Arch::LLAMA);
  EXPECT_EQ(l7.model.ffn_hidden_size, 11008);

  const char* parallel[][2] = {{"dp2-zero1", "2"}, {"dp4-zero3", "4"}, {"tp2", "2"}};
  for (auto& p : parallel) {
    std::vector<std::string> args = {"--config", repo_path("configs/models/tiny.toml"),
                                     "--config",
                                     repo_path(std::string("configs/parallel/") + p[0] + ".toml"),
                                     "--mbs", "4"};
    EXPECT_EQ(error_of(args, std::stoi(p[1])), "") << p[0];
  }
}

TEST(Flags, HelpIsTheManual) {
  try {
    parse({"--help"});
    FAIL() << "--help did not stop parsing";
  } catch (const HelpRequested& h) {
    EXPECT_NE(h.text.find("--num-attention-heads"), std::string::npos);
    EXPECT_NE(h.text.find("--tensor-model-parallel-size,--tp"), std::string::npos);
    EXPECT_NE(h.text.find("must divide"), std::string::npos);
  }
}

// Each bad input and the exact line it must produce.
struct BadInput {
  std::vector<std::string> args;
  int world;
  const char* message;
};

TEST(Flags, EveryCheckSaysFlagConstraintAndValue) {
  const std::vector<BadInput> cases = {
      {{"--hidden-size", "0"}, 1, "--hidden-size must be >= 1, got 0"},
      {{"--num-layers", "-1"}, 1, "--num-layers must be >= 1, got -1"},
      {{"--seq-length", "0"}, 1, "--seq-length must be >= 1, got 0"},
      {{"--vocab-size", "0"}, 1, "--vocab-size must be >= 1, got 0"},
      {{"--mbs", "0"}, 1, "--micro-batch-size must be >= 1, got 0"},
      {{"--train-iters", "0"}, 1, "--train-iters must be >= 1, got 0"},
      {{"--tp", "0"}, 1, "--tensor-model-parallel-size must be >= 1, got 0"},
      {{"--heads", "6"}, 1, "--num-attention-heads (6) must divide --hidden-size (64)"},
      {{"--query-groups", "3"}, 1,
       "--num-query-groups (3) must divide --num-attention-heads (4)"},
      {{"--arch", "llama", "--hidden-size", "60", "--heads", "4"}, 1,
       "--arch llama needs an even head dim for RoPE, got --hidden-size (60) / "
       "--num-attention-heads (4) = 15"},
      {{"--hidden-dropout", "1"}, 1, "--hidden-dropout must be in [0, 1), got 1"},
      {{"--attention-dropout", "-0.5"}, 1, "--attention-dropout must be in [0, 1), got -0.5"},
      {{"--tp", "4"}, 6, "launched world size (6) must be divisible by --tp (4) x --cp (1) x --pp (1) = 4"},
      {{"--tp", "2", "--ffn", "101"}, 2, "--tp (2) must divide --ffn-hidden-size (101)"},
      {{"--tp", "8"}, 8, "--tp (8) must divide --num-attention-heads (4)"},
      {{"--tp", "4", "--query-groups", "2"}, 4, "--tp (4) must divide --num-query-groups (2)"},
      {{"--pp", "4", "--layers", "6"}, 4, "--pp (4) must divide --num-layers (6)"},
      {{"--cp", "2", "--seq", "30"}, 2, "--seq-length (30) must be divisible by 2 x --cp (2) = 4"},
      {{"--ep", "4"}, 2, "--ep (4) must divide data-parallel x --cp (2 x 1 = 2)"},
      {{"--mbs", "4", "--gbs", "10"}, 1,
       "--global-batch-size (10) must be divisible by --micro-batch-size (4) x data-parallel "
       "size (1) = 4"},
      {{"--mbs", "4", "--gbs", "4"}, 2,
       "--global-batch-size (4) must be divisible by --micro-batch-size (4) x data-parallel "
       "size (2) = 8"},
      {{"--zero-stage", "4"}, 1, "--zero-stage must be 0, 1, 2 or 3, got 4"},
      {{"--zero-stage", "-1"}, 1, "--zero-stage must be 0, 1, 2 or 3, got -1"},
      {{"--overlap-param-gather"}, 2,
       "--overlap-param-gather needs the distributed optimizer (--zero-stage >= 1 or "
       "--use-distributed-optimizer), got --zero-stage 0"},
      {{"--lr", "0.001", "--min-lr", "0.01"}, 1, "--lr (0.001) must be >= --min-lr (0.01)"},
      {{"--min-lr", "-1", "--lr", "-1"}, 1, "--min-lr must be >= 0, got -1"},
      {{"--lr-warmup-iters", "300", "--train-iters", "200"}, 1,
       "--lr-warmup-iters (300) must be <= --lr-decay-iters (defaults to --train-iters, 200)"},
      {{"--lr-warmup-iters", "50", "--lr-decay-iters", "40"}, 1,
       "--lr-warmup-iters (50) must be <= --lr-decay-iters (40)"},
      {{"--weight-decay", "-0.1"}, 1, "--weight-decay must be >= 0, got -0.1"},
      {{"--clip-grad", "-1"}, 1, "--clip-grad must be >= 0, got -1"},
      {{"--adam-beta2", "1"}, 1, "--adam-beta2 must be in [0, 1), got 1"},
      {{"--adam-eps", "0"}, 1, "--adam-eps must be > 0, got 0"},
      {{"--world-size", "8"}, 1,
       "--world-size (8) is only for --plan; a run's world size is the number of ranks mpirun "
       "starts"},
      {{"--plan", "--world-size", "6", "--tp", "4"}, 1,
       "--world-size (6) must be divisible by --tp (4) x --cp (1) x --pp (1) = 4"},
      {{"--json"}, 1, "--json only applies to --plan"},
      {{"--device", "cuda"}, 1, "--device cuda, but no GPU is visible (use --device cpu)"},
      {{"--comm", "nccl"}, 1,
       "--comm nccl needs --device cuda (use --comm mpi on the CPU backend)"},
      {{"--log-interval", "0"}, 1, "--log-interval must be >= 1, got 0"},
      {{"--ddp-bucket-size", "0"}, 1, "--ddp-bucket-size must be >= 1, got 0"},
      {{"--data-path", "/nonexistent/tokens.bin"}, 1,
       "--data-path /nonexistent/tokens.bin: no such file"},
      {{"--no-such-flag"}, 1, "unknown flag or argument: --no-such-flag (--help lists the flags)"},
  };
  for (const BadInput& c : cases) {
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    std::string got = error_of(c.args, c.world);
    EXPECT_EQ(got, c.message) << "args: " << joined << "world " << c.world;
    EXPECT_EQ(got.find('\n'), std::string::npos) << joined;
  }
}

// Pipeline flags (issue 5): Megatron's names; virtual stages imply the interleaved schedule.
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
      {{"--pp", "2", "--tp", "2", "--sequence-parallel", "--pipeline-schedule", "zb-h1"}, 4,
       "--pipeline-schedule zb-h1 does not train with --sequence-parallel (its W would "
       "all-gather the layer inputs again); use 1f1b or interleaved"},
      {{"--pp", "2", "--pipeline-schedule", "zb-h1", "--recompute-granularity", "selective"}, 2,
       "--pipeline-schedule zb-h1 does not train with --recompute-granularity (its W reads "
       "the kept layer inputs); use 1f1b or interleaved"},
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

TEST(Flags, ParseErrorsNameTheFlag) {
  // CLI11's own messages: invalid numbers and choices, a missing value.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--hidden-size", "abc"}, "--hidden-size"},
      {{"--lr", "fast"}, "--lr"},
      {{"--arch", "bert"}, "--arch"},
      {{"--device", "tpu"}, "--device"},
      {{"--lr-decay-style", "step"}, "--lr-decay-style"},
      {{"--seq-length"}, "--seq-length"},
  };
  for (const auto& c : cases) {
    std::string got = error_of(c.first);
    EXPECT_NE(got.find(c.second), std::string::npos) << got;
    EXPECT_EQ(got.find('\n'), std::string::npos) << got;
  }
}

TEST(Flags, BadInputExitsWithStatus2AndOneLine) {
  const char* argv[] = {"trainer", "--heads", "6"};
  EXPECT_EXIT(
      {
        try {
          parse_flags(3, argv, 1, 0);
        } catch (const InputError& e) {
          exit_on_input_error(e);
        }
      },
      ::testing::ExitedWithCode(2),
      "^paralab: error: --num-attention-heads \\(6\\) must divide --hidden-size \\(64\\)\n$");
}

TEST(Flags, FlagErrorIsAnInputError) {
  try {
    parse({"--heads", "5"});
    FAIL();
  } catch (const FlagError& e) {
    SUCCEED();
  }
  try {
    parse({"--data-path", "/nonexistent"});
    FAIL();
  } catch (const DataError& e) {
    SUCCEED();
  }
}

}  // namespace
}  // namespace paralab
