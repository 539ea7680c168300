// model/data.cpp: token sources and the step -> samples map (the design is in model/data.h).
#include "model/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
// defines: mix64 (the counter hash that places samples and draws the synthetic corpus)
#include "kernels/math.h"

namespace paralab {

namespace {

// Hash streams, so that the corpus and the sample order never reuse each other's draws.
enum : uint64_t { kCycleStream = 1, kDegreeStream, kSuccessorStream, kFavourStream,
                  kChoiceStream, kStartStream, kOffsetStream, kValidOffsetStream };

uint64_t draw(uint64_t seed, uint64_t stream, uint64_t index) {
  return kernels::mix64(seed ^ kernels::mix64(stream ^ kernels::mix64(index)));
}

std::string fail_prefix(const std::string& path) { return "--data-path " + path + ": "; }

// A file mapped read-only; an empty file maps to nothing (mmap rejects length 0).
struct MappedFile {
  const uint8_t* data = nullptr;
  size_t bytes = 0;

  explicit MappedFile(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
      throw DataError(fail_prefix(path) + "no such file");
    if (!S_ISREG(st.st_mode)) throw DataError(fail_prefix(path) + "not a regular file");
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) throw DataError(fail_prefix(path) + "cannot open (" + strerror(errno) + ")");
    bytes = static_cast<size_t>(st.st_size);
    if (bytes > 0) {
      void* p = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
      int err = errno;
      close(fd);
      if (p == MAP_FAILED) throw DataError(fail_prefix(path) + "cannot map (" + strerror(err) + ")");
      data = static_cast<const uint8_t*>(p);
    } else {
      close(fd);
    }
  }
  ~MappedFile() {
    if (data) munmap(const_cast<uint8_t*>(data), bytes);
  }
  // Hands the mapping to the caller, who munmaps it.
  const uint8_t* release() {
    const uint8_t* p = data;
    data = nullptr;
    return p;
  }
};

struct FileLayout {
  DataSource source;
  size_t token_offset;  // bytes before the first token
  size_t num_tokens;
};

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Decides llm.c tokens vs plain text and checks everything a run would trip on later.
// A file is taken for an llm.c file when it is named *.bin, starts with the magic, or has a
// NUL byte in its first 1024 bytes (text never does); anything else is text.
FileLayout inspect(const std::string& path, const uint8_t* data, size_t bytes, int vocab_size,
                   int seq_length) {
  const std::string at = fail_prefix(path);
  const size_t head = std::min(bytes, kLlmcHeaderBytes);
  bool named_bin = path.size() >= 4 && path.compare(path.size() - 4, 4, ".bin") == 0;
  bool has_magic = bytes >= 4 && read_i32(data) == kLlmcMagic;
  bool has_nul = head > 0 && std::memchr(data, 0, head) != nullptr;
  const size_t need = static_cast<size_t>(seq_length) + 1;

  if (named_bin || has_magic || has_nul) {
    if (bytes < kLlmcHeaderBytes)
      throw DataError(at + "file of " + std::to_string(bytes) +
                      " bytes is shorter than the 1024-byte llm.c header");
    int32_t magic = read_i32(data), version = read_i32(data + 4), count = read_i32(data + 8);
    if (magic != kLlmcMagic)
      throw DataError(at + "bad magic " + std::to_string(magic) + " (llm.c token files start with " +
                      std::to_string(kLlmcMagic) + "; plain text must not contain NUL bytes)");
    if (version != kLlmcVersion)
      throw DataError(at + "llm.c version " + std::to_string(version) +
                      " is not supported (only version 1: uint16 tokens)");
    size_t payload = bytes - kLlmcHeaderBytes;
    if (count < 0 || payload != 2 * static_cast<size_t>(count))
      throw DataError(at + "header says " + std::to_string(count) + " tokens (" +
                      std::to_string(2 * static_cast<long long>(count)) +
                      " bytes) but the file holds " + std::to_string(payload) +
                      " bytes after the header");
    if (static_cast<size_t>(count) < need)
      throw DataError(at + "holds " + std::to_string(count) +
                      " tokens, fewer than --seq-length + 1 (" + std::to_string(need) + ")");
    for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
      uint16_t t;
      std::memcpy(&t, data + kLlmcHeaderBytes + 2 * i, 2);
      if (t >= vocab_size)
        throw DataError(at + "token id " + std::to_string(t) + " at token " + std::to_string(i) +
                        " is >= --vocab-size (" + std::to_string(vocab_size) + ")");
    }
    return {DataSource::LLMC, kLlmcHeaderBytes, static_cast<size_t>(count)};
  }

