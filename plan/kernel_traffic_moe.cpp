// plan/kernel_traffic_moe.cpp: the non-GEMM kernels of an MoE layer's MLP block
// (kernel_traffic.h), as model/moe.cpp and parallel/expert_parallel*.cpp launch them.
//
// Per MoE layer and microbatch, N the rank's tokens (N/t with sequence parallelism), E experts,
// k per token, M the rows its tokens send, R the rows its experts run, R_ep the block it
// receives over ep (plan/moe_memory.h MoeRows), f_e the expert's width on this rank, P = etp ep:
//   forward   [bf16: u and the router weight widened: convert N h, E h]  topk (N, E, k)
//             [aux loss: [with the expert bias: topk again without it], its counts (groups)]
//             [a training forward: balancing scores, their weighted sum; z loss sum]
//             the dispatch's counting sort: expert counts, offsets [+ the statistics' sums],
//             the sizes to the host (a copy of E rows; alltoall P E; none padded),
//             [probs with a capacity: gate rank], scatter
//             dispatch  one rank: permute (M rows with gates)
//                       alltoall: permute M; [ep 1: the exchange is a copy, M h and M x4];
//                         [etp > 1: etp copies of the block, rows and gates]; permute R by
//                         local expert (k = 1)
//                       allgather: this rank's slots into the map (a copy of N k), the
//                         sources' rows per expert to the host (one copy of P E; none
//                         padded), the local maps, permute R from the P N gathered tokens
//             gelu | swiglu with the gates (R, f_e)
//             combine   one rank: unpermute (N)
//                       alltoall: permute R back to arrival order; [etp > 1: the partials
//                         summed: a copy + (etp - 1) accumulates of R_ep h]; [ep 1: a copy
//                         of R_ep h]; unpermute (N)
//                       allgather: unpermute into the P N gathered tokens
//             [shared expert: gelu | swiglu (N, f_s); its gate: shared_gate (N, h)]
//   backward  combine's backward (permute M, or the alltoall/allgather mirror), the
//             activation's backward (R, f_e), dispatch's backward (unpermute and the gates'
//             unpermute, or their alltoall/allgather mirror, with etp > 1's sums),
//             topk backward, [aux: weighted sum and balancing backward], [z loss backward],
//             [bf16: convert u, router], the router's input and weight gradients accumulated
//             (fp32: accumulate; bf16: convert + accumulate), [shared gate backward],
//             [shared activation backward], the input gradient copied out (memcpy N h).
//   per step  the routers' counts to the host (a copy of 2 E per MoE layer here); [expert
//             bias: its update, one kernel per MoE layer here]
#include "plan/kernel_traffic.h"

