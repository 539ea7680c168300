// plan/kernel_traffic.h: the kernels of one training step that are not GEMMs, predicted
// from the configuration: how many launches, and how many bytes they read and write. The
// time model (plan/time_model.h) costs them as memory-bound work, bytes / HBM bandwidth +
// one launch overhead each; kernels/ops/ counts the same launches and bytes as the run
// makes them (kernels::kernel_counts), and the tests hold the two equal.
//
// Counting convention (the dispatchers of kernels/ops/, which kernels/counters.h lists
// kernel by kernel): a call counts the CUDA kernels it launches (one for most; two for a
// norm's backward and a flash backward, more for the unfused MoE permutations),
// device-to-device copies and memsets included; its bytes are the elements it reads plus
// those it writes, each at its storage size (fp32 4, bf16 2, int32 4, masks 1), once per
// call however often the kernel touches them. A call with nothing to move launches nothing.
// Host <-> device copies (tokens, targets, the losses, scalars) and allocations are not
// counted as kernels: they cross PCIe or the allocator, not HBM. The MoE routing's
// device-to-host copies are counted apart (KernelTally::routing_copy, kernels/counters.h
// count_routing_copy): per MoE layer and microbatch the E rows per expert (or the alltoall's
// P E, the allgather's P E out of its gathered map), none padded to capacity; once a step the routers'
// counts (2 E per MoE layer here). The flash
// attention kernels are counted apart (attention: launches only; their time is their FLOPs
// at the attention efficiency). GEMM calls are plan/gemm_calls.h's.
//
// How: kernel_traffic*.cpp walk the model's code paths in the order they run (model/layer.cpp,
// model/attention.cpp, model/moe.cpp, model/head.cpp, model/transformer.cpp, model/optimizer.cpp,
// parallel/context_parallel.cpp, parallel/expert_parallel*.cpp, parallel/data_parallel.cpp) and
// make one KernelTally call per kernel call, named after the kernel:
//   kernel_traffic.cpp           the layers (dense), the embedding, the head, the step
//   kernel_traffic_parallel.cpp  the attention core (one rank, ring, all-gather, all-to-all),
//                                gradient zeroing, ZeRO's shard updates, norm and AdamW
//   kernel_traffic_moe.cpp       an MoE layer: router, dispatch and combine, experts
//
// Exact (measured == predicted) wherever the sizes follow from the configuration. An MoE
// layer's M, R and R_ep (plan/moe_memory.h) are exact padded to capacity, and dropless on
// experts that are not spread (M = N k); with a capacity but no padding (M), or dropless with
// ep or etp > 1 (the rows R a rank's experts receive), they are the uniform-routing
// expectation, and the plan says so (exact = false), unless it has the step's measured
// routing (make_plan's routing argument, or KernelTrafficOptions::routing), which makes it
// exact again. The trainer: reset_kernel_counts() with the step's other counters, then
// kernel_traffic_plan(the rank's plan, rank); the plan's PlanOptions::flash_ring_by_group says
// whether the MPI backend's ring runs flash by group.
//
// defines: KernelTraffic, KernelTrafficPlan, KernelTrafficOptions, KernelTally,
//          kernel_traffic_plan, core_attention_traffic, core_attention_backward_traffic,
//          moe_forward_traffic, moe_backward_traffic, optimizer_step_traffic,
//          moe_step_traffic
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>
#include "kernels/ops/loss_optimizer.h"  // sum_squares_launches
#include "kernels/ops/moe_dispatch.h"   // moe_local_maps_launches
#include "plan/plan.h"

