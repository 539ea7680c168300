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
#include "cli/flags.h"
#include "tests/test_flags_helpers.h"

namespace paralab {
namespace {

using flags_test::BadInput;
using flags_test::TempFile;
using flags_test::error_of;
using flags_test::parse;
using flags_test::repo_path;

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

// Megatron's precision-aware optimizer: bf16 moments, each separately; off by default, and
// its flags at their defaults (fp32) leave it off.
TEST(Flags, PrecisionAwareOptimizer) {
  Options o = parse({"--use-distributed-optimizer", "--use-precision-aware-optimizer",
                     "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16", "--bf16"});
  EXPECT_TRUE(o.train.exp_avg_bf16);
  EXPECT_TRUE(o.train.exp_avg_sq_bf16);
  EXPECT_EQ(o.train.exp_avg_bytes() + o.train.exp_avg_sq_bytes(), 4);
  o = parse({"--zero-stage", "3", "--use-precision-aware-optimizer", "--exp-avg-sq-dtype",
             "bf16", "--main-params-dtype", "fp32", "--main-grads-dtype", "fp32"});
  EXPECT_FALSE(o.train.exp_avg_bf16);
  EXPECT_TRUE(o.train.exp_avg_sq_bf16);
  o = parse({"--exp-avg-dtype", "fp32"});
  EXPECT_FALSE(o.train.exp_avg_bf16 || o.train.exp_avg_sq_bf16);
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
  // Only the last value counts, and is the one a message names.
  EXPECT_EQ(parse({"--arch", "bert", "--arch", "gpt"}).model.arch, Arch::GPT);
  EXPECT_EQ(parse({"--train-iters", "abc", "--train-iters", "20"}).train.train_iters, 20);
  EXPECT_EQ(error_of({"--train-iters", "20", "--train-iters", "abc"}),
            "--train-iters must be an integer, got abc");
  EXPECT_EQ(error_of({"--arch", "gpt", "--arch", "bert"}),
            "--arch must be one of gpt, llama, got bert");
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
            "--config " + typo.path() + ":1: unknown key 'num-layerz' (did you mean num-layers?)");
  TempFile far("qqqqqqq = 4\n");  // nothing close: how keys are spelled
  EXPECT_EQ(error_of({"--config", far.path()}),
            "--config " + far.path() + ":1: unknown key 'qqqqqqq' (keys are long flag names "
            "without the dashes, e.g. num-layers = 4)");
  TempFile bad_value("hidden-size = \"wide\"\n");
  EXPECT_EQ(error_of({"--config", bad_value.path()}),
            "--config " + bad_value.path() + ":1: hidden-size must be an integer, got \"wide\"");
  TempFile bad_choice("# model\narch = \"bert\"\n");
  EXPECT_EQ(error_of({"--config", bad_choice.path()}),
            "--config " + bad_choice.path() + ":2: --arch must be one of gpt, llama, got bert");
  // the command line wins over the file: its value is the one checked
  EXPECT_EQ(error_of({"--config", bad_choice.path(), "--arch", "llama"}), "");
  EXPECT_EQ(error_of({"--config", "/nonexistent/x.toml"}),
            "--config /nonexistent/x.toml: no such file");
  // A file's values are checked like the command line's.
  TempFile inconsistent("num-attention-heads = 6\n");
  EXPECT_EQ(error_of({"--config", inconsistent.path()}),
            "--num-attention-heads (6) must divide --hidden-size (64)");
}

TEST(Flags, EveryPresetLoads) {
  const char* models[] = {"tiny",     "gpt2-124m", "llama-100m",   "llama-7b",
                          "gpt3-175b", "tiny-moe",  "qwen3-30b-a3b"};
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

  const char* parallel[][2] = {{"dp2-zero1", "2"}, {"dp4-zero3", "4"}, {"tp2", "2"},
                               {"cp2-ring", "2"}};
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

TEST(Flags, EveryCheckSaysFlagConstraintAndValue) {
  const std::vector<BadInput> cases = {
      {{"--hidden-size", "0"}, 1, "--hidden-size must be >= 1, got 0"},
      {{"--export-hf-dtype", "bf16"}, 1,
       "--export-hf-dtype bf16 needs --export-hf DIR (what to write)"},
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
      {{"--cp", "3"}, 3,
       "--seq-length (32) must be divisible by 2 x --cp (6): the zigzag layout's chunks"},
      {{"--cp", "3", "--cp-layout", "contiguous"}, 3,
       "--seq-length (32) must be divisible by --cp (3)"},
      {{"--cp", "2", "--cp-comm-type", "a2a", "--query-groups", "1"}, 2,
       "--cp-comm-type a2a needs --cp (2) to divide the query groups per tp rank, "
       "--num-query-groups / --tp (1 / 1 = 1)"},
      {{"--cp", "4", "--cp-comm-type", "a2a", "--tp", "2"}, 8,
       "--cp-comm-type a2a needs --cp (4) to divide the attention heads per tp rank, "
       "--num-attention-heads / --tp (4 / 2 = 2)"},
      {{"--cp", "2", "--tp", "4", "--sequence-parallel", "--seq-length", "12"}, 8,
       "--sequence-parallel needs --tp (4) to divide the tokens per context-parallel rank, "
       "--seq-length / --cp (12 / 2 = 6)"},
      {{"--ep", "0"}, 1, "--expert-model-parallel-size must be >= 1, got 0"},
      {{"--ep", "2"}, 2, "--expert-model-parallel-size needs --num-experts"},
      {{"--plan", "--world-size", "4", "--ep", "2"}, 1,
       "--expert-model-parallel-size needs --num-experts"},
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
      {{"--lr", "-1"}, 1, "--lr must be > 0, got -1"},
      {{"--lr", "0", "--min-lr", "0"}, 1, "--lr must be > 0, got 0"},
      {{"--lr", "nan"}, 1, "--lr must be > 0, got nan"},
      {{"--lr", "inf"}, 1, "--lr must be a finite number, got inf"},
      {{"--clip-grad", "nan"}, 1, "--clip-grad must be >= 0, got nan"},
      {{"--weight-decay", "inf"}, 1, "--weight-decay must be a finite number, got inf"},
      {{"--adam-beta1", "-0.1"}, 1, "--adam-beta1 must be in [0, 1), got -0.1"},
      {{"--adam-eps", "inf"}, 1, "--adam-eps must be a finite number, got inf"},
      {{"--peak-tflops", "-1"}, 1, "--peak-tflops must be >= 0, got -1"},
      {{"--seed", "-1"}, 1, "--seed must be an integer from 0 to 18446744073709551615, got -1"},
      {{"--seed", "18446744073709551616"}, 1,
       "--seed must be an integer from 0 to 18446744073709551615, got 18446744073709551616"},
      {{"--hidden-size", "abc"}, 1, "--hidden-size must be an integer, got abc"},
      {{"--num-layers", "9999999999"}, 1, "--num-layers is out of range, got 9999999999"},
      {{"--lr", "fast"}, 1, "--lr must be a number, got fast"},
      {{"--seq-length"}, 1, "--seq-length needs a value (an integer)"},
      {{"--bf16=maybe"}, 1, "--bf16 is a switch: give it alone (or =true / =false), got maybe"},
      {{"--device", "tpu"}, 1, "--device must be one of cuda, cpu, cuda-emulated, got tpu"},
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
      {{"--json"}, 1, "--json only applies to --plan, --benchmark and --number-formats"},
      {{"--number-formats", "--plan"}, 1, "--number-formats prints a table and exits: give it without --plan and --benchmark"},
      {{"--world-size", "0"}, 1,
       "--world-size (0) is only for --plan; a run's world size is the number of ranks mpirun "
       "starts"},
      {{"--plan", "--world-size", "0"}, 1, "--world-size must be >= 1, got 0"},
      {{"--plan", "--pp", "2"}, 1,
       "launched world size (1) must be divisible by --tp (1) x --cp (1) x --pp (2) = 2; to "
       "plan for more ranks than were launched, add --world-size N (a multiple of 2)"},
      {{"--plan", "--trace", "/nonexistent/dir/t.json"}, 1,
       "--trace: cannot write /nonexistent/dir/t.json: no such directory /nonexistent/dir"},
      {{"--metrics-jsonl", "/nonexistent/m.jsonl"}, 1,
       "--metrics-jsonl: cannot write /nonexistent/m.jsonl: no such directory /nonexistent"},
      {{"--plan", "--save-tensors", "/tmp"}, 1, "--save-tensors: cannot write /tmp: it is a directory"},
      {{"--save", "/etc/hostname"}, 1, "--save: /etc/hostname is a file, not a folder"},
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
