// tests/test_topology.cpp: the two rank grids and group membership (pure: no MPI launch).
//
// Explicit membership for a few grids worked out by hand from the dense grid's
// rank = tp + tp*(cp + cp*(dp + dp*pp)) and the expert grid's
// rank = etp + etp*(ep + ep*(edp + edp*pp)); then every group against an independent
// transcription of Megatron-Core's RankGenerator; then invariants over every grid up to 16
// ranks.
#include <gtest/gtest.h>
#include <algorithm>
#include <functional>
#include <set>
#include <sstream>
#include <stdexcept>
#include "parallel/topology.h"

using namespace paralab;
using Groups = std::vector<std::vector<int>>;

namespace {
// Groups compared as a set (the order of the groups is not part of the contract; the
// order inside each group is: it is the group rank).
Groups sorted(Groups g) {
  std::sort(g.begin(), g.end());
  return g;
}
Groups singletons(int n) {
  Groups g;
  for (int r = 0; r < n; ++r) g.push_back({r});
  return g;
}
GridSpec grid(int world, int tp, int cp, int pp, int ep = 1, int etp = 0) {
  GridSpec s;
  s.world = world; s.tp = tp; s.cp = cp; s.pp = pp; s.ep = ep; s.etp = etp;
  return s;
}
std::string describe(const GridSpec& s) {
  std::ostringstream o;
  o << "world " << s.world << " tp " << s.tp << " cp " << s.cp << " pp " << s.pp << " ep "
    << s.ep << " etp " << s.etp;
  return o.str();
}

// Megatron-Core's generate_masked_orthogonal_rank_groups (megatron/core/parallel_state.py),
// transcribed line by line: `size` are the grid's sizes in its order (fastest first),
// `mask` marks those that vary inside a group. A group's ranks are
// inner(decompose(rank_in_group, masked_shape), masked_stride)
//   + inner(decompose(group_index, unmasked_shape), unmasked_stride).
Groups megatron_orthogonal_groups(int world, const std::vector<int>& size,
                                  const std::vector<bool>& mask) {
  auto prefix_product = [](const std::vector<int>& a) {
    std::vector<int> r{1};
    for (int v : a) r.push_back(r.back() * v);
    return r;
  };
  auto decompose = [&](int index, const std::vector<int>& shape) {
    const std::vector<int> stride = prefix_product(shape);
    std::vector<int> idx;
    for (size_t i = 0; i < shape.size(); ++i) idx.push_back((index / stride[i]) % shape[i]);
    return idx;
  };
  auto inner = [](const std::vector<int>& a, const std::vector<int>& b) {
    int s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  const std::vector<int> global_stride = prefix_product(size);
  std::vector<int> masked_shape, unmasked_shape, masked_stride, unmasked_stride;
  for (size_t i = 0; i < size.size(); ++i) {
    (mask[i] ? masked_shape : unmasked_shape).push_back(size[i]);
    (mask[i] ? masked_stride : unmasked_stride).push_back(global_stride[i]);
  }
  const int group_size = prefix_product(masked_shape).back();
  Groups ranks;
  for (int group_index = 0; group_index < world / group_size; ++group_index) {
    const std::vector<int> group_idx = decompose(group_index, unmasked_shape);
    std::vector<int> rank;
    for (int rank_in_group = 0; rank_in_group < group_size; ++rank_in_group)
      rank.push_back(inner(decompose(rank_in_group, masked_shape), masked_stride) +
                     inner(group_idx, unmasked_stride));
    ranks.push_back(rank);
  }
  return ranks;
}

// Megatron-Core's RankGenerator(tp, ep, dp, pp, cp, order='tp-cp-ep-dp-pp').get_ranks(token),
// token e.g. "tp", "dp-cp", "tp-ep".
struct RankGenerator {
  int tp, ep, dp, pp, cp;
  Groups get_ranks(const std::string& token) const {
    const std::vector<std::string> order = {"tp", "cp", "ep", "dp", "pp"};
    const std::vector<int> size = {tp, cp, ep, dp, pp};
    std::vector<bool> mask(order.size(), false);
    std::stringstream names(token);
    for (std::string t; std::getline(names, t, '-');)
      mask[std::find(order.begin(), order.end(), t) - order.begin()] = true;
    return megatron_orthogonal_groups(tp * cp * ep * dp * pp, size, mask);
  }
};

// initialize_model_parallel's two generators for a grid.
RankGenerator dense_generator(const RankLayout& L) {
  return {L.tp(), 1, L.dp(), L.pp(), L.cp()};
}
RankGenerator expert_generator(const RankLayout& L) {
  return {L.etp(), L.ep(), L.edp(), L.pp(), 1};
}

// Every group kind of L equals Megatron's (as sets of groups, each in group-rank order).
void expect_megatron_groups(const RankLayout& L) {
  const RankGenerator dense = dense_generator(L), expert = expert_generator(L);
  EXPECT_EQ(sorted(L.groups(CommGroup::TP)), sorted(dense.get_ranks("tp")));
  EXPECT_EQ(sorted(L.groups(CommGroup::CP)), sorted(dense.get_ranks("cp")));
  EXPECT_EQ(sorted(L.groups(CommGroup::PP)), sorted(dense.get_ranks("pp")));
  EXPECT_EQ(sorted(L.groups(CommGroup::DP)), sorted(dense.get_ranks("dp")));
  EXPECT_EQ(sorted(L.groups(CommGroup::DP_CP)), sorted(dense.get_ranks("dp-cp")));
  EXPECT_EQ(sorted(L.groups(CommGroup::EP)), sorted(expert.get_ranks("ep")));
  EXPECT_EQ(sorted(L.groups(CommGroup::ETP)), sorted(expert.get_ranks("tp")));
  EXPECT_EQ(sorted(L.groups(CommGroup::ETP_EP)), sorted(expert.get_ranks("tp-ep")));
  EXPECT_EQ(sorted(L.groups(CommGroup::EDP)), sorted(expert.get_ranks("dp")));
  EXPECT_EQ(L.groups(CommGroup::WORLD), dense.get_ranks("tp-cp-ep-dp-pp"));
  // Megatron asserts the two generators' pipeline groups are the same, in the same order.
  EXPECT_EQ(expert.get_ranks("pp"), dense.get_ranks("pp"));
  // Embedding: the first and last rank of each pp group (Megatron's rule, when pp > 1);
  // ours adds singleton groups for the middle stages.
  Groups embedding;
  for (const auto& pp : dense.get_ranks("pp"))
    embedding.push_back(pp.size() > 1 ? std::vector<int>{pp.front(), pp.back()} : pp);
  Groups ours;
  for (const auto& g : L.groups(CommGroup::EMBEDDING))
    if (g.size() > 1 || L.pp() == 1) ours.push_back(g);
  EXPECT_EQ(sorted(ours), sorted(embedding));
}

// Every valid grid of up to 16 ranks: world % (tp*cp*pp) == 0, (world/pp) % (etp*ep) == 0.
int for_each_small_grid(const std::function<void(const GridSpec&)>& fn) {
  int grids = 0;
  for (int world = 1; world <= 16; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int cp = 1; cp <= world; ++cp)
        for (int pp = 1; pp <= world; ++pp) {
          if (world % (tp * cp * pp)) continue;
          for (int etp = 1; etp <= world / pp; ++etp)
            for (int ep = 1; ep <= world / pp; ++ep) {
              if ((world / pp) % (etp * ep)) continue;
              ++grids;
              fn(grid(world, tp, cp, pp, ep, etp));
            }
        }
  return grids;
}

int expected_size(CommGroup g, const RankLayout& L) {
  switch (g) {
    case CommGroup::TP: return L.tp();
    case CommGroup::CP: return L.cp();
    case CommGroup::PP: return L.pp();
    case CommGroup::DP: return L.dp();
    case CommGroup::DP_CP: return L.dp() * L.cp();
    case CommGroup::EP: return L.ep();
    case CommGroup::ETP: return L.etp();
    case CommGroup::ETP_EP: return L.etp() * L.ep();
    case CommGroup::EDP: return L.edp();
    case CommGroup::WORLD: return L.world();
    case CommGroup::PCIE: return 1;  // a rank's copies to its own host memory
    default: return -1;  // EMBEDDING, MIRROR: 2 or 1, checked per rank
  }
}
}  // namespace

TEST(Topology, Tp2Pp2Dp2) {
  RankLayout L(grid(8, 2, 1, 2));
  EXPECT_EQ(L.dp(), 2);
  EXPECT_EQ(sorted(L.groups(CommGroup::TP)), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::CP)), singletons(8));
  EXPECT_EQ(sorted(L.groups(CommGroup::DP)), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::DP_CP)), sorted(L.groups(CommGroup::DP)));
  EXPECT_EQ(sorted(L.groups(CommGroup::PP)), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // ep 1, etp = tp by default: the expert grid is the dense one with edp = dp
  EXPECT_EQ(L.etp(), 2);
  EXPECT_EQ(L.edp(), 2);
  EXPECT_EQ(sorted(L.groups(CommGroup::EP)), singletons(8));
  EXPECT_EQ(sorted(L.groups(CommGroup::ETP)), sorted(L.groups(CommGroup::TP)));
  EXPECT_EQ(sorted(L.groups(CommGroup::ETP_EP)), sorted(L.groups(CommGroup::TP)));
  EXPECT_EQ(sorted(L.groups(CommGroup::EDP)), sorted(L.groups(CommGroup::DP)));
  EXPECT_EQ(sorted(L.groups(CommGroup::EMBEDDING)), sorted(L.groups(CommGroup::PP)));
  EXPECT_EQ(L.groups(CommGroup::WORLD), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  const RankCoord c = L.coord_of(6);  // 6 = 0 + 2*(0 + 1*(1 + 2*1))
  EXPECT_EQ(c.tp, 0); EXPECT_EQ(c.cp, 0); EXPECT_EQ(c.dp, 1); EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(L.pp_prev_rank(6), 2);
  EXPECT_EQ(L.pp_next_rank(6), 2);  // two stages: the ring wraps
  EXPECT_EQ(L.index_in(CommGroup::PP, 6), 1);
  EXPECT_EQ(L.index_in(CommGroup::DP, 6), 1);
}

TEST(Topology, Tp2Cp2Dp2) {
  RankLayout L(grid(8, 2, 2, 1));
  EXPECT_EQ(L.dp(), 2);
  EXPECT_EQ(sorted(L.groups(CommGroup::TP)), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::CP)), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::DP)), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // cp fastest inside dp x cp, as in the rank order
  EXPECT_EQ(sorted(L.groups(CommGroup::DP_CP)), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::PP)), singletons(8));
  EXPECT_EQ(sorted(L.groups(CommGroup::EMBEDDING)), singletons(8));
  EXPECT_TRUE(L.in_embedding_group(3));
}

