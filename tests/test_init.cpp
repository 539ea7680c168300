// tests/test_init.cpp: the parameters' initialisation (kernels/ops/init.h) drawn where they
// live: a rectangle's elements map to the full tensor's as model/param_table.h's ShardBlock
// says, and drawing a rank's blocks gives exactly its slice of the full tensor drawn whole
// (the single-rank values), for every split, experts and the vocabulary's padding included.
#include <gtest/gtest.h>
#include <cmath>
#include <vector>
#include "kernels/ops.h"
#include "model/param_table.h"

namespace {

using kernels::Device;
using paralab::ParamSpec;
using paralab::ShardBlock;
using paralab::TensorSlice;
using paralab::TpSplit;

TEST(Init, RectangleElementsAreTheFullTensorsElements) {
  // rows of 4 columns at stride 10 from element 2 of the full tensor; local elements 5..10
  const int64_t cols = 4, stride = 10, offset = 2, first = 5, count = 6;
  std::vector<float> out(count, -1.0f);
  kernels::init_normal(Device::CPU, out.data(), first, count, cols, offset, stride, 7, 4, 0.5f);
  for (int64_t j = 0; j < count; ++j) {
    const int64_t r = first + j, index = offset + r / cols * stride + r % cols;
    EXPECT_EQ(out[j], kernels::init_normal_value(7, 4, (uint64_t)index, 0.5f)) << j;
  }
  std::vector<kernels::bf16> b(5);
  kernels::fill(Device::CPU, b.data(), 1.0f, b.size());
  for (const kernels::bf16& x : b) EXPECT_EQ(kernels::to_float(x), 1.0f);
}

// The full tensor drawn whole, sharded by shard_tensor / shard_experts, against the rank's
// blocks drawn on their own into its local tensor.
void expect_blocks_draw_the_shard(const ParamSpec& full, const TensorSlice& slice) {
  const uint64_t seed = 11, stream = 6;
  std::vector<float> whole(full.numel());
  kernels::init_normal(Device::CPU, whole.data(), 0, (int64_t)whole.size(), (int64_t)whole.size(),
                       0, 0, seed, stream, 0.02f);
  const std::vector<float> want =
      slice.expert ? paralab::shard_experts(full, whole, slice.ep, slice.ep_rank, slice.etp,
                                            slice.etp_rank)
                   : paralab::shard_tensor(full, whole, slice.tp, slice.tp_rank);
  const std::vector<ShardBlock> blocks = paralab::shard_blocks(full, slice);
  std::vector<float> got((size_t)paralab::shard_numel(blocks), NAN);
  for (const ShardBlock& b : blocks)
    kernels::init_normal(Device::CPU, got.data() + b.local_offset, 0, b.rows * b.cols, b.cols,
                         b.full_offset, b.full_stride, seed, stream, 0.02f);
  ASSERT_EQ(got.size(), want.size());
  const std::vector<int64_t> index = paralab::shard_indices(full, slice);
  for (size_t i = 0; i < got.size(); ++i) {
    if (index[i] >= 0) EXPECT_EQ(got[i], want[i]) << i;
    else EXPECT_TRUE(std::isfinite(got[i])) << i;  // a padding row: drawn, not in `whole`
  }
}

TEST(Init, EachRanksBlocksDrawItsSlice) {
  for (TpSplit split : {TpSplit::ROWS, TpSplit::HALVES, TpSplit::COLUMNS, TpSplit::REPLICATED}) {
    ParamSpec p;
    p.shape = {8, 6};
    p.split = split;
    for (int tp : {1, 2})
      for (int r = 0; r < tp; ++r) {
        SCOPED_TRACE("split " + std::to_string((int)split) + " tp " + std::to_string(tp));
        TensorSlice s;
        s.tp = tp, s.tp_rank = r;
        expect_blocks_draw_the_shard(p, s);
      }
  }
  ParamSpec vocab;  // 37 rows padded to 128 x 2 at tp 2: rank 1's rows are mostly padding
  vocab.shape = {37, 4};
  vocab.split = TpSplit::VOCAB;
  vocab.vocab_multiple = 128;
  for (int r = 0; r < 2; ++r) {
    TensorSlice s;
    s.tp = 2, s.tp_rank = r;
    expect_blocks_draw_the_shard(vocab, s);
  }
  ParamSpec experts;  // 4 experts of (6, 8), fc2-like: each split by columns over etp
  experts.shape = {4, 6, 8};
  experts.expert = true;
  experts.etp_split = TpSplit::COLUMNS;
  for (int ep_rank = 0; ep_rank < 2; ++ep_rank)
    for (int etp_rank = 0; etp_rank < 2; ++etp_rank) {
      TensorSlice s;
      s.expert = true;
      s.ep = 2, s.ep_rank = ep_rank, s.etp = 2, s.etp_rank = etp_rank;
      expect_blocks_draw_the_shard(experts, s);
    }
}

}  // namespace
