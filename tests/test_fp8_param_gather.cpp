// tests/test_fp8_param_gather.cpp: --fp8-param-gather's bytes (plan/fp8.h): the message of a
// ZeRO-3 slice, M_u = max_r (slice es - (es - 1) f_r), worked by hand, and the same count from
// parallel/data_parallel.h's run-by-run packing (fp8_gather_slice_bytes), which the trainer
// sends: two derivations of one number; the staging buffers; and the GEMMs on gathered codes
// (parallel/fp8_linear.h) equal to the GEMMs that cast W themselves, to the bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/float16.h"  // round_to
#include "kernels/ops.h"
#include "parallel/data_parallel.h"
#include "parallel/fp8_linear.h"
#include "plan/fp8.h"

namespace {

using paralab::Fp8GatherWeight;
using paralab::ParamSpec;

ParamSpec spec(const std::string& name, int64_t n) {
  ParamSpec p;
  p.name = name;
  p.shape = {n};
  return p;
}

// Unit 0: an embedding (no FP8 weight); unit 1: a layer of 10 elements, its qkv weight at
// elements [2, 8) of the unit.
const std::vector<ParamSpec> kTable = {spec("embedding.word", 7), spec("layers.0.norm1.weight", 2),
                                       spec("layers.0.attn.qkv.weight", 6),
                                       spec("layers.0.attn.qkv.bias", 2)};
const std::vector<int64_t> kUnits = {0, 7, 17};

TEST(Fp8ParamGather, MessageIsTheLargestSliceWithItsWeightsAtOneByte) {
  // dp 2, bf16: slices [0, 5) and [5, 10) hold 3 weight elements each: 5 x 2 - 3 = 7 bytes
  EXPECT_EQ(paralab::fp8_gather_messages(kTable, kUnits, 2, 2), (std::vector<int64_t>{0, 7}));
  // dp 3 (slice 4, padded to 12): f = 2, 4, 0 -> 6, 4, 8: the third rank's slice, all bf16
  EXPECT_EQ(paralab::fp8_gather_messages(kTable, kUnits, 3, 2), (std::vector<int64_t>{0, 8}));
  // fp32, dp 2: 5 x 4 - 3 x 3 = 11
  EXPECT_EQ(paralab::fp8_gather_messages(kTable, kUnits, 2, 4), (std::vector<int64_t>{0, 11}));
  // one rank: the whole unit, 10 x 2 - 6 = 14
  EXPECT_EQ(paralab::fp8_gather_messages(kTable, kUnits, 1, 2), (std::vector<int64_t>{0, 14}));
}

TEST(Fp8ParamGather, PlanEqualsTheTrainersPacking) {
  // a layer of 4 weights among other tensors, every dp up to 8, both storage types
  const std::vector<ParamSpec> table = {
      spec("layers.3.norm1.weight", 5),   spec("layers.3.attn.qkv.weight", 37),
      spec("layers.3.attn.proj.weight", 19), spec("layers.3.norm2.weight", 5),
      spec("layers.3.mlp.fc1.weight", 41),  spec("layers.3.mlp.fc2.weight", 23),
      spec("layers.3.mlp.fc2.bias", 3)};
  const std::vector<Fp8GatherWeight> weights = {{5, 37, 0}, {42, 19, 1}, {66, 41, 2},
                                                {107, 23, 3}};
  const int64_t n = 133;
  for (int es : {2, 4})
    for (int dp = 1; dp <= 8; ++dp) {
      const int64_t slice = (n + dp - 1) / dp;
      int64_t packed = 0;
      for (int r = 0; r < dp; ++r)
        packed = std::max(packed,
                          paralab::fp8_gather_slice_bytes(weights, r * slice, (r + 1) * slice, es));
      EXPECT_EQ(paralab::fp8_gather_messages(table, {0, n}, dp, es)[0], packed)
          << "dp " << dp << " es " << es;
      // about half (bf16) or a quarter (fp32) of the storage type's dp x slice x es
      EXPECT_LT(dp * packed, dp * slice * es);
    }
}

TEST(Fp8ParamGather, StagingBuffers) {
  // the largest message sent, dp of them received (dp > 1): comm_buffers
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({0, 7, 5}, 2), 7 + 2 * 7);
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({0, 14}, 1), 14);
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({}, 4), 0);
  // the scales, factors and amaxes: category fp8_state
  EXPECT_EQ(paralab::fp8_gather_state_bytes({0, 7, 5}), 4 * 12 * 3);
  EXPECT_EQ(paralab::fp8_gather_state_bytes({}), 0);
}

