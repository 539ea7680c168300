// tests/test_moe_dispatch.cpp: the MoE dispatch's counting sort (kernels/ops/moe_dispatch.h)
// on every device this binary reaches: the three passes (histogram, scan, stable scatter, with
// the probs policy's gate ranks) against a reference that sorts on the host, bit for bit, on
// hand-computed cases and on random routings; the statistics' sums; the expert bias's update.
//
// The reference is what model/moe.cpp ran on the host before the dispatch moved to the device
// (its plan_dispatch): each expert's pairs in pair order (a stable sort by expert), over
// capacity the C kept by policy (probs: a stable sort by gate, descending, then the C first;
// position: the C first), kept rows in pair order, then the expert's padding rows.
//
// Capacity: C = ceil(T k / E cf) (Megatron's get_capacity). The hand cases below:
//   k = 1, E = 2, T = 4, cf 1: C = ceil(4 / 2) = 2. Expert 0 gets tokens 0, 1, 2 with gates
//   0.5, 0.9, 0.7: probs keeps the two largest (tokens 1, 2), position the two earliest
//   (tokens 0, 1); expert 1 keeps token 3.
//   k = 2, E = 3, T = 3, cf 1: C = ceil(6 / 3) = 2. Pairs p = t k + s: expert 0 gets p0 (0.6),
//   p2 (0.7), p4 (0.8): probs keeps p4, p2 and drops p0; position keeps p0, p2, drops p4.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/math.h"
#include "kernels/ops.h"
#include "model/moe.h"  // expert_capacity
#include "tests/test_kernels_helpers.h"

