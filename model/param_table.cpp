// model/param_table.cpp: see param_table.h for the table it builds.
#include "model/param_table.h"

namespace paralab {

std::vector<ParamSpec> param_table(const ModelConfig& m) {
  const int64_t h = m.hidden_size, V = m.vocab_size, s = m.seq_length;
  const int64_t qkv = m.qkv_size(), attn_out = (int64_t)m.num_attention_heads * m.head_dim();
  const bool bias = m.has_bias();
  std::vector<ParamSpec> t;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool decay) {
    t.push_back({name, std::move(shape), decay});
  };
  add("embedding.word", {V, h}, true);
  if (m.is_gpt()) add("embedding.position", {s, h}, true);
  for (int i = 0; i < m.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    add(p + "norm1.weight", {h}, false);
    if (bias) add(p + "norm1.bias", {h}, false);
    add(p + "attn.qkv.weight", {qkv, h}, true);
    if (bias) add(p + "attn.qkv.bias", {qkv}, false);
    add(p + "attn.proj.weight", {h, attn_out}, true);
    if (bias) add(p + "attn.proj.bias", {h}, false);
    add(p + "norm2.weight", {h}, false);
    if (bias) add(p + "norm2.bias", {h}, false);
    add(p + "mlp.fc1.weight", {m.fc1_size(), h}, true);
    if (bias) add(p + "mlp.fc1.bias", {m.fc1_size()}, false);
    add(p + "mlp.fc2.weight", {h, m.ffn()}, true);
    if (bias) add(p + "mlp.fc2.bias", {h}, false);
  }
  add("final_norm.weight", {h}, false);
  if (bias) add("final_norm.bias", {h}, false);
  if (!m.tied_embeddings()) add("output.weight", {V, h}, true);
  return t;
}

int64_t parameter_count(const ModelConfig& m) {
  int64_t n = 0;
  for (const auto& p : param_table(m)) n += p.numel();
  return n;
}

std::vector<int64_t> param_units(const ModelConfig& m) {
  std::vector<int64_t> begin(m.num_layers + 3, 0);
  int64_t offset = 0;
  for (const auto& p : param_table(m)) {
    int unit;
    if (p.name.compare(0, 10, "embedding.") == 0) unit = 0;
    else if (p.name.compare(0, 7, "layers.") == 0) unit = 1 + std::stoi(p.name.substr(7));
    else unit = m.num_layers + 1;
    // the table is in unit order, so a unit starts where its first tensor does
    for (int u = unit + 1; u < (int)begin.size(); ++u) begin[u] = offset + p.numel();
    offset += p.numel();
  }
  return begin;
}

}  // namespace paralab
