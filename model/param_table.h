// model/param_table.h: the table of every parameter tensor (name, shape, weight decay).
//
// One source: the model carves its parameter and gradient buffers from this table in
// order, plan/ counts parameters from it, and the golden files and checkpoints
// name tensors by it. Pure arithmetic on ModelConfig: no kernels, no allocation.
//
// Names and shapes (h hidden, f ffn, V vocab, s seq, a heads, g groups, d = h/a), in table
// order; within a unit, the tensors replicated over tensor parallelism first:
//   embedding.position        (s, h)                 gpt only (learned positions)
//   embedding.word            (V, h)
//   layers.{i}.norm1.weight   (h)        .bias (h)   bias: gpt only (LayerNorm)
//   layers.{i}.norm2.weight   (h)        .bias (h)   gpt only
//   layers.{i}.attn.proj.bias (h), layers.{i}.mlp.fc2.bias (h)    gpt only
//   layers.{i}.attn.qkv.weight ((a+2g)d, h)  .bias ((a+2g)d)  gpt only
//        rows grouped per query group: [a/g query heads | key head | value head] x g
//   layers.{i}.attn.proj.weight (h, a d)
//   layers.{i}.mlp.fc1.weight (f, h) gpt | (2f, h) llama, rows [gate | up]   .bias (f) gpt
//   layers.{i}.mlp.fc2.weight (h, f)
//   --qk-layernorm: layers.{i}.attn.q_norm.weight (d), .k_norm.weight (d) (+ .bias gpt),
//        after norm2 (replicated)
//   MoE layers (model/moe.h) replace mlp.fc1 / mlp.fc2 (and gpt's mlp.fc2.bias) by
//   layers.{i}.mlp.router.weight (E, h), .mlp.experts.fc1.weight (E, fc1_e, h) rows
//   [gate | up] per expert for llama, .mlp.experts.fc2.weight (E, h, f_e), and with a shared
//   expert .mlp.shared.fc1.weight (fc1_s, h), .mlp.shared.fc2.weight (h, f_s), with its gate
//   .mlp.shared.gate.weight (1, h). No biases on experts (Megatron's grouped experts). All
//   replicated over tp, they come right after the layer's norms and biases (before
//   attn.qkv): the unit's replicated prefix.
//   final_norm.weight (h)  .bias (h) gpt only
//   output.weight  (V, h)                            llama only (gpt ties embedding.word)
// Weight decay applies to the 2-D weights only (not to biases, norms), as in Megatron.
//
// Tensor parallelism (parallel/tensor_parallel.h) splits each tensor one way, TpSplit:
//   ROWS      column-parallel weights and biases: the output dimension (dim 0) in t
//             contiguous blocks. The fused QKV rows are grouped per query group, so a rank
//             gets whole groups (their a/g query heads with their key and value heads).
//   HALVES    llama's fc1 [gate | up]: rank r takes block r of the gate AND block r of the
//             up half, so SwiGLU pairs stay on one rank.
//   COLUMNS   row-parallel weights: the input dimension (dim 1) in t blocks.
//   VOCAB     embedding.word / output.weight: rows split over the vocabulary, padded to a
//             multiple of vocab_multiple x t (Megatron's --make-vocab-size-divisible-by);
//             the padding rows are drawn like the rest and masked out of the loss.
//   REPLICATED norms, position embedding, row-parallel biases: every rank holds all of it;
//             under sequence parallelism each rank sees only its tokens, so the gradients
//             of these are partial sums and are all-reduced over tp (sp_partial_grad).
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "model/config.h"