namespace paralab {
namespace {

using ktest::DevBuf;
using kernels::Device;

Moe capped(int E, int k, float cf, Moe::DropPolicy policy, bool pad = false) {
  Moe m;
  m.num_experts = E;
  m.topk = k;
  m.capacity_factor = cf;
  m.drop_policy = policy;
  m.pad_to_capacity = pad;
  return m;
}

// One microbatch's dispatch, as host arrays.
struct Maps {
  int capacity = -1;
  std::vector<int> routed, kept, rows, offset;  // (E), (E), (E), (E + 1)
  std::vector<int> row_pair, slots;             // (M), (N k)
  long long dropped = 0;
};

// The host reference (the sort).
Maps reference_dispatch(const Moe& moe, const std::vector<int>& experts,
                        const std::vector<float>& gates, int N, int k) {
  const int E = moe.num_experts;
  Maps d;
  d.routed.assign(E, 0);
  std::vector<std::vector<int>> pairs(E);  // each expert's pairs in pair order
  for (int p = 0; p < N * k; ++p) {
    pairs.at(experts[p]).push_back(p);
    d.routed[experts[p]]++;
  }
  const bool cap = moe.capacity_factor > 0;
  if (cap) d.capacity = expert_capacity(N, k, E, moe.capacity_factor);
  d.rows.assign(E, 0);
  d.kept.assign(E, 0);
  d.offset.assign(E + 1, 0);
  d.slots.assign((size_t)N * k, -1);
  for (int e = 0; e < E; ++e) {
    std::vector<int>& mine = pairs[e];
    if (cap && (int)mine.size() > d.capacity) {
      if (moe.drop_policy == Moe::DropPolicy::PROBS)
        std::stable_sort(mine.begin(), mine.end(),
                         [&](int x, int y) { return gates[x] > gates[y]; });
      d.dropped += (long long)mine.size() - d.capacity;
      mine.resize(d.capacity);
      std::sort(mine.begin(), mine.end());  // kept rows in pair order
    }
    d.kept[e] = (int)mine.size();
    d.rows[e] = moe.pad_to_capacity ? std::min(d.capacity, N) : d.kept[e];
    d.offset[e + 1] = d.offset[e] + d.rows[e];
  }
  d.row_pair.assign(d.offset[E], -1);
  for (int e = 0; e < E; ++e)
    for (int i = 0; i < d.kept[e]; ++i) {
      d.row_pair[d.offset[e] + i] = pairs[e][i];
      d.slots[pairs[e][i]] = d.offset[e] + i;
    }
  return d;
}

// The three passes on device `dev`, as model/moe.cpp runs them (the rows read back where the
// host would copy them), and the statistics' sums of one microbatch.
Maps device_dispatch(Device dev, const Moe& moe, const std::vector<int>& experts,
                     const std::vector<float>& gates, int N, int k) {
  const int E = moe.num_experts;
  Maps d;
  d.capacity = moe.capacity_factor > 0 ? expert_capacity(N, k, E, moe.capacity_factor) : -1;
  const int padded = moe.pad_to_capacity && d.capacity >= 0 ? std::min(d.capacity, N) : -1;
  const bool probs = d.capacity >= 0 && moe.drop_policy == Moe::DropPolicy::PROBS;
  DevBuf<int> ex(dev, experts), counts(dev, E), rows(dev, E), offset(dev, E + 1),
      routed(dev, E), kept(dev, E), rank(dev, std::max(1, N * k));
  DevBuf<float> g(dev, gates);
  kernels::moe_expert_counts(dev, counts.get(), ex.get(), N, k, E, N);
  kernels::moe_dispatch_offsets(dev, rows.get(), offset.get(), routed.get(), kept.get(),
                                counts.get(), E, d.capacity, padded, false);
  d.rows = rows.host();
  d.offset = offset.host();
  const int M = d.offset[E];
  DevBuf<int> row_pair(dev, std::max(1, M)), slots(dev, std::max(1, N * k));
  if (probs) kernels::moe_gate_rank(dev, rank.get(), ex.get(), g.get(), N, k, E);
  kernels::moe_dispatch_scatter(dev, row_pair.get(), slots.get(), ex.get(),
                                probs ? rank.get() : nullptr, offset.get(), N, k, E, M,
                                d.capacity);
  d.row_pair = row_pair.host();
  d.row_pair.resize(M);
  d.slots = slots.host();
  d.slots.resize((size_t)N * k);
  d.routed = routed.host();
  d.kept = kept.host();
  EXPECT_EQ(counts.host(), d.routed) << "the statistics' routed pairs are the histogram";
  for (int e = 0; e < E; ++e) d.dropped += d.routed[e] - d.kept[e];
  return d;
}

void expect_same(const Maps& got, const Maps& want) {
  EXPECT_EQ(got.capacity, want.capacity);
  EXPECT_EQ(got.routed, want.routed) << "routed pairs per expert";
  EXPECT_EQ(got.kept, want.kept) << "kept pairs per expert";
  EXPECT_EQ(got.rows, want.rows) << "rows per expert";
  EXPECT_EQ(got.offset, want.offset) << "offsets";
  EXPECT_EQ(got.row_pair, want.row_pair) << "row_pair";
  EXPECT_EQ(got.slots, want.slots) << "slots";
  EXPECT_EQ(got.dropped, want.dropped) << "dropped pairs";
}

class MoeDispatch : public ::testing::TestWithParam<Device> {
 protected:
  Device dev() const { return GetParam(); }
  Maps run(const Moe& m, const std::vector<int>& experts, const std::vector<float>& gates,
           int N, int k) {
    Maps d = device_dispatch(dev(), m, experts, gates, N, k);
    expect_same(d, reference_dispatch(m, experts, gates, N, k));
    return d;
  }
};

INSTANTIATE_TEST_SUITE_P(Devices, MoeDispatch, ::testing::ValuesIn(ktest::test_devices()),
                         ktest::device_label);

TEST(MoeCapacity, IsMegatronsCeiling) {
  EXPECT_EQ(expert_capacity(4, 1, 2, 1.0f), 2);
  EXPECT_EQ(expert_capacity(10, 2, 4, 1.0f), 5);   // 20 / 4
  EXPECT_EQ(expert_capacity(10, 2, 4, 1.25f), 7);  // ceil(6.25)
  EXPECT_EQ(expert_capacity(3, 2, 8, 1.0f), 1);    // ceil(0.75)
}

TEST_P(MoeDispatch, DroplessKeepsEveryPairInTokenOrder) {
  Moe m = capped(3, 2, 0.0f, Moe::DropPolicy::PROBS);
  const std::vector<int> experts = {2, 0, 0, 1, 2, 0};  // tokens 0, 1, 2
  const std::vector<float> gates = {.6f, .4f, .7f, .3f, .5f, .5f};
  const Maps d = run(m, experts, gates, 3, 2);
  EXPECT_EQ(d.capacity, -1);
  EXPECT_EQ(d.dropped, 0);
  EXPECT_EQ(d.rows, (std::vector<int>{3, 1, 2}));
  EXPECT_EQ(d.offset, (std::vector<int>{0, 3, 4, 6}));
  // expert 0: pairs 1, 2, 5; expert 1: pair 3; expert 2: pairs 0, 4
  EXPECT_EQ(d.row_pair, (std::vector<int>{1, 2, 5, 3, 0, 4}));
  EXPECT_EQ(d.slots, (std::vector<int>{4, 0, 1, 3, 5, 2}));
}

TEST_P(MoeDispatch, ProbsPolicyKeepsTheLargestGates) {
  const std::vector<int> experts = {0, 0, 0, 1};
  const std::vector<float> gates = {.5f, .9f, .7f, .6f};
  const Maps d = run(capped(2, 1, 1.0f, Moe::DropPolicy::PROBS), experts, gates, 4, 1);
  EXPECT_EQ(d.capacity, 2);
  EXPECT_EQ(d.dropped, 1);
  EXPECT_EQ(d.rows, (std::vector<int>{2, 1}));
  EXPECT_EQ(d.row_pair, (std::vector<int>{1, 2, 3}));  // kept rows in token order
  EXPECT_EQ(d.slots, (std::vector<int>{-1, 0, 1, 2}));
}

TEST_P(MoeDispatch, PositionPolicyKeepsTheEarliestTokens) {
  const std::vector<int> experts = {0, 0, 0, 1};
  const std::vector<float> gates = {.5f, .9f, .7f, .6f};
  const Maps d = run(capped(2, 1, 1.0f, Moe::DropPolicy::POSITION), experts, gates, 4, 1);
  EXPECT_EQ(d.dropped, 1);
  EXPECT_EQ(d.row_pair, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(d.slots, (std::vector<int>{0, 1, -1, 2}));
}

TEST_P(MoeDispatch, TopTwoDropsDifferByPolicy) {
  const std::vector<int> experts = {0, 1, 0, 2, 0, 1};
  const std::vector<float> gates = {.6f, .4f, .7f, .3f, .8f, .2f};
  const Maps probs = run(capped(3, 2, 1.0f, Moe::DropPolicy::PROBS), experts, gates, 3, 2);
  EXPECT_EQ(probs.capacity, 2);
  EXPECT_EQ(probs.dropped, 1);
  EXPECT_EQ(probs.slots[0], -1);  // p0 (gate 0.6) dropped
  EXPECT_GE(probs.slots[4], 0);
  const Maps position =
      run(capped(3, 2, 1.0f, Moe::DropPolicy::POSITION), experts, gates, 3, 2);
  EXPECT_EQ(position.dropped, 1);
  EXPECT_GE(position.slots[0], 0);
  EXPECT_EQ(position.slots[4], -1);  // p4, the latest token, dropped
}

TEST_P(MoeDispatch, EqualGatesKeepTheEarlierToken) {
  const std::vector<int> experts = {0, 0, 0, 0};
  const std::vector<float> gates = {.5f, .5f, .5f, .5f};
  const Maps d = run(capped(2, 1, 1.0f, Moe::DropPolicy::PROBS), experts, gates, 4, 1);
  EXPECT_EQ(d.row_pair, (std::vector<int>{0, 1}));
}

TEST_P(MoeDispatch, PaddingFillsEveryExpertToCapacity) {
  const std::vector<int> experts = {0, 0, 0, 1};
  const std::vector<float> gates = {.5f, .9f, .7f, .6f};
  const Maps d = run(capped(2, 1, 1.0f, Moe::DropPolicy::PROBS, true), experts, gates, 4, 1);
  EXPECT_EQ(d.rows, (std::vector<int>{2, 2}));
  EXPECT_EQ(d.kept, (std::vector<int>{2, 1}));
  EXPECT_EQ(d.row_pair, (std::vector<int>{1, 2, 3, -1}));  // expert 1's padding row last
  // a capacity above the tokens: min(C, T) rows (Megatron then routes every token)
  const Maps big = run(capped(2, 1, 4.0f, Moe::DropPolicy::PROBS, true), experts, gates, 4, 1);
  EXPECT_EQ(big.capacity, 8);
  EXPECT_EQ(big.rows, (std::vector<int>{4, 4}));
  EXPECT_EQ(big.dropped, 0);
}

// A router's choice: each token's k distinct experts, drawn from the first `used` of E (the
// rest stay empty), and gates from a handful of values, so equal gates meet inside an expert.
void random_routing(int N, int k, int E, int used, unsigned seed, std::vector<int>& experts,
                    std::vector<float>& gates) {
  std::mt19937 rng(seed);
  experts.assign((size_t)N * k, 0);
  gates.assign((size_t)N * k, 0.0f);
  std::vector<int> pool(used);
  for (int t = 0; t < N; ++t) {
    for (int e = 0; e < used; ++e) pool[e] = e;
    // skewed: the low experts are popular, so capacities drop pairs
    for (int s = 0; s < k; ++s) {
      const int left = used - s;
      const int j = s + (int)(rng() % left) * (int)(rng() % left) / std::max(1, left);
      std::swap(pool[s], pool[j]);
      experts[(size_t)t * k + s] = pool[s];
      gates[(size_t)t * k + s] = (float)(rng() % 8) / 8.0f;
    }
  }
  (void)E;
}

TEST_P(MoeDispatch, RandomRoutingsEqualTheHostSort) {
  struct Case {
    int N, k, E, used;
    float cf;
    Moe::DropPolicy policy;
    bool pad;
  };
  const Moe::DropPolicy probs = Moe::DropPolicy::PROBS, position = Moe::DropPolicy::POSITION;
  const Case cases[] = {
      {97, 2, 8, 8, 0.0f, probs, false},        // dropless, odd N
      {64, 4, 16, 16, 1.0f, probs, false},      // capacity, probs
      {64, 4, 16, 16, 1.0f, position, false},   // capacity, position
      {61, 3, 8, 8, 0.75f, probs, true},        // padded, drops
      {61, 3, 8, 8, 2.0f, position, true},      // padded, fewer pairs than rows
      {333, 8, 128, 40, 0.0f, probs, false},    // E 128, most experts empty
      {333, 8, 128, 40, 1.25f, probs, false},   // E 128 with drops by gate
      {333, 8, 128, 40, 1.25f, position, true}, // E 128 padded
      {1500, 2, 4, 4, 0.5f, probs, false},      // many tiles: the scatter's running totals
      {1, 1, 2, 2, 1.0f, probs, false},         // one token
  };
  unsigned seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "N " << c.N << " k " << c.k << " E " << c.E << " cf "
                                    << c.cf << (c.policy == probs ? " probs" : " position")
                                    << (c.pad ? " padded" : ""));
    std::vector<int> experts;
    std::vector<float> gates;
    random_routing(c.N, c.k, c.E, c.used, seed++, experts, gates);
    run(capped(c.E, c.k, c.cf, c.policy, c.pad), experts, gates, c.N, c.k);
  }
}

// The allgather dispatcher's local maps (kernels::moe_local_maps) against the host picking
// they replaced: P sources' dispatches (random routings, drops and padding among them) in the
// gathered layout [rows (E) | slots (N k)] each; this rank holds L experts from `first`; its
// local rows go local expert by local expert, source by source, each source's rows in order.
TEST_P(MoeDispatch, LocalMapsEqualTheHostPicking) {
  struct Case {
    int P, N, k, E, L, first;
    float cf;
    bool pad;
  };
  const Case cases[] = {
      {2, 37, 2, 8, 4, 4, 0.0f, false},     // dropless
      {4, 29, 3, 8, 2, 2, 1.0f, false},     // drops
      {4, 29, 3, 8, 2, 6, 0.75f, true},     // padded: padding rows stay -1
      {2, 61, 8, 600, 300, 0, 0.0f, false}, // more local experts than one launch's 256
      {3, 1, 1, 4, 4, 0, 1.0f, false},      // one token, every expert local
  };
  unsigned seed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "P " << c.P << " N " << c.N << " E " << c.E << " L "
                                    << c.L);
    const Moe moe = capped(c.E, c.k, c.cf, Moe::DropPolicy::PROBS, c.pad);
    const int pairs = c.N * c.k, per_rank = c.E + pairs;
    std::vector<int> gathered((size_t)c.P * per_rank);
    std::vector<Maps> source(c.P);
    for (int j = 0; j < c.P; ++j) {
      std::vector<int> experts;
      std::vector<float> gates;
      random_routing(c.N, c.k, c.E, c.E, seed++, experts, gates);
      source[j] = reference_dispatch(moe, experts, gates, c.N, c.k);
      std::copy(source[j].rows.begin(), source[j].rows.end(), gathered.begin() + j * per_rank);
      std::copy(source[j].slots.begin(), source[j].slots.end(),
                gathered.begin() + j * per_rank + c.E);
    }
    // the host picking: each local row's gathered pair (-1: padding), and the inverse
    std::vector<int> want_source_pair, want_local_slots((size_t)c.P * pairs, -1);
    std::vector<int> first_row((size_t)c.P * (c.L + 1)), local_base((size_t)c.P * c.L);
    for (int e = 0; e < c.L; ++e)
      for (int j = 0; j < c.P; ++j) {
        const Maps& d = source[j];
        local_base[(size_t)j * c.L + e] = (int)want_source_pair.size();
        for (int row = d.offset[c.first + e]; row < d.offset[c.first + e + 1]; ++row) {
          const int p = d.row_pair[row];
          if (p >= 0) want_local_slots[(size_t)j * pairs + p] = (int)want_source_pair.size();
          want_source_pair.push_back(p < 0 ? -1 : j * pairs + p);
        }
      }
    for (int j = 0; j < c.P; ++j)
      for (int e = 0; e <= c.L; ++e)
        first_row[(size_t)j * (c.L + 1) + e] = source[j].offset[c.first + e];
    const int R = (int)want_source_pair.size();
    DevBuf<int> map(dev(), gathered), source_pair(dev(), std::max(1, R)),
        local_slots(dev(), (size_t)c.P * pairs);
    kernels::reset_kernel_counts();
    kernels::moe_local_maps(dev(), source_pair.get(), local_slots.get(), map.get() + c.E,
                            per_rank, c.P, pairs, c.L, first_row.data(), local_base.data(), R);
    EXPECT_EQ(kernels::kernel_counts().launches, kernels::moe_local_maps_launches(c.P, c.L));
    std::vector<int> got = source_pair.host();
    got.resize(R);
    EXPECT_EQ(got, want_source_pair) << "source_pair";
    EXPECT_EQ(local_slots.host(), want_local_slots) << "local_slots";
  }
}