  if (vocab_size < 256)
    throw DataError(at + "plain text is read as bytes (token ids 0..255) and needs "
                    "--vocab-size >= 256, got " + std::to_string(vocab_size));
  if (bytes < need)
    throw DataError(at + "plain text of " + std::to_string(bytes) +
                    " bytes is shorter than --seq-length + 1 (" + std::to_string(need) + ")");
  return {DataSource::TEXT, 0, bytes};
}

std::string human_count(size_t n) {
  char buf[32];
  if (n >= 1000000) std::snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
  else if (n >= 1000) std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%zu", n);
  return buf;
}

}  // namespace

const char* data_source_name(DataSource s) {
  switch (s) {
    case DataSource::SYNTHETIC: return "synthetic";
    case DataSource::LLMC: return "llm.c tokens";
    case DataSource::TEXT: return "text bytes";
    case DataSource::MEGATRON: return "Megatron indexed data";
  }
  return "?";
}

void check_data_file(const std::string& path, int vocab_size, int seq_length) {
  MappedFile f(path);
  inspect(path, f.data, f.bytes, vocab_size, seq_length);
}

size_t validation_tokens(size_t n, int seq_length) {
  const size_t window = static_cast<size_t>(seq_length) + 1;
  const size_t tail = std::max(static_cast<size_t>(std::ceil(n * kValidFraction)), window);
  return n >= tail + window ? tail : 0;  // training keeps at least one window
}

DataRegions data_regions(size_t n, int seq_length, double split_train, double split_valid) {
  DataRegions r;
  if (split_train <= 0) {
    r.valid = validation_tokens(n, seq_length);
    r.train = n - r.valid;
    return r;
  }
  const size_t window = static_cast<size_t>(seq_length) + 1;
  r.train = std::min(n, static_cast<size_t>(std::llround(split_train * n)));
  const size_t end = std::min(n, static_cast<size_t>(std::llround((split_train + split_valid) * n)));
  r.valid = end > r.train && end - r.train >= window ? end - r.train : 0;
  return r;
}

void check_validation_split(const std::string& path, int vocab_size, int seq_length,
                            double split_train, double split_valid, bool evaluating) {
  MappedFile f(path);
  const size_t n = inspect(path, f.data, f.bytes, vocab_size, seq_length).num_tokens;
  const size_t window = static_cast<size_t>(seq_length) + 1;
  const DataRegions r = data_regions(n, seq_length, split_train, split_valid);
  if (split_train > 0 && r.train < window)
    throw DataError(fail_prefix(path) + "holds " + std::to_string(n) + " tokens: --split's "
                    "training share is " + std::to_string(r.train) + ", shorter than "
                    "--seq-length + 1 (" + std::to_string(window) + ")");
  if (evaluating && r.valid == 0)
    throw DataError(fail_prefix(path) + "holds " + std::to_string(n) +
                    " tokens, too few for --eval-interval's validation split (training and "
                    "validation need --seq-length + 1 each: " + std::to_string(2 * window) + ")" +
                    (split_train > 0 ? " at --split's shares" : ""));
}

