// model/loss_scaler.cpp: see loss_scaler.h.
#include "model/loss_scaler.h"
#include <algorithm>

namespace paralab {

// megatron-core's DynamicGradScaler.__init__: the scale and min_scale as fp32 tensors, the
// growth tracker at 0, the hysteresis tracker full; ConstantGradScaler: the scale alone.
LossScaler::LossScaler(const LossScaleConfig& c) : config_(c), dynamic_(c.loss_scale <= 0) {
  state_.scale = (float)(dynamic_ ? c.initial_loss_scale : c.loss_scale);
  state_.growth_tracker = 0;
  state_.hysteresis_tracker = c.hysteresis;
}

// DynamicGradScaler.update(found_inf), with growth_factor 2 and backoff_factor 0.5 (Megatron
// builds it so: megatron/core/optimizer/__init__.py), and DeepSpeed's consecutive hysteresis.
void LossScaler::update(bool found_inf) {
  if (!dynamic_) return;
  LossScalerState& s = state_;
  if (found_inf) {
    s.growth_tracker = 0;
    s.hysteresis_tracker -= 1;
    if (s.hysteresis_tracker <= 0) s.scale = std::max(s.scale * 0.5f, (float)config_.min_loss_scale);
    return;
  }
  s.growth_tracker += 1;
  if (config_.consecutive_hysteresis) s.hysteresis_tracker = config_.hysteresis;
  if (s.growth_tracker == config_.loss_scale_window) {
    s.growth_tracker = 0;
    s.hysteresis_tracker = config_.hysteresis;
    s.scale = s.scale * 2.0f;
  }
}

}  // namespace paralab
