// tests/test_data.cpp: the data loader. Samples are a pure function of (seed, step,
// microbatch, dp rank); a dp rank's microbatches are exactly the single-rank run's slice of
// the global batch; targets are the inputs shifted by one; llm.c and text files are read
// and told apart by their header; every bad file gives one line naming it and the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>
#include "model/data.h"

namespace paralab {
namespace {

ModelConfig model(int seq, int vocab) {
  ModelConfig m;
  m.seq_length = seq;
  m.vocab_size = vocab;
  return m;
}

TrainConfig train(int mbs, int gbs, uint64_t seed = 1234) {
  TrainConfig t;
  t.micro_batch_size = mbs;
  t.global_batch_size = gbs;
  t.seed = seed;
  return t;
}

struct Batch {
  std::vector<int> tokens, targets;
  bool operator==(const Batch& o) const { return tokens == o.tokens && targets == o.targets; }
};

// The data a --data-path of one file (or "" for the synthetic corpus) names.
DataSpec from_file(const std::string& path) {
  DataSpec d;
  d.path = path;
  return d;
}

Batch get(const DataLoader& d, int B, int S, int step, int micro, int rank) {
  Batch b{std::vector<int>(B * S), std::vector<int>(B * S)};
  d.microbatch(step, micro, rank, b.tokens.data(), b.targets.data());
  return b;
}

// A file under /tmp, removed at the end of the test.
class TempFile {
 public:
  TempFile(const std::string& suffix, const void* data, size_t bytes) {
    char name[] = "/tmp/paralab_data_XXXXXX";
    int fd = mkstemp(name);
    close(fd);
    std::remove(name);
    path_ = std::string(name) + suffix;
    std::ofstream f(path_, std::ios::binary);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  }
  explicit TempFile(const std::string& text) : TempFile(".txt", text.data(), text.size()) {}
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The bytes of an llm.c token file; header fields can be overridden to make bad ones.
std::vector<uint8_t> llmc_bytes(const std::vector<uint16_t>& tokens, int32_t magic = kLlmcMagic,
                                int32_t version = kLlmcVersion, int32_t count = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count >= 0 ? count : static_cast<int32_t>(tokens.size());
  std::vector<uint8_t> out(kLlmcHeaderBytes + 2 * tokens.size());
  std::memcpy(out.data(), header.data(), kLlmcHeaderBytes);
  std::memcpy(out.data() + kLlmcHeaderBytes, tokens.data(), 2 * tokens.size());
  return out;
}

std::string data_error(const std::string& path, int vocab, int seq) {
  try {
    DataLoader d(from_file(path), model(seq, vocab), train(1, 1), 1);
  } catch (const DataError& e) {
    std::string msg = e.what();
    // check_data_file, which cli/flags_check.cpp runs, must say the same.
    try {
      check_data_file(path, vocab, seq);
      ADD_FAILURE() << "check_data_file accepted " << path;
    } catch (const DataError& e2) {
      EXPECT_EQ(msg, e2.what());
    }
    return msg;
  }
  return "";
}

TEST(Data, SyntheticIsDeterministicFromTheSeed) {
  const int B = 4, S = 16;
  DataLoader a(from_file(""), model(S, 256), train(B, 8), 1), b(from_file(""), model(S, 256), train(B, 8), 1);
  DataLoader c(from_file(""), model(S, 256), train(B, 8, /*seed=*/99), 1);
  EXPECT_EQ(a.source(), DataSource::SYNTHETIC);
  EXPECT_TRUE(get(a, B, S, 3, 1, 0) == get(b, B, S, 3, 1, 0));
  EXPECT_FALSE(get(a, B, S, 3, 1, 0) == get(c, B, S, 3, 1, 0));
  EXPECT_FALSE(get(a, B, S, 3, 1, 0) == get(a, B, S, 4, 1, 0));
  EXPECT_FALSE(get(a, B, S, 3, 0, 0) == get(a, B, S, 3, 1, 0));
}

TEST(Data, TargetsAreInputsShiftedByOne) {
  const int B = 3, S = 32;
  DataLoader d(from_file(""), model(S, 256), train(B, B), 1);
  Batch x = get(d, B, S, 7, 0, 0);
  for (int row = 0; row < B; ++row) {
    size_t start = d.sample_offset(d.sample_index(7, 0, 0, row));
    for (int s = 0; s < S; ++s) {
      EXPECT_EQ(x.tokens[row * S + s], d.token(start + s));
      EXPECT_EQ(x.targets[row * S + s], d.token(start + s + 1));
      if (s + 1 < S) {
        EXPECT_EQ(x.targets[row * S + s], x.tokens[row * S + s + 1]);
      }
    }
  }
}

TEST(Data, SampleIndexFormula) {
  DataLoader d(from_file(""), model(8, 64), train(2, 16), 4);  // 16 = 2 microbatches x 2 rows x 4 ranks
  EXPECT_EQ(d.grad_accum_steps(), 2);
  EXPECT_EQ(d.sample_index(1, 0, 0, 0), 0u);
  // Megatron's sampler: each microbatch step the next B dp samples, rank r the r-th B
  EXPECT_EQ(d.sample_index(1, 1, 0, 1), 1u * 2 * 4 + 1);
  EXPECT_EQ(d.sample_index(1, 0, 3, 0), 3u * 2);
  EXPECT_EQ(d.sample_index(3, 1, 2, 1), 2u * 16 + 1 * 8 + 2 * 2 + 1);
}

// dp rank r's microbatch m is the single-rank run's microbatch m dp + r (Megatron's
// MegatronPretrainingSampler): the dp ranks together read exactly the global batch the single
// rank reads.
TEST(Data, DataParallelSlicesTheSingleRankGlobalBatch) {
  const int B = 2, S = 16, G = 16;
  DataLoader single(from_file(""), model(S, 256), train(B, G), 1);
  ASSERT_EQ(single.grad_accum_steps(), 8);
  for (int dp : {2, 4, 8}) {
    DataLoader sliced(from_file(""), model(S, 256), train(B, G), dp);
    ASSERT_EQ(sliced.grad_accum_steps(), G / (B * dp));
    for (int step : {1, 2, 5})
      for (int r = 0; r < dp; ++r)
        for (int m = 0; m < sliced.grad_accum_steps(); ++m)
          EXPECT_TRUE(get(sliced, B, S, step, m, r) ==
                      get(single, B, S, step, m * dp + r, 0))
              << "dp " << dp << " step " << step << " rank " << r << " micro " << m;
  }
}

TEST(Data, GlobalBatchDefaultsToMicroBatchTimesDp) {
  TrainConfig t = train(2, 0);
  DataLoader d(from_file(""), model(8, 64), t, 3);
  EXPECT_EQ(d.grad_accum_steps(), 1);
  EXPECT_EQ(d.sample_index(2, 0, 2, 1), 6u + 4 + 1);
}

TEST(Data, SyntheticCorpusHasLearnableStructure) {
  const int V = 256;
  std::vector<int32_t> c = synthetic_corpus(1234, V, 1 << 20);
  ASSERT_EQ(c.size(), size_t(1) << 20);
  std::vector<double> unigram(V, 0);
  std::map<std::pair<int, int>, double> bigram;
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_GE(c[i], 0);
    ASSERT_LT(c[i], V);
    unigram[c[i]] += 1;
    if (i > 0) bigram[{c[i - 1], c[i]}] += 1;
  }
  // Every token occurs (the cyclic successor makes the chain visit all of them).
  for (int v = 0; v < V; ++v) EXPECT_GT(unigram[v], 0) << v;
  // Conditional entropy H(next | previous) in nats, against ln V for no structure at all.
  double n = static_cast<double>(c.size() - 1), h1 = 0;
  std::vector<double> context(V, 0);
  for (const auto& kv : bigram) context[kv.first.first] += kv.second;
  for (const auto& kv : bigram) h1 -= kv.second / n * std::log(kv.second / context[kv.first.first]);
  EXPECT_LT(h1, 1.3);
  EXPECT_GT(h1, 0.5);
  EXPECT_EQ(synthetic_corpus(1234, V, 1000), std::vector<int32_t>(c.begin(), c.begin() + 1000));
}

TEST(Data, SyntheticWorksForLargeAndTinyVocabularies) {
  for (int V : {2, 7, 50257}) {
    DataLoader d(from_file(""), model(16, V), train(2, 2), 1);
    Batch b = get(d, 2, 16, 1, 0, 0);
    for (int t : b.tokens) {
      EXPECT_GE(t, 0);
      EXPECT_LT(t, V);
    }
  }
}

TEST(Data, ReadsLlmcTokenFiles) {
  std::vector<uint16_t> tokens(500);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7) % 300);
  std::vector<uint8_t> bytes = llmc_bytes(tokens);
  TempFile f(".bin", bytes.data(), bytes.size());
  DataLoader d(from_file(f.path()), model(16, 300), train(2, 2), 1);
  EXPECT_EQ(d.source(), DataSource::LLMC);
  EXPECT_EQ(d.num_tokens(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(d.token(i), tokens[i]);
  Batch b = get(d, 2, 16, 1, 0, 0);
  size_t start = d.sample_offset(0);
  EXPECT_EQ(b.tokens[0], tokens[start]);
  EXPECT_EQ(b.targets[15], tokens[start + 16]);
  EXPECT_NE(d.describe().find("llm.c"), std::string::npos);
  // The magic, not the name, is what makes an llm.c file.
  TempFile g(".dat", bytes.data(), bytes.size());
  EXPECT_EQ(DataLoader(from_file(g.path()), model(16, 300), train(2, 2), 1).source(), DataSource::LLMC);
}

TEST(Data, ReadsPlainTextAsBytes) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "To be, or not to be: that is the question. ";
  text += "\xc3\xa9";  // UTF-8 bytes above 127 are tokens too
  TempFile f(text);
  DataLoader d(from_file(f.path()), model(32, 256), train(1, 1), 1);
  EXPECT_EQ(d.source(), DataSource::TEXT);
  EXPECT_EQ(d.num_tokens(), text.size());
  for (size_t i = 0; i < text.size(); ++i)
    ASSERT_EQ(d.token(i), static_cast<int>(static_cast<unsigned char>(text[i])));
  Batch b = get(d, 1, 32, 4, 0, 0);
  size_t start = d.sample_offset(d.sample_index(4, 0, 0, 0));
  EXPECT_EQ(b.tokens[0], static_cast<unsigned char>(text[start]));
}

TEST(Data, EveryBadFileSaysWhichAndWhy) {
  std::vector<uint16_t> ok(100, 5);

  EXPECT_EQ(data_error("/nonexistent/tokens.bin", 256, 16),
            "--data-path /nonexistent/tokens.bin: no such file");
  EXPECT_EQ(data_error("/tmp", 256, 16), "--data-path /tmp: not a regular file");

  std::vector<uint8_t> junk(100, 1);
  TempFile short_bin(".bin", junk.data(), junk.size());
  EXPECT_EQ(data_error(short_bin.path(), 256, 16),
            "--data-path " + short_bin.path() +
                ": file of 100 bytes is shorter than the 1024-byte llm.c header");

  std::vector<uint8_t> bad_magic = llmc_bytes(ok, 12345);
  TempFile magic(".bin", bad_magic.data(), bad_magic.size());
  EXPECT_EQ(data_error(magic.path(), 256, 16),
            "--data-path " + magic.path() +
                ": bad magic 12345 (llm.c token files start with 20240520; plain text must not "
                "contain NUL bytes)");

  std::vector<uint8_t> v2 = llmc_bytes(ok, kLlmcMagic, 2);
  TempFile version(".bin", v2.data(), v2.size());
  EXPECT_EQ(data_error(version.path(), 256, 16),
            "--data-path " + version.path() +
                ": llm.c version 2 is not supported (only version 1: uint16 tokens)");

  std::vector<uint8_t> lies = llmc_bytes(ok, kLlmcMagic, kLlmcVersion, 150);
  TempFile count(".bin", lies.data(), lies.size());
  EXPECT_EQ(data_error(count.path(), 256, 16),
            "--data-path " + count.path() +
                ": header says 150 tokens (300 bytes) but the file holds 200 bytes after the "
                "header");

  std::vector<uint8_t> few = llmc_bytes(std::vector<uint16_t>(10, 1));
  TempFile few_tokens(".bin", few.data(), few.size());
  EXPECT_EQ(data_error(few_tokens.path(), 256, 16),
            "--data-path " + few_tokens.path() +
                ": holds 10 tokens, fewer than --seq-length + 1 (17)");

  std::vector<uint16_t> big = ok;
  big[42] = 50256;
  std::vector<uint8_t> big_bytes = llmc_bytes(big);
  TempFile big_id(".bin", big_bytes.data(), big_bytes.size());
  EXPECT_EQ(data_error(big_id.path(), 256, 16),
            "--data-path " + big_id.path() +
                ": token id 50256 at token 42 is >= --vocab-size (256)");
  EXPECT_EQ(data_error(big_id.path(), 50257, 16), "");

  TempFile text(std::string(100, 'a'));
  EXPECT_EQ(data_error(text.path(), 128, 16),
            "--data-path " + text.path() +
                ": plain text is read as bytes (token ids 0..255) and needs --vocab-size >= "
                "256, got 128");
  EXPECT_EQ(data_error(text.path(), 256, 100),
            "--data-path " + text.path() +
                ": plain text of 100 bytes is shorter than --seq-length + 1 (101)");
  TempFile empty("");
  EXPECT_NE(data_error(empty.path(), 256, 16).find("plain text of 0 bytes"), std::string::npos);

  // A NUL byte marks a binary file even without the .bin name.
  std::string nul_text = std::string(2000, 'x');
  nul_text[10] = '\0';
  TempFile nul(nul_text);
  EXPECT_NE(data_error(nul.path(), 256, 16).find("bad magic"), std::string::npos);
}

TEST(Data, ErrorsAreInputErrors) {
  try {
    DataLoader d(from_file("/nonexistent"), model(16, 256), train(1, 1), 1);
    FAIL();
  } catch (const InputError&) {
    SUCCEED();
  }
}

}  // namespace
}  // namespace paralab

