// tests/test_plan_helpers.h: the configurations the plan tests build (test_plan*.cpp): a GPT
// or Llama of given sizes, a world of n data-parallel ranks at a ZeRO stage, a batch, and
// the lookup of one predicted (group, operation) row.
//
// defines: plan_test::gpt, plan_test::llama, plan_test::world, plan_test::batch,
//          plan_test::find_comm
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
  return m;
}

inline ModelConfig llama(int L, int h, int a, int g, int f, int s, int V) {
  ModelConfig m = gpt(L, h, a, s, V);
  m.arch = Arch::LLAMA;
  m.num_query_groups = g;
  m.ffn_hidden_size = f;
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
