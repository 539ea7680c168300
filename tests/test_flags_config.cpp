// tests/test_flags_config.cpp: the --config files read as TOML (syntax and type errors name
// the file and the line), the manual's layout (--help), and --verbose's resolved options.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>
#include "cli/flags.h"
#include "tests/test_flags_helpers.h"

namespace paralab {
namespace {

using flags_test::TempFile;
using flags_test::error_of;
using flags_test::parse;

// Each file text and the message after "--config FILE:".
TEST(FlagsConfig, SyntaxAndTypeErrorsNameTheFileAndLine) {
  // toml++'s own syntax errors (its words), then paralab's rules on what it read
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"arch = \"gpt\n", "1: Error while parsing string: unescaped control characters other "
                         "than TAB (U+0009) are explicitly prohibited"},
      {"# x\narch = 'gpt\n", "2: Error while parsing literal string: control characters other "
                             "than TAB (U+0009) are explicitly prohibited"},
      {"arch = gpt\n", "1: Error while parsing value: could not determine value type"},
      {"num-layers = 4 8\n",
       "1: Error while parsing key-value pair: expected a comment or whitespace, saw '8'"},
      {"num-layers =\n", "1: Error while parsing key-value pair: expected value, saw '\\n'"},
      {"bf16\n", "1: Error while parsing key-value pair: expected '=', saw '\\n'"},
      {"lr = 0.1\nlr = 0.2\n",
       "2: Error while parsing key-value pair: cannot redefine existing floating-point 'lr'"},
      {"\n\nwhen = 1979-05-27\n", "3: unknown key 'when' (keys are long flag names without the "
                                 "dashes, e.g. num-layers = 4)"},
      {"num-layers = \"four\"\n", "1: num-layers must be an integer, got \"four\""},
      {"num-layers = 4.5\n", "1: num-layers must be an integer, got 4.5"},
      {"lr = \"fast\"\n", "1: lr must be a number, got \"fast\""},
      {"bf16 = 1\n", "1: bf16 must be true or false, got 1"},
      {"seq-length = 1979-05-27\n", "1: seq-length must be an integer, got a date or time"},
      {"num-layers = [4, 8]\n", "1: num-layers takes one value, got an array"},
      {"recompute-modules = [\"mlp\", 3]\n",
       "1: recompute-modules takes a list of quoted strings, got 3"},
      {"[model]\nnum-layers = 4\n",
       "1: model is a table; tables are not read, every key is a top-level flag name "
       "(num-layers = 4)"},
      {"model.num-layers = 4\n",
       "1: model is a table; tables are not read, every key is a top-level flag name "
       "(num-layers = 4)"},
      {"tp = 2\ntensor-model-parallel-size = 4\n",
       "2: tensor-model-parallel-size sets --tensor-model-parallel-size again (first at line 1)"},
      {"config = \"other.toml\"\n", "1: config cannot be set in a config file"},
      {"seed = -1\n",
       "1: --seed must be an integer from 0 to 18446744073709551615, got -1"},
  };
  for (const auto& [text, message] : cases) {
    TempFile f(text);
    EXPECT_EQ(error_of({"--config", f.path()}), "--config " + f.path() + ":" + message) << text;
  }
}

TEST(FlagsConfig, FullTomlIsRead) {
  TempFile f(
      "# a comment line\n"
      "\n"
      "  arch = 'llama'   # literal string, trailing comment\n"
      "num-layers = 0x4\r\n"
      "hidden-size = 1_28\n"
      "lr = 2e-3\n"
      "min-lr = 0\n"
      "clip-grad = +1.5\n"
      "bf16 = false\n"
      "metrics-jsonl = \"/tmp/a#b\\tc.jsonl\"\n"
      "recompute-granularity = \"\"\"selective\"\"\"\n"
      "recompute-modules = [\n  \"core_attn\",  # the default\n  \"mlp\",\n]\n");
  const Options o = parse({"--config", f.path()});
  EXPECT_EQ(o.model.hidden_size, 128);
  EXPECT_EQ(o.metrics_jsonl, "/tmp/a#b\tc.jsonl");
  EXPECT_EQ(o.model.arch, Arch::LLAMA);
  EXPECT_EQ(o.model.num_layers, 4);
  EXPECT_FLOAT_EQ(o.train.lr, 2e-3f);
  EXPECT_FLOAT_EQ(o.train.clip_grad, 1.5f);
  EXPECT_FALSE(o.train.bf16);
  EXPECT_TRUE(o.model.recompute.core_attn && o.model.recompute.mlp);
}

