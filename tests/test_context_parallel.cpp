// tests/test_context_parallel.cpp: context parallelism's layout, the ring's block selection
// (parallel/context_parallel.h core_passes, the code the trainer runs) and the plan's terms
// (plan/context_parallel.h): bytes per layer for each comm type against the issue's
// formulas, activations per rank at s/cp, attention work per cp rank under each layout.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "parallel/context_parallel.h"
#include "plan/context_parallel.h"
#include "tests/test_plan_helpers.h"

namespace paralab {
namespace {

using namespace plan_test;

CoreShape shape(int S, int cp) {
  CoreShape s;
  s.B = 1, s.A = 4, s.G = 2, s.D = 8, s.length = S, s.S = S / cp;
  return s;
}

TEST(ContextParallelLayout, ZigzagHoldsChunksRAnd2cpMinus1MinusR) {
  const kernels::TokenPositions p = cp_positions(16, 2, 0, CpLayout::ZIGZAG);
  std::vector<int> at;
  for (int i = 0; i < 8; ++i) at.push_back(p.at(i));
  EXPECT_EQ(at, (std::vector<int>{0, 1, 2, 3, 12, 13, 14, 15}));
  const kernels::TokenPositions q = cp_positions(16, 4, 3, CpLayout::CONTIGUOUS);
  EXPECT_EQ(q.at(0), 12);
  EXPECT_EQ(q.at(3), 15);
  // the tokens of B = 2 sequences, each rank's in position order
  std::vector<int> full(32), local(8);
  for (int i = 0; i < 32; ++i) full[i] = i;
  cp_local_tokens(full.data(), local.data(), 2, 16, 4, 1, CpLayout::ZIGZAG);
  EXPECT_EQ(local, (std::vector<int>{2, 3, 12, 13, 18, 19, 28, 29}));
}

// Every (query, key <= query) pair of the sequence is scored exactly once, by the rank
// holding the query, and no later key ever is; the p2p passes come in ring order (the
// diagonal first, then the blocks of ranks r-1, r-2, ...), each off-diagonal one half a block.
TEST(ContextParallelPasses, RingCoversEveryCausalPairOnce) {
  for (CpLayout layout : {CpLayout::ZIGZAG, CpLayout::CONTIGUOUS})
    for (CpCommType type : {CpCommType::P2P, CpCommType::ALL_GATHER})
      for (int cp : {2, 3, 4}) {
        const int S = 24;
        std::multiset<std::pair<int, int>> seen;
        for (int r = 0; r < cp; ++r) {
          const std::vector<CorePass> passes = core_passes(shape(S, cp), {cp, r, type, layout});
          for (size_t n = 0; n < passes.size(); ++n) {
            const kernels::AttentionBlock& b = passes[n].blk;
            if (type == CpCommType::P2P) {
              EXPECT_EQ(passes[n].source, ((r - (int)n) % cp + cp) % cp) << "ring order";
              if (n > 0 && layout == CpLayout::ZIGZAG) {
                EXPECT_EQ((long long)b.q.rows * b.k.rows, (long long)(S / cp) * (S / cp) / 2);
              }
            }
            for (int i = 0; i < b.q.rows; ++i)
              for (int j = 0; j < b.visible(i); ++j) {
                EXPECT_LE(b.k.pos.at(j), b.q.pos.at(i));
                seen.insert({b.q.pos.at(i), b.k.pos.at(j)});
              }
          }
        }
        EXPECT_EQ((int)seen.size(), S * (S + 1) / 2) << cp;
        for (int i = 0; i < S; ++i)
          for (int j = 0; j <= i; ++j) EXPECT_EQ(seen.count({i, j}), 1u) << i << " " << j;
      }
}

// Per layer and microbatch, KV = 2 (s/cp) b g d elements: p2p and all_gather move (cp-1) KV
// forward and (cp-1) (KV + dKV) backward (bus bytes), a2a (cp-1)/cp of q, k, v, o forward
// and of their gradients backward.
TEST(ContextParallelPlan, BytesPerLayerFollowTheFormulas) {
  const int cp = 4, B = 2, e = 2, S = 64;
  ModelConfig m = llama(1, 64, 8, 4, 96, S, 128);  // d 8
  const double kv = 2.0 * (S / cp) * B * 4 * 8 * e, q = (double)(S / cp) * B * 8 * 8 * e;
  auto bus = [&](CpCommType type, CpExchange::Phase phase) {
    m.context_parallel = {cp, 0, type, CpLayout::ZIGZAG};
    double b = 0;
    for (const CpExchange& x : cp_layer_exchanges(m, B, e, 1))
      if ((x.phase == CpExchange::BACKWARD) == (phase == CpExchange::BACKWARD))
        b += bus_factor(x.op, cp) * (double)x.payload_bytes;
    return b;
  };
  for (CpCommType type : {CpCommType::P2P, CpCommType::ALL_GATHER}) {
    EXPECT_DOUBLE_EQ(bus(type, CpExchange::FORWARD), (cp - 1) * kv);
    EXPECT_DOUBLE_EQ(bus(type, CpExchange::BACKWARD), 2 * (cp - 1) * kv);
  }
  EXPECT_DOUBLE_EQ(bus(CpCommType::A2A, CpExchange::FORWARD), (cp - 1.0) / cp * (2 * q + kv));
  EXPECT_DOUBLE_EQ(bus(CpCommType::A2A, CpExchange::BACKWARD), (cp - 1.0) / cp * (2 * q + kv));
}

ParallelConfig cp_grid(int cp, CpCommType type, CpLayout layout = CpLayout::ZIGZAG) {
  ParallelConfig p = world(cp, 0);
  p.context_parallel = cp;
  p.cp_comm_type = type;
  p.cp_layout = layout;
  return p;
}

// Flash: every activation of a layer holds the rank's s/cp tokens; the whole list (P of the
// passes included) shrinks as 1/cp for naive only with the ring's blocks counted.
TEST(ContextParallelPlan, ActivationsPerRankScaleWithTokens) {
  const ModelConfig m = llama(2, 64, 8, 4, 96, 64, 128);
  const int64_t one = make_plan(m, batch(1, 1), world(1, 0)).activation_bytes_per_layer;
  for (int cp : {2, 4}) {
    const Plan p = make_plan(m, batch(1, 1), cp_grid(cp, CpCommType::P2P));
    EXPECT_EQ(p.activation_bytes_per_layer * cp, one) << cp;
  }
  ModelConfig naive = m;
  naive.attention = AttentionImpl::NAIVE;
  const Plan n1 = make_plan(naive, batch(1, 1), world(1, 0));
  const Plan n2 = make_plan(naive, batch(1, 1), cp_grid(2, CpCommType::P2P));
  // P per rank, cp 2: the diagonal (s/2)^2 and one half block (s/4)(s/2), every head; plus
  // the rows' lse, fp32 (B a s/2)
  const int64_t s = 64, a = 8;
  int64_t probs2 = 0, probs1 = 0;
  for (const ActivationTensor& t : n2.layer_activations)
    if (t.name == "attn.probs") probs2 += t.bytes();
  for (const ActivationTensor& t : n1.layer_activations)
    if (t.name == "attn.probs") probs1 += t.bytes();
  EXPECT_EQ(probs1, a * s * s * 4);
  EXPECT_EQ(probs2, a * ((s / 2) * (s / 2) + (s / 4) * (s / 2)) * 4);
}

// The zigzag layout gives every rank s(s+1)/2cp causal pairs; the contiguous one gives rank
// r r (s/cp)^2 + (s/cp)(s/cp+1)/2: rank cp-1 does 1 + 2(cp-1)(s/cp)/(s/cp+1) times rank 0's
// work, which tends to 2cp - 1 (not cp) for long sequences.
TEST(ContextParallelPlan, AttentionWorkPerRank) {
  ModelConfig m = llama(1, 64, 8, 4, 96, 64, 128);
  const int cp = 4, Sl = 16;
  for (int r = 0; r < cp; ++r) {
    m.context_parallel = {cp, r, CpCommType::P2P, CpLayout::ZIGZAG};
    EXPECT_DOUBLE_EQ(cp_attention_pairs(m, 1).causal, 64.0 * 65 / 2 / cp);
    m.context_parallel.layout = CpLayout::CONTIGUOUS;
    EXPECT_DOUBLE_EQ(cp_attention_pairs(m, 1).causal, (double)r * Sl * Sl + Sl * (Sl + 1) / 2.0);
  }
  m.context_parallel = {cp, cp - 1, CpCommType::P2P, CpLayout::CONTIGUOUS};
  const double last = cp_attention_pairs(m, 1).causal;
  m.context_parallel.rank = 0;
  EXPECT_DOUBLE_EQ(last / cp_attention_pairs(m, 1).causal, 1 + 2.0 * (cp - 1) * Sl / (Sl + 1));
}

// The gradients reduce over dp x cp: the dp_cp group's all-reduce, the model states sharded
// over it under ZeRO.
TEST(ContextParallelPlan, GradientsOverDataTimesContextParallel) {
  const ModelConfig m = llama(2, 64, 8, 4, 96, 64, 128);
  ParallelConfig p = cp_grid(2, CpCommType::P2P);
  p.world_size = 4;
  p.zero_stage = 1;
  const Plan plan = make_plan(m, batch(1, 2), p);
  EXPECT_EQ(plan.dp_cp, 4);
  EXPECT_NE(find_comm(plan, CommGroup::DP_CP, CommOp::REDUCE_SCATTER), nullptr);
  EXPECT_EQ(find_comm(plan, CommGroup::DP, CommOp::REDUCE_SCATTER), nullptr);
  const Plan dp4 = make_plan(m, batch(1, 4), world(4, 1));
  EXPECT_EQ(plan.ranks[0].memory.optimizer_states, dp4.ranks[0].memory.optimizer_states);
}

}  // namespace
}  // namespace paralab
