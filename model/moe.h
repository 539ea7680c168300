// model/moe.h: a mixture-of-experts MLP on one rank (Shazeer et al. 2017; Switch, Fedus et
// al. 2021; Megatron-Core's megatron/core/transformer/moe/, whose semantics it follows).
//
// The lesson. A dense MLP runs every token through one fc1 -> act -> fc2. An MoE layer holds
// E such experts and a router, a linear h -> E computed in fp32; each token goes to its k
// best experts and the layer's output is their gate-weighted sum, so the parameters grow E
// times while each token's FLOPs grow k times (the "active" parameters). Per layer and
// microbatch of N tokens, u = norm2's output (N, h):
//
//   logits = u Wr^T                         (N, E) fp32               GEMM 2 N h E
//   experts, gates = top-k(logits)           (N, k): softmax over the k picked logits
//                                            (Megatron's default; --moe-router-pre-softmax:
//                                            softmax over E then the top k, no renorm;
//                                            sigmoid: sigmoid, normalised over the k picked)
//   dispatch (device)                        counts per expert, capacity drops, the maps:
//                                            a counting sort (kernels/ops/moe_dispatch.h);
//                                            the host gets the E counts (the GEMMs' sizes)
//   permute: x_p = u[rows sorted by expert]  (M, h) M = sum of the experts' rows
//   per expert e, its rows R_e (n_e of them):
//     y_e = (act(x_p[R_e] W1_e^T) * gate) W2_e^T      GEMMs 2 n_e h fc1_e + 2 n_e f_e h
//   unpermute: out_t = sum over t's kept pairs of y rows   (N, h)
//   [+ shared expert: act(u Ws1^T) Ws2^T, times sigmoid(u wg^T) with its gate]
// With expert parallelism (--ep, parallel/expert_parallel.h) the rank holds E/ep experts
// (with --etp a 1/etp slice of each one's width): the permute becomes a dispatch (the rows
// travel to their experts' ranks, R arrive here) and the unpermute a combine (they travel
// back); the router and the shared expert stay local, on the rank's own tokens (N/tp of
// them under sequence parallelism).
//
// The gate multiplies after the activation, before fc2, as Megatron's experts do; gradients
// reach the router through the gates (the selection itself is not differentiated) and
// through the two auxiliary losses, each computed per microbatch on its N tokens:
//   aux (load balancing)  alpha E / (k N^2) sum_e (sum_t p_e(t)) c_e, p = softmax(logits) over
//                         E (sigmoid: normalised sigmoid), c_e = tokens whose top-k of p holds
//                         e (a count); = alpha at perfect balance. seq_aux_loss: the same per
//                         sequence (N -> S), averaged over the B sequences.
//   z loss                beta mean_t logsumexp(logits_t)^2 (ST-MoE).
// Their gradients are scaled like the LM loss's (the microbatch's grad_scale). N and S are
// the whole microbatch's and sequence's: under sequence parallelism (N/tp tokens a rank) and
// context parallelism (S/cp of each sequence) the counts c are summed over the tp and cp
// ranks (Megatron's tensor x context parallel group), and each rank's partial losses, over
// its own tokens' p and logits, add up to the one-rank losses.
//
// Capacity (--moe-expert-capacity-factor cf): an expert takes at most C = ceil(cf N k / E)
// rows; beyond that a pair (token, expert) is dropped, by gate value (probs: the C largest
// gates, ties to the earlier token) or by position (the C earliest tokens). A dropped pair
// contributes nothing: the token keeps its residual (and the shared expert). With
// --moe-pad-expert-input-to-capacity every expert runs exactly min(C, N) rows (zero rows
// pad it), so every size is fixed and the plan predicts them exactly.
//
// GEMM calls per MoE layer and microbatch: forward fc1 and fc2, backward dX and dW of each:
// 6 grouped calls with --moe-grouped-gemm (kernels::gemm_grouped, all local experts at once),
// or 6 per local expert that has rows. Plus the router's 3 and the shared expert's.
//
// Expert bias (--moe-router-enable-expert-bias, aux-loss-free balancing, DeepSeek-V3): a
// per-expert bias added to the sigmoid scores for the selection only (never to the gates),
// updated once per step: b_e += rate * sign(mean_e' c_e' - c_e), c the pairs each expert ran
// in the step, summed over data parallelism (dp x cp under context parallelism).
//
// Where the routing lives (docs/moe.md, "The dispatch on the device"). The router's choice, the
// per-expert counts and the permutation maps stay on the device; the host gets, per MoE layer
// and microbatch, only the sizes it launches with: the E rows per expert the grouped GEMM needs
// (one copy; none padded to capacity, where they follow from the configuration), or with the
// alltoall dispatcher every rank's (one copy of P E, the all-to-all's sizes), or with the
// allgather dispatcher every rank's rows out of its gathered routing (one copy of P E).
// The statistics (tokens and kept pairs per expert) are summed on the device and
// copied once a step (Transformer::collect_moe_stats); the aux loss's counts and the expert
// bias's update never leave it. kernels::count_routing_copy counts every copy.
//
// defines: MoeLayerStats, MoeLayerState, MoeWeights, MoeGrads, MoeActivations,
//          expert_capacity, moe_forward, moe_backward
#pragma once
#include <cstdint>
#include <vector>
#include "measure/ledger.h"
#include "model/config.h"
#include "parallel/expert_parallel.h"