namespace paralab {

namespace {

struct MoeShape {
  double N, E, h, fe, fs, M, R, R_ep;
  int k, P, ep, etp;
  bool fused, gpt, alltoall, distributed;
  MoeShape(const ModelConfig& m, const MoeRows& r) {
    N = (double)r.N;
    E = m.moe.num_experts;
    k = m.moe.topk;
    h = m.hidden_size;
    fe = (double)(m.moe_ffn() / r.etp);
    fs = m.moe.shared_expert_size;
    M = (double)r.M;
    R = (double)r.R;
    R_ep = (double)r.R_ep;
    ep = r.ep;
    etp = r.etp;
    P = ep * etp;
    fused = m.moe.permute_fusion;
    gpt = m.is_gpt();
    alltoall = r.dispatcher == TokenDispatcher::ALLTOALL;
    distributed = P > 1;
  }
};

bool balancing_on(const Moe& m) {
  return m.balancing != Moe::Balancing::NONE && m.aux_loss_coeff > 0;
}

// expert_parallel_alltoall.cpp's exchange over ep: an all-to-all, or at ep 1 a copy of `rows`.
void exchange(KernelTally& k, const MoeShape& x, double rows, double width_bytes) {
  if (x.ep == 1) k.memcpy_device(rows * width_bytes);
}
// gather_blocks: etp copies of this rank's block, then an all-to-all.
void gather_blocks(KernelTally& k, const MoeShape& x, double width_bytes) {
  for (int t = 0; t < x.etp; ++t) k.memcpy_device(x.R_ep * width_bytes);
}
// reduce_blocks: the own partial copied, the etp - 1 others added to it.
void reduce_blocks(KernelTally& k, const MoeShape& x, double width, bool fp32) {
  k.memcpy_device(x.R_ep * width * (fp32 ? 4 : k.e()));
  for (int t = 1; t < x.etp; ++t) fp32 ? k.accumulate_f32(x.R_ep * width) : k.accumulate(x.R_ep * width);
}

}  // namespace

void moe_forward_traffic(KernelTally& k, const ModelConfig& m, const MoeRows& rows, int S,
                         bool record_stats, bool first) {
  const MoeShape x(m, rows);
  const Moe& moe = m.moe;
  const int e = k.e();
  // ---- router
  if (e != 4) k.convert(x.N * x.h), k.convert(x.E * x.h);  // as_float: u, the router weight
  k.moe_router_topk(x.N, x.E, x.k, moe.expert_bias);
  const double groups = moe.balancing == Moe::Balancing::SEQ_AUX_LOSS ? x.N / S : 1;
  if (balancing_on(moe)) {  // balancing_counts
    if (moe.expert_bias) k.moe_router_topk(x.N, x.E, x.k, false);
    k.moe_expert_counts(x.N, x.k, x.E, groups);
  }
  if (record_stats && balancing_on(moe)) {
    k.moe_balancing_scores(x.N, x.E);
    k.moe_weighted_sum(x.N, x.E, groups);
  }
  if (record_stats && moe.z_loss_coeff > 0) k.moe_z_loss_sum(x.N, x.E);
  // ---- the dispatch's counting sort, and routing_sizes' copy
  const bool padded = moe.pad_to_capacity && moe.capacity_factor > 0;
  const bool probs = moe.capacity_factor > 0 && moe.drop_policy == Moe::DropPolicy::PROBS;
  k.moe_expert_counts(x.N, x.k, x.E, 1);
  k.moe_dispatch_offsets(x.E, record_stats, record_stats && !first);
  if (!padded) k.routing_copy(4 * x.E * (x.distributed && x.alltoall ? x.P : 1));
  if (probs) k.moe_gate_rank(x.N, x.k);
  k.moe_dispatch_scatter(x.N, x.k, x.E, x.M, probs);
  // ---- dispatch_tokens
  if (!x.distributed) {
    k.moe_permute(x.M, x.h, true, x.fused);
  } else if (x.alltoall) {
    k.moe_permute(x.M, x.h, true, x.fused);  // send
    exchange(k, x, x.M, x.h * e);            // rows
    exchange(k, x, x.M, 4);                  // gates
    if (x.etp > 1) gather_blocks(k, x, x.h * e), gather_blocks(k, x, 4);
    k.moe_permute(x.R, x.h, true, x.fused);  // by local expert
  } else {
    k.memcpy_device(4 * x.N * x.k);  // the slots into this rank's map
    if (!padded) k.routing_copy(4 * x.P * x.E);  // every source's rows per expert, to the host
    k.moe_local_maps(x.R, x.P, x.N * x.k, x.E / x.ep);
    k.moe_permute(x.R, x.h, true, x.fused);  // from the gathered tokens
  }
  // ---- experts' activation, then combine_tokens
  if (x.gpt) k.moe_gelu_forward(x.R, x.fe);
  else k.moe_swiglu_forward(x.R, x.fe);
  if (!x.distributed) {
    k.moe_unpermute(x.N, x.h, x.k, x.fused);
  } else if (x.alltoall) {
    k.moe_permute(x.R, x.h, false, x.fused);  // back to arrival order (ungrouped | block)
    if (x.etp > 1) reduce_blocks(k, x, x.h, false);
    exchange(k, x, x.R_ep, x.h * e);
    k.moe_unpermute(x.N, x.h, x.k, x.fused);
  } else {
    k.moe_unpermute(x.P * x.N, x.h, x.k, x.fused);
  }
  // ---- shared expert
  if (moe.shared_expert_size > 0) {
    if (x.gpt) k.gelu_forward(x.N * x.fs);
    else k.swiglu_forward(x.N, x.fs);
    if (moe.shared_expert_gate) k.moe_shared_gate_forward(x.N, x.h);
  }
}

void moe_backward_traffic(KernelTally& k, const ModelConfig& m, const MoeRows& rows, int S) {
  const MoeShape x(m, rows);
  const Moe& moe = m.moe;
  const int e = k.e();
  const double pairs = x.N * x.k;
  // ---- combine_tokens_backward: dout's rows to the experts
  if (!x.distributed) {
    k.moe_permute(x.M, x.h, false, x.fused);
  } else if (x.alltoall) {
    k.moe_permute(x.M, x.h, false, x.fused);
    exchange(k, x, x.M, x.h * e);
    if (x.etp > 1) gather_blocks(k, x, x.h * e);
    k.moe_permute(x.R, x.h, false, x.fused);
  } else {
    k.moe_permute(x.R, x.h, false, x.fused);
  }
  if (x.gpt) k.moe_gelu_backward(x.R, x.fe);
  else k.moe_swiglu_backward(x.R, x.fe);
  // ---- dispatch_tokens_backward: the input and gate gradients back to the tokens
  if (!x.distributed) {
    k.moe_unpermute(x.N, x.h, x.k, x.fused);
    k.moe_unpermute_gates(pairs);
  } else if (x.alltoall) {
    k.moe_permute(x.R, x.h, true, x.fused);  // to arrival order, with the gates
    if (x.etp > 1) reduce_blocks(k, x, x.h, false), reduce_blocks(k, x, 1, true);
    exchange(k, x, x.R_ep, x.h * e);
    exchange(k, x, x.R_ep, 4);
    k.moe_unpermute(x.N, x.h, x.k, x.fused);
    k.moe_unpermute_gates(pairs);
  } else {
    k.moe_unpermute(x.P * x.N, x.h, x.k, x.fused);
    k.moe_unpermute_gates(x.P * pairs);
  }
  // ---- router
  k.moe_router_topk_backward(x.N, x.E, x.k);
  if (balancing_on(moe)) {
    const double groups = moe.balancing == Moe::Balancing::SEQ_AUX_LOSS ? x.N / S : 1;
    k.moe_weighted_sum_backward(x.N, x.E, groups);
    k.moe_balancing_scores_backward(x.N, x.E);
  }
  if (moe.z_loss_coeff > 0) k.moe_z_loss_backward(x.N, x.E);
  if (e != 4) k.convert(x.N * x.h), k.convert(x.E * x.h);  // as_float: u, the router weight
  for (double n : {x.N * x.h, x.E * x.h}) {  // accumulate_float: dx, then the router's dW
    if (e == 4) k.accumulate(n);
    else k.convert(n), k.accumulate(n);
  }
  // ---- shared expert
  if (moe.shared_expert_size > 0) {
    if (moe.shared_expert_gate) k.moe_shared_gate_backward(x.N, x.h);
    if (x.gpt) k.gelu_backward(x.N * x.fs);
    else k.swiglu_backward(x.N, x.fs);
  }
  k.memcpy_device(x.N * x.h * e);  // du = dx
}

void moe_step_traffic(KernelTally& k, const Plan& plan, int rank) {
  const ModelConfig& m = plan.model;
  if (!m.moe.enabled()) return;
  // the MoE layers this rank's stage holds
  int here = 0;
  const int pp_rank = plan.ranks.empty() ? 0 : plan.ranks.at(rank).pp_rank;
  std::vector<int> firsts{0}, counts{m.num_layers};
  if (!plan.pipeline.stages.empty()) {
    firsts = plan.pipeline.stages.at(pp_rank).chunk_first_layer;
    counts = plan.pipeline.stages.at(pp_rank).chunk_layers;
  }
  for (size_t c = 0; c < firsts.size(); ++c)
    for (int l = firsts[c]; l < firsts[c] + counts[c]; ++l) here += m.moe.is_moe_layer(l);
  if (here == 0) return;
  const double E = m.moe.num_experts;
  k.routing_copy(8 * E * here);  // Transformer::collect_moe_stats
  if (m.moe.expert_bias)
    for (int l = 0; l < here; ++l) k.moe_expert_bias_update(E);
}

}  // namespace paralab
