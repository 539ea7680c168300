// plan/tensor_parallel.cpp: the tensor-parallel group's communication of one step
// (notes/model.md, "Tensor parallelism", is the spec; parallel/tensor_parallel.h the method).
#include <algorithm>
#include "model/param_table.h"  // ParamSpec
#include "plan/plan.h"

namespace paralab {

// ---- tensor parallelism: communication ------------------------------------------------
std::vector<CommPlanEntry> tensor_parallel_comm(const ModelConfig& m, int B, int tp, bool sp,
                                                int e, int64_t microbatches, int zero_stage,
                                                const ModelSlice& slice) {
  std::vector<CommPlanEntry> out;
  if (tp == 1) return out;
  const int64_t L = m.num_layers, N = (int64_t)B * m.seq_length / m.context_parallel.size,
                Nh = N * m.hidden_size;
  const int64_t ends = (slice.embedding ? 1 : 0) + (slice.head ? 1 : 0);
  // The slice's layers, and which of them full recompute runs again (with its collectives).
  std::vector<int> layers = slice.layer_ids;
  if (layers.empty())
    for (int l = 0; l < (slice.layers < 0 ? L : slice.layers); ++l) layers.push_back(l);
  std::vector<bool> recomputed(L, false);
  int64_t R = slice.recomputed;
  if (!slice.recomputed_ids.empty()) {
    for (int l : slice.recomputed_ids) recomputed[l] = true;
  } else if (R < 0) {
    const std::vector<int> groups = m.recompute.full_groups(m.num_layers);
    for (int l = 0; l < (int)groups.size(); ++l) recomputed[l] = groups[l] >= 0;
  } else {
    for (int i = 0; i < R && i < (int)layers.size(); ++i) recomputed[layers[i]] = true;
  }
  int64_t Ld = 0, Lm = 0, Rd = 0, Rm = 0;  // dense and MoE layers; of each, recomputed
  for (int l : layers) {
    const bool moe = m.moe.is_moe_layer(l);
    (moe ? Lm : Ld) += 1;
    if (recomputed[l]) (moe ? Rm : Rd) += 1;
  }
  // Vocabulary-parallel loss: per chunk of c rows an all-reduce MAX of c floats and a SUM
  // of 2c (sum of exponentials, target logit), fp32; the chunks cover the N rows once.
  const int64_t rows = std::min<int64_t>(N, m.cross_entropy_chunk);
  const int64_t chunks = (N + rows - 1) / rows;
  int64_t ar_calls = slice.head ? 2 * chunks : 0, ar_bytes = slice.head ? 4 * N + 4 * 2 * N : 0;
  int64_t rs_calls = 0, rs_bytes = 0, ag_calls = 0, ag_bytes = 0;
  int64_t replicated_calls = 0, replicated_bytes = 0;
  if (!sp) {
    // g after proj and fc2 (forward), f before qkv and fc1 (backward); the embedding's g;
    // the head's input gradient d(xf), reduced once the loss has run. (No MoE layer: experts
    // under tp need sp.)
    ar_calls += 4 * Ld + 2 * Rd + ends;
    ar_bytes += (4 * Ld + 2 * Rd + ends) * Nh * e;
  } else {
    // Per dense layer: forward gathers before qkv and fc1, scatters after proj and fc2;
    // backward gathers proj's and fc2's output gradients and (again) qkv's and fc1's inputs,
    // and scatters qkv's and fc1's input gradients; an MoE layer attention's half. The
    // embedding scatters x0 and gathers d(x0); the head gathers xf and scatters d(xf), and
    // with --no-fused-ce gathers xf again in backward for the output weight's gradient
    // (model/head.cpp head_backward).
    const int64_t unfused_regather = slice.head && !m.fused_cross_entropy ? 1 : 0;
    ag_calls = 6 * Ld + 3 * Lm + 2 * Rd + Rm + ends + unfused_regather;
    ag_bytes = ag_calls * Nh * e;
    rs_calls = 4 * Ld + 2 * Lm + 2 * Rd + Rm + ends;
    rs_bytes = rs_calls * Nh * e;
    // Replicated parameters saw only the rank's tokens: one all-reduce of their gradients
    // per unit that has any (each layer; gpt's position embedding; the final norm), sized
    // from the parameter table (gpt 6h per dense layer, llama 2h; an MoE layer's router and
    // shared expert too; S h; gpt 2h, llama h). It is the first step of the unit's bucket's
    // dp reduction (DataParallel::before_grad_reduce), so it comes as often as that: under
    // ZeRO 0-1 once a step (the gradient buffer accumulates the microbatches), under ZeRO 2-3
    // every microbatch, but a deferred bucket's once.
    std::vector<int64_t> replicated(L + 2, 0);
    for (const ParamSpec& p : param_table(m)) {
      if (p.split != TpSplit::REPLICATED || p.expert) continue;  // experts: apart under tp
      int unit = (int)L + 1;
      if (p.name.compare(0, 10, "embedding.") == 0) unit = 0;
      else if (p.name.compare(0, 7, "layers.") == 0) unit = 1 + std::stoi(p.name.substr(7));
      replicated[unit] += p.numel();
    }
    const int64_t every = zero_stage >= 2 ? microbatches : 1;
    auto add_unit = [&](int unit, int64_t n) {
      const std::vector<int>& once = slice.deferred_bucket_units;
      const int64_t times = std::count(once.begin(), once.end(), unit) ? 1 : every;
      if (n > 0) {
        replicated_calls += times;
        replicated_bytes += times * n * e;
      }
    };
    if (slice.embedding) add_unit(0, replicated[0]);
    for (int l : layers) add_unit(1 + l, replicated[1 + l]);
    if (slice.head) add_unit((int)L + 1, replicated[L + 1]);
    // the aux loss's expert counts, summed over tp every forward of an MoE layer
    const Moe& x = m.moe;
    if (x.enabled() && x.balancing != Moe::Balancing::NONE && x.aux_loss_coeff > 0) {
      ar_calls += Lm + Rm;
      ar_bytes += (Lm + Rm) * (int64_t)x.num_experts * 4;
    }
  }
  auto add = [&](CommOp op, int64_t calls, int64_t payload) {
    if (calls > 0)
      out.push_back({CommGroup::TP, op, calls, payload, bus_factor(op, tp) * (double)payload});
  };
  // Per step: every microbatch, plus the gradient norm's one fp32 (replicated parameters
  // counted on tp rank 0 only).
  add(CommOp::ALL_REDUCE, ar_calls * microbatches + replicated_calls + 1,
      ar_bytes * microbatches + replicated_bytes + 4);
  add(CommOp::REDUCE_SCATTER, rs_calls * microbatches, rs_bytes * microbatches);
  add(CommOp::ALL_GATHER, ag_calls * microbatches, ag_bytes * microbatches);
  return out;
}

}  // namespace paralab
