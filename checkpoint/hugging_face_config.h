// checkpoint/hugging_face_config.h: config.json of a Hugging Face export and which transformers
// class holds which paralab model (checkpoint/hugging_face_config.cpp); checkpoint/hugging_face.cpp
// writes it beside the tensors, check_hugging_face_config (checkpoint/hugging_face.h) reads it.
//
// defines: hf_model_type, hf_architecture, hf_config_json
#pragma once
#include <string>
#include "model/config.h"
#include "checkpoint/safetensors.h"

namespace paralab {

// "gpt2", "llama", "qwen3", "qwen3_moe" or "mixtral".
const char* hf_model_type(const ModelConfig& m);
// The class transformers builds: "GPT2LMHeadModel", "LlamaForCausalLM", ...
const char* hf_architecture(const ModelConfig& m);
// The whole file, floats as their float's shortest decimal (see the .cpp).
std::string hf_config_json(const ModelConfig& m, SafeDType dtype);

}  // namespace paralab
