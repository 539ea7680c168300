// plan/moe_memory.h: the bytes one layer holds, MoE or dense, as model/moe.cpp and
// model/layer.cpp allocate them, and the routing that sizes an MoE layer's experts.
//
// An MoE layer (model/moe.h) saves, per microbatch of its N tokens (B S/cp: S/cp of each
// sequence under context parallelism; N / tp of them under sequence parallelism), beside a
// dense layer's tensors but mlp.fc1_out and mlp.act (E experts, k top-k, h hidden, f_e the
// expert's width, fc1_e its fc1 output: 2 f_e with SwiGLU, both 1/etp on a rank; f_s, fc1_s
// the shared expert's; act the storage bytes, 4 or 2 with --bf16; M the rows the rank's
// tokens send, R the rows its experts run, R_ep the block it received over ep (R = R_ep at
// etp 1; R = M on one rank); P = etp ep):
//   moe.logits N E x4   moe.gates N k x4   moe.experts N k x4 (int32)
//   moe.row_pair M x4   moe.slots N k x4                        (the dispatch's maps)
//   P > 1, alltoall: moe.regroup R x4, moe.ungroup R x4
//   P > 1, allgather: moe.source_pair R x4, moe.local_slots P N k x4
//   moe.expert_in R h act   moe.expert_gates R x4   moe.fc1_out R fc1_e act   moe.act R f_e act
//   shared expert: moe.shared_fc1_out N fc1_s act, moe.shared_act N f_s act;
//   with its gate also moe.shared_out N h act and moe.shared_gate N act.
// Workspace transients (Buffers freed at the end of their scope in model/moe.cpp and the
// dispatchers, parallel/expert_parallel_alltoall.cpp and _allgather.cpp, whose headers list
// them too), each beside the standing
// workspace (Workspace::ensure, which skips dact/dfc1 when every layer is MoE):
//   forward  bf16 only: u_f N h x4 + w_f E h x4 (the router's fp32 copies)
//            expert bias with balancing: g2, e2 N k x4 each (the choice without the bias)
//            under sp or cp with balancing: the counts' all-reduces (groups E) x4
//            statistics with balancing: scores N E x4 + weights (groups E) x4
//            dispatch, alltoall: counts P E x4; then send M (h act + 4) with the block R_ep
//                     (h act + 4); at etp > 1 the gathered R (h act + 4) beside the block
//                     and its etp R_ep h act copies; the block (or gathered rows) again
//                     beside the maps and the expert rows; allgather: P N h act + P N k x4 +
//                     P (E + N k) x4 gathered, beside the maps and then the expert rows
//            experts: y R h act, and in the combine (alltoall) the block R_ep h act with (etp
//                     > 1) the ungrouped R h act and the peers' partials etp R_ep h act, then
//                     with the returned M h act; (allgather) the full output P N h act
//            --fp8-format: the experts' FP8 operands at R rows (plan/fp8.h) beside y while
//                     their GEMMs run, before the combine
//   backward dx N h act and dgates N k x4 (the whole function), and the largest of
//            experts  dexpert_gates R x4 + dy R h + dact R f_e + dfc1 R fc1_e + dexpert_in
//                     R h (act), plus the larger of the FP8 operands (their GEMMs) and the
//                     exchanges' (alltoall: the block R_ep h with the
//                     permuted M h, at etp > 1 then with the gathered R h and its etp R_ep h
//                     copies; the block R_ep (h + 4) with, at etp > 1, the ungrouped R (h + 4)
//                     and the peers' partials etp R_ep h, then with the returned M (h + 4);
//                     allgather: P N h)
//            router   dlogits N E x4 + max(weights (groups E) x4 + dscores N E x4 with
//                     balancing, [bf16: u_f N h x4 + w_f E h x4] + du_f N h x4 + dw_f E h x4
//                     [+ bf16: the rounded copy, max(N, E) h x2])
//            shared   gated N h act (with the gate) + max(dz N act (with the gate),
//                     dact N f_s act + dfc1 N fc1_s act)
// groups: B sequences with seq_aux_loss, else 1. --qk-layernorm adds to every layer
// attn.q_raw N a d act, attn.k_raw N g d act, their statistics N a and N g x4 (x2 for gpt's
// LayerNorm: mean and rstd), and in backward a transient d_raw N a d act (head_norm_backward).
//
// M, R and R_ep are data-dependent. The plan's value of M (moe_expected_rows), R_ep = M and
// R = etp M:
//   --moe-pad-expert-input-to-capacity  every expert runs min(C, N) rows: M = E min(C, N),
//                                       exact from the configuration; C = ceil(cf N k / E)
//   capacity, no padding                the uniform-routing expectation min(E C, N k)
//   dropless                            every pair runs: M = N k, exact (only each expert's
//                                       share of M depends on the routing)
// The kept pairs (model FLOPs) are N k dropless, exact; with a capacity they depend on the
// routing (expectation min(E C, N k)), padded or not.
// MoeRouting gives the measured M of each layer and microbatch instead (MoeLayerStats::
// permuted_rows), so the same formulas evaluated at it hold the ledger to the byte.
//
// defines: MoeRouting, moe_capacity, moe_expected_rows, moe_rows_exact, moe_expected_kept,
//          moe_rows, moe_tokens, moe_tensors, LayerFootprint, layer_footprint,
//          qk_norm_transient_bytes, moe_layer_count, dense_layer_count
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "model/config.h"

