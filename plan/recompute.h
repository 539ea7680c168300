// plan/recompute.h: selective activation recompute in the plan (the options are
// model/config.h's Recompute; the layer that runs them is model/layer.cpp).
//
// Selective recompute keeps a layer's inputs and outputs but not the internals of the listed
// modules: layer_activation_tensors leaves them out, and backward makes them again. What is
// made again, and what the forward makes and uses at once, lives in ledger category
// `recompute`, only inside one layer:
//   attention block  norm1's statistics and output: from the norm to the qkv GEMM (forward),
//                    from their recompute to norm1's backward (backward);
//                    the core's internals (naive: P, and with attention dropout its mask and
//                    P'; flash: the log-sum-exp): through the attention forward, and from
//                    their recompute through the attention backward.
//                    The two never live together.
//   MLP block        norm2's statistics and output, fc1's output, the activation's output
//                    and, with sequence parallelism, fc1's all-gathered input (N h, backward
//                    only: the recompute gathered it, fc1's weight gradient reuses it instead
//                    of a second all-gather): together through the block, since backward
//                    needs all of them at its start.
//   peak of category recompute = max(norm1, core, norm2 + mlp [+ fc1_in])
// The peak of the total: the recompute peak falls inside the last layer, in its forward or
// its backward, when every layer's kept activations are alive but the head's tensors, the
// logits and --no-fused-ce's backward d(xf) are not: total_at_recompute = the model states,
// comm buffers and common workspace at their peaks + the embedding's and the layers'
// activations + the larger of: the forward's recompute buffers with the int32 tokens and
// targets (workspace_phases' forward), or the backward's (fc1_in included) without them.
// Exact with one microbatch in flight and no ZeRO-2/3 transients; with them on one stage
// plan/total.cpp replays each compute beside the buffers alive then (replayed_total).
//
// Full recompute (--recompute-granularity full, Recompute::full_groups): a group of layers
// keeps only its output (the next group's input) from forward to backward, and backward
// makes the group's activations again, all of them at once, before it goes down through
// them. These are activations (category activations): chunk_activations replays how
// model/transformer.cpp allocates and frees one (microbatch, chunk) and gives what it keeps
// and its peaks inside its forward and its backward; plan.cpp (one stage) and
// plan_pipeline (the schedule's replay) add them up.
//
// defines: RecomputeModule, recompute_module_of, is_recomputed, RecomputeBuffers,
//          recompute_buffers, selective_saved_bytes_per_layer, total_at_recompute,
//          korthikanti_check_recompute, ChunkActivations, chunk_activations
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "plan/plan.h"  // defines: ActivationTensor, MemoryPlan, Plan, KorthikantiCheck
#include "model/config.h"

namespace paralab {

// The module of a layer that owns a saved tensor, by its name in layer_activation_tensors.
enum class RecomputeModule { NONE, NORM1, CORE_ATTN, NORM2, MLP };
RecomputeModule recompute_module_of(const std::string& tensor_name);
// Whether m's selective recompute drops that module's tensors (NONE: never).
bool is_recomputed(const ModelConfig& m, RecomputeModule module);

// One layer's tensors in category recompute, grouped by what lives together (above).
struct RecomputeBuffers {
  std::vector<ActivationTensor> norm1, core, mlp_block;
  int64_t peak() const;          // max(norm1, core, mlp_block) in bytes
  int64_t forward_peak() const;  // the same without mlp.fc1_in (backward only)
};
// Same arguments as layer_activation_tensors (plan.h): one rank, one microbatch of B.
RecomputeBuffers recompute_buffers(const ModelConfig& m, int B, int act_bytes, int mask_bytes,
                                   int tp = 1, bool sp = false);
// Bytes per layer the selective options remove from the saved activations.
int64_t selective_saved_bytes_per_layer(const ModelConfig& m, int B, int act_bytes,
                                        int mask_bytes, int tp = 1, bool sp = false);

// The ledger's total while category recompute peaks (above); 0 when mem.recompute is 0.
// plan: its head activations and configuration; mem: the rank's other categories, filled.
int64_t total_at_recompute(const Plan& plan, const MemoryPlan& mem);

// korthikanti_check (plan.h) for the plan's recompute: with selective core_attn the
// closed form is Table 2's selective row (34sbh, sbh(10 + 24/t), 34sbh/t) for either
// attention, and the attention's own assumptions (naive, attention dropout) no longer
// matter; selective mlp and norm drop tensors the paper keeps: each is one difference.
KorthikantiCheck korthikanti_check_recompute(const Plan& plan);

// One (microbatch, chunk) of `groups.size()` layers (groups: Recompute::full_groups, all -1
// without full recompute): input (its first layer's input, kept), layer (one layer's saved
// tensors), out (a layer's output, N_l h), head (the head's, on the last model stage; 0
// elsewhere). A split backward (zb-h1's B, model/layer.h BackwardPart) makes w_copies bytes
// per layer for W before it frees the layer's tensors but w_keep. Bytes relative to what
// was alive before its forward.
struct ChunkActivations {
  int64_t kept = 0;            // from the end of its forward to its backward
  int64_t forward_peak = 0;    // the most alive during its forward
  int64_t layers_peak = 0;     // the same before the head (its loss) runs
  int64_t backward_peak = 0;   // the most alive during its backward (B)
  int64_t after_backward = 0;  // split: kept from B to W (every layer's w_keep)
};
ChunkActivations chunk_activations(const std::vector<int>& groups, int64_t input, int64_t layer,
                                   int64_t out, int64_t head, int64_t w_copies = 0,
                                   int64_t w_keep = 0, bool split = false);
// The same with each layer's own bytes (layers[i] for layer i of the chunk: MoE and dense
// layers differ, and an MoE layer's with its routing; split: w_copies[i] and w_keep[i] its
// copies and keep, since an MoE layer's B keeps less for W than a dense one's).
ChunkActivations chunk_activations(const std::vector<int>& groups, int64_t input,
                                   const std::vector<int64_t>& layers, int64_t out,
                                   int64_t head, const std::vector<int64_t>& w_copies = {},
                                   const std::vector<int64_t>& w_keep = {}, bool split = false);

}  // namespace paralab
