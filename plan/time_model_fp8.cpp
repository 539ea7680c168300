// plan/time_model_fp8.cpp: see time_model_fp8.h for the costs and the sources.
#include "plan/time_model_fp8.h"

#include <stdexcept>

#include "kernels/fp8.h"     // Fp8Blocks, fp8_scale_count
#include "plan/gemm_calls.h"  // expected_nonempty_experts

namespace paralab {

namespace {

// The factors one cast of an (r, c) matrix writes, bytes: a per-tensor cast reads its scale and
// writes its factor and (delayed scaling's fused amax) the amax, 3 floats; a block cast writes
// one float per block (kernels/ops/fp8.h's byte counts).
double factor_bytes(Fp8Recipe recipe, kernels::Fp8Blocks blocks, double r, double c) {
  if (recipe != Fp8Recipe::Blockwise) return 12;
  return 4.0 * (double)kernels::fp8_scale_count(blocks, (int)r, (int)c);
}

// A linear of the FLOPs plan: its output width n, the width k it reduces over, its GEMM calls
// per microbatch and layer (one per non-empty expert without grouped GEMMs) and its weight
// matrices (the rank's experts).
struct LinearShape {
  const char* name;
  double n, k, calls, weights;
  bool moe;  // in the MoE layers (else the dense layers' MLP, or every layer's attention)
  bool every_layer;
};

}  // namespace

Fp8Casts fp8_linear_casts(double rows, double n, double k, double weights, int e,
                          Fp8Recipe recipe) {
  using kernels::Fp8Blocks;
  // an (r, c) tensor cast as stored and transposed: 2 r c (e + 1) bytes and both copies' factors
  auto both = [&](double r, double c, Fp8Blocks blocks) {
    return 2 * r * c * (e + 1) + factor_bytes(recipe, blocks, r, c) +
           factor_bytes(recipe, blocks, c, r);
  };
  Fp8Casts out;
  out.bytes = both(rows, k, Fp8Blocks::Tiles) + weights * both(n, k, Fp8Blocks::Blocks) +
              both(rows, n, Fp8Blocks::Tiles);
  out.launches = 2 * (2 + weights);
  if (recipe == Fp8Recipe::Tensorwise) {  // current scaling: each tensor's amax first
    out.bytes += (rows * k + weights * n * k + rows * n) * e + 4 * (2 + weights);
    out.launches += 2 + weights;
  }
  return out;
}

Fp8StepTime project_fp8_step(const Plan& plan, const HardwareProfile& hw, const StepTime& base,
                             Fp8Recipe recipe) {
  if (hw.fp8_tflops <= 0)
    throw std::invalid_argument(hw.file + ": the profile states no fp8_tflops (FP8 tensor "
                                "cores arrive with Ada and Hopper, compute capability 8.9)");
  const ModelConfig& m = plan.model;
  const Precision precision = plan.train.precision();
  const int e = plan.train.half() ? 2 : 4;
  const LocalSizes ls = local_sizes(m, plan.train.micro_batch_size, plan.tp,
                                    plan.sequence_parallel);
  const double h = (double)m.hidden_size;
  const double etp = plan.parallel.expert_tensor_parallel;
  const double experts = m.moe.enabled() ? (double)m.moe.num_experts /
                                               plan.parallel.expert_parallel : 0;
  const double expert_calls =
      m.moe.grouped_gemm || !m.moe.enabled() ? 1 : expected_nonempty_experts(m.moe, ls.N);
  const LinearShape shapes[] = {
      {"qkv", (double)ls.qkv, h, 1, 1, false, true},
      {"proj", h, (double)(ls.heads * ls.head_dim), 1, 1, false, true},
      {"fc1", (double)ls.fc1, h, 1, 1, false, false},
      {"fc2", h, (double)ls.ffn, 1, 1, false, false},
      {"experts.fc1", m.moe_fc1_size() / etp, h, expert_calls, experts, true, false},
      {"experts.fc2", h, m.moe_ffn() / etp, expert_calls, experts, true, false},
      {"shared.fc1", (double)m.shared_fc1_size(), h, 1, 1, true, false},
      {"shared.fc2", h, (double)m.moe.shared_expert_size, 1, 1, true, false},
  };

  // rank 0's layers (its stage's chunks) and microbatches per chunk, as project_step_time
  // counts them
  double dense_layers = 0, moe_layers = 0;
  const PipelinePlan& pipe = plan.pipeline;
  std::vector<int> first{0}, count{m.num_layers};
  if (!pipe.stages.empty()) {
    first = pipe.stages.at(0).chunk_first_layer;
    count = pipe.stages.at(0).chunk_layers;
  }
  for (size_t c = 0; c < first.size(); ++c)
    for (int l = first[c]; l < first[c] + count[c]; ++l)
      (m.moe.is_moe_layer(l) ? moe_layers : dense_layers) += 1;
  const double microbatches = (double)plan.microbatches_per_rank /
                              (pipe.shape.placement() == StagePlacement::MIRRORED ? 2 : 1);

  Fp8StepTime t;
  t.recipe = fp8_recipe_name(recipe);
  t.high_peak_tflops = base.peak_tflops;
  t.high_figure = base.peak_figure;
  t.fp8_peak_tflops = hw.fp8_tflops;
  for (const LinearShape& s : shapes) {
    const MatmulFlops* row = nullptr;
    for (const MatmulFlops& mm : plan.flops.matmuls)
      if (mm.name == s.name) row = &mm;
    const double layers =
        s.every_layer ? dense_layers + moe_layers : s.moe ? moe_layers : dense_layers;
    if (!row || row->layers == 0 || layers == 0 || s.n <= 0 || s.k <= 0) continue;
    // one layer, one microbatch: the forward's FLOPs (a third of the row's hardware FLOPs,
    // as plan/layer_cost.cpp's LayerCoster::linear) and the rows they come from
    const double fwd = row->hardware / 3.0 / row->layers;
    const double rows = fwd / (2 * s.n * s.k);
    const double per_call = rows / s.calls;
    const double high_bytes = e * (per_call * s.k + s.k * s.n + per_call * s.n);
    const double fp8_bytes = per_call * s.k + s.k * s.n + e * per_call * s.n;
    const double scale = layers * microbatches;
    Fp8LinearTime lt;
    lt.name = s.name;
    lt.gemm_high = scale * 3 * s.calls * hw.gemm_seconds(fwd / s.calls, high_bytes, precision);
    lt.gemm_fp8 = scale * 3 * s.calls * hw.gemm_seconds_at(hw.fp8_tflops, fwd / s.calls, fp8_bytes);
    const Fp8Casts casts = fp8_linear_casts(rows, s.n, s.k, s.weights, e, recipe);
    lt.cast_bytes = scale * casts.bytes;
    lt.cast_launches = scale * casts.launches;
    lt.casts = scale * hw.memory_seconds(casts.bytes, casts.launches);
    t.gemm_high += lt.gemm_high, t.gemm_fp8 += lt.gemm_fp8;
    t.cast_bytes += lt.cast_bytes, t.casts += lt.casts, t.cast_launches += lt.cast_launches;
    t.linears.push_back(lt);
  }
  t.step_high = base.step;
  t.step_fp8 = base.step - t.gemm_high + t.gemm_fp8 + t.casts;
  t.assumptions = {
      "a projection: no GPU has timed paralab's FP8 training yet (docs/fp8.md); the CPU and "
      "emulated runs check its numbers, not its speed",
      "FP8 GEMMs reach the fraction of fp8_tflops the 16-bit ones reach of theirs "
      "(gemm_efficiency, gemm_half_gflop)",
      "the weights are cast every microbatch (Transformer Engine casts them once per step, "
      "is_first_microbatch: fewer cast bytes with gradient accumulation)",
      "recompute's GEMMs, the amax reductions and the scale updates are left as projected",
  };
  if (recipe == Fp8Recipe::Blockwise)
    t.assumptions.push_back(
        "block-scaled GEMMs at the FP8 peak, as a fused kernel runs them (DeepGEMM); paralab's "
        "own is emulated on every GPU (dequantise, fp32 GEMM: kernels/cuda/fp8_gemm.cu), slower");
  if (pipe.shape.p > 1)
    t.assumptions.push_back(
        "pipelining: rank 0's change is taken off the simulated step; the schedule is not "
        "simulated again");
  return t;
}

}  // namespace paralab
