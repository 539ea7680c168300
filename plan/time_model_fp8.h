// plan/time_model_fp8.h: what FP8 buys, projected: the step of plan/time_model.h with the
// linear layers' GEMMs at the profile's FP8 peak, plus the quantisation kernels FP8 adds. A
// PROJECTION of the recipe on the hardware, not a measurement (on a GPU the run's own step time
// is the measurement: docs/fp8.md); `--plan --fp8-format ...` prints it under the step's
// projection.
//
// Per linear layer, microbatch and rank 0 (one of plan/time_model.h's linears: qkv, proj, fc1,
// fc2, the experts' and the shared expert's fc1 and fc2; the router, the shared expert's gate,
// the attention core, the embedding and the head stay in high precision, as in Transformer
// Engine and DeepSeek-V3, arXiv:2412.19437 section 3.3):
//   GEMMs   fprop Y = X W^T, dgrad dX = dY W, wgrad dW = dY^T X: three GEMMs of the forward's
//           FLOPs F = 2 rows n k each, on HardwareProfile::gemm_seconds's curve at the FP8 peak
//           (fp8_tflops), moving 1-byte operands and an e-byte output, (rows k + n k) + e rows
//           n, against the run's own precision (e bytes each way, what plan/time_model.h costs)
//   casts   kernels/ops/fp8.h: Hopper's FP8 GEMM takes only K-contiguous operands, so each of
//           X (rows, k), W (n, k) per weight matrix and dY (rows, n) is cast twice, as stored
//           and transposed (fprop reads X, W; dgrad dY, W^T; wgrad dY^T, X^T): six casts, each
//           reading the e-byte tensor and writing its 1-byte codes, r c (e + 1) bytes (the bytes
//           kernels/ops/fp8.h's fp8_quantize and fp8_quantize_blocks count), plus its factors:
//             delayed      12 bytes (the scale read, the factor and the fused amax written)
//             tensorwise   12 bytes, and an amax pass first per tensor (fp8_amax: r c e + 4)
//             blockwise    4 bytes per factor: 1 x 128 tiles for X and dY, 128 x 128 blocks
//                          for W (fp8_scale_count)
//           memory-bound: bytes / (HBM x memory_efficiency) + one launch each (W: one per
//           weight matrix), HardwareProfile::memory_seconds.
// The FP8 step = the projected step - the linears' GEMMs in the run's precision + the same at
// the FP8 peak + the casts: rank 0's compute changes, the rest (communication, the bubble) is
// kept as projected (exact without pipelining; with it the schedule is not simulated again).
//
// defines: Fp8Casts, fp8_linear_casts, Fp8LinearTime, Fp8StepTime, project_fp8_step
#pragma once
#include <string>
#include <vector>

#include "measure/hardware.h"
#include "parallel/fp8_scaling.h"  // Fp8Recipe
#include "plan/plan.h"
#include "plan/time_model.h"

namespace paralab {

// One linear layer's quantisation kernels for one microbatch: X (rows, k), `weights` matrices
// W (n, k), dY (rows, n), stored in e bytes per element.
struct Fp8Casts {
  double bytes = 0;    // read and written
  double launches = 0;
};
Fp8Casts fp8_linear_casts(double rows, double n, double k, double weights, int e,
                          Fp8Recipe recipe);

// One linear row of the FLOPs plan (qkv, proj, fc1, ...), rank 0's step: all its layers on
// rank 0's stage, all microbatches.
struct Fp8LinearTime {
  std::string name;
  double gemm_high = 0;   // its three GEMMs in the run's precision, seconds
  double gemm_fp8 = 0;    // the same at the FP8 peak
  double cast_bytes = 0;  // its casts' bytes
  double casts = 0;       // and seconds
  double cast_launches = 0;
};

struct Fp8StepTime {
  std::string recipe;          // "delayed", "tensorwise", "blockwise"
  double high_peak_tflops = 0; // the run's precision's peak (StepTime::peak_tflops)
  std::string high_figure;     // which one ("bf16 dense")
  double fp8_peak_tflops = 0;  // the profile's fp8_tflops
  std::vector<Fp8LinearTime> linears;
  double gemm_high = 0, gemm_fp8 = 0, cast_bytes = 0, casts = 0, cast_launches = 0;  // summed
  double step_high = 0;        // the projected step (StepTime::step)
  double step_fp8 = 0;         // step_high - gemm_high + gemm_fp8 + casts
  std::vector<std::string> assumptions;
};

// Throws std::invalid_argument when the profile states no FP8 peak (fp8_tflops 0: before
// Ada and Hopper, no FP8 tensor cores).
Fp8StepTime project_fp8_step(const Plan& plan, const HardwareProfile& hw, const StepTime& base,
                             Fp8Recipe recipe);

}  // namespace paralab
