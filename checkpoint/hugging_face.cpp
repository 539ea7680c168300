// checkpoint/hugging_face.cpp: the tensor map between paralab and Hugging Face, the export's
// files and their import (the layouts are in hugging_face.h; config.json is
// checkpoint/hugging_face_config.cpp's).
//
// Every Hugging Face tensor is a list of rows of one paralab tensor, each row `cols` values
// of its last dimension (a vector: rows of one value), stacked in order, or for GPT-2's
// Conv1D stacked and transposed. The lists of one paralab tensor cover its rows exactly
// once, so export gathers and import scatters through the same map, and a round trip is
// the identity. The fused tensors are where the lists are not one range:
//   qkv (rows per query group [a/g query heads | key | value], d rows each): q_proj takes
//   every group's query rows in head order, k_proj and v_proj every group's key / value;
//   GPT-2's c_attn is q | k | v in one tensor (its columns, after the transpose);
//   llama's fc1 [gate | up]: gate_proj rows [0, f), up_proj [f, 2f); per expert e of
//   experts.fc1 (E, 2 f_e, h) the same within rows [2 f_e e, 2 f_e (e + 1)).
#include "checkpoint/hugging_face.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include "checkpoint/file_io.h"      // AtomicFile, make_folders
#include "checkpoint/hugging_face_config.h"
#include "checkpoint/json.h"         // JsonWriter
#include "checkpoint/json_document.h"  // Json, JsonDocument
#include "model/param_table.h"  // param_table

