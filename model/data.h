// model/data.h: where the tokens come from, and which ones a rank trains on at each step.
//
// The one idea: the data position is the step number. Sample n of the whole run (n counts
// rows of global batches: step 1 holds samples 0 .. G-1) is a pure function of (seed, n) —
// a token offset that is a counter hash of them, or Megatron's sample n — so the microbatch
// any rank needs at any step is a pure function of (seed, step, microbatch, dp rank): no
// cursor to save, and a run resumed at step t reads exactly what the uninterrupted run read.
// Data parallelism only changes which rows a rank asks for, as Megatron's
// MegatronPretrainingSampler hands them out (each microbatch step takes the next B dp
// samples, dp rank r the r-th B of them):
//
//   sample(step, micro, dp_rank, row) = (step-1) G + micro (B dp) + dp_rank B + row
//
// so dp rank r's microbatch m is the single-rank run's microbatch m dp + r.
//
// Validation (--eval-interval) reads a held-out region that training never touches: the
// token stream is [0, T) for training and [T, T + V_n) for validation, and every window
// (S + 1 tokens: inputs and the one-later targets) lies inside its own region, so no
// token of a validation window is ever trained on. Validation batch j (0-based, < --eval-
// iters) holds the samples j G .. j G + G - 1, sliced over dp like a training step, each
// starting at T + hash(seed, n) mod (V_n - S) on its own hash stream: every evaluation
// reads the same K batches (a fixed validation set, so the curve compares like with like).
//  - synthetic: the chain is generated V_n = T/8 tokens further than the training corpus
//    (T is unchanged, so enabling evaluation never changes what training reads); with
//    --split, V_n = T w_valid / w_train (at least S + 1 when w_valid > 0);
//  - a --data-path file of n tokens: the last V_n = max(ceil(n x kValidFraction), S + 1)
//    tokens (Megatron's --split idea), whether or not evaluation runs; a file too short
//    to leave S + 1 tokens on each side is not split (T = n, and --eval-interval refuses
//    it: check_validation_split); with --split (Megatron's train,valid,test weights) the
//    shares in that order (data_regions).
//
// Four sources:
//  - Megatron's indexed datasets (--data-path PREFIX, blends, --train-data-path, ...) and
//    its mock data (--mock-data): sample n of a split is megatron-core's GPTDataset /
//    BlendedDataset sample n (model/megatron_data.h); validation reads the valid split's
//    samples j G .. j G + G - 1 for batch j, the same every evaluation;
//  - synthetic (no --data-path): a corpus generated in process from the seed, with enough
//    structure for a small model's loss to fall far below ln(V) (see synthetic_corpus);
//  - an llm.c token file: 256 int32 header (magic 20240520, version 1, token count), then
//    the tokens as uint16;
//  - plain text: every byte is a token (vocab 256).
// Files are memory-mapped read-only, so the ranks of one node share one copy.
//
// defines: InputError, DataError, DataSource, DataSpec, DataLoader, check_data_file,
//          synthetic_corpus, kValidFraction, validation_tokens, DataRegions, data_regions,
//          check_validation_split
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#include "model/config.h"
#include "model/megatron_data.h"