TEST(Topology, Ep2Edp2OnFourRanks) {
  RankLayout L(grid(4, 1, 1, 1, 2));  // rank = ep + 2*edp
  EXPECT_EQ(L.dp(), 4);
  EXPECT_EQ(L.edp(), 2);
  EXPECT_EQ(sorted(L.groups(CommGroup::EP)), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::EDP)), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(L.index_in(CommGroup::EP, 3), 1);
  EXPECT_EQ(L.index_in(CommGroup::EDP, 3), 1);
}

// Worked by hand: world 8, tp 2, etp 1, ep 4, pp 1. Dense: rank = tp + 2*dp (dp 4).
// Expert: rank = ep + 4*edp (edp 2): each expert is whole on its rank, and the two tp
// ranks of a dense TP group hold different experts.
TEST(Topology, Tp2Etp1Ep4ByHand) {
  RankLayout L(grid(8, 2, 1, 1, 4, 1));
  EXPECT_EQ(L.dp(), 4);
  EXPECT_EQ(L.etp(), 1);
  EXPECT_EQ(L.edp(), 2);
  EXPECT_EQ(sorted(L.groups(CommGroup::TP)), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::DP)), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::EP)), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::EDP)), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::ETP)), singletons(8));
  EXPECT_EQ(sorted(L.groups(CommGroup::ETP_EP)), sorted(L.groups(CommGroup::EP)));
  const ExpertCoord x = L.expert_coord_of(6);  // 6 = 0 + 1*(2 + 4*(1 + 2*0))
  EXPECT_EQ(x.etp, 0); EXPECT_EQ(x.ep, 2); EXPECT_EQ(x.edp, 1); EXPECT_EQ(x.pp, 0);
  EXPECT_EQ(L.expert_rank_of(x), 6);
  const RankCoord c = L.coord_of(6);  // the same rank in the dense grid: 6 = 0 + 2*3
  EXPECT_EQ(c.tp, 0); EXPECT_EQ(c.dp, 3);
}

