// plan/flops.h: model and hardware FLOPs of one training step, matmul by matmul.
//
// Only matrix products are counted (norms, activations, softmax, the optimizer are a few
// FLOPs per element, negligible next to the O(h) per element of a GEMM, and every paper
// below leaves them out). A product of (m,k) by (k,n) is 2mnk FLOPs: k multiply-adds per
// output element. Each matmul is listed with the dimension it reduces over (its k), as in
// nanotron, so a student can check each line by hand.
//
// Two counts, as in Korthikanti et al. 2022 §6 and the PaLM paper, app. B:
//  - MODEL FLOPs: what the architecture needs, independent of implementation: forward of
//    every matmul, backward = 2 x forward (one product for the input gradient, one for the
//    weight gradient). Attention products use the --attention-flops convention: full S x S
//    (Narayanan, Korthikanti, PaLM) or causal, S(S+1)/2 query-key pairs (Megatron-LM 2025).
//  - HARDWARE FLOPs: what the kernels really run (MFU vs HFU). Linear layers: the same 3
//    products. Attention as implemented: naive computes the full S x S square in 2 forward
//    products (QK^T, PV) and 4 backward (dV, dP, dQ, dK); flash skips masked tiles, counted
//    as S(S+1)/2 pairs, with 2 forward products and 5 backward (QK^T recomputed, dV, dP, dQ,
//    dK).
//  - RECOMPUTE (--recompute-*, model/config.h Recompute): hardware FLOPs only, its own row;
//    MFU never counts it, HFU does. Per layer and microbatch, what backward runs again:
//      selective core_attn  naive: Q K^T over the full square, 2 B a d S^2 (P V is not rerun:
//                           its output ctx is kept as proj's input); flash: its forward, 2
//                           products over the causal pairs, 4 B a d S(S+1)/2
//      selective mlp        fc1, 2 N h fc1 (fc2 is not rerun: only its input is needed)
//      selective norm       no matmul
//      full                 one forward of the layer as run: qkv, proj, fc1, fc2 and the two
//                           attention products (= 1/3 of its hardware FLOPs)
//    Layers recomputed: every layer with selective and full uniform; full block: min(n, l_c)
//    of each pipeline model chunk c of l_c layers. Megatron's checkpoint reruns a module's
//    whole forward (P V, fc2 too); Korthikanti et al.'s eq. 8 counts s/(6h) more on top of
//    the model FLOPs, i.e. 12 B s^2 h per layer, three times the attention core's forward.
//    This count is what the kernels here run, which the FLOP counter checks.
//
// Tensor parallelism t (notes/model.md): a rank runs every matmul with its split dimension
// divided by t: a/t heads and g/t groups, f/t ffn columns, Vp/t vocabulary rows (Vp = V
// padded to a multiple of t; the padded columns are computed, so they count). The per-rank
// numbers and the matmul table are that rank's share; the step's model FLOPs stay the whole
// model's (true V), its hardware FLOPs are t x a rank's per microbatch.
//
// defines: MatmulFlops, FlopsPlan, flops_plan, narayanan_* and palm_* closed forms
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "model/config.h"

