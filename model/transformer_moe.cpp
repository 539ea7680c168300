// model/transformer_moe.cpp: the Transformer's mixture-of-experts state across steps: the
// routers' statistics (model/moe.h MoeLayerStats) and the expert bias's per-step update.
#include <stdexcept>
#include "kernels/ops.h"
#include "model/transformer.h"

namespace paralab {

// ---- MoE: statistics and the expert bias ----------------------------------------------------
void Transformer::reset_moe_stats() {
  for (MoeLayerState& s : moe_) {
    s.stats = MoeLayerStats();
    s.counts_pending = false;  // the next recorded forward writes the counts afresh
  }
}

void Transformer::collect_moe_stats() const {
  bool pending = false;
  for (const MoeLayerState& s : moe_) pending = pending || s.counts_pending;
  if (!pending) return;
  // every MoE layer here in one copy: (2, layers, E) int32, kept then routed
  const int E = config_.moe.num_experts;
  std::vector<int> counts(routing_counts_.size());
  kernels::memcpy_to_host(device_, counts.data(), routing_counts_.data(), routing_counts_.bytes());
  kernels::count_routing_copy((double)routing_counts_.bytes());
  for (MoeLayerState& s : moe_) {
    if (!s.kept_counts || s.stats.microbatches == 0) continue;
    const int* kept = counts.data() + (s.kept_counts - routing_counts_.data());
    const int* routed = counts.data() + (s.routed_counts - routing_counts_.data());
    MoeLayerStats& st = s.stats;
    st.tokens_per_expert.assign(routed, routed + E);
    st.kept_per_expert.assign(kept, kept + E);
    long long all = 0, ran = 0, rows = 0;
    for (int e = 0; e < E; ++e) all += routed[e], ran += kept[e];
    for (int m : st.permuted_rows) rows += m;
    st.dropped_pairs = all - ran;
    st.padding_rows = rows - ran;  // the permuted rows that hold no pair
    s.counts_pending = false;
  }
}

void Transformer::update_expert_bias(Communicator* data_parallel_group, bool apply) {
  if (!config_.moe.expert_bias || routing_counts_.empty()) return;
  collect_moe_stats();  // this rank's counts, before the sum below replaces them
  const int E = config_.moe.num_experts;
  std::vector<MoeLayerState*> layers;  // this stage's MoE layers
  for (MoeLayerState& s : moe_)
    if (!s.expert_bias.empty()) layers.push_back(&s);
  // the pairs each expert ran this step, every layer's in one all-reduce over data
  // parallelism (the trainer passes dp x cp under context parallelism: its cp ranks routed
  // the other parts of the same sequences) (int32: exact): (MoE layers here) x E x 4 bytes,
  // in place in the kept half of the routing counts
  if (data_parallel_group && data_parallel_group->size() > 1)
    data_parallel_group->all_reduce(routing_counts_.data(), layers.size() * E, ReduceOp::SUM,
                                    DType::I32);
  if (!apply) return;
  for (MoeLayerState* s : layers)
    kernels::moe_expert_bias_update(device_, s->expert_bias.data(), s->kept_counts, E,
                                    config_.moe.bias_update_rate);
}

std::vector<float> Transformer::expert_bias(int layer) const {
  const MoeLayerState& s = moe_.at(layer);
  std::vector<float> bias(s.expert_bias.size());
  if (!bias.empty())
    kernels::memcpy_to_host(device_, bias.data(), s.expert_bias.data(), bias.size() * sizeof(float));
  return bias;
}

void Transformer::set_expert_bias(int layer, const std::vector<float>& bias) {
  MoeLayerState& s = moe_.at(layer);
  if (bias.size() != s.expert_bias.size())
    throw std::logic_error("Transformer::set_expert_bias: layer " + std::to_string(layer) +
                           " holds " + std::to_string(s.expert_bias.size()) + " biases, got " +
                           std::to_string(bias.size()));
  kernels::memcpy_from_host(device_, s.expert_bias.data(), bias.data(), bias.size() * sizeof(float));
}

}  // namespace paralab
