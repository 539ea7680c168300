// tests/test_indexed_dataset.cpp: Megatron's indexed datasets (model/indexed_dataset.h) read
// back exactly, and every bad file refused with its one line; the Megatron data flags' own
// refusals (an empty split, weights that do not parse, a seed NumPy would refuse). The
// samples themselves are held to megatron-core's by tests/scripts/megatron_data.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>
#include "model/data.h"
#include "model/gpt_dataset.h"
#include "model/indexed_dataset.h"
#include "model/numpy_random.h"
#include "tests/test_flags_helpers.h"

namespace paralab {
namespace {

using flags_test::error_of;
using flags_test::parse;

// PREFIX.bin and PREFIX.idx as IndexedDatasetBuilder writes them, removed at the end.
class Files {
 public:
  Files() {
    char name[] = "/tmp/paralab_idx_XXXXXX";
    close(mkstemp(name));
    std::remove(name);
    prefix_ = name;
  }
  ~Files() {
    std::remove((prefix_ + ".bin").c_str());
    std::remove((prefix_ + ".idx").c_str());
  }
  // sequences of uint16 tokens, in documents of `per_document` sequences
  void write(const std::vector<std::vector<uint16_t>>& sequences, int per_document = 1,
             int dtype = 8) {
    std::ofstream bin(prefix_ + ".bin", std::ios::binary);
    std::vector<int32_t> lengths;
    std::vector<int64_t> pointers, documents{0};
    int64_t at = 0;
    for (size_t i = 0; i < sequences.size(); ++i) {
      lengths.push_back(static_cast<int32_t>(sequences[i].size()));
      pointers.push_back(at);
      for (uint16_t t : sequences[i]) {
        if (dtype == 8) bin.write(reinterpret_cast<const char*>(&t), 2);
        else bin.put(static_cast<char>(t));  // dtype 1: uint8
      }
      at += static_cast<int64_t>(sequences[i].size()) * (dtype == 8 ? 2 : 1);
      if ((i + 1) % per_document == 0 || i + 1 == sequences.size())
        documents.push_back(static_cast<int64_t>(i + 1));
    }
    idx_.assign(kIndexedDatasetMagic, kIndexedDatasetMagic + 9);
    put<uint64_t>(1);
    idx_.push_back(static_cast<char>(dtype));
    put<uint64_t>(sequences.size());
    put<uint64_t>(documents.size());
    for (int32_t n : lengths) put(n);
    for (int64_t p : pointers) put(p);
    for (int64_t d : documents) put(d);
    flush();
  }
  void flush() { std::ofstream(prefix_ + ".idx", std::ios::binary).write(idx_.data(), idx_.size()); }
  std::string& idx() { return idx_; }
  const std::string& prefix() const { return prefix_; }
  std::string error(int vocab = 1000) const {
    try {
      IndexedDataset d(prefix_, vocab, "--data-path");
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  }

 private:
  template <class T>
  void put(T v) {
    idx_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  std::string prefix_, idx_;
};

TEST(IndexedDataset, ReadsWhatIndexedDatasetBuilderWrites) {
  Files f;
  f.write({{1, 2, 3}, {4}, {5, 6}}, 2);
  IndexedDataset d(f.prefix(), 7, "--data-path");
  ASSERT_EQ(d.sequences(), 3u);
  EXPECT_EQ(d.documents(), 2u);
  EXPECT_EQ(d.lengths(), (std::vector<int32_t>{3, 1, 2}));
  EXPECT_EQ(d.token(0, 2), 3);
  EXPECT_EQ(d.token(2, 1), 6);
  EXPECT_EQ(d.dtype_code(), 8);
}

TEST(IndexedDataset, RefusesEachBadFileInOneLine) {
  Files f;
  const std::string at = "--data-path " + f.prefix() + ": ";
  EXPECT_EQ(f.error(), at + f.prefix() + ".idx does not exist (an indexed dataset is "
                              "PREFIX.bin and PREFIX.idx)");
  f.write({{1, 2, 3}, {4}});
  const std::string good = f.idx();
  f.idx() = good.substr(0, 20);
  f.flush();
  EXPECT_EQ(f.error(), at + f.prefix() + ".idx is truncated: 20 bytes, the header alone is 34");
  f.idx() = good;
  f.idx()[0] = 'X';
  f.flush();
  EXPECT_EQ(f.error(), at + f.prefix() + ".idx is not a Megatron index (it does not start with "
                              "MMIDIDX\\x00\\x00)");
  f.idx() = good;
  f.idx()[9] = 2;
  f.flush();
  EXPECT_EQ(f.error(), at + f.prefix() + ".idx has version 2, Megatron's is 1");
  f.idx() = good;
  f.idx()[17] = 9;
  f.flush();
  EXPECT_EQ(f.error(), at + f.prefix() + ".idx has dtype code 9 (1 to 8 exist)");
  f.idx() = good.substr(0, good.size() - 3);
  f.flush();
  EXPECT_NE(f.error().find(".idx is truncated: 79 bytes, its header's 2 sequences and 3 "
                           "document bounds need 82"), std::string::npos) << f.error();
  f.idx() = good;  // the first sequence's pointer past the .bin's 8 bytes
  f.idx()[34 + 8] = 7;
  f.flush();
  EXPECT_EQ(f.error(), at + f.prefix() + ".bin is shorter than its index says: sequence 0 "
                              "(3 tokens at byte 7) runs past its 8 bytes");
  f.idx() = good;  // the last document bound is not the sequence count
  f.idx()[good.size() - 8] = 1;
  f.flush();
  EXPECT_EQ(f.error(), at + f.prefix() + ".idx has document bounds from 0 to 1, not from 0 to "
                              "its 2 sequences");
  f.idx() = good;
  f.flush();
  EXPECT_EQ(f.error(4), at + f.prefix() + ".bin holds token 4 at sequence 1, position 0: token "
                                 "ids must be in [0, --vocab-size 4)");
  f.write({{1, 2}}, 1, /*dtype=*/1);
  EXPECT_EQ(f.error(1000), at + f.prefix() + ".idx holds uint8 tokens (at most 255), too narrow "
                                    "for --vocab-size (1000): its tokenizer had a smaller "
                                    "vocabulary");
  EXPECT_EQ(f.error(256), "");
}

TEST(IndexedDataset, TheFlagsRefuseWhatMegatronWouldTripOn) {
  Files f;
  std::vector<std::vector<uint16_t>> sequences(3, std::vector<uint16_t>(20, 5));
  f.write(sequences);
  const std::vector<std::string> run = {"--data-path", f.prefix(), "--seq-length", "8",
                                        "--train-iters", "2"};
  EXPECT_EQ(parse(run).data.megatron.blend.prefixes, std::vector<std::string>{f.prefix()});
  EXPECT_EQ(parse(run).warnings, std::vector<std::string>{"--data-path without --split: "
                                                          "Megatron's default 969,30,1"});
  // 3 sequences: 90,5,5 leaves the validation split [3, 3)
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = run;
    a.insert(a.end(), extra.begin(), extra.end());
    return error_of(a);
  };
  EXPECT_EQ(with({"--split", "90,5,5", "--eval-interval", "1"}),
            "--data-path " + f.prefix() + ": the valid split, sequences [3, 3) of 3 by --split "
            "90,5,5: its split holds no sequences, and 120 samples are asked of it (Megatron's "
            "GPTDataset would loop forever or fail here)");
  EXPECT_EQ(with({"--split", "100,0,0", "--eval-interval", "1"}),
            "--data-path " + f.prefix() + ": --split 100,0,0 gives the valid split no share, "
            "and the run reads it");
  EXPECT_EQ(with({"--split", "1,1,1,1"}),
            "--split 1,1,1,1: it gives 4 weights, 1 to 3 (train, validation, test)");
  EXPECT_EQ(error_of({"--data-path", "0.3", f.prefix(), "B", "C"}),
            "--data-path 0.3 " + f.prefix() + " B C: 'B' is not a weight: give weights and "
            "prefixes in turn (W1 P1 W2 P2 ...) or prefixes alone");
  EXPECT_EQ(with({"--seed", "4294967296"}),
            "--data-path with --seed 4294967296: Megatron's datasets shuffle with "
            "numpy.random.RandomState, whose seeds are below 2^32");
  EXPECT_EQ(with({"--mock-data"}), "--mock-data conflicts with --data-path");
}

TEST(IndexedDataset, TheIndexCacheReadsBackTheSameSamples) {
  Files f;
  std::vector<std::vector<uint16_t>> sequences;
  for (int i = 0; i < 50; ++i) sequences.push_back(std::vector<uint16_t>(7 + i % 13, i % 100));
  f.write(sequences);
  char folder[] = "/tmp/paralab_cache_XXXXXX";
  ASSERT_NE(mkdtemp(folder), nullptr);
  const std::vector<std::string> flags = {"--data-path", f.prefix(), "--split", "90,10,0",
                                          "--seq-length", "8", "--train-iters", "40",
                                          "--micro-batch-size", "1", "--global-batch-size", "1",
                                          "--data-cache-path", folder};
  const Options o = parse(flags);
  auto samples = [&]() {
    DataLoader d(o.data, o.model, o.train, 1);
    std::vector<int> x(8), y(8), all;
    for (int step = 1; step <= 40; ++step) {
      d.microbatch(step, 0, 0, x.data(), y.data());
      all.insert(all.end(), x.begin(), x.end());
    }
    return all;
  };
  const std::vector<int> first = samples();  // built (by the check, then the loader: read back)
  const std::string listing = [&] {
    std::string s;
    FILE* p = popen(("ls " + std::string(folder)).c_str(), "r");
    char buf[256];
    while (fgets(buf, sizeof buf, p)) s += buf;
    pclose(p);
    return s;
  }();
  EXPECT_NE(listing.find("-GPTDataset-train-indices.bin"), std::string::npos) << listing;
  EXPECT_EQ(samples(), first);
  std::system(("rm -rf " + std::string(folder)).c_str());
}

TEST(NumpyRandom, RandomStateAndPcg64AsNumPy) {
  // numpy.random.RandomState(1234).shuffle(numpy.arange(20))
  std::vector<int> a(20);
  for (int i = 0; i < 20; ++i) a[i] = i;
  NumpyRandomState(1234).shuffle(a);
  EXPECT_EQ(a, (std::vector<int>{3, 13, 2, 16, 14, 5, 4, 0, 8, 18, 17, 11, 10, 9, 7, 1, 19, 12,
                                 6, 15}));
  // numpy.random.default_rng(0).integers(1, 4096, size=5, dtype=numpy.int32)
  Pcg64 rng(0);
  std::vector<int> draws;
  for (int i = 0; i < 5; ++i) draws.push_back(rng.integer(1, 4096));
  EXPECT_EQ(draws, (std::vector<int>{3484, 2609, 2094, 1105, 1261}));
  EXPECT_EQ(Pcg64(0).next64(), 11749869230777074271ULL);  // numpy.random.PCG64(0).random_raw()
}

TEST(GptDataset, SplitMatrixAndBlendAsMegatron) {
  const auto m = split_matrix("969,30,1");
  ASSERT_TRUE(m[0] && m[1] && m[2]);
  EXPECT_DOUBLE_EQ(m[1]->first, 0.969);
  EXPECT_FALSE(split_matrix("100,0,0")[1].has_value());
  // build_blending_indices: the largest w_d max(j, 1) - taken_d, the first on a tie
  const BlendedIndices b = build_blended_indices({0.25, 0.75}, 8);
  EXPECT_EQ(std::vector<int16_t>(b.dataset.begin(), b.dataset.end()),
            (std::vector<int16_t>{1, 0, 1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(samples_per_dataset({0.3, 0.7}, 240, 0.005), (std::vector<int64_t>{73, 169}));
}

}  // namespace
}  // namespace paralab