namespace paralab {

// Bad input the user can fix (a flag, a config file, a data file). The trainer prints its
// one-line message and exits with status 2, before allocating anything.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A --data-path file that cannot be trained on; the message names the file.
struct DataError : InputError {
  using InputError::InputError;
};

enum class DataSource { SYNTHETIC, LLMC, TEXT, MEGATRON };

// Where the tokens come from: one llm.c or text file (path), Megatron's indexed datasets or
// mock data (megatron.any()), or neither (the synthetic corpus).
struct DataSpec {
  std::string path;
  MegatronDataSpec megatron;
  // What Megatron's splits are asked for: --train-iters x G (or --train-samples), and
  // (--train-iters / --eval-interval + 1) x --eval-iters x G (0: no evaluation).
  int64_t train_samples = 0, valid_samples = 0;
};
const char* data_source_name(DataSource s);

// The llm.c token-file header: 256 int32, of which the first three are used.
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

// Opens and checks a --data-path file (format, header, length >= seq_length + 1 tokens,
// every token id < vocab_size) and releases it. Throws DataError naming the file and the
// problem. cli/flags_check.cpp calls it so that a bad file stops the run with the other flag
// errors.
void check_data_file(const std::string& path, int vocab_size, int seq_length);

// The fraction of a --data-path file held out for validation (its tail).
constexpr double kValidFraction = 0.1;
// Tokens of a file of n tokens held out for validation: max(ceil(n kValidFraction), S + 1),
// or 0 when the rest would be shorter than one window (n < 2 (S + 1)).
size_t validation_tokens(size_t n, int seq_length);
// Where a file of n tokens trains and validates: [0, train) and [train, train + valid).
// Without --split (split_train 0) the last validation_tokens(n, S) validate; with it (Megatron's
// weights, normalised: train, valid, test) train = round(w_train n), valid = round((w_train +
// w_valid) n) - train and the test share, the rest, is not read; a validation part shorter
// than a window (S + 1 tokens) is none (valid 0).
struct DataRegions {
  size_t train = 0, valid = 0;
};
DataRegions data_regions(size_t n, int seq_length, double split_train = 0, double split_valid = 0);
// --eval-interval or --split with --data-path: throws DataError when the file is too short to
// split (validating: a window on each side; --split: a window to train on).
void check_validation_split(const std::string& path, int vocab_size, int seq_length,
                            double split_train = 0, double split_valid = 0,
                            bool evaluating = true);

// The synthetic corpus: n tokens of a sparse order-2 Markov chain over [0, V).
//  - every token b has n_b in {2, 3, 4} successors; successor 0 follows a random cyclic
//    order of the whole vocabulary (so the chain visits every token), the others are random;
//  - the token a before b picks one favoured successor, f(a) mod n_b; the next token is the
//    favoured one with probability 1/2, else uniform over the n_b successors.
// A bigram model can reach about ln 3 = 1.1 nats, one that also attends to the token two
// back about 0.9 nats; a unigram model stays near ln V (5.5 for V = 256).
std::vector<int32_t> synthetic_corpus(uint64_t seed, int vocab_size, size_t n_tokens);

class DataLoader {
 public:
  // data: where the tokens come from (the synthetic corpus when it names nothing). global
  // batch and dp must already be consistent (cli/ checks G % (B dp) == 0). Throws DataError
  // on a bad file.
  DataLoader(const DataSpec& data, const ModelConfig& model, const TrainConfig& train,
             int data_parallel);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Microbatch `micro` (0-based, < grad_accum_steps()) of step `step` (1-based) for dp rank
  // `dp_rank`: writes B*S input tokens and B*S targets (row b, position s at b*S + s;
  // targets[i] is the token after tokens[i]).
  void microbatch(int step, int micro, int dp_rank, int* tokens, int* targets) const;

  // Global batch / (B * dp): microbatches each rank runs per step.
  int grad_accum_steps() const { return global_batch_ / (micro_batch_ * data_parallel_); }
  // The index of the sample in row `row` of that microbatch (formula at the top).
  uint64_t sample_index(int step, int micro, int dp_rank, int row) const;
  // Where sample n starts in the token stream: hash(seed, n) mod (train_tokens - S)
  // (not for Megatron's data, whose samples are its own).
  size_t sample_offset(uint64_t sample) const;

  // Validation batch `batch` (0-based, < --eval-iters), microbatch `micro`, dp rank
  // `dp_rank`: the held-out region's samples, laid out like microbatch() (top of file).
  void valid_microbatch(int batch, int micro, int dp_rank, int* tokens, int* targets) const;
  // Where validation sample n starts: valid_begin + hash'(seed, n) mod (valid_tokens - S).
  size_t valid_sample_offset(uint64_t sample) const;

  DataSource source() const { return source_; }
  size_t num_tokens() const { return num_tokens_; }      // both regions
  size_t train_tokens() const { return train_tokens_; }  // [0, train_tokens)
  size_t valid_begin() const { return train_tokens_; }   // [valid_begin, num_tokens)
  size_t valid_tokens() const { return num_tokens_ - train_tokens_; }  // 0: no split
  const MegatronData* megatron() const { return megatron_.get(); }  // null unless MEGATRON
  int32_t token(size_t i) const;
  // One line for the run header, e.g. "llm.c tokens data/tiny.bin (338.0k tokens)".
  std::string describe() const;

 private:
  DataSource source_ = DataSource::SYNTHETIC;
  std::string path_;
  int seq_length_, micro_batch_, global_batch_, data_parallel_;
  uint64_t seed_;
  size_t num_tokens_ = 0, train_tokens_ = 0;
  std::vector<int32_t> synthetic_;   // SYNTHETIC
  const uint8_t* map_ = nullptr;     // LLMC, TEXT: the whole file, mapped read-only
  size_t map_bytes_ = 0;
  std::unique_ptr<MegatronData> megatron_;  // MEGATRON
};

}  // namespace paralab
