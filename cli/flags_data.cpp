// cli/flags_data.cpp: where the tokens come from (model/data.h) and the tokenizer the model's
// vocabulary follows, with Megatron's names:
//  - --data-path PREFIX, or a blend W1 P1 W2 P2 ... (or P1 P2 ...), of Megatron's indexed
//    datasets (PREFIX.bin + PREFIX.idx), cut into train / valid / test by --split (default
//    969,30,1, Megatron's, said on a warning line); --train-data-path, --valid-data-path,
//    --test-data-path, a blend for each split instead; --data-cache-path, the index cache;
//    --mock-data, Megatron's mock dataset (model/megatron_data.h);
//  - --data-path FILE of one llm.c token file or plain text, cut by --split's token shares;
//  - nothing: the synthetic corpus;
//  - the tokenizer (--tokenizer-type, --vocab-file, --merge-file, --tokenizer-model):
//    paralab reads token ids and does not tokenize; the vocabulary it fixes is read where its
//    file holds a plain count (GPT-2's vocab.json, a Hugging Face tokenizer.json), is
//    --vocab-size + 1 for NullTokenizer (its end-of-document token), and is asked for as
//    --vocab-size by name otherwise.
// The checks read the files: a bad .idx or .bin, a split with nothing to sample, a token id
// past the vocabulary, refused with one line before the first step (--plan too).
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: RawFlags, add_switch, one_of, fail; cli/flags.h Options
#include "checkpoint/file_io.h"  // crc32c_file
#include "checkpoint/json_document.h"  // the tokenizer's JSON files

namespace paralab {

namespace {

bool is_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// "949,50,1" or "949/50/1" (Megatron's separators) -> three weights summing to 1, for a token
// file (an indexed dataset's split is megatron-core's arithmetic, model/gpt_dataset.h).
std::vector<double> split_weights(const std::string& text) {
  std::vector<double> w;
  std::string s = text;
  for (char& c : s)
    if (c == '/') c = ',';
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) {
    size_t used = 0;
    double x = -1;
    try {
      x = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size() || !(x >= 0) || !std::isfinite(x))
      fail("--split must be up to three weights >= 0 like 949,50,1, got ", text);
    w.push_back(x);
  }
  if (w.empty() || w.size() > 3) fail("--split must be up to three weights >= 0 like 949,50,1, got ", text);
  while (w.size() < 3) w.push_back(0);
  const double sum = w[0] + w[1] + w[2];
  if (!(sum > 0) || w[0] <= 0) fail("--split ", text, ": the training weight must be > 0");
  for (double& x : w) x /= sum;
  return w;
}

DataBlend blend_of(const char* flag, const std::vector<std::string>& words) {
  try {
    return parse_data_blend(words);
  } catch (const std::invalid_argument& e) {
    std::string all;
    for (const std::string& w : words) all += (all.empty() ? "" : " ") + w;
    fail(flag, " ", all, ": ", e.what());
  }
}

// The number of distinct token ids of a JSON vocabulary: GPT-2's vocab.json ({token: id}), or
// a Hugging Face tokenizer.json (model.vocab, a map or a Unigram list, and added_tokens).
int64_t json_vocabulary(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) fail(flag, " ", path, ": cannot be read");
  Json root;
  try {
    root = JsonDocument(text.str()).root();
  } catch (const JsonError& e) {
    fail(flag, " ", path, ": ", e.what());
  }
  std::set<int64_t> ids;
  auto add = [&](const Json& id) {
    if (id.is_number_integer()) ids.insert(id.get<int64_t>());
  };
  const Json* model = json_find(root, "model");
  const Json* vocab = model ? json_find(*model, "vocab") : &root;
  if (vocab && vocab->is_object()) {
    for (const auto& item : vocab->items()) add(item.value());
  } else if (vocab && vocab->is_array()) {  // Unigram: [[piece, score], ...], ids by position
    for (size_t i = 0; i < vocab->size(); ++i) ids.insert(static_cast<int64_t>(i));
  }
  if (const Json* added = json_find(root, "added_tokens"); added && added->is_array())
    for (const Json& t : *added)
      if (const Json* id = json_find(t, "id")) add(*id);
  if (ids.empty())
    fail(flag, " ", path, ": no vocabulary found in it (a GPT-2 vocab.json or a Hugging Face "
         "tokenizer.json); give --vocab-size");
  return static_cast<int64_t>(ids.size());
}

}  // namespace