namespace paralab {

struct KernelTraffic {
  int64_t launches = 0;
  double bytes = 0;
  void add(const KernelTraffic& o, double times = 1) {
    launches += static_cast<int64_t>(o.launches * times);
    bytes += o.bytes * times;
  }
};

// One rank (its tp share, its pipeline stage, its cp slice).
struct KernelTrafficPlan {
  // Per global layer (size num_layers), one microbatch (the mean over the step's when a
  // measured routing makes them differ): forward, backward (input and weight gradients
  // together), what recompute adds (0 where it recomputes nothing; full: the forward again).
  std::vector<KernelTraffic> layer_forward, layer_backward, layer_recompute;
  // Flash attention kernels per global layer, one microbatch: launches (bytes 0); backward's
  // includes what recompute runs again (core_attn, full), which runs inside the backward.
  std::vector<KernelTraffic> layer_attention_forward, layer_attention_backward;
  // One microbatch, on the stages that hold them (zero elsewhere).
  KernelTraffic embedding_forward, embedding_backward, head_forward, head_backward;
  // Once per step: gradient zeroing, the gradient norm and clipping, the optimizer, the
  // data-parallel copies (ZeRO's shard updates), the loss.
  KernelTraffic step_other;
  // The rank's whole step: the above over its stage's layers and microbatches.
  KernelTraffic step_total, step_attention;
  // The MoE routing's device-to-host copies over the step: launches = copies, bytes
  // (kernels/counters.h count_routing_copy).
  KernelTraffic step_routing;
  // False where an MoE layer's rows are an expectation (above), so is the prediction.
  bool exact = true;
};

// What the configuration does not say.
struct KernelTrafficOptions {
  // An MoE run's measured routing of this step (plan/moe_memory.h MoeRouting); nullptr:
  // the plan's (make_plan's routing argument, else the configuration's).
  const MoeRouting* routing = nullptr;
};

KernelTrafficPlan kernel_traffic_plan(const Plan& plan, int rank = 0);
KernelTrafficPlan kernel_traffic_plan(const Plan& plan, int rank, const KernelTrafficOptions& o);

// ---- the kernels, as kernels/ops/ counts them ----------------------------------------------
// One method per kernel of kernels/ops.h (sizes as its arguments); e: the storage bytes of
// the run's tensors (4, or 2 with --bf16); fp32 buffers (statistics, lse, gates, the router,
// the loss) take the _f32 variants where an op exists for both.
class KernelTally {
 public:
  explicit KernelTally(int e) : e_(e) {}
  KernelTraffic traffic;    // every kernel but flash attention
  KernelTraffic attention;  // flash attention launches
  KernelTraffic routing;    // the MoE routing's copies to the host (launches: copies)
  int e() const { return e_; }

