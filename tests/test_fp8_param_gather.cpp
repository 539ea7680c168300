// tests/test_fp8_param_gather.cpp: --fp8-param-gather's bytes (plan/fp8.h): the message of a
// bucket's slices (ZeRO-3: a unit's; ZeRO-1/2: a bucket of units), M_j = max_r (slice es -
// (es - 1) f_r), worked by hand, and the same count from parallel/data_parallel.h's run-by-run
// packing (fp8_gather_slice_bytes), which the trainer sends: two derivations of one number; the
// staging buffers; and the GEMMs on gathered weights (parallel/fp8_linear.h: ZeRO-3's codes,
// ZeRO-1/2's decoded W) equal to the GEMMs that cast W themselves, to the bit.
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

// The messages of kTable's buckets at ZeRO-3 (a bucket per unit) over dp ranks, es bytes.
std::vector<int64_t> zero3_messages(int dp, int es) {
  return paralab::fp8_gather_messages(kTable, paralab::make_bucket_layout(kUnits, 0, dp, true),
                                      es);
}

TEST(Fp8ParamGather, MessageIsTheLargestSliceWithItsWeightsAtOneByte) {
  // buckets in reduction order: the layer's unit, then the embedding's
  // dp 2, bf16: slices [0, 5) and [5, 10) hold 3 weight elements each: 5 x 2 - 3 = 7 bytes
  EXPECT_EQ(zero3_messages(2, 2), (std::vector<int64_t>{7, 0}));
  // dp 3 (slice 4, padded to 12): f = 2, 4, 0 -> 6, 4, 8: the third rank's slice, all bf16
  EXPECT_EQ(zero3_messages(3, 2), (std::vector<int64_t>{8, 0}));
  // fp32, dp 2: 5 x 4 - 3 x 3 = 11
  EXPECT_EQ(zero3_messages(2, 4), (std::vector<int64_t>{11, 0}));
  // one rank: the whole unit, 10 x 2 - 6 = 14
  EXPECT_EQ(zero3_messages(1, 2), (std::vector<int64_t>{14, 0}));
  // ZeRO-1/2, both units in one bucket of 17 elements, dp 2 (slice 9): slice 0 [0, 9) holds
  // none of the weight [9, 15) (18 bytes), slice 1 [9, 18) all of it (18 - 6 = 12): 18
  EXPECT_EQ(paralab::fp8_gather_messages(kTable, paralab::make_bucket_layout(kUnits, 0, 2, false),
                                         2),
            (std::vector<int64_t>{18}));
  // dp 3 (slice 6): [0, 6) none, [6, 12) 3, [12, 18) 3: 12, 9, 9
  EXPECT_EQ(paralab::fp8_gather_messages(kTable, paralab::make_bucket_layout(kUnits, 0, 3, false),
                                         2),
            (std::vector<int64_t>{12}));
  EXPECT_EQ(paralab::fp8_gathered_weights(kTable),
            (std::vector<paralab::Fp8GatheredWeight>{{9, 15, false, 6}}));
}

