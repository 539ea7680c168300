// model/transformer_moe.cpp: the Transformer's mixture-of-experts state across steps: the
// routers' statistics (model/moe.h MoeLayerStats) and the expert bias's per-step update.
#include <stdexcept>
#include "kernels/ops.h"
#include "model/transformer.h"

namespace paralab {

// ---- MoE: statistics and the expert bias ----------------------------------------------------
void Transformer::reset_moe_stats() {
  for (MoeLayerState& s : moe_) s.stats = MoeLayerStats();
}

void Transformer::update_expert_bias(Communicator* data_parallel_group, bool apply) {
  if (!config_.moe.expert_bias) return;
  const int E = config_.moe.num_experts;
  std::vector<int> layers;  // this stage's MoE layers
  for (int l = 0; l < config_.num_layers; ++l)
    if (!moe_[l].expert_bias.empty()) layers.push_back(l);
  if (layers.empty()) return;
  // the pairs each expert ran this step, every layer's in one all-reduce over data
  // parallelism (the trainer passes dp x cp under context parallelism: its cp ranks routed
  // the other parts of the same sequences) (int32: exact): (MoE layers here) x E x 4 bytes
  std::vector<int> counts(layers.size() * E, 0);
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::vector<long long>& kept = moe_[layers[i]].stats.kept_per_expert;
    for (int e = 0; e < E && e < (int)kept.size(); ++e) counts[i * E + e] = (int)kept[e];
  }
  if (data_parallel_group && data_parallel_group->size() > 1) {
    if (expert_bias_counts_.size() != counts.size())
      throw std::logic_error("Transformer::update_expert_bias: no counts buffer for this dp");
    int* buf = expert_bias_counts_.data();
    kernels::memcpy_from_host(device_, buf, counts.data(), counts.size() * sizeof(int));
    data_parallel_group->all_reduce(buf, counts.size(), ReduceOp::SUM, DType::I32);
    kernels::memcpy_to_host(device_, counts.data(), buf, counts.size() * sizeof(int));
  }
  if (!apply) return;
  for (size_t i = 0; i < layers.size(); ++i) {
    MoeLayerState& s = moe_[layers[i]];
    std::vector<float> bias(E);
    kernels::memcpy_to_host(device_, bias.data(), s.expert_bias.data(), E * sizeof(float));
    bias = paralab::update_expert_bias(
        bias, std::vector<long long>(counts.begin() + i * E, counts.begin() + (i + 1) * E),
        config_.moe.bias_update_rate);
    kernels::memcpy_from_host(device_, s.expert_bias.data(), bias.data(), E * sizeof(float));
  }
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
