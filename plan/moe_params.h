// plan/moe_params.h: parameter counts of a (mixture-of-experts) model, total and ACTIVE,
// counted from model/param_table.h's table by tensor name (no hand formula that could drift
// from the model), and the FLOPs-per-token conventions that are built on them.
//
// Active parameters: what one token computes with. Every tensor counts whole except a MoE
// layer's routed experts, of which a token uses k of E: active experts = k x one expert
// (the (E, ...) tensors' numel / E x k, exact). The router, the shared expert and its gate
// count whole (every token uses them), as do attention, the norms, the embedding and the
// output layer. This is Megatron's convention (theoretical_memory_usage.py,
// num_active_parameters: embeddings included, router and shared expert included) and
// torchtitan's (get_moe_model_nparams_and_flops: nparams_sparse_active = router + shared +
// experts k / E). Two figures each:
//   with embeddings     total / active: every tensor of the table (gpt's tied head once)
//   non-embedding       minus embedding.word and embedding.position (the lookups) AND the
//                       output layer output.weight: the "non-embedding" of Kaplan et al.
//   torchtitan's        minus the lookups only: its name filter ("embedding" in the name)
//                       keeps the output layer among the dense parameters it multiplies by 6
//
// FLOPs per token of one training step (forward + backward), three conventions:
//   paralab     plan/flops.h's model FLOPs per step / tokens per step (matmul by matmul,
//               --attention-flops convention)
//   torchtitan  6 x (active - lookups) + 12 L a d s (get_moe_model_nparams_and_flops with
//               head_dims = 2 d, as its Qwen3 passes; full S x S attention, no causal halving;
//               norms and the router are inside the 6N term)
//   Megatron    num_floating_point_operations (megatron/training/training.py), per token:
//               6 [h (q + 2 g d) + q h] per layer              qkv and proj, q = a d
//             + 6 h f c per dense layer, 6 h (k f_e + f_s) c per MoE layer (c = 3 SwiGLU, 2
//               GeLU; routed experts with k, no router, no shared-expert gate, no biases)
//             + 6 h Vp                                         logits (padded vocabulary)
//             + 6 L q s                                        causal: Q K^T and P V at half
//
// defines: LayerParamCounts, ParamCounts, param_counts, FlopsConventions, flops_conventions
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "model/config.h"

namespace paralab {

struct Plan;  // plan/plan.h

// One layer's parameters by part (elements), from the table's names:
//   attention  attn.qkv.*, attn.proj.*  (weights and gpt's biases)
//   norms      norm1.*, norm2.*, attn.q_norm.*, attn.k_norm.*
//   mlp        a dense layer's mlp.fc1.*, mlp.fc2.*
//   router     mlp.router.weight (E, h)
//   experts    mlp.experts.* (all E); expert = experts / E (one expert's fc1 + fc2)
//   shared     mlp.shared.fc1/fc2 (+ shared_gate: mlp.shared.gate.weight (1, h))
struct LayerParamCounts {
  int layer = -1;
  bool moe = false;
  int64_t attention = 0, norms = 0, mlp = 0, router = 0, experts = 0, expert = 0;
  int64_t shared_expert = 0, shared_gate = 0;
  int64_t total() const;
  int64_t active(int topk) const;  // experts replaced by topk x expert
};

struct ParamCounts {
  int num_experts = 0, topk = 0;      // E, k (0, 0: dense)
  std::vector<LayerParamCounts> layers;  // per layer, in order
  int dense_layers = 0, moe_layers = 0;
  int64_t lookups = 0;      // embedding.word (+ gpt's embedding.position)
  int64_t output = 0;       // output.weight (0: tied to embedding.word)
  int64_t final_norm = 0;
  int64_t total = 0;        // every tensor: = parameter_count(m)
  int64_t active = 0;       // per token, embeddings and output layer included
  int64_t total_non_embedding() const { return total - lookups - output; }
  int64_t active_non_embedding() const { return active - lookups - output; }
  int64_t active_torchtitan() const { return active - lookups; }  // its "non-embedding"
  // The first dense and the first MoE layer (nullptr if none): the breakdown's two rows.
  const LayerParamCounts* first(bool moe) const;
};

ParamCounts param_counts(const ModelConfig& m);

// Training FLOPs per token (forward + backward), the conventions above.
struct FlopsConventions {
  double paralab = 0;     // plan.flops.model_per_step / plan.tokens_per_step
  double torchtitan = 0;
  double megatron = 0;
  // The same split: the token-linear part (6 x params-like) and the attention core.
  double torchtitan_attention = 0, megatron_attention = 0;
  std::string paralab_note;  // the plan's attention convention
};
FlopsConventions flops_conventions(const Plan& plan);

}  // namespace paralab
