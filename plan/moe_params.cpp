// plan/moe_params.cpp: see moe_params.h.
#include "plan/moe_params.h"
#include <stdexcept>
#include "model/param_table.h"  // param_table: the tensors by name
#include "plan/plan.h"          // Plan

namespace paralab {

int64_t LayerParamCounts::total() const {
  return attention + norms + mlp + router + experts + shared_expert + shared_gate;
}
int64_t LayerParamCounts::active(int topk) const {
  return total() - experts + (int64_t)topk * expert;
}

const LayerParamCounts* ParamCounts::first(bool moe) const {
  for (const LayerParamCounts& l : layers)
    if (l.moe == moe) return &l;
  return nullptr;
}

namespace {
bool starts(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
}  // namespace

ParamCounts param_counts(const ModelConfig& m) {
  ParamCounts c;
  c.num_experts = m.moe.enabled() ? m.moe.num_experts : 0;
  c.topk = m.moe.enabled() ? m.moe.topk : 0;
  c.layers.resize(m.num_layers);
  for (int i = 0; i < m.num_layers; ++i) {
    c.layers[i].layer = i;
    c.layers[i].moe = m.moe.is_moe_layer(i);
    (c.layers[i].moe ? c.moe_layers : c.dense_layers)++;
  }
  for (const ParamSpec& p : param_table(m)) {
    const std::string& n = p.name;
    const int64_t x = p.numel();
    c.total += x;
    if (starts(n, "embedding.")) { c.lookups += x; continue; }
    if (n == "output.weight") { c.output += x; continue; }
    if (starts(n, "final_norm.")) { c.final_norm += x; continue; }
    if (!starts(n, "layers.")) throw std::logic_error("param_counts: unknown tensor " + n);
    const size_t dot = n.find('.', 7);
    LayerParamCounts& l = c.layers.at(std::stoi(n.substr(7, dot - 7)));
    const std::string t = n.substr(dot + 1);  // the name inside the layer
    if (starts(t, "norm1.") || starts(t, "norm2.") || starts(t, "attn.q_norm.") ||
        starts(t, "attn.k_norm."))
      l.norms += x;
    else if (starts(t, "attn.")) l.attention += x;
    else if (starts(t, "mlp.router.")) l.router += x;
    else if (starts(t, "mlp.experts.")) {
      l.experts += x;
      l.expert += x / p.shape.at(0);  // (E, ...): one expert's slice
    } else if (t == "mlp.shared.gate.weight") l.shared_gate += x;
    else if (starts(t, "mlp.shared.")) l.shared_expert += x;
    else if (starts(t, "mlp.")) l.mlp += x;
    else throw std::logic_error("param_counts: unknown layer tensor " + n);
  }
  c.active = c.lookups + c.output + c.final_norm;
  for (const LayerParamCounts& l : c.layers) c.active += l.active(c.topk);
  return c;
}

FlopsConventions flops_conventions(const Plan& plan) {
  const ModelConfig& m = plan.model;
  const ParamCounts c = param_counts(m);
  FlopsConventions f;
  f.paralab = plan.tokens_per_step > 0 ? plan.flops.model_per_step / plan.tokens_per_step : 0;
  f.paralab_note = std::string("plan/flops.h model FLOPs, attention ") +
                   attention_flops_name(plan.options.attention_flops);
  const double L = m.num_layers, s = m.seq_length, h = m.hidden_size;
  const double a = m.num_attention_heads, g = m.groups(), d = m.head_dim(), q = a * d;
  // torchtitan: 6 N_active (lookups out) + 6 L a (2 d) s
  f.torchtitan_attention = 12.0 * L * a * d * s;
  f.torchtitan = 6.0 * (double)c.active_torchtitan() + f.torchtitan_attention;
  // Megatron: the GEMMs' weights it counts, x 6, plus the causal attention core
  const double gated = m.arch == Arch::LLAMA ? 3 : 2;
  const double dense_mlp = h * m.ffn() * gated;
  const double moe_mlp =
      m.moe.enabled() ? h * ((double)m.moe.topk * m.moe_ffn() + m.moe.shared_expert_size) * gated
                      : 0;
  const double linear = L * (h * (q + 2 * g * d) + q * h) + c.dense_layers * dense_mlp +
                        c.moe_layers * moe_mlp + h * (double)plan.padded_vocab;
  f.megatron_attention = 6.0 * L * q * s;
  f.megatron = 6.0 * linear + f.megatron_attention;
  return f;
}

}  // namespace paralab
