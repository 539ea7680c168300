// model/optimizer.h: AdamW on fp32 master weights, global gradient-norm clipping, and the
// learning-rate schedule (warmup, then constant / linear / cosine decay; notes/model.md).
//
// The optimizer updates what data parallelism says this rank owns
// (DataParallel::owned_segments): every parameter under DDP, its slices under ZeRO >= 1,
// whose Adam moments alone it keeps; with expert parallelism the same for the experts'
// data parallelism (Transformer::expert_data_parallel), their states after the dense ones. With --bf16 it also keeps their fp32 master weights
// (category master_params): Adam updates the master, and the bf16 parameter is its rounding.
// Construct it after the parameters are initialised: the master starts as their values.
#pragma once
#include "measure/ledger.h"
#include "model/config.h"
#include "model/transformer.h"

namespace paralab {

// Learning rate at step t (1-based), Megatron's schedule.
float learning_rate(const TrainConfig& t, int step);

class AdamW {
 public:
  AdamW(Transformer& model, const TrainConfig& train);
  // Completes the gradient reduction, takes the global gradient norm (sqrt of the sum of
  // squares over every parameter, each counted once), clips by clip_grad, applies one AdamW
  // step at learning rate lr to the owned parameters, and lets data parallelism share the
  // result. Returns the norm before clipping. With skip (the step's loss was not finite) or
  // a norm that is not finite, nothing is updated: no parameter, moment or step count moves
  // (skipped() says so), while the collectives still run as planned (every rank decides
  // alike: the loss and the norm are global).
  float step(float lr, bool skip = false);
  int steps_taken() const { return step_; }
  bool skipped() const { return skipped_; }  // the last step()

  // ---- checkpoints (checkpoint/checkpoint.h): the states on the device, element
  // OwnedSegment::state_offset of a dense segment at [0], of an expert segment at
  // [expert_state_offset()]; master() is nullptr in fp32 (the parameters are the master).
  float* exp_avg() { return m_.data(); }
  float* exp_avg_sq() { return v_.data(); }
  float* master() { return master_.size() > 0 ? master_.data() : nullptr; }
  int64_t expert_state_offset() const { return expert_state_offset_; }
  void set_steps_taken(int steps) { step_ = steps; }  // a resumed run's bias correction

 private:
  Transformer& model_;
  TrainConfig train_;
  Buffer<float> m_, v_;    // Adam moments, category optimizer_states
  Buffer<float> master_;   // --bf16: fp32 master weights of the owned elements
  Buffer<float> norm_scalar_;  // tp > 1: the gradient norm's all-reduce over tp
  Buffer<float> pp_norm_scalar_;  // pp > 1: the same over the pipeline stages
  Buffer<float> ep_norm_scalar_;  // ep > 1: the experts' share over the ep group
  int64_t expert_state_offset_ = 0;  // ep > 1: where the experts' states start
  int step_ = 0;
  bool skipped_ = false;
};

}  // namespace paralab
