// model/param_table.cpp: see param_table.h for the table it builds and how tensor
// parallelism splits it.
#include "model/param_table.h"
#include <algorithm>
#include <stdexcept>
#include <utility>

namespace paralab {

std::vector<ParamSpec> param_table(const ModelConfig& m) {
  const int64_t h = m.hidden_size, V = m.vocab_size, s = m.seq_length;
  const int64_t qkv = m.qkv_size(), attn_out = (int64_t)m.num_attention_heads * m.head_dim();
  const bool bias = m.has_bias();
  std::vector<ParamSpec> t;
  const TpSplit R = TpSplit::REPLICATED, ROWS = TpSplit::ROWS, COLS = TpSplit::COLUMNS;
  const TpSplit FC1 = m.arch == Arch::LLAMA ? TpSplit::HALVES : TpSplit::ROWS;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool decay, TpSplit sp) {
    t.push_back({name, std::move(shape), decay, sp});
  };
  // Within each unit the tensors replicated over tp come first, so that sequence
  // parallelism can all-reduce their (partial) gradients in one call per unit.
  if (m.is_gpt()) add("embedding.position", {s, h}, true, R);
  add("embedding.word", {V, h}, true, TpSplit::VOCAB);
  for (int i = 0; i < m.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    add(p + "norm1.weight", {h}, false, R);
    if (bias) add(p + "norm1.bias", {h}, false, R);
    add(p + "norm2.weight", {h}, false, R);
    if (bias) add(p + "norm2.bias", {h}, false, R);
    if (bias) add(p + "attn.proj.bias", {h}, false, R);
    if (bias) add(p + "mlp.fc2.bias", {h}, false, R);
    add(p + "attn.qkv.weight", {qkv, h}, true, ROWS);
    if (bias) add(p + "attn.qkv.bias", {qkv}, false, ROWS);
    add(p + "attn.proj.weight", {h, attn_out}, true, COLS);
    add(p + "mlp.fc1.weight", {m.fc1_size(), h}, true, FC1);
    if (bias) add(p + "mlp.fc1.bias", {m.fc1_size()}, false, FC1);
    add(p + "mlp.fc2.weight", {h, m.ffn()}, true, COLS);
  }
  add("final_norm.weight", {h}, false, R);
  if (bias) add("final_norm.bias", {h}, false, R);
  if (!m.tied_embeddings()) add("output.weight", {V, h}, true, TpSplit::VOCAB);
  return t;
}

int64_t padded_vocab(const ModelConfig& m, int tp) {
  return (m.vocab_size + tp - 1) / tp * tp;
}

std::vector<ParamSpec> local_param_table(const ModelConfig& m, int tp) {
  std::vector<ParamSpec> t = param_table(m);
  for (ParamSpec& p : t) {
    switch (p.split) {
      case TpSplit::REPLICATED: break;
      case TpSplit::ROWS:
      case TpSplit::HALVES: p.shape[0] /= tp; break;
      case TpSplit::COLUMNS: p.shape[1] /= tp; break;
      case TpSplit::VOCAB: p.shape[0] = padded_vocab(m, tp) / tp; break;
    }
  }
  return t;
}

namespace {
// The row ranges of the full tensor (dim 0 units of `row` elements) rank r owns, in the
// order its local tensor stores them; COLUMNS is handled separately.
std::vector<std::pair<int64_t, int64_t>> owned_rows(const ParamSpec& full, int tp, int r) {
  const int64_t rows = full.shape[0];
  switch (full.split) {
    case TpSplit::ROWS: return {{r * rows / tp, rows / tp}};
    case TpSplit::HALVES: {
      const int64_t half = rows / 2, block = half / tp;
      return {{r * block, block}, {half + r * block, block}};
    }
    default: {  // VOCAB: rows r*Vp/t .. clipped to the real vocabulary
      const int64_t local = (rows + tp - 1) / tp;
      return {{r * local, local}};
    }
  }
}
}  // namespace

std::vector<float> shard_tensor(const ParamSpec& full, const std::vector<float>& values, int tp,
                                int rank) {
  if (full.split == TpSplit::REPLICATED || tp == 1) return values;
  const int64_t rows = full.shape[0];
  const int64_t row = full.shape.size() > 1 ? full.numel() / rows : 1;
  std::vector<float> out;
  if (full.split == TpSplit::COLUMNS) {  // (rows, cols): block `rank` of every row
    const int64_t cols = full.shape[1] / tp;
    for (int64_t i = 0; i < rows; ++i)
      out.insert(out.end(), values.begin() + i * full.shape[1] + rank * cols,
                 values.begin() + i * full.shape[1] + (rank + 1) * cols);
    return out;
  }
  for (auto [first, count] : owned_rows(full, tp, rank)) {
    for (int64_t i = first; i < first + count; ++i) {
      if (i < rows)
        out.insert(out.end(), values.begin() + i * row, values.begin() + (i + 1) * row);
      else
        out.insert(out.end(), row, 0.0f);  // vocabulary padding
    }
  }
  return out;
}

std::vector<float> unshard_tensor(const ParamSpec& full,
                                  const std::vector<std::vector<float>>& parts) {
  const int tp = (int)parts.size();
  if (full.split == TpSplit::REPLICATED || tp == 1) return parts.at(0);
  const int64_t rows = full.shape[0];
  const int64_t row = full.shape.size() > 1 ? full.numel() / rows : 1;
  std::vector<float> out(full.numel());
  if (full.split == TpSplit::COLUMNS) {
    const int64_t cols = full.shape[1] / tp;
    for (int r = 0; r < tp; ++r)
      for (int64_t i = 0; i < rows; ++i)
        std::copy(parts[r].begin() + i * cols, parts[r].begin() + (i + 1) * cols,
                  out.begin() + i * full.shape[1] + r * cols);
    return out;
  }
  for (int r = 0; r < tp; ++r) {
    int64_t local = 0;
    for (auto [first, count] : owned_rows(full, tp, r))
      for (int64_t i = first; i < first + count; ++i, ++local)
        if (i < rows)
          std::copy(parts[r].begin() + local * row, parts[r].begin() + (local + 1) * row,
                    out.begin() + i * row);
  }
  return out;
}

int64_t parameter_count(const ModelConfig& m) {
  int64_t n = 0;
  for (const auto& p : param_table(m)) n += p.numel();
  return n;
}

std::vector<int64_t> param_units(const ModelConfig& m, int tp) {
  std::vector<int64_t> begin(m.num_layers + 3, 0);
  int64_t offset = 0;
  for (const auto& p : local_param_table(m, tp)) {
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
