// report/rank_report.cpp: see rank_report.h.
#include "report/rank_report.h"
#include "report/report_kernels.h"  // kernel_traffic_json
#include <algorithm>
#include <map>
#include "checkpoint/json.h"
#include "report/report.h"
#include "report/report_impl.h"
#include "report/text.h"

namespace paralab {

double RankMetrics::busy_seconds() const {
  double busy = 0;
  for (const ActionTiming& a : actions) busy += a.end - a.start;
  return busy;
}

void fill_bubbles(std::vector<RankMetrics>& ranks, const std::vector<int>& pipeline_of,
                  const std::vector<int>& pp_rank_of, const Simulation& predicted) {
  std::map<int, double> step;  // per pipeline: its longest run
  for (const RankMetrics& r : ranks)
    step[pipeline_of[r.rank]] = std::max(step[pipeline_of[r.rank]], r.run_seconds);
  for (RankMetrics& r : ranks) {
    const double t = step[pipeline_of[r.rank]];
    r.bubble = t > 0 ? (t - r.busy_seconds()) / t : 0;
    if (predicted.step_time > 0)
      r.bubble_predicted = predicted.idle.at(pp_rank_of[r.rank]) / predicted.step_time;
  }
}

namespace {
// The communication a rank is predicted to make: its pipeline stage's, or the whole plan's.
const std::vector<CommPlanEntry>& rank_comm_plan(const Plan& plan, int rank) {
  const int pp = plan.ranks.at(rank).pp_rank;
  return plan.pipeline.stages.empty() ? plan.comm : plan.pipeline.stages.at(pp).comm;
}
}  // namespace

std::string rank_memory_table(const Plan& plan, const std::vector<RankMetrics>& ranks) {
  // Every ledger category, a predicted row and a measured row per rank: the ranks differ
  // (stages, ZeRO shards, the tp slices of the vocabulary) and a difference shows as two
  // numbers one above the other.
  static const char* const kShort[kNumMemoryCategories] = {
      "params", "grads", "master", "optim", "activ", "recomp", "comm_buf", "logits", "work",
      "fp8_ops", "fp8_st"};
  std::string t =
      "memory per rank (MiB): each category is its own peak in the step; total is the peak of "
      "their sum\n  (not the sum of the peaks: the categories do not all peak at once)\n"
      "  master = master_params, optim = optimizer_states, activ = activations, recomp = "
      "recompute,\n  comm_buf = comm_buffers, work = workspace\n";
  if (plan.model.fp8.enabled) t += "  fp8_ops = fp8_operands, fp8_st = fp8_state\n";
  t += strprintf("  %4s %2s %2s %2s %2s %-4s", "rank", "pp", "tp", "cp", "dp", "");
  for (int c = 0; c < kNumMemoryCategories; ++c)
    if (memory_category_shown(plan, c)) t += strprintf(" %8s", kShort[c]);
  t += strprintf(" %8s\n", "total");
  for (const RankMetrics& r : ranks) {
    const RankPlan& rp = plan.ranks.at(r.rank);
    std::string pred = strprintf("  %4d %2d %2d %2d %2d %-4s", r.rank, rp.pp_rank, rp.tp_rank,
                                 rp.cp_rank, rp.dp_rank, "pred");
    std::string meas = strprintf("  %4s %2s %2s %2s %2s %-4s", "", "", "", "", "", "meas");
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      if (!memory_category_shown(plan, c)) continue;
      pred += strprintf(" %8s", format_mib((double)rp.memory.at(c)).c_str());
      meas += strprintf(" %8s", format_mib((double)r.memory_bytes[c]).c_str());
    }
    t += pred + strprintf(" %8s\n", format_mib((double)rp.memory.total()).c_str());
    t += meas + strprintf(" %8s\n", format_mib((double)r.peak_memory_bytes).c_str());
  }
  return t;
}