// A precision typed on the command line turns the file's other one off, as any typed value
// overrides its key; both in one place stay exclusive.
TEST(FlagsConfig, CommandLinePrecisionOverridesTheFiles) {
  TempFile bf16("bf16 = true\n"), fp16("fp16 = true\n");
  Options o = parse({"--config", bf16.path(), "--fp16"});
  EXPECT_TRUE(o.train.fp16);
  EXPECT_FALSE(o.train.bf16);
  o = parse({"--config", fp16.path(), "--bf16"});
  EXPECT_TRUE(o.train.bf16);
  EXPECT_FALSE(o.train.fp16);
  o = parse({"--config", bf16.path(), "--bf16=false"});  // fp32
  EXPECT_FALSE(o.train.bf16 || o.train.fp16);
  EXPECT_NE(error_of({"--bf16", "--fp16"}).find("--bf16 and --fp16 are exclusive"),
            std::string::npos);
  TempFile both("bf16 = true\nfp16 = true\n");
  EXPECT_NE(error_of({"--config", both.path()}).find("--bf16 and --fp16 are exclusive"),
            std::string::npos);
}

TEST(FlagsConfig, ValueErrorsFromAFileNameItsLine) {
  TempFile f("num-layers = 4\nlr = -1\n");
  // a range check names the flag (the value may come from any file or the command line)
  EXPECT_EQ(error_of({"--config", f.path()}), "--lr must be > 0, got -1");
  TempFile later("lr = 0.5\n");
  EXPECT_EQ(error_of({"--config", f.path(), "--config", later.path()}), "");
}

TEST(FlagsConfig, HelpReadsWell) {
  std::string text;
  try {
    parse({"--help"});
  } catch (const HelpRequested& h) {
    text = h.text;
  }
  EXPECT_EQ(text.find("{false}"), std::string::npos);
  EXPECT_EQ(text.find("--fused-ce"), std::string::npos);
  EXPECT_NE(text.find("  --no-fused-ce "), std::string::npos);
  EXPECT_EQ(text.find("... ..."), std::string::npos);
  EXPECT_NE(text.find("--recompute-modules MODULE ..."), std::string::npos);
  EXPECT_NE(text.find("--save-tensors FILE"), std::string::npos);
  EXPECT_NE(text.find("--save DIR"), std::string::npos);
  EXPECT_NE(text.find("grad.<name>"), std::string::npos);
  EXPECT_NE(text.find("-h,--help"), std::string::npos);
  EXPECT_EQ(text.find("Options:"), std::string::npos);  // no group holding only --help
  for (size_t start = 0, end; start < text.size(); start = end + 1) {
    end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    EXPECT_LE(end - start, 100u) << text.substr(start, end - start);
  }
}

TEST(FlagsConfig, VerboseListsEveryValueAndItsSource) {
  TempFile f("num-layers = 4\nlr = 0.5\n");
  const Options o =
      parse({"--config", f.path(), "--lr", "0.25", "--hidden", "96", "--heads", "6", "-v"});
  const std::string& t = o.resolved_options;
  auto row = [&](const std::string& flag) {
    const size_t at = t.find("  " + flag + " ");
    return at == std::string::npos ? std::string() : t.substr(at, t.find('\n', at) - at);
  };
  EXPECT_NE(row("--num-layers").find(" 4 "), std::string::npos) << t;
  EXPECT_NE(row("--num-layers").find(f.path() + ":1"), std::string::npos) << t;
  EXPECT_NE(row("--lr").find("0.25"), std::string::npos) << t;
  EXPECT_NE(row("--lr").find("command line (over " + f.path() + ":2)"), std::string::npos) << t;
  EXPECT_NE(row("--arch").find("gpt"), std::string::npos) << t;
  EXPECT_NE(row("--arch").find("default"), std::string::npos) << t;
  // derived defaults show their final value
  EXPECT_NE(row("--ffn-hidden-size").find("384"), std::string::npos) << t;
  EXPECT_NE(row("--ffn-hidden-size").find("resolved from 0"), std::string::npos) << t;
  EXPECT_NE(row("--device").find("cpu"), std::string::npos) << t;
  EXPECT_NE(row("--fused-ce").find("true"), std::string::npos) << t;
  EXPECT_TRUE(parse({}).resolved_options.empty());
  // printed on rank 0 only; stdout, or stderr under --plan --json
  const Options plan = parse({"--plan", "--json", "--verbose"});
  EXPECT_EXIT({ print_resolved_options(plan, 1); std::exit(0); }, ::testing::ExitedWithCode(0),
              "^$");
  EXPECT_EXIT({ print_resolved_options(plan, 0); std::exit(0); }, ::testing::ExitedWithCode(0),
              "resolved options");
}

}  // namespace
}  // namespace paralab
