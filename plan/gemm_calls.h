// plan/gemm_calls.h: the GEMM calls of one training step on one rank, per label, predicted
// from the configuration (kernels/ops.h counts them: gemm, gemm_strided_batched and
// gemm_grouped are one call each, under the GemmLabel in force).
//
// Per layer and microbatch (forward F, backward B = input gradient + weight gradient; a split
// backward, zb-h1, moves the weight gradients to W but makes the same calls):
//   attention      qkv and proj: 2 F + 4 B (tensor_parallel.cpp's column/row-parallel
//                  linears: 1 GEMM forward, dX and dW backward)
//                  naive attention: + 2 F (Q K^T, P V) + 4 B (dP', dV, dQ, dK), batched over
//                  (batch, query group) in ONE gemm_strided_batched each; flash: none (its
//                  kernels are not GEMM calls)
//   mlp            a dense layer's fc1 and fc2: 2 F + 4 B
//   router         a MoE layer's h -> E: 1 F + 2 B (fp32)
//   experts        fc1 (gate|up fused for SwiGLU, as Megatron's linear_fc1) and fc2:
//                  grouped (--moe-grouped-gemm)  2 F + 4 B gemm_grouped calls
//                  per expert                    (2 F + 4 B) x the experts with >= 1 row
//   shared_expert  fc1 and fc2: 2 F + 4 B; its gate (--moe-shared-expert-gate): + 1 F + 2 B
//   head           output layer: --no-fused-ce 1 F + 2 B per microbatch; the fused loss per
//                  chunk of min(N, --cross-entropy-chunk) tokens 1 F + 2 B (its backward runs
//                  inside the forward), ceil(N / chunk) chunks
//   other          nothing (the embedding is a lookup, the optimizer no GEMM)
// Recompute (plan/recompute.h), per recomputed layer and microbatch:
//   full           one more forward of the layer: attention 2 (+ 2 naive), mlp 2, router 1,
//                  experts 2 (grouped) or 2 x nonempty, shared expert 2 (+ 1 gate); layers
//                  per chunk from Recompute::full_groups (block: the first n of each chunk)
//   selective      core_attn with naive attention: Q K^T again (+1 attention); flash: none.
//                  mlp: fc1 again (+1 mlp; refused on MoE layers).
// A rank runs its pipeline stage's layers (PipelineStagePlan's chunks) and the head on the
// last stage only; tensor parallelism leaves the counts alone (same calls, smaller shapes).
//
// The experts' per-expert count depends on the routing. Exact when every expert has rows:
// --moe-pad-expert-input-to-capacity (each runs min(C, N) rows). Otherwise (dropless, or a
// capacity without padding: drops never empty an expert) the prediction is the EXPECTATION
// under uniform independent routing, N = B s tokens each picking k distinct experts of E:
//   E[experts with >= 1 row] = E (1 - (1 - k/E)^N)      per layer and microbatch
// and exact when given the measured counts: model/moe.h MoeLayerStats::nonempty_experts
// (summed over the step's microbatches, per layer; the recompute's forward routes the same).
//
// Alignment (unaligned_gemm_dims): the leading dimensions of a rank's GEMMs, a multiple of 8
// elements each (16 bytes of bf16) for cuBLAS to take its tensor-core kernels on Hopper (an
// output layer of 50257 columns fell back to sm75 kernels at a tenth of the rate: issue 26;
// Megatron pads the vocabulary for the same reason). They are the row widths of the tensors
// the products read and write: h; the rank's qkv, attention, fc1 and ffn widths; its
// vocabulary rows; and, by the path taken, the head dim and the keys of naive attention's
// batched products, the experts' count (the router's logits) and widths.
//
// defines: kGemmLabels, GemmCallPrediction, predict_gemm_calls, experts_grouped,
//          expected_nonempty_experts,
//          paper_per_expert_calls, unaligned_gemm_dims
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>
#include "plan/plan.h"  // Plan, PipelineStagePlan

namespace paralab {

// The labels the model uses, in kernels::gemm_counts()'s order (sorted).
constexpr int kNumGemmLabels = 7;
extern const char* const kGemmLabels[kNumGemmLabels];  // attention, experts, head, mlp, other,
                                                      // router, shared_expert

struct GemmCallPrediction {
  bool grouped = false;
  std::array<double, kNumGemmLabels> calls{};  // per step, this rank, by kGemmLabels
  bool experts_exact = true;  // false: "experts" is an expectation (dropless, per expert)
  double at(const std::string& label) const;  // 0 for an unknown label
  double total() const;
};

// Rank `rank`'s step (its pipeline stage). grouped: the --moe-grouped-gemm setting to predict
// for (not necessarily the plan's). nonempty: per layer (size num_layers), the measured
// MoeLayerStats::nonempty_experts of this step (summed over microbatches); nullptr: padded
// exact, else the expectation.
GemmCallPrediction predict_gemm_calls(const Plan& plan, bool grouped, int rank = 0,
                                      const std::vector<long long>* nonempty = nullptr);
// Whether the run's experts make grouped calls: --moe-grouped-gemm, and not in FP8, where each
// expert with rows is its own FP8 linear (model/moe.cpp; docs/fp8.md), one call per GEMM as
// without grouping.
inline bool experts_grouped(const ModelConfig& m) {
  return m.moe.grouped_gemm && !m.fp8.enabled;
}
// E (1 - (1 - k/E)^N) for N tokens; E with padding to capacity.
double expected_nonempty_experts(const Moe& moe, int64_t tokens);
// The course's per-expert count: MoE layers x E x projections x 3 (1 F + 2 B) per microbatch,
// every expert non-empty; projections 2 (paralab, Megatron: gate|up fused) or 3 (HF's gate,
// up, down unfused). Qwen3-30B-A3B: 48 x 128 x 2 x 3 = 36,864 (3 projections: 55,296); grouped
// 48 x 2 x 3 = 288.
int64_t paper_per_expert_calls(const ModelConfig& m, int projections, bool grouped);

// The leading dimensions of rank 0's GEMMs that are not multiples of 8 elements, each as
// "name value" (e.g. "head dim 12"); empty when every one is.
std::vector<std::string> unaligned_gemm_dims(const Plan& plan);

}  // namespace paralab
