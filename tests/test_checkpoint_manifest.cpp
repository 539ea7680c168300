// tests/test_checkpoint_manifest.cpp: a padded vocabulary in a checkpoint's manifest
// (checkpoint/checkpoint_manifest.h). The saving ranks' local VOCAB tensors hold Vp rows, Vp the
// vocabulary rounded up to --make-vocab-size-divisible-by x tp; the manifest records that
// multiple, and the pieces are read through it (saved_spec), whatever the loading run's.
// The runs themselves: tests/mpi/checkpoint.sh's padded cases.
#include <gtest/gtest.h>

#include <string>
#include "checkpoint/checkpoint_manifest.h"

namespace paralab {
namespace {

// A llama of vocabulary 200: padded to 256 at tp 2 with the default multiple 128.
ModelConfig padded_model(int multiple) {
  ModelConfig m;
  m.arch = Arch::LLAMA;
  m.num_layers = 1;
  m.hidden_size = 8;
  m.num_attention_heads = 2;
  m.ffn_hidden_size = 16;
  m.seq_length = 4;
  m.vocab_size = 200;
  m.vocab_divisible_by = multiple;
  return m;
}

// Two tp ranks, each saving its whole local tensor of every tensor (as at tp 2, dp 1).
Manifest saved_at_tp2(const ModelConfig& model) {
  Manifest m;
  m.iteration = 3;
  m.global_batch_size = 2;
  m.model = model;
  m.parallel.tensor_parallel = m.parallel.world_size = 2;
  for (const ParamSpec& p : param_table(model)) {
    m.tensors.push_back(p.name);
    m.shapes.push_back(p.shape);
  }
  for (int r = 0; r < 2; ++r) {
    ManifestShard s;
    s.rank = r;
    s.file = "rank_0000" + std::to_string(r) + ".safetensors";
    s.bytes = 4096;  // (the files are not read here)
    for (const ParamSpec& p : param_table(model)) {
      TensorSlice slice;
      slice.tp = 2, slice.tp_rank = r;
      const int64_t local = shard_numel(shard_blocks(p, slice));
      s.pieces.push_back({p.name, slice, 0, local, std::to_string(s.pieces.size())});
    }
    m.shards.push_back(s);
  }
  return m;
}

std::string refusal(const Manifest& m, const ModelConfig& run) {
  try {
    check_manifest(m, run, "manifest.json");
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointManifest, PaddedVocabularyLoadsWithAnotherMultiple) {
  const std::string text = manifest_json(saved_at_tp2(padded_model(128)));
  const Manifest m = parse_manifest(text, "manifest.json");
  EXPECT_EQ(m.model.vocab_divisible_by, 128);
  // tp 2's ranks held 128 rows each (rank 1: rows 128-199, then 56 padding rows)
  const ParamSpec output = saved_spec(m, param_table(padded_model(4)).back());
  ASSERT_EQ(output.name, "output.weight");
  EXPECT_EQ(padded_rows(output, 2), 256);
  // a run padding to 4 x tp (200 rows, rank 1's from row 100) reads the pieces at 128
  EXPECT_EQ(refusal(m, padded_model(4)), "");
  EXPECT_EQ(refusal(m, padded_model(128)), "");
}

TEST(CheckpointManifest, PiecesReadWithTheWrongMultipleAreRefused) {
  // the same pieces, the manifest claiming 4: rank 0's 128 rows run past its 100-row slice
  Manifest wrong = saved_at_tp2(padded_model(128));
  wrong.model.vocab_divisible_by = 4;
  const std::string why = refusal(wrong, padded_model(128));
  EXPECT_NE(why.find("a piece of embedding.word ends past its slice"), std::string::npos) << why;
}

TEST(CheckpointManifest, OlderManifestsWithoutTheMultipleReadTheDefault) {
  std::string text = manifest_json(saved_at_tp2(padded_model(128)));
  const std::string field = "\"make_vocab_size_divisible_by\": 128,";
  const size_t at = text.find(field);
  ASSERT_NE(at, std::string::npos) << text.substr(0, 800);
  text.erase(at, field.size());
  const Manifest m = parse_manifest(text, "manifest.json");
  EXPECT_EQ(m.model.vocab_divisible_by, ModelConfig().vocab_divisible_by);
  EXPECT_EQ(refusal(m, padded_model(4)), "");
}

}  // namespace
}  // namespace paralab
