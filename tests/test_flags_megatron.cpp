// tests/test_flags_megatron.cpp: Megatron-LM's flags (cli/flags_megatron.cpp) resolve to
// paralab's settings; "did you mean" (cli/flags_messages.cpp). Their refusals, one line each:
// tests/cli_errors.sh.
#include <gtest/gtest.h>

#include <string>
#include <vector>
#include "tests/test_flags_helpers.h"

namespace paralab {
namespace {

using flags_test::TempFile;
using flags_test::error_of;
using flags_test::parse;

const std::vector<std::string> kLlamaParts = {
    "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
    "--untie-embeddings-and-output-weights", "--disable-bias-linear"};

TEST(FlagsMegatron, LlamasPartsChooseLlama) {
  EXPECT_EQ(parse(kLlamaParts).model.arch, Arch::LLAMA);
  std::vector<std::string> with_arch = kLlamaParts;
  with_arch.insert(with_arch.end(), {"--arch", "llama"});
  EXPECT_EQ(parse(with_arch).model.arch, Arch::LLAMA);
  EXPECT_EQ(parse({"--arch", "llama", "--swiglu"}).model.arch, Arch::LLAMA);  // restated
  EXPECT_EQ(parse({"--normalization", "LayerNorm"}).model.arch, Arch::GPT);   // Megatron's default
  EXPECT_EQ(error_of({"--arch", "gpt", "--disable-bias-linear"}),
            "--disable-bias-linear (llama's) conflicts with --arch gpt (LayerNorm, learned "
            "positions, GeLU MLP, biases, tied embeddings)");
}

TEST(FlagsMegatron, TheSameSettingsUnderMegatronsNames) {
  std::vector<std::string> gqa = kLlamaParts;
  gqa.push_back("--group-query-attention");
  EXPECT_EQ(parse(gqa).model.num_query_groups, 1);  // Megatron's default, MQA
  gqa.insert(gqa.end(), {"--num-query-groups", "2"});
  EXPECT_EQ(parse(gqa).model.num_query_groups, 2);
  EXPECT_FLOAT_EQ(parse({"--init-method-std", "0.006"}).model.init_method_std, 0.006f);
  EXPECT_EQ(parse({"--check-for-nan-in-loss-and-grad"}).train.max_skipped_steps, 1);
  EXPECT_EQ(parse({"--distributed-timeout-minutes", "2"}).collective_timeout, 120);
  EXPECT_TRUE(parse({"--recompute-activations"}).model.recompute.selective());
  const Options split = parse({"--split", "949,50,1"});
  EXPECT_DOUBLE_EQ(split.train.split_train, 0.949);
  EXPECT_DOUBLE_EQ(split.train.split_valid, 0.05);
  EXPECT_DOUBLE_EQ(parse({"--split", "98/2"}).train.split_valid, 0.02);  // Megatron's '/'
}

TEST(FlagsMegatron, SamplesBecomeSteps) {
  // 100 samples of a global batch of 16: 6 steps (rounded down, Megatron's); the schedule
  // counts samples: warm-up 10, decay to the end (100)
  const Options o = parse({"--global-batch-size", "16", "--micro-batch-size", "4",
                           "--train-samples", "100", "--lr-warmup-samples", "10"});
  EXPECT_EQ(o.train.train_iters, 6);
  EXPECT_EQ(o.train.lr_warmup_samples, 10);
  EXPECT_EQ(o.train.lr_decay_samples, 100);
  // --lr-warmup-fraction of the decay: 0.25 x 8 = 2 steps
  const Options f = parse({"--train-iters", "8", "--lr-warmup-fraction", "0.25"});
  EXPECT_EQ(f.train.lr_warmup_iters, 2);
}

TEST(FlagsMegatron, NoEffectFlagsAreNamedOnOneWarning) {
  const Options o = parse({"--use-mcore-models", "--attention-backend", "fused",
                           "--no-mmap-bin-files"});
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_EQ(o.warnings[0],
            "Megatron flags with no effect in paralab: --use-mcore-models (one model "
            "implementation), --attention-backend (--attention flash|naive), --no-mmap-bin-files "
            "(data files are memory-mapped)");
}

// The tokenizer fixes the vocabulary where its file counts it (cli/flags_data.cpp).
TEST(FlagsMegatron, TheTokenizerFixesTheVocabulary) {
  // NullTokenizer: --vocab-size tokens and its end-of-document token
  EXPECT_EQ(parse({"--tokenizer-type", "NullTokenizer", "--vocab-size", "100"}).model.vocab_size,
            101);
  EXPECT_EQ(error_of({"--tokenizer-type", "NullTokenizer"}),
            "--tokenizer-type NullTokenizer needs --vocab-size");
  TempFile vocab(R"({"a": 0, "b": 1, "c": 2, "<|endoftext|>": 3})", ".json");
  EXPECT_EQ(parse({"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab.path()})
                .model.vocab_size, 4);
  EXPECT_EQ(error_of({"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab.path(),
                      "--vocab-size", "8"}),
            "--vocab-size (8) is not the tokenizer's vocabulary, 4 from --vocab-file " +
                vocab.path() + " (Megatron takes the tokenizer's)");
  TempFile hf(R"({"model": {"type": "BPE", "vocab": {"x": 0, "y": 1}},
                  "added_tokens": [{"id": 2, "content": "<s>"}, {"id": 1, "content": "y"}]})",
              ".json");
  EXPECT_EQ(parse({"--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", hf.path()})
                .model.vocab_size, 3);
  EXPECT_EQ(error_of({"--arch", "llama", "--tokenizer-type", "Llama2Tokenizer",
                      "--tokenizer-model", "t.model"}),
            "--tokenizer-type Llama2Tokenizer: paralab reads token ids and does not load the "
            "tokenizer, so it cannot count its vocabulary (t.model is no tokenizer.json): give "
            "--vocab-size");
  EXPECT_EQ(parse({"--arch", "llama", "--tokenizer-type", "Llama2Tokenizer", "--vocab-size",
                   "320"}).model.vocab_size, 320);
}

// Launch scripts as users paste them (issue 37): Megatron's defaults and names.
TEST(FlagsMegatron, LaunchScriptsAsPasted) {
  // a Llama tokenizer without family flags asks for the family by name
  EXPECT_EQ(error_of({"--tokenizer-type", "Llama2Tokenizer", "--vocab-size", "320"}),
            "--tokenizer-type Llama2Tokenizer names a Llama model, but no --arch nor Llama's parts "
            "(--swiglu, --normalization RMSNorm, ...) are given (Megatron's pretrain_llama.py "
            "sets them): give --arch llama, or --arch gpt for a GPT");
  // Megatron's SwiGLU width, int(8h/3/64) x 64 (arguments.py); gpt keeps 4h
  EXPECT_EQ(parse({"--arch", "llama", "--hidden-size", "8192", "--num-attention-heads", "64"})
                .model.ffn_hidden_size, 21824);
  EXPECT_EQ(parse({"--arch", "llama", "--hidden-size", "128"}).model.ffn_hidden_size, 320);
  EXPECT_EQ(parse({"--hidden-size", "128"}).model.ffn_hidden_size, 512);
  EXPECT_EQ(error_of({"--arch", "llama", "--hidden-size", "16", "--num-attention-heads", "2"}),
            "--arch llama with --hidden-size 16: Megatron's SwiGLU width int(8h/3/64) x 64 is 0; "
            "give --ffn-hidden-size");
  // an alias table beside the edit distance
  EXPECT_EQ(error_of({"--num-groups", "2"}),
            "unknown flag or argument: --num-groups 2 (use --num-query-groups)");
  EXPECT_EQ(error_of({"--fp16", "--bf16"}), "--bf16 and --fp16 are exclusive: give one");
  EXPECT_EQ(error_of({"--fp16", "--min-loss-scale", "8", "--initial-loss-scale", "4"}),
            "--min-loss-scale must be > 0 and at most --initial-loss-scale (4), got 8");
  EXPECT_EQ(error_of({"--fp16", "--loss-scale", "-1"}),
            "--loss-scale must be > 0 and at most 3.4e38 (an fp32 number), got -1");
  // whole numbers written as floats, conflicting ZeRO flags
  EXPECT_EQ(parse({"--ddp-bucket-size", "2e9"}).ddp_bucket_size, 2000000000);
  EXPECT_EQ(error_of({"--ddp-bucket-size", "2.5"}), "--ddp-bucket-size must be an integer, got 2.5");
  EXPECT_EQ(error_of({"--use-distributed-optimizer", "--zero-stage", "0"}),
            "--use-distributed-optimizer (ZeRO-1) conflicts with --zero-stage 0: give one");
  // accepted, their no-effect named
  const Options o = parse({"--data-impl", "mmap", "--use-flash-attn-v2", "--initial-loss-scale",
                           "65536"});
  ASSERT_EQ(o.warnings.size(), 2u);
  EXPECT_NE(o.warnings[1].find("--data-impl (indexed datasets are read memory-mapped"),
            std::string::npos) << o.warnings[1];
  // the dynamic scale's flags without --fp16 (Megatron builds no scaler then)
  EXPECT_EQ(o.warnings[0], "loss-scaling flags with no effect: --initial-loss-scale (the dynamic "
                           "scale is --fp16's; --loss-scale needs --fp16 or --bf16)");
  EXPECT_TRUE(parse({"--fp16", "--initial-loss-scale", "65536"}).warnings.empty());
}

TEST(FlagsMegatron, DidYouMean) {
  EXPECT_EQ(error_of({"--num-layer", "2"}),
            "unknown flag or argument: --num-layer 2 (did you mean --num-layers?)");
  EXPECT_EQ(error_of({"--zero_stage", "1"}),
            "unknown flag or argument: --zero_stage 1 (did you mean --zero-stage?)");
  EXPECT_EQ(error_of({"--tensorboard_dir", "x"}),
            "unknown flag or argument: --tensorboard_dir x (did you mean --tensorboard-dir?)");
  EXPECT_EQ(error_of({"--qqqqqqqqq"}), "unknown flag or argument: --qqqqqqqqq (--help lists the flags)");
}

}  // namespace
}  // namespace paralab