// An MoE layer's unit with its experts in it (ep 1): qkv and proj, then each of the 2 local
// experts' fc1 and fc2 its own FP8 weight; the router stays in the storage type.
TEST(Fp8ParamGather, ExpertsAreOneWeightEach) {
  ParamSpec fc1 = spec("layers.0.mlp.experts.fc1.weight", 0), fc2 = fc1;
  fc1.shape = {2, 3, 4};  // (E_l, out, in): 12 elements per expert
  fc2.name = "layers.0.mlp.experts.fc2.weight";
  fc2.shape = {2, 4, 1};  // 4 per expert
  fc1.expert = fc2.expert = true;
  const std::vector<ParamSpec> table = {spec("layers.0.norm1.weight", 2),
                                        spec("layers.0.attn.qkv.weight", 6),
                                        spec("layers.0.attn.proj.weight", 3),
                                        spec("layers.0.mlp.router.weight", 5), fc1, fc2};
  using W = paralab::Fp8GatheredWeight;
  EXPECT_EQ(paralab::fp8_gathered_weights(table),
            (std::vector<W>{{2, 8, false, 6}, {8, 11, false, 3}, {16, 28, true, 4},
                            {28, 40, true, 4}, {40, 44, true, 1}, {44, 48, true, 1}}));
  // ZeRO-1 over dp 2, one unit: 6 FP8 weights, 12 bytes of state each; the step's one gather
  // reduces 6 amaxes over the ZeRO group, and qkv's and proj's again over tp and cp
  paralab::ModelConfig m;
  m.fp8.enabled = m.fp8.param_gather = true;
  m.fp8.recipe = paralab::Fp8Recipe::Tensorwise;
  paralab::DataParallelPlan d;
  d.layout = paralab::make_bucket_layout({0, 48}, 0, 2, false);
  paralab::plan_fp8_param_gather(d, m, table, {0, 48}, 1, 2);
  EXPECT_EQ(d.fp8_state_bytes, 6 * 12);
  EXPECT_EQ(std::vector<int64_t>({d.fp8_gathers, d.fp8_amax_bytes, d.fp8_piece_calls,
                                  d.fp8_piece_bytes}),
            std::vector<int64_t>({1, 6 * 4, 1, 2 * 4}));
  // slice 0 [0, 24): the norm's 2 and the router's 5 at 2 bytes, qkv's 6, proj's 3 and the
  // first 8 of expert 0's fc1 at 1; slice 1 [24, 48): all FP8
  const int64_t slice0 = (2 + 5) * 2 + (6 + 3 + 8), slice1 = 24;
  EXPECT_EQ(d.fp8_message, std::vector<int64_t>({std::max(slice0, slice1)}));
  // without the flag, or at ZeRO 0: nothing
  m.fp8.param_gather = false;
  paralab::plan_fp8_param_gather(d, m, table, {0, 48}, 1, 2);
  EXPECT_TRUE(d.fp8_message.empty());
  EXPECT_EQ(d.fp8_state_bytes + d.fp8_gathers + d.fp8_amax_bytes, 0);
}

// Blockwise: a scale, factor and amax per 128 x 128 block of each weight, every block's amax in
// the ZeRO group's all-reduce and none over tp or cp (a block lies within a tp piece).
TEST(Fp8ParamGather, BlockwiseHasAScalePerBlock) {
  auto matrix = [](const std::string& name, int64_t rows, int64_t cols) {
    ParamSpec p = spec(name, 0);
    p.shape = {rows, cols};
    return p;
  };
  // qkv (384, 128): 3 blocks; proj (128, 128): 1; fc1 (300, 128): 3 (the last short); fc2
  // (128, 300): 3
  const std::vector<ParamSpec> table = {
      matrix("layers.0.attn.qkv.weight", 384, 128), matrix("layers.0.attn.proj.weight", 128, 128),
      matrix("layers.0.mlp.fc1.weight", 300, 128), matrix("layers.0.mlp.fc2.weight", 128, 300)};
  const int64_t n = 384 * 128 + 128 * 128 + 2 * 300 * 128;
  paralab::ModelConfig m;
  m.fp8.enabled = m.fp8.param_gather = true;
  m.fp8.recipe = paralab::Fp8Recipe::Blockwise;
  paralab::DataParallelPlan d;
  d.layout = paralab::make_bucket_layout({0, n}, 0, 4, false);
  paralab::plan_fp8_param_gather(d, m, table, {0, n}, 2, 2);
  EXPECT_EQ(d.fp8_state_bytes, 10 * 12);
  EXPECT_EQ(std::vector<int64_t>({d.fp8_gathers, d.fp8_amax_bytes, d.fp8_piece_calls,
                                  d.fp8_piece_bytes}),
            std::vector<int64_t>({1, 10 * 4, 0, 0}));
  std::vector<paralab::CommPlanEntry> comm;
  paralab::fp8_gather_comm(comm, m, d, paralab::CommGroup::DP, 4, 2);
  ASSERT_EQ(comm.size(), 1u);  // the ZeRO group's, nothing over tp
  EXPECT_EQ(comm[0].group, paralab::CommGroup::DP);
  // the messages do not depend on the recipe: every FP8 element at 1 byte
  EXPECT_EQ(d.fp8_message, paralab::fp8_gather_messages(table, d.layout, 2));
  m.fp8.recipe = paralab::Fp8Recipe::Tensorwise;
  paralab::plan_fp8_param_gather(d, m, table, {0, n}, 2, 2);
  EXPECT_EQ(d.fp8_state_bytes, 4 * 12);
}