  void kernel(double bytes, int launches = 1) {
    if (bytes <= 0) return;
    traffic.launches += launches;
    traffic.bytes += bytes;
  }
  void memcpy_device(double bytes) { kernel(2 * bytes); }
  void memset_zero(double bytes) { kernel(bytes); }
  void add(double n) { kernel(3 * n * e_); }
  void accumulate(double n) { kernel(3 * n * e_); }
  void accumulate_f32(double n) { kernel(12 * n); }
  void convert(double n) { kernel(6 * n); }
  // T <-> fp32 as context_parallel.cpp's widen / narrow: a copy when T is fp32
  void widen(double n) { e_ == 4 ? memcpy_device(4 * n) : convert(n); }
  void add_bias(double N, double C) { kernel((2 * N * C + C) * e_); }
  void bias_backward(double N, double C) { kernel((N * C + 2 * C) * e_); }
  void embedding_forward(double N, double C) { kernel(4 * N + 2 * N * C * e_); }
  void embedding_backward(double N, double C) { kernel(4 * N + 3 * N * C * e_); }
  void position_embedding_forward(double N, double S, double C) {
    kernel((2 * N + std::min(N, S)) * C * e_);
  }
  void position_embedding_backward(double N, double S, double C) {
    kernel((N + 2 * std::min(N, S)) * C * e_);
  }
  void layernorm_forward(double N, double C) { kernel((2 * N * C + 2 * C) * e_ + 8 * N); }
  void layernorm_backward(double N, double C) { kernel((4 * N * C + 5 * C) * e_ + 8 * N, 2); }
  void rmsnorm_forward(double N, double C) { kernel((2 * N * C + C) * e_ + 4 * N); }
  void rmsnorm_backward(double N, double C) { kernel((4 * N * C + 3 * C) * e_ + 4 * N, 2); }
  void gelu_forward(double n) { kernel(2 * n * e_); }
  void gelu_backward(double n) { kernel(3 * n * e_); }
  void swiglu_forward(double N, double F) { kernel(3 * N * F * e_); }
  void swiglu_backward(double N, double F) { kernel(5 * N * F * e_); }
  void dropout_forward(double n) { kernel(2 * n * e_ + n); }
  void dropout_backward(double n) { kernel(2 * n * e_ + n); }
  void qkv_split(double B, double S, double A, double G, double D) {
    kernel(2 * B * S * (A + 2 * G) * D * e_);
  }
  void heads_merge(double B, double S, double A, double D) { kernel(2 * B * S * A * D * e_); }
  void rope(double B, double H, double S, double D) { kernel(2 * B * H * S * D * e_); }
  // naive attention: P = BH q_rows k_rows probabilities of a pass, n = BH q_rows its rows
  void attention_softmax_forward(double P, double n, bool lse) {
    kernel(2 * P * e_ + (lse ? 4 * n : 0));
  }
  void attention_softmax_backward(double P, double n, bool delta) {
    kernel(3 * P * e_ + (delta ? 4 * n : 0));
  }
  void attention_probs_rescale(double P, double n) { kernel(2 * P * e_ + 8 * n); }
  void attention_dropout_forward(double P) { kernel((2.0 * e_ + 1) * P); }
  void attention_delta(double n, double D) { kernel((2 * D * e_ + 4) * n); }
  void attention_merge(double n, double D) { kernel(((8.0 + e_) * D + 12) * n); }
  void flash_attention_forward(int calls = 1) { attention.launches += calls; }
  void flash_attention_backward(int calls = 1) { attention.launches += 2 * calls; }
  // mixture of experts (router and gates fp32)
  void moe_router_topk(double N, double E, double k, bool bias) {
    kernel(4 * N * E + (bias ? 4 * E : 0) + 8 * N * k);
  }
  void moe_router_topk_backward(double N, double E, double k) { kernel(8 * N * E + 8 * N * k); }
  void moe_balancing_scores(double N, double E) { kernel(8 * N * E); }
  void moe_balancing_scores_backward(double N, double E) { kernel(16 * N * E); }
  void moe_weighted_sum(double N, double E, double groups) { kernel(4 * N * E + 4 * groups * E); }
  void moe_weighted_sum_backward(double N, double E, double groups) {
    kernel(4 * N * E + 4 * groups * E);
  }
  void moe_z_loss_sum(double N, double E) { kernel(4 * N * E); }
  void moe_z_loss_backward(double N, double E) { kernel(12 * N * E); }
  void moe_permute(double M, double C, bool gates, bool fused) {
    kernel(4 * M + 2 * M * C * e_);
    if (gates) kernel(fused ? 8 * M : 12 * M, fused ? 0 : 1);
  }
  void moe_unpermute(double N, double C, int k, bool fused) {
    if (fused) return kernel(4 * N * k + N * C * k * e_ + N * C * e_);
    kernel(4 * N * C);
    for (int s = 0; s < k; ++s) kernel(4 * N + N * C * e_ + 8 * N * C);
    if (e_ != 4) kernel(6 * N * C);
  }
  void moe_unpermute_gates(double pairs) { kernel(12 * pairs); }
  void moe_swiglu_forward(double M, double F) { kernel(3 * M * F * e_ + 4 * M); }
  void moe_swiglu_backward(double M, double F) { kernel(5 * M * F * e_ + 8 * M); }
  void moe_gelu_forward(double M, double F) { kernel(2 * M * F * e_ + 4 * M); }
  void moe_gelu_backward(double M, double F) { kernel(3 * M * F * e_ + 8 * M); }
  void moe_shared_gate_forward(double N, double C) { kernel((3 * N * C + N) * e_); }
  void moe_shared_gate_backward(double N, double C) { kernel((3 * N * C + 2 * N) * e_); }
  // the dispatch's counting sort (kernels/ops/moe_dispatch.h), int32 throughout
  void moe_expert_counts(double N, double k, double E, double groups) {
    kernel(4 * N * k + 4 * groups * E);
  }
  void moe_dispatch_offsets(double E, bool stats, bool accumulate) {
    kernel(12 * E + 4 + (stats ? (accumulate ? 16 : 8) * E : 0));
  }
  void moe_gate_rank(double N, double k) { kernel(12 * N * k); }
  void moe_dispatch_scatter(double N, double k, double E, double M, bool rank) {
    kernel(4 * N * k * (rank ? 3 : 2) + 4 * (E + 1) + 4 * M);
  }
  void moe_local_maps(double R, int P, double pairs, int L) {
    kernel(4 * R + 8 * P * pairs, kernels::moe_local_maps_launches(P, L));
  }
  void moe_expert_bias_update(double E) { kernel(12 * E); }
  void routing_copy(double bytes) {
    routing.launches += 1;
    routing.bytes += bytes;
  }
  // the loss (fp32 logits): v valid columns of V
  void cross_entropy_row_max(double N, double v) { kernel(4 * N * v + 4 * N); }
  void cross_entropy_sum_exp(double N, double v) { kernel(4 * N * v + 16 * N); }
  void cross_entropy_finish(double N, double V, double v) { kernel(4 * N * v + 4 * N * V + 20 * N); }
  // fp32 moments 28 bytes an element (kernels/ops/loss_optimizer.h adamw_update), each bf16
  // moment (--exp-avg-dtype, --exp-avg-sq-dtype bf16) 4 fewer
  void adamw_update(double n, int bf16_moments = 0) { kernel((28 - 4 * bf16_moments) * n); }
  // over `spans` pieces: one launch per kernels::kSquareSpansPerLaunch of them
  void sum_squares(double n, int spans) { kernel(n * e_, kernels::sum_squares_launches(spans)); }

