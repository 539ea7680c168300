// plan/fp8.h: what FP8 training (--fp8-format, docs/fp8.md) adds to a rank's memory, all in
// category workspace:
//   fp8.a, fp8.b                  the FP8 GEMMs' two operands (parallel/fp8_linear.h
//                                 Fp8Scratch), 1 byte per code, shared by every linear:
//                                 A holds X (N, in), dY (N, out) or dY^T (out, N), so
//                                 N max(in, out) codes; B holds W (out, in), W^T or X^T (in, N),
//                                 so max(out in, N in); the max over the layer's four linears
//                                 (qkv h -> qkv_l, proj a_l d -> h, fc1 h -> fc1_l, fc2 f_l -> h)
//   fp8.a_factors, fp8.b_factors  their fp32 factors: 1 per tensor (delayed, tensorwise), or
//                                 per 1 x 128 tile of X, dY and their transposes and per
//                                 128 x 128 block of W (blockwise: DeepSeek-V3 section 3.3.2),
//                                 the largest count of each operand's shapes
//   fp8.amax                      tensorwise: one amax and its scale (8 bytes)
//   fp8.history                   delayed: the amax histories and scales of the rank's linears,
//                                 4 (len + 1) x 3 per linear (forward: input and weight;
//                                 backward: output gradient), 4 linears per layer held here
//   fp8.cast_counts               --log-fp8-scaling: fp8_cast_count's two 8-byte counters
// N is the microbatch's tokens (S/cp per sequence), the linears' widths tp's local ones.
//
// And to its communication (model/transformer_fp8.cpp), MAX all-reduces of fp32 amaxes:
//   delayed     at each step's end, over tp (tp > 1), then over the data-parallel group (dp, or
//               dp x cp with context parallelism: the two make Megatron's amax reduction group,
//               tp x dp x cp): 2 calls on each, the forward amaxes (2 per linear) and the
//               backward ones (1 per linear): 4 x 3 x 4 bytes per layer held, per group
//   tensorwise  every cast, over tp, then cp (cp > 1): one fp32 each; a linear casts 6 tensors
//               per microbatch (fprop X and W, dgrad dY and W^T, wgrad dY^T and X^T), 2 more
//               when its forward runs again (full recompute: all 4 linears; selective mlp:
//               fc1)
//   blockwise   none (each block's amax is its own)
//
// defines: fp8_workspace_tensors, fp8_comm
#pragma once
#include <vector>

#include "plan/plan.h"

namespace paralab {

// Empty without --fp8-format. layers: the dense layers this rank holds.
std::vector<ActivationTensor> fp8_workspace_tensors(const ModelConfig& m, const LocalSizes& l,
                                                    int layers);
// Adds the rows above to comm. layers: the layer ids held here; recomputed: per global layer,
// whether full recompute runs its forward again; microbatches: the rank's per step.
void fp8_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m, int tp, int dp,
              const std::vector<int>& layers, const std::vector<bool>& recomputed,
              int64_t microbatches);

}  // namespace paralab
