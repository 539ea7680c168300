// plan/moe_memory.cpp: see moe_memory.h (the tensors and transients of model/moe.cpp, one
// line each, in the order the code allocates them).
#include "plan/moe_memory.h"
#include <algorithm>
#include <cmath>
#include "plan/plan.h"  // ActivationTensor, layer_activation_tensors, local_sizes
#include "plan/fp8.h"   // fp8_expert_scratch_bytes

namespace paralab {

int MoeRouting::microbatches() const {
  size_t n = 0;
  for (const std::vector<int>& r : rows) n = std::max(n, r.size());
  return (int)n;
}

int64_t moe_capacity(const ModelConfig& m, int64_t N) {
  const Moe& e = m.moe;
  if (!(e.capacity_factor > 0)) return -1;
  // model/moe.cpp expert_capacity, in double as Megatron's Python computes it
  return (int64_t)std::ceil((double)N * e.topk / e.num_experts * (double)e.capacity_factor);
}

int64_t moe_tokens(const ModelConfig& m, int B, int split) {
  // B sequences of the rank's S/cp tokens each, N/split of them under sequence parallelism
  return (int64_t)B * (m.seq_length / m.context_parallel.size) / split;
}

bool moe_rows_exact(const ModelConfig& m) {
  // dropless keeps every pair (M = N k); padding fixes every expert's rows
  return !(m.moe.capacity_factor > 0) || m.moe.pad_to_capacity;
}

int64_t moe_expected_kept(const ModelConfig& m, int B, int split) {
  const int64_t N = moe_tokens(m, B, split), pairs = N * m.moe.topk;
  const int64_t C = moe_capacity(m, N);
  return C < 0 ? pairs : std::min<int64_t>(m.moe.num_experts * C, pairs);
}

int64_t moe_expected_rows(const ModelConfig& m, int B, int split) {
  const int64_t N = moe_tokens(m, B, split);
  if (m.moe.pad_to_capacity && m.moe.capacity_factor > 0)
    return m.moe.num_experts * std::min(moe_capacity(m, N), N);
  return moe_expected_kept(m, B, split);
}

int64_t moe_rows(const ModelConfig& m, int B, const MoeRouting& r, int layer, int microbatch,
                 int split) {
  if (layer >= 0 && layer < (int)r.rows.size() && !r.rows[layer].empty()) {
    const std::vector<int>& v = r.rows[layer];
    return v[std::min<size_t>(microbatch, v.size() - 1)];
  }
  return moe_expected_rows(m, B, split);
}

int64_t moe_expert_rows(const ModelConfig& m, int B, const MoeRouting& r, int layer,
                        int microbatch, int split, int etp) {
  if (layer >= 0 && layer < (int)r.expert_rows.size() && !r.expert_rows[layer].empty()) {
    const std::vector<int>& v = r.expert_rows[layer];
    return v[std::min<size_t>(microbatch, v.size() - 1)];
  }
  return etp * moe_rows(m, B, r, layer, microbatch, split);
}

MoeRows moe_layer_rows(const ModelConfig& m, const ParallelConfig& p, int B, const MoeRouting& r,
                       int layer, int microbatch) {
  MoeRows rows;
  const int split = moe_token_split(p);
  rows.N = moe_tokens(m, B, split);
  rows.split = split;
  rows.M = moe_rows(m, B, r, layer, microbatch, split);
  const int etp = p.expert_tensor_parallel, ep = p.expert_parallel;
  rows.R = ep * etp > 1 ? moe_expert_rows(m, B, r, layer, microbatch, split, etp) : rows.M;
  rows.R_ep = rows.R;
  if (etp > 1 && p.token_dispatcher == TokenDispatcher::ALLTOALL) {
    const bool measured = layer >= 0 && layer < (int)r.ep_rows.size() && !r.ep_rows[layer].empty();
    rows.R_ep = measured ? r.ep_rows[layer][std::min<size_t>(microbatch, r.ep_rows[layer].size() - 1)]
                         : rows.M;
  }
  rows.ep = ep;
  rows.etp = etp;
  rows.dispatcher = p.token_dispatcher;
  rows.fp8_decoded_weight = m.fp8.enabled && m.fp8.param_gather && p.zero_stage == 3;
  return rows;
}

double moe_kept_step(const ModelConfig& m, int B, const MoeRouting& r, int layer,
                     int64_t microbatches, int split) {
  if (layer >= 0 && layer < (int)r.kept.size() && r.kept[layer] >= 0) return (double)r.kept[layer];
  return (double)moe_expected_kept(m, B, split) * (double)microbatches;
}

int moe_token_split(const ParallelConfig& p) {
  return p.sequence_parallel && p.tensor_parallel > 1 ? p.tensor_parallel : 1;
}

int moe_layer_count(const ModelConfig& m) {
  int n = 0;
  for (int l = 0; l < m.num_layers; ++l) n += m.moe.is_moe_layer(l);
  return n;
}

int dense_layer_count(const ModelConfig& m) { return m.num_layers - moe_layer_count(m); }

namespace {
bool balancing_on(const Moe& e) {
  return e.balancing != Moe::Balancing::NONE && e.aux_loss_coeff > 0;
}
}  // namespace

std::vector<ActivationTensor> moe_tensors(const ModelConfig& m, int B, int act,
                                          const MoeRows& rows) {
  // the layer's tokens are rows.N (moe_tokens: B S/cp, over tp under sp); B its sequences
  const Moe& e = m.moe;
  const int64_t N = rows.N, h = m.hidden_size, E = e.num_experts,
                k = e.topk, M = rows.M, R = rows.R;
  std::vector<ActivationTensor> t;
  auto add = [&](const char* name, int64_t elements, int bytes) {
    t.push_back({name, elements, bytes, false});
  };
  add("moe.logits", N * E, 4);              // the router's fp32 logits
  add("moe.gates", N * k, 4);               // the k gate values per token
  add("moe.experts", N * k, 4);             // int32: the k experts per token
  if (balancing_on(e)) {                    // int32: the aux loss's top-k counts per group
    const int64_t groups = e.balancing == Moe::Balancing::SEQ_AUX_LOSS ? B : 1;
    add("moe.aux_counts", groups * E, 4);
  }
  add("moe.row_pair", M, 4);                // int32: each permuted row's (token, slot)
  add("moe.slots", N * k, 4);               // int32: each pair's permuted row
  const int64_t P = (int64_t)rows.ep * rows.etp;  // the ranks tokens are exchanged over
  if (P > 1 && rows.dispatcher == TokenDispatcher::ALLTOALL) {
    add("moe.regroup", R, 4);               // int32: received rows by local expert
    add("moe.ungroup", R, 4);               //   and back
  } else if (P > 1) {
    add("moe.source_pair", R, 4);           // int32: each local row's gathered pair
    add("moe.local_slots", P * N * k, 4);  // int32: each gathered pair's local row
  }
  add("moe.expert_in", R * h, act);         // the local experts' fc1 input
  add("moe.expert_gates", R, 4);            // the gate of each of their rows
  add("moe.fc1_out", R * m.moe_fc1_size() / rows.etp, act);  // the rank's slice of the width
  add("moe.act", R * m.moe_ffn() / rows.etp, act);  // gated activation: fc2's input
  if (e.shared_expert_size > 0) {
    add("moe.shared_fc1_out", N * m.shared_fc1_size(), act);
    add("moe.shared_act", N * e.shared_expert_size, act);
    if (e.shared_expert_gate) {
      add("moe.shared_out", N * h, act);    // its output before the gate
      add("moe.shared_gate", N, act);       // the gate's logit
    }
  }
  return t;
}

int64_t qk_norm_transient_bytes(const ModelConfig& m, int B, int act, int tp) {
  if (!m.qk_layernorm) return 0;
  const LocalSizes l = local_sizes(m, B, tp);
  return l.N * std::max(l.heads, l.groups) * l.head_dim * act;  // q's, then k's
}

namespace {

// The MoE part of one layer's footprint: forward max over its transients of (the MoE tensors
// allocated by then + the transient), backward its largest transient set.
void moe_transients(const ModelConfig& m, int B, int act, const MoeRows& rows,
                    int64_t& fwd_transient, int64_t& fwd_peak, int64_t& bwd_transient) {
  const Moe& e = m.moe;
  const int64_t N = rows.N, h = m.hidden_size, E = e.num_experts,
                k = e.topk, M = rows.M, R = rows.R, Re = rows.R_ep, T = rows.etp;
  const int64_t P = (int64_t)rows.ep * T;  // the ranks tokens are exchanged over
  const int64_t fc1 = m.moe_fc1_size() / T, f = m.moe_ffn() / T;  // the rank's slice
  const bool half = act == 2, balancing = balancing_on(e);
  const bool alltoall = P > 1 && rows.dispatcher == TokenDispatcher::ALLTOALL;
  const bool allgather = P > 1 && !alltoall;
  const int64_t groups = e.balancing == Moe::Balancing::SEQ_AUX_LOSS ? B : 1;
  // the MoE tensors alive at each point of the forward (moe_tensors' order)
  const int64_t logits = N * E * 4;
  const int64_t routed = logits + 2 * N * k * 4;  // + gates, experts
  const int64_t aux = routed + (balancing ? groups * E * 4 : 0);  // + the aux loss's counts
  const int64_t maps = aux + M * 4 + N * k * 4;  // + row_pair, slots
  const int64_t exchange_maps = alltoall ? 2 * R * 4 : allgather ? R * 4 + P * N * k * 4 : 0;
  const int64_t expert_rows = maps + exchange_maps + R * h * act + R * 4;
  const int64_t experts_in = expert_rows + R * (fc1 + f) * act;
  fwd_transient = fwd_peak = 0;
  auto fwd = [&](int64_t alive, int64_t transient) {
    fwd_transient = std::max(fwd_transient, transient);
    fwd_peak = std::max(fwd_peak, alive + transient);
  };
  if (half) fwd(logits, N * h * 4 + E * h * 4);            // u_f, w_f
  if (balancing && e.expert_bias) fwd(aux, 2 * N * k * 4);  // g2, e2 beside the counts
  if (balancing) fwd(aux, N * E * 4);                       // scores (statistics)
  // the dispatch's counting sort: counts E, rows E, offset E + 1 (kernels/ops/moe_dispatch.h),
  // beside the alltoall's gathered counts (not padded to capacity), then beside the maps and
  // the probs policy's ranks
  const int64_t sizes = (3 * E + 1) * 4;
  const bool padded = e.pad_to_capacity && e.capacity_factor > 0;
  const bool probs = e.capacity_factor > 0 && e.drop_policy == Moe::DropPolicy::PROBS;
  if (alltoall && !padded) fwd(aux, sizes + P * E * 4);
  fwd(maps, sizes + (probs ? N * k * 4 : 0));
  const int64_t row = h * act + 4;  // a row and its gate
  if (alltoall) {
    fwd(maps, Re * row + M * row);                           // received + send
    if (T > 1) {  // gathered over etp beside the received block: its etp copies, rows first
      fwd(maps, Re * row + R * row + T * Re * h * act);
      fwd(expert_rows, R * row);                             // regrouped beside the gathered
    } else {
      fwd(expert_rows, Re * row);                            // regrouped beside the received
    }
  } else if (allgather) {
    const int64_t gathered = P * N * h * act + P * N * k * 4 + P * (E + N * k) * 4;
    fwd(maps, gathered);
    fwd(expert_rows, gathered);
  }
  const int64_t y = R * h * act;
  // FP8: the experts' operands at R rows while their GEMMs run, freed before the combine
  // (plan/fp8.h)
  const int64_t fp8 = fp8_expert_scratch_bytes(m, R, fc1, f, 0);
  if (fp8 > 0) fwd(experts_in, y + fp8);
  if (alltoall && T > 1)  // the block, with the ungrouped partials and the peers' partials
    fwd(experts_in, y + std::max(Re * h * act + R * h * act + T * Re * h * act,
                                 Re * h * act + M * h * act));
  else
    fwd(experts_in, y + (alltoall ? R * h * act + M * h * act : allgather ? P * N * h * act : 0));
  // backward
  const int64_t dx = N * h * act, dgates = N * k * 4;
  int64_t exchange = 0;
  if (alltoall && T > 1)
    exchange = std::max({Re * h * act + M * h * act,                          // combine's
                         Re * h * act + R * h * act + T * Re * h * act,
                         Re * row + R * row + T * Re * h * act,               // dispatch's
                         Re * row + M * row});
  else if (alltoall)
    exchange = std::max(M * h * act + R * h * act, R * h * act + R * 4 + M * h * act + M * 4);
  else if (allgather)
    exchange = P * N * h * act;
  // the exchanges run before and after the experts' GEMMs, FP8's operands between them
  const int64_t fp8_bwd =
      fp8_expert_scratch_bytes(m, R, fc1, f, rows.fp8_decoded_weight ? act : 0);
  const int64_t experts = R * 4 + R * h * act + R * f * act + R * fc1 * act + R * h * act +
                          std::max(exchange, fp8_bwd);
  const int64_t dscores = balancing ? N * E * 4 : 0;
  const int64_t grads = (half ? N * h * 4 + E * h * 4 : 0) + N * h * 4 + E * h * 4 +
                        (half ? std::max(N, E) * h * 2 : 0);  // u_f w_f, du_f dw_f, rounded
  const int64_t router = N * E * 4 + std::max(dscores, grads);
  int64_t shared = 0;
  if (e.shared_expert_size > 0) {
    const int64_t gated = e.shared_expert_gate ? N * h * act : 0;
    const int64_t dz = e.shared_expert_gate ? N * act : 0;
    shared = gated + std::max(dz, N * e.shared_expert_size * act + N * m.shared_fc1_size() * act);
  }
  bwd_transient = dx + dgates + std::max({experts, router, shared});
}

}  // namespace

LayerFootprint layer_footprint(const ModelConfig& m, int B, int act, int mask, int tp, bool sp,
                               int layer, const MoeRows& rows) {
  LayerFootprint f;
  const bool moe = m.moe.is_moe_layer(layer);
  std::vector<ActivationTensor> t = moe ? moe_layer_activation_tensors(m, B, act, mask, rows, tp, sp)
                                        : layer_activation_tensors(m, B, act, mask, tp, sp);
  f.saved = sum_bytes(t);
  f.forward_peak = f.saved;
  f.backward_transient = qk_norm_transient_bytes(m, B, act, tp);
  if (moe) {
    // everything but the MoE tensors is allocated when moe_forward starts (allocate_activations)
    const int64_t own = sum_bytes(moe_tensors(m, B, act, rows));
    int64_t fwd_t = 0, fwd_peak = 0, bwd_t = 0;
    moe_transients(m, B, act, rows, fwd_t, fwd_peak, bwd_t);
    f.forward_transient = fwd_t;
    f.forward_peak = std::max(f.saved, f.saved - own + fwd_peak);
    f.backward_transient = std::max(f.backward_transient, bwd_t);
    f.before_moe = f.saved - own;
    f.moe_backward_transient = bwd_t;
  }
  return f;
}

}  // namespace paralab