namespace paralab {

struct LayerContext;

// What one MoE layer's router saw, summed over the microbatches recorded since the last
// reset (training forwards only: not evaluation, not a recompute's second forward).
// tokens_per_expert, kept_per_expert, dropped_pairs and padding_rows come from the device's
// counts (MoeLayerState), filled in by Transformer::collect_moe_stats; the rest at each forward.
struct MoeLayerStats {
  std::vector<long long> tokens_per_expert;  // (E) pairs routed to each expert, before drops
  std::vector<long long> kept_per_expert;    // (E) pairs each expert ran (no padding rows)
                                             // (both counted where the tokens were routed)
  long long dropped_pairs = 0;               // (token, expert) pairs over capacity
  long long padding_rows = 0;                // zero rows added to reach the capacity
  std::vector<int> permuted_rows;            // M of each microbatch, in order
  std::vector<int> microbatch_ids;           // which microbatch each entry is (DualPipe's
                                             // copies of a layer each run half of them)
  std::vector<int> expert_rows;              // R of each microbatch: what this rank's
                                             // experts ran (= M without expert parallelism)
  std::vector<int> ep_rows;                  // alltoall: the rows it received over ep each
                                             // microbatch (= R but with etp > 1)
  long long nonempty_experts = 0;            // sum over microbatches: this rank's experts
                                             // with >= 1 row
  double aux_loss = 0, z_loss = 0;           // sums over microbatches, coefficients applied
  int microbatches = 0;
};

// Per MoE layer held on this rank, across steps: its expert bias and its statistics.
struct MoeLayerState {
  Buffer<float> expert_bias;  // (E) on the device, category params; only with expert bias
  // The step's per-expert counts on the device (E int32 each, views of the Transformer's
  // routing counts), which the dispatch's scan writes at the first recorded microbatch and adds
  // to at the others (kernels::moe_dispatch_offsets).
  int* kept_counts = nullptr;    // pairs each expert ran: the expert bias's c_e
  int* routed_counts = nullptr;  // pairs routed to each expert, before drops
  bool counts_pending = false;   // they hold microbatches that stats has not seen yet
  MoeLayerStats stats;
};

template <typename T>
struct MoeWeights {
  const T* router = nullptr;       // (E, h)
  const T* experts_fc1 = nullptr;  // (E, fc1_e, h)
  const T* experts_fc2 = nullptr;  // (E, h, f_e)
  const T *shared_fc1 = nullptr, *shared_fc2 = nullptr, *shared_gate = nullptr;
};
template <typename T>
struct MoeGrads {
  T *router = nullptr, *experts_fc1 = nullptr, *experts_fc2 = nullptr;
  T *shared_fc1 = nullptr, *shared_fc2 = nullptr, *shared_gate = nullptr;
};

// Megatron's get_capacity: ceil(tokens k / E * cf), in double as Python computes it.
int expert_capacity(int tokens, int k, int E, float capacity_factor);

// Saved for backward, one microbatch, one MoE layer (category activations). R: the rows this
// rank's experts run (= M without expert parallelism; parallel/expert_parallel.h).
template <typename T>
struct MoeActivations {
  Buffer<float> logits;        // (N, E)
  Buffer<float> gates;         // (N, k)
  Buffer<int> experts;         // (N, k)
  ExpertExchange exchange;     // the dispatch's maps and counts (row_pair M, slots N k, ...)
  Buffer<T> expert_in;         // (R, h) the local experts' fc1 input
  Buffer<float> expert_gates;  // (R)
  Buffer<T> fc1_out;           // (R, fc1_e)
  Buffer<T> act_out;           // (R, f_e) gated activation: fc2's input
  Buffer<T> shared_fc1_out;    // (N, fc1_s)
  Buffer<T> shared_act_out;    // (N, f_s)
  Buffer<T> shared_out;        // (N, h) with the gate: the shared expert's output before it
  Buffer<T> shared_gate;       // (N) with the gate: its logit
  Buffer<int> aux_counts;      // (groups, E) with the aux loss, training: each group's top-k
                               // counts c_{g,e}, summed over tp and cp; d(aux)/d(p_e(t)) =
                               // aux_scale c_{g(t),e}
  double aux_scale = 0;
};

// u: norm2's output (N, h); out (N, h) "=" the layer's MLP output. Records statistics into
// c.moe->stats when c.record_moe_stats.
template <typename T>
void moe_forward(const LayerContext& c, const MoeWeights<T>& w, const T* u, T* out,
                 MoeActivations<T>& a);
// dout (N, h) -> du (N, h) "="; the weights' gradients +=; releases nothing (the layer does).
template <typename T>
void moe_backward(const LayerContext& c, const MoeWeights<T>& w, MoeGrads<T>& g, const T* u,
                  const T* dout, T* du, MoeActivations<T>& a);

}  // namespace paralab
