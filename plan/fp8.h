// plan/fp8.h: what FP8 training (--fp8-format, docs/fp8.md) adds to a rank's memory, in two
// ledger categories of its own, both standing (allocated once, held for the whole run).
// Category fp8_operands: what the FP8 GEMMs read, one set shared by every dense linear and
// recast at each GEMM (Transformer Engine instead caches each weight's FP8 copy, and on
// Hopper its transpose, for the step: 1 byte x 2 per weight element; paralab casts W or W^T
// into fp8.b when the GEMM needs it, trading the cast's bytes for the copies' memory):
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
//   fp8.weight                    --fp8-param-gather at ZeRO-3: a gathered W's codes decoded
//                                 into the storage type for dgrad's W^T, es x the largest out in
// Category fp8_state: the scaling state (what the checkpoint saves, beside the model):
//   fp8.amax                      tensorwise: one amax and its scale (8 bytes)
//   fp8.history                   delayed: the amax histories and scales of the rank's linears,
//                                 4 (len + 1) x 3 per linear (forward: input and weight;
//                                 backward: output gradient), 4 linears per layer held here;
//                                 whole on every rank (not a ZeRO shard)
//   fp8.cast_counts               --log-fp8-scaling: fp8_cast_count's two 8-byte counters
//   experts' state                below
//   the FP8 gathers' scales       --fp8-param-gather: 3 fp32 per FP8 weight (below)
// fp16's loss scaler has no device bytes: its scale and two trackers are host numbers
// (model/loss_scaler.h), an overflow is found from the gradient norm's scalar (comm_buffers).
// N is the microbatch's tokens (S/cp per sequence), the linears' widths tp's local ones. In an
// MoE layer the dense linears are qkv and proj only (the MLP's fc1 and fc2 are the experts'):
// a model whose every layer is MoE leaves them out of the max.
//
// The experts (an MoE layer, model/moe.cpp; docs/fp8.md), per rank:
//   fp8.experts (workspace transient, plan/moe_memory.cpp)  the same two operands and factors
//                                 for the experts' fc1 (h -> fc1_e) and fc2 (f_e -> h) at R
//                                 rows (every local expert's n_e <= R), alive while the
//                                 experts' GEMMs run (forward and backward), 1/etp widths: a
//                                 transient of the MoE layer, in workspace with its others
//   experts' state (category fp8_state)  delayed: 4 (len + 1) x 3 per
//                                 expert linear, 2 per local expert (E/ep) of each MoE layer
//                                 held: Transformer Engine's GroupedLinear keeps one scaling
//                                 state per GEMM
//   delayed's reductions          per expert over the ranks that hold it, etp then edp (its
//                                 copies): 2 MAX all-reduces on each group of more than one
//                                 rank, 4 x 3 x 2 E/ep bytes per MoE layer held. Megatron
//                                 reduces over tp x dp x cp positionally (the same ranks
//                                 without ep; model/transformer_fp8.cpp)
//   tensorwise, blockwise         no reductions (GroupedLinear's current scaling has none)
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
// --fp8-param-gather (parallel/data_parallel.h Fp8ParamGather) at ZeRO-1, 2 and 3 (the MoE
// experts' weights too, each expert's fc1 and fc2 at its own scale):
//   fp8.weight                    ZeRO-3 only, fp8_operands (above): a gathered W's codes
//                                 decoded into the storage type for dgrad's W^T, es x the
//                                 largest out in (ZeRO-1/2 decode into the parameters and cast
//                                 the stored W: nothing to hold); the experts' own, in their
//                                 backward's workspace (fp8_expert_scratch_bytes)
//   the gathers                   a bucket's all-gather (ZeRO-3: a unit's, before each use;
//                                 ZeRO-1/2: of the updated slices, once per step) carries M_j
//                                 bytes per rank, M_j = max_r (slice es - (es - 1) f_r), f_r
//                                 the elements of the FP8 weights in rank r's slice
//                                 [r slice, (r + 1) slice) of bucket j (the others stay at es
//                                 bytes); about half the bf16 bytes (NeMo: "reducing the
//                                 all-gather overhead by half"), a quarter of fp32's
//   fp8_state                     3 fp32 per FP8 weight (its scale, factor, amax): 12 per
//                                 dense layer
//   comm_buffers                  the staging: max_j M_j sent, dp max_j M_j received (dp > 1),
//                                 once per gather in flight: ZeRO-3 the acquired unit and its
//                                 prefetch window (--zero3-prefetch-layers + 1), ZeRO-1/2 with
//                                 --overlap-param-gather two (each bucket's first use posts the
//                                 next), else one; at most one per FP8 bucket
//   tensorwise                    per FP8 unit gathered (ZeRO-3: each gather; ZeRO-1/2: once
//                                 per step) one MAX all-reduce of its n amaxes over the ZeRO
//                                 group (dp > 1: Megatron's current scaling of the shards;
//                                 the experts' vector: edp), then of its dense weights' over
//                                 tp and cp (the pieces; the experts' have none); the
//                                 weights' own casts (fprop W, dgrad W^T, a recomputed
//                                 fprop's W) reduce nothing: they use the gathered scale
// ZeRO-1/2 keep the storage-type weights (the other ranks' slices decoded from their codes)
// where Megatron keeps FP8 model weights only (docs/megatron.md): the wire halves, the memory
// does not. The trainer gathers once before step 1 too (outside the step's bytes), so that
// every step reads gathered weights: the bytes above are each step's.
//
// defines: Fp8ScratchSize, fp8_scratch_size, Fp8Memory, fp8_memory,
//          fp8_expert_scratch_bytes, fp8_expert_state_bytes, fp8_comm, fp8_gathered_weights,
//          fp8_gather_comm, Fp8GatheredWeight, fp8_gather_messages, fp8_gather_comm_buffers,
//          plan_fp8_param_gather
#pragma once
#include <utility>
#include <vector>

