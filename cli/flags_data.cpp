// cli/flags_data.cpp: where the tokens come from (--data-path, Megatron's --split and
// --mock-data; model/data.h) and the checks that read the file: its format, its token ids
// against the vocabulary, the validation split it must leave.
#include <CLI/CLI.hpp>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: RawFlags, add_switch, fail; cli/flags.h Options

namespace paralab {

namespace {

// "949,50,1" or "949/50/1" (Megatron's separators) -> three weights summing to 1.
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

}  // namespace

void add_data_flags(CLI::App& app, Options& o, RawFlags& raw) {
  const char* kRun = "Run, data and backends";
  app.add_option("--data-path", o.data_path,
                 "training tokens: an llm.c token file (.bin, uint16 tokens) or plain text "
                 "(one token per byte); without it, a synthetic corpus made from --seed")
      ->type_name("FILE")->group(kRun);
  app.add_option("--split", raw.split,
                 "train,validation,test weights of the data (e.g. 949,50,1): --data-path's "
                 "tokens are cut in that proportion, validation reads the second part, the test "
                 "part is not read; the synthetic corpus generates validation tokens in "
                 "proportion to its training tokens; default: the last 10% of a file validates")
      ->type_name("W,W,W")->group(kRun);
  add_switch(app, "--mock-data", raw.mock_data, "the synthetic corpus (no --data-path)")
      ->group(kRun);
}

void check_data(Options& o, const RawFlags& raw) {
  const ModelConfig& m = o.model;
  TrainConfig& t = o.train;
  if (raw.mock_data && !o.data_path.empty())
    fail("--mock-data (the synthetic corpus) conflicts with --data-path ", o.data_path);
  if (!raw.split.empty()) {
    const std::vector<double> w = split_weights(raw.split);
    t.split_train = w[0], t.split_valid = w[1];
  }
  // Last, as it reads the file: the data must fit the model it feeds.
  if (!o.data_path.empty()) check_data_file(o.data_path, m.vocab_size, m.seq_length);
  // Here rather than in the trainer, so that --plan refuses it as the run does.
  if ((o.eval_interval > 0 || t.split_train > 0) && !o.data_path.empty())
    check_validation_split(o.data_path, m.vocab_size, m.seq_length, t.split_train,
                           t.split_valid, o.eval_interval > 0);
  if (o.eval_interval > 0 && t.split_train > 0 && t.split_valid == 0)
    fail("--eval-interval ", o.eval_interval, " with --split's validation share 0: nothing to "
         "validate on");
}

}  // namespace paralab
