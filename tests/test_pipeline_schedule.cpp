// tests/test_pipeline_schedule.cpp: the pipeline schedules as data (parallel/
// pipeline_schedule.h) for every valid p <= 8, m <= 16, v <= 4: each action in its place,
// sends matching receives in a deadlock-free order, the simulated bubble against the closed
// forms of notes/formulas.md, the microbatches each stage holds; and the timeline writers
// (report/timeline.h). The plan's pipeline stages are tested in test_plan_pipeline.cpp.
#include <gtest/gtest.h>
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>
#include "report/timeline.h"
#include "parallel/pipeline_schedule.h"

namespace paralab {
namespace {

const PipelineSchedule kKinds[] = {PipelineSchedule::GPIPE,       PipelineSchedule::ONE_F_ONE_B,
                                   PipelineSchedule::INTERLEAVED, PipelineSchedule::ZB_H1,
                                   PipelineSchedule::ZB_V,        PipelineSchedule::DUALPIPE_V,
                                   PipelineSchedule::DUALPIPE};

// Every shape the tests sweep: p <= 8, m <= 16, v <= 4, valid for its schedule.
std::vector<PipelineShape> valid_shapes(PipelineSchedule kind) {
  std::vector<PipelineShape> out;
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m)
      for (int v = 1; v <= 4; ++v) {
        const PipelineShape s{kind, p, m, v};
        if (check_pipeline_shape(s).empty()) out.push_back(s);
      }
  return out;
}

std::string name(const PipelineShape& s) {
  return std::string(schedule_name(s.kind)) + " p" + std::to_string(s.p) + " m" +
         std::to_string(s.m) + " v" + std::to_string(s.v);
}

std::string order(const Schedule& s, int rank) {
  std::string t;
  for (const Action& a : s.ranks[rank]) t += (t.empty() ? "" : " ") + action_label(a, s.shape.v);
  return t;
}

// Megatron's interleaved warm-up (pipeline_schedule.h): all forwards when m == p.
int interleaved_warmup(const PipelineShape& s, int r) {
  const int total = s.m * s.v;
  return s.m == s.p ? total : std::min((s.p - r - 1) * 2 + (s.v - 1) * s.p, total);
}

TEST(PipelineSchedule, NamesAndShapes) {
  for (PipelineSchedule k : kKinds) {
    PipelineSchedule back = PipelineSchedule::GPIPE;
    ASSERT_TRUE(parse_schedule_name(schedule_name(k), &back));
    EXPECT_EQ(back, k);
  }
  PipelineSchedule unused;
  EXPECT_FALSE(parse_schedule_name("zb-h2", &unused));
  EXPECT_EQ(check_pipeline_shape({PipelineSchedule::DUALPIPE, 3, 6, 2}),
            "dualpipe needs p even (each rank's mirror holds its two stages) (p 3, m 6, v 2)");
  EXPECT_EQ(check_pipeline_shape({PipelineSchedule::DUALPIPE, 4, 9, 2}),
            "dualpipe needs m even (half the microbatches each way) (p 4, m 9, v 2)");
  EXPECT_EQ(check_pipeline_shape({PipelineSchedule::DUALPIPE_V, 4, 7, 2}),
            "dualpipev needs m >= 2p (p 4, m 7, v 2)");
  EXPECT_EQ(check_pipeline_shape({PipelineSchedule::ZB_V, 4, 8, 1}),
            "zb-v holds v = 2 chunks per rank (p 4, m 8, v 1)");
  EXPECT_EQ(check_pipeline_shape({PipelineSchedule::ZB_V, 1, 8, 2}), "zb-v needs p >= 2 (p 1, m 8, v 2)");
  EXPECT_EQ(check_pipeline_shape({PipelineSchedule::ZB_V, 4, 1, 2}), "");  // any m (PyTorch's)
  EXPECT_EQ(check_pipeline_shape({PipelineSchedule::INTERLEAVED, 4, 6, 2}),
            "interleaved needs m to be a multiple of p (p 4, m 6, v 2)");
  EXPECT_EQ(check_pipeline_shape({PipelineSchedule::INTERLEAVED, 4, 8, 1}),
            "interleaved needs v >= 2 virtual stages (p 4, m 8, v 1)");
  EXPECT_EQ(check_pipeline_shape({PipelineSchedule::ZB_H1, 4, 8, 2}),
            "zb-h1 takes no virtual stages (p 4, m 8, v 2)");
  EXPECT_EQ(check_pipeline_shape({PipelineSchedule::INTERLEAVED, 1, 4, 2}),
            "interleaved needs p >= 2 (p 1, m 4, v 2)");
  EXPECT_THROW(make_schedule({PipelineSchedule::GPIPE, 2, 0, 1}), std::invalid_argument);
}

// The orders by hand: picotron's three 1F1B phases, Megatron's interleaved groups of p,
// ZB-H1's (F_x, B_{x-(p-1-r)}, W_{x-(p-1)}) slots (Qi et al. Fig. 3).
TEST(PipelineSchedule, OrdersByHand) {
  const Schedule f = make_schedule({PipelineSchedule::ONE_F_ONE_B, 4, 8, 1});
  EXPECT_EQ(order(f, 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(order(f, 2), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(order(f, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  EXPECT_EQ(order(make_schedule({PipelineSchedule::ONE_F_ONE_B, 4, 2, 1}), 0), "F0 F1 B0 B1");
  EXPECT_EQ(order(make_schedule({PipelineSchedule::GPIPE, 2, 3, 1}), 1), "F0 F1 F2 B0 B1 B2");
  // p 2, m 4, v 2: rank 0 warms up (2-0-1) 2 + (2-1) 2 = 4 chunk-forwards, rank 1 2.
  const Schedule i = make_schedule({PipelineSchedule::INTERLEAVED, 2, 4, 2});
  EXPECT_EQ(order(i, 0), "F0a F1a F0b F1b F2a B0b F3a B1b F2b B0a F3b B1a B2b B3b B2a B3a");
  EXPECT_EQ(order(i, 1), "F0a F1a F0b B0b F1b B1b F2a B0a F3a B1a F2b B2b F3b B3b B2a B3a");
  // The steady pairs share one exchange (Megatron's send_forward_backward_recv_...).
  EXPECT_EQ(i.ranks[0][4].slot, i.ranks[0][5].slot);
  EXPECT_EQ(i.ranks[0][3].slot + 1, i.ranks[0][4].slot);
  const Schedule z = make_schedule({PipelineSchedule::ZB_H1, 4, 6, 1});
  EXPECT_EQ(order(z, 0), "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5");
  EXPECT_EQ(order(z, 3), "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5");
  // Implied messages: F of chunk c on rank r is model stage c p + r.
  const Action& a = i.ranks[1][2];  // F0b on rank 1: model stage 3, the last
  EXPECT_EQ(a.stage, 3);
  ASSERT_EQ(a.recvs.size(), 1u);
  EXPECT_EQ(a.recvs[0].from_rank, 0);
  EXPECT_EQ(a.recvs[0].from_stage, 2);
  EXPECT_TRUE(a.sends.empty());
  const Action& b = i.ranks[0][5];  // B0b on rank 0: model stage 2 sends to stage 1, rank 1
  ASSERT_EQ(b.sends.size(), 1u);
  EXPECT_EQ(b.sends[0].kind, Message::GRADIENT);
  EXPECT_EQ(b.sends[0].to_rank, 1);
  EXPECT_EQ(b.sends[0].to_stage, 1);
}

// Issue 5's schedule tests, on every valid shape.
TEST(PipelineSchedule, EveryShapeIsConsistent) {
  int shapes = 0;
  for (PipelineSchedule kind : kKinds)
    for (const PipelineShape& sh : valid_shapes(kind)) {
      SCOPED_TRACE(name(sh));
      ++shapes;
      const Schedule s = make_schedule(sh);
      ASSERT_EQ((int)s.ranks.size(), sh.p);
      EXPECT_EQ(check_schedule(s), "");
      // Every microbatch's F precedes its B (and its B its W) on each stage.
      for (int r = 0; r < sh.p; ++r) {
        std::map<std::tuple<int, int, int>, int> at;
        for (int k = 0; k < (int)s.ranks[r].size(); ++k) {
          const Action& a = s.ranks[r][k];
          at[std::make_tuple((int)a.type, a.microbatch, a.chunk)] = k;
        }
        for (int i = 0; i < sh.m; ++i)
          for (int c = 0; c < sh.v; ++c) {
            if (sh.rank_of(sh.stage_of(r, c), i) != r) continue;  // DualPipe: the other copy's
            EXPECT_LT(at.at(std::make_tuple((int)ActionType::F, i, c)),
                      at.at(std::make_tuple((int)ActionType::B, i, c)));
            auto w = at.find(std::make_tuple((int)ActionType::W, i, c));
            if (w != at.end()) {
              EXPECT_LT(at.at(std::make_tuple((int)ActionType::B, i, c)), w->second);
            }
          }
      }
      // Each send has exactly one receive, on the rank it names, and vice versa.
      std::map<std::tuple<int, int, int, int>, int> sent, received;
      for (int r = 0; r < sh.p; ++r)
        for (const Action& a : s.ranks[r]) {
          for (const Message& m : a.sends) {
            EXPECT_EQ(m.from_rank, r);
            ++sent[std::make_tuple((int)m.kind, m.microbatch, m.from_stage, m.to_rank)];
          }
          for (const Message& m : a.recvs) {
            EXPECT_EQ(m.to_rank, r);
            ++received[std::make_tuple((int)m.kind, m.microbatch, m.from_stage, r)];
          }
        }
      EXPECT_EQ(sent, received);
      for (const auto& kv : sent) EXPECT_EQ(kv.second, 1);
      EXPECT_EQ((int)sent.size(), 2 * sh.m * (sh.model_stages() - 1));
      // Posting order matches per pair, and blocking exchanges complete.
      EXPECT_EQ(check_exchanges(s), "");

      const Simulation sim = simulate(s);
      ASSERT_FALSE(sim.deadlock) << sim.blocked;
      // The next stage's F follows this stage's F (the simulated times).
      std::map<std::pair<int, int>, ActionTiming> f;
      for (int r = 0; r < sh.p; ++r)
        for (size_t k = 0; k < s.ranks[r].size(); ++k)
          if (s.ranks[r][k].type == ActionType::F)
            f[{s.ranks[r][k].stage, s.ranks[r][k].microbatch}] = sim.timing[r][k];
      for (const auto& kv : f)
        if (kv.first.first > 0) {
          EXPECT_GE(kv.second.start, f.at({kv.first.first - 1, kv.first.second}).end);
        }

      // Activations held: 1F1B min(p - r, m), GPipe m, interleaved warm-up + 1 chunks; the
      // DeepSeek-V3 report's Table 2 in (microbatch, chunk) pairs of 1/PP of the model each:
      // DualPipe and DualPipeV PP + 1 (PP stages: p and 2p), ZB-V 1F1B's PP (2p) once m fills
      // the V.
      for (int r = 0; r < sh.p; ++r) {
        const int held = sim.peak_held[r];
        switch (kind) {
          case PipelineSchedule::GPIPE: EXPECT_EQ(held, sh.m); break;
          case PipelineSchedule::ONE_F_ONE_B:
          case PipelineSchedule::ZB_H1: EXPECT_EQ(held, std::min(sh.p - r, sh.m)); break;
          case PipelineSchedule::INTERLEAVED:
            EXPECT_EQ(held, std::min(interleaved_warmup(sh, r) + 1, sh.m * sh.v));
            break;
          case PipelineSchedule::ZB_V:
            if (sh.m >= 2 * sh.p) {
              EXPECT_EQ(held, 2 * sh.p);
            }
            break;
          case PipelineSchedule::DUALPIPE_V:
          case PipelineSchedule::DUALPIPE: EXPECT_EQ(held, sh.model_stages() + 1); break;
        }
      }
    }
  // interleaved: v >= 2, m % p == 0; zb-v: p >= 2; dualpipev: m >= 2p; dualpipe: p, m even
  EXPECT_EQ(shapes, 128 * 3 + 78 + 112 + 49 + 16);
}

// With zero communication time the simulation reproduces the closed forms exactly.
TEST(PipelineSchedule, BubbleMatchesClosedForms) {
  ActionCosts equal;  // F = B = 1: the papers' figures
  equal.B = 1;
  equal.W = 0;
  for (PipelineSchedule kind : kKinds)
    for (const PipelineShape& sh : valid_shapes(kind)) {
      SCOPED_TRACE(name(sh));
      const double p = sh.p, m = sh.m, v = sh.v;
      for (const ActionCosts& c : {ActionCosts{}, equal}) {
        const Simulation sim = simulate(make_schedule(sh), c);
        const BubbleClosedForm cf = bubble_closed_form(sh, c);
        switch (kind) {
          case PipelineSchedule::GPIPE:
          case PipelineSchedule::ONE_F_ONE_B:
            EXPECT_NEAR(sim.bubble, (p - 1) / (m + p - 1), 1e-12);
            EXPECT_NEAR(sim.bubble_vs_ideal, (p - 1) / m, 1e-12);
            break;
          case PipelineSchedule::INTERLEAVED:
            EXPECT_NEAR(sim.bubble_vs_ideal, (p - 1) / (v * m), 1e-12);
            break;
          case PipelineSchedule::ZB_H1:
            // Qi et al.'s (p-1)(T_F + T_B - T_W) per rank assumes the pipeline fills: m >= p.
            if (sh.m >= sh.p) {
              for (double idle : sim.idle) EXPECT_NEAR(idle, (p - 1) * (c.F + c.B - c.W), 1e-9);
            }
            break;
          case PipelineSchedule::ZB_V:  // derived for the list, once it fills the V
            if (sh.m >= 2 * sh.p - 1) {
              for (double idle : sim.idle)
                EXPECT_NEAR(idle, (p - 1) * std::max(c.B, 2 * (c.B - c.W)), 1e-9);
            }
            break;
          case PipelineSchedule::DUALPIPE_V:
          case PipelineSchedule::DUALPIPE:
            // every rank idles alike, no more than the report's (PP/2 - 1)(F&B + B - 3W)
            // with F&B = F + B, the pair run one half after the other
            for (double idle : sim.idle) {
              EXPECT_NEAR(idle, sim.idle[0], 1e-9);
              EXPECT_LE(idle, cf.vs_ideal * sh.m * (c.F + c.B + c.W) *
                                  (kind == PipelineSchedule::DUALPIPE ? 1 : 2) + 1e-9);
            }
            break;
        }
        EXPECT_NEAR(cf.of_step, cf.vs_ideal / (1 + cf.vs_ideal), 1e-12);
        const bool exact = kind == PipelineSchedule::ZB_H1 ? sh.m >= sh.p
                           : kind == PipelineSchedule::ZB_V ? sh.m >= 2 * sh.p - 1
                           : kind != PipelineSchedule::DUALPIPE_V &&
                                 kind != PipelineSchedule::DUALPIPE;
        if (exact) {
          EXPECT_NEAR(sim.bubble, cf.of_step, 1e-12);
          EXPECT_NEAR(sim.bubble_vs_ideal, cf.vs_ideal, 1e-12);
        }
      }
    }
}

// Deferring W shortens the step: ZB-H1 below 1F1B at the same memory, for p >= 2; 1F1B's
// idle per rank is (p-1)(T_F + T_B + T_W).
TEST(PipelineSchedule, ZeroBubbleBeatsOneFOneB) {
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      const Simulation f = simulate(make_schedule({PipelineSchedule::ONE_F_ONE_B, p, m, 1}));
      const Simulation z = simulate(make_schedule({PipelineSchedule::ZB_H1, p, m, 1}));
      EXPECT_LT(z.bubble, f.bubble) << "p " << p << " m " << m;
      EXPECT_LT(z.step_time, f.step_time);
      EXPECT_EQ(z.peak_held, f.peak_held);
      EXPECT_NEAR(f.idle[0], (p - 1) * (1.0 + 2.0 + 1.0), 1e-9);
    }
}

// An order that cannot run is reported, not simulated forever.
TEST(PipelineSchedule, DeadlockIsDetected) {
  Schedule s = make_schedule({PipelineSchedule::ONE_F_ONE_B, 2, 2, 1});
  // Rank 1 runs B0 before F0: B0 needs its own F0.
  std::swap(s.ranks[1][0], s.ranks[1][1]);
  EXPECT_NE(check_schedule(s), "");
  Simulation sim = simulate(s);
  EXPECT_TRUE(sim.deadlock);
  EXPECT_EQ(sim.blocked, "rank 0 at B(0, stage 0); rank 1 at B(0, stage 1)");
  // Rank 1 runs F1 before F0: possible with tags, but NCCL matches in posting order.
  s = make_schedule({PipelineSchedule::GPIPE, 2, 2, 1});
  std::swap(s.ranks[1][0], s.ranks[1][1]);
  EXPECT_FALSE(simulate(s).deadlock);
  EXPECT_EQ(check_exchanges(s),
            "rank 0 -> 1, transfer 0: sent activation of microbatch 0, stage 0 -> 1, received "
            "activation of microbatch 1, stage 0 -> 1");
}

// Evaluation's forward-only schedule (model/evaluate.h) on every valid shape: each rank
// runs every F of its chunks once, one a slot, in the training order, and the blocking
// exchanges complete: the forward-only pass cannot deadlock.
TEST(PipelineSchedule, ForwardOnlyScheduleRunsEveryShape) {
  for (PipelineSchedule kind : kKinds)
    for (const PipelineShape& sh : valid_shapes(kind)) {
      SCOPED_TRACE(name(sh));
      const Schedule train = make_schedule(sh);
      const Schedule f = forward_only_schedule(train);
      ASSERT_EQ(f.ranks.size(), train.ranks.size());
      for (int r = 0; r < sh.p; ++r) {
        ASSERT_EQ((int)f.ranks[r].size(),
                  sh.placement() == StagePlacement::MIRRORED ? sh.m : sh.m * sh.v);
        std::vector<std::pair<int, int>> order, train_order;
        for (int k = 0; k < (int)f.ranks[r].size(); ++k) {
          const Action& a = f.ranks[r][k];
          EXPECT_EQ(a.type, ActionType::F);
          EXPECT_EQ(a.slot, k);
          EXPECT_TRUE(a.sends.empty() || a.sends[0].kind == Message::ACTIVATION);
          order.push_back({a.microbatch, a.chunk});
        }
        for (const Action& a : train.ranks[r])
          if (a.type == ActionType::F) train_order.push_back({a.microbatch, a.chunk});
        EXPECT_EQ(order, train_order);
      }
      EXPECT_EQ(check_exchanges(f), "");
      const Simulation sim = simulate(f);
      EXPECT_FALSE(sim.deadlock) << sim.blocked;
    }
}

TEST(PipelineSchedule, StageLayers) {
  auto looped = [](int p, int v) { return PipelineShape{PipelineSchedule::INTERLEAVED, p, 8, v}; };
  const PipelineShape one_f{PipelineSchedule::ONE_F_ONE_B, 4, 8, 1};
  EXPECT_EQ(pipeline_stage_layers(8, one_f), (std::vector<int>{2, 2, 2, 2}));
  // Model stage c p + r: rank 0 holds stages 0 and 2.
  EXPECT_EQ(pipeline_stage_layers(8, looped(2, 2)), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(pipeline_stage_layers(10, one_f, {1, 3}), (std::vector<int>{1, 3, 3, 3}));
  const PipelineShape three{PipelineSchedule::ONE_F_ONE_B, 3, 8, 1};
  EXPECT_EQ(pipeline_stage_layers(10, three, {0, 2}), (std::vector<int>{4, 4, 2}));
  EXPECT_EQ(pipeline_stage_layers(12, looped(2, 2), {4}), (std::vector<int>{2, 4, 2, 4}));
  EXPECT_THROW(pipeline_stage_layers(10, one_f), std::invalid_argument);       // 10 / 4
  const PipelineShape two{PipelineSchedule::ONE_F_ONE_B, 2, 8, 1};
  EXPECT_THROW(pipeline_stage_layers(10, two, {3, 3}), std::invalid_argument);  // 3 + 3 != 10
  EXPECT_THROW(pipeline_stage_layers(10, one_f, {5, 5}), std::invalid_argument);  // none left
  EXPECT_THROW(pipeline_stage_layers(8, looped(2, 2), {3}), std::invalid_argument);  // 3 over 2
  const PipelineShape single{PipelineSchedule::ONE_F_ONE_B, 1, 8, 1};
  EXPECT_THROW(pipeline_stage_layers(8, single, {4}), std::invalid_argument);  // needs p > 1
  // Megatron's --account-for-embedding/loss-in-pipeline-split: (L + 2) / p a rank, the first
  // and the last model stage one fewer; not with first/last sizes
  EXPECT_EQ(pipeline_stage_layers(6, one_f, {0, 0, true, true}), (std::vector<int>{1, 2, 2, 1}));
  EXPECT_EQ(pipeline_stage_layers(7, one_f, {0, 0, true, false}), (std::vector<int>{1, 2, 2, 2}));
  EXPECT_EQ(pipeline_stage_layers(6, looped(2, 2), {0, 0, true, true}),
            (std::vector<int>{1, 2, 2, 1}));
  EXPECT_THROW(pipeline_stage_layers(7, one_f, {0, 0, true, true}), std::invalid_argument);
  EXPECT_THROW(pipeline_stage_layers(8, one_f, {2, 0, true, false}), std::invalid_argument);
  // a stage may be left with the embedding alone (Megatron asserts >= 0 layers)
  EXPECT_EQ(pipeline_stage_layers(2, one_f, {0, 0, true, true}), (std::vector<int>{0, 1, 1, 0}));
  // The V: rank r holds stages r and 2p - 1 - r, its layers split over the two; rank 0 holds
  // both ends, so --decoder-first-pipeline-num-layers sizes stages 0 and 2p - 1 together.
  const PipelineShape v{PipelineSchedule::ZB_V, 2, 8, 2};
  EXPECT_EQ(pipeline_stage_layers(8, v), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(pipeline_stage_layers(8, v, {2}), (std::vector<int>{1, 3, 3, 1}));
  EXPECT_EQ(pipeline_stage_layers(10, v, {0, 0, true, true}), (std::vector<int>{2, 3, 3, 2}));
  // Mirrored: p stages, copy 0's rank r holds stage r.
  const PipelineShape dual{PipelineSchedule::DUALPIPE, 4, 8, 2};
  EXPECT_EQ(pipeline_stage_layers(8, dual), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(pipeline_stage_layers(8, dual, {1, 3}), (std::vector<int>{1, 2, 2, 3}));
}

// Where the model stages live: every placement's stage_of, rank_of and chunk_of agree.
TEST(PipelineSchedule, Placements) {
  for (PipelineSchedule kind : kKinds)
    for (const PipelineShape& sh : valid_shapes(kind))
      for (int r = 0; r < sh.p; ++r)
        for (int c = 0; c < sh.v; ++c) {
          const int s = sh.stage_of(r, c);
          EXPECT_EQ(sh.chunk_of(s), c);
          bool runs_here = false;  // DualPipe: for one direction's microbatches
          for (int i = 0; i < sh.m; ++i) runs_here |= sh.rank_of(s, i) == r;
          EXPECT_TRUE(runs_here) << name(sh) << " rank " << r << " chunk " << c;
        }
  const PipelineShape v{PipelineSchedule::DUALPIPE_V, 4, 8, 2};
  EXPECT_EQ(v.stage_of(0, 1), 7);  // rank 0: the first and the last stage
  EXPECT_EQ(v.stage_of(3, 0), 3);
  EXPECT_EQ(v.stage_of(3, 1), 4);  // the turn, on one rank
  const PipelineShape d{PipelineSchedule::DUALPIPE, 4, 8, 2};
  EXPECT_EQ(d.stage_of(3, 0), 0);  // rank 3 holds stage 0 (copy 1) and 3 (copy 0)
  EXPECT_EQ(d.stage_of(3, 1), 3);
  EXPECT_EQ(d.rank_of(0, 3), 0);  // microbatch 3 < m/2 goes down the ranks
  EXPECT_EQ(d.rank_of(0, 4), 3);  // microbatch 4 up
  EXPECT_EQ(d.mirror_of(1), 2);
}

// DeepSeek's DualPipeV figure (deepseek-ai/DualPipe README: 4 ranks, 10 microbatches) and
// PyTorch's ZB-V (p 2, m 4), action by action; '&' an overlapped F&B half, '*' a whole B.
std::string marked(const Schedule& s, int rank) {
  std::string t;
  for (const Action& a : s.ranks[rank]) {
    const bool whole = a.type == ActionType::B && !a.split;
    t += (t.empty() ? "" : " ") + std::string(a.overlapped ? "&" : "") +
         action_label(a, s.shape.v) + (whole ? "*" : "");
  }
  return t;
}

TEST(PipelineSchedule, DeepSeekAndPyTorchOrders) {
  const Schedule v = make_schedule({PipelineSchedule::DUALPIPE_V, 4, 10, 2});
  EXPECT_EQ(marked(v, 0),
            "F0a F1a F2a F3a F4a F5a F6a F0b B0b W0b F1b B1b W1b F2b B2b W2b F3b &F7a &B3b* "
            "&F4b &B0a* &F8a &B4b* &F5b &B1a* &F9a &B5b* &F6b &B2a* B6b* &F7b &B3a* B7b* &F8b "
            "&B4a* B8b* &F9b &B5a* B9b* B6a W6a B7a W7a B8a W8a B9a W9a");
  EXPECT_EQ(marked(v, 3),
            "F0a F0b F1a F1b F2a F2b F3a F3b F4a B0b* &F4b &B0a* &F5a &B1b* &F5b &B1a* &F6a "
            "&B2b* &F6b &B2a* &F7a &B3b* &F7b &B3a* &F8a &B4b* &F8b &B4a* &F9a &B5b* &F9b &B5a* "
            "B6b* B6a* B7b* B7a* B8b B8a B9b B9a W8b W8a W9b W9a");
  const Schedule z = make_schedule({PipelineSchedule::ZB_V, 2, 4, 2});
  EXPECT_EQ(order(z, 1),
            "F0a F0b F1a F1b B0b W0b F2a B0a W0a F2b B1b W1b F3a B1a W1a F3b B2b W2b B2a B3b B3a "
            "W2a W3b W3a");
  // DualPipe: rank 0 feeds microbatches 0..m/2-1 down, rank p - 1 the rest up; each rank's
  // chunk a runs one direction, chunk b the other.
  const Schedule d = make_schedule({PipelineSchedule::DUALPIPE, 4, 8, 2});
  for (const Action& a : d.ranks[0]) EXPECT_EQ(a.chunk == 0, a.microbatch < 4);
  for (const Action& a : d.ranks[3]) EXPECT_EQ(a.chunk == 0, a.microbatch >= 4);
}

// The V's turn and DualPipe's second copy: the messages between two chunks of one rank stay
// out of the exchanges; the gradient buffers each rank keeps (zb-v's turn holds two).
TEST(PipelineSchedule, LocalMessagesAndGradientBuffers) {
  const Schedule v = make_schedule({PipelineSchedule::ZB_V, 4, 8, 2});
  int local = 0;
  for (const Action& a : v.ranks[3])
    for (const Message& m : a.recvs) local += m.local();
  EXPECT_EQ(local, 2 * 8);  // each microbatch's activation and gradient at the turn
  for (int r = 0; r < 4; ++r)
    for (const Exchange& e : exchanges(v, r)) {
      for (const Message& m : e.sends) EXPECT_FALSE(m.local());
      for (const Message& m : e.recvs) EXPECT_FALSE(m.local());
    }
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(gradient_buffers(make_schedule({PipelineSchedule::ONE_F_ONE_B, 2, 4, 1}), r),
              r == 0 ? 1 : 0);
  int most = 0;
  for (int r = 0; r < 4; ++r) most = std::max(most, gradient_buffers(v, r));
  EXPECT_EQ(most, 2);
  // the turn's hand-over is the previous B's: its one dres buffer
  EXPECT_EQ(check_schedule(v), "");
}

TEST(Timeline, TerminalToScale) {
  const Schedule s = make_schedule({PipelineSchedule::ONE_F_ONE_B, 4, 8, 1});
  const std::string t = render_timeline(s, simulate(s), ActionCosts{});
  // F costs 1 unit and B 3 (input + weight gradient): 3 columns per unit, idle as dots.
  EXPECT_NE(t.find("rank 0: F0 F1 F2 F3 ...........................B0       F4 B1"),
            std::string::npos) << t;
  EXPECT_NE(t.find("rank 3: .........F0 B0       F1 B1"), std::string::npos) << t;
  EXPECT_NE(t.find("idle 27.3%"), std::string::npos);
  // Too long for one block: wrapped at the same scale.
  const Schedule i = make_schedule({PipelineSchedule::INTERLEAVED, 4, 8, 2});
  const std::string w = render_timeline(i, simulate(i), ActionCosts{}, 80);
  EXPECT_NE(w.find("rank 0: F0a F1a F2a F3a F0b"), std::string::npos) << w;
  EXPECT_NE(w.find("units 0 to 20"), std::string::npos) << w;
}

TEST(Timeline, ChromeTrace) {
  const Schedule s = make_schedule({PipelineSchedule::ONE_F_ONE_B, 2, 2, 1});
  const Simulation sim = simulate(s);
  std::vector<TraceSpan> spans;
  std::vector<TraceFlow> flows;
  schedule_trace(s, sim, ActionCosts{}, 1000.0, &spans, &flows);
  int compute = 0, idle = 0, send = 0, recv = 0;
  double idle_us = 0;
  for (const TraceSpan& sp : spans) {
    compute += sp.category == "compute";
    send += sp.category == "send";
    recv += sp.category == "recv";
    if (sp.category == "idle") {
      ++idle;
      idle_us += sp.dur_us;
    }
  }
  EXPECT_EQ(compute, 8);
  EXPECT_EQ(send, 4);  // 2 activations, 2 gradients
  EXPECT_EQ(recv, 4);
  EXPECT_EQ(flows.size(), 4u);
  EXPECT_DOUBLE_EQ(idle_us, 1000.0 * (sim.idle[0] + sim.idle[1]));
  EXPECT_GT(idle, 0);
  const std::string j = chrome_trace_json(spans, flows, "test");
  for (const char* key : {"{\"traceEvents\":[", "\"process_name\"", "\"name\":\"rank 1\"",
                          "\"thread_name\"", "\"name\":\"send/recv\"", "\"ph\":\"X\"",
                          "\"cat\":\"idle\"", "\"ph\":\"s\"", "\"bp\":\"e\"",
                          "\"displayTimeUnit\":\"ms\""})
    EXPECT_NE(j.find(key), std::string::npos) << key;
  EXPECT_THROW(write_chrome_trace("/nonexistent/dir/t.json", spans, flows, "x"),
               std::runtime_error);
}

}  // namespace
}  // namespace paralab

namespace paralab {
namespace {

// DualPipe's F&B on a GPU: each half's communication hides under the other half's compute
// (ActionCosts::stage_F_comm, stage_B_comm); alone, or on a CPU, an action costs it all.
TEST(PipelineSchedule, OverlappedPairHidesCommunication) {
  ActionCosts c;
  c.F = 3, c.B = 4, c.W = 1;
  c.stage_F_comm = {1}, c.stage_B_comm = {2};
  Action f, b;
  f.type = ActionType::F, b.type = ActionType::B;
  f.overlapped = b.overlapped = true;
  EXPECT_EQ(c.cost(f), 3);
  EXPECT_EQ(c.cost(b), 5);           // the whole B: B + W
  EXPECT_EQ(c.cost(f, &b), 2);       // F's 1 of communication under B's 3 of compute
  EXPECT_EQ(c.cost(b, &f), 3);       // B's 2 under F's 2: gone
  c.stage_B_comm = {4};              // B's 4 against F's 2 of compute: 2 left out
  EXPECT_EQ(c.cost(b, &f), 5 - 4 + 2);
  // a dualpipev step with communication inside the actions is shorter overlapped
  const Schedule s = make_schedule({PipelineSchedule::DUALPIPE_V, 2, 8, 2});
  ActionCosts plain;
  plain.stage_F = std::vector<double>(4, 2.0), plain.stage_B = std::vector<double>(4, 3.0);
  ActionCosts hidden = plain;
  hidden.stage_F_comm = std::vector<double>(4, 1.0), hidden.stage_B_comm = std::vector<double>(4, 1.0);
  EXPECT_LT(simulate(s, hidden).step_time, simulate(s, plain).step_time);
}

}  // namespace
}  // namespace paralab