namespace paralab {

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct HfTensor {
  enum class Kind { VECTOR, ROWS, CONV1D };
  std::string name;           // Hugging Face's
  std::string param;          // paralab's
  std::vector<int64_t> rows;  // the paralab tensor's rows it holds, in its order
  int64_t cols = 1;           // values per paralab row: its last dimension (1: a vector)
  Kind kind = Kind::ROWS;     // CONV1D: stored [cols, rows], the transpose
  std::vector<int64_t> shape() const {
    const int64_t r = (int64_t)rows.size();
    if (kind == Kind::VECTOR) return {r};
    return kind == Kind::CONV1D ? std::vector<int64_t>{cols, r} : std::vector<int64_t>{r, cols};
  }
  int64_t numel() const { return (int64_t)rows.size() * cols; }
  // Element i of the Hugging Face tensor (row-major) is element at(i) of the paralab one.
  int64_t at(int64_t i) const {
    const int64_t R = (int64_t)rows.size();
    if (kind == Kind::CONV1D) return rows[i % R] * cols + i / R;
    return rows[i / cols] * cols + i % cols;
  }
};

std::vector<int64_t> range(int64_t first, int64_t count) {
  std::vector<int64_t> r(count);
  for (int64_t i = 0; i < count; ++i) r[i] = first + i;
  return r;
}

void append(std::vector<int64_t>& to, const std::vector<int64_t>& rows) {
  to.insert(to.end(), rows.begin(), rows.end());
}

// The fused qkv's rows of every query head (head order), of every key or of every value head.
enum class QkvPart { Q, K, V };
std::vector<int64_t> qkv_rows(const ModelConfig& m, QkvPart part) {
  const int64_t d = m.head_dim(), g = m.groups(), per = m.num_attention_heads / g;
  const int64_t stride = (per + 2) * d;  // one group's rows
  std::vector<int64_t> rows;
  for (int64_t group = 0; group < g; ++group) {
    if (part == QkvPart::Q)
      append(rows, range(group * stride, per * d));
    else
      append(rows, range(group * stride + (part == QkvPart::K ? per : per + 1) * d, d));
  }
  return rows;
}

using Kind = HfTensor::Kind;

// One Hugging Face tensor: these rows (cols wide) of the paralab tensor param.
void add_rows(std::vector<HfTensor>& out, const std::string& name, const std::string& param,
              std::vector<int64_t> rows, int64_t cols, Kind kind) {
  out.push_back({name, param, std::move(rows), cols, kind});
}

// A whole paralab tensor: a vector, or a matrix (rows, cols) as is or transposed.
void add_whole(std::vector<HfTensor>& out, const std::string& name, const ParamSpec& p,
               Kind kind) {
  const int64_t cols = p.shape.size() == 1 ? 1 : p.shape.back();
  add_rows(out, name, p.name, range(0, p.numel() / cols), cols, kind);
}

// The embedding and the head: whole tensors under each family's names.
void add_outer_tensor(std::vector<HfTensor>& out, const ModelConfig& m, const ParamSpec& p) {
  const std::string& n = p.name;
  const bool gpt = m.is_gpt();
  if (n == "embedding.word")
    add_whole(out, gpt ? "wte.weight" : "model.embed_tokens.weight", p, Kind::ROWS);
  else if (n == "embedding.position") add_whole(out, "wpe.weight", p, Kind::ROWS);
  else if (n == "final_norm.weight")
    add_whole(out, gpt ? "ln_f.weight" : "model.norm.weight", p, Kind::VECTOR);
  else if (n == "final_norm.bias") add_whole(out, "ln_f.bias", p, Kind::VECTOR);
  else if (n == "output.weight") add_whole(out, "lm_head.weight", p, Kind::ROWS);
  else throw std::logic_error("hf_tensors: no Hugging Face name for " + n);
}

// A GPT-2 layer's tensor (hp = "h.{i}."): Conv1D weights are stored transposed, and the fused
// qkv's rows reorder from paralab's groups to c_attn's q | k | v.
void add_gpt2_layer_tensor(std::vector<HfTensor>& out, const ParamSpec& p, const std::string& hp,
                           const std::string& rest, const std::vector<int64_t>& c_attn,
                           int64_t h) {
  const std::string& n = p.name;
  const Kind vec = Kind::VECTOR;
  if (rest == "norm1.weight") add_whole(out, hp + "ln_1.weight", p, vec);
  else if (rest == "norm1.bias") add_whole(out, hp + "ln_1.bias", p, vec);
  else if (rest == "norm2.weight") add_whole(out, hp + "ln_2.weight", p, vec);
  else if (rest == "norm2.bias") add_whole(out, hp + "ln_2.bias", p, vec);
  else if (rest == "attn.qkv.weight")
    add_rows(out, hp + "attn.c_attn.weight", n, c_attn, h, Kind::CONV1D);
  else if (rest == "attn.qkv.bias") add_rows(out, hp + "attn.c_attn.bias", n, c_attn, 1, vec);
  else if (rest == "attn.proj.weight") add_whole(out, hp + "attn.c_proj.weight", p, Kind::CONV1D);
  else if (rest == "attn.proj.bias") add_whole(out, hp + "attn.c_proj.bias", p, vec);
  else if (rest == "mlp.fc1.weight") add_whole(out, hp + "mlp.c_fc.weight", p, Kind::CONV1D);
  else if (rest == "mlp.fc1.bias") add_whole(out, hp + "mlp.c_fc.bias", p, vec);
  else if (rest == "mlp.fc2.weight") add_whole(out, hp + "mlp.c_proj.weight", p, Kind::CONV1D);
  else if (rest == "mlp.fc2.bias") add_whole(out, hp + "mlp.c_proj.bias", p, vec);
  else throw std::logic_error("hf_tensors: no GPT-2 name for " + n);
}

// A Llama-family layer's tensor (lp = "model.layers.{i}."): the fused qkv splits into q, k and
// v_proj, fc1 into gate and up, and each expert's fused fc1 and fc2 into its own tensors.
void add_llama_layer_tensor(std::vector<HfTensor>& out, const ModelConfig& m, const ParamSpec& p,
                            const std::string& lp, const std::string& rest) {
  const std::string& n = p.name;
  const Kind vec = Kind::VECTOR;
  const bool mixtral = std::string(hf_model_type(m)) == "mixtral";
  const std::string moe = lp + (mixtral ? "block_sparse_moe." : "mlp.");
  const int64_t h = m.hidden_size, f = m.ffn(), fe = m.moe_ffn();
  if (rest == "norm1.weight") add_whole(out, lp + "input_layernorm.weight", p, vec);
  else if (rest == "norm2.weight") add_whole(out, lp + "post_attention_layernorm.weight", p, vec);
  else if (rest == "attn.q_norm.weight") add_whole(out, lp + "self_attn.q_norm.weight", p, vec);
  else if (rest == "attn.k_norm.weight") add_whole(out, lp + "self_attn.k_norm.weight", p, vec);
  else if (rest == "attn.qkv.weight") {
    add_rows(out, lp + "self_attn.q_proj.weight", n, qkv_rows(m, QkvPart::Q), h, Kind::ROWS);
    add_rows(out, lp + "self_attn.k_proj.weight", n, qkv_rows(m, QkvPart::K), h, Kind::ROWS);
    add_rows(out, lp + "self_attn.v_proj.weight", n, qkv_rows(m, QkvPart::V), h, Kind::ROWS);
  } else if (rest == "attn.proj.weight") {
    add_whole(out, lp + "self_attn.o_proj.weight", p, Kind::ROWS);
  } else if (rest == "mlp.fc1.weight") {
    add_rows(out, lp + "mlp.gate_proj.weight", n, range(0, f), h, Kind::ROWS);
    add_rows(out, lp + "mlp.up_proj.weight", n, range(f, f), h, Kind::ROWS);
  } else if (rest == "mlp.fc2.weight") {
    add_whole(out, lp + "mlp.down_proj.weight", p, Kind::ROWS);
  } else if (rest == "mlp.router.weight") {
    add_whole(out, moe + "gate.weight", p, Kind::ROWS);
  } else if (rest == "mlp.experts.fc1.weight") {
    for (int64_t e = 0; e < m.moe.num_experts; ++e) {
      const std::string ep = moe + "experts." + std::to_string(e) + ".";
      add_rows(out, ep + (mixtral ? "w1.weight" : "gate_proj.weight"), n, range(2 * fe * e, fe),
               h, Kind::ROWS);
      add_rows(out, ep + (mixtral ? "w3.weight" : "up_proj.weight"), n,
               range(2 * fe * e + fe, fe), h, Kind::ROWS);
    }
  } else if (rest == "mlp.experts.fc2.weight") {
    for (int64_t e = 0; e < m.moe.num_experts; ++e) {
      const std::string ep = moe + "experts." + std::to_string(e) + ".";
      add_rows(out, ep + (mixtral ? "w2.weight" : "down_proj.weight"), n, range(h * e, h), fe,
               Kind::ROWS);
    }
  } else {
    throw std::logic_error("hf_tensors: no Hugging Face name for " + n);
  }
}

// Every tensor of the export, in param_table order of their paralab tensors.
std::vector<HfTensor> hf_tensors(const ModelConfig& m) {
  std::vector<HfTensor> out;
  std::vector<int64_t> c_attn = qkv_rows(m, QkvPart::Q);  // GPT-2's q | k | v
  append(c_attn, qkv_rows(m, QkvPart::K));
  append(c_attn, qkv_rows(m, QkvPart::V));
  for (const ParamSpec& p : param_table(m)) {
    const std::string& n = p.name;
    if (n.rfind("layers.", 0) != 0) {  // the embedding and the head
      add_outer_tensor(out, m, p);
      continue;
    }
    // layers.{i}.<rest>
    const size_t dot = n.find('.', 7);
    const std::string layer = n.substr(7, dot - 7), rest = n.substr(dot + 1);
    if (m.is_gpt())
      add_gpt2_layer_tensor(out, p, "h." + layer + ".", rest, c_attn, m.hidden_size);
    else
      add_llama_layer_tensor(out, m, p, "model.layers." + layer + ".", rest);
  }
  return out;
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

void write_text(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

std::string hugging_face_refusal(const ModelConfig& m) {
  const int a = m.num_attention_heads, g = m.groups(), h = m.hidden_size;
  const Moe& moe = m.moe;
  if (m.is_gpt()) {
    if (g != a)
      return "--num-query-groups: GPT-2 has no grouped-query attention (gpt with " +
             std::to_string(g) + " query groups for " + std::to_string(a) + " heads)";
    if (h % a != 0 || m.head_dim() != h / a)
      return "--kv-channels: GPT-2's head dim is n_embd / n_head (gpt with head dim " +
             std::to_string(m.head_dim()) + ", hidden " + std::to_string(h) + " over " +
             std::to_string(a) + " heads)";
    if (m.qk_layernorm) return "--qk-layernorm: GPT-2 has no query and key norms";
    if (moe.enabled())
      return "--num-experts: GPT-2 has no mixture of experts (gpt with " +
             std::to_string(moe.num_experts) + " experts)";
    return "";
  }
  if (!moe.enabled()) {
    if (!m.qk_layernorm && h % a != 0)
      return "--kv-channels: Hugging Face's LlamaConfig needs --num-attention-heads (" +
             std::to_string(a) + ") to divide --hidden-size (" + std::to_string(h) + ")";
    return "";
  }
  // Qwen3-MoE always has q_norm and k_norm: llama MoE without them is Mixtral's model
  const std::string name = m.qk_layernorm ? "Qwen3-MoE" : "Mixtral";
  if (moe.score != Moe::Score::SOFTMAX)
    return "--moe-router-score-function: " + name + "'s router is a softmax (sigmoid given)";
  if (moe.expert_bias)
    return "--moe-router-enable-expert-bias: " + name + "'s router has no expert bias";
  if (moe.topk_scaling_factor != 0.0f && moe.topk_scaling_factor != 1.0f)
    return "--moe-router-topk-scaling-factor: " + name + " does not scale its gates (" +
           num(moe.topk_scaling_factor) + " given)";
  if (moe.shared_expert_size > 0)
    return "--moe-shared-expert-intermediate-size: " + name + " has no shared expert (" +
           std::to_string(moe.shared_expert_size) + " given)";
  if (moe.capacity_factor > 0.0f)
    return "--moe-expert-capacity-factor: Hugging Face's " + name +
           " is dropless (capacity factor " + num(moe.capacity_factor) + " given)";
  if (!m.qk_layernorm) {
    for (int l = 0; l < m.num_layers; ++l)
      if (!moe.is_moe_layer(l))
        return "--moe-layer-freq: llama MoE without --qk-layernorm exports as Mixtral, which "
               "has no dense layers (layer " + std::to_string(l) +
               " is dense; Qwen3-MoE, with --qk-layernorm, has them)";
    if (moe.pre_softmax)
      return "--moe-router-pre-softmax: llama MoE without --qk-layernorm exports as Mixtral, "
             "which always renormalises the top-k gates (Qwen3-MoE, with --qk-layernorm, "
             "need not)";
  }
  return "";
}

HfExport export_hugging_face(const std::string& folder, const ModelConfig& m,
                             const LogicalTensors& tensors, SafeDType dtype,
                             uint64_t max_shard_bytes) {
  const std::string why = hugging_face_refusal(m);
  if (!why.empty()) throw InputError(folder + ": " + why);
  if (dtype != SafeDType::F32 && dtype != SafeDType::BF16 && dtype != SafeDType::F16)
    throw std::invalid_argument(std::string("export_hugging_face: dtype ") + dtype_name(dtype) +
                                " (F32, BF16 or F16)");
  const std::vector<ParamSpec> table = param_table(m);
  if (tensors.size() != table.size())
    throw std::invalid_argument("export_hugging_face: " + std::to_string(tensors.size()) +
                                " tensors, the model has " + std::to_string(table.size()));
  for (const ParamSpec& p : table) {
    auto it = tensors.find(p.name);
    if (it == tensors.end() || (int64_t)it->second.size() != p.numel())
      throw std::invalid_argument("export_hugging_face: tensor " + p.name + " is missing or not " +
                                  std::to_string(p.numel()) + " values");
    // F16: a weight at or past 65520 would round to infinity (fp16's largest finite is 65504),
    // refused before anything is written
    if (dtype == SafeDType::F16)
      for (float v : it->second)
        if (std::fabs(v) >= 65520.0f)
          throw InputError(folder + ": " + p.name + " holds " + std::to_string(v) +
                           ", past fp16's largest finite value 65504: export fp32 or bf16");
  }

  // Shards: a new one when the current one would pass max_shard_bytes (a tensor larger than
  // that gets a shard of its own, as in transformers' save_pretrained).
  const std::vector<HfTensor> hf = hf_tensors(m);
  std::vector<std::vector<const HfTensor*>> shards(1);
  uint64_t current = 0, payload = 0;
  for (const HfTensor& t : hf) {
    const uint64_t bytes = (uint64_t)t.numel() * dtype_bytes(dtype);
    if (current > 0 && current + bytes > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&t);
    current += bytes;
    payload += bytes;
  }

  make_folders(folder);
  HfExport result;
  result.architecture = hf_architecture(m);
  result.payload_bytes = payload;
  JsonWriter index(true);
  index.begin_object().key("metadata").begin_object().field("total_size", (int64_t)payload);
  index.end_object().key("weight_map").begin_object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1 ? kSingleFile : shard_name(s, shards.size());
    SafetensorsWriter writer;
    writer.set_metadata("format", "pt");
    for (const HfTensor* t : shards[s]) {
      const std::vector<float>& from = tensors.at(t->param);
      std::vector<float> values(t->numel());
      for (int64_t i = 0; i < t->numel(); ++i) values[i] = from[t->at(i)];
      writer.add_floats(t->name, t->shape(), values, dtype);
      index.field(t->name, file);
    }
    writer.write(folder + "/" + file);
    result.files.push_back(file);
  }
  index.end_object().end_object();
  // transformers reads model.safetensors when it exists, else the index: the form not
  // written now must not be left from an earlier export
  if (shards.size() > 1) {
    std::remove((folder + "/" + kSingleFile).c_str());
    write_text(folder + "/" + kIndexFile, index.str() + "\n");
    result.files.push_back(kIndexFile);
  } else {
    std::remove((folder + "/" + kIndexFile).c_str());
  }
  write_text(folder + "/config.json", hf_config_json(m, dtype));
  result.files.push_back("config.json");
  return result;
}

namespace {

// The files of an import and the one that names every tensor (model.safetensors, or the index
// with its weight_map: which file holds each tensor).
struct HfListing {
  std::string listing;
  std::map<std::string, std::string> file_of;  // tensor -> file, from the index
  std::vector<std::string> files;
};

// The index's weight_map: each tensor's file, which must be a plain name in the folder.
void read_weight_map(const std::string& index_path, HfListing& l) {
  std::ifstream in(index_path, std::ios::binary);
  if (!in) throw InputError(index_path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  try {
    const Json doc = JsonDocument(text.str()).root();
    const Json* map = json_find(doc, "weight_map");
    if (!map || !map->is_object()) throw JsonError("missing \"weight_map\" (an object)");
    for (const auto& entry : map->items()) {
      const std::string& name = entry.key();
      if (!entry.value().is_string())
        throw JsonError("weight_map's \"" + name + "\" is not a file name");
      const std::string fname = entry.value().get<std::string>();
      if (fname.empty() || fname.find('/') != std::string::npos || fname == "." || fname == "..")
        throw InputError(index_path + ": tensor " + name + " is in \"" + fname +
                         "\", not a file name in the folder");
      l.file_of[name] = fname;
      bool known = false;
      for (const std::string& seen : l.files) known = known || seen == fname;
      if (!known) l.files.push_back(fname);
    }
  } catch (const JsonError& e) {
    throw InputError(index_path + ": " + e.what());
  }
}

// The files and, with an index, which tensor each must hold (transformers reads
// model.safetensors when it exists, else the index).
HfListing list_hf_files(const std::string& folder) {
  const std::string single = folder + "/" + kSingleFile, index_path = folder + "/" + kIndexFile;
  HfListing l;
  if (exists(single)) {
    l.listing = single;
    l.files.push_back(kSingleFile);
  } else if (exists(index_path)) {
    l.listing = index_path;
    read_weight_map(index_path, l);
  } else {
    throw InputError(folder + ": no " + kSingleFile + " and no " + kIndexFile);
  }
  return l;
}

// GPT-2 as transformers' save_pretrained writes it has every name under "transformer."
std::string our_name(const ModelConfig& m, const std::string& name) {
  const std::string prefix = "transformer.";
  return m.is_gpt() && name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// One safetensors file's tensors into out, each checked: a tensor of the model, where the index
// puts it, not seen before, F32, BF16 or F16, of the model's shape. found: our name -> file.
void read_hf_file(const std::string& folder, const std::string& file, const ModelConfig& m,
                  const std::map<std::string, const HfTensor*>& wanted, const HfListing& l,
                  LogicalTensors& out, std::map<std::string, std::string>& found) {
  const std::string path = folder + "/" + file;
  SafetensorsReader reader(path);
  for (const SafeTensor& st : reader.header().tensors) {
    const std::string name = our_name(m, st.name);
    auto it = wanted.find(name);
    if (it == wanted.end())
      throw InputError(path + ": tensor " + st.name + " is not one of the " +
                       hf_architecture(m) + " the flags describe");
    if (!l.file_of.empty() && (!l.file_of.count(st.name) || l.file_of.at(st.name) != file))
      throw InputError(path + ": tensor " + st.name + " is not where " + kIndexFile +
                       " puts it");
    if (found.count(name))
      throw InputError(path + ": tensor " + st.name + " again (also in " + found[name] + ")");
    if (st.dtype != SafeDType::F32 && st.dtype != SafeDType::BF16 && st.dtype != SafeDType::F16)
      throw InputError(path + ": tensor " + st.name + " is " + dtype_name(st.dtype) +
                       ", not F32, BF16 or F16");
    const HfTensor& t = *it->second;
    if (st.shape != t.shape())
      throw InputError(path + ": tensor " + st.name + " has shape " + shape_text(st.shape) +
                       ", the flags' model needs " + shape_text(t.shape()));
    const std::vector<float> values = reader.read_floats(st);
    std::vector<float>& to = out.at(t.param);
    for (int64_t i = 0; i < t.numel(); ++i) to[t.at(i)] = values[i];
    found[name] = file;
  }
}

}  // namespace

LogicalTensors import_hugging_face(const std::string& folder, const ModelConfig& m) {
  const std::vector<HfTensor> hf = hf_tensors(m);
  std::map<std::string, const HfTensor*> wanted;
  for (const HfTensor& t : hf) wanted[t.name] = &t;
  const HfListing l = list_hf_files(folder);
  const std::string index_path = folder + "/" + kIndexFile;
  for (const auto& [name, file] : l.file_of)
    if (!wanted.count(our_name(m, name)))
      throw InputError(index_path + ": tensor " + name + " is not one of the " +
                       hf_architecture(m) + " the flags describe");

  LogicalTensors out;
  for (const ParamSpec& p : param_table(m)) out[p.name].assign(p.numel(), 0.0f);
  std::map<std::string, std::string> found;  // our name -> the file it came from
  for (const std::string& file : l.files) read_hf_file(folder, file, m, wanted, l, out, found);
  for (const HfTensor& t : hf)
    if (!found.count(t.name))
      throw InputError(l.listing + ": no tensor " + t.name + " (the flags' " +
                       hf_architecture(m) + " needs it, " + shape_text(t.shape()) + ")");
  return out;
}

}  // namespace paralab
