// tests/test_hugging_face_helpers.h: the Hugging Face tests' fixtures (test_hugging_face.cpp,
// test_hugging_face_config.cpp): the five families' tiny models, a model's
// tensors with every element a different full-mantissa float, and readers; TempFolder
// (tests/test_temp_folder.h).
#pragma once
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include "checkpoint/hugging_face.h"
#include "kernels/math.h"  // mix64
#include "model/param_table.h"
#include "tests/test_temp_folder.h"  // TempFolder

namespace paralab {
namespace hf_test {

inline ModelConfig gpt() {
  ModelConfig m;
  m.arch = Arch::GPT;
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.seq_length = 8;
  m.vocab_size = 32;
  return m;
}
inline ModelConfig llama() {  // grouped-query attention: 2 groups of 2 heads
  ModelConfig m = gpt();
  m.arch = Arch::LLAMA;
  m.num_query_groups = 2;
  m.ffn_hidden_size = 24;
  return m;
}
inline ModelConfig qwen3() {
  ModelConfig m = llama();
  m.qk_layernorm = true;
  return m;
}
inline ModelConfig qwen3_moe() {  // layer 0 MoE, layer 1 dense
  ModelConfig m = qwen3();
  m.moe.num_experts = 4;
  m.moe.ffn_hidden_size = 8;
  m.moe.layer_pattern = {1, 0};
  return m;
}
inline ModelConfig mixtral() {  // llama MoE without --qk-layernorm, every layer MoE
  ModelConfig m = llama();
  m.moe.num_experts = 4;
  m.moe.ffn_hidden_size = 8;
  return m;
}

// Every tensor of the model, each element a different full-mantissa float.
inline LogicalTensors random_tensors(const ModelConfig& m) {
  LogicalTensors t;
  uint64_t key = 0;
  for (const ParamSpec& p : param_table(m)) {
    std::vector<float>& v = t[p.name];
    ++key;
    for (int64_t i = 0; i < p.numel(); ++i)
      v.push_back((float)(kernels::mix64(key * 1000003 + i) >> 40) / (1 << 23) - 1.0f);
  }
  return t;
}

inline bool bitwise_equal(const LogicalTensors& a, const LogicalTensors& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, v] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != v.size() ||
        std::memcmp(v.data(), it->second.data(), v.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

inline std::vector<float> read_tensor(const std::string& file, const std::string& name,
                               std::vector<int64_t>* shape = nullptr) {
  SafetensorsReader r(file);
  const SafeTensor* t = r.header().find(name);
  if (!t) throw std::runtime_error(file + ": no " + name);
  if (shape) *shape = t->shape;
  return r.read_floats(*t);
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The message of the InputError f throws ("" when it throws none).
inline std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace hf_test
}  // namespace paralab