void ranks_json(JsonWriter& j, const Plan& common_plan, const std::vector<RankMetrics>& ranks,
                const std::vector<const Plan*>* rank_plans) {
  j.key("ranks").begin_array();
  for (const RankMetrics& r : ranks) {
    const Plan& plan = rank_plans ? *rank_plans->at(r.rank) : common_plan;
    const RankPlan& rp = plan.ranks.at(r.rank);
    j.begin_object().field("rank", r.rank).field("pp_rank", rp.pp_rank);
    j.field("tp_rank", rp.tp_rank).field("cp_rank", rp.cp_rank).field("dp_rank", rp.dp_rank);
    if (r.bubble >= 0) j.field("bubble", r.bubble);
    if (r.bubble_predicted >= 0) j.field("bubble_predicted", r.bubble_predicted);
    j.key("hardware_flops").begin_object().field("measured", r.hardware_flops);
    j.field("predicted", plan.pipeline.stages.empty()
                             ? plan.flops.hardware_per_rank_step
                             : plan.pipeline.stages.at(rp.pp_rank).hardware_flops);
    j.end_object();
    if (r.kernel_launches >= 0)
      kernel_traffic_json(j, kernel_traffic_plan(plan, r.rank),
                          kernels::KernelCount{r.kernel_launches, r.kernel_bytes,
                                               r.attention_launches, r.routing_copies,
                                               r.routing_copy_bytes});
    j.key("memory").begin_object();
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      j.key(kMemoryCategoryNames[c]).begin_object();
      j.field("measured", r.memory_bytes[c]).field("predicted", rp.memory.at(c));
      j.end_object();
    }
    j.key("total").begin_object();
    j.field("measured", r.peak_memory_bytes).field("predicted", rp.memory.total());
    j.end_object().end_object();
    resident_json(j, rp.memory, r.resident_bytes.data());
    host_memory_json(j, rp.memory, r.host_bytes.data());
    j.key("comm").begin_array();
    for (const CommRow& row : comm_rows(rank_comm_plan(plan, r.rank), &r.comm)) {
      const CommRecord& m = r.comm.get(row.g, row.op);
      j.begin_object().field("group", group_name(row.g)).field("op", op_name(row.op));
      j.key("calls").begin_object().field("predicted", row.pred ? (double)row.pred->calls : 0.0);
      j.field("measured", (double)m.calls).end_object();
      j.key("payload_bytes").begin_object();
      j.field("predicted", row.pred ? (double)row.pred->payload_bytes : 0.0);
      j.field("measured", (double)m.payload_bytes).end_object();
      j.end_object();
    }
    j.end_array().end_object();
  }
  j.end_array();
}

Simulation measured_timeline(const std::vector<const RankMetrics*>& stages) {
  Simulation sim;
  const size_t p = stages.size();
  sim.timing.resize(p);
  sim.busy.assign(p, 0.0);
  for (size_t r = 0; r < p; ++r) {
    for (const ActionTiming& a : stages[r]->actions) {
      sim.timing[r].push_back({a.start * 1e3, a.end * 1e3});
      sim.busy[r] += (a.end - a.start) * 1e3;
    }
    sim.step_time = std::max(sim.step_time, stages[r]->run_seconds * 1e3);
  }
  summarize_idle(sim);
  return sim;
}

ActionCosts measured_costs(const Schedule& schedule,
                           const std::vector<const RankMetrics*>& stages) {
  const int S = schedule.shape.model_stages();
  std::vector<double> sum[3], count[3];
  for (int t = 0; t < 3; ++t) sum[t].assign(S, 0.0), count[t].assign(S, 0.0);
  auto ms = [&](size_t r, size_t k) {
    return (stages[r]->actions[k].end - stages[r]->actions[k].start) * 1e3;
  };
  // W first: a whole B (beside split ones, DualPipe's) costs B + W, its B part the rest
  for (int pass = 0; pass < 2; ++pass)
    for (size_t r = 0; r < stages.size(); ++r)
      for (size_t k = 0; k < schedule.ranks[r].size() && k < stages[r]->actions.size(); ++k) {
        const Action& a = schedule.ranks[r][k];
        const int t = (int)a.type;
        if ((pass == 0) != (a.type == ActionType::W)) continue;
        const double w = count[2][a.stage] > 0 && a.type == ActionType::B && !a.split
                             ? sum[2][a.stage] / count[2][a.stage]
                             : 0.0;
        sum[t][a.stage] += ms(r, k) - w;
        count[t][a.stage] += 1;
      }
  ActionCosts c;
  c.comm = 0;
  auto mean = [&](int t, int s) { return count[t][s] > 0 ? sum[t][s] / count[t][s] : 0.0; };
  for (int s = 0; s < S; ++s) {
    c.stage_F.push_back(mean(0, s));
    c.stage_B.push_back(mean(1, s));
    c.stage_W.push_back(mean(2, s));
  }
  c.F = c.B = c.W = 0;
  for (int s = 0; s < S; ++s) c.F += c.stage_F[s] / S, c.B += c.stage_B[s] / S, c.W += c.stage_W[s] / S;
  return c;
}

}  // namespace paralab
