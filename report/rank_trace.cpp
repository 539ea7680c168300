// report/rank_trace.cpp: the measured step of every rank, for the eye (rank_report.h:
// measured_trace for --trace, measured_timelines for --print-schedule).
#include <algorithm>
#include <map>
#include <tuple>
#include "report/rank_report.h"
#include "report/text.h"

namespace paralab {

namespace {

constexpr double kMinIdleUs = 1.0;  // shorter gaps are the timer's own cost, not idle

using MessageKey = std::tuple<int, int, int, int>;  // kind, microbatch, from and to stage
MessageKey key_of(const Message& m) {
  return std::make_tuple((int)m.kind, m.microbatch, m.from_stage, m.to_stage);
}

// One item of a rank's communication lanes, in seconds on the aligned clock.
struct CommItem {
  double start = 0, end = 0;
  std::string name, category;
  int exchange = -1;  // the pp exchange's index, -1 for another call
  int lane = 1;
};

// A pp message: sent in exchange `j` of world rank `from`, received in exchange `jr` of `to`.
struct Link {
  int from, j, to, jr;
  Message m;
};

// Flow anchors sit inside their slices (Perfetto binds a flow to the slice around it).
double inset_us(double dur_us) { return std::min(1.0, dur_us / 4); }

std::string message_text(const Message& m, int peer_world, bool send) {
  return strprintf("%s %s mb %d %s rank %d", send ? "send" : "recv",
                   m.kind == Message::ACTIVATION ? "act" : "grad", m.microbatch,
                   send ? "->" : "<-", peer_world);
}

}  // namespace

void measured_trace(const Plan& plan, const std::vector<RankMetrics>& ranks,
                    const std::vector<int>& pipeline_of, std::vector<TraceProcess>* processes,
                    std::vector<TraceSpan>* spans, std::vector<TraceFlow>* flows) {
  const Schedule& schedule = plan.pipeline.schedule;
  const int n = (int)ranks.size(), v = schedule.shape.v;
  auto pp_of = [&](int r) { return plan.ranks.at(r).pp_rank; };
  std::map<std::pair<int, int>, int> world_rank;  // (pipeline, pp rank) -> world rank
  for (int r = 0; r < n; ++r) world_rank[{pipeline_of[r], pp_of(r)}] = r;
  std::vector<std::vector<Exchange>> ex_of_pp(schedule.ranks.size());
  std::vector<std::map<MessageKey, int>> received_in(schedule.ranks.size());
  for (size_t p = 0; p < schedule.ranks.size(); ++p) {
    ex_of_pp[p] = exchanges(schedule, (int)p);
    for (size_t j = 0; j < ex_of_pp[p].size(); ++j)
      for (const Message& m : ex_of_pp[p][j].recvs) received_in[p][key_of(m)] = (int)j;
  }
  auto measured_exchange = [&](int r, int j) -> const ActionTiming* {
    const std::vector<ActionTiming>& t = ranks[r].exchanges;
    return j >= 0 && j < (int)t.size() ? &t[j] : nullptr;
  };
  std::vector<Link> links;
  for (int r = 0; r < n; ++r) {
    const std::vector<Exchange>& ex = ex_of_pp[pp_of(r)];
    for (int j = 0; j < (int)ex.size(); ++j)
      for (const Message& m : ex[j].sends) {
        auto q = world_rank.find({pipeline_of[r], m.to_rank});
        if (q == world_rank.end()) continue;
        auto jr = received_in[m.to_rank].find(key_of(m));
        if (jr == received_in[m.to_rank].end()) continue;
        if (measured_exchange(r, j) && measured_exchange(q->second, jr->second))
          links.push_back({r, j, q->second, jr->second, m});
      }
  }

  // Clocks: rank 0's, by the estimated offsets; then causality (rank_report.h).
  std::vector<double> shift(n, 0.0);
  for (int r = 0; r < n; ++r) shift[r] = -ranks[r].clock_offset_seconds;
  auto at = [&](int r, double relative) { return ranks[r].start_seconds + relative + shift[r]; };
  for (int round = 0; round <= n; ++round) {
    bool moved = false;
    for (const Link& l : links) {
      const ActionTiming& s = *measured_exchange(l.from, l.j);
      const ActionTiming& e = *measured_exchange(l.to, l.jr);
      const double margin = (inset_us((s.end - s.start) * 1e6) +
                             inset_us((e.end - e.start) * 1e6)) * 1e-6;
      const double late = at(l.from, s.start) + margin - at(l.to, e.end);
      if (late > 0) shift[l.to] += late, moved = true;
    }
    if (!moved) break;
  }
  // Microseconds from the earliest instant any rank recorded.
  double base = 0;
  bool first = true;
  auto see = [&](double t) { base = first ? t : std::min(base, t), first = false; };
  for (int r = 0; r < n; ++r) {
    see(at(r, 0));
    for (const CommEvent& e : ranks[r].comm_events) see(e.start_s + shift[r]);
  }
  auto us = [&](double aligned) { return (aligned - base) * 1e6; };

  std::vector<std::vector<CommItem>> comm(n);
  for (int r = 0; r < n; ++r) {
    const RankMetrics& m = ranks[r];
    const int pp = pp_of(r);
    // compute lane: the actions, and the idle gaps from the run's start to its end
    const std::vector<Action>& acts = schedule.ranks[pp];
    double free_at = 0;
    auto idle_until = [&](double t) {
      if ((t - free_at) * 1e6 >= kMinIdleUs)
        spans->push_back({r, 0, "idle", "idle", us(at(r, free_at)), (t - free_at) * 1e6});
    };
    for (size_t k = 0; k < acts.size() && k < m.actions.size(); ++k) {
      const ActionTiming& t = m.actions[k];
      idle_until(t.start);
      spans->push_back({r, 0, action_label(acts[k], v), "compute", us(at(r, t.start)),
                        (t.end - t.start) * 1e6});
      free_at = std::max(free_at, t.end);
    }
    idle_until(m.run_seconds);
    // communication lanes: the pp exchanges, then every other call of the step
    const std::vector<Exchange>& ex = ex_of_pp[pp];
    for (int j = 0; j < (int)ex.size() && j < (int)m.exchanges.size(); ++j) {
      if (ex[j].empty()) continue;
      std::string name = "pp send/recv:";
      for (const Message& s : ex[j].sends)
        name += " " + message_text(s, world_rank[{pipeline_of[r], s.to_rank}], true) + ";";
      for (const Message& s : ex[j].recvs)
        name += " " + message_text(s, world_rank[{pipeline_of[r], s.from_rank}], false) + ";";
      name.pop_back();
      comm[r].push_back({at(r, m.exchanges[j].start), at(r, m.exchanges[j].end), name, "pp", j});
    }
    for (const CommEvent& e : m.comm_events) {
      if (e.group == CommGroup::PP && e.op == CommOp::SEND_RECV) continue;  // the exchanges
      comm[r].push_back({e.start_s + shift[r], e.end_s + shift[r],
                         std::string(group_name(e.group)) + " " + op_name(e.op),
                         group_name(e.group), -1});
    }
    // Slices of one lane must nest: calls in flight together (overlapped buckets, an
    // exchange beside them) go to the next lane free at their start.
    std::sort(comm[r].begin(), comm[r].end(),
              [](const CommItem& a, const CommItem& b) { return a.start < b.start; });
    std::vector<double> lane_free;
    for (CommItem& c : comm[r]) {
      size_t lane = 0;
      while (lane < lane_free.size() && lane_free[lane] > c.start) ++lane;
      if (lane == lane_free.size()) lane_free.push_back(0);
      lane_free[lane] = c.end;
      c.lane = 1 + (int)lane;
      spans->push_back({r, c.lane, c.name, c.category, us(c.start), (c.end - c.start) * 1e6});
    }
    TraceProcess proc;
    proc.rank = r;
    proc.name = strprintf("rank %d (pp %d, tp %d, dp %d)", r, pp, plan.ranks.at(r).tp_rank,
                          plan.ranks.at(r).dp_rank);
    if (m.comm_events_dropped > 0)
      proc.name += strprintf("; %llu calls past the first %zu not drawn",
                             (unsigned long long)m.comm_events_dropped, CommStats::kMaxEvents);
    proc.lanes.push_back("compute");
    for (size_t l = 0; l < std::max<size_t>(1, lane_free.size()); ++l)
      proc.lanes.push_back(l == 0 ? "comm" : strprintf("comm %zu", l + 1));
    processes->push_back(proc);
  }

  // flows: each message from inside its sending exchange to inside its receiving one
  auto lane_of = [&](int r, int j) {
    for (const CommItem& c : comm[r])
      if (c.exchange == j) return c.lane;
    return 1;
  };
  for (const Link& l : links) {
    const ActionTiming& s = *measured_exchange(l.from, l.j);
    const ActionTiming& e = *measured_exchange(l.to, l.jr);
    const double from = us(at(l.from, s.start)) + inset_us((s.end - s.start) * 1e6);
    const double to = us(at(l.to, e.end)) - inset_us((e.end - e.start) * 1e6);
    flows->push_back({strprintf("%s mb %d: rank %d -> rank %d",
                                l.m.kind == Message::ACTIVATION ? "activation" : "gradient",
                                l.m.microbatch, l.from, l.to),
                      l.from, from, l.to, std::max(from, to), lane_of(l.from, l.j),
                      lane_of(l.to, l.jr)});
  }
}

std::string measured_timelines(const Plan& plan, const std::vector<RankMetrics>& ranks,
                               const std::vector<int>& pipeline_of, int max_pipelines) {
  std::map<int, std::vector<const RankMetrics*>> pipelines;  // by pipeline, in pp order
  for (const RankMetrics& r : ranks) {
    std::vector<const RankMetrics*>& stages = pipelines[pipeline_of.at(r.rank)];
    const int pp = plan.ranks.at(r.rank).pp_rank;
    if ((int)stages.size() <= pp) stages.resize(pp + 1, nullptr);
    stages[pp] = &r;
  }
  std::string out;
  int shown = 0;
  for (const auto& [id, stages] : pipelines) {
    if (std::count(stages.begin(), stages.end(), nullptr) > 0) continue;
    if (shown == max_pipelines) {
      out += strprintf("(%zu more pipelines: see --trace)\n", pipelines.size() - shown);
      break;
    }
    std::vector<int> labels;
    for (const RankMetrics* s : stages) labels.push_back(s->rank);
    if (pipelines.size() > 1) {
      const RankPlan& rp = plan.ranks.at(stages[0]->rank);
      out += strprintf("pipeline %d of %zu (tp %d, dp %d):\n", shown + 1, pipelines.size(),
                       rp.tp_rank, rp.dp_rank);
    }
    out += render_timeline(plan.pipeline.schedule, measured_timeline(stages),
                           measured_costs(plan.pipeline.schedule, stages), 160, true, labels);
    ++shown;
  }
  return out;
}

}  // namespace paralab