#include "model/param_table.h"  // ParamSpec
#include "plan/plan.h"

namespace paralab {

// An Fp8Scratch (parallel/fp8_linear.h) for linears (in, out) at N rows: codes (1 byte) and
// fp32 factors of its two operands.
struct Fp8ScratchSize {
  int64_t a = 0, b = 0, a_factors = 0, b_factors = 0;
  int64_t bytes() const { return a + b + 4 * (a_factors + b_factors); }
};
Fp8ScratchSize fp8_scratch_size(const Fp8Config& c, int64_t N,
                                const std::vector<std::pair<int64_t, int64_t>>& linears);
// The experts' scratch at R rows (0 without --fp8-format); fc1, f: the rank's slices;
// decoded_es: --fp8-param-gather at ZeRO-3's backward, an expert's decoded weight (the larger
// of fc1's and fc2's, es bytes per element), else 0.
int64_t fp8_expert_scratch_bytes(const ModelConfig& m, int64_t R, int64_t fc1, int64_t f,
                                 int decoded_es);
// The experts' delayed-scaling state: 2 linears per local expert of each MoE layer held.
int64_t fp8_expert_state_bytes(const ModelConfig& m, int local_experts, int moe_layers);

// A rank's two categories: the dense linears' tensors above (layers: the layers this rank
// holds; act_bytes: the storage type's bytes, fp8.weight), the experts' state (local_experts per MoE
// layer, moe_layers held) and the FP8 gathers' state (gather_state: DataParallelPlan::
// fp8_state_bytes, plan_fp8_param_gather);
// zero_stage: fp8.weight is ZeRO-3's alone.
struct Fp8Memory {
  int64_t operands = 0, state = 0;
};
Fp8Memory fp8_memory(const ModelConfig& m, const LocalSizes& l, int layers, int act_bytes,
                     int local_experts, int moe_layers, int64_t gather_state,
                     int zero_stage);
// Adds the rows above to comm, but the gathers' (fp8_gather_comm). layers: the layer ids held
// here; recomputed: per global layer, whether full recompute runs its forward again;
// microbatches: the rank's per step; p: the expert grid (etp, ep, edp) for the experts'
// reductions.
void fp8_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m, int tp, int dp,
              const ParallelConfig& p, const std::vector<int>& layers,
              const std::vector<bool>& recomputed, int64_t microbatches);
// --fp8-param-gather, tensorwise and blockwise: the rows of d's gathers (plan_fp8_param_gather),
// each a MAX all-reduce of its unit's amaxes (blockwise: one per 128 x 128 block) over the ZeRO
// group (zero_ranks ranks: dp x cp, or edp for the experts' vector), then, tensorwise, its
// dense weights' over tp and cp.
void fp8_gather_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m,
                     const DataParallelPlan& d, CommGroup zero_group, int zero_ranks, int tp);
// The FP8 weights of `table`, flat [begin, end): each dense linear's (the four of a dense
// layer, qkv and proj of an MoE layer) and each local expert's fc1 and fc2 (expert), what the
// gathers carry in FP8; cols: its columns (in), its 128 x 128 blocks' layout.
struct Fp8GatheredWeight {
  int64_t begin = 0, end = 0;
  bool expert = false;
  int64_t cols = 0;
  bool operator==(const Fp8GatheredWeight& o) const {
    return begin == o.begin && end == o.end && expert == o.expert && cols == o.cols;
  }
};
std::vector<Fp8GatheredWeight> fp8_gathered_weights(const std::vector<ParamSpec>& table);
// Per bucket of `l` (the layout over `table`'s flat vector; ZeRO-3: one per unit), M_j above,
// 0 for a bucket without FP8 weights; es: the storage type's bytes.
std::vector<int64_t> fp8_gather_messages(const std::vector<ParamSpec>& table,
                                         const BucketLayout& l, int es);
// The comm_buffers bytes above (0 without --fp8-param-gather: no messages): the staging,
// fp8_staging_pairs (parallel/data_parallel.h) pairs sized for the largest message.
int64_t fp8_gather_comm_buffers(const std::vector<int64_t>& messages, int dp, int zero_stage,
                                const PlanOptions& o);
// --fp8-param-gather on `d`, the data parallelism of `table`'s flat vector (the whole model's,
// a pipeline stage's, or the experts'; its units from unit_begin) at ZeRO stage zero_stage:
// sets d.fp8_message (fp8_gather_messages; empty without the flag or at ZeRO 0), the gathers'
// state (12 bytes per scale value: a scale, factor and amax per FP8 weight, blockwise per 128
// x 128 block of each, kernels::fp8_scale_count; category fp8_state) and the
// step's gathers of units with FP8 weights for fp8_gather_comm: ZeRO-1/2 each such unit once,
// after the optimizer's step; ZeRO-3 each one's gathers in d.sim (forward, backward, and full
// recompute's again).
void plan_fp8_param_gather(DataParallelPlan& d, const ModelConfig& m,
                           const std::vector<ParamSpec>& table,
                           const std::vector<int64_t>& unit_begin, int zero_stage, int es);

}  // namespace paralab
