// model/gpt_dataset.h: the samples megatron-core's GPTDataset and BlendedDataset draw, index for
// index, so that a paralab run and a Megatron run with the same data, split and seed read the
// same tokens in the same order (tests/scripts/megatron_data.sh holds them to megatron-core).
//
// GPTDataset (megatron/core/datasets/gpt_dataset.py) over the sequences [begin, end) of one
// low-level dataset (a split of an indexed dataset, or the mock one), asked for N samples of
// s + 1 tokens (inputs and the one-later labels):
//   tokens per epoch T = the sum of the split's sequence lengths;
//   epochs E = the fewest with E T >= N s + 1                              (_get_num_epochs)
//   document index: the split's sequence ids repeated E times, shuffled by
//     RandomState(seed); when E > 1 and the last epoch supplies fewer than 80% of an epoch's
//     samples, the first E - 1 epochs and the last are shuffled apart  (_build_document_index)
//   sample index: N' + 1 bounds (position in the document index, token offset), N' =
//     (E T - 1) / s; sample i spans its bound to the next one plus one token, across
//     sequences                                             (helpers.cpp build_sample_idx)
//   shuffle index: 0 .. N' - 1 shuffled by the same RandomState, the final epoch's samples
//     apart when the document index's were                              (_build_shuffle_index)
//   sample k = the tokens of sample shuffle[k].
// BlendedDataset (blended_dataset.py, helpers.cpp build_blending_indices) of datasets with
// normalised weights w: draw j takes the dataset with the largest w_d max(j, 1) - taken_d (the
// first on a tie) and that dataset's next sample.
// The split matrix (blended_megatron_dataset_config.py): "969,30,1" normalised; split i takes
// the sequences [round(b_i N), round(b_{i+1} N)) of N (Python's round: half to even).
//
// defines: LowLevelDataset, MockDataset, GptDataset, BlendedIndices, numpy_sum, normalize,
//          split_matrix, samples_per_dataset, build_gpt_dataset, build_blended_indices
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace paralab {

// What GPTDataset samples from: sequences of tokens.
class LowLevelDataset {
 public:
  virtual ~LowLevelDataset() = default;
  virtual size_t sequences() const = 0;
  virtual const std::vector<int32_t>& lengths() const = 0;
  virtual int32_t token(size_t sequence, size_t offset) const = 0;
};

// Megatron's MockGPTLowLevelDataset: 100000 sequences, lengths default_rng(0).integers(1, 4096),
// sequence i = 1, 2, ..., length - 1 (mod the tokenizer's vocabulary), then the end-of-document
// token.
class MockDataset : public LowLevelDataset {
 public:
  MockDataset(int tokenizer_vocab, int eod);
  size_t sequences() const override { return lengths_.size(); }
  const std::vector<int32_t>& lengths() const override { return lengths_; }
  int32_t token(size_t sequence, size_t offset) const override;

 private:
  std::vector<int32_t> lengths_;
  int vocab_, eod_;
};

struct GptDataset {
  const LowLevelDataset* data = nullptr;
  std::vector<int32_t> document_index;
  std::vector<int64_t> sample_index;   // (position, offset) pairs, samples + 1 of them
  std::vector<int64_t> shuffle_index;  // one per sample
  int epochs = 0;
  size_t samples() const { return shuffle_index.size(); }
  // Sample k's s + 1 tokens into out.
  void sample(size_t k, int seq_length, int32_t* out) const;
};

// GPTDataset over sequences [begin, end) of data, with num_samples requested (nullopt: one
// epoch). Throws std::invalid_argument naming the rule (an empty split, a sequence too short).
GptDataset build_gpt_dataset(const LowLevelDataset& data, size_t begin, size_t end,
                             std::optional<int64_t> num_samples, int seq_length, uint32_t seed);

struct BlendedIndices {
  std::vector<int16_t> dataset;   // which dataset draw j takes
  std::vector<int64_t> sample;    // and which of its samples
};
BlendedIndices build_blended_indices(const std::vector<double>& weights, int64_t size);

// numpy.sum of float64 (pairwise, 8 accumulators) and utils.normalize (w / numpy.sum(w)).
double numpy_sum(const double* a, size_t n);
std::vector<double> normalize(const std::vector<double>& w);
// parse_and_normalize_split + convert_split_vector_to_split_matrix: each split's (begin, end)
// fractions, or nullopt for an empty one. Throws std::invalid_argument on a bad string.
std::vector<std::optional<std::pair<double, double>>> split_matrix(const std::string& split);
// _get_size_per_split_per_dataset: ceil(ceil(target w) (1 + surplus)) per dataset.
std::vector<int64_t> samples_per_dataset(const std::vector<double>& weights, int64_t target,
                                         double surplus);

}  // namespace paralab
