// parallel/fp8_log.h: what --log-fp8-scaling records of a step's FP8 casts: the scaling state
// the lesson reads to see delayed scaling lag (lessons/11-low-precision). Fp8Scaling fills one
// Fp8TensorLog per linear and tensor role (parallel/fp8_scaling.h); the model folds them per
// linear kind over its stage's layers (Fp8StepLog), the MoE experts' over the rank's local
// experts too (experts.fc1, experts.fc2); --metrics-jsonl's "fp8_scaling" and TensorBoard
// print the kinds the rank cast this step (docs/output.md).
//
// Per tensor, this step:
//   amax       the tensor's amax: delayed scaling's recorded one, reduced over the amax group
//              (what the next scale comes from); tensorwise's, reduced over the ranks holding
//              pieces, the largest over the step's casts
//   scale      the scale its casts used: delayed, the one the history gave at the step's start;
//              tensorwise, max / amax of each cast, the smallest over the casts
//   saturated  values the casts clipped to +-max (kernels::fp8_saturates of x * scale)
//   flushed    nonzero values the casts made zero
//   elements   values counted: each cast of the plain copy (fprop's X and W, dgrad's dY), once per
//              microbatch (again when a recompute runs the forward again); the transposed
//              copies hold the same values at the same scale and are not counted twice
// Folded over layers (and local experts): amax the max, scale the min, counts summed. For delayed scaling the fold
// keeps the recipe's formula, scale = (max / amax) / 2^margin: division by a positive amax is
// monotone, so the smallest scale is the one from the largest amax. Counts are this rank's (its
// tp shard, its stage's layers, its local experts); amaxes and scales are the same on every
// rank of the group (an expert's: on the ranks that hold it).
//
// defines: Fp8TensorLog, kFp8DenseKinds, kFp8LinearKinds, kFp8Roles, fp8_linear_kind_name,
//          fp8_role_name, Fp8StepLog
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>

namespace paralab {

struct Fp8TensorLog {
  float amax = 0.0f;
  float scale = 0.0f;  // 0: nothing cast (no casts folded in)
  int64_t saturated = 0, flushed = 0, elements = 0;
  // Another cast, or another layer's tensor of the same kind and role.
  void fold(const Fp8TensorLog& o) {
    amax = std::max(amax, o.amax);
    if (o.scale > 0.0f) scale = scale > 0.0f ? std::min(scale, o.scale) : o.scale;
    saturated += o.saturated;
    flushed += o.flushed;
    elements += o.elements;
  }
};

// A layer's linears in the model's numbering (model/transformer_fp8.cpp: linear 4 i + kind of
// layer i), then the MoE experts' two, kinds kFp8DenseKinds + 0 and + 1 (their own scaling:
// linear 2 j + 0 or 1 of local expert j), and the roles in parallel/fp8_scaling.h's Fp8Role
// order.
constexpr int kFp8DenseKinds = 4, kFp8LinearKinds = 6, kFp8Roles = 3;
inline const char* fp8_linear_kind_name(int kind) {
  static const char* const names[kFp8LinearKinds] = {"qkv", "proj", "fc1", "fc2",
                                                     "experts.fc1", "experts.fc2"};
  return names[kind];
}
inline const char* fp8_role_name(int role) {
  static const char* const names[kFp8Roles] = {"input", "weight", "output_grad"};
  return names[role];
}

// One step's log, per linear kind and role; `on` false: not logged (no --log-fp8-scaling).
struct Fp8StepLog {
  bool on = false;
  std::array<Fp8TensorLog, kFp8LinearKinds * kFp8Roles> tensors{};
  Fp8TensorLog& at(int kind, int role) { return tensors[kind * kFp8Roles + role]; }
  const Fp8TensorLog& at(int kind, int role) const { return tensors[kind * kFp8Roles + role]; }
  // Whether the rank cast tensors of this kind this step (every held linear does, each
  // microbatch): a dense model has no experts' kinds, an all-MoE one no fc1, fc2 (their
  // delayed slots exist, unused, with scale 1).
  bool holds(int kind) const {
    for (int r = 0; r < kFp8Roles; ++r)
      if (at(kind, r).elements > 0) return true;
    return false;
  }
};

}  // namespace paralab