// The aux loss's counts per group (seq_aux_loss: one group per sequence).
TEST_P(MoeDispatch, CountsPerGroup) {
  const int N = 12, k = 2, E = 5, group = 4;
  std::vector<int> experts;
  std::vector<float> gates;
  random_routing(N, k, E, E, 77, experts, gates);
  DevBuf<int> ex(dev(), experts), counts(dev(), (N / group) * E);
  kernels::moe_expert_counts(dev(), counts.get(), ex.get(), N, k, E, group);
  std::vector<int> want((N / group) * E, 0);
  for (int p = 0; p < N * k; ++p) want[(p / k / group) * E + experts[p]]++;
  EXPECT_EQ(counts.host(), want);
}

// The scan's statistics: written at the first microbatch, added to at the others.
TEST_P(MoeDispatch, StatisticsAccumulateOverMicrobatches) {
  const int E = 3, C = 2;
  DevBuf<int> counts(dev(), std::vector<int>{5, 0, 2}), rows(dev(), E), offset(dev(), E + 1);
  DevBuf<int> routed(dev(), std::vector<int>{9, 9, 9}), kept(dev(), std::vector<int>{9, 9, 9});
  kernels::moe_dispatch_offsets(dev(), rows.get(), offset.get(), routed.get(), kept.get(),
                                counts.get(), E, C, -1, false);
  EXPECT_EQ(routed.host(), (std::vector<int>{5, 0, 2}));
  EXPECT_EQ(kept.host(), (std::vector<int>{2, 0, 2}));
  kernels::moe_dispatch_offsets(dev(), rows.get(), offset.get(), routed.get(), kept.get(),
                                counts.get(), E, C, -1, true);
  EXPECT_EQ(routed.host(), (std::vector<int>{10, 0, 4}));
  EXPECT_EQ(kept.host(), (std::vector<int>{4, 0, 4}));
  EXPECT_EQ(offset.host(), (std::vector<int>{0, 2, 2, 4}));
}

