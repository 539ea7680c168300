// model/optimizer.h: AdamW on fp32 master weights, global gradient-norm clipping, and the
// learning-rate schedule (warmup, then constant / linear / cosine decay; notes/model.md).
//
// The optimizer updates what data parallelism says this rank owns
// (DataParallel::owned_segments): every parameter under DDP, its slices under ZeRO >= 1,
// whose Adam moments alone it keeps; with expert parallelism the same for the experts'
// data parallelism (Transformer::expert_data_parallel), their states after the dense ones. With --bf16 it also keeps their fp32 master weights
// (category master_params): Adam updates the master, and the bf16 parameter is its rounding.
// With Megatron's precision-aware optimizer the moments are stored in bf16 (TrainConfig::
// exp_avg_bf16, exp_avg_sq_bf16; kernels/math.h adamw_step_stored): 2 bytes each, not 4.
// Construct it after the parameters are initialised: the master starts as their values.
//
// The loss scale (--fp16, or --bf16 --loss-scale; model/loss_scaler.h): the step's gradients
// arrive multiplied by loss_scale() (the loss's gradient was), so step() takes the norm of the
// scaled gradients, finds an overflow there (a norm that is not finite: some gradient is inf
// or NaN, on some rank: the norm is global), and otherwise divides the scale out in fp32 inside
// the update, with the clipping factor (Megatron unscales the main grads, then clips: the same
// product, g x (1/S) x clip, in one multiply here). It reports the unscaled norm. An overflow
// skips the update and backs the scale off; the scaler's update runs every step.
//
// CPU offload (parallel/offload.h): of each vector's states (dense, experts) the first H
// elements (DataParallel::host_state_numel) live in host memory, the rest on the device; an
// owned segment marked host is updated on the host (model/host_adamw.h, `host_threads`
// threads) from its host gradient copy into its host parameter copy, which data
// parallelism then copies up. The gradient norm and clipping are the device's, unchanged.
#pragma once
#include "measure/ledger.h"
#include "model/config.h"
#include "model/grad_underflow.h"
#include "model/loss_scaler.h"
#include "model/transformer.h"

namespace paralab {

// Learning rate at step t (1-based), Megatron's schedule.
float learning_rate(const TrainConfig& t, int step);

class AdamW {
 public:
  // host_threads: the threads of the host update (CPU offload).
  AdamW(Transformer& model, const TrainConfig& train, int host_threads = 1);
  // Completes the gradient reduction, takes the global gradient norm (sqrt of the sum of
  // squares over every parameter, each counted once), clips by clip_grad, applies one AdamW
  // step at learning rate lr to the owned parameters, and lets data parallelism share the
  // result. Returns the norm before clipping. With skip (the step's loss was not finite) or
  // a norm that is not finite, nothing is updated: no parameter, moment or step count moves
  // (skipped() says so), while the collectives still run as planned (every rank decides
  // alike: the loss and the norm are global).
  float step(float lr, bool skip = false);
  int steps_taken() const { return step_; }
  // The scale the step's loss gradient is multiplied by (1 without a loss scaler), and the
  // scaler itself (its state is the checkpoint's and the step line's).
  float loss_scale() const { return scaler_.scale(); }
  const LossScaler& loss_scaler() const { return scaler_; }
  void set_loss_scaler_state(const LossScalerState& s) { scaler_.set_state(s); }
  // --log-fp16-underflow: the last step's gradients as fp16 would hold them unscaled
  // (model/grad_underflow.h), counted before the update.
  const GradUnderflow& grad_underflow() const { return underflow_; }
  bool skipped() const { return skipped_; }  // the last step()
  double host_seconds() const { return host_seconds_; }  // the last step's host AdamW

  // ---- checkpoints (checkpoint/checkpoint.h): element i (OwnedSegment::state_offset + k)
  // of a state of the dense (expert = false) or the experts' vector, and the Device whose
  // copies reach it (CPU for a state on the host). A segment's elements are contiguous in
  // one buffer. has_master() is false in fp32 (the parameters are the master).
  // A moment's elements are fp32, or bf16 with --exp-avg-dtype / --exp-avg-sq-dtype bf16
  // (state_bf16); the master is fp32.
  enum class State { EXP_AVG, EXP_AVG_SQ, MASTER };
  void* state(State s, bool expert, int64_t i);
  bool state_bf16(State s) const {
    return s == State::EXP_AVG ? train_.exp_avg_bf16
                               : s == State::EXP_AVG_SQ && train_.exp_avg_sq_bf16;
  }
  size_t state_bytes(State s) const { return state_bf16(s) ? 2 : 4; }
  kernels::Device state_device(bool expert, int64_t i) const;
  bool has_master() const { return master_.size() + host_master_.size() > 0; }
  void set_steps_taken(int steps) { step_ = steps; }  // a resumed run's bias correction

 private:
  Transformer& model_;
  TrainConfig train_;
  int host_threads_ = 1;
  // Device states: the dense vector's elements [H, N), then the experts' [He, Ne); host
  // states (CPU offload): the dense [0, H), then the experts' [0, He).
  // Adam moments, category optimizer_states, state_bytes() an element (fp32 or bf16)
  Buffer<uint8_t> m_, v_, host_m_, host_v_;
  Buffer<float> master_;   // --bf16: fp32 master weights of the owned elements
  Buffer<float> host_master_;
  int64_t dense_n_ = 0, dense_h_ = 0, expert_h_ = 0;
  Buffer<float> norm_scalar_;  // tp > 1: the gradient norm's all-reduce over tp
  Buffer<float> pp_norm_scalar_;  // pp > 1: the same over the pipeline stages
  Buffer<float> ep_norm_scalar_;  // ep > 1: the experts' share over the ep group
  int step_ = 0;
  bool skipped_ = false;
  LossScaler scaler_;
  GradUnderflow underflow_;
  double host_seconds_ = 0;
  // Element i of the vector (expert or not): on the host, and its index in that buffer.
  bool on_host(bool expert, int64_t i) const { return i < (expert ? expert_h_ : dense_h_); }
  int64_t index(bool expert, int64_t i) const;
};

}  // namespace paralab
