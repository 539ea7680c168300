// checkpoint/hugging_face_config.cpp: config.json of a Hugging Face export, written from the
// flags' model and checked against them (check_hugging_face_config, checkpoint/hugging_face.h).
//
// Which transformers class holds which paralab model:
//   gpt                          GPT2LMHeadModel      (gpt2)
//   llama                        LlamaForCausalLM     (llama)
//   llama --qk-layernorm         Qwen3ForCausalLM     (qwen3)
//   llama MoE --qk-layernorm     Qwen3MoeForCausalLM  (qwen3_moe)
//   llama MoE                    MixtralForCausalLM   (mixtral): Qwen3-MoE always has q_norm
//                                and k_norm, so without them the MoE model is Mixtral's
//                                (every layer MoE, softmax, top-k renormalised).
// The fields are transformers 5's (rope_parameters {rope_type, rope_theta}, dtype), with the
// classic ones beside them where harmless (rope_theta, torch_dtype) for transformers 4.
// Floats are written as their float's shortest decimal (1e-5f as 1e-05, not
// 9.99999974737875e-06), so that Hugging Face computes with the same fp32 value, and always
// with a '.' or an exponent: transformers' strict config classes refuse an integer for a
// float field (router_aux_loss_coef 0 must read 0.0), so the file is rendered here rather
// than by JsonWriter, whose 0.0 is "0".
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
#include "checkpoint/hugging_face_config.h"

#include "checkpoint/hugging_face.h"
#include "checkpoint/json.h"         // JsonWriter (string quoting)
#include "checkpoint/json_document.h"  // Json, JsonDocument, json_find