TEST(Fp8ParamGather, PlanEqualsTheTrainersPacking) {
  // a layer of 4 weights among other tensors, every dp up to 8, both storage types
  const std::vector<ParamSpec> table = {
      spec("layers.3.norm1.weight", 5),   spec("layers.3.attn.qkv.weight", 37),
      spec("layers.3.attn.proj.weight", 19), spec("layers.3.norm2.weight", 5),
      spec("layers.3.mlp.fc1.weight", 41),  spec("layers.3.mlp.fc2.weight", 23),
      spec("layers.3.mlp.fc2.bias", 3)};
  const std::vector<Fp8GatherWeight> weights = {
      {5, 37, nullptr, 0, 37}, {42, 19, nullptr, 1, 19}, {66, 41, nullptr, 2, 41},
      {107, 23, nullptr, 3, 23}};
  const int64_t n = 133;
  for (int es : {2, 4})
    for (int dp = 1; dp <= 8; ++dp) {
      const int64_t slice = (n + dp - 1) / dp;
      int64_t packed = 0;
      for (int r = 0; r < dp; ++r)
        packed = std::max(packed,
                          paralab::fp8_gather_slice_bytes(weights, r * slice, (r + 1) * slice, es));
      EXPECT_EQ(paralab::fp8_gather_messages(
                    table, paralab::make_bucket_layout({0, n}, 0, dp, true), es)[0],
                packed)
          << "dp " << dp << " es " << es;
      // about half (bf16) or a quarter (fp32) of the storage type's dp x slice x es
      EXPECT_LT(dp * packed, dp * slice * es);
    }
}

TEST(Fp8ParamGather, StagingBuffers) {
  // a pair per gather in flight: the largest message sent, dp of them received (dp > 1)
  paralab::PlanOptions o;
  o.overlap_param_gather = false;
  o.zero3_prefetch_layers = 0;
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({0, 7, 5}, 2, 3, o), 7 + 2 * 7);
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({0, 14}, 1, 3, o), 14);
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({18}, 2, 1, o), 18 + 2 * 18);  // ZeRO-1/2: one bucket
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({}, 4, 1, o), 0);
  // ZeRO-3 with prefetch: the unit acquired and the window, at most one per FP8 unit
  o.zero3_prefetch_layers = 1;
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({0, 7, 5}, 2, 3, o), 2 * (7 + 2 * 7));
  o.zero3_prefetch_layers = 4;
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({0, 7, 5}, 2, 3, o), 2 * (7 + 2 * 7));
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({0, 7, 5}, 2, 1, o), 7 + 2 * 7);  // not at ZeRO-1
  // ZeRO-1/2 overlapped: two in flight; one where one bucket has FP8
  o.overlap_param_gather = true;
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({0, 7, 5}, 2, 2, o), 2 * (7 + 2 * 7));
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({0, 7, 5}, 1, 1, o), 2 * 7);
  EXPECT_EQ(paralab::fp8_gather_comm_buffers({0, 7, 0}, 2, 1, o), 7 + 2 * 7);
  EXPECT_EQ(paralab::fp8_staging_pairs(3, false, 2, 10), 3);
  EXPECT_EQ(paralab::fp8_staging_pairs(2, false, 2, 10), 1);
}

