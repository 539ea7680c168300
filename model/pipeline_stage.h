// model/pipeline_stage.h: the Transformer as the executor's PipelineStage
// (parallel/pipeline_parallel.h): what each action of the schedule does to the model.
//
//   F(i, c)  data parallelism starts a microbatch (begin_microbatch), then the model's
//            forward of microbatch i on chunk c; the last model stage adds its loss.
//   B(i, c)  begin_microbatch(last = i is the step's last microbatch: ZeRO 0-1 reduce after
//            it), then the backward of (i, c): all of it, or for a split schedule (zb-h1)
//            the input gradient only;
//   W(i, c)  begin_microbatch(last) and the layers' weight gradients, declared done.
// Every action ends with a device synchronisation so the executor's clock measures it.
//
// EvalStage runs evaluation's forward-only schedule (forward_only_schedule): F(i, c) only,
// Transformer::Microbatch::forward_only, no data-parallel microbatch bookkeeping (nothing is
// reduced). A pair's output must live until it has been sent: the executor sends slot j's
// outputs in the exchange before slot j + 1 and waits for it, so when slot j + 1 runs the
// pairs of slot j are discarded; finish() discards the last ones (after executor.run).
#pragma once
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
  // data(i): microbatch i's tokens, targets, size, loss scale and dropout seed.
  // split: the schedule splits the backward (zb-h1): B the input gradient, W the weights'.
  ModelStage(Transformer& model, int microbatches, int micro_batch_size, bool split,
             std::function<Transformer::Microbatch(int)> data)
      : model_(model), m_(microbatches), B_(micro_batch_size), split_(split),
        data_(std::move(data)) {}

  void* activation_in(int microbatch, int chunk) override {
    return model_.activation_input(microbatch, chunk, B_);
  }
  const void* activation_out(int microbatch, int chunk) override {
    return model_.activation_output(microbatch, chunk);
  }
  void* gradient_in() override { return model_.output_gradient_input(B_); }
  const void* gradient_out() override { return model_.input_gradient(); }

  void run(const Action& a) override {
    if (a.type == ActionType::F) {
      model_.begin_microbatch(false);
      loss_sum_ += model_.forward(a.microbatch, a.chunk, data_(a.microbatch));
    } else {
      model_.begin_microbatch(a.microbatch == m_ - 1);
      if (a.type == ActionType::B) model_.backward(a.microbatch, a.chunk, split_);
      else model_.backward_weight(a.microbatch, a.chunk);
    }
    kernels::synchronize(model_.device());
  }

  // Sum of the losses of this rank's last-model-stage forwards (0 on other stages).
  double loss_sum() const { return loss_sum_; }

 private:
  Transformer& model_;
  int m_, B_;
  bool split_;
  std::function<Transformer::Microbatch(int)> data_;
  double loss_sum_ = 0;
};

class EvalStage : public PipelineStage {
 public:
  EvalStage(Transformer& model, int micro_batch_size,
            std::function<Transformer::Microbatch(int)> data)
      : model_(model), B_(micro_batch_size), data_(std::move(data)) {}
  ~EvalStage() override { finish(); }

  void* activation_in(int microbatch, int chunk) override {
    return model_.activation_input(microbatch, chunk, B_);
  }
  const void* activation_out(int microbatch, int chunk) override {
    return model_.activation_output(microbatch, chunk);
  }
  void* gradient_in() override { throw std::logic_error("EvalStage: no backward"); }
  const void* gradient_out() override { throw std::logic_error("EvalStage: no backward"); }

  void run(const Action& a) override {
    if (a.type != ActionType::F) throw std::logic_error("EvalStage: forward actions only");
    finish();  // the previous slot's outputs went out in the exchange before this slot
    Transformer::Microbatch mb = data_(a.microbatch);
    mb.forward_only = true;
    loss_sum_ += model_.forward(a.microbatch, a.chunk, mb);
    sent_.push_back({a.microbatch, a.chunk});
    kernels::synchronize(model_.device());
  }
  void finish() {
    for (const auto& [i, c] : sent_) model_.discard(i, c);
    sent_.clear();
  }
  double loss_sum() const { return loss_sum_; }  // as ModelStage's

 private:
  Transformer& model_;
  int B_;
  std::function<Transformer::Microbatch(int)> data_;
  std::vector<std::pair<int, int>> sent_;
  double loss_sum_ = 0;
};

}  // namespace paralab
