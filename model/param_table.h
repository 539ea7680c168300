// model/param_table.h: the table of every parameter tensor (name, shape, weight decay).
//
// One source: the model carves its parameter and gradient buffers from this table in
// order, instrument/plan counts parameters from it, and the golden files and checkpoints
// name tensors by it. Pure arithmetic on ModelConfig: no kernels, no allocation.
//
// Names and shapes (h hidden, f ffn, V vocab, s seq, a heads, g groups, d = h/a):
//   embedding.word            (V, h)
//   embedding.position        (s, h)                 gpt only (learned positions)
//   layers.{i}.norm1.weight   (h)        .bias (h)   bias: gpt only (LayerNorm)
//   layers.{i}.attn.qkv.weight ((a+2g)d, h)  .bias ((a+2g)d)  gpt only
//        rows grouped per query group: [a/g query heads | key head | value head] x g
//   layers.{i}.attn.proj.weight (h, a d)   .bias (h)  gpt only
//   layers.{i}.norm2.weight   (h)        .bias (h)   gpt only
//   layers.{i}.mlp.fc1.weight (f, h) gpt | (2f, h) llama, rows [gate | up]   .bias (f) gpt
//   layers.{i}.mlp.fc2.weight (h, f)     .bias (h)   gpt only
//   final_norm.weight (h)  .bias (h) gpt only
//   output.weight  (V, h)                            llama only (gpt ties embedding.word)
// Weight decay applies to the 2-D weights only (not to biases, norms), as in Megatron.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "model/config.h"

namespace paralab {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool weight_decay = false;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

std::vector<ParamSpec> param_table(const ModelConfig& m);
// Sum of numel over the table: the parameter count Psi.
int64_t parameter_count(const ModelConfig& m);
// Where each unit starts in the flat vector (size L+3, last = Psi): unit 0 the embedding,
// unit l+1 layer l, unit L+1 the head (final norm, output weight); parallel/buckets.h.
std::vector<int64_t> param_units(const ModelConfig& m);

}  // namespace paralab
