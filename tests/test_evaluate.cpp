// tests/test_evaluate.cpp: the model's forward-only pass (Transformer::Microbatch::
// forward_only, model/evaluate.h) is eval mode: no dropout (its loss is the loss of the
// same weights with dropout off, whatever the masks' seed), the training forward's loss
// otherwise; no gradient is written (the fused head's weight gradient stays zero); and
// discard leaves the ledger as it found it.
#include <gtest/gtest.h>
#include <vector>
#include "kernels/math.h"
#include "measure/ledger.h"
#include "model/transformer.h"
#include "parallel/data_parallel.h"
#include "model/param_table.h"

namespace paralab {
namespace {

ModelConfig small(float dropout) {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.seq_length = 16;
  m.vocab_size = 64;
  m.ffn_hidden_size = 128;
  m.num_query_groups = 4;
  m.hidden_dropout = m.attention_dropout = dropout;
  return m;
}

struct Pass {
  float loss;
  std::vector<float> grads;
  int64_t leftover;  // ledger bytes after discard minus before the forward
};

Pass forward(float dropout, bool forward_only, uint64_t seed) {
  const ModelConfig m = small(dropout);
  const int B = 2, N = B * m.seq_length;
  std::vector<int> tokens(N), targets(N);
  for (int n = 0; n < N; ++n) {
    tokens[n] = (int)(kernels::mix64(n) % m.vocab_size);
    targets[n] = (int)(kernels::mix64(n + 1000) % m.vocab_size);
  }
  DataParallel dp(param_units(m), nullptr, DataParallelOptions(), kernels::Device::CPU);
  Transformer model(m, kernels::Device::CPU, &dp);
  model.init_parameters(1234);
  model.zero_grads();
  dp.begin_microbatch(true);
  // the workspace is the model's from its first forward on: warm it up first
  model.forward(0, 0, Transformer::Microbatch{tokens.data(), targets.data(), B, 1.0f, seed, true});
  model.discard(0, 0);
  const int64_t before = (int64_t)Ledger::instance().current_total();
  Pass r;
  r.loss = model.forward(
      0, 0, Transformer::Microbatch{tokens.data(), targets.data(), B, 1.0f, seed, forward_only});
  model.discard(0, 0);
  r.leftover = (int64_t)Ledger::instance().current_total() - before;
  r.grads = dp.gather_grads();
  return r;
}

TEST(Evaluate, ForwardOnlyIsEvalMode) {
  const Pass plain = forward(0.0f, false, 7);
  const Pass eval = forward(0.0f, true, 7);
  EXPECT_EQ(eval.loss, plain.loss);  // the same forward, bit for bit
  EXPECT_EQ(eval.leftover, 0);
  for (float g : eval.grads) ASSERT_EQ(g, 0.0f);  // the loss only: no gradient written
  bool head_grad = false;                          // (the training forward writes the head's)
  for (float g : plain.grads) head_grad = head_grad || g != 0.0f;
  EXPECT_TRUE(head_grad);
  // with dropout on, the forward-only loss is the dropout-free one, for any masks' seed
  EXPECT_EQ(forward(0.3f, true, 7).loss, plain.loss);
  EXPECT_EQ(forward(0.3f, true, 99).loss, plain.loss);
  EXPECT_NE(forward(0.3f, false, 7).loss, plain.loss);  // training applies it
}

}  // namespace
}  // namespace paralab
