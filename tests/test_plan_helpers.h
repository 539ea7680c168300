// tests/test_plan_helpers.h: the configurations the plan tests build (test_plan.cpp,
// test_plan_zero.cpp, test_plan_report.cpp): a GPT of given sizes, a world of n data-parallel
// ranks at a ZeRO stage, a batch.
//
// defines: plan_test::gpt, plan_test::world, plan_test::batch
#pragma once
#include "model/config.h"  // defines: ModelConfig, ParallelConfig, TrainConfig

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

}  // namespace plan_test
}  // namespace paralab
