// model/megatron_data.cpp: BlendedMegatronDatasetBuilder's cases (the header lists them), the
// checks that turn Megatron's assertions and endless loops into one line, and the index cache.
#include "model/megatron_data.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "model/data.h"  // DataError

namespace paralab {

namespace {

const char* kSplitNames[3] = {"train", "valid", "test"};

// Python's round() of a float to an int: half to even (the default rounding mode's nearbyint).
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

std::string join(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

// ---- the index cache (--data-cache-path) ----
// One file per GPTDataset: a first line naming the format, the description (everything the
// indices depend on), then the three arrays with their lengths. Written to a temporary name
// and renamed, so ranks that build at once never see a partial file.
constexpr char kCacheMagic[] = "paralab GPTDataset indices 1";

std::string cache_file(const std::string& folder, const std::string& description, int split) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64 of the description
  for (unsigned char c : description) h = (h ^ c) * 1099511628211ULL;
  char name[64];
  std::snprintf(name, sizeof name, "/%016llx-GPTDataset-%s-indices.bin",
                static_cast<unsigned long long>(h), kSplitNames[split]);
  return folder + name;
}

template <class T>
void write_array(std::ofstream& out, const std::vector<T>& a) {
  const uint64_t n = a.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(reinterpret_cast<const char*>(a.data()), static_cast<std::streamsize>(n * sizeof(T)));
}
template <class T>
bool read_array(std::ifstream& in, std::vector<T>& a) {
  uint64_t n = 0;
  if (!in.read(reinterpret_cast<char*>(&n), sizeof n) || n > (uint64_t(1) << 40)) return false;
  a.resize(n);
  return static_cast<bool>(
      in.read(reinterpret_cast<char*>(a.data()), static_cast<std::streamsize>(n * sizeof(T))));
}

bool load_cache(const std::string& path, const std::string& description, GptDataset& g) {
  std::ifstream in(path, std::ios::binary);
  std::string magic, text;
  if (!in || !std::getline(in, magic) || magic != kCacheMagic) return false;
  uint64_t n = 0;
  if (!in.read(reinterpret_cast<char*>(&n), sizeof n) || n != description.size()) return false;
  text.resize(n);
  if (!in.read(&text[0], static_cast<std::streamsize>(n)) || text != description) return false;
  int32_t epochs = 0;
  if (!in.read(reinterpret_cast<char*>(&epochs), sizeof epochs)) return false;
  g.epochs = epochs;
  return read_array(in, g.document_index) && read_array(in, g.sample_index) &&
         read_array(in, g.shuffle_index);
}

void save_cache(const std::string& folder, const std::string& path,
                const std::string& description, const GptDataset& g) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;  // the cache is an optimisation: a folder that refuses it costs time only
    out << kCacheMagic << "\n";
    const uint64_t n = description.size();
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out.write(description.data(), static_cast<std::streamsize>(n));
    const int32_t epochs = g.epochs;
    out.write(reinterpret_cast<const char*>(&epochs), sizeof epochs);
    write_array(out, g.document_index);
    write_array(out, g.sample_index);
    write_array(out, g.shuffle_index);
    if (!out) {
      std::remove(tmp.c_str());
      return;
    }
  }
  (void)folder;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace

DataBlend parse_data_blend(const std::vector<std::string>& words) {
  DataBlend b;
  if (words.size() % 2 == 1) {
    b.prefixes = words;
    return b;
  }
  std::vector<double> weights;
  size_t parsed = 0;
  std::string not_a_number;
  for (size_t i = 0; i < words.size(); i += 2) {
    char* end = nullptr;
    const double w = std::strtod(words[i].c_str(), &end);
    if (!words[i].empty() && end == words[i].c_str() + words[i].size()) {
      ++parsed;
      weights.push_back(w);
    } else if (not_a_number.empty()) {
      not_a_number = words[i];
    }
  }
  if (parsed == 0) {  // an even number of prefixes
    b.prefixes = words;
    return b;
  }
  if (!not_a_number.empty())
    throw std::invalid_argument("'" + not_a_number + "' is not a weight: give weights and "
                                "prefixes in turn (W1 P1 W2 P2 ...) or prefixes alone");
  for (double w : weights)
    if (!(w > 0) || !std::isfinite(w))
      throw std::invalid_argument("the weight " + words[0] + " ... must each be a finite number "
                                  "> 0 (BlendedDataset's rule), got " + std::to_string(w));
  for (size_t i = 1; i < words.size(); i += 2) b.prefixes.push_back(words[i]);
  b.weights = weights;
  return b;
}

void MegatronData::Split::sample(int64_t n, int seq_length, int32_t* out) const {
  if (n < 0 || n >= size)
    throw std::logic_error("MegatronData: sample " + std::to_string(n) + " of " +
                           std::to_string(size));
  if (!blend) {
    parts[0].sample(static_cast<size_t>(n), seq_length, out);
    return;
  }
  parts[blend->dataset[n]].sample(static_cast<size_t>(blend->sample[n]), seq_length, out);
}

const LowLevelDataset& MegatronData::low_level(const std::string& prefix, const std::string& flag) {
  if (mock_) return *mock_;
  (void)flag;
  for (const auto& [p, d] : indexed_)
    if (p == prefix) return *d;
  throw std::logic_error("MegatronData: " + prefix + " was not opened");
}

GptDataset MegatronData::gpt(const std::string& prefix, int split, bool whole,
                             std::optional<int64_t> samples, const std::string& flag) {
  const LowLevelDataset& low = low_level(prefix, flag);
  const size_t N = low.sequences();
  size_t begin = 0, end = N;
  const std::string split_text = spec_.mock ? "1,1,1" : spec_.split;
  if (!whole) {
    const auto m = split_matrix(split_text)[split];
    if (!m)
      throw DataError(flag + " " + prefix + ": --split " + split_text + " gives the " +
                      kSplitNames[split] + " split no share, and the run reads it");
    begin = static_cast<size_t>(round_half_even(m->first * static_cast<double>(N)));
    end = static_cast<size_t>(round_half_even(m->second * static_cast<double>(N)));
  }
  std::ostringstream description;
  description << "prefix " << prefix << "\nsplit " << kSplitNames[split] << " " << split_text
              << " [" << begin << ", " << end << ") of " << N << "\nseed " << seed_
              << "\nsequence_length " << seq_length_ << "\nnum_samples "
              << (samples ? std::to_string(*samples) : "None") << "\n";
  if (!spec_.mock) {
    struct stat st;
    if (stat((prefix + ".idx").c_str(), &st) == 0)
      description << "idx " << st.st_size << " bytes, modified " << st.st_mtime << "\n";
  }
  const std::string cached = spec_.cache_path.empty()
                                 ? ""
                                 : cache_file(spec_.cache_path, description.str(), split);
  GptDataset g;
  if (!cached.empty() && load_cache(cached, description.str(), g)) {
    g.data = &low;
    return g;
  }
  try {
    g = build_gpt_dataset(low, begin, end, samples, seq_length_, seed_);
  } catch (const std::invalid_argument& e) {
    throw DataError(flag + " " + (spec_.mock ? std::string("(Megatron's mock data)") : prefix) +
                    ": the " + kSplitNames[split] + " split, sequences [" +
                    std::to_string(begin) + ", " + std::to_string(end) + ") of " +
                    std::to_string(N) + (whole ? "" : " by --split " + split_text) + ": " +
                    e.what() + ", and " +
                    (samples ? std::to_string(*samples) + " samples are asked of it"
                             : std::string("one epoch is asked of it")) +
                    " (Megatron's GPTDataset would loop forever or fail here)");
  }
  if (!cached.empty()) save_cache(spec_.cache_path, cached, description.str(), g);
  return g;
}

MegatronData::Split MegatronData::build_split(int split, const DataBlend& blend, bool whole,
                                              int64_t samples, const std::string& flag) {
  Split s;
  if (spec_.mock || (blend.prefixes.size() == 1 && (whole || blend.weights.empty()))) {
    s.parts.push_back(gpt(spec_.mock ? "" : blend.prefixes[0], split, whole, samples, flag));
    s.size = static_cast<int64_t>(s.parts[0].samples());
    return s;
  }
  std::vector<double> weights;
  if (!blend.weights.empty()) {
    const std::vector<double> w = normalize(blend.weights);
    const std::vector<int64_t> target = samples_per_dataset(w, samples, 0.0);
    const std::vector<int64_t> buffer = samples_per_dataset(w, samples, spec_.surplus);
    for (size_t d = 0; d < blend.prefixes.size(); ++d) {
      s.parts.push_back(gpt(blend.prefixes[d], split, whole, buffer[d], flag));
      s.size += target[d];
    }
    weights = w;
  } else {  // one epoch of each, blended by their sizes
    for (const std::string& prefix : blend.prefixes) {
      s.parts.push_back(gpt(prefix, split, whole, std::nullopt, flag));
      weights.push_back(static_cast<double>(s.parts.back().samples()));
    }
    s.size = std::min<int64_t>(samples, static_cast<int64_t>(numpy_sum(weights.data(),
                                                                       weights.size())));
  }
  s.blend = build_blended_indices(normalize(weights), s.size);
  std::vector<int64_t> drawn(s.parts.size(), 0);
  for (int16_t d : s.blend->dataset) ++drawn[d];
  for (size_t d = 0; d < s.parts.size(); ++d)
    if (drawn[d] > static_cast<int64_t>(s.parts[d].samples()))
      throw DataError(flag + " " + blend.prefixes[d] + ": the " + kSplitNames[split] +
                      " blend draws " + std::to_string(drawn[d]) + " samples of its " +
                      std::to_string(s.parts[d].samples()) + " (Megatron's IndexError; a "
                      "larger --mid-level-dataset-surplus gives more)");
  return s;
}

MegatronData::MegatronData(const MegatronDataSpec& spec, int vocab_size, int seq_length,
                           uint64_t seed, int64_t train_samples, int64_t valid_samples)
    : spec_(spec), vocab_size_(vocab_size), seq_length_(seq_length),
      seed_(static_cast<uint32_t>(seed)) {
  const std::string flag = spec.mock ? "--mock-data" : spec.per_split() ? "--train-data-path"
                                                                        : "--data-path";
  if (seed > 0xffffffffULL)
    throw DataError(flag + " with --seed " + std::to_string(seed) + ": Megatron's datasets "
                    "shuffle with numpy.random.RandomState, whose seeds are below 2^32");
  if (seq_length < 2) throw DataError(flag + ": --seq-length must be >= 2 (build_sample_idx's rule)");
  if (spec.mock) {
    if (spec.tokenizer_vocab > vocab_size)
      throw DataError("--mock-data: its tokens run to " + std::to_string(spec.tokenizer_vocab - 1) +
                      " (the tokenizer's vocabulary and end-of-document), beyond --vocab-size (" +
                      std::to_string(vocab_size) + ")");
    mock_.reset(new MockDataset(spec.tokenizer_vocab, spec.eod));
  } else {
    auto open = [&](const DataBlend& b, const std::string& f) {
      for (const std::string& p : b.prefixes) {
        bool seen = false;
        for (const auto& [q, d] : indexed_) seen = seen || q == p;
        if (!seen) indexed_.emplace_back(p, std::make_unique<IndexedDataset>(p, vocab_size, f));
      }
    };
    open(spec.blend, "--data-path");
    open(spec.train, "--train-data-path");
    if (valid_samples > 0) open(spec.valid, "--valid-data-path");
  }
  if (spec.per_split()) {
    if (spec.train.empty()) throw DataError("--valid-data-path and --test-data-path need --train-data-path");
    train_ = build_split(0, spec.train, true, train_samples, "--train-data-path");
    if (valid_samples > 0) {
      if (spec.valid.empty())
        throw DataError("--eval-interval with --train-data-path needs --valid-data-path");
      valid_ = build_split(1, spec.valid, true, valid_samples, "--valid-data-path");
    }
    return;
  }
  train_ = build_split(0, spec.blend, false, train_samples, flag);
  if (valid_samples > 0) valid_ = build_split(1, spec.blend, false, valid_samples, flag);
}

std::vector<const IndexedDataset*> MegatronData::datasets() const {
  std::vector<const IndexedDataset*> out;
  for (const auto& [p, d] : indexed_) out.push_back(d.get());
  return out;
}

std::string MegatronData::describe() const {
  if (spec_.mock)
    return "Megatron's mock data (100000 sequences, split 1,1,1; " +
           std::to_string(train_.size) + " training samples)";
  std::string what = spec_.per_split() ? "Megatron indexed data, --train-data-path " +
                                             join(spec_.train.prefixes)
                                       : "Megatron indexed data " + join(spec_.blend.prefixes) +
                                             ", split " + spec_.split;
  return what + " (" + std::to_string(train_.size) + " training samples" +
         (valid_.size > 0 ? ", " + std::to_string(valid_.size) + " validation" : "") + ")";
}

}  // namespace paralab
