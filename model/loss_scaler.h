// model/loss_scaler.h: the loss scale of --fp16 training, megatron-core's grad scalers
// (megatron/core/optimizer/grad_scaler.py: ConstantGradScaler, DynamicGradScaler).
//
// Why: fp16 keeps 5 exponent bits, so a gradient value below 2^-24 (6e-8) flushes to zero and
// one below 2^-14 keeps fewer bits (a subnormal). Gradients of a language model are mostly tiny,
// so the backward pass multiplies the loss by a scale S (every gradient then S times larger,
// lifted out of the subnormals) and the optimizer divides it out again in fp32 (Micikevicius
// et al. 2018, "Mixed Precision Training", section 3.2). Too large an S overflows: some
// gradient becomes inf (above 65504) or NaN. Then the step is skipped, and S comes down.
//
// Megatron's dynamic scaler, exactly (update below): from initial_loss_scale (2^32),
//   an overflow:    growth_tracker = 0; hysteresis_tracker -= 1; when it is <= 0,
//                   scale = max(scale x 0.5, min_loss_scale)
//   a clean step:   growth_tracker += 1; when it reaches loss_scale_window (1000):
//                   growth_tracker = 0, hysteresis_tracker = hysteresis, scale = scale x 2
// so the hysteresis refills only on growth: from 2^32 with hysteresis 2, the steps overflow,
// clean, overflow, overflow leave the scale 2^32, 2^32, 2^31, 2^30 (the clean step between
// did not refill it; megatron-core's own scaler agrees, tests/test_loss_scaler.cpp). The scale
// is an fp32 number, as Megatron's tensor is (torch.float), so a min_loss_scale that is not a
// power of two rounds as it does there. DeepSpeed's consecutive_hysteresis (its fp16 block)
// refills the hysteresis on every clean step as well, so only consecutive overflows count.
// A static scale (--loss-scale S): S always; an overflow still skips the step.
//
// Who calls it: the optimizer (model/optimizer.h) finds the overflow (an inf or NaN in any
// gradient on any rank makes the global gradient norm, already reduced over every group, not
// finite: Megatron's found_inf, MAX-reduced, without a collective of its own), skips the step
// on one, and calls update() every step; the step multiplies the loss gradient by scale()
// (app/training_step.cpp). tests/test_loss_scaler.cpp replays megatron-core's own
// trajectories (tests/data/loss_scaler_megatron.txt, tests/scripts/loss_scaler.py).
//
// defines: LossScalerState, LossScaler
#pragma once
#include "model/config.h"  // LossScaleConfig

namespace paralab {

// What a checkpoint saves (Megatron's state_dict: scale, growth_tracker, hysteresis_tracker).
struct LossScalerState {
  float scale = 1.0f;
  int growth_tracker = 0;
  int hysteresis_tracker = 0;
};

class LossScaler {
 public:
  LossScaler() = default;  // no scaling: scale 1, update() changes nothing
  explicit LossScaler(const LossScaleConfig& c);
  bool dynamic() const { return dynamic_; }
  float scale() const { return state_.scale; }
  void update(bool found_inf);
  const LossScalerState& state() const { return state_; }
  void set_state(const LossScalerState& s) { state_ = s; }

 private:
  LossScaleConfig config_;
  bool dynamic_ = false;
  LossScalerState state_;
};

}  // namespace paralab
