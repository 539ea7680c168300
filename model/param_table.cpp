// model/param_table.cpp: see param_table.h for the table it builds and how tensor
// parallelism splits it.
#include "model/param_table.h"
#include <algorithm>
#include <stdexcept>
#include <utility>
#include "parallel/pipeline_schedule.h"  // pipeline_stage_layers

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
  t.back().vocab_multiple = m.vocab_divisible_by;
  for (int i = 0; i < m.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const bool moe = m.moe.is_moe_layer(i);
    const int64_t d = m.head_dim();
    add(p + "norm1.weight", {h}, false, R);
    if (bias) add(p + "norm1.bias", {h}, false, R);
    add(p + "norm2.weight", {h}, false, R);
    if (bias) add(p + "norm2.bias", {h}, false, R);
    if (m.qk_layernorm) {  // one (d) norm shared by every head
      add(p + "attn.q_norm.weight", {d}, false, R);
      if (bias) add(p + "attn.q_norm.bias", {d}, false, R);
      add(p + "attn.k_norm.weight", {d}, false, R);
      if (bias) add(p + "attn.k_norm.bias", {d}, false, R);
    }
    if (bias) add(p + "attn.proj.bias", {h}, false, R);
    if (bias && !moe) add(p + "mlp.fc2.bias", {h}, false, R);
    if (moe) {
      // MoE layer (model/moe.h): the router, E experts (no biases, as Megatron's grouped
      // experts), the optional shared expert, all replicated over tp: each tp rank runs them
      // on its own (sequence-parallel) tokens, so they join the unit's replicated prefix
      // whose partial gradients are all-reduced over tp (with tp > 1 the experts themselves
      // are apart, in the expert vector: stage_expert_table).
      const int64_t E = m.moe.num_experts;
      add(p + "mlp.router.weight", {E, h}, true, R);
      add(p + "mlp.experts.fc1.weight", {E, m.moe_fc1_size(), h}, true, R);
      add(p + "mlp.experts.fc2.weight", {E, h, m.moe_ffn()}, true, R);
      t[t.size() - 2].expert = t[t.size() - 1].expert = true;
      t[t.size() - 2].etp_split = FC1;
      t[t.size() - 1].etp_split = COLS;
      if (m.moe.shared_expert_size > 0) {
        add(p + "mlp.shared.fc1.weight", {m.shared_fc1_size(), h}, true, R);
        add(p + "mlp.shared.fc2.weight", {h, m.moe.shared_expert_size}, true, R);
        if (m.moe.shared_expert_gate) add(p + "mlp.shared.gate.weight", {1, h}, true, R);
      }
    }
    add(p + "attn.qkv.weight", {qkv, h}, true, ROWS);
    if (bias) add(p + "attn.qkv.bias", {qkv}, false, ROWS);
    add(p + "attn.proj.weight", {h, attn_out}, true, COLS);
    if (!moe) {
      add(p + "mlp.fc1.weight", {m.fc1_size(), h}, true, FC1);
      if (bias) add(p + "mlp.fc1.bias", {m.fc1_size()}, false, FC1);
      add(p + "mlp.fc2.weight", {h, m.ffn()}, true, COLS);
    }
  }
  add("final_norm.weight", {h}, false, R);
  if (bias) add("final_norm.bias", {h}, false, R);
  if (!m.tied_embeddings()) {
    add("output.weight", {V, h}, true, TpSplit::VOCAB);
    t.back().vocab_multiple = m.vocab_divisible_by;
  }
  return t;
}

int64_t padded_vocab(const ModelConfig& m, int tp) {
  const int64_t multiple = (int64_t)m.vocab_divisible_by * tp;
  return (m.vocab_size + multiple - 1) / multiple * multiple;
}

int64_t padded_rows(const ParamSpec& full, int tp) {
  if (full.split != TpSplit::VOCAB) return full.shape[0];
  const int64_t multiple = full.vocab_multiple * tp;
  return (full.shape[0] + multiple - 1) / multiple * multiple;
}

