// model/data.h: where the tokens come from, and which ones a rank trains on at each step.
//
// The one idea: the data position is the step number. Sample n of the whole run (n counts
// rows of global batches: step 1 holds samples 0 .. G-1) starts at a token offset that is a
// counter hash of (seed, n), so the microbatch any rank needs at any step is a pure function
// of (seed, step, microbatch, dp rank) — no cursor to save, and a run resumed at step t
// reads exactly what the uninterrupted run read. Data parallelism only changes which rows
// a rank asks for:
//
//   sample(step, micro, dp_rank, row) = (step-1) G + dp_rank (G/dp) + micro B + row
//
// so dp rank r's microbatch m is the single-rank run's microbatch r (G/dp)/B + m.
//
// Three sources:
//  - synthetic (no --data-path): a corpus generated in process from the seed, with enough
//    structure for a small model's loss to fall far below ln(V) (see synthetic_corpus);
//  - an llm.c token file: 256 int32 header (magic 20240520, version 1, token count), then
//    the tokens as uint16;
//  - plain text: every byte is a token (vocab 256).
// Files are memory-mapped read-only, so the ranks of one node share one copy.
//
// defines: InputError, DataError, DataSource, DataLoader, check_data_file, synthetic_corpus
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>
#include "model/config.h"

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

enum class DataSource { SYNTHETIC, LLMC, TEXT };
const char* data_source_name(DataSource s);

// The llm.c token-file header: 256 int32, of which the first three are used.
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

// Opens and checks a --data-path file (format, header, length >= seq_length + 1 tokens,
// every token id < vocab_size) and releases it. Throws DataError naming the file and the
// problem. flags_check.cpp calls it so that a bad file stops the run with the other flag
// errors.
void check_data_file(const std::string& path, int vocab_size, int seq_length);

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
  // data_path empty: the synthetic corpus. global batch and dp must already be consistent
  // (flags_check.cpp checks G % (B dp) == 0). Throws DataError on a bad file.
  DataLoader(const std::string& data_path, const ModelConfig& model, const TrainConfig& train,
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
  // Where sample n starts in the token stream: hash(seed, n) mod (num_tokens - S).
  size_t sample_offset(uint64_t sample) const;

  DataSource source() const { return source_; }
  size_t num_tokens() const { return num_tokens_; }
  int32_t token(size_t i) const;
  // One line for the run header, e.g. "llm.c tokens data/tiny.bin (338.0k tokens)".
  std::string describe() const;

 private:
  DataSource source_ = DataSource::SYNTHETIC;
  std::string path_;
  int seq_length_, micro_batch_, global_batch_, data_parallel_;
  uint64_t seed_;
  size_t num_tokens_ = 0;
  std::vector<int32_t> synthetic_;   // SYNTHETIC
  const uint8_t* map_ = nullptr;     // LLMC, TEXT: the whole file, mapped read-only
  size_t map_bytes_ = 0;
};

}  // namespace paralab