 private:
  int e_;
};

// ---- the pieces (one microbatch, one layer, on one rank) -----------------------------------
// The attention core (parallel/context_parallel.cpp core_attention_forward): s the rank's
// shape, cp its place in the group; recompute: the backward's second forward; keep_heads:
// a2a keeps its head-split q, k, v for the backward (no core recompute, training).
void core_attention_traffic(KernelTally& k, const CoreShape& s, const CpSpec& cp, bool by_group,
                            bool recompute, bool keep_heads);
void core_attention_backward_traffic(KernelTally& k, const CoreShape& s, const CpSpec& cp,
                                     bool by_group);
// An MoE layer's MLP block (model/moe.cpp) at the rows of `rows`; S the rank's tokens per
// sequence (seq_aux_loss's group); record_stats: a training forward (not a recompute's),
// which computes the balancing and z losses' values and sums the routers' counts (first: the
// step's first microbatch, whose sums are written, not added to).
void moe_forward_traffic(KernelTally& k, const ModelConfig& m, const MoeRows& rows, int S,
                         bool record_stats, bool first);
void moe_backward_traffic(KernelTally& k, const ModelConfig& m, const MoeRows& rows, int S);
// Once per step on `rank` (model/optimizer.cpp, parallel/data_parallel.cpp): zero_grads,
// ZeRO-2/3's per-microbatch shard updates, ZeRO-3's single-rank gathers, the gradient norm's
// sums of squares and the AdamW updates, for the dense and (experts apart) expert vectors.
void optimizer_step_traffic(KernelTally& k, const Plan& plan, int rank);
// Once per step on `rank`, the MoE layers it holds (model/transformer_moe.cpp): the routers'
// counts copied to the host (collect_moe_stats), the expert bias's updates.
void moe_step_traffic(KernelTally& k, const Plan& plan, int rank);

}  // namespace paralab