std::vector<ParamSpec> local_param_table(const ModelConfig& m, int tp, int ep, int etp) {
  std::vector<ParamSpec> t = param_table(m);
  for (ParamSpec& p : t) {
    if (p.expert) {  // E / ep experts, each 1/etp of its width
      p.shape[0] /= ep;
      p.shape[p.etp_split == TpSplit::COLUMNS ? 2 : 1] /= etp;
    }
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
// One expert's 2-D slice of an expert tensor (E, a, b), split like a tensor over tp.
ParamSpec expert_slice(const ParamSpec& full) {
  ParamSpec one;
  one.shape = {full.shape[1], full.shape[2]};
  one.split = full.etp_split;
  return one;
}

// A dense tensor's blocks on tp rank `rank` (split by full.split).
std::vector<ShardBlock> dense_blocks(const ParamSpec& full, int tp, int rank) {
  const int64_t numel = full.numel(), rows = full.shape[0], row = numel / std::max<int64_t>(rows, 1);
  switch (full.split) {
    case TpSplit::ROWS: {
      const int64_t n = rows / tp * row;
      return {{0, 1, n, rank * n, n}};
    }
    case TpSplit::HALVES: {  // block r of the gate half, then block r of the up half
      const int64_t half = rows / 2 * row, n = rows / 2 / tp * row;
      return {{0, 1, n, rank * n, n}, {n, 1, n, half + rank * n, n}};
    }
    case TpSplit::COLUMNS: {  // (rows, cols): column block r of every row
      const int64_t cols = full.shape[1], n = cols / tp;
      return {{0, rows, n, rank * n, cols}};
    }
    case TpSplit::VOCAB: {  // rows r Vp/t ..: the padding rows' indices run past numel
      const int64_t n = padded_rows(full, tp) / tp * row;
      return {{0, 1, n, rank * n, n}};
    }
    case TpSplit::REPLICATED: break;
  }
  return {{0, 1, numel, 0, numel}};
}

// Copies each block's elements between a rank's local tensor and the full one:
// visit(local index, full index) for every element, in local order.
template <typename Visit>
void for_each_element(const std::vector<ShardBlock>& blocks, Visit&& visit) {
  for (const ShardBlock& b : blocks)
    for (int64_t r = 0; r < b.rows; ++r)
      for (int64_t c = 0; c < b.cols; ++c)
        visit(b.local_offset + r * b.cols + c, b.full_offset + r * b.full_stride + c);
}

template <typename T>
std::vector<T> shard_as(const ParamSpec& full, const std::vector<T>& values,
                        const TensorSlice& slice, T pad) {
  const std::vector<ShardBlock> blocks = shard_blocks(full, slice);
  std::vector<T> out((size_t)shard_numel(blocks));
  const int64_t numel = full.numel();
  for_each_element(blocks, [&](int64_t local, int64_t index) {
    out[local] = index < numel ? values[index] : pad;  // pad: a vocabulary padding row
  });
  return out;
}
}  // namespace

std::vector<ShardBlock> shard_blocks(const ParamSpec& full, const TensorSlice& slice) {
  if (!slice.expert) return dense_blocks(full, slice.tp, slice.tp_rank);
  // ep rank r's experts [r E/ep, (r+1) E/ep) (a block of dim 0), each its etp share
  const int64_t E = full.shape[0], local = E / slice.ep, per = full.numel() / E;
  const std::vector<ShardBlock> one = dense_blocks(expert_slice(full), slice.etp, slice.etp_rank);
  const int64_t part = shard_numel(one);
  std::vector<ShardBlock> out;
  for (int64_t e = 0; e < local; ++e)
    for (ShardBlock b : one) {
      b.local_offset += e * part;
      b.full_offset += (slice.ep_rank * local + e) * per;
      out.push_back(b);
    }
  return out;
}

int64_t shard_numel(const std::vector<ShardBlock>& blocks) {
  int64_t n = 0;
  for (const ShardBlock& b : blocks) n += b.rows * b.cols;
  return n;
}

std::vector<float> shard_tensor(const ParamSpec& full, const std::vector<float>& values, int tp,
                                int rank) {
  TensorSlice slice;
  slice.tp = tp;
  slice.tp_rank = rank;
  return shard_as<float>(full, values, slice, 0.0f);
}

std::vector<float> shard_experts(const ParamSpec& full, const std::vector<float>& values, int ep,
                                 int ep_rank, int etp, int etp_rank) {
  TensorSlice slice;
  slice.expert = true;
  slice.ep = ep, slice.ep_rank = ep_rank, slice.etp = etp, slice.etp_rank = etp_rank;
  return shard_as<float>(full, values, slice, 0.0f);
}

std::vector<int64_t> shard_indices(const ParamSpec& full, const TensorSlice& slice) {
  std::vector<int64_t> out((size_t)shard_numel(shard_blocks(full, slice)));
  const int64_t numel = full.numel();
  for_each_element(shard_blocks(full, slice), [&](int64_t local, int64_t index) {
    out[local] = index < numel ? index : -1;
  });
  return out;
}

// Every slice's part back into the full tensor (the padding rows dropped).
std::vector<float> unshard(const ParamSpec& full, const std::vector<TensorSlice>& slices,
                           const std::vector<const std::vector<float>*>& parts) {
  std::vector<float> out(full.numel());
  const int64_t numel = full.numel();
  for (size_t p = 0; p < slices.size(); ++p)
    for_each_element(shard_blocks(full, slices[p]), [&](int64_t local, int64_t index) {
      if (index < numel) out[index] = (*parts[p])[local];
    });
  return out;
}

std::vector<float> unshard_tensor(const ParamSpec& full,
                                  const std::vector<std::vector<float>>& parts) {
  std::vector<TensorSlice> slices(parts.size());
  std::vector<const std::vector<float>*> pointers;
  for (size_t r = 0; r < parts.size(); ++r) {
    slices[r].tp = (int)parts.size();
    slices[r].tp_rank = (int)r;
    pointers.push_back(&parts[r]);
  }
  return unshard(full, slices, pointers);
}

std::vector<float> unshard_experts(const ParamSpec& full,
                                   const std::vector<std::vector<std::vector<float>>>& parts) {
  const int ep = (int)parts.size(), etp = (int)parts[0].size();
  std::vector<TensorSlice> slices;
  std::vector<const std::vector<float>*> pointers;
  for (int r = 0; r < ep; ++r)
    for (int t = 0; t < etp; ++t) {
      TensorSlice slice;
      slice.expert = true;
      slice.ep = ep, slice.ep_rank = r, slice.etp = etp, slice.etp_rank = t;
      slices.push_back(slice);
      pointers.push_back(&parts[r][t]);
    }
  return unshard(full, slices, pointers);
}

int64_t parameter_count(const ModelConfig& m) {
  int64_t n = 0;
  for (const auto& p : param_table(m)) n += p.numel();
  return n;
}

std::vector<int64_t> param_units(const ModelConfig& m, int tp) {
  return stage_units(m, tp, whole_model(m));
}

// ---- pipeline stages ------------------------------------------------------------------

StageSlice whole_model(const ModelConfig& m) {
  StageSlice s;
  s.chunk_first_layer = {0};
  s.chunk_layers = {m.num_layers};
  return s;
}

StageSlice pipeline_stage_slice(const ModelConfig& m, const PipelineShape& shape, int rank,
                                const StageSplit& split) {
  const std::vector<int> layers = pipeline_stage_layers(m.num_layers, shape, split);
  std::vector<int> begin(layers.size() + 1, 0);
  for (size_t i = 0; i < layers.size(); ++i) begin[i + 1] = begin[i] + layers[i];
  StageSlice s;
  for (int c = 0; c < shape.v; ++c) {
    const int stage = shape.stage_of(rank, c);
    s.chunk_first_layer.push_back(begin[stage]);
    s.chunk_layers.push_back(layers[stage]);
  }
  // every placement puts model stage 0 in a rank's chunk 0 and the last in its last chunk
  s.embedding = shape.stage_of(rank, 0) == 0;
  s.head = shape.stage_of(rank, shape.v - 1) == shape.model_stages() - 1;
  s.tied_copy = s.head && !s.embedding && m.tied_embeddings();
  return s;
}

namespace {
// The unit of a full-table tensor in stage s (-1: not held), units as stage_units numbers
// them; the tied copy is handled by the callers.
int stage_unit_of(const StageSlice& s, const std::string& name) {
  const int first_layer_unit = s.embedding ? 1 : 0;
  if (name.compare(0, 10, "embedding.") == 0) return s.embedding ? 0 : -1;
  if (name.compare(0, 7, "layers.") == 0) {
    const int l = std::stoi(name.substr(7));
    int unit = first_layer_unit;
    for (size_t c = 0; c < s.chunk_layers.size(); ++c) {
      const int lo = s.chunk_first_layer[c], n = s.chunk_layers[c];
      if (l >= lo && l < lo + n) return unit + (l - lo);
      unit += n;
    }
    return -1;
  }
  if (!s.head) return -1;
  int layers = 0;
  for (int n : s.chunk_layers) layers += n;
  return first_layer_unit + layers;
}
}  // namespace

std::vector<ParamSpec> stage_param_table(const ModelConfig& m, int tp, const StageSlice& s,
                                         const ExpertSplit& x) {
  const std::vector<ParamSpec> all = local_param_table(m, tp, x.ep);
  // Chunks hold increasing layers, so the table's order is already the flat order.
  std::vector<ParamSpec> t;
  for (const ParamSpec& p : all)
    if (stage_unit_of(s, p.name) >= 0 && !(x.apart && p.expert)) t.push_back(p);
  if (s.tied_copy)
    for (const ParamSpec& p : all)
      if (p.name == "embedding.word") t.push_back(p);
  return t;
}

std::vector<int64_t> stage_units(const ModelConfig& m, int tp, const StageSlice& s,
                                 const ExpertSplit& x) {
  int layers = 0;
  for (int n : s.chunk_layers) layers += n;
  const int U = (s.embedding ? 1 : 0) + layers + (s.head ? 1 : 0);
  std::vector<int64_t> begin(U + 1, 0);
  int64_t offset = 0;
  for (const ParamSpec& p : stage_param_table(m, tp, s, x)) {
    int unit = stage_unit_of(s, p.name);
    if (s.tied_copy && p.name == "embedding.word") unit = U - 1;  // the copy: in the head
    for (int u = unit + 1; u <= U; ++u) begin[u] = offset + p.numel();
    offset += p.numel();
  }
  return begin;
}

std::vector<ParamSpec> stage_expert_table(const ModelConfig& m, const StageSlice& s,
                                          const ExpertSplit& x) {
  std::vector<ParamSpec> t;
  if (!x.apart) return t;
  for (const ParamSpec& p : local_param_table(m, 1, x.ep, x.etp))
    if (p.expert && stage_unit_of(s, p.name) >= 0) t.push_back(p);
  return t;
}

std::vector<int64_t> stage_expert_units(const ModelConfig& m, const StageSlice& s,
                                        const ExpertSplit& x) {
  const std::vector<ParamSpec> table = stage_expert_table(m, s, x);
  if (table.empty()) return {};
  const int U = (int)stage_unit_chunk(s).size();
  std::vector<int64_t> begin(U + 1, 0);
  for (const ParamSpec& p : table)
    for (int u = stage_unit_of(s, p.name) + 1; u <= U; ++u) begin[u] += p.numel();
  return begin;
}

std::vector<int> stage_deferred_units(const ModelConfig& m, const StageSlice& s) {
  if (!m.tied_embeddings() || s.embedding == s.head) return {};
  if (s.embedding) return {0};
  return {(int)stage_unit_chunk(s).size() - 1};  // the head unit, with the copy
}

std::vector<int> stage_unit_chunk(const StageSlice& s) {
  std::vector<int> chunk;
  if (s.embedding) chunk.push_back(0);
  for (size_t c = 0; c < s.chunk_layers.size(); ++c)
    chunk.insert(chunk.end(), s.chunk_layers[c], (int)c);
  if (s.head) chunk.push_back((int)s.chunk_layers.size() - 1);
  return chunk;
}

}  // namespace paralab