namespace paralab {
namespace {

// The held-out split (model/data.h): every training window [start, start + S] lies in
// [0, train_tokens) and every validation window in [valid_begin, num_tokens), so no token a
// validation sample reads is ever trained on. Checked over many samples of both streams.
void expect_disjoint_windows(const DataLoader& d, int S, uint64_t samples) {
  ASSERT_GT(d.valid_tokens(), 0u);
  EXPECT_EQ(d.valid_begin(), d.train_tokens());
  EXPECT_EQ(d.train_tokens() + d.valid_tokens(), d.num_tokens());
  size_t train_last = 0, valid_first = d.num_tokens(), valid_last = 0;
  for (uint64_t n = 0; n < samples; ++n) {
    train_last = std::max(train_last, d.sample_offset(n) + S);  // the window's last token
    valid_first = std::min(valid_first, d.valid_sample_offset(n));
    valid_last = std::max(valid_last, d.valid_sample_offset(n) + S);
  }
  EXPECT_LT(train_last, d.valid_begin());
  EXPECT_GE(valid_first, d.valid_begin());
  EXPECT_LT(valid_last, d.num_tokens());
}

TEST(Data, ValidationSplitIsHeldOut) {
  const int S = 16, B = 4, G = 8;
  DataLoader d(from_file(""), model(S, 256), train(B, G), 1);
  expect_disjoint_windows(d, S, 200000);
  // The training corpus is what it was without a split (the chain continues past it), so
  // enabling evaluation changes nothing training reads.
  EXPECT_EQ(d.train_tokens(), size_t(1) << 20);
  EXPECT_EQ(d.valid_tokens(), d.train_tokens() / 8);
  const std::vector<int32_t> corpus = synthetic_corpus(1234, 256, d.train_tokens());
  for (size_t i = d.train_tokens() - 1000; i < d.train_tokens(); ++i)
    ASSERT_EQ(d.token(i), corpus[i]);
  // A validation microbatch reads the windows valid_sample_offset names.
  Batch v{std::vector<int>(B * S), std::vector<int>(B * S)};
  d.valid_microbatch(2, 1, 0, v.tokens.data(), v.targets.data());
  for (int row = 0; row < B; ++row) {
    const size_t start = d.valid_sample_offset(d.sample_index(3, 1, 0, row));
    EXPECT_EQ(v.tokens[row * S], d.token(start));
    EXPECT_EQ(v.targets[row * S + S - 1], d.token(start + S));
  }
  EXPECT_FALSE(v == get(d, B, S, 3, 1, 0));
}

// dp rank r's validation microbatch m is the single rank's microbatch m dp + r, as in
// training: every layout evaluates the same samples.
TEST(Data, ValidationBatchesSliceLikeTraining) {
  const int B = 2, S = 16, G = 16;
  DataLoader single(from_file(""), model(S, 256), train(B, G), 1);
  auto valid = [&](const DataLoader& d, int j, int m, int r) {
    Batch b{std::vector<int>(B * S), std::vector<int>(B * S)};
    d.valid_microbatch(j, m, r, b.tokens.data(), b.targets.data());
    return b;
  };
  for (int dp : {2, 4, 8}) {
    DataLoader sliced(from_file(""), model(S, 256), train(B, G), dp);
    for (int j : {0, 3})
      for (int r = 0; r < dp; ++r)
        for (int m = 0; m < sliced.grad_accum_steps(); ++m)
          EXPECT_TRUE(valid(sliced, j, m, r) == valid(single, j, m * dp + r, 0))
              << "dp " << dp << " batch " << j << " rank " << r << " micro " << m;
  }
  EXPECT_FALSE(valid(single, 0, 0, 0) == valid(single, 1, 0, 0));
}

TEST(Data, FileValidationIsItsTail) {
  // max(ceil(n / 10), S + 1) tokens, or none when the rest would not hold one window
  EXPECT_EQ(validation_tokens(1000, 16), 100u);
  EXPECT_EQ(validation_tokens(100, 16), 17u);
  EXPECT_EQ(validation_tokens(34, 16), 17u);
  EXPECT_EQ(validation_tokens(33, 16), 0u);
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7) % 300);
  std::vector<uint8_t> bytes = llmc_bytes(tokens);
  TempFile f(".bin", bytes.data(), bytes.size());
  DataLoader d(from_file(f.path()), model(16, 300), train(2, 2), 1);
  EXPECT_EQ(d.train_tokens(), 900u);
  EXPECT_EQ(d.valid_tokens(), 100u);
  expect_disjoint_windows(d, 16, 20000);
  EXPECT_NO_THROW(check_validation_split(f.path(), 300, 16));
  EXPECT_NE(d.describe().find("validation the last 100"), std::string::npos) << d.describe();
  // too short to split: training keeps the whole file, and --eval-interval refuses it
  TempFile text(std::string(33, 'a'));
  DataLoader t(from_file(text.path()), model(16, 256), train(1, 1), 1);
  EXPECT_EQ(t.train_tokens(), 33u);
  EXPECT_EQ(t.valid_tokens(), 0u);
  try {
    check_validation_split(text.path(), 256, 16);
    ADD_FAILURE() << "a 33-token file was split";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--data-path " + text.path() + ": holds 33 tokens, too few for --eval-interval's "
              "validation split (training and validation need --seq-length + 1 each: 34)");
  }
}

}  // namespace
}  // namespace paralab
