// model/evaluate.cpp: the validation loss (model/evaluate.h).
#include "model/evaluate.h"
#include "kernels/ops.h"
#include "model/pipeline_stage.h"
#include "measure/clock.h"  // now_seconds

namespace paralab {

Evaluator::Evaluator(Transformer& model, const DataLoader& data, const Schedule& train_schedule,
                     int pp_rank, Communicator* pp, Communicator* world,
                     size_t message_elements, DType type, int micro_batch_size, int dp_rank)
    : model_(model),
      data_(data),
      executor_(forward_only_schedule(train_schedule), pp_rank, pp, message_elements, type),
      world_(world),
      B_(micro_batch_size),
      dp_rank_(dp_rank),
      k_(data.grad_accum_steps()) {
  const size_t N = (size_t)B_ * model.config().seq_length;
  tokens_.assign(k_, std::vector<int>(N));
  targets_.assign(k_, std::vector<int>(N));
}

float world_mean_loss(Communicator& world, Buffer<float>& scalar, float rank_loss, int pp,
                      int cp, bool* stop) {
  if (world.size() == 1) return rank_loss;
  const kernels::Device dev = world.device();
  float values[2] = {rank_loss, stop && *stop ? 1.0f : 0.0f};
  const int count = stop ? 2 : 1;
  kernels::memcpy_from_host(dev, scalar.data(), values, count * sizeof(float));
  world.all_reduce(scalar.data(), count);
  kernels::memcpy_to_host(dev, values, scalar.data(), count * sizeof(float));
  if (stop) *stop = values[1] > 0;
  return values[0] / (float)(world.size() / (pp * cp));
}

EvalResult Evaluator::run(int eval_iters) {
  const kernels::Device dev = model_.device();
  kernels::synchronize(dev);
  const double t0 = now_seconds();
  Ledger::instance().reset_peaks();
  // Delayed scaling records every cast's amax, a validation forward's too, into the next
  // step's history row: its state is put back after, so that a run with evaluation trains
  // as the run without it (tests/mpi/eval.sh)
  std::vector<std::pair<Fp8Scaling*, std::vector<float>>> fp8_state;
  for (Fp8Scaling* s : {model_.fp8_scaling(), model_.fp8_expert_scaling()})
    if (s) fp8_state.push_back({s, s->linears_state(0, s->linears())});
  double loss_sum = 0;  // this rank's microbatch means (0 off the last stage)
  for (int j = 0; j < eval_iters; ++j) {
    for (int micro = 0; micro < k_; ++micro)
      data_.valid_microbatch(j, micro, dp_rank_, tokens_[micro].data(), targets_[micro].data());
    EvalStage stage(model_, executor_.schedule().shape, B_, [&](int micro) {
      return Transformer::Microbatch{tokens_[micro].data(), targets_[micro].data(), B_, 1.0f, 0, true};
    });
    executor_.run(stage);
    stage.finish();
    loss_sum += stage.loss_sum();
  }
  for (auto& [scaling, values] : fp8_state)
    scaling->set_linears_state(0, scaling->linears(), values);
  // reduced as the training loss; the scalar lives only while evaluating, outside the
  // steps the plan predicts
  float loss = (float)(loss_sum / ((double)k_ * eval_iters));
  if (world_ && world_->size() > 1) {
    const int pp = model_.pipeline_group() ? model_.pipeline_group()->size() : 1;
    Buffer<float> scalar(dev, 1, Category::COMM_BUFFERS);
    loss = world_mean_loss(*world_, scalar, loss, pp, model_.context_parallel().size());
  }
  kernels::synchronize(dev);
  EvalResult r;
  r.loss = loss;
  r.seconds = now_seconds() - t0;
  r.peak_memory_bytes = (int64_t)Ledger::instance().peak_total();
  return r;
}

}  // namespace paralab