namespace paralab {

struct MatmulFlops {
  std::string name;          // qkv, scores, av, proj, fc1, fc2, head; MoE layers: router,
                             // experts.fc1, experts.fc2, shared.fc1, shared.fc2, shared.gate
  std::string reduces_over;  // the k of the 2mnk
  std::string formula;       // forward model FLOPs of one microbatch, in notes/model.md symbols
  bool per_layer = true;     // false: once per model (the head)
  int layers = 0;            // the layers it counts over: all L, the dense ones (fc1, fc2)
                             // or the MoE ones (router, experts, shared); 1 for the head
  double model_forward = 0;  // one microbatch, one layer (if per_layer)
  double model = 0;          // forward + backward, one microbatch, all layers
  double hardware = 0;       // forward + backward as the kernels run them, same scope
};

struct FlopsPlan {
  AttentionFlops convention = AttentionFlops::FULL;
  AttentionImpl attention = AttentionImpl::FLASH;
  int tensor_parallel = 1;
  std::vector<MatmulFlops> matmuls;     // one rank's share (the whole model at tp 1)
  double model_per_microbatch = 0;      // one rank, one microbatch
  double hardware_per_microbatch = 0;
  double recompute_per_microbatch = 0;  // what backward reruns, one rank (see above)
  int64_t recomputed_layers = 0;        // layers that rerun something, all stages
  std::string recompute_formula;        // per layer, e.g. "2 B a d S^2 (QK^T)"; "" if none
  int64_t microbatches_per_step = 0;    // global: all data-parallel ranks
  int64_t microbatches_per_rank = 0;
  double model_per_step = 0;            // global, all ranks: the whole model, unpadded
  double hardware_per_step = 0;         // global, recompute included
  // One rank's step (its tp share, k microbatches): the whole layer stack here; with
  // pipelining plan_pipeline replaces both by stage 0's (rank 0's), PipelineStagePlan has
  // every stage's. The matmul rows above stay the whole stack's.
  double model_per_rank_step = 0;
  double hardware_per_rank_step = 0;
  // Per global layer, one rank's step (its microbatches): model and hardware FLOPs without
  // recompute, and what its recompute adds (0 where it recomputes nothing). A pipeline stage
  // sums its own layers' (MoE and dense layers differ, and an MoE layer's with its routing).
  std::vector<double> layer_model_step, layer_hardware_step, layer_recompute_step;
  double head_model_step = 0, head_hardware_step = 0;
  // MoE: the rows the experts' hardware FLOPs count per layer and microbatch (the plan's M:
  // exact with padding to capacity, else the uniform-routing expectation) and the kept pairs
  // the model FLOPs count (an expectation without a measured routing: N k, or min(E C, N k)
  // with a capacity); routed: a measured MoeRouting gave them.
  double moe_rows = 0, moe_kept = 0;
  bool moe_rows_exact = false, routed = false;
};

// Microbatch of B sequences; microbatches per step globally (each shared by a tp group) and
// on one rank; tp the tensor-parallel size. stage_layers: the layers of each pipeline model
// chunk (pipeline_stage_layers), read by full recompute's block method only; empty: one
// chunk of all layers. Like the matmul table, the recompute counts every layer of the model.
// MoE layers (flops.h rows router, experts.*, shared.*): per layer and microbatch
//   router       2 N h E            (model FLOPs too)
//   experts.fc1  2 M h fc1_e        hardware at M rows (padding included), model at the kept
//   experts.fc2  2 M f_e h          pairs (no padding): MFU and HFU part with padding
//   shared.fc1   2 N h fc1_s,  shared.fc2 2 N f_s h,  shared.gate 2 N h (with its gate)
// each x3 with backward; fc1, fc2 count the dense layers only. Full recompute reruns an MoE
// layer's forward (router, experts at the same M, shared). routing (plan/moe_memory.h): the
// measured M and kept pairs; empty: the configuration's. The step's model FLOPs: the whole
// model's other matmuls plus every rank's MoE rows (dp x cp x tp ranks, each its own tokens).
struct MoeRouting;
FlopsPlan flops_plan(const ModelConfig& m, int micro_batch_size, int64_t microbatches_per_step,
                     int64_t microbatches_per_rank, AttentionFlops convention, int tp = 1,
                     const std::vector<int>& stage_layers = {});
// etp: the experts' tensor parallelism (a rank runs 1/etp of each expert row's FLOPs).
FlopsPlan flops_plan(const ModelConfig& m, int micro_batch_size, int64_t microbatches_per_step,
                     int64_t microbatches_per_rank, AttentionFlops convention, int tp,
                     const std::vector<int>& stage_layers, const MoeRouting& routing,
                     int etp = 1);
// Layers that recompute something: L with selective or full uniform; full block: the sum
// over chunks of min(num_layers, chunk layers); 0 without recompute.
int64_t recomputed_layer_count(const ModelConfig& m, const std::vector<int>& stage_layers = {});

const char* attention_flops_name(AttentionFlops c);

// ---- published closed forms (notes/formulas.md, "FLOPs") -------------------------
// Narayanan et al. SC21 eq. 3: model FLOPs of one iteration of global batch B,
// 72 B L s h^2 (1 + s/(6h) + V/(12hL)). Assumes GPT: f = 4h, no GQA, tied head, full
// attention; leaves out biases and norms (not matmuls).
double narayanan_model_flops(double B, double L, double s, double h, double V);
// Korthikanti et al. eq. 8: hardware FLOPs with selective recompute (the attention's
// QK^T and AV run again in backward), 72 B L s h^2 (1 + s/(3h) + V/(12hL)).
double korthikanti_selective_hardware_flops(double B, double L, double s, double h, double V);
// Narayanan eq. 3 with full recompute (one more forward of every layer):
// 96 B s L h^2 (1 + s/(6h) + V/(16Lh)).
double narayanan_full_recompute_flops(double B, double L, double s, double h, double V);
// PaLM app. B: training FLOPs per token 6N + 12 L H Q T, N the matmul parameters (head
// included), H heads, Q head dim, T sequence; full (non-causal) attention.
double palm_flops_per_token(double N, double L, double H, double Q, double T);

}  // namespace paralab