// fprop and dgrad of one linear (N tokens, in -> out) with W cast by the GEMMs and with W's codes
// cast in three ZeRO slices (cut mid-row and mid-block: their amaxes folded, each slice cast at
// the whole weight's scales) and read as gathered, ZeRO-3's codes and ZeRO-1/2's decoded W: the
// same outputs to the bit, at every magnitude of W (decode and re-cast round back to the
// gathered codes: parallel/fp8_linear.h), in every recipe (blockwise: W's 3 x 2 blocks of
// 128 x 128, the last ones short).
template <typename T>
void expect_gathered_equal(paralab::Fp8Recipe recipe, float magnitude) {
  using kernels::Device;
  paralab::Fp8Config c;
  c.enabled = true;
  c.recipe = recipe;
  c.param_gather = true;
  const int N = 8, in = 150, out = 260;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, magnitude);
  std::vector<T> x(N * in), dy(N * out), W(out * in);
  for (T& v : x) v = kernels::round_to<T>(normal(rng) / magnitude);
  for (T& v : dy) v = kernels::round_to<T>(normal(rng) / magnitude);
  for (T& v : W) v = kernels::round_to<T>(normal(rng));
  paralab::Fp8Scaling s(c, Device::CPU, 1);
  if (recipe == paralab::Fp8Recipe::Delayed)  // a scale that is not a power of 2
    s.set_linears_state(0, 1, {0, 0, 1.0f, 0.37f / magnitude, 0, 1.0f});
  paralab::Fp8Scratch scratch;
  scratch.allocate(Device::CPU, c, N, {{in, out}}, (int)sizeof(T),
                   paralab::Category::FP8_OPERANDS);
  // W's codes as the gather makes them, its scales, factors and amaxes beside them
  const kernels::Fp8Blocks blocks = s.blocks(paralab::Fp8Role::Weight);
  const int V = (int)kernels::fp8_scale_count(blocks, out, in);
  EXPECT_EQ(V, recipe == paralab::Fp8Recipe::Blockwise ? 6 : 1);
  std::vector<float> state(3 * V, 0.0f);
  float *scale = &state[0], *factor = &state[V], *amax = &state[2 * V];
  std::vector<uint8_t> codes(out * in);
  const int64_t cuts[4] = {0, 129 * in + 77, 200 * in + 3, (int64_t)W.size()};
  if (recipe != paralab::Fp8Recipe::Delayed)
    for (int r = 0; r < 3; ++r)
      kernels::fp8_shard_amax(Device::CPU, amax, W.data() + cuts[r], cuts[r], cuts[r + 1] - cuts[r],
                              in, blocks);
  s.gather_scales({0}, V, amax, scale, factor);
  for (int r = 0; r < 3; ++r)
    s.quantize_shard(0, W.data() + cuts[r], cuts[r], cuts[r + 1] - cuts[r], in, scale,
                     codes.data() + cuts[r]);
  std::vector<T> gathered(W.size());  // the gathered unit's place of W: the codes first
  std::memcpy(gathered.data(), codes.data(), codes.size());
  const paralab::Fp8Linear own{&s, 0, &scratch};
  const paralab::Fp8Linear from_codes{&s, 0, &scratch, scale, factor};
  std::vector<T> y1(N * out), y2(N * out), dx1(N * in), dx2(N * in);
  paralab::linear_fprop(Device::CPU, own, y1.data(), x.data(), W.data(), N, in, out);
  paralab::linear_fprop(Device::CPU, from_codes, y2.data(), x.data(), gathered.data(), N, in, out);
  paralab::linear_dgrad(Device::CPU, own, dx1.data(), dy.data(), W.data(), N, in, out);
  paralab::linear_dgrad(Device::CPU, from_codes, dx2.data(), dy.data(), gathered.data(), N, in,
                        out);
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(T)), 0) << magnitude;
  EXPECT_EQ(std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(T)), 0) << magnitude;
  // ZeRO-1/2: W as a receiver stores it, the other ranks' slices (here the first two) decoded
  // from their codes into T, its own slice exact, cast at the gathered scales
  std::vector<T> stored = W;
  const int64_t decoded = cuts[2];
  for (int r = 0; r < 2; ++r)
    kernels::fp8_shard_dequantize(Device::CPU, stored.data() + cuts[r],
                                  {codes.data() + cuts[r], factor, kernels::Fp8Format::E4M3,
                                   blocks},
                                  cuts[r], cuts[r + 1] - cuts[r], in);
  const paralab::Fp8Linear from_stored{&s, 0, &scratch, scale, factor, true};
  std::vector<T> y3(N * out), dx3(N * in);
  paralab::linear_fprop(Device::CPU, from_stored, y3.data(), x.data(), stored.data(), N, in, out);
  paralab::linear_dgrad(Device::CPU, from_stored, dx3.data(), dy.data(), stored.data(), N, in,
                        out);
  EXPECT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(T)), 0) << magnitude;
  EXPECT_EQ(std::memcmp(dx1.data(), dx3.data(), dx1.size() * sizeof(T)), 0) << magnitude;
  if (magnitude >= 3e-2f) {  // the decoded values differ from W's (the test is not vacuous)
    EXPECT_NE(std::memcmp(stored.data(), W.data(), decoded * sizeof(T)), 0) << magnitude;
  }
}

TEST(Fp8ParamGather, GemmsOnGatheredWeightsEqualTheOwnCast) {
  for (float magnitude : {1e-6f, 3e-2f, 1.0f, 300.0f}) {
    expect_gathered_equal<float>(paralab::Fp8Recipe::Tensorwise, magnitude);
    expect_gathered_equal<kernels::bf16>(paralab::Fp8Recipe::Tensorwise, magnitude);
    expect_gathered_equal<float>(paralab::Fp8Recipe::Delayed, magnitude);
    expect_gathered_equal<kernels::bf16>(paralab::Fp8Recipe::Delayed, magnitude);
    expect_gathered_equal<float>(paralab::Fp8Recipe::Blockwise, magnitude);
    expect_gathered_equal<kernels::bf16>(paralab::Fp8Recipe::Blockwise, magnitude);
  }
}

}  // namespace
