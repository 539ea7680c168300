// tests/test_topology.cpp: the rank grid and group membership (pure: no MPI launch).
//
// Explicit membership for a few grids worked out by hand from
// rank = tp + tp*(cp + cp*(dp + dp*pp)), then invariants over every grid up to 16 ranks.
#include <gtest/gtest.h>
#include <algorithm>
#include <set>
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
GridSpec grid(int world, int tp, int cp, int pp, int ep = 1) {
  GridSpec s;
  s.world = world; s.tp = tp; s.cp = cp; s.pp = pp; s.ep = ep;
  return s;
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
  EXPECT_EQ(sorted(L.groups(CommGroup::EP)), singletons(8));
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

TEST(Topology, Ep2WithinDp4) {
  RankLayout L(grid(4, 1, 1, 1, 2));
  EXPECT_EQ(L.dp(), 4);
  EXPECT_EQ(L.edp(), 2);
  EXPECT_EQ(L.groups(CommGroup::DP_CP), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::EP)), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::EDP)), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(L.index_in(CommGroup::EP, 3), 1);
  EXPECT_EQ(L.index_in(CommGroup::EDP, 3), 1);
}

TEST(Topology, EpCarvedFromDpTimesCp) {
  // tp2 cp2 dp2 ep2: the ep blocks are consecutive in the dp_cp order {0,2,4,6}.
  RankLayout L(grid(8, 2, 2, 1, 2));
  EXPECT_EQ(sorted(L.groups(CommGroup::EP)), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(sorted(L.groups(CommGroup::EDP)), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  RankLayout L4(grid(8, 2, 2, 1, 4));
  EXPECT_EQ(sorted(L4.groups(CommGroup::EP)), sorted(L4.groups(CommGroup::DP_CP)));
  EXPECT_EQ(sorted(L4.groups(CommGroup::EDP)), singletons(8));
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
  for (int g = 0; g < kNumCommGroups; ++g)
    EXPECT_EQ(L.groups(CommGroup(g)), (Groups{{0}})) << group_name(CommGroup(g));
  EXPECT_EQ(L.pp_prev_rank(0), 0);
  EXPECT_TRUE(L.in_embedding_group(0));
}

// Invariants on every grid of up to 16 ranks.
TEST(Topology, InvariantsOnAllSmallGrids) {
  int grids = 0;
  for (int world = 1; world <= 16; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int cp = 1; cp <= world; ++cp)
        for (int pp = 1; pp <= world; ++pp) {
          if (world % (tp * cp * pp)) continue;
          const int dp = world / (tp * cp * pp);
          for (int ep = 1; ep <= dp * cp; ++ep) {
            if ((dp * cp) % ep) continue;
            ++grids;
            RankLayout L(grid(world, tp, cp, pp, ep));
            SCOPED_TRACE(testing::Message() << "world " << world << " tp " << tp << " cp "
                                            << cp << " pp " << pp << " ep " << ep);
            const int expected_size[] = {tp, cp, pp, dp, dp * cp, ep, dp * cp / ep, 0, world};
            for (int g = 0; g < kNumCommGroups; ++g) {
              const CommGroup kind = CommGroup(g);
              std::set<int> seen;
              for (const auto& members : L.groups(kind)) {
                if (kind != CommGroup::EMBEDDING) {
                  EXPECT_EQ(int(members.size()), expected_size[g]) << group_name(kind);
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
              EXPECT_EQ(r, c.tp + tp * (c.cp + cp * (c.dp + dp * c.pp)));
              EXPECT_EQ(L.rank_of(c), r);
              // ep and edp tile the rank's dp_cp group and cross only at the rank itself
              const auto& dpcp = L.group_of(CommGroup::DP_CP, r);
              const auto& e = L.group_of(CommGroup::EP, r);
              const auto& d = L.group_of(CommGroup::EDP, r);
              for (int m : e) EXPECT_NE(std::find(dpcp.begin(), dpcp.end(), m), dpcp.end());
              for (int m : d) EXPECT_NE(std::find(dpcp.begin(), dpcp.end(), m), dpcp.end());
              int both = 0;
              for (int m : e) both += std::count(d.begin(), d.end(), m);
              EXPECT_EQ(both, 1);
              EXPECT_EQ(L.coord_of(L.pp_next_rank(r)).pp, (c.pp + 1) % pp);
              EXPECT_EQ(L.pp_prev_rank(L.pp_next_rank(r)), r);
              EXPECT_EQ(int(L.group_of(CommGroup::EMBEDDING, r).size()),
                        pp > 1 && (c.pp == 0 || c.pp == pp - 1) ? 2 : 1);
            }
          }
        }
  EXPECT_GT(grids, 100);
}

TEST(Topology, BadSizesThrowNamingTheFlags) {
  try {
    RankLayout L(grid(6, 4, 1, 1));
    FAIL() << "world 6 with tp 4 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--tp 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(RankLayout(grid(4, 1, 1, 1, 3)), std::invalid_argument);  // ep 3 in dp 4
  EXPECT_THROW(RankLayout(grid(4, 0, 1, 1)), std::invalid_argument);
  EXPECT_THROW(RankLayout(grid(8, 2, 2, 4)), std::invalid_argument);     // 16 > 8
}

TEST(Topology, DescribeGrid) {
  const std::string s = describe_grid(RankLayout(grid(8, 2, 1, 2)));
  EXPECT_NE(s.find("world 8 = tp 2 x cp 1 x dp 2 x pp 2"), std::string::npos) << s;
  EXPECT_NE(s.find("[0 1] [2 3] [4 5] [6 7]"), std::string::npos) << s;
  EXPECT_NE(s.find("dp_cp"), std::string::npos) << s;
}
