// model/megatron_data.h: the training and validation samples of a Megatron data flag set, built
// as megatron-core's BlendedMegatronDatasetBuilder builds them
// (megatron/core/datasets/blended_megatron_dataset_builder.py):
//  - --mock-data: MockGPTDataset per split over Megatron's mock sequences, split "1,1,1";
//  - --data-path PREFIX with --split: one GPTDataset per split over the split's sequences;
//  - --data-path W1 P1 W2 P2 ... (or P1 P2 ... without weights) with --split: per split a
//    BlendedDataset over one GPTDataset per prefix, each asked for ceil(ceil(N w) 1.005)
//    samples (--mid-level-dataset-surplus 0.005) and blended to sum_d ceil(N w_d); without
//    weights, one epoch of each, blended by their sizes to min(N, their sum);
//  - --train-data-path / --valid-data-path / --test-data-path: each split its own blend, over
//    whole datasets.
// N, the samples a split is asked for, is Megatron's too: --train-iters x --global-batch-size
// (or --train-samples) for training; (--train-iters / --eval-interval + 1) x --eval-iters x
// --global-batch-size for validation. The test split is not built (paralab never reads it).
//
// With --data-cache-path the indices of each GPTDataset are saved there and read back by a
// later run with the same data, split, seed, sequence length and sample count.
//
// defines: DataBlend, MegatronDataSpec, MegatronData, parse_data_blend
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "model/gpt_dataset.h"
#include "model/indexed_dataset.h"

namespace paralab {

// A blend as Megatron's get_blend_from_list reads it: prefixes, with weights or without.
struct DataBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // empty: none given
  bool empty() const { return prefixes.empty(); }
};
// "PREFIX", "W1 P1 W2 P2 ..." or "P1 P2 ...": an even count whose every other word is a number
// is weights and prefixes, anything else prefixes. Throws std::invalid_argument for a weight
// that is <= 0 or not finite.
DataBlend parse_data_blend(const std::vector<std::string>& words);

struct MegatronDataSpec {
  DataBlend blend;                 // --data-path
  DataBlend train, valid, test;    // --train-data-path, --valid-data-path, --test-data-path
  std::string split = "969,30,1";  // --split (Megatron's default with --data-path)
  bool mock = false;               // --mock-data
  std::string cache_path;          // --data-cache-path; empty: no cache
  double surplus = 0.005;          // --mid-level-dataset-surplus
  int tokenizer_vocab = 0, eod = 0;  // the mock data's tokens (the tokenizer's vocabulary, EOD)
  bool per_split() const { return !train.empty() || !valid.empty() || !test.empty(); }
  bool any() const { return mock || !blend.empty() || per_split(); }
};

class MegatronData {
 public:
  // train_samples / valid_samples: what each split is asked for (valid 0: not built). Throws
  // DataError naming the flag and the rule.
  MegatronData(const MegatronDataSpec& spec, int vocab_size, int seq_length, uint64_t seed,
               int64_t train_samples, int64_t valid_samples);
  // Sample n of the split, its s + 1 tokens into out.
  void train_sample(int64_t n, int32_t* out) const { train_.sample(n, seq_length_, out); }
  void valid_sample(int64_t n, int32_t* out) const { valid_.sample(n, seq_length_, out); }
  int64_t train_samples() const { return train_.size; }
  int64_t valid_samples() const { return valid_.size; }
  // The indexed datasets read, in the order first named (for the manifest and the header).
  std::vector<const IndexedDataset*> datasets() const;
  std::string describe() const;

 private:
  struct Split {
    std::vector<GptDataset> parts;     // one per dataset of the blend
    std::optional<BlendedIndices> blend;
    int64_t size = 0;
    void sample(int64_t n, int seq_length, int32_t* out) const;
  };
  const LowLevelDataset& low_level(const std::string& prefix, const std::string& flag);
  Split build_split(int split, const DataBlend& blend, bool whole, int64_t samples,
                    const std::string& flag);
  GptDataset gpt(const std::string& prefix, int split, bool whole, std::optional<int64_t> samples,
                 const std::string& flag);

  MegatronDataSpec spec_;
  int vocab_size_, seq_length_;
  uint32_t seed_;
  std::vector<std::pair<std::string, std::unique_ptr<IndexedDataset>>> indexed_;
  std::unique_ptr<MockDataset> mock_;
  Split train_, valid_;
};

}  // namespace paralab