// More experts than the scan's block (1024): the chunks' carry.
TEST_P(MoeDispatch, ScanOverManyExperts) {
  const int E = 2500;
  std::vector<int> c(E);
  for (int e = 0; e < E; ++e) c[e] = (e * 37) % 11;
  DevBuf<int> counts(dev(), c), rows(dev(), E), offset(dev(), E + 1);
  kernels::moe_dispatch_offsets(dev(), rows.get(), offset.get(), nullptr, nullptr, counts.get(),
                                E, 7, -1, false);
  std::vector<int> want(E + 1, 0);
  for (int e = 0; e < E; ++e) want[e + 1] = want[e] + std::min(c[e], 7);
  EXPECT_EQ(offset.host(), want);
}

TEST_P(MoeDispatch, ExpertBiasMovesBySignOfTheLoadError) {
  const float r = 0.01f;
  // mean 5: the overloaded expert goes down, the others up
  DevBuf<float> bias(dev(), std::vector<float>{0, 0, 0, 0});
  DevBuf<int> counts(dev(), std::vector<int>{10, 2, 4, 4});
  kernels::moe_expert_bias_update(dev(), bias.get(), counts.get(), 4, r);
  EXPECT_EQ(bias.host(), (std::vector<float>{-r, r, r, r}));
  // an expert exactly at the mean keeps its bias
  DevBuf<float> bias2(dev(), std::vector<float>{0.5f, 0, 0, 0});
  DevBuf<int> counts2(dev(), std::vector<int>{5, 5, 3, 7});
  kernels::moe_expert_bias_update(dev(), bias2.get(), counts2.get(), 4, r);
  EXPECT_EQ(bias2.host(), (std::vector<float>{0.5f, 0, r, -r}));
}

}  // namespace
}  // namespace paralab
