// checkpoint/checkpoint_manifest.cpp: manifest.json written and read strictly (the format is in
// checkpoint_manifest.h; checkpoint_manifest_check.cpp checks a manifest against the run's model).
#include "checkpoint/checkpoint_manifest.h"

#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include "checkpoint/json.h"
#include "checkpoint/json_document.h"

namespace paralab {

// The integer model fields a manifest carries, each with its flag (what a field is, and which
// decide a shape: ManifestIntField in checkpoint_manifest.h).
const std::vector<ManifestIntField> kManifestIntFields = {
    {"num_layers", "--num-layers", true, [](const ModelConfig& m) -> int64_t { return m.num_layers; },
     [](ModelConfig& m, int64_t v) { m.num_layers = (int)v; }},
    {"hidden_size", "--hidden-size", true, [](const ModelConfig& m) -> int64_t { return m.hidden_size; },
     [](ModelConfig& m, int64_t v) { m.hidden_size = (int)v; }},
    {"ffn_hidden_size", "--ffn-hidden-size", true, [](const ModelConfig& m) -> int64_t { return m.ffn(); },
     [](ModelConfig& m, int64_t v) { m.ffn_hidden_size = (int)v; }},
    {"num_attention_heads", "--num-attention-heads", true,
     [](const ModelConfig& m) -> int64_t { return m.num_attention_heads; },
     [](ModelConfig& m, int64_t v) { m.num_attention_heads = (int)v; }},
    {"num_query_groups", "--num-query-groups", true, [](const ModelConfig& m) -> int64_t { return m.groups(); },
     [](ModelConfig& m, int64_t v) { m.num_query_groups = (int)v; }},
    {"kv_channels", "--kv-channels", true, [](const ModelConfig& m) -> int64_t { return m.head_dim(); },
     [](ModelConfig& m, int64_t v) { m.kv_channels = (int)v; }},
    {"seq_length", "--seq-length", true, [](const ModelConfig& m) -> int64_t { return m.seq_length; },
     [](ModelConfig& m, int64_t v) { m.seq_length = (int)v; }},
    {"vocab_size", "--vocab-size", true, [](const ModelConfig& m) -> int64_t { return m.vocab_size; },
     [](ModelConfig& m, int64_t v) { m.vocab_size = (int)v; }},
    {"qk_layernorm", "--qk-layernorm", true, [](const ModelConfig& m) -> int64_t { return m.qk_layernorm; },
     [](ModelConfig& m, int64_t v) { m.qk_layernorm = v != 0; }},
    {"num_experts", "--num-experts", true, [](const ModelConfig& m) -> int64_t { return m.moe.num_experts; },
     [](ModelConfig& m, int64_t v) { m.moe.num_experts = (int)v; }},
    {"moe_ffn_hidden_size", "--moe-ffn-hidden-size", true,
     [](const ModelConfig& m) -> int64_t { return m.moe.enabled() ? m.moe_ffn() : 0; },
     [](ModelConfig& m, int64_t v) { m.moe.ffn_hidden_size = (int)v; }},
    {"moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", true,
     [](const ModelConfig& m) -> int64_t { return m.moe.shared_expert_size; },
     [](ModelConfig& m, int64_t v) { m.moe.shared_expert_size = (int)v; }},
    {"moe_shared_expert_gate", "--moe-shared-expert-gate", true,
     [](const ModelConfig& m) -> int64_t { return m.moe.shared_expert_gate; },
     [](ModelConfig& m, int64_t v) { m.moe.shared_expert_gate = v != 0; }},
    {"moe_router_topk", "--moe-router-topk", false, [](const ModelConfig& m) -> int64_t { return m.moe.topk; },
     [](ModelConfig& m, int64_t v) { m.moe.topk = (int)v; }},
    {"moe_router_pre_softmax", "--moe-router-pre-softmax", false,
     [](const ModelConfig& m) -> int64_t { return m.moe.pre_softmax; },
     [](ModelConfig& m, int64_t v) { m.moe.pre_softmax = v != 0; }},
    {"moe_router_sigmoid", "--moe-router-score-function", false,
     [](const ModelConfig& m) -> int64_t { return m.moe.score == Moe::Score::SIGMOID; },
     [](ModelConfig& m, int64_t v) { m.moe.score = v ? Moe::Score::SIGMOID : Moe::Score::SOFTMAX; }},
    {"moe_router_enable_expert_bias", "--moe-router-enable-expert-bias", true,
     [](const ModelConfig& m) -> int64_t { return m.moe.expert_bias; },
     [](ModelConfig& m, int64_t v) { m.moe.expert_bias = v != 0; }},
};

namespace {

// The numbers the maths uses (not the shapes): read back for --convert's export, whose
// refusals and config.json need them. positive: > 0, else >= 0.
struct FloatField {
  const char* key;
  float (*get)(const ModelConfig&);
  void (*set)(ModelConfig&, float);
  bool positive;
};
const FloatField kFloatFields[] = {
    {"norm_epsilon", [](const ModelConfig& m) { return m.norm_epsilon; },
     [](ModelConfig& m, float v) { m.norm_epsilon = v; }, true},
    {"rotary_base", [](const ModelConfig& m) { return m.rope_theta; },
     [](ModelConfig& m, float v) { m.rope_theta = v; }, true},
    {"moe_router_topk_scaling_factor", [](const ModelConfig& m) { return m.moe.topk_scaling_factor; },
     [](ModelConfig& m, float v) { m.moe.topk_scaling_factor = v; }, false},
    {"moe_expert_capacity_factor", [](const ModelConfig& m) { return m.moe.capacity_factor; },
     [](ModelConfig& m, float v) { m.moe.capacity_factor = v; }, false},
    {"moe_aux_loss_coeff", [](const ModelConfig& m) { return m.moe.aux_loss_coeff; },
     [](ModelConfig& m, float v) { m.moe.aux_loss_coeff = v; }, false},
};

[[noreturn]] void refuse(const std::string& path, const std::string& rule) {
  throw CheckpointError(path + ": " + rule);
}

// A number in [lo, hi] that is an integer, else the rule naming the key.
int64_t integer(const Json& object, const char* key, int64_t lo, int64_t hi,
                const std::string& path) {
  const auto v = object.find(key);
  if (v == object.end()) refuse(path, std::string("missing \"") + key + "\"");
  int64_t n = 0;
  try {
    n = json_int(*v);
  } catch (const JsonError&) {
    refuse(path, std::string("\"") + key + "\" is not an integer");
  }
  if (n < lo || n > hi)
    refuse(path, std::string("\"") + key + "\" is " + std::to_string(n) + ", outside [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return n;
}

const Json& member(const Json& object, const char* key, Json::value_t kind,
                   const std::string& path) {
  const auto v = object.find(key);
  if (v == object.end()) refuse(path, std::string("missing \"") + key + "\"");
  const bool fits = kind == Json::value_t::number_float ? v->is_number() : v->type() == kind;
  if (!fits) refuse(path, std::string("\"") + key + "\" has the wrong type");
  return *v;
}

// A shard's file name is ours alone: rank_NNNNN.safetensors, nothing that leaves the folder.
bool safe_file_name(const std::string& s) {
  if (s.empty() || s.size() > 64 || s[0] == '.') return false;
  for (char c : s)
    if (!(std::isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-')) return false;
  return true;
}

constexpr int64_t kMaxDim = int64_t(1) << 40;  // far above any real tensor, below overflow

// A shard's list of layers (its entries "expert_bias/L", "fp8/L", "fp8/L/e"): numbers in
// [0, layers).
std::vector<int> layer_list(const Json& shard, const char* key, int num_layers,
                            const std::string& path) {
  std::vector<int> out;
  for (const Json& l : member(shard, key, Json::value_t::array, path)) {
    if (!l.is_number()) refuse(path, std::string("\"") + key + "\" holds a non-number");
    const double layer = l.get<double>();
    if (!(layer >= 0 && layer < num_layers) || layer != std::floor(layer))
      refuse(path, std::string("\"") + key + "\" names a layer the model does not have");
    out.push_back((int)layer);
  }
  return out;
}

}  // namespace

void write_manifest_shard(JsonWriter& j, const ManifestShard& s) {
  j.begin_object();
  j.field("rank", s.rank).field("file", s.file).field("bytes", (int64_t)s.bytes);
  j.field("crc32c", (int64_t)s.crc32c).field("payload_bytes", (int64_t)s.payload_bytes);
  j.key("expert_bias_layers").begin_array();
  for (int l : s.expert_bias_layers) j.value(l);
  j.end_array();
  if (!s.fp8_layers.empty()) {
    j.key("fp8_layers").begin_array();
    for (int l : s.fp8_layers) j.value(l);
    j.end_array();
  }
  if (!s.fp8_expert_layers.empty()) {
    j.key("fp8_expert_layers").begin_array();
    for (int l : s.fp8_expert_layers) j.value(l);
    j.end_array();
  }
  j.key("pieces").begin_array();
  for (const ManifestPiece& p : s.pieces) {
    j.begin_object().field("tensor", p.tensor).field("entry", p.entry);
    j.field("begin", p.begin).field("end", p.end);
    if (p.slice.expert)
      j.field("ep", p.slice.ep).field("ep_rank", p.slice.ep_rank)
          .field("etp", p.slice.etp).field("etp_rank", p.slice.etp_rank);
    else
      j.field("tp", p.slice.tp).field("tp_rank", p.slice.tp_rank);
    j.end_object();
  }
  j.end_array().end_object();
}

std::string manifest_json(const Manifest& m) {
  JsonWriter j(true);
  j.begin_object();
  j.field("format", "paralab checkpoint");
  j.field("version", m.version);
  j.field("iteration", m.iteration);
  j.key("model").begin_object();
  j.field("arch", m.model.arch == Arch::LLAMA ? "llama" : "gpt");
  for (const ManifestIntField& f : kManifestIntFields) j.field(f.key, f.get(m.model));
  for (const FloatField& f : kFloatFields) j.field(f.key, (double)f.get(m.model));
  j.field("make_vocab_size_divisible_by", m.model.vocab_divisible_by);
  j.key("moe_layer_pattern").begin_array();
  for (int l = 0; l < m.model.num_layers && m.model.moe.enabled(); ++l)
    j.value((int)m.model.moe.is_moe_layer(l));
  j.end_array();
  j.end_object();
  j.key("parallel").begin_object();
  j.field("tensor_parallel", m.parallel.tensor_parallel);
  j.field("context_parallel", m.parallel.context_parallel);
  j.field("pipeline_parallel", m.parallel.pipeline_parallel);
  j.field("virtual_pipeline", m.parallel.virtual_pipeline);
  j.field("data_parallel", m.parallel.data_parallel());
  j.field("expert_parallel", m.parallel.expert_parallel);
  j.field("expert_tensor_parallel", m.parallel.expert_tensor_parallel);
  j.field("zero_stage", m.parallel.zero_stage);
  j.field("world_size", m.parallel.world_size);
  j.end_object();
  j.field("bf16", m.bf16);
  j.field("fp16", m.fp16);
  j.field("optimizer", m.optimizer);
  j.field("seed", (int64_t)m.seed);
  j.field("global_batch_size", m.global_batch_size);
  j.field("adam_steps", m.adam_steps);
  j.field("skipped_steps", m.skipped_steps);
  j.field("skipped_in_a_row", m.skipped_in_a_row);
  if (m.has_loss_scaler) {  // the scale written exactly (an fp32 value, as a double)
    j.key("loss_scaler").begin_object();
    j.field("scale", (double)m.loss_scaler.scale);
    j.field("growth_tracker", m.loss_scaler.growth_tracker);
    j.field("hysteresis_tracker", m.loss_scaler.hysteresis_tracker).end_object();
  }
  if (m.fp8.enabled) {  // Megatron-Core's flag values
    j.key("fp8").begin_object();
    j.field("format", m.fp8.hybrid ? "hybrid" : "e4m3");
    j.field("recipe", fp8_recipe_name(m.fp8.recipe));
    j.field("margin", m.fp8.margin);
    j.field("amax_history_len", m.fp8.amax_history_len);
    j.field("amax_compute_algo",
            m.fp8.amax_compute_algo == kernels::Fp8AmaxAlgo::Max ? "max" : "most_recent");
    j.end_object();
  }
  if (!m.data.description.empty()) {
    j.key("data").begin_object();
    j.field("description", m.data.description);
    j.key("files").begin_array();
    for (size_t i = 0; i < m.data.files.size(); ++i)
      j.begin_object().field("path", m.data.files[i]).field("crc32c", (int64_t)m.data.crc32c[i])
          .end_object();
    j.end_array();
    j.end_object();
  }
  j.key("tensors").begin_array();
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    j.begin_object().field("name", m.tensors[i]).key("shape").begin_array();
    for (int64_t d : m.shapes[i]) j.value(d);
    j.end_array().end_object();
  }
  j.end_array();
  j.key("shards").begin_array();
  for (const ManifestShard& s : m.shards) write_manifest_shard(j, s);
  j.end_array();
  j.end_object();
  return j.str() + "\n";
}

ManifestShard parse_manifest_shard(const Json& s, int num_layers, const std::string& path) {
  if (!s.is_object()) refuse(path, "a \"shards\" entry is not an object");
  using K = Json::value_t;
  ManifestShard shard;
  shard.rank = (int)integer(s, "rank", 0, 1 << 20, path);
  shard.file = member(s, "file", K::string, path).get<std::string>();
  if (!safe_file_name(shard.file)) refuse(path, "shard file name \"" + shard.file + "\" is not allowed");
  shard.bytes = (uint64_t)integer(s, "bytes", 8, INT64_MAX, path);
  shard.crc32c = (uint32_t)integer(s, "crc32c", 0, UINT32_MAX, path);
  shard.payload_bytes = (uint64_t)integer(s, "payload_bytes", 0, INT64_MAX, path);
  shard.expert_bias_layers = layer_list(s, "expert_bias_layers", num_layers, path);
  if (s.contains("fp8_layers"))  // optional: an FP8 delayed run's
    shard.fp8_layers = layer_list(s, "fp8_layers", num_layers, path);
  if (s.contains("fp8_expert_layers"))  // optional: an FP8 delayed MoE run's
    shard.fp8_expert_layers = layer_list(s, "fp8_expert_layers", num_layers, path);
  for (const Json& p : member(s, "pieces", K::array, path)) {
    if (!p.is_object()) refuse(path, "a piece is not an object");
    ManifestPiece piece;
    piece.tensor = member(p, "tensor", K::string, path).get<std::string>();
    piece.entry = member(p, "entry", K::string, path).get<std::string>();
    piece.begin = integer(p, "begin", 0, kMaxDim, path);
    piece.end = integer(p, "end", piece.begin, kMaxDim, path);
    piece.slice.expert = p.contains("ep");
    if (piece.slice.expert) {
      piece.slice.ep = (int)integer(p, "ep", 1, 1 << 20, path);
      piece.slice.ep_rank = (int)integer(p, "ep_rank", 0, piece.slice.ep - 1, path);
      piece.slice.etp = (int)integer(p, "etp", 1, 1 << 20, path);
      piece.slice.etp_rank = (int)integer(p, "etp_rank", 0, piece.slice.etp - 1, path);
    } else {
      piece.slice.tp = (int)integer(p, "tp", 1, 1 << 20, path);
      piece.slice.tp_rank = (int)integer(p, "tp_rank", 0, piece.slice.tp - 1, path);
    }
    shard.pieces.push_back(piece);
  }
  return shard;
}

namespace {

using K = Json::value_t;

// The document: JSON, an object, and paralab's format.
Json manifest_root(const std::string& text, const std::string& path) {
  Json root;
  try {
    root = JsonDocument(text).root();
  } catch (const JsonError& e) {
    refuse(path, std::string("not JSON: ") + e.what());
  }
  if (!root.is_object()) refuse(path, "not a JSON object");
  if (member(root, "format", K::string, path).get<std::string>() != "paralab checkpoint")
    refuse(path, "\"format\" is not \"paralab checkpoint\"");
  return root;
}

// "model": the fields manifest_json writes, each in its range, and sizes that make a model
// (check_manifest compares them with the run's).
void parse_manifest_model(const Json& model, const std::string& path, ModelConfig& out) {
  const std::string& arch = member(model, "arch", K::string, path).get<std::string>();
  if (arch != "gpt" && arch != "llama") refuse(path, "\"arch\" is neither gpt nor llama");
  out.arch = arch == "llama" ? Arch::LLAMA : Arch::GPT;
  for (const ManifestIntField& f : kManifestIntFields)
    f.set(out, integer(model, f.key, 0, 1 << 30, path));
  for (const FloatField& f : kFloatFields) {
    const double v = member(model, f.key, K::number_float, path).get<double>();
    if (!std::isfinite(v) || v > 3e38 || (f.positive ? !(v > 0) : !(v >= 0)))
      refuse(path, std::string("\"") + f.key + "\" is not " + (f.positive ? "> 0" : ">= 0"));
    f.set(out, (float)v);
  }
  // the saving ranks' vocabulary padding (optional: older manifests lack it, and were saved
  // with the default unless --make-vocab-size-divisible-by said otherwise)
  if (model.contains("make_vocab_size_divisible_by"))
    out.vocab_divisible_by = (int)integer(model, "make_vocab_size_divisible_by", 1, 1 << 20, path);
  for (const Json& v : member(model, "moe_layer_pattern", K::array, path)) {
    if (!v.is_number()) refuse(path, "\"moe_layer_pattern\" holds a non-number");
    out.moe.layer_pattern.push_back(v.get<double>() != 0);
  }
  if (out.moe.enabled() && (int)out.moe.layer_pattern.size() != out.num_layers)
    refuse(path, "\"moe_layer_pattern\" does not have num_layers entries");
  if (out.num_layers < 1 || out.hidden_size < 1 || out.num_attention_heads < 1 ||
      out.vocab_size < 1 || out.seq_length < 1 || out.groups() < 1 ||
      out.num_attention_heads % out.groups() != 0)
    refuse(path, "the model's sizes are not a model");
}

// "parallel": the saving layout (information; any layout loads it).
void parse_manifest_parallel(const Json& par, const std::string& path, ParallelConfig& out) {
  out.tensor_parallel = (int)integer(par, "tensor_parallel", 1, 1 << 20, path);
  out.context_parallel = (int)integer(par, "context_parallel", 1, 1 << 20, path);
  out.pipeline_parallel = (int)integer(par, "pipeline_parallel", 1, 1 << 20, path);
  out.virtual_pipeline = (int)integer(par, "virtual_pipeline", 1, 1 << 20, path);
  out.expert_parallel = (int)integer(par, "expert_parallel", 1, 1 << 20, path);
  out.expert_tensor_parallel = (int)integer(par, "expert_tensor_parallel", 1, 1 << 20, path);
  out.zero_stage = (int)integer(par, "zero_stage", 0, 3, path);
  out.world_size = (int)integer(par, "world_size", 1, 1 << 20, path);
}

// "fp8": the recipe an FP8 run trained with (optional: absent without --fp8-format).
void parse_manifest_fp8(const Json& f, const std::string& path, Fp8Config& out) {
  const auto word = [&](const char* key, std::initializer_list<const char*> allowed) {
    const std::string v = member(f, key, K::string, path).get<std::string>();
    for (const char* a : allowed)
      if (v == a) return v;
    refuse(path, std::string("\"fp8\" \"") + key + "\" is \"" + v + "\", not a known value");
  };
  out.enabled = true;
  out.hybrid = word("format", {"e4m3", "hybrid"}) == "hybrid";
  const std::string recipe = word("recipe", {"delayed", "tensorwise", "blockwise"});
  out.recipe = recipe == "delayed"      ? Fp8Recipe::Delayed
               : recipe == "tensorwise" ? Fp8Recipe::Tensorwise
                                        : Fp8Recipe::Blockwise;
  out.margin = (int)integer(f, "margin", 0, 1000, path);
  out.amax_history_len = (int)integer(f, "amax_history_len", 1, 1 << 20, path);
  out.amax_compute_algo = word("amax_compute_algo", {"max", "most_recent"}) == "max"
                              ? kernels::Fp8AmaxAlgo::Max
                              : kernels::Fp8AmaxAlgo::MostRecent;
}

// Where the run stood after the saved step: the precision, the optimizer, the seed and batch,
// the step counts and (a loss-scaled run's) the loss scaler's state.
void parse_training_state(const Json& root, const std::string& path, Manifest& m) {
  m.bf16 = member(root, "bf16", K::boolean, path).get<bool>();
  // optional: checkpoints from before --fp16 do not record it
  if (root.contains("fp16")) m.fp16 = member(root, "fp16", K::boolean, path).get<bool>();
  if (m.bf16 && m.fp16) refuse(path, "bf16 and fp16 are both true");
  m.optimizer = member(root, "optimizer", K::boolean, path).get<bool>();
  m.seed = (uint64_t)integer(root, "seed", 0, INT64_MAX, path);
  m.global_batch_size = (int)integer(root, "global_batch_size", 1, 1 << 30, path);
  m.adam_steps = (int)integer(root, "adam_steps", 0, m.iteration, path);
  m.skipped_steps = (int)integer(root, "skipped_steps", 0, m.iteration, path);
  m.skipped_in_a_row = (int)integer(root, "skipped_in_a_row", 0, m.skipped_steps, path);
  if (root.contains("fp8")) parse_manifest_fp8(member(root, "fp8", K::object, path), path, m.fp8);
  if (!root.contains("loss_scaler")) return;  // optional: a loss-scaled run's
  const Json& ls = member(root, "loss_scaler", K::object, path);
  m.has_loss_scaler = true;
  const double scale = member(ls, "scale", K::number_float, path).get<double>();
  if (!(scale > 0 && scale <= FLT_MAX && (double)(float)scale == scale))
    refuse(path, "\"loss_scaler\" \"scale\" is not a positive fp32 number");
  m.loss_scaler.scale = (float)scale;
  m.loss_scaler.growth_tracker = (int)integer(ls, "growth_tracker", 0, INT32_MAX, path);
  m.loss_scaler.hysteresis_tracker =
      (int)integer(ls, "hysteresis_tracker", INT32_MIN, INT32_MAX, path);
}

// "data": what the run read, so that a resumed run reading other data is told.
void parse_manifest_data(const Json& data, const std::string& path, ManifestData& out) {
  out.description = member(data, "description", K::string, path).get<std::string>();
  for (const Json& f : member(data, "files", K::array, path)) {
    if (!f.is_object()) refuse(path, "a \"data\" file is not an object");
    out.files.push_back(member(f, "path", K::string, path).get<std::string>());
    out.crc32c.push_back((uint32_t)integer(f, "crc32c", 0, UINT32_MAX, path));
  }
}

// "tensors": every parameter's name and full shape, in param_table order.
void parse_manifest_tensors(const Json& root, const std::string& path, Manifest& m) {
  for (const Json& t : member(root, "tensors", K::array, path)) {
    if (!t.is_object()) refuse(path, "a \"tensors\" entry is not an object");
    m.tensors.push_back(member(t, "name", K::string, path).get<std::string>());
    std::vector<int64_t> shape;
    for (const Json& d : member(t, "shape", K::array, path)) {
      if (!d.is_number()) refuse(path, "tensor " + m.tensors.back() + ": a dimension is not a number");
      int64_t n = 0;
      try {
        n = json_int(d);
      } catch (const JsonError&) {
        refuse(path, "tensor " + m.tensors.back() + ": a dimension is not an integer");
      }
      if (n < 1 || n > kMaxDim) refuse(path, "tensor " + m.tensors.back() + ": a dimension out of range");
      shape.push_back(n);
    }
    m.shapes.push_back(shape);
  }
}

}  // namespace

Manifest parse_manifest(const std::string& text, const std::string& path) {
  const Json root = manifest_root(text, path);
  Manifest m;
  m.version = (int)integer(root, "version", 0, 1 << 30, path);
  if (m.version != kCheckpointVersion)
    refuse(path, "version " + std::to_string(m.version) + ", this trainer reads version " +
                     std::to_string(kCheckpointVersion));
  m.iteration = (int)integer(root, "iteration", 1, 1 << 30, path);
  parse_manifest_model(member(root, "model", K::object, path), path, m.model);
  parse_manifest_parallel(member(root, "parallel", K::object, path), path, m.parallel);
  parse_training_state(root, path, m);
  if (root.contains("data"))  // optional: older checkpoints do not record it
    parse_manifest_data(member(root, "data", K::object, path), path, m.data);
  parse_manifest_tensors(root, path, m);
  for (const Json& s : member(root, "shards", K::array, path)) {
    ManifestShard shard = parse_manifest_shard(s, m.model.num_layers, path);
    if (shard.rank != (int)m.shards.size())
      refuse(path, "shard " + std::to_string(m.shards.size()) + " says rank " +
                       std::to_string(shard.rank));
    m.shards.push_back(shard);
  }
  if (m.shards.empty()) refuse(path, "no shards");
  return m;
}

}  // namespace paralab
