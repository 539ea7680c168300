// model/gpt_dataset.cpp: GPTDataset's three indices, BlendedDataset's two, and the arithmetic
// of the split and the blend, each as megatron-core computes it (sources in the header).
#include "model/gpt_dataset.h"

#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <stdexcept>

#include "model/numpy_random.h"

namespace paralab {

namespace {

// The last epoch is shuffled apart when it supplies fewer than this share of an epoch's samples.
constexpr double kSeparateFinalEpochThreshold = 0.80;
constexpr int kExtraToken = 1;  // add_extra_token_to_sequence: s + 1 tokens a sample

std::vector<int32_t> document_index(size_t begin, size_t end, int epochs, NumpyRandomState& rs,
                                    bool separate_final_epoch) {
  if (!separate_final_epoch || epochs == 1) {
    std::vector<int32_t> index;
    index.reserve((end - begin) * epochs);
    for (int e = 0; e < epochs; ++e)
      for (size_t d = begin; d < end; ++d) index.push_back(static_cast<int32_t>(d));
    rs.shuffle(index);
    return index;
  }
  std::vector<int32_t> first = document_index(begin, end, epochs - 1, rs, false);
  const std::vector<int32_t> last = document_index(begin, end, 1, rs, false);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

std::vector<int64_t> shuffle_index(int64_t num_samples, int64_t total, NumpyRandomState& rs) {
  std::vector<int64_t> first(num_samples);
  for (int64_t i = 0; i < num_samples; ++i) first[i] = i;
  rs.shuffle(first);
  if (num_samples == total) return first;
  std::vector<int64_t> last(total - num_samples);
  for (int64_t i = num_samples; i < total; ++i) last[i - num_samples] = i;
  rs.shuffle(last);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

// helpers.cpp build_sample_idx, drop_last_partial_sequence = true.
std::vector<int64_t> sample_index(const std::vector<int32_t>& sizes,
                                  const std::vector<int32_t>& documents, int seq_length,
                                  int epochs, int64_t tokens_per_epoch) {
  const int64_t num_samples = (epochs * tokens_per_epoch - kExtraToken) / seq_length;
  std::vector<int64_t> index(2 * (num_samples + 1));
  int64_t document_position = 0, doc_offset = 0;
  index[0] = 0, index[1] = 0;
  for (int64_t i = 1; i <= num_samples; ++i) {
    int64_t remaining = seq_length + kExtraToken;
    while (remaining != 0) {
      const int64_t length = sizes[documents[document_position]] - doc_offset;
      remaining -= length;
      if (remaining <= 0) {
        doc_offset += remaining + length - kExtraToken;
        remaining = 0;
      } else {
        if (document_position == static_cast<int64_t>(documents.size()) - 1) {
          doc_offset = sizes[documents[document_position]] - kExtraToken;
          break;
        }
        ++document_position;
        doc_offset = 0;
      }
    }
    index[2 * i] = document_position;
    index[2 * i + 1] = doc_offset;
  }
  return index;
}

}  // namespace

MockDataset::MockDataset(int tokenizer_vocab, int eod) : vocab_(tokenizer_vocab), eod_(eod) {
  // MockGPTLowLevelDataset: seed 0, 100000 sequences, max_sequence_length 4096
  Pcg64 rng(0);
  lengths_.resize(100000);
  for (int32_t& n : lengths_) n = rng.integer(1, 4096);
}

int32_t MockDataset::token(size_t sequence, size_t offset) const {
  // (numpy.arange(length - 1) + 1) % vocab_size, then the end-of-document token
  if (offset + 1 == static_cast<size_t>(lengths_[sequence])) return eod_;
  return static_cast<int32_t>((offset + 1) % static_cast<size_t>(vocab_));
}

void GptDataset::sample(size_t k, int seq_length, int32_t* out) const {
  const int64_t j = shuffle_index[k];
  const int64_t beg = sample_index[2 * j], beg_offset = sample_index[2 * j + 1];
  const int64_t end = sample_index[2 * j + 2], end_offset = sample_index[2 * j + 3];
  size_t n = 0;
  for (int64_t i = beg; i <= end; ++i) {
    const size_t sequence = static_cast<size_t>(document_index[i]);
    const int64_t from = i == beg ? beg_offset : 0;
    const int64_t to = i == end ? end_offset + kExtraToken : data->lengths()[sequence];
    for (int64_t t = from; t < to; ++t) out[n++] = data->token(sequence, static_cast<size_t>(t));
  }
  if (n != static_cast<size_t>(seq_length + kExtraToken))
    throw std::logic_error("GptDataset: sample " + std::to_string(k) + " holds " +
                           std::to_string(n) + " tokens");
}

GptDataset build_gpt_dataset(const LowLevelDataset& data, size_t begin, size_t end,
                             std::optional<int64_t> num_samples, int seq_length, uint32_t seed) {
  if (end <= begin) throw std::invalid_argument("its split holds no sequences");
  const std::vector<int32_t>& sizes = data.lengths();
  int64_t tokens_per_epoch = 0;
  for (size_t d = begin; d < end; ++d) tokens_per_epoch += sizes[d];
  if (tokens_per_epoch <= kExtraToken)
    throw std::invalid_argument("its split holds " + std::to_string(tokens_per_epoch) +
                                " tokens, fewer than one sample's --seq-length + 1");
  GptDataset g;
  g.data = &data;
  g.epochs = 1;
  if (num_samples) {  // _get_num_epochs
    const int64_t requested = *num_samples * seq_length + kExtraToken;
    for (int64_t tokens = tokens_per_epoch; tokens < requested; tokens += tokens_per_epoch)
      ++g.epochs;
  }
  bool separate_final_epoch = false;
  int64_t sans_final_epoch = 0;
  if (g.epochs > 1) {
    sans_final_epoch = ((g.epochs - 1) * tokens_per_epoch - kExtraToken) / seq_length;
    const int64_t from_final_epoch = *num_samples - sans_final_epoch;
    const int64_t per_epoch = (tokens_per_epoch - kExtraToken) / seq_length;
    separate_final_epoch = from_final_epoch < static_cast<int64_t>(
                                                  kSeparateFinalEpochThreshold * per_epoch);
  }
  NumpyRandomState rs(seed);
  g.document_index = document_index(begin, end, g.epochs, rs, separate_final_epoch);
  g.sample_index = sample_index(sizes, g.document_index, seq_length, g.epochs, tokens_per_epoch);
  const int64_t total = static_cast<int64_t>(g.sample_index.size() / 2) - 1;
  g.shuffle_index = shuffle_index(separate_final_epoch ? sans_final_epoch : total, total, rs);
  return g;
}

BlendedIndices build_blended_indices(const std::vector<double>& weights, int64_t size) {
  BlendedIndices b;
  b.dataset.resize(size);
  b.sample.resize(size);
  std::vector<int64_t> taken(weights.size(), 0);
  for (int64_t j = 0; j < size; ++j) {
    const double at = std::max(static_cast<double>(j), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - static_cast<double>(taken[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * at - static_cast<double>(taken[d]);
      if (error > best_error) best_error = error, best = d;
    }
    b.dataset[j] = static_cast<int16_t>(best);
    b.sample[j] = taken[best]++;
  }
  return b;
}

double numpy_sum(const double* a, size_t n) {
  // numpy's pairwise_sum: sequential below 8, 8 accumulators up to 128, halves above
  if (n < 8) {
    double r = -0.0;
    for (size_t i = 0; i < n; ++i) r += a[i];
    return r;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = a[k];
    size_t i = 8;
    for (; i < n - n % 8; i += 8)
      for (int k = 0; k < 8; ++k) r[k] += a[i + k];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpy_sum(a, n2) + numpy_sum(a + n2, n - n2);
}

std::vector<double> normalize(const std::vector<double>& w) {
  const double sum = numpy_sum(w.data(), w.size());
  std::vector<double> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = w[i] / sum;
  return out;
}

std::vector<std::optional<std::pair<double, double>>> split_matrix(const std::string& split) {
  std::vector<double> v;  // re.findall(r"[.0-9]+", split), each float()
  const std::regex number("[.0-9]+");
  for (auto it = std::sregex_iterator(split.begin(), split.end(), number);
       it != std::sregex_iterator(); ++it) {
    const std::string s = it->str();
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) throw std::invalid_argument("'" + s + "' is not a number");
    v.push_back(x);
  }
  if (v.empty() || v.size() > 3)
    throw std::invalid_argument("it gives " + std::to_string(v.size()) + " weights, 1 to 3 "
                                "(train, validation, test)");
  v.resize(3, 0.0);
  if (!(numpy_sum(v.data(), 3) > 0)) throw std::invalid_argument("its weights add up to 0");
  v = normalize(v);
  const double bounds[4] = {0, v[0], v[0] + v[1], (v[0] + v[1]) + v[2]};
  std::vector<std::optional<std::pair<double, double>>> m;
  for (int i = 0; i < 3; ++i)
    if (bounds[i + 1] <= bounds[i]) m.push_back(std::nullopt);
    else m.push_back(std::make_pair(bounds[i], bounds[i + 1]));
  return m;
}

std::vector<int64_t> samples_per_dataset(const std::vector<double>& weights, int64_t target,
                                         double surplus) {
  std::vector<int64_t> n;
  for (double w : weights)
    n.push_back(static_cast<int64_t>(
        std::ceil(std::ceil(static_cast<double>(target) * w) * (1 + surplus))));
  return n;
}

}  // namespace paralab