namespace paralab {

// router_aux_loss_coef in Hugging Face's scale. Megatron's α weighs each MoE layer's loss,
// α·E·Σᵢ fᵢPᵢ (Σ f = 1), added once per layer; Hugging Face's load_balancing_loss_func pools
// the L_moe layers' routing into one E·Σᵢ fᵢPᵢ with Σ f = k, weighed by the coefficient once.
// At equal gradients per layer: coef = α·L_moe/k (docs/moe.md, notes/formulas.md).
static float hf_router_aux_loss_coef(const ModelConfig& m) {
  int moe_layers = 0;
  for (int l = 0; l < m.num_layers; ++l) moe_layers += m.moe.is_moe_layer(l);
  return m.moe.aux_loss_coeff * (float)moe_layers / (float)m.moe.topk;
}

const char* hf_model_type(const ModelConfig& m) {
  if (m.is_gpt()) return "gpt2";
  if (m.moe.enabled()) return m.qk_layernorm ? "qwen3_moe" : "mixtral";
  return m.qk_layernorm ? "qwen3" : "llama";
}

const char* hf_architecture(const ModelConfig& m) {
  if (m.is_gpt()) return "GPT2LMHeadModel";
  if (m.moe.enabled()) return m.qk_layernorm ? "Qwen3MoeForCausalLM" : "MixtralForCausalLM";
  return m.qk_layernorm ? "Qwen3ForCausalLM" : "LlamaForCausalLM";
}

namespace {

// The float's shortest decimal that reads back as the same float, as JSON and Python read a
// float ("1e-05", "10000.0", "0.0").
std::string float_text(float v) {
  char buf[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, (double)v);
    if (std::strtof(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

std::string quoted(const std::string& s) { return JsonWriter().value(s).str(); }

// A JSON object of already rendered values, one per line, in the order added.
class Fields {
 public:
  Fields& raw(const std::string& key, const std::string& text) {
    fields_.emplace_back(key, text);
    return *this;
  }
  Fields& str(const std::string& key, const std::string& v) { return raw(key, quoted(v)); }
  Fields& integer(const std::string& key, int64_t v) { return raw(key, std::to_string(v)); }
  Fields& real(const std::string& key, float v) { return raw(key, float_text(v)); }
  Fields& boolean(const std::string& key, bool v) { return raw(key, v ? "true" : "false"); }
  std::string inline_text() const {
    std::string s = "{";
    for (size_t i = 0; i < fields_.size(); ++i)
      s += (i ? ", " : "") + quoted(fields_[i].first) + ": " + fields_[i].second;
    return s + "}";
  }
  std::string text() const {
    std::string s = "{\n";
    for (size_t i = 0; i < fields_.size(); ++i)
      s += "  " + quoted(fields_[i].first) + ": " + fields_[i].second +
           (i + 1 < fields_.size() ? ",\n" : "\n");
    return s + "}\n";
  }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

std::vector<int> dense_layers(const ModelConfig& m) {
  std::vector<int> dense;
  for (int l = 0; l < m.num_layers; ++l)
    if (!m.moe.is_moe_layer(l)) dense.push_back(l);
  return dense;
}

std::string list_text(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

std::string hf_config_json(const ModelConfig& m, SafeDType dtype) {
  const std::string type = hf_model_type(m);
  const char* torch_dtype = dtype == SafeDType::BF16  ? "bfloat16"
                            : dtype == SafeDType::F16 ? "float16"
                                                      : "float32";
  Fields f;
  f.raw("architectures", "[" + quoted(hf_architecture(m)) + "]").str("model_type", type);
  f.integer("vocab_size", m.vocab_size);
  // paralab's vocabulary has no special tokens (GPT-2's default 50256 may lie outside it)
  f.raw("bos_token_id", "null").raw("eos_token_id", "null").raw("pad_token_id", "null");
  if (type == "gpt2") {
    // embd_pdrop 0: paralab has no dropout on the embedding's output
    f.integer("n_positions", m.seq_length).integer("n_embd", m.hidden_size);
    f.integer("n_layer", m.num_layers).integer("n_head", m.num_attention_heads);
    f.integer("n_inner", m.ffn()).str("activation_function", "gelu");
    f.real("resid_pdrop", m.hidden_dropout).real("embd_pdrop", 0.0f);
    f.real("attn_pdrop", m.attention_dropout).real("layer_norm_epsilon", m.norm_epsilon);
    f.boolean("scale_attn_weights", true).boolean("scale_attn_by_inverse_layer_idx", false);
    f.boolean("reorder_and_upcast_attn", false).boolean("tie_word_embeddings", true);
  } else {
    const Fields rope = Fields().str("rope_type", "default").real("rope_theta", m.rope_theta);
    f.integer("hidden_size", m.hidden_size);
    f.integer("intermediate_size", type == "mixtral" ? m.moe_ffn() : m.ffn());
    f.integer("num_hidden_layers", m.num_layers);
    f.integer("num_attention_heads", m.num_attention_heads);
    f.integer("num_key_value_heads", m.groups()).integer("head_dim", m.head_dim());
    f.str("hidden_act", "silu").integer("max_position_embeddings", m.seq_length);
    f.real("rms_norm_eps", m.norm_epsilon).real("rope_theta", m.rope_theta);
    f.raw("rope_parameters", rope.inline_text());
    // paralab's llama has no dropout
    f.boolean("attention_bias", false).real("attention_dropout", 0.0f);
    f.boolean("mlp_bias", false).boolean("tie_word_embeddings", false);
    if (type == "qwen3" || type == "qwen3_moe") f.boolean("use_sliding_window", false);
    f.raw("sliding_window", "null");
    if (type == "qwen3_moe") {
      // paralab's softmax router without pre-softmax is the softmax over the k largest
      // logits, which is Qwen's softmax over all E renormalised over the top k
      f.integer("num_experts", m.moe.num_experts).integer("num_experts_per_tok", m.moe.topk);
      f.integer("moe_intermediate_size", m.moe_ffn());
      f.boolean("norm_topk_prob", !m.moe.pre_softmax).integer("decoder_sparse_step", 1);
      f.raw("mlp_only_layers", list_text(dense_layers(m)));
      f.real("router_aux_loss_coef", hf_router_aux_loss_coef(m));
      f.boolean("output_router_logits", false);
    } else if (type == "mixtral") {
      f.integer("num_local_experts", m.moe.num_experts);
      f.integer("num_experts_per_tok", m.moe.topk);
      f.real("router_aux_loss_coef", hf_router_aux_loss_coef(m)).real("router_jitter_noise", 0.0f);
      f.boolean("output_router_logits", false);
    }
  }
  f.real("initializer_range", m.init_method_std).boolean("use_cache", true);
  f.str("dtype", torch_dtype).str("torch_dtype", torch_dtype);
  return f.text();
}

namespace {

// config.json against the flags: each key by the value the flags give, or by transformers'
// default when the file leaves it out.
class ConfigCheck {
 public:
  explicit ConfigCheck(const std::string& folder) : path_(folder + "/config.json") {
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw InputError(path_ + ": cannot open");
    std::stringstream text;
    text << in.rdbuf();
    try {
      root_ = JsonDocument(text.str()).root();
    } catch (const JsonError& e) {
      throw InputError(path_ + ": " + e.what());
    }
    if (!root_.is_object()) throw InputError(path_ + ": not a JSON object");
  }
  const Json* find(const std::string& key) const {
    const Json* v = json_find(root_, key);
    return v && !v->is_null() ? v : nullptr;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& got,
                         const std::string& want, const std::string& flag) const {
    throw InputError(path_ + ": " + key + " is " + got + ", the flags give " + want + " (" +
                     flag + ")");
  }
  // The key's value, or its default (text) when absent; fails when absent without one.
  const Json* value(const std::string& key, const std::string& want, const std::string& flag,
                         bool has_default) const {
    const Json* v = find(key);
    if (!v && !has_default)
      throw InputError(path_ + ": no " + key + ", the flags give " + want + " (" + flag + ")");
    return v;
  }
  void integer(const std::string& key, int64_t want, const std::string& flag,
               std::optional<int64_t> otherwise = std::nullopt) const {
    const Json* v = value(key, std::to_string(want), flag, otherwise.has_value());
    if (v && !whole_number(*v)) fail(key, describe(*v), std::to_string(want), flag);
    const int64_t got = v ? (int64_t)v->get<double>() : *otherwise;
    if (got != want) fail(key, v ? std::to_string(got) : absent(std::to_string(got)),
                          std::to_string(want), flag);
  }
  // Compared as float: the value paralab computes with.
  void real(const std::string& key, float want, const std::string& flag,
            std::optional<double> otherwise = std::nullopt) const {
    const Json* v = value(key, float_text(want), flag, otherwise.has_value());
    if (v && !v->is_number()) fail(key, describe(*v), float_text(want), flag);
    const double got = v ? v->get<double>() : *otherwise;
    if ((float)got != want) fail(key, v ? describe(*v) : absent(num(got)), float_text(want), flag);
  }
  void text(const std::string& key, const std::string& want, const std::string& flag,
            std::optional<std::string> otherwise = std::nullopt) const {
    const Json* v = value(key, want, flag, otherwise.has_value());
    if (v && !v->is_string()) fail(key, describe(*v), want, flag);
    const std::string got = v ? v->get<std::string>() : *otherwise;
    if (got != want) fail(key, v ? got : absent(got), want, flag);
  }
  void boolean(const std::string& key, bool want, const std::string& flag, bool otherwise) const {
    const Json* v = find(key);
    const std::string w = want ? "true" : "false";
    if (v && !v->is_boolean()) fail(key, describe(*v), w, flag);
    const bool got = v ? v->get<bool>() : otherwise;
    if (got != want) fail(key, v ? describe(*v) : absent(got ? "true" : "false"), w, flag);
  }
  // A number with an integer value that fits an int64 exactly (64, 64.0, 6.4e1).
  static bool whole_number(const Json& v) {
    if (!v.is_number()) return false;
    const double d = v.get<double>();
    return d == std::floor(d) && std::fabs(d) < 9007199254740992.0;
  }
  static std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
  }
  static std::string describe(const Json& v) {
    if (v.is_string()) return "\"" + v.get<std::string>() + "\"";
    if (v.is_number()) return num(v.get<double>());
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    if (v.is_array()) return "an array";
    return v.is_object() ? "an object" : "null";
  }
  static std::string absent(const std::string& dflt) {
    return "absent (Hugging Face's default " + dflt + ")";
  }

 private:
  std::string path_;
  Json root_;
};

bool moe_type(const std::string& t) { return t == "qwen3_moe" || t == "mixtral"; }

// The family first (model_type, architectures[0]): every other key depends on it. A mismatch
// names the flag that picks the family the file has.
void check_model_family(const ConfigCheck& c, const ModelConfig& m, const std::string& type) {
  const Json* v = c.find("model_type");
  const std::string got = v && v->is_string() ? v->get<std::string>() : "";
  const std::string flag = (got == "gpt2") != m.is_gpt()         ? "--arch"
                           : moe_type(got) != m.moe.enabled()  ? "--num-experts"
                                                                : "--qk-layernorm";
  if (got != type) c.fail("model_type", v ? ConfigCheck::describe(*v) : "absent", type, flag);
  const Json* arch = c.find("architectures");
  if (arch && (!arch->is_array() || arch->empty() ||
               !arch->at(0).is_string() ||
               arch->at(0).get<std::string>() != hf_architecture(m)))
    c.fail("architectures[0]",
           arch->is_array() && !arch->empty()
               ? ConfigCheck::describe(arch->at(0)) : ConfigCheck::describe(*arch),
           hf_architecture(m), "--arch");
}

// GPT-2's keys (GPT2Config): its shapes, the GeLU and the tied embedding.
void check_gpt2_keys(const ConfigCheck& c, const ModelConfig& m) {
  const int h = m.hidden_size;
  c.integer("n_embd", h, "--hidden-size");
  c.integer("n_layer", m.num_layers, "--num-layers");
  c.integer("n_head", m.num_attention_heads, "--num-attention-heads");
  c.integer("n_inner", m.ffn(), "--ffn-hidden-size", 4 * h);  // null: 4 n_embd
  c.integer("n_positions", m.seq_length, "--seq-length", 1024);
  c.integer("vocab_size", m.vocab_size, "--vocab-size", 50257);
  c.real("layer_norm_epsilon", m.norm_epsilon, "--norm-epsilon", 1e-5);
  c.text("activation_function", "gelu", "--arch (paralab's GeLU is erf)", "gelu_new");
  c.boolean("scale_attn_weights", true, "--arch", true);
  c.boolean("scale_attn_by_inverse_layer_idx", false, "--arch", false);
  c.boolean("tie_word_embeddings", true, "--arch", true);
}

// The Llama-like families' shapes (Llama, Qwen3, Qwen3-MoE, Mixtral), with transformers'
// defaults per class where the file may leave a key out.
void check_llama_shapes(const ConfigCheck& c, const ModelConfig& m, const std::string& type) {
  const int h = m.hidden_size, a = m.num_attention_heads;
  const int64_t kv_default = type == "qwen3" ? 32 : type == "qwen3_moe" ? 4
                             : type == "mixtral" ? 8 : a;
  c.integer("hidden_size", h, "--hidden-size");
  c.integer("num_hidden_layers", m.num_layers, "--num-layers");
  c.integer("num_attention_heads", a, "--num-attention-heads");
  c.integer("num_key_value_heads", m.groups(), "--num-query-groups", kv_default);
  c.integer("head_dim", m.head_dim(), "--kv-channels", type == "qwen3" ? 128 : h / a);
  c.integer("vocab_size", m.vocab_size, "--vocab-size");
  c.real("rms_norm_eps", m.norm_epsilon, "--norm-epsilon", type == "mixtral" ? 1e-5 : 1e-6);
  c.text("hidden_act", "silu", "--arch", "silu");
  c.boolean("attention_bias", false, "--arch", false);
  c.boolean("mlp_bias", false, "--arch", false);
  c.boolean("tie_word_embeddings", false, "--arch", false);
  // the dense MLP's width matters only where a layer is dense; Mixtral's is each expert's
  if (type == "mixtral")
    c.integer("intermediate_size", m.moe_ffn(), "--moe-ffn-hidden-size");
  else if (!dense_layers(m).empty())
    c.integer("intermediate_size", m.ffn(), "--ffn-hidden-size");
}

// RoPE: the base, unscaled (rope_parameters, else transformers 4's keys).
void check_rope(const ConfigCheck& c, const ModelConfig& m, const std::string& type) {
  const Json* rope = c.find("rope_parameters");
  if (!rope) rope = c.find("rope_scaling");
  if (rope && !rope->is_object())
    c.fail("rope_parameters", ConfigCheck::describe(*rope), "an object", "--rotary-base");
  const Json* kind = rope ? json_find(*rope, "rope_type") : nullptr;
  if (!kind && rope) kind = json_find(*rope, "type");
  if (kind && (!kind->is_string() || kind->get<std::string>() != "default"))
    c.fail("rope_parameters.rope_type", ConfigCheck::describe(*kind), "\"default\"",
           "--rotary-base: paralab's RoPE is unscaled");
  const Json* theta = rope ? json_find(*rope, "rope_theta") : nullptr;
  if (!theta) theta = c.find("rope_theta");
  const double want_default = type == "mixtral" ? 1e6 : 1e4;
  if (theta && !theta->is_number())
    c.fail("rope_theta", ConfigCheck::describe(*theta), float_text(m.rope_theta),
           "--rotary-base");
  const double got = theta ? theta->get<double>() : want_default;
  if ((float)got != m.rope_theta)
    c.fail("rope_theta",
           theta ? ConfigCheck::num(got) : ConfigCheck::absent(ConfigCheck::num(got)),
           float_text(m.rope_theta), "--rotary-base");
}

// A sliding window shorter than the sequence would mask keys paralab attends to (Qwen3 uses
// its window only with use_sliding_window).
void check_sliding_window(const ConfigCheck& c, const ModelConfig& m, const std::string& type) {
  const bool qwen = type == "qwen3" || type == "qwen3_moe";
  const Json* w = c.find("sliding_window");
  const Json* on = c.find("use_sliding_window");
  const bool used = w && (!qwen || (on && on->is_boolean() && on->get<bool>()));
  if (used && (!w->is_number() || w->get<double>() < m.seq_length))
    c.fail("sliding_window", ConfigCheck::describe(*w),
           "full attention over " + std::to_string(m.seq_length) + " tokens", "--seq-length");
}

// Qwen3-MoE's layer l is MoE when l is not in mlp_only_layers and (l+1) % decoder_sparse_step
// == 0: the file's dense layers must be --moe-layer-freq's.
void check_qwen3_moe_layers(const ConfigCheck& c, const ModelConfig& m) {
  const Json* step_v = c.find("decoder_sparse_step");
  const Json* only_v = c.find("mlp_only_layers");
  if (step_v && (!ConfigCheck::whole_number(*step_v) || step_v->get<double>() < 1))
    c.fail("decoder_sparse_step", ConfigCheck::describe(*step_v), "1", "--moe-layer-freq");
  if (only_v && !only_v->is_array())
    c.fail("mlp_only_layers", ConfigCheck::describe(*only_v), list_text(dense_layers(m)),
           "--moe-layer-freq");
  const int64_t step = step_v ? (int64_t)step_v->get<double>() : 1;
  std::vector<int> file_dense;
  for (int l = 0; l < m.num_layers; ++l) {
    bool only = false;
    if (only_v)
      for (const Json& x : *only_v)
        only = only || (x.is_number() && x.get<double>() == l);
    if (only || (l + 1) % step != 0) file_dense.push_back(l);
  }
  if (file_dense != dense_layers(m))
    c.fail("the dense layers (decoder_sparse_step, mlp_only_layers)", list_text(file_dense),
           list_text(dense_layers(m)), "--moe-layer-freq");
}

// The experts: their count, top-k and (Qwen3-MoE) width, routing and which layers have them.
void check_experts(const ConfigCheck& c, const ModelConfig& m, const std::string& type) {
  if (type == "mixtral") {
    c.integer("num_local_experts", m.moe.num_experts, "--num-experts", 8);
    c.integer("num_experts_per_tok", m.moe.topk, "--moe-router-topk", 2);
  } else if (type == "qwen3_moe") {
    // transformers 5 writes num_local_experts, 4 num_experts
    c.integer(c.find("num_local_experts") ? "num_local_experts" : "num_experts",
              m.moe.num_experts, "--num-experts", 128);
    c.integer("num_experts_per_tok", m.moe.topk, "--moe-router-topk", 8);
    c.integer("moe_intermediate_size", m.moe_ffn(), "--moe-ffn-hidden-size", 768);
    c.boolean("norm_topk_prob", !m.moe.pre_softmax, "--moe-router-pre-softmax", false);
    check_qwen3_moe_layers(c, m);
  }
}

}  // namespace

void check_hugging_face_config(const std::string& folder, const ModelConfig& m) {
  const ConfigCheck c(folder);
  const std::string type = hf_model_type(m);
  check_model_family(c, m, type);
  if (type == "gpt2") {
    check_gpt2_keys(c, m);
    return;
  }
  check_llama_shapes(c, m, type);
  check_rope(c, m, type);
  check_sliding_window(c, m, type);
  check_experts(c, m, type);
}

}  // namespace paralab
