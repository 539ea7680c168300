// plan/plan.h: the analytic model. From the configuration alone it predicts what
// every rank holds and computes; the report prints it beside what the run measured.
//
// Pure arithmetic on ModelConfig, TrainConfig, ParallelConfig (model/config.h) and the
// parameter table (model/param_table.h): no kernel, comm or model code, no allocation, so
// `trainer --plan` plans 1024 ranks on a laptop.
//
// Byte conventions (per parameter, Ψ parameters; ZeRO = Rajbhandari et al. SC20 §3.1):
//   fp32 (default, as Megatron): params 4, grads 4, master 0 (the fp32 params ARE the
//     master copy), Adam m and v 4 + 4 = 8.                      16 bytes/param
//   --bf16: params 2, grads 2, fp32 master 4, Adam 8: ZeRO's 2 + 2 + K with K = 12.
//                                                                 16 bytes/param
//   --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16: Adam
//     2 + 2 = 4 (DeepSeek-V3 §3.3.3 keeps bf16 moments): with --bf16 2 + 2 + 8.
//                                                                 12 bytes/param
// (Megatron's fp32-gradient convention, 18 bytes/param, is not ours: notes/formulas.md.)
// ZeRO stage z over N_d data-parallel ranks, in parallel/data_parallel's exact sizes: the
// flat vector is cut into buckets of whole units (parallel/buckets.h, --ddp-bucket-size;
// one unit per bucket at z = 3), each padded to N_d * slice, slice = ceil(n_j / N_d); the
// rank's shard is its slices, S = sum_j slice_j. Elements per rank (P = sum_j padded_j):
//   z   params                     grads                       master, Adam m and v
//   0   Ψ                          Ψ                           Ψ
//   1   P                          P                           S
//   2   P                          S + bucket buffers alive    S
//   3   S + gathered units alive   S + bucket buffers alive    S
// The transient terms are peaks found by simulating the model's calls of one step
// (parallel/zero_schedule.h) against data_parallel's policies (simulate_zero_step).
// Communication per step is predicted per (group, operation) the same way (DataParallelPlan).
//
// Tensor parallelism t (notes/model.md, "Tensor parallelism"; parallel/tensor_parallel.h):
// every count above is of the rank's LOCAL flat vector, local_param_table(m, t), whose
// vocabulary rows are padded to Vp = m t ceil(V/(m t)) (m: --make-vocab-size-divisible-by,
// 128 by default, as Megatron); ZeRO shards that vector over dp. With sequence parallelism
// the tensors between the blocks hold N_l = N/t tokens, else N; the attention and MLP
// internals hold all N tokens of the rank's a/t heads and f/t columns.
// Ranks: tp fastest, then cp, dp, pp: rank = tp_rank + t (cp_rank + cp (dp_rank + dp pp_rank)).
//
// Pipeline parallelism p (parallel/pipeline_schedule.h; plan/pipeline.cpp): each pp rank
// holds the units of its model chunks (the first the embedding, the last the head, and with
// gpt's tied embedding a copy of the word embedding for the head), and everything above is
// counted on that restricted local vector: ZeRO shards each stage's vector over dp. Its
// activations peak at the simulated schedule's held chunk-microbatches, each of them
// input (N_l h, received or the embedding's) + its layers (+ the head on the last stage).
// Communication: one N_l h activation per stage boundary and microbatch forward, one
// gradient backward, in the schedule's exchanges (one batched send/recv call each).
//
// defines: PlanOptions, ActivationTensor, MemoryPlan, RankPlan, CommPlanEntry,
//          ZeroStepSimulation, simulate_zero_step, DataParallelPlan, Plan, make_plan, the
//          activation list, ZeRO and Korthikanti closed forms, KorthikantiCheck,
//          add_comm, tensor_parallel_comm, workspace_bytes, ModelSlice, PipelineStagePlan,
//          PipelinePlan, plan_pipeline, data_parallel_plan, data_parallel_comm
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>
#include "measure/comm_stats.h"  // CommGroup, CommOp, bus_factor
#include "plan/flops.h"
#include "plan/moe_memory.h"  // MoeRouting, LayerFootprint
#include "model/config.h"
#include "parallel/buckets.h"        // BucketLayout, make_bucket_layout (pure arithmetic)
#include "parallel/offload.h"        // OffloadCopy, offloaded_elements, offload_copies (pure)
#include "parallel/pipeline_schedule.h"  // Schedule, simulate (pure)
#include "parallel/zero_schedule.h"  // DpCall, microbatch_calls (pure)

