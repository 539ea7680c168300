// checkpoint/hugging_face.h: paralab's model as a Hugging Face checkpoint, and back.
//
// An export is a folder that transformers' AutoModelForCausalLM.from_pretrained loads as is:
// config.json and model.safetensors (checkpoint/safetensors.h), or above a shard size
// model-0000i-of-0000n.safetensors with model.safetensors.index.json ({"metadata":
// {"total_size": bytes}, "weight_map": {name: file}}). The header's __metadata__ is
// {"format": "pt"}. Tensors carry Hugging Face's names and layouts:
//   gpt  -> GPT-2 (GPT2LMHeadModel): wte, wpe, h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2,
//           mlp.c_fc, mlp.c_proj}, ln_f; Conv1D weights stored [in, out] (the transpose of
//           paralab's [out, in]); c_attn's columns [all q | all k | all v] (paralab's fused
//           rows are grouped per query group, [q heads | k | v] x g); the tied head stored
//           once (wte). activation_function "gelu" (erf: paralab's), not GPT-2's default
//           "gelu_new" (tanh).
//   llama -> LlamaForCausalLM: model.embed_tokens, model.layers.N.{input_layernorm,
//           self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj},
//           model.norm, lm_head; fc1's [gate | up] rows split in two. paralab's RoPE is the
//           rotate-half form Hugging Face's Llama uses, so q and k need no permutation.
//           With --qk-layernorm: Qwen3ForCausalLM (self_attn.{q,k}_norm, before RoPE).
//   llama + MoE with --qk-layernorm -> Qwen3MoeForCausalLM: mlp.gate (the router, (E, h)),
//           mlp.experts.E.{gate,up,down}_proj per expert (global expert ids), q_norm/k_norm;
//           dense layers listed in mlp_only_layers.
//   llama + MoE without it -> MixtralForCausalLM (Qwen3-MoE always has q_norm and k_norm):
//           block_sparse_moe.gate, block_sparse_moe.experts.E.{w1 (gate), w3 (up), w2
//           (down)}; every layer MoE, top-k then softmax over the k (Mixtral's routing).
// config.json carries the trainer's exact numbers, not Hugging Face's defaults (Llama's
// rms_norm_eps defaults to 1e-6, paralab's --norm-epsilon to 1e-5; rope theta; the
// activation; the vocabulary; head_dim), so that the exported model computes what was
// trained. A configuration Hugging Face cannot hold is refused with one line naming the flag
// (hugging_face_refusal).
//
// defines: LogicalTensors, hugging_face_refusal, HfExport, export_hugging_face,
//          check_hugging_face_config, import_hugging_face
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include "model/config.h"
#include "checkpoint/safetensors.h"

namespace paralab {

// Every tensor of param_table(m) by its paralab name, at full shape, fp32 values.
using LogicalTensors = std::map<std::string, std::vector<float>>;

// Why Hugging Face cannot hold this model ("" when it can): one line naming the flag and the
// value, e.g. "--num-query-groups 2: GPT-2 has no grouped-query attention (gpt with 2 query
// groups for 4 heads)".
std::string hugging_face_refusal(const ModelConfig& m);

struct HfExport {
  std::vector<std::string> files;  // written, relative to the folder
  uint64_t payload_bytes = 0;      // tensor data, every shard
  std::string architecture;        // "GPT2LMHeadModel", ...
};
// Writes the export into `folder` (made if absent; each file atomically), tensors as dtype
// (F32, or BF16 rounded to nearest even); a new shard starts when the current one would
// pass max_shard_bytes of tensor data (Hugging Face's default 5 GB). Throws InputError
// (hugging_face_refusal) before writing anything when the model cannot be held.
HfExport export_hugging_face(const std::string& folder, const ModelConfig& m,
                             const LogicalTensors& tensors, SafeDType dtype = SafeDType::F32,
                             uint64_t max_shard_bytes = 5000000000ull);

// --load-hf: the folder's config.json must describe the model the flags built; otherwise
// InputError("FOLDER/config.json: <key> is <file value>, the flags give <value> (<flag>)").
void check_hugging_face_config(const std::string& folder, const ModelConfig& m);
// Reads every tensor back (model.safetensors, or the index and its shards) into paralab's
// names and layouts. Exactly the tensors model m needs, each at its shape: a missing,
// extra or misshapen tensor is InputError naming the file and the tensor.
LogicalTensors import_hugging_face(const std::string& folder, const ModelConfig& m);

}  // namespace paralab
