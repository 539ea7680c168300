// model/pipeline_stage.h: the Transformer as the executor's PipelineStage
// (parallel/pipeline_parallel.h): what each action of the schedule does to the model.
//
//   F(i, c)  data parallelism starts a microbatch (begin_microbatch), then the model's
//            forward of microbatch i on chunk c; the last model stage adds its loss.
//   B(i, c)  begin_microbatch(last = the rank's last B or W on chunk c: ZeRO 0-1 reduce after
//            it), then the backward of (i, c): all of it, or for a split B (zero-bubble
//            schedules) the input gradient only;
//   W(i, c)  begin_microbatch(last) and the layers' weight gradients, declared done.
// A message between two of the rank's chunks (the V's turn) is copied in memory
// (Transformer::hand_over). Every action ends with a device synchronisation so the
// executor's clock measures it.
//
// EvalStage runs evaluation's forward-only schedule (forward_only_schedule): F(i, c) only,
// Transformer::Microbatch::forward_only, no data-parallel microbatch bookkeeping (nothing is
// reduced). A pair's output must live until it has gone out: it is discarded once its send
// completed (sent), once handed over to the next chunk, or right after the forward of the
// last model stage (no output); finish() discards any left (after executor.run).
#pragma once
#include <algorithm>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>
#include "kernels/ops.h"
#include "model/transformer.h"
#include "parallel/pipeline_parallel.h"

namespace paralab {

class ModelStage : public PipelineStage {
 public:
  // data(i): microbatch i's tokens, targets, size, loss scale and dropout seed. The
  // schedule and this rank's place in it: which chunk a model stage is, each chunk's last
  // backward.
  ModelStage(Transformer& model, const Schedule& schedule, int pp_rank, int micro_batch_size,
             std::function<Transformer::Microbatch(int)> data)
      : model_(model), shape_(schedule.shape), B_(micro_batch_size), data_(std::move(data)) {
    for (const Action& a : schedule.ranks.at(pp_rank))
      if (a.type != ActionType::F) {
        if ((int)last_.size() <= a.chunk) last_.resize(a.chunk + 1, -1);
        last_[a.chunk] = std::max(last_[a.chunk], a.microbatch);
      }
  }

  void* activation_in(int microbatch, int chunk) override {
    return model_.activation_input(microbatch, chunk, B_);
  }
  const void* activation_out(int microbatch, int chunk) override {
    return model_.activation_output(microbatch, chunk);
  }
  void* gradient_in(int microbatch, int chunk) override {
    return model_.output_gradient_input(microbatch, chunk, B_);
  }
  const void* gradient_out() override { return model_.input_gradient(); }
  void hand_over(const Message& m) override {
    model_.hand_over(m.kind == Message::ACTIVATION, m.microbatch, shape_.chunk_of(m.from_stage),
                     shape_.chunk_of(m.to_stage));
  }

  void run(const Action& a) override {
    if (a.type == ActionType::F) {
      model_.begin_microbatch(false);
      loss_sum_ += model_.forward(a.microbatch, a.chunk, data_(a.microbatch));
    } else {
      // the chunk's last microbatch: microbatches run in order on each chunk
      model_.begin_microbatch(a.microbatch == last_.at(a.chunk));
      if (a.type == ActionType::B) model_.backward(a.microbatch, a.chunk, a.split);
      else model_.backward_weight(a.microbatch, a.chunk);
    }
    kernels::synchronize(model_.device());
  }

  // Sum of the losses of this rank's last-model-stage forwards (0 on other stages).
  double loss_sum() const { return loss_sum_; }

 private:
  Transformer& model_;
  PipelineShape shape_;
  int B_;
  std::function<Transformer::Microbatch(int)> data_;
  std::vector<int> last_;  // per chunk: the microbatch of its last B or W
  double loss_sum_ = 0;
};

class EvalStage : public PipelineStage {
 public:
  EvalStage(Transformer& model, const PipelineShape& shape, int micro_batch_size,
            std::function<Transformer::Microbatch(int)> data)
      : model_(model), shape_(shape), B_(micro_batch_size), data_(std::move(data)) {}
  ~EvalStage() override { finish(); }

  void* activation_in(int microbatch, int chunk) override {
    return model_.activation_input(microbatch, chunk, B_);
  }
  const void* activation_out(int microbatch, int chunk) override {
    return model_.activation_output(microbatch, chunk);
  }
  void* gradient_in(int, int) override { throw std::logic_error("EvalStage: no backward"); }
  const void* gradient_out() override { throw std::logic_error("EvalStage: no backward"); }
  void hand_over(const Message& m) override {
    const int from = shape_.chunk_of(m.from_stage);
    model_.hand_over(true, m.microbatch, from, shape_.chunk_of(m.to_stage));
    model_.discard(m.microbatch, from);
  }
  void sent(const Message& m) override {
    model_.discard(m.microbatch, shape_.chunk_of(m.from_stage));
  }

  void run(const Action& a) override {
    if (a.type != ActionType::F) throw std::logic_error("EvalStage: forward actions only");
    Transformer::Microbatch mb = data_(a.microbatch);
    mb.forward_only = true;
    loss_sum_ += model_.forward(a.microbatch, a.chunk, mb);
    if (a.sends.empty()) model_.discard(a.microbatch, a.chunk);  // the last model stage
    else pending_.push_back({a.microbatch, a.chunk});
    kernels::synchronize(model_.device());
  }
  // Discards what no send or hand-over did (nothing after a whole run; an interrupted one).
  void finish() {
    for (const auto& [i, c] : pending_) model_.discard(i, c);
    pending_.clear();
  }
  double loss_sum() const { return loss_sum_; }  // as ModelStage's

 private:
  Transformer& model_;
  PipelineShape shape_;
  int B_;
  std::function<Transformer::Microbatch(int)> data_;
  std::vector<std::pair<int, int>> pending_;
  double loss_sum_ = 0;
};

}  // namespace paralab