namespace paralab {

// What the plan needs beyond the three configuration structs (--recompute-* is in
// ModelConfig::recompute, which the layer code reads too).
struct PlanOptions {
  AttentionFlops attention_flops = AttentionFlops::FULL;  // --attention-flops
  int mask_bytes = 1;  // dropout masks: one byte per element (notes/model.md)
  // Data parallelism (parallel/data_parallel.h, DataParallelOptions); zero_stage is in
  // ParallelConfig. The trainer copies its flags here.
  bool overlap_grad_reduce = false;    // --overlap-grad-reduce: changes the stage 2-3 peaks
  bool overlap_param_gather = false;   // --overlap-param-gather: timing only, same bytes
  int64_t ddp_bucket_size = 40000000;  // --ddp-bucket-size, elements
  int zero3_prefetch_layers = 1;       // --zero3-prefetch-layers
  // Context parallelism: the cp rank the plan describes (ranks differ only with
  // --cp-layout contiguous: their attention work, and naive's probabilities).
  int cp_rank = 0;
  // The MPI backend runs a p2p ring's flash passes one (batch, query group) at a time
  // (parallel/attention_pass.cpp, flash_by_group): B G kernel launches a pass instead of
  // one, which plan/kernel_traffic.h counts. The trainer sets it with --comm mpi.
  bool flash_ring_by_group = false;
  // --no-save-optim: a checkpoint holds the parameters alone (plan/checkpoint.cpp).
  bool checkpoint_optimizer = true;
};

// One tensor the forward keeps for backward (notes/model.md, "What the model saves").
struct ActivationTensor {
  std::string name;
  int64_t elements = 0;
  int bytes_per_element = 4;
  bool norm_statistic = false;  // mean / rstd of a norm: Korthikanti's count omits these
  int64_t bytes() const { return elements * bytes_per_element; }
};

// The ledger's categories (measure/ledger.h, Category), same order, same names; kept
// here as plain fields so the plan needs no ledger (which includes kernels/common.h).
constexpr int kNumMemoryCategories = 11;
extern const char* const kMemoryCategoryNames[kNumMemoryCategories];

// CPU offload (parallel/offload.h): what a rank holds in host memory, bytes per category.
// H offloaded state elements (the dense vector's and the experts'), e the storage bytes:
// params H e (fp32: the master copy; bf16: AdamW's rounding; with offload_params the
// shard), grads H e, master_params H x 4 (bf16 only), optimizer_states H x 8: 16 H in both
// precisions. Allocated once: peak and resident alike. Zero without offload.
struct HostMemoryPlan {
  int64_t params = 0, grads = 0, master_params = 0, optimizer_states = 0;
  int64_t at(int category) const;  // by ledger Category index (0 beyond the four)
  int64_t total() const { return params + grads + master_params + optimizer_states; }
};

struct MemoryPlan {  // bytes on one rank, each the peak of its category in a step
  int64_t params = 0, grads = 0, master_params = 0, optimizer_states = 0;
  int64_t activations = 0;  // peak: microbatches_held x one microbatch's saved tensors
  int64_t recompute = 0, comm_buffers = 0, logits = 0, workspace = 0;
  // --fp8-format (plan/fp8.h): the FP8 GEMMs' operands (standing, shared by the linears) and
  // the scaling state (amax histories, scales, counters); 0 without FP8
  int64_t fp8_operands = 0, fp8_state = 0;
  // The ledger's total while the recompute buffers peak, inside a layer, when the head's
  // tensors and the logits are not alive (plan/recompute.h); 0 without recompute.
  int64_t total_at_recompute = 0;
  // Full recompute (one stage): the peak of the total, replayed by phase (plan.cpp); 0 else.
  int64_t total_full_recompute = 0;
  // A pipeline stage: the peak of the total replayed over its actions (plan/pipeline.cpp).
  int64_t total_stage = 0;
  // ZeRO-2/3 or a layer's workspace transients on one stage (no full recompute), or a
  // pipeline stage without recompute: the peak of the total replayed call by call with the
  // bucket and gather buffers and the layers' transients alive then (plan/total.cpp,
  // replayed_total, replayed_stage_total); 0 else.
  int64_t total_replayed = 0;
  // Held between steps (after the optimizer step), what the ZeRO paper tabulates per rank:
  // the params buffer and the grads buffer or shard without ZeRO-2/3's transient bucket and
  // gather buffers (DataParallelPlan::params_resident, grads_resident x bytes); master and
  // Adam states never change size, so theirs are the fields above. In bf16 (2 + 2 + 12) the
  // four sum to the paper's 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N for ZeRO 0..3 with Ψ
  // replaced by P = Σ_j N ceil(n_j / N) at stages >= 1 (each bucket j of n_j elements padded
  // to a multiple of N; S = P/N): padding adds (P - Ψ) x (4 + 12/N), (2 + 14/N), 16/N bytes.
  int64_t resident_params = 0, resident_grads = 0;
  HostMemoryPlan host;  // CPU offload: the host column (the categories above are the device's)
  int64_t fp8() const { return fp8_operands + fp8_state; }  // both standing: allocated once
  int64_t resident_total() const {
    return resident_params + resident_grads + master_params + optimizer_states;
  }
  int64_t at(int category) const;  // by ledger Category index
  // The peak of the total: the sum of the categories but recompute (all live at the end of
  // forward), or total_at_recompute when larger; with full recompute on one stage, the
  // phase replay (its activations peak inside a backward, when the logits are gone); with
  // ZeRO-2/3 total_replayed where it is made; else a stage's total_stage. Exact (the
  // ledger's peak to the byte) but where a replay holds a transient at its peak, an upper
  // bound: ZeRO-2/3's buffers in total_stage (recompute) and total_full_recompute,
  // and selective recompute's in total_stage (report_impl.h, total_is_exact).
  int64_t total() const;
};

struct RankPlan {
  int rank = 0;
  int tp_rank = 0;
  int cp_rank = 0;
  int dp_rank = 0;
  int pp_rank = 0;
  int64_t params = 0;         // parameters of the model slice this rank computes with
                              // (its local table: vocabulary padding included)
  int64_t params_stored = 0;  // elements in its params buffer (ZeRO-3 shard, padding)
  int microbatches_held = 1;  // activations alive at the peak: (microbatch, chunk) pairs
  MemoryPlan memory;
  // Its shard of a checkpoint (checkpoint/checkpoint.h), tensor data: the owned elements (DDP: dp
  // rank 0 alone; ZeRO >= 1: its slices) x (storage bytes + 8 for Adam's m and v + 4 for the
  // bf16 master), plus 4 E per MoE layer's expert bias on dense replica 0, tp rank 0.
  int64_t checkpoint_bytes = 0;
};

// One (group, operation) of the communication of one step on one rank.
struct CommPlanEntry {
  CommGroup group = CommGroup::DP;
  CommOp op = CommOp::ALL_REDUCE;
  int64_t calls = 0;
  int64_t payload_bytes = 0;  // measure/comm_stats.h's payload convention
  double bus_bytes = 0;       // payload x bus_factor(op, group size)
};

// What data_parallel does over one step of `microbatches` microbatches, each making the
// calls `microbatch` (zero_schedule.h): elements, not bytes.
struct ZeroStepSimulation {
  int64_t params_transient_peak = 0;  // ZeRO-3: gathered unit buffers alive at once, max
  int64_t grads_transient_peak = 0;   // ZeRO-2/3: bucket gradient buffers alive at once, max
  int64_t gathers = 0;                // ZeRO-3: parameter all-gathers posted (prefetch too)
  int64_t gathered_elements = 0;      //   their padded sizes, summed
  int64_t grad_reductions = 0;        // ZeRO-2/3: per-microbatch reduce-scatters
  int64_t grad_reduced_elements = 0;  //   their padded sizes, summed
  std::vector<int64_t> gathers_of;    // ZeRO-3: the gathers of each unit
  std::vector<int64_t> reductions_of;  //   per bucket (CPU offload's copies down)
};
// Replays data_parallel.cpp's policies (stage 2-3 only; stages 0-1 have no transients):
// a bucket buffer is allocated at the first grads(u) of a unit in it, freed when its
// reduce-scatter completes (at once, or with overlap when the next bucket is posted or at
// backward_done(0)); a unit is gathered when acquired or prefetched while not resident, and
// freed when its last reference is released. Throws std::invalid_argument on a call
// sequence data_parallel would reject.
// A pipeline stage passes its whole step as one list (microbatches = 1, BEGIN_MICROBATCH
// before each action), the chunk of each unit and the deferred units (DataParallelOptions).
// trace (optional): after each call of the step (microbatches x calls), the elements of the
// gathered units and of the bucket buffers alive then: {params, grads} (zero_stage >= 2).
ZeroStepSimulation simulate_zero_step(const BucketLayout& layout,
                                      const std::vector<DpCall>& microbatch, int zero_stage,
                                      bool overlap_grad_reduce, int prefetch,
                                      int64_t microbatches,
                                      const std::vector<int>& unit_chunk = {},
                                      const std::vector<int>& deferred_units = {},
                                      std::vector<std::array<int64_t, 2>>* trace = nullptr);

// The data-parallel part of the plan (identical on every dp rank).
struct DataParallelPlan {
  BucketLayout layout;            // from param_units, as DataParallel builds it
  std::vector<DpCall> microbatch;  // the model's calls in one microbatch
  ZeroStepSimulation sim;
  std::vector<std::array<int64_t, 2>> trace;  // simulate_zero_step's, z >= 2 (else empty)
  int64_t state_numel = 0;        // elements of each optimizer state (Ψ or S)
  int64_t params_resident = 0;    // elements held the whole step (params buffer)
  int64_t grads_resident = 0;     // elements held the whole step (grads buffer or shard)
  // CPU offload (parallel/offload.h): the host buckets (their state ranges, in reduction
  // order) and their H state elements; at ZeRO-2/3 the host's landing buffer of the largest
  // host slice (elements); the ZeRO-3 shard on the host (offload_params)
  int64_t host_numel = 0;
  int64_t host_landing = 0;
  bool params_on_host = false;
  std::vector<OffloadCopy> copies;
  // --fp8-param-gather (plan/fp8.h fp8_gather_messages): per bucket (ZeRO-3: per unit), the
  // bytes each rank sends in one of its gathers, 0 for a bucket gathered in the storage type
  // (empty: every bucket). The step's gathers of units with FP8 weights, the bytes of their
  // amaxes (4 per weight, blockwise per 128 x 128 block: the MAX all-reduce over the ZeRO
  // group of tensorwise and blockwise), tensorwise's gathers of units with dense FP8 weights
  // and those weights' amax bytes (reduced again over tp and cp), and the gathers' state, 12
  // bytes per scale value (plan/fp8.h plan_fp8_param_gather)
  std::vector<int64_t> fp8_message;
  int64_t fp8_gathers = 0, fp8_amax_bytes = 0, fp8_piece_calls = 0, fp8_piece_bytes = 0;
  int64_t fp8_state_bytes = 0;
};

// One pipeline stage (pp rank); every tp and dp rank of it holds the same.
struct PipelineStagePlan {
  int pp_rank = 0;
  std::vector<int> chunk_first_layer, chunk_layers;  // chunk c is model stage c p + pp_rank
  bool embedding = false;  // first stage: the embedding unit
  bool head = false;       // last stage: final norm, output layer, loss
  bool tied_copy = false;  // gpt's last stage: a copy of the word embedding for the head
  std::vector<int64_t> unit_begin;  // its units in its local flat vector (parallel/buckets.h)
  int64_t params = 0;               // elements of that vector
  DataParallelPlan data_parallel;   // ZeRO of that vector over dp
  std::vector<int64_t> expert_unit_begin;  // ep > 1 with MoE layers here: the experts' vector
  DataParallelPlan expert_data_parallel;   //   and its ZeRO over expert-data-parallel
  std::vector<int64_t> chunk_activation_bytes;  // one microbatch on chunk c
  int held = 0, held_until_w = 0;   // simulated peaks of (microbatch, chunk) pairs
  double busy = 0, idle = 0;        // simulated, in cost units
  int64_t activations_sent = 0, gradients_sent = 0;  // messages per step
  double hardware_flops = 0;        // per step on each of its ranks, recompute included
  double model_flops = 0;           // per step on each of its ranks: its layers' (and head's)
                                    // share of the model FLOPs; the stages sum to the model's
  MemoryPlan memory;
  std::vector<CommPlanEntry> comm;  // per step on each of its ranks
};

struct PipelinePlan {
  PipelineShape shape;            // schedule, p, m, v
  std::vector<int> stage_layers;  // per model stage (pipeline_stage_layers)
  // Unit costs, one convention for every schedule (ActionCosts: a B action costs B, plus W
  // when the schedule does not split): split (zb-h1) F 1, B 2 (input gradient), W 1 (weight
  // gradient); not split F 1, B 3 (= B + W: one action makes both), W 0. The measured costs
  // (rank_report.h, measured_costs) follow the same convention: no W action, W 0.
  ActionCosts costs;
  Schedule schedule;
  Simulation sim;                 // zero communication time
  BubbleClosedForm closed_form;
  int64_t message_bytes = 0;      // one activation or gradient: N_l h x storage bytes
  std::vector<PipelineStagePlan> stages;  // per pp rank
};

struct Plan {
  ModelConfig model;
  TrainConfig train;
  ParallelConfig parallel;
  PlanOptions options;
  int dp = 1;
  int cp = 1;
  // The gradients' data-parallel group: dp x cp ranks (ZeRO shards over it; dp alone
  // without context parallelism).
  int dp_cp = 1;
  int tp = 1;
  bool sequence_parallel = false;  // in effect: asked for and tp > 1
  int64_t padded_vocab = 0;   // Vp: V rounded up to a multiple of m x tp (model/param_table.h)
  int64_t global_batch = 0;   // sequences per step, all ranks
  int64_t microbatches_per_rank = 0;  // gradient-accumulation steps
  int64_t tokens_per_step = 0;
  int64_t params_total = 0;   // Ψ, the full model, unpadded
  int64_t zero_shard = 0;     // S, the rank's shard (sum of bucket slices) at zero >= 1, else Ψ
  // Activations of one microbatch: outside the layers, one dense layer (all alike).
  std::vector<ActivationTensor> embedding_activations, layer_activations, head_activations;
  int64_t activation_bytes_per_layer = 0;   // a dense layer's
  // MoE (plan/moe_memory.h): an MoE layer's list at moe_rows permuted rows, the plan's M of
  // every MoE layer and microbatch (exact with padding to capacity, moe_rows_exact; else the
  // uniform-routing expectation); empty, 0 for a dense model. With a measured routing the
  // footprints below use its M instead.
  std::vector<ActivationTensor> moe_layer_activations;
  int64_t moe_activation_bytes_per_layer = 0;
  int64_t moe_rows = 0;
  bool moe_rows_exact = false;
  MoeRouting routing;  // what make_plan was given (empty: the configuration's)
  // Per microbatch (one entry when all are alike: no measured routing) and global layer:
  // what the layer saves and its workspace transients (layer_footprint).
  std::vector<std::vector<LayerFootprint>> layer_footprints;
  const LayerFootprint& footprint(int microbatch, int layer) const {
    return layer_footprints.at(microbatch % layer_footprints.size()).at(layer);
  }
  // The saved bytes of layers [first, first + n) in one microbatch.
  std::vector<int64_t> layer_saved(int microbatch, int first, int n) const;
  int64_t activation_bytes_per_microbatch = 0;  // microbatch 0's
  FlopsPlan flops;
  DataParallelPlan data_parallel;
  // ep > 1: the experts' flat vector over the expert-data-parallel group (its layout empty
  // otherwise); with pp > 1 stage 0's, every stage's in its PipelineStagePlan.
  DataParallelPlan expert_data_parallel;
  // Per step, per rank (every rank alike), in the order tp entries (tensor_parallel_comm),
  // dp entries, then world. e bytes per element of parameters and gradients: 4, or 2 with
  // --bf16; with tp the dp buckets are of the local vector.
  //   z = 0  dp all-reduce per bucket, payload e n_j                    (ring: 2 x eΨ (n-1)/n)
  //   z = 1  dp reduce-scatter + all-gather per bucket, payload e padded_j; all-reduce 4 B
  //   z = 2  as 1, but the reduce-scatters run every microbatch (k x)
  //   z = 3  per microbatch an all-gather per unit acquired while not resident (~2Ψ) and
  //          a reduce-scatter per unit; all-reduce 4 B (norm); no all-gather after the step
  //   world  all-reduce of the loss, 4 B, when world > 1 (the trainer's)
  // Nothing on dp at dp 1: data_parallel does not call the group then.
  // With pp > 1: stage 0's (rank 0's), with the pp and embedding groups; every stage's in
  // pipeline.stages[s].comm.
  std::vector<CommPlanEntry> comm;
  std::vector<RankPlan> ranks;  // one per rank of parallel.world_size
  // The schedule and its simulation for every plan (p = 1: F, B per microbatch); the stages
  // are filled with pp > 1 only, and then data_parallel, zero_shard and
  // flops.model_per_rank_step, flops.hardware_per_rank_step are stage 0's (rank 0's).
  PipelinePlan pipeline;
};

// ZeRO-2/3 without pipelining or full recompute: the peak of the ledger's total, each compute
// of the step beside the transient buffers alive then (plan/total.cpp). mem: the rank's
// categories, filled; d: the plan's data parallelism (its layout and microbatch calls).
// experts: the experts' data parallelism (ep > 1), whose buffers are alive beside d's.
int64_t replayed_total(const Plan& plan, const MemoryPlan& mem, const DataParallelPlan& d,
                       const DataParallelPlan* experts = nullptr);
// A split backward (zb-h1; model/layer.cpp, layer_backward's INPUT_GRAD branch), one layer:
// what its B copies for W (the linears' output gradients; with sp their all-gathered inputs),
// of those the ones made before head_norm_backward's transient (--qk-layernorm), and what it
// keeps from B to W (the copies and the linears' inputs). A dense layer copies d_fc2, [fc1_in],
// d_fc1, d_proj | [qkv_in], d_qkv and keeps norm1.out, attn.ctx, norm2.out, mlp.act too; an
// MoE layer's B writes all its MoE weight gradients: it copies only d_proj | [qkv_in], d_qkv
// and keeps no mlp.act (with sp neither norm2's gathered output).
struct SplitLayerBytes {
  int64_t copies = 0, before_head_norm = 0, keep = 0;
};
// The same over a pipeline stage's actions (d: the stage's, its calls made by the executor's
// list), without recompute: chunk c's input (x0 or the received activation) and what its
// forward keeps (per microbatch set, as Plan::layer_footprints), its first global layer, the
// stage's unit chunks and deferred units, its embedding and head units (-1: none), the
// gradient receive buffer; split: each global layer's SplitLayerBytes (empty: no split).
int64_t replayed_stage_total(const Plan& plan, const MemoryPlan& mem, const DataParallelPlan& d,
                             const std::vector<Action>& actions,
                             const std::vector<int64_t>& chunk_input,
                             const std::vector<std::vector<int64_t>>& chunk_kept,
                             const std::vector<int>& chunk_first_layer,
                             const std::vector<int>& unit_chunk,
                             const std::vector<int>& deferred_units, int embedding_unit,
                             int head_unit, int64_t grad_recv,
                             const std::vector<SplitLayerBytes>& split = {},
                             const DataParallelPlan* experts = nullptr);

// One layer's output (N_l h): what a full-recompute group keeps (plan/recompute.h).
int64_t layer_output_bytes(const Plan& plan);

// Throws std::invalid_argument when the sizes are inconsistent (the CLI checks first and
// names the flags; this guards direct callers). routing: an MoE run's measured permuted rows
// (plan/moe_memory.h): the memory and FLOPs are then those of that step, to the byte.
Plan make_plan(const ModelConfig& m, const TrainConfig& t, const ParallelConfig& p,
               const PlanOptions& o = {}, const MoeRouting& routing = {});

// ---- what one rank of a tp group works with (notes/model.md, "Tensor parallelism") ----
struct LocalSizes {
  int64_t S = 0;         // tokens of each sequence here: s/cp with context parallelism
  int64_t N = 0;         // B S tokens of the microbatch
  int64_t N_l = 0;       // tokens between the blocks: N/t with sequence parallelism, else N
  int64_t heads = 0;     // a_l = a/t
  int64_t groups = 0;    // g_l = g/t
  int64_t head_dim = 0;  // d, unchanged
  int64_t ffn = 0;       // f_l = f/t
  int64_t fc1 = 0;       // fc1_l = fc1/t (llama: both SwiGLU halves of the slice)
  int64_t qkv = 0;       // qkv_l = (a_l + 2 g_l) d
  int64_t vocab = 0;     // V_l = Vp/t, padding rows included
};
LocalSizes local_sizes(const ModelConfig& m, int B, int tp = 1, bool sp = false);
// The attention core of one layer on a rank (parallel/context_parallel.h), from the plan's
// model (m.context_parallel: which cp rank) and tp.
CoreShape plan_core_shape(const ModelConfig& m, int B, int tp);

// ---- activations (notes/model.md), one microbatch of B sequences -------------------
// act_bytes: the storage type's bytes (4, or 2 with --bf16); the norm statistics and the
// flash log-sum-exp are fp32 (4 bytes) in both, dropout masks mask_bytes (1).
// tp, sp: one rank of a tensor-parallel group of tp, with sequence parallelism or not.
std::vector<ActivationTensor> layer_activation_tensors(const ModelConfig& m, int B,
                                                       int act_bytes, int mask_bytes,
                                                       int tp = 1, bool sp = false);
// An MoE layer's list: a dense layer's with mlp.fc1_out and mlp.act replaced by the MoE
// tensors at M permuted rows (moe_tensors, plan/moe_memory.h).
std::vector<ActivationTensor> moe_layer_activation_tensors(const ModelConfig& m, int B,
                                                           int act_bytes, int mask_bytes,
                                                           const MoeRows& rows, int tp = 1,
                                                           bool sp = false);
std::vector<ActivationTensor> embedding_activation_tensors(const ModelConfig& m, int B,
                                                           int act_bytes, int tp = 1,
                                                           bool sp = false);
std::vector<ActivationTensor> head_activation_tensors(const ModelConfig& m, int B,
                                                      int act_bytes, int tp = 1,
                                                      bool sp = false);
int64_t sum_bytes(const std::vector<ActivationTensor>& ts, bool include_norm_statistics = true);
// Category logits, rows = min(N, chunk) with the fused CE, N without: rows x V_l fp32
// logits (V_l = Vp/tp, the rank's vocabulary columns), and with 16-bit storage (half) their
// 16-bit gradient beside them: rows V_l 4 (fp32), rows V_l (4 + 2) (bf16, fp16).
int64_t logits_bytes(const ModelConfig& m, int B, bool half, int tp = 1);

// ---- ZeRO sharding ------------------------------------------------------------------
// Of one bucket of Ψ elements: ceil(Ψ / N_d) and N_d x that (the whole model in one bucket).
int64_t zero_shard_numel(int64_t psi, int dp);
int64_t zero_padded_numel(int64_t psi, int dp);
// The ZeRO paper's closed forms (§3.1, mixed precision, K = 12): model-state bytes per
// rank for stage 0 (DDP) .. 3: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N.
double zero_model_state_bytes(int stage, double psi, double N);
// The same for any bytes per element (params pb, grads gb, master mb, Adam ob): stage 0
// (pb + gb + mb + ob)Ψ, 1 (pb + gb)Ψ + (mb + ob)Ψ/N, 2 pbΨ + (gb + mb + ob)Ψ/N, 3 (pb + gb + mb
// + ob)Ψ/N; bf16's 2, 2, 4, 8 is the paper's. Evaluated at Ψ = P (the padded buckets' sum,
// at stages >= 1) it is MemoryPlan::resident_total() to the byte. formula: e.g. "2Ψ + 14Ψ/N".
double zero_resident_bytes(int stage, double psi, double N, int pb, int gb, int mb, int ob);
std::string zero_resident_formula(int stage, int pb, int gb, int mb, int ob);

// ---- Korthikanti et al. 2022 Table 2: activation bytes of one layer -----------------
// GPT-3 layer, dropout masks, naive attention, 16-bit activations (notes/formulas.md).
// sbh(34 + 5as/h): no parallelism
double korthikanti_layer_bytes(double s, double b, double h, double a);
// sbh(10 + 24/t + 5as/(ht)): tensor parallel t
double korthikanti_tp_bytes(double s, double b, double h, double a, double t);
// sbh(34/t + 5as/(ht)): tensor + sequence parallel
double korthikanti_tp_sp_bytes(double s, double b, double h, double a, double t);
// (The selective forms below are also what flash attention leaves: it keeps no a s s
// tensor, only an fp32 log-sum-exp of b a s / t per layer.)
// sbh(10 + 24/t): tensor parallel + selective recompute
double korthikanti_tp_selective_bytes(double s, double b, double h, double t);
// 34 sbh / t: tensor + sequence parallel + selective recompute
double korthikanti_tp_sp_selective_bytes(double s, double b, double h, double t);
// 2sbh: full recompute keeps the layer input only
double korthikanti_full_recompute_bytes(double s, double b, double h);

// The plan's activations of one layer beside Korthikanti's closed form for the plan's t and
// sequence parallelism: equal to the byte when `differences` is empty, i.e. when the run
// makes the paper's assumptions (gpt, f = 4h, no GQA, both dropouts > 0 with 1-byte masks,
// naive attention, 16-bit activations). Otherwise each entry names one assumption the run
// breaks and what it changes; with flash attention the closed form drops its 5as/(ht) term.
struct KorthikantiCheck {
  int64_t plan_bytes = 0;             // the plan's layer, norm statistics left out
  int64_t norm_statistics_bytes = 0;  // what our norms keep on top (fp32 mean / rstd)
  double closed_form_bytes = 0;
  std::string formula;                // e.g. "sbh(10 + 24/t + 5as/(ht))"
  std::vector<std::string> differences;
  bool applicable() const { return differences.empty(); }
};
KorthikantiCheck korthikanti_check(const Plan& plan);

// ---- tensor parallelism: the tp group's calls of one step (notes/model.md) ------------
// Per microbatch, e = act_bytes per element, Nh = N h, c_i the rows of loss chunk i:
//  without sp  all-reduce  4 per layer (2 forward, 2 backward), 1 embedding, 1 d(xf): Nh e
//                          each; per chunk MAX of c_i and SUM of 2 c_i floats (fp32)
//  with sp     all-gather  6 per layer (2 forward, 2 output gradients and 2 re-gathered
//                          inputs in backward), embedding d(x0), head xf: Nh e each
//              reduce-scatter 4 per layer (2 forward, 2 backward), embedding x0, head d(xf)
//              all-reduce  per layer the replicated gradients (gpt 6h, llama 2h e), gpt
//                          d(position) S h e, final norm (gpt 2h, llama h e), the loss
//                          chunks as above
// times `microbatches` (the replicated gradients' all-reduces only once per step at ZeRO
// 0-1, where the gradient buffer accumulates); plus per step the gradient norm, one fp32.
// An MoE layer (sp required) has attention's collectives only (all-gather 3, reduce-scatter
// 2; a recomputed forward 1 and 1), its replicated tensors (norms, router, shared expert;
// the experts are apart with tp > 1) in its unit's all-reduce, and with the aux loss one
// all-reduce of the E int32 expert counts per forward (model/moe.cpp balancing_counts).
// Empty at tp = 1.
// With pipelining a rank runs a slice of the model: its layers, and the embedding and the
// head (with the loss) only on the first and last stage.
struct ModelSlice {
  int layers = -1;  // -1: all
  bool embedding = true, head = true;
  int recomputed = -1;  // layers whose forward full recompute runs again; -1: the model's
  // The slice's global layers and, of them, the recomputed ones (empty: layers 0 .. and the
  // model's full-recompute groups); with MoE layers, which kind each is matters.
  std::vector<int> layer_ids, recomputed_ids;
  // Units (0, 1 + l, L + 1) in a deferred bucket: reduced (and tp-summed) once a step
  std::vector<int> deferred_bucket_units;
};
// Adds `calls` calls of `payload` bytes in all to comm's (g, op) row, made when missing; the
// bus bytes at the bus factor of a group of n ranks. Nothing when calls is 0.
void add_comm(std::vector<CommPlanEntry>& comm, CommGroup g, CommOp op, int n, int64_t calls,
              int64_t payload);

std::vector<CommPlanEntry> tensor_parallel_comm(const ModelConfig& m, int B, int tp, bool sp,
                                                int act_bytes, int64_t microbatches,
                                                int zero_stage, const ModelSlice& slice = {});

// ---- data parallelism of one flat vector (the model's, or a pipeline stage's) ------------
// The bucket layout of unit_begin, the replay of `calls` per microbatch (simulate_zero_step)
// and the resident sizes; then its dp entries of Plan::comm (as listed above).
// offload: CPU offload (ParallelConfig::offload): the host share of the states, the copies.
DataParallelPlan data_parallel_plan(const std::vector<int64_t>& unit_begin,
                                    std::vector<DpCall> calls, int zero_stage, int dp,
                                    const PlanOptions& o, int64_t microbatches,
                                    const std::vector<int>& unit_chunk = {},
                                    const std::vector<int>& deferred_units = {},
                                    const OffloadConfig& offload = {});
// The model-state categories of a rank from its data-parallel plan, in bytes: params and grads
// at their peak (resident + ZeRO-2/3's transient buffers) and at rest, master weights and Adam
// moments on the owned shard. Bytes per element: storage type (4, or 2 with --bf16) for
// params and grads, 4 for bf16's fp32 master (0 in fp32: the params are the master), 8 for m, v.
// experts: with expert parallelism the experts' data parallelism (its units mirror d's), whose
// states add to these and whose transient buffers peak with d's, call by call.
void fill_model_states(MemoryPlan& mem, const DataParallelPlan& d, const TrainConfig& t,
                       const DataParallelPlan* experts = nullptr);
// group: DP for the dense vector, EDP for the experts' (its dp: the expert-data-parallel size).
std::vector<CommPlanEntry> data_parallel_comm(const DataParallelPlan& d, int zero_stage, int dp,
                                              int grad_bytes, int param_bytes,
                                              CommGroup group = CommGroup::DP);
// CPU offload's copies of one vector per step, added to comm's pcie rows (parallel/offload.h),
// e the storage bytes, dp the vector's data-parallel size, per host bucket j of R_j elements:
//   device-to-host  ZeRO 0-1 one call of R_j x e; ZeRO 2-3 one per reduce-scatter of the
//                   bucket (simulate_zero_step's reductions_of[j]), slice_j x e each
//   host-to-device  one call of R_j x e after the update; with the shard on the host (ZeRO-3
//                   offload_params) instead one call per parameter gather, slice x e each:
//                   gathers x (gathered elements / dp) x e
void offload_comm(std::vector<CommPlanEntry>& comm, const DataParallelPlan& d, int dp, int e);

// ---- pipeline parallelism (plan/pipeline.cpp) ------------------------------------------
// Fills plan.pipeline from a plan make_plan has built for the whole model and, with pp > 1,
// replaces each rank's params, memory and comm by its stage's. Per stage, e the storage
// bytes, N_l h the message:
//   pp send/recv  one call per non-empty exchange of the schedule (pipeline_schedule.h),
//                 payload: the messages the rank sends x N_l h e
//   pp all-reduce the gradient norm's partial sums, 4 B
//   embedding     gpt, first and last stage: all-reduce of the word embedding's gradient,
//                 V_l h e, once per step (keeps the two copies equal)
// Workspace stays the whole model's scratch (an upper bound until the executor trims it);
// logits only on the last stage. ZeRO-2/3 transients replay one stage sweep per microbatch.
void plan_pipeline(Plan& plan);
// RankPlan::checkpoint_bytes of every rank (plan/checkpoint.cpp), after plan_pipeline.
void plan_checkpoint(Plan& plan);

// Workspace: the buffers of notes/model.md's "Workspace" sections. act_bytes per element of
// the storage type (4, or 2 with --bf16); losses fp32, tokens and targets int32. Most are
// allocated once and live throughout (common); the int32 tokens and targets only during a
// forward (tokens on the first pipeline stage, targets on the last), --no-fused-ce's d(xf)
// only in the head's backward, and the tokens again in the embedding's backward after it.
// The category's peak: common + max(forward, backward).
// FP8's operands and state are categories of their own (plan/fp8.h), not workspace.
std::vector<ActivationTensor> workspace_tensors(const ModelConfig& m, int B, int act_bytes,
                                                int tp = 1, bool sp = false);
// Layers' transients (model/moe.cpp, head_norm_backward: LayerFootprint) come on top of
// these: forward_transient beside forward, backward_transient beside neither.
struct WorkspacePhases {
  int64_t common = 0, forward = 0, backward = 0;
  int64_t forward_transient = 0, backward_transient = 0;  // the layers' largest, 0 if none
  int64_t peak() const {
    const int64_t f = forward + forward_transient;
    const int64_t b = backward > backward_transient ? backward : backward_transient;
    return common + (f > b ? f : b);
  }
};
// The largest transients of layers [first, first + n) over the plan's microbatches (only
// `microbatches` when given: DualPipe's copy of a layer runs half of them).
void add_layer_transients(WorkspacePhases& w, const Plan& plan, int first = 0, int n = -1,
                          const std::vector<int>& microbatches = {});
// embedding, head: the rank holds the first, the last model stage; one_chunk: in one chunk.
WorkspacePhases workspace_phases(const ModelConfig& m, int B, int act_bytes, int tp = 1,
                                 bool sp = false, bool embedding = true, bool head = true,
                                 bool one_chunk = true);
int64_t workspace_bytes(const ModelConfig& m, int B, int act_bytes, int tp = 1,
                        bool sp = false);
// Communication buffers: data_parallel reduces and gathers in place, in the params and
// grads buffers (categories params, grads); its only own buffer is the one float of the
// gradient-norm all-reduce at zero stage >= 1 with dp > 1: 4 bytes. The same float over
// tp, over pp (pp > 1) and the loss over the world add 4 bytes each.
// The expert bias's per-step all-reduce of counts over dp, added to `comm` (plan/data_parallel.cpp).
void expert_bias_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m, int dp,
                      int moe_layers_here);
// An MoE model adds the routers' per-step counts, 2 E int32 per MoE layer the rank holds.
// moe_layers_here: the MoE layers the rank holds (-1: all of the model's).
int64_t comm_buffer_bytes(const ModelConfig& m, const TrainConfig& t, const ParallelConfig& p,
                          int moe_layers_here = -1);

}  // namespace paralab