// Worked by hand: world 8, tp 2, etp unset (= tp = 2), ep 2, pp 2. Each stage is 4 ranks,
// rank = etp + 2*(ep + 2*(edp + 1*pp)) with edp 1.
TEST(Topology, EtpDefaultsToTp) {
  RankLayout L(grid(8, 2, 1, 2, 2));
  EXPECT_EQ(L.etp(), 2);
  EXPECT_EQ(L.spec().etp, 2);
  EXPECT_EQ(L.edp(), 1);
  EXPECT_EQ(sorted(L.groups(CommGroup::ETP)), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::EP)), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  // etp fastest: group rank etp + 2*ep
  EXPECT_EQ(sorted(L.groups(CommGroup::ETP_EP)), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::EDP)), singletons(8));
  EXPECT_EQ(sorted(L.groups(CommGroup::PP)), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(L.index_in(CommGroup::ETP_EP, 6), 2);  // 6: etp 0, ep 1 in stage 1
}

// Experts do not use cp: the cp ranks serve as more ep (or edp) ranks.
TEST(Topology, CpRanksServeAsExpertRanks) {
  // tp2 cp2 dp2, etp = tp = 2: rank = etp + 2*(ep + ep*edp)
  RankLayout L(grid(8, 2, 2, 1, 2));
  EXPECT_EQ(L.edp(), 2);
  EXPECT_EQ(sorted(L.groups(CommGroup::EP)), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::EP)), sorted(L.groups(CommGroup::CP)));
  EXPECT_EQ(sorted(L.groups(CommGroup::EDP)), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  RankLayout L4(grid(8, 2, 2, 1, 4));
  EXPECT_EQ(sorted(L4.groups(CommGroup::EP)), sorted(L4.groups(CommGroup::DP_CP)));
  EXPECT_EQ(sorted(L4.groups(CommGroup::EDP)), singletons(8));
  // tp1 cp2 dp4, ep 4: a cp pair {0,1} sits inside one ep group
  RankLayout C(grid(8, 1, 2, 1, 4));
  EXPECT_EQ(sorted(C.groups(CommGroup::CP)), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(sorted(C.groups(CommGroup::EP)), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(sorted(C.groups(CommGroup::EDP)), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(Topology, Pp4EmbeddingIsFirstAndLastStage) {
  RankLayout L(grid(8, 2, 1, 4));
  EXPECT_EQ(L.dp(), 1);
  EXPECT_EQ(sorted(L.groups(CommGroup::PP)), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::EMBEDDING)), (Groups{{0, 6}, {1, 7}, {2}, {3}, {4}, {5}}));
  EXPECT_TRUE(L.in_embedding_group(7));
  EXPECT_FALSE(L.in_embedding_group(2));
  EXPECT_EQ(L.pp_prev_rank(0), 6);  // stage 0's previous is the last stage (ring)
  EXPECT_EQ(L.pp_next_rank(3), 5);
}

TEST(Topology, SingleRank) {
  RankLayout L(grid(1, 1, 1, 1));
  EXPECT_EQ(L.dp(), 1);
  EXPECT_EQ(L.edp(), 1);
  for (int g = 0; g < kNumCommGroups; ++g)
    EXPECT_EQ(L.groups(CommGroup(g)), (Groups{{0}})) << group_name(CommGroup(g));
  EXPECT_EQ(L.pp_prev_rank(0), 0);
  EXPECT_TRUE(L.in_embedding_group(0));
}

// Membership against the Megatron-Core transcription: chosen grids of 8, 16 and 64 ranks
// (64: Qwen3-MoE-style layouts), then every grid of up to 16 ranks.
TEST(Topology, MatchesMegatronRankGenerator) {
  const GridSpec chosen[] = {
      // world 8
      grid(8, 1, 1, 1, 2, 1), grid(8, 1, 1, 1, 4, 1), grid(8, 1, 1, 1, 8, 1),
      grid(8, 2, 1, 1, 4, 1), grid(8, 2, 1, 1, 2, 2), grid(8, 1, 1, 2, 2, 1),
      grid(8, 1, 2, 1, 4, 1), grid(8, 2, 2, 1, 4, 1), grid(8, 2, 1, 2, 4, 1),
      // world 16
      grid(16, 1, 1, 1, 8, 1), grid(16, 2, 1, 1, 8, 1), grid(16, 2, 1, 2, 2, 2),
      grid(16, 2, 2, 2, 4, 1), grid(16, 4, 1, 1, 2, 2),
      // world 64
      grid(64, 1, 1, 1, 8, 1), grid(64, 2, 1, 1, 8, 1), grid(64, 2, 1, 2, 2, 2),
      grid(64, 4, 2, 2, 8, 1), grid(64, 8, 1, 2, 4, 4), grid(64, 1, 1, 4, 16, 1)};
  for (const GridSpec& s : chosen) {
    SCOPED_TRACE(describe(s));
    expect_megatron_groups(RankLayout(s));
  }
  const int grids = for_each_small_grid([](const GridSpec& s) {
    SCOPED_TRACE(describe(s));
    expect_megatron_groups(RankLayout(s));
  });
  EXPECT_GT(grids, 500);
}

// Invariants on every grid of up to 16 ranks.
TEST(Topology, InvariantsOnAllSmallGrids) {
  const int grids = for_each_small_grid([](const GridSpec& s) {
    SCOPED_TRACE(describe(s));
    RankLayout L(s);
    const int world = s.world, pp = s.pp;
    EXPECT_EQ(L.tp() * L.cp() * L.dp() * pp, world);
    EXPECT_EQ(L.etp() * L.ep() * L.edp() * pp, world);
    for (int g = 0; g < kNumCommGroups; ++g) {
      const CommGroup kind = CommGroup(g);
      std::set<int> seen;
      for (const auto& members : L.groups(kind)) {
        if (kind == CommGroup::MIRROR) {  // pp ranks r and pp - 1 - r (pp's middle alone)
          const int r = L.coord_of(members[0]).pp;
          EXPECT_EQ(int(members.size()), r == pp - 1 - r ? 1 : 2);
          if (members.size() == 2) {
            EXPECT_EQ(L.coord_of(members[1]).pp, pp - 1 - r);
          }
        } else if (kind != CommGroup::EMBEDDING) {
          EXPECT_EQ(int(members.size()), expected_size(kind, L)) << group_name(kind);
        }
        for (size_t i = 0; i < members.size(); ++i) {
          EXPECT_TRUE(seen.insert(members[i]).second) << "rank twice";
          EXPECT_EQ(L.index_in(kind, members[i]), int(i));
          EXPECT_EQ(&L.group_of(kind, members[i]), &members);
        }
      }
      EXPECT_EQ(int(seen.size()), world) << group_name(kind) << " not a partition";
    }
    for (int r = 0; r < world; ++r) {
      const RankCoord c = L.coord_of(r);
      EXPECT_EQ(r, c.tp + s.tp * (c.cp + s.cp * (c.dp + L.dp() * c.pp)));
      EXPECT_EQ(L.rank_of(c), r);
      const ExpertCoord x = L.expert_coord_of(r);
      EXPECT_EQ(r, x.etp + L.etp() * (x.ep + L.ep() * (x.edp + L.edp() * x.pp)));
      EXPECT_EQ(L.expert_rank_of(x), r);
      // the grids agree on the stage, so the pp group is the expert grid's too: the
      // ranks at r's (etp, ep, edp) in every stage
      EXPECT_EQ(x.pp, c.pp);
      const auto& p = L.group_of(CommGroup::PP, r);
      for (int i = 0; i < pp; ++i) {
        const ExpertCoord m = L.expert_coord_of(p[i]);
        EXPECT_EQ(m.etp, x.etp); EXPECT_EQ(m.ep, x.ep); EXPECT_EQ(m.edp, x.edp);
        EXPECT_EQ(m.pp, i);
      }
      // ep, etp and edp tile r's stage: they cross only at r, and etp_ep is etp x ep with
      // group rank etp + etp*ep
      const auto& e = L.group_of(CommGroup::EP, r);
      const auto& t = L.group_of(CommGroup::ETP, r);
      const auto& d = L.group_of(CommGroup::EDP, r);
      const auto& te = L.group_of(CommGroup::ETP_EP, r);
      auto common = [](const std::vector<int>& a, const std::vector<int>& b) {
        int n = 0;
        for (int m : a) n += int(std::count(b.begin(), b.end(), m));
        return n;
      };
      EXPECT_EQ(common(e, t), 1);
      EXPECT_EQ(common(e, d), 1);
      EXPECT_EQ(common(t, d), 1);
      EXPECT_EQ(common(te, d), 1);
      EXPECT_EQ(common(e, te), int(e.size()));
      EXPECT_EQ(common(t, te), int(t.size()));
      for (size_t i = 0; i < te.size(); ++i) {
        const ExpertCoord m = L.expert_coord_of(te[i]);
        EXPECT_EQ(int(i), m.etp + L.etp() * m.ep);
        EXPECT_EQ(m.edp, x.edp); EXPECT_EQ(m.pp, x.pp);
      }
      for (int m : d) EXPECT_EQ(L.expert_coord_of(m).pp, x.pp);
      EXPECT_EQ(L.coord_of(L.pp_next_rank(r)).pp, (c.pp + 1) % pp);
      EXPECT_EQ(L.pp_prev_rank(L.pp_next_rank(r)), r);
      EXPECT_EQ(int(L.group_of(CommGroup::EMBEDDING, r).size()),
                pp > 1 && (c.pp == 0 || c.pp == pp - 1) ? 2 : 1);
    }
  });
  EXPECT_GT(grids, 500);
}

TEST(Topology, BadSizesThrowNamingTheFlags) {
  try {
    RankLayout L(grid(6, 4, 1, 1));
    FAIL() << "world 6 with tp 4 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--tp 4"), std::string::npos) << e.what();
  }
  try {
    RankLayout L(grid(8, 1, 1, 2, 8));
    FAIL() << "ep 8 in a stage of 4 ranks accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "--expert-tensor-parallel-size x --expert-model-parallel-size must divide "
                 "world / pipeline-model-parallel-size: 4 % 8 != 0 (--tp 1 --cp 1 --pp 2 "
                 "--ep 8 --etp 1, world size 8)");
  }
  EXPECT_THROW(RankLayout(grid(4, 1, 1, 1, 3)), std::invalid_argument);     // ep 3 in 4
  EXPECT_THROW(RankLayout(grid(8, 2, 1, 1, 4, 4)), std::invalid_argument);  // 16 > 8
  EXPECT_THROW(RankLayout(grid(8, 2, 1, 1, 8)), std::invalid_argument);     // etp 2 x ep 8
  EXPECT_THROW(RankLayout(grid(12, 1, 1, 2, 4)), std::invalid_argument);    // 6 % 4
  EXPECT_THROW(RankLayout(grid(4, 0, 1, 1)), std::invalid_argument);
  EXPECT_THROW(RankLayout(grid(4, 1, 1, 1, 1, -1)), std::invalid_argument);
  EXPECT_THROW(RankLayout(grid(8, 2, 2, 4)), std::invalid_argument);        // 16 > 8
  // No longer carved out of dp x cp: ep 8 over tp 2 x dp 4 is a valid expert grid.
  EXPECT_NO_THROW(RankLayout(grid(8, 2, 1, 1, 8, 1)));
}

TEST(Topology, DescribeGrid) {
  const std::string s = describe_grid(RankLayout(grid(8, 2, 1, 2)));
  EXPECT_NE(s.find("dense grid: world 8 = tp 2 x cp 1 x dp 2 x pp 2"), std::string::npos) << s;
  EXPECT_NE(s.find("expert grid: world 8 = etp 2 x ep 1 x edp 2 x pp 2"), std::string::npos)
      << s;
  EXPECT_NE(s.find("rank = etp_rank + 2*(ep_rank + 1*(edp_rank + 2*pp_rank))"),
            std::string::npos) << s;
  EXPECT_NE(s.find("[0 1] [2 3] [4 5] [6 7]"), std::string::npos) << s;
  EXPECT_NE(s.find("dp_cp"), std::string::npos) << s;
  EXPECT_NE(s.find("etp_ep"), std::string::npos) << s;
}
