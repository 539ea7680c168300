// report/summary.h: what a training run says besides its step lines: the validation loss
// (--eval-interval) in Megatron's words, the logged loss's running mean, and the summary at
// the end, as text and as --metrics-jsonl's last record.
//
//   validation_line  Megatron's block: "validation loss at iteration N | lm loss value: X |
//                    lm loss PPL: exp(min(20, X)) |", then what it was measured on
//   LogAverage       the step line's loss: the mean over the steps since the previous line
//                    (Megatron's training_log averages its losses over --log-interval)
//   RunSummary       tokens = steps x G x S; wall time from the first step's start to the
//                    end (evaluations and printing included); tokens/s = tokens / time in
//                    steps; MFU, HFU = sum of FLOPs / (time in steps x peak x world), the
//                    steps' values weighted by their time; peak memory: the largest ledger
//                    total of any step on any rank (and of any evaluation); final train
//                    loss: the last line's mean; final validation loss: the last evaluation
//
// defines: perplexity, validation_line, LogAverage, RunSummary, summary_text, summary_json
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

namespace paralab {

// Megatron's perplexity: exp(min(20, loss)) (the cap keeps an untrained model's finite).
inline double perplexity(double loss) { return std::exp(std::fmin(20.0, loss)); }

// final: the evaluation after the last step ("the end of training"); batches x samples of S
// tokens each, in `seconds`.
std::string validation_line(int step, bool final, double loss, int batches, int samples,
                            double seconds);

class LogAverage {
 public:
  void add(double loss) { sum_ += loss; ++count_; }
  int count() const { return count_; }
  double mean() const { return count_ > 0 ? sum_ / count_ : NAN; }
  void reset() { sum_ = 0; count_ = 0; }

 private:
  double sum_ = 0;
  int count_ = 0;
};

struct RunSummary {
  int steps = 0;                      // this run's (a resumed run's: since it resumed)
  int first_step = 0, last_step = 0;  // their iterations
  int skipped_steps = 0;  // steps without an update: loss or gradient norm not finite
  double tokens = 0;
  double wall_seconds = 0, step_seconds = 0, eval_seconds = 0;
  double mfu_seconds = 0, hfu_seconds = 0;  // sum over steps of MFU x step time (NaN: unknown)
  int64_t peak_memory_bytes = -1, eval_peak_memory_bytes = -1;  // -1: not measured
  int peak_memory_rank = 0, eval_peak_memory_rank = 0;
  double final_train_loss = NAN;
  int final_train_first = 0;  // the iterations final_train_loss averages: first .. last_step
  double final_valid_loss = NAN;
  int valid_step = 0, evaluations = 0, eval_batches = 0;

  // A step's share (its time, its tokens, its MFU and HFU weighted by its time), and an
  // evaluation's.
  void add_step(int step, double step_tokens, double seconds, double step_mfu, double step_hfu) {
    if (steps == 0) first_step = step;
    last_step = step;
    ++steps, tokens += step_tokens, step_seconds += seconds;
    mfu_seconds += step_mfu * seconds, hfu_seconds += step_hfu * seconds;
  }
  void add_eval(int step, double loss, double seconds, int batches) {
    final_valid_loss = loss, valid_step = step, eval_seconds += seconds;
    eval_batches = batches, ++evaluations;
  }
  double tokens_per_second() const { return step_seconds > 0 ? tokens / step_seconds : NAN; }
  double mfu() const { return step_seconds > 0 ? mfu_seconds / step_seconds : NAN; }
  double hfu() const { return step_seconds > 0 ? hfu_seconds / step_seconds : NAN; }
};

std::string summary_text(const RunSummary& s);
// One line: {"type": "summary", ...}.
std::string summary_json(const RunSummary& s);

}  // namespace paralab