std::vector<int32_t> synthetic_corpus(uint64_t seed, int vocab_size, size_t n_tokens) {
  const uint64_t V = static_cast<uint64_t>(vocab_size);
  // A random cyclic order of the vocabulary (Fisher-Yates); successor 0 of cycle[i] is
  // cycle[i+1], which makes the chain irreducible: no token is left out of the corpus.
  std::vector<int32_t> cycle(V);
  for (uint64_t i = 0; i < V; ++i) cycle[i] = static_cast<int32_t>(i);
  for (uint64_t i = V - 1; i > 0; --i)
    std::swap(cycle[i], cycle[draw(seed, kCycleStream, i) % (i + 1)]);

  std::vector<int32_t> successors(4 * V);  // (V, 4): row b lists b's successors
  std::vector<uint8_t> degree(V);           // n_b, how many of the row are used
  for (uint64_t i = 0; i < V; ++i) {
    uint64_t b = static_cast<uint64_t>(cycle[i]);
    degree[b] = static_cast<uint8_t>(2 + draw(seed, kDegreeStream, b) % 3);
    successors[4 * b] = cycle[(i + 1) % V];
    for (uint64_t j = 1; j < 4; ++j)
      successors[4 * b + j] = static_cast<int32_t>(draw(seed, kSuccessorStream, 4 * b + j) % V);
  }

  std::vector<int32_t> out(n_tokens);
  if (n_tokens == 0) return out;
  out[0] = static_cast<int32_t>(draw(seed, kStartStream, 0) % V);
  if (n_tokens > 1) out[1] = successors[4 * static_cast<uint64_t>(out[0])];
  for (size_t t = 2; t < n_tokens; ++t) {
    uint64_t a = static_cast<uint64_t>(out[t - 2]), b = static_cast<uint64_t>(out[t - 1]);
    uint64_t n = degree[b];
    uint64_t r = draw(seed, kChoiceStream, t);
    // Low bit: favoured (prob 1/2) or a uniform pick; the rest of r makes the pick.
    uint64_t j = (r & 1) ? draw(seed, kFavourStream, a) % n : (r >> 1) % n;
    out[t] = successors[4 * b + j];
  }
  return out;
}

DataLoader::DataLoader(const DataSpec& data, const ModelConfig& model, const TrainConfig& train,
                       int data_parallel)
    : path_(data.path),
      seq_length_(model.seq_length),
      micro_batch_(train.micro_batch_size),
      global_batch_(train.global_batch_size > 0 ? train.global_batch_size
                                                : train.micro_batch_size * data_parallel),
      data_parallel_(data_parallel),
      seed_(train.seed) {
  const std::string& data_path = data.path;
  if (data.megatron.any()) {
    megatron_.reset(new MegatronData(data.megatron, model.vocab_size, seq_length_, seed_,
                                     data.train_samples, data.valid_samples));
    source_ = DataSource::MEGATRON;
    return;
  }
  if (data_path.empty()) {
    // 1M tokens is ~4000 distinct 256-token windows per token of context: plenty for the
    // demo; longer sequences get at least 16 non-overlapping windows.
    size_t n = std::max<size_t>(size_t(1) << 20, 16 * (static_cast<size_t>(seq_length_) + 1));
    // the validation region continues the same chain past the training corpus (its first n
    // tokens are synthetic_corpus(seed, V, n) exactly), T/8: >= 2 windows as T >= 16 windows
    // (with --split: in proportion to the training tokens, at least one window)
    size_t valid = n / 8;
    if (train.split_train > 0)
      valid = train.split_valid > 0
                  ? std::max(static_cast<size_t>(std::llround(n * train.split_valid / train.split_train)),
                             static_cast<size_t>(seq_length_) + 1)
                  : 0;
    synthetic_ = synthetic_corpus(seed_, model.vocab_size, n + valid);
    source_ = DataSource::SYNTHETIC;
    train_tokens_ = n;
    num_tokens_ = n + valid;
    return;
  }
  MappedFile f(data_path);
  FileLayout layout = inspect(data_path, f.data, f.bytes, model.vocab_size, seq_length_);
  source_ = layout.source;
  const DataRegions regions =
      data_regions(layout.num_tokens, seq_length_, train.split_train, train.split_valid);
  train_tokens_ = regions.train;
  num_tokens_ = regions.train + regions.valid;  // --split's test share is not read
  map_bytes_ = f.bytes;
  map_ = f.release();
  // Tokens start at a 1024-byte offset of a page-aligned mapping: uint16 reads are aligned.
}

DataLoader::~DataLoader() {
  if (map_) munmap(const_cast<uint8_t*>(map_), map_bytes_);
}

int32_t DataLoader::token(size_t i) const {
  switch (source_) {
    case DataSource::SYNTHETIC: return synthetic_[i];
    case DataSource::LLMC:
      return reinterpret_cast<const uint16_t*>(map_ + kLlmcHeaderBytes)[i];
    case DataSource::TEXT: return map_[i];
    case DataSource::MEGATRON: break;  // sampled by MegatronData, not by offset
  }
  return 0;
}