void add_data_flags(CLI::App& app, Options& o, RawFlags& raw) {
  const char* kData = "Data (Megatron's names; model/data.h)";
  app.add_option("--data-path", raw.data_path,
                 "the training tokens: Megatron's indexed dataset PREFIX (PREFIX.bin and "
                 "PREFIX.idx, as tools/preprocess_data.py writes them), a blend W1 PREFIX1 W2 "
                 "PREFIX2 ... (or PREFIX1 PREFIX2 ..., weighted by their sizes) cut by --split, "
                 "sampled as megatron-core's GPTDataset and BlendedDataset sample them; or one "
                 "llm.c token file (.bin, uint16) or plain text (a token per byte); without it, a "
                 "synthetic corpus made from --seed")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("PREFIX|FILE")
      ->group(kData);
  app.add_option("--split", raw.split,
                 "train,validation,test weights (e.g. 949,50,1): an indexed dataset's sequences, "
                 "or a token file's tokens, cut in that proportion; validation reads the second "
                 "part, the test part is not read. Indexed data default 969,30,1 (Megatron's); "
                 "a token file's default: its last 10% validates")
      ->type_name("W,W,W")->group(kData);
  app.add_option("--train-data-path", raw.train_data_path,
                 "instead of --data-path and --split: the training split's own blend of indexed "
                 "datasets (PREFIX, or W1 PREFIX1 W2 PREFIX2 ...), each read whole")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("PREFIX")->group(kData);
  app.add_option("--valid-data-path", raw.valid_data_path,
                 "with --train-data-path: the validation split's blend (--eval-interval reads it)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("PREFIX")->group(kData);
  app.add_option("--test-data-path", raw.test_data_path,
                 "with --train-data-path: the test split's blend (checked, not read)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("PREFIX")->group(kData);
  app.add_option("--data-cache-path", o.data.megatron.cache_path,
                 "a folder for the indexed datasets' sample indices (document, sample and "
                 "shuffle index per split), built once and read back by later runs with the "
                 "same data, split, seed, --seq-length and sample count")
      ->type_name("DIR")->group(kData);
  app.add_option("--mid-level-dataset-surplus", o.data.megatron.surplus,
                 "a blend asks each dataset for (1 + this) x its share of the samples "
                 "(Megatron's margin); >= 0")
      ->capture_default_str()->group(kData);
  add_switch(app, "--mock-data", raw.mock_data,
             "Megatron's mock data (MockGPTDataset: 100000 sequences of lengths drawn by "
             "numpy.random.default_rng(0), tokens 1, 2, ... then the end-of-document token), "
             "split 1,1,1; no --data-path")
      ->group(kData);
  app.add_option("--tokenizer-type", raw.tokenizer_type,
                 "Megatron's tokenizer; paralab reads token ids and does not tokenize: it fixes "
                 "the vocabulary, read from --vocab-file (GPT2BPETokenizer) or --tokenizer-model "
                 "(HuggingFaceTokenizer: a tokenizer.json or its folder), --vocab-size + 1 for "
                 "NullTokenizer (its end-of-document token), else --vocab-size, asked for")
      ->group(kData);
  app.add_option("--vocab-file", raw.vocab_file,
                 "GPT2BPETokenizer's vocab.json: the vocabulary is its entries")
      ->type_name("FILE")->group(kData);
  app.add_option("--merge-file", raw.merge_file, "GPT2BPETokenizer's merges.txt: not read")
      ->type_name("FILE")->group(kData);
  app.add_option("--tokenizer-model", raw.tokenizer_model,
                 "the tokenizer's model: a Hugging Face tokenizer.json (or the folder holding "
                 "it) gives the vocabulary; other models are not read (give --vocab-size)")
      ->type_name("PATH")->group(kData);
}

void resolve_tokenizer(Options& o, const RawFlags& raw) {
  ModelConfig& m = o.model;
  const std::string& type = raw.tokenizer_type;
  if (type.empty()) {
    if (!raw.vocab_file.empty() || !raw.tokenizer_model.empty())
      fail(!raw.vocab_file.empty() ? "--vocab-file" : "--tokenizer-model",
           " needs --tokenizer-type (which tokenizer the file belongs to)");
    o.data.megatron.tokenizer_vocab = m.vocab_size;
    o.data.megatron.eod = m.vocab_size - 1;
    return;
  }
  int64_t vocab = 0;
  std::string from;
  if (type == "NullTokenizer") {
    if (!raw.vocab_size_given) fail("--tokenizer-type NullTokenizer needs --vocab-size");
    vocab = static_cast<int64_t>(m.vocab_size) + 1;  // its end-of-document token is --vocab-size
    o.data.megatron.eod = m.vocab_size;
  } else if (type == "GPT2BPETokenizer") {
    if (raw.vocab_file.empty()) fail("--tokenizer-type GPT2BPETokenizer needs --vocab-file");
    vocab = json_vocabulary("--vocab-file", raw.vocab_file);
    from = "--vocab-file " + raw.vocab_file;
  } else if (type == "HuggingFaceTokenizer" && !raw.tokenizer_model.empty() &&
             (is_file(raw.tokenizer_model) || is_file(raw.tokenizer_model + "/tokenizer.json"))) {
    const std::string file = is_file(raw.tokenizer_model) ? raw.tokenizer_model
                                                          : raw.tokenizer_model + "/tokenizer.json";
    vocab = json_vocabulary("--tokenizer-model", file);
    from = "--tokenizer-model " + file;
  } else if (!raw.vocab_size_given) {
    fail("--tokenizer-type ", type, ": paralab reads token ids and does not load the "
         "tokenizer, so it cannot count its vocabulary", raw.tokenizer_model.empty() ? "" :
         " (" + raw.tokenizer_model + " is no tokenizer.json)", ": give --vocab-size");
  }
  if (vocab > 0 && raw.vocab_size_given && type != "NullTokenizer" && vocab != m.vocab_size)
    fail("--vocab-size (", m.vocab_size, ") is not the tokenizer's vocabulary, ", vocab,
         " from ", from, " (Megatron takes the tokenizer's)");
  if (vocab > 0) m.vocab_size = static_cast<int>(vocab);
  o.data.megatron.tokenizer_vocab = m.vocab_size;
  if (type != "NullTokenizer") o.data.megatron.eod = m.vocab_size - 1;
}

// The data in words, as a checkpoint records it: the flags that choose the samples.
ManifestData record_of(const Options& o, const RawFlags& raw) {
  ManifestData r;
  auto words = [](const char* flag, const std::vector<std::string>& w) {
    std::string s;
    for (const std::string& x : w) s += " " + x;
    return w.empty() ? std::string() : std::string(" ") + flag + s;
  };
  const MegatronDataSpec& mg = o.data.megatron;
  if (mg.mock) r.description = "--mock-data";
  else if (!o.data.path.empty()) r.description = "--data-path " + o.data.path;
  else if (!mg.any()) r.description = "the synthetic corpus";
  else
    r.description = (words("--data-path", raw.data_path) + words("--train-data-path", raw.train_data_path) +
                     words("--valid-data-path", raw.valid_data_path)).substr(1);
  if (!raw.split.empty() || (mg.any() && !mg.per_split() && !mg.mock))
    r.description += " --split " + (raw.split.empty() ? mg.split : raw.split);
  r.description += " --seed " + std::to_string(o.train.seed);
  std::vector<std::string> prefixes = mg.blend.prefixes;
  for (const DataBlend* b : {&mg.train, &mg.valid})
    prefixes.insert(prefixes.end(), b->prefixes.begin(), b->prefixes.end());
  for (const std::string& p : prefixes) {
    bool seen = false;
    for (const std::string& f : r.files) seen = seen || f == p + ".idx";
    if (seen) continue;
    r.files.push_back(p + ".idx");
    r.crc32c.push_back(crc32c_file(p + ".idx"));
  }
  return r;
}

void check_data(Options& o, const RawFlags& raw) {
  const ModelConfig& m = o.model;
  TrainConfig& t = o.train;
  DataSpec& d = o.data;
  MegatronDataSpec& mg = d.megatron;
  const bool per_split = !raw.train_data_path.empty() || !raw.valid_data_path.empty() ||
                         !raw.test_data_path.empty();
  if (per_split && !raw.data_path.empty())
    fail("--data-path and --train-data-path: give one (a blend cut by --split, or one per split)");
  if (per_split && !raw.split.empty())
    fail("--split ", raw.split, " with --train-data-path: each split has its own blend");
  if (raw.mock_data && (!raw.data_path.empty() || per_split))
    fail("--mock-data conflicts with ", per_split ? "--train-data-path" : "--data-path");
  // one word naming a file that is no indexed dataset's prefix: a token file (or a missing one)
  const bool token_file = raw.data_path.size() == 1 && !is_file(raw.data_path[0] + ".idx") &&
                          (is_file(raw.data_path[0]) || !is_file(raw.data_path[0] + ".bin"));
  if (token_file) {
    d.path = raw.data_path[0];
    if (!raw.split.empty()) {
      const std::vector<double> w = split_weights(raw.split);
      t.split_train = w[0], t.split_valid = w[1];
    }
    check_data_file(d.path, m.vocab_size, m.seq_length);
    // Here rather than in the trainer, so that --plan refuses it as the run does.
    if (o.eval_interval > 0 || t.split_train > 0)
      check_validation_split(d.path, m.vocab_size, m.seq_length, t.split_train, t.split_valid,
                             o.eval_interval > 0);
  } else if (raw.data_path.empty() && !per_split && !raw.mock_data) {
    if (!raw.split.empty()) {  // the synthetic corpus: validation in proportion
      const std::vector<double> w = split_weights(raw.split);
      t.split_train = w[0], t.split_valid = w[1];
    }
  } else {
    mg.mock = raw.mock_data;
    if (!raw.data_path.empty()) mg.blend = blend_of("--data-path", raw.data_path);
    if (!raw.train_data_path.empty()) mg.train = blend_of("--train-data-path", raw.train_data_path);
    if (!raw.valid_data_path.empty()) mg.valid = blend_of("--valid-data-path", raw.valid_data_path);
    if (!raw.test_data_path.empty()) mg.test = blend_of("--test-data-path", raw.test_data_path);
    if (!raw.split.empty()) mg.split = raw.split;
    else if (!mg.blend.empty())
      o.warnings.push_back("--data-path without --split: Megatron's default 969,30,1");
    try {
      split_matrix(mg.split);
    } catch (const std::invalid_argument& e) {
      fail("--split ", mg.split, ": ", e.what());
    }
    if (!(mg.surplus >= 0) || !std::isfinite(mg.surplus))
      fail("--mid-level-dataset-surplus must be a finite number >= 0, got ", mg.surplus);
    const int64_t G = t.global_batch_size;
    d.train_samples = raw.megatron.samples ? raw.megatron.train_samples
                                           : static_cast<int64_t>(t.train_iters) * G;
    // Megatron's train_valid_test_num_samples: every evaluation reads eval_iters batches
    d.valid_samples = o.eval_interval > 0
                          ? (t.train_iters / o.eval_interval + 1) * o.eval_iters * G : 0;
    check_output_folder("--data-cache-path", mg.cache_path);
    // Every file opened and checked, every index built: a bad file or an empty split is
    // refused here, before the first step, and by --plan as by the run.
    MegatronData(mg, m.vocab_size, m.seq_length, t.seed, d.train_samples, d.valid_samples);
  }
  if (o.eval_interval > 0 && t.split_train > 0 && t.split_valid == 0)
    fail("--eval-interval ", o.eval_interval, " with --split's validation share 0: nothing to "
         "validate on");
  o.data_record = record_of(o, raw);
}

}  // namespace paralab
