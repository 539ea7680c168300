// plan/layer_cost.h: the time model's compute side, per microbatch on one rank
// (plan/time_model.h): what one layer costs (its linears' GEMMs, the attention core, the
// memory-bound kernels, what recompute runs again on the backward's side) and what the head
// costs (final norm, output layer, loss), in seconds on a hardware profile, from the FLOPs
// plan's rows (one rank's share) and the kernel-traffic plan (plan/kernel_traffic.h).
// plan/time_model.cpp sums them into each model stage's F, B and W.
//
// defines: DeviceCost, LayerCost, layer_cost, HeadCost, head_cost
#pragma once
#include "measure/hardware.h"     // HardwareProfile, Precision
#include "plan/kernel_traffic.h"  // KernelTraffic, KernelTrafficPlan
#include "plan/plan.h"

namespace paralab {

// What one GEMM, attention pass or memory-bound kernel costs on the profile.
struct DeviceCost {
  const HardwareProfile& hw;
  Precision precision;
  double peak;  // FLOP/s
  double gemm(double flops, double bytes, double calls = 1) const {
    return calls > 0 ? calls * hw.gemm_seconds(flops / calls, bytes / calls, precision) : 0;
  }
  double attention(double flops, double launches) const {
    return flops / (peak * hw.attention_efficiency) + launches * hw.launch_overhead_us * 1e-6;
  }
  double memory(const KernelTraffic& t) const {
    return hw.memory_seconds(t.bytes, (double)t.launches);
  }
};

// One layer, one microbatch, seconds; gemm_* are also counted apart for the breakdown.
struct LayerCost {
  double forward = 0, input_grad = 0, weight_grad = 0, recompute = 0;
  double gemm = 0, attention = 0, memory = 0;  // of the above, by kind (recompute apart)
  double gemm_calls = 0, launches = 0;
  double core = 0;  // the attention core's forward and backward (flash or naive products)
};

// Layer l's seconds on the plan's rank (its share of the FLOPs plan), one microbatch.
LayerCost layer_cost(const Plan& plan, const DeviceCost& dev, const KernelTrafficPlan& traffic,
                     int l);

// The head (final norm, output layer, loss) of one microbatch: forward and backward GEMMs
// (the fused loss runs its backward GEMMs inside the forward, chunk by chunk).
struct HeadCost {
  double forward = 0, input_grad = 0, weight_grad = 0, gemm = 0, memory = 0;
  double gemm_calls = 0;
};
HeadCost head_cost(const Plan& plan, const DeviceCost& dev,
                   const KernelTrafficPlan& traffic);

}  // namespace paralab