uint64_t DataLoader::sample_index(int step, int micro, int dp_rank, int row) const {
  const uint64_t G = static_cast<uint64_t>(global_batch_);
  const uint64_t B = static_cast<uint64_t>(micro_batch_);
  return static_cast<uint64_t>(step - 1) * G +
         static_cast<uint64_t>(micro) * B * static_cast<uint64_t>(data_parallel_) +
         static_cast<uint64_t>(dp_rank) * B + static_cast<uint64_t>(row);
}

size_t DataLoader::sample_offset(uint64_t sample) const {
  // A window is S+1 tokens (inputs and the one-later targets): starts 0 .. n-S-1.
  const uint64_t starts = train_tokens_ - static_cast<uint64_t>(seq_length_);
  return static_cast<size_t>(draw(seed_, kOffsetStream, sample) % starts);
}

size_t DataLoader::valid_sample_offset(uint64_t sample) const {
  if (valid_tokens() == 0) throw std::logic_error("DataLoader: no validation split");
  const uint64_t starts = valid_tokens() - static_cast<uint64_t>(seq_length_);
  return train_tokens_ + static_cast<size_t>(draw(seed_, kValidOffsetStream, sample) % starts);
}

namespace {
void copy_window(const DataLoader& d, size_t start, size_t S, int* x, int* y) {
  for (size_t s = 0; s < S; ++s) {
    x[s] = d.token(start + s);
    y[s] = d.token(start + s + 1);
  }
}
// A Megatron sample's S + 1 tokens: the inputs and the one-later labels.
void copy_sample(const std::vector<int32_t>& sample, size_t S, int* x, int* y) {
  for (size_t s = 0; s < S; ++s) {
    x[s] = sample[s];
    y[s] = sample[s + 1];
  }
}
}  // namespace

void DataLoader::microbatch(int step, int micro, int dp_rank, int* tokens, int* targets) const {
  const size_t S = static_cast<size_t>(seq_length_);
  std::vector<int32_t> sample(megatron_ ? S + 1 : 0);
  for (int row = 0; row < micro_batch_; ++row) {
    const uint64_t n = sample_index(step, micro, dp_rank, row);
    if (megatron_) {
      megatron_->train_sample(static_cast<int64_t>(n), sample.data());
      copy_sample(sample, S, tokens + row * S, targets + row * S);
    } else {
      copy_window(*this, sample_offset(n), S, tokens + row * S, targets + row * S);
    }
  }
}

void DataLoader::valid_microbatch(int batch, int micro, int dp_rank, int* tokens,
                                  int* targets) const {
  const size_t S = static_cast<size_t>(seq_length_);
  std::vector<int32_t> sample(megatron_ ? S + 1 : 0);
  for (int row = 0; row < micro_batch_; ++row) {  // batch j's samples: "step" j + 1's indices
    const uint64_t n = sample_index(batch + 1, micro, dp_rank, row);
    if (megatron_) {
      megatron_->valid_sample(static_cast<int64_t>(n), sample.data());
      copy_sample(sample, S, tokens + row * S, targets + row * S);
    } else {
      copy_window(*this, valid_sample_offset(n), S, tokens + row * S, targets + row * S);
    }
  }
}

std::string DataLoader::describe() const {
  if (megatron_) return megatron_->describe();
  std::string what = source_ == DataSource::SYNTHETIC
                         ? std::string("synthetic order-2 Markov corpus")
                         : std::string(data_source_name(source_)) + " " + path_;
  if (valid_tokens() == 0)
    return what + " (" + human_count(num_tokens_) + " tokens; too short for a validation split)";
  if (source_ == DataSource::SYNTHETIC)
    return what + " (" + human_count(train_tokens_) + " tokens; validation: the next " +
           human_count(valid_tokens()) + ")";
  return what + " (" + human_count(num_tokens_) + " tokens: training " +
         human_count(train_tokens_) + ", validation the last " + human_count(valid_tokens()) +
         ")";
}

}  // namespace paralab