// fprop and dgrad of one linear (N tokens, in -> out) with W cast by the GEMMs and with W's codes
// cast as a ZeRO-3 slice (the whole weight here; the slices' casts are elementwise at one
// scale) and read as gathered: the same outputs to the bit, at every magnitude of W (the
// dgrad's decode and re-cast round back to the gathered codes: parallel/fp8_linear.h).
template <typename T>
void expect_gathered_equal(paralab::Fp8Recipe recipe, float magnitude) {
  using kernels::Device;
  paralab::Fp8Config c;
  c.enabled = true;
  c.recipe = recipe;
  c.param_gather = true;
  const int N = 8, in = 48, out = 40;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, magnitude);
  std::vector<T> x(N * in), dy(N * out), W(out * in);
  for (T& v : x) v = kernels::round_to<T>(normal(rng) / magnitude);
  for (T& v : dy) v = kernels::round_to<T>(normal(rng) / magnitude);
  for (T& v : W) v = kernels::round_to<T>(normal(rng));
  paralab::Fp8Scaling s(c, Device::CPU, 1, paralab::Category::WORKSPACE);
  if (recipe == paralab::Fp8Recipe::Delayed)  // a scale that is not a power of 2
    s.set_linears_state(0, 1, {0, 0, 1.0f, 0.37f / magnitude, 0, 1.0f});
  paralab::Fp8Scratch scratch;
  scratch.allocate(Device::CPU, c, N, {{in, out}}, (int)sizeof(T),
                   paralab::Category::FP8_OPERANDS);
  // W's codes as the gather makes them, the scale and factor beside them
  std::vector<float> state(12, 0.0f);
  std::vector<uint8_t> codes(out * in);
  if (recipe == paralab::Fp8Recipe::Tensorwise)
    kernels::fp8_amax(Device::CPU, &state[8], W.data(), W.size());
  s.gather_scales({0}, &state[8], &state[0], &state[4]);
  s.quantize_shard(0, W.data(), (int64_t)W.size(), &state[0], codes.data(), &state[4]);
  std::vector<T> gathered(W.size());  // the gathered unit's place of W: the codes first
  std::memcpy(gathered.data(), codes.data(), codes.size());
  const paralab::Fp8Linear own{&s, 0, &scratch};
  const paralab::Fp8Linear from_codes{&s, 0, &scratch, &state[0], &state[4]};
  std::vector<T> y1(N * out), y2(N * out), dx1(N * in), dx2(N * in);
  paralab::linear_fprop(Device::CPU, own, y1.data(), x.data(), W.data(), N, in, out);
  paralab::linear_fprop(Device::CPU, from_codes, y2.data(), x.data(), gathered.data(), N, in, out);
  paralab::linear_dgrad(Device::CPU, own, dx1.data(), dy.data(), W.data(), N, in, out);
  paralab::linear_dgrad(Device::CPU, from_codes, dx2.data(), dy.data(), gathered.data(), N, in,
                        out);
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(T)), 0) << magnitude;
  EXPECT_EQ(std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(T)), 0) << magnitude;
}

TEST(Fp8ParamGather, GemmsOnGatheredCodesEqualTheOwnCast) {
  for (float magnitude : {1e-6f, 3e-2f, 1.0f, 300.0f}) {
    expect_gathered_equal<float>(paralab::Fp8Recipe::Tensorwise, magnitude);
    expect_gathered_equal<kernels::bf16>(paralab::Fp8Recipe::Tensorwise, magnitude);
    expect_gathered_equal<float>(paralab::Fp8Recipe::Delayed, magnitude);
    expect_gathered_equal<kernels::bf16>(paralab::Fp8Recipe::Delayed, magnitude);
  }
}

}  // namespace
