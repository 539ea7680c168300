// tests/test_plan_helpers.h: the configurations the plan tests build (test_plan*.cpp): a GPT
// or Llama of given sizes, a tiny MoE, a world of n data-parallel ranks at a ZeRO stage, a batch, and
// the lookup of one predicted (group, operation) row.
//
// defines: plan_test::gpt, plan_test::llama, plan_test::tiny_moe, plan_test::qwen3_30b_a3b,
//          plan_test::world,
//          plan_test::batch, plan_test::find_comm
#pragma once
#include <vector>
#include "plan/plan.h"  // defines: Plan, CommPlanEntry
#include "model/config.h"     // defines: ModelConfig, ParallelConfig, TrainConfig

namespace paralab {
namespace plan_test {

inline ModelConfig gpt(int L, int h, int a, int s, int V) {
  ModelConfig m;
  m.arch = Arch::GPT;
  m.num_layers = L;
  m.hidden_size = h;
  m.num_attention_heads = a;
  m.seq_length = s;
  m.vocab_size = V;
  // The hand counts of these tests take the vocabulary as it is (padded to a multiple of tp
  // only); --make-vocab-size-divisible-by's default 128 has tests of its own
  // (test_plan_parallel.cpp VocabPadding*).
  m.vocab_divisible_by = 1;
  return m;
}

inline ModelConfig llama(int L, int h, int a, int g, int f, int s, int V) {
  ModelConfig m = gpt(L, h, a, s, V);
  m.arch = Arch::LLAMA;
  m.num_query_groups = g;
  m.ffn_hidden_size = f;
  return m;
}

// A 2-layer llama, h 8, 2 heads of d 4 (no GQA), f 12, s 4, V 16; layer 0 dense, layer 1 MoE:
// E 4 experts of width 6 (SwiGLU fc1 2 x 6), top-2.
inline ModelConfig tiny_moe() {
  ModelConfig m = llama(2, 8, 2, 2, 12, 4, 16);
  m.moe.num_experts = 4;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 6;
  m.moe.layer_pattern = {0, 1};
  return m;
}

// Qwen3-30B-A3B (configs/models/qwen3-30b-a3b.toml): 48 MoE layers, h 2048, 32 heads of 128
// in 4 groups, q/k norms, 128 experts of width 768, top-8, grouped GEMM, V 151936, s 4096.
inline ModelConfig qwen3_30b_a3b() {
  ModelConfig m = llama(48, 2048, 32, 4, 6144, 4096, 151936);
  m.kv_channels = 128;
  m.qk_layernorm = true;
  m.moe.num_experts = 128;
  m.moe.topk = 8;
  m.moe.ffn_hidden_size = 768;
  m.moe.grouped_gemm = true;
  return m;
}

inline ParallelConfig world(int n, int zero) {
  ParallelConfig p;
  p.world_size = n;
  p.zero_stage = zero;
  return p;
}

inline TrainConfig batch(int micro, int global, bool bf16 = false) {
  TrainConfig t;
  t.micro_batch_size = micro;
  t.global_batch_size = global;
  t.bf16 = bf16;
  return t;
}

// The predicted row of (group, operation) in a list of comm entries, nullptr if none.
inline const CommPlanEntry* find_comm(const std::vector<CommPlanEntry>& comm, CommGroup g,
                                      CommOp op) {
  for (const CommPlanEntry& e : comm)
    if (e.group == g && e.op == op) return &e;
  return nullptr;
}
inline const CommPlanEntry* find_comm(const Plan& p, CommGroup g, CommOp op) {
  return find_comm(p.comm, g, op);
}

}  // namespace plan_test
}  // namespace paralab