namespace paralab {

struct ActivationTensor;  // plan/plan.h

// Measured routing of one step on one rank: rows[l][i] the permuted rows M of global layer l
// (Transformer::moe_layers()'s index; dense layers' entries empty) in microbatch i, in order
// (MoeLayerStats::permuted_rows); kept[l] the pairs the experts ran over the step without
// padding (the sum of MoeLayerStats::kept_per_expert), for the model FLOPs. An empty rows
// (or a layer's empty entry) means the configuration's value (moe_expected_rows); an empty
// kept (or a negative entry) the configuration's expectation (moe_expected_kept).
struct MoeRouting {
  std::vector<std::vector<int>> rows;
  std::vector<long long> kept;
  // Expert parallelism: R, the rows the rank's experts ran, per layer and microbatch
  // (MoeLayerStats::expert_rows); empty: R = M (one rank, or the uniform expectation).
  std::vector<std::vector<int>> expert_rows;
  // alltoall with etp > 1: R_ep, the rows the rank received over ep (its block of the R), per
  // layer and microbatch (MoeLayerStats::ep_rows); empty: the expectation M.
  std::vector<std::vector<int>> ep_rows;
  bool measured() const { return !rows.empty(); }
  // Microbatches it holds (the most of any layer), 0 when none.
  int microbatches() const;
};

// C = ceil(cf N k / E) for N tokens (model/moe.cpp expert_capacity); -1 dropless.
int64_t moe_capacity(const ModelConfig& m, int64_t N);
// The tokens a rank routes in one MoE layer and microbatch of B sequences: B S/cp (its S/cp
// of each sequence, m.context_parallel), over `split` under sequence parallelism.
int64_t moe_tokens(const ModelConfig& m, int B, int split = 1);
// The configuration's M of one MoE layer and microbatch of B sequences (above); split: the
// sequence-parallel ranks its tokens are split over (each routes moe_tokens(m, B, split):
// moe_token_split).
int64_t moe_expected_rows(const ModelConfig& m, int B, int split = 1);
// True when moe_expected_rows is exact (padding to capacity), false when an expectation.
bool moe_rows_exact(const ModelConfig& m);
// The expected kept pairs (no padding rows) of one MoE layer and microbatch: min(E C, N k)
// with a capacity, N k dropless (uniform routing).
int64_t moe_expected_kept(const ModelConfig& m, int B, int split = 1);
// M of global layer `layer` in microbatch `microbatch`: routing's when it has it, else the
// configuration's.
int64_t moe_rows(const ModelConfig& m, int B, const MoeRouting& routing, int layer,
                 int microbatch, int split = 1);
// R of global layer `layer` in microbatch `microbatch`: routing's expert_rows when it has
// them, else etp x moe_rows (uniform routing sends each rank's experts as many rows as its
// tokens send, ep ranks x E/ep experts x M/E, from each of its etp peers' blocks; exact with
// padding to capacity).
int64_t moe_expert_rows(const ModelConfig& m, int B, const MoeRouting& routing, int layer,
                        int microbatch, int split = 1, int etp = 1);
// One MoE layer and microbatch on one rank: the rows its tokens send (M), the rows its
// experts run (R), and how they travel (parallel/expert_parallel.h).
struct MoeRows {
  int64_t N = 0;  // the tokens it routes: B S/cp, or B S/cp / tp under sequence parallelism
  int split = 1;  // over how many tp ranks the microbatch's tokens are split
  int64_t M = 0, R = 0;
  int64_t R_ep = 0;  // alltoall: the rows received over ep (= R at etp 1; R = etp R_ep
                     // expected)
  int ep = 1, etp = 1;  // the experts' widths are 1/etp of the model's
  TokenDispatcher dispatcher = TokenDispatcher::ALLGATHER;
  // --fp8-param-gather at ZeRO-3: the backward decodes an expert's gathered codes (plan/fp8.h)
  bool fp8_decoded_weight = false;
};
MoeRows moe_layer_rows(const ModelConfig& m, const ParallelConfig& p, int B,
                       const MoeRouting& routing, int layer, int microbatch);
// Kept pairs of an MoE layer over a step of `microbatches` microbatches.
double moe_kept_step(const ModelConfig& m, int B, const MoeRouting& routing, int layer,
                     int64_t microbatches, int split = 1);
// The tp ranks an MoE layer's microbatch is split over: tp with sequence parallelism (which
// experts under tp need), else 1.
int moe_token_split(const ParallelConfig& p);

int moe_layer_count(const ModelConfig& m);    // layers with experts
int dense_layer_count(const ModelConfig& m);  // the others

// The MoE layer's own saved tensors at M rows (above), replacing mlp.fc1_out and mlp.act.
std::vector<ActivationTensor> moe_tensors(const ModelConfig& m, int B, int act_bytes,
                                          const MoeRows& rows);

// One layer and one microbatch: what it saves and the workspace transients it makes.
struct LayerFootprint {
  int64_t saved = 0;               // its activations at the end of its forward
  int64_t forward_transient = 0;   // the largest workspace transient of its forward
  int64_t forward_peak = 0;        // the most of (its activations + its transients) alive
                                   // in its forward: max(saved, alive_t + transient_t)
  int64_t backward_transient = 0;  // the largest of its backward (every saved tensor alive)
  // An MoE layer's: its saved tensors but the MoE's own (allocated inside moe_forward, after
  // the attention block), and its MoE backward's largest transient alone (backward_transient
  // also takes --qk-layernorm's, made in the attention block's backward). Selective
  // recompute's buffers live beside one or the other (plan/total.cpp replayed_total).
  int64_t before_moe = 0, moe_backward_transient = 0;
};
// Layer `layer` of m for one microbatch of B at M rows (ignored for a dense layer); the other
// arguments as layer_activation_tensors (plan.h).
LayerFootprint layer_footprint(const ModelConfig& m, int B, int act_bytes, int mask_bytes,
                               int tp, bool sp, int layer, const MoeRows& rows);
// --qk-layernorm's backward transient (head_norm_backward's d_raw, q's: N a_l d act).
int64_t qk_norm_transient_bytes(const ModelConfig& m, int B, int act_bytes, int tp = 1);

}  // namespace paralab
