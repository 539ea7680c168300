// tests/test_optimizer.cpp: a skipped step (model/optimizer.h AdamW::step) updates nothing.
// A step whose gradient norm is NaN (one gradient element made NaN after backward), or whose
// caller says the loss was not finite, leaves every parameter bit-identical and the Adam
// step count where it was; the next finite step updates as usual. fp32 and bf16 (the master
// weights too: the next step's parameters equal those of a run that never saw the NaN).
#include <gtest/gtest.h>
#include <cmath>
#include <limits>
#include <vector>
#include "kernels/math.h"  // to_bf16
#include "kernels/ops.h"
#include "model/optimizer.h"
#include "model/param_table.h"
#include "model/transformer.h"
#include "parallel/data_parallel.h"

namespace {
using kernels::Device;

struct Training {
  paralab::ModelConfig m;
  paralab::TrainConfig t;
  paralab::DataParallelOptions options;
  paralab::DataParallel dp;
  paralab::Transformer model;
  paralab::AdamW opt;
  explicit Training(bool bf16)
      : m(config()), options(dp_options(bf16)), dp(paralab::param_units(m), nullptr, options,
                                                  Device::CPU),
        model(m, Device::CPU, &dp), opt((model.init_parameters(7), model), t) {}
  static paralab::ModelConfig config() {
    paralab::ModelConfig c;
    c.num_layers = 2;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.seq_length = 16;
    c.vocab_size = 64;
    return c;
  }
  static paralab::DataParallelOptions dp_options(bool bf16) {
    paralab::DataParallelOptions o;
    o.storage = (bf16) ? paralab::DType::BF16 : paralab::DType::F32;
    return o;
  }
  // forward and backward of one batch, then the optimizer at lr 1e-2; poison: a NaN in the
  // first gradient element first
  float step(int seed, bool poison, bool skip) {
    const int B = 2, N = B * m.seq_length;
    std::vector<int> tokens(N), targets(N);
    for (int i = 0; i < N; ++i) {
      tokens[i] = (int)(kernels::mix64(seed * 1000 + i) % m.vocab_size);
      targets[i] = (tokens[i] * 5 + 3) % m.vocab_size;
    }
    model.zero_grads();
    dp.begin_microbatch(true);
    model.forward(tokens.data(), targets.data(), B, 1.0f, 0);
    model.backward();
    if (poison) {
      const paralab::OwnedSegment& seg = dp.owned_segments().at(0);
      if (options.storage == paralab::DType::BF16)
        *static_cast<kernels::bf16*>(const_cast<void*>(seg.grad)) =
            kernels::to_bf16(std::numeric_limits<float>::quiet_NaN());
      else
        *static_cast<float*>(const_cast<void*>(seg.grad)) =
            std::numeric_limits<float>::quiet_NaN();
    }
    return opt.step(1e-2f, skip);
  }
};

TEST(AdamW, ASkippedStepUpdatesNothing) {
  for (bool bf16 : {false, true}) {
    Training run(bf16), clean(bf16);
    EXPECT_FALSE(std::isfinite(run.step(1, /*poison=*/true, false))) << bf16;
    EXPECT_TRUE(run.opt.skipped());
    EXPECT_EQ(run.opt.steps_taken(), 0);
    EXPECT_EQ(run.dp.gather_params(), clean.dp.gather_params()) << bf16;
    EXPECT_TRUE(std::isfinite(run.step(2, false, /*skip=*/true)));  // the loss was not finite
    EXPECT_TRUE(run.opt.skipped());
    EXPECT_EQ(run.opt.steps_taken(), 0);
    EXPECT_EQ(run.dp.gather_params(), clean.dp.gather_params()) << bf16;
    // the next finite step is the first update, as if the NaN had never happened
    const std::vector<float> before = run.dp.gather_params();
    EXPECT_EQ(run.step(3, false, false), clean.step(3, false, false));
    EXPECT_FALSE(run.opt.skipped());
    EXPECT_EQ(run.opt.steps_taken(), 1);
    EXPECT_NE(run.dp.gather_params(), before);
    EXPECT_EQ(run.dp.gather_params(), clean.dp.gather_params()) << bf16;
  }
}

}  // namespace