namespace paralab {

enum class TpSplit { REPLICATED, ROWS, HALVES, COLUMNS, VOCAB };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;  // full shape (param_table) or this rank's (local_param_table)
  bool weight_decay = false;
  TpSplit split = TpSplit::REPLICATED;
  bool expert = false;  // a routed expert's weights (mlp.experts.*): split over ep
  // An expert tensor's split of each expert over etp (as TpSplit over tp, on the expert's own
  // 2-D slice): fc1 ROWS (gpt) or HALVES (llama's [gate | up]), fc2 COLUMNS.
  TpSplit etp_split = TpSplit::REPLICATED;
  // VOCAB: the full rows are padded to a multiple of vocab_multiple x tp (padded_rows).
  int64_t vocab_multiple = 1;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Full shapes (what a single rank holds, checkpoints, golden files).
std::vector<ParamSpec> param_table(const ModelConfig& m);
// The shapes one of tp tensor-parallel ranks holds (every rank the same shapes); with ep
// expert-parallel ranks each holds E/ep experts of the expert tensors (dim 0), with etp
// 1/etp of each expert's width (etp_split).
std::vector<ParamSpec> local_param_table(const ModelConfig& m, int tp, int ep = 1,
                                         int etp = 1);
// The vocabulary rounded up to a multiple of --make-vocab-size-divisible-by x tp (Megatron's
// _vocab_size_with_padding): the rows the tp ranks hold together, Vp/tp each.
int64_t padded_vocab(const ModelConfig& m, int tp);
// A full tensor's rows as the tp ranks hold them together: VOCAB tensors padded as above,
// the others as they are.
int64_t padded_rows(const ParamSpec& full, int tp);
// Sum of numel over the full table: the parameter count Psi.
int64_t parameter_count(const ModelConfig& m);
// Where each unit starts in a rank's flat vector (size L+3, last = its parameter count):
// unit 0 the embedding, unit l+1 layer l, unit L+1 the head (final norm, output weight);
// parallel/buckets.h.
std::vector<int64_t> param_units(const ModelConfig& m, int tp = 1);

// ---- pipeline parallelism: the part of the model one pp rank holds -----------------------
// v chunks of consecutive layers (chunk c is model stage stage_of(r, c): c p + r looped, r and
// 2p - 1 - r in a V, the pair r, p - 1 - r mirrored; parallel/pipeline_schedule.h), the
// embedding on the rank of model stage 0 (in its chunk 0), the head (final norm, output
// weight) on the rank of the last (in its last chunk). gpt's tied output weight is
// embedding.word: a rank with the head and not the embedding keeps a copy of it, under the
// same name, at the end of its head unit; the two copies start equal and stay equal because
// their gradients are summed over the embedding group (Megatron's shared embedding). A V or
// mirrored rank 0 holds both ends and no copy. Units of a stage, in flat order: [embedding]
// layers... [head].
struct StageSlice {
  std::vector<int> chunk_first_layer, chunk_layers;  // per chunk
  bool embedding = true, head = true;
  bool tied_copy = false;
};
StageSlice whole_model(const ModelConfig& m);
// pp rank `rank` of the shape's pipeline (its chunks' model stages by the placement,
// parallel/pipeline_schedule.h); split: the uneven split's flags.
StageSlice pipeline_stage_slice(const ModelConfig& m, const PipelineShape& shape, int rank,
                                const StageSplit& split = {});
// This stage's tensors (tp-local shapes) in flat order, and where each of its units starts
// (size units + 1); the chunk of every unit (embedding: 0, head: the last chunk).
// Where a rank's expert tensors live: E/ep experts of each, in a flat vector of their own
// when `apart` (ParallelConfig::experts_apart: ep > 1 or etp != tp), else in the dense one.
struct ExpertSplit {
  int ep = 1;
  bool apart = false;
  int etp = 1;  // each expert's width split over etp ranks (fc1's rows, fc2's columns)
};
inline ExpertSplit expert_split(const ParallelConfig& p) {
  return {p.expert_parallel, p.experts_apart(), p.expert_tensor_parallel};
}
// With experts apart the expert tensors are not in this (the dense) flat vector but in the
// expert one below: parallel/data_parallel holds each, over dp x cp and over edp.
std::vector<ParamSpec> stage_param_table(const ModelConfig& m, int tp, const StageSlice& s,
                                         const ExpertSplit& x = {});
std::vector<int64_t> stage_units(const ModelConfig& m, int tp, const StageSlice& s,
                                 const ExpertSplit& x = {});
// ---- expert parallelism (parallel/expert_parallel.h): with the experts apart the stage's
// expert tensors (E/ep experts each) form a second flat vector whose units mirror
// stage_units' (the same count and order: the expert tensors of layer l in layer l's unit,
// every other unit empty), so both data parallelisms see the same calls. Otherwise they
// stay dense parameters (Megatron: only expert-parallel experts reduce over the
// expert-data-parallel group), and these are empty, as they are on a stage without MoE
// layers.
std::vector<ParamSpec> stage_expert_table(const ModelConfig& m, const StageSlice& s,
                                          const ExpertSplit& x);
std::vector<int64_t> stage_expert_units(const ModelConfig& m, const StageSlice& s,
                                        const ExpertSplit& x);
std::vector<int> stage_unit_chunk(const StageSlice& s);
// The units whose buckets data parallelism reduces only at the step's end: gpt's two copies
// of the word embedding (the embedding unit on the first stage, the head unit on the last)
// are summed over the embedding group first (DataParallelOptions::deferred_units).
std::vector<int> stage_deferred_units(const ModelConfig& m, const StageSlice& s);
// Whether the next stage's gradients come back to this stage: every stage but one that
// holds only the last model stage (it keeps a receive buffer for them).
inline bool receives_gradients(const StageSlice& s) {
  return !(s.head && s.chunk_layers.size() == 1);
}

// ---- shards: which part of a full tensor one rank's local tensor holds ---------------------
// tp rank tp_rank of tp, or (an expert tensor apart from the dense ones) ep rank ep_rank's
// experts, each cut to etp rank etp_rank's share of its width.
struct TensorSlice {
  bool expert = false;
  int tp = 1, tp_rank = 0;
  int ep = 1, ep_rank = 0, etp = 1, etp_rank = 0;
};
// The local tensor as rectangles of the full one: local elements local_offset + r cols + c
// (r < rows, c < cols) hold the full tensor's elements full_offset + r full_stride + c, in
// local order. ROWS, VOCAB: one contiguous block; HALVES: two (a block of the gate half, the
// same of the up half); COLUMNS: the rank's column block of every row; an expert tensor:
// each local expert's blocks. A VOCAB tensor's padding rows have full indices >= numel: no
// element of the full tensor, drawn at initialisation like the rest; a checkpoint's piece holds
// them (it is a range of the local tensor), a load drops them and sets them to 0. Every
// mapping below (shard_tensor, unshard_tensor, shard_indices, the device initialisation) is
// these blocks.
struct ShardBlock {
  int64_t local_offset = 0, rows = 1, cols = 0, full_offset = 0, full_stride = 0;
};
std::vector<ShardBlock> shard_blocks(const ParamSpec& full, const TensorSlice& slice);
int64_t shard_numel(const std::vector<ShardBlock>& blocks);  // the local tensor's elements

// Rank r's part of a full tensor (full.size() == numel of the full spec), and back: the
// inverse gathers every rank's part (parts[r]) into the full tensor, dropping vocab padding.
std::vector<float> shard_tensor(const ParamSpec& full, const std::vector<float>& values, int tp,
                                int rank);
std::vector<float> unshard_tensor(const ParamSpec& full,
                                  const std::vector<std::vector<float>>& parts);
// An expert tensor's experts [r E/ep, (r+1) E/ep) of ep rank r (a block of dim 0), each cut
// to etp rank t's share of its width (full.etp_split); and back, parts[r][t] being ep rank
// r's, etp rank t's.
std::vector<float> shard_experts(const ParamSpec& full, const std::vector<float>& values, int ep,
                                 int ep_rank, int etp, int etp_rank);
std::vector<float> unshard_experts(const ParamSpec& full,
                                   const std::vector<std::vector<std::vector<float>>>& parts);

// ---- the resharding map (checkpoint/checkpoint.h) -------------------------------------------
// For each element of a local tensor (shard_tensor's or shard_experts' order), its flat index
// in the full tensor, or -1 for a vocabulary padding row. A checkpoint names what each rank
// saved by (tensor, slice, local range); any other layout finds its elements through this
// map, so a save at one tp / ep / etp loads at another.
std::vector<int64_t> shard_indices(const ParamSpec& full, const TensorSlice& slice);

}  // namespace paralab
