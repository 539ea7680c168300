// tests/test_rank_trace.cpp: the report's view of every rank (report/rank_report.h): the
// "memory per rank" table, and the measured trace built from RankMetrics the way the
// gather hands them to rank 0, here made from the plan's simulation with one rank's clock
// skewed, so a receive would end before its send started unless the trace aligns them.
// The same on real runs: tests/mpi/trace.sh.
#include <gtest/gtest.h>
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>
#include "plan/plan.h"
#include "report/rank_report.h"
#include "report/timeline.h"

namespace paralab {
namespace {

Plan pipeline_plan(int pp, int dp) {
  ModelConfig m;
  m.num_layers = 4;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.seq_length = 32;
  m.vocab_size = 256;
  TrainConfig t;
  t.micro_batch_size = 1;
  t.global_batch_size = 4 * dp;
  ParallelConfig p;
  p.world_size = pp * dp;
  p.pipeline_parallel = pp;
  return make_plan(m, t, p);
}

// Every world rank's measurements as if the simulation (1 unit = 1 ms) had run: actions at
// their simulated times, each exchange from the slot before it to the slot's first action.
std::vector<RankMetrics> simulated_ranks(const Plan& plan) {
  const Schedule& s = plan.pipeline.schedule;
  const Simulation& sim = plan.pipeline.sim;
  std::vector<RankMetrics> ranks(plan.ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    RankMetrics& m = ranks[r];
    const int pp = plan.ranks[r].pp_rank;
    m.rank = (int)r;
    m.start_seconds = 100.0;  // the steady clock's reading as the run starts
    double free_at = 0;
    for (size_t k = 0; k < s.ranks[pp].size(); ++k) {
      const ActionTiming t{sim.timing[pp][k].start * 1e-3, sim.timing[pp][k].end * 1e-3};
      if (k == 0 || s.ranks[pp][k].slot != s.ranks[pp][k - 1].slot)
        m.exchanges.push_back({free_at, std::max(t.start, free_at + 1e-6)});
      m.actions.push_back(t);
      free_at = t.end;
    }
    while (m.exchanges.size() < exchanges(s, pp).size())
      m.exchanges.push_back({free_at, free_at + 1e-6});
    m.run_seconds = free_at + 1e-6;
    // a dp all-reduce after the pipeline, and a tp one overlapping it (a second comm lane)
    m.comm_events.push_back({CommGroup::DP, CommOp::ALL_REDUCE, 100.0 + free_at + 2e-6,
                             100.0 + free_at + 3e-3});
    m.comm_events.push_back({CommGroup::TP, CommOp::ALL_REDUCE, 100.0 + free_at + 1e-3,
                             100.0 + free_at + 2e-3});
  }
  return ranks;
}

TEST(RankTrace, EveryRankAClockAlignedFlowsForward) {
  const Plan plan = pipeline_plan(2, 2);  // world 4: two pipelines of two stages
  std::vector<RankMetrics> ranks = simulated_ranks(plan);
  std::vector<int> pipeline_of;
  for (const RankPlan& rp : plan.ranks) pipeline_of.push_back(rp.dp_rank);
  // Stage 1 of each pipeline reads a clock 5 ms behind, and its offset estimate missed it.
  for (RankMetrics& m : ranks)
    if (plan.ranks[m.rank].pp_rank == 1) m.start_seconds -= 5e-3;
  std::vector<TraceProcess> procs;
  std::vector<TraceSpan> spans;
  std::vector<TraceFlow> flows;
  measured_trace(plan, ranks, pipeline_of, &procs, &spans, &flows);
  ASSERT_EQ(procs.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(procs[r].rank, r);
    EXPECT_EQ(procs[r].lanes.at(0), "compute");
    EXPECT_EQ(procs[r].lanes.at(1), "comm");
    EXPECT_EQ(procs[r].lanes.size(), 3u) << "the overlapping tp call takes a second lane";
  }
  // 1F1B, m 4, p 2: 4 activations and 4 gradients per pipeline.
  EXPECT_EQ(flows.size(), 16u);
  for (const TraceFlow& f : flows) {
    EXPECT_GE(f.to_us, f.from_us) << f.name;
    EXPECT_EQ(plan.ranks[f.from_rank].dp_rank, plan.ranks[f.to_rank].dp_rank) << f.name;
    EXPECT_GE(f.from_lane, 1);
  }
  int compute = 0, pp = 0, dp = 0, tp = 0;
  double earliest = 1e300;
  for (const TraceSpan& s : spans) {
    EXPECT_GT(s.dur_us, 0) << s.name;
    compute += s.category == "compute", pp += s.category == "pp";
    dp += s.category == "dp", tp += s.category == "tp";
    earliest = std::min(earliest, s.start_us);
  }
  EXPECT_EQ(compute, 4 * 8);
  EXPECT_EQ(dp, 4);
  EXPECT_EQ(tp, 4);
  EXPECT_GT(pp, 0);
  EXPECT_NEAR(earliest, 0, 1e-6);  // from the earliest instant recorded
}

TEST(RankTrace, CommEventsBoundedPerStep) {
  CommStats stats;
  for (size_t k = 0; k < CommStats::kMaxEvents + 10; ++k)
    stats.record_event({CommGroup::TP, CommOp::ALL_REDUCE, 1.0 * k, 1.0 * k + 0.5});
  EXPECT_EQ(stats.events().size(), CommStats::kMaxEvents);
  EXPECT_EQ(stats.events_dropped(), 10u);
  EXPECT_EQ(stats.events().front().end_s, 0.5);
  stats.reset();
  EXPECT_TRUE(stats.events().empty());
  EXPECT_EQ(stats.events_dropped(), 0u);
}

TEST(RankTrace, EmptySlicesNotWritten) {
  const std::vector<TraceSpan> spans = {{0, 0, "F0", "compute", 0, 5},
                                        {0, 0, "idle", "idle", 5, 0},
                                        {0, 0, "idle", "idle", 5, 1e-5}};
  const std::string j = chrome_trace_json(spans, {}, "t");
  EXPECT_NE(j.find("\"F0\""), std::string::npos);
  EXPECT_EQ(j.find("\"idle\""), std::string::npos) << j;  // 0, and under a nanosecond
}

TEST(RankTrace, MemoryPerRankEveryCategory) {
  const Plan plan = pipeline_plan(2, 1);
  std::vector<RankMetrics> ranks(2);
  for (int r = 0; r < 2; ++r) {
    ranks[r].rank = r;
    for (int c = 0; c < kNumMemoryCategories; ++c) ranks[r].memory_bytes[c] = plan.ranks[r].memory.at(c);
    ranks[r].peak_memory_bytes = plan.ranks[r].memory.total();
  }
  const std::string t = rank_memory_table(plan, ranks);
  EXPECT_NE(t.find("total is the peak of their sum"), std::string::npos) << t;
  std::istringstream in(t);
  std::string line;
  int pred = 0, meas = 0;
  while (std::getline(in, line)) {
    EXPECT_LE(line.size(), 120u) << line;
    pred += line.find(" pred ") != std::string::npos;
    meas += line.find(" meas ") != std::string::npos;
    if (line.find("rank pp tp cp dp") == std::string::npos) continue;
    for (const char* c : {"params", "grads", "master", "optim", "activ", "recomp", "comm_buf",
                          "logits", "work", "total"}) {
      EXPECT_NE(line.find(c), std::string::npos) << c;
    }
  }
  EXPECT_EQ(pred, 2);
  EXPECT_EQ(meas, 2);
}

TEST(RankTrace, MeasuredTimelineStatesItsScaleOnce) {
  const Plan plan = pipeline_plan(2, 1);
  const std::vector<RankMetrics> ranks = simulated_ranks(plan);
  const std::string t = measured_timelines(plan, ranks, {0, 0});
  EXPECT_NE(t.find("timeline, measured (last step): 1f1b, p 2, m 4; F 1, B 3 (input + weight "
                   "gradient) ms (mean per action), 1 ms = 4 columns; '.' idle"),
            std::string::npos) << t;
  // (an F of 1 ms reads 0.9999..., so F0 and a space take 3 columns per ms: 4, rounded up)
  EXPECT_NE(t.find("rank 1: ....F0  B0          F1"), std::string::npos) << t;
}

}  // namespace
}  // namespace paralab
