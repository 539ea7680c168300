// report/timeline.cpp: see timeline.h.
#include "report/timeline.h"
#include "report/text.h"  // strprintf

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace paralab {

namespace {


std::string describe(const Message& m, bool send) {
  return strprintf("%s %s mb %d %s rank %d", send ? "send" : "recv",
             m.kind == Message::ACTIVATION ? "activation" : "gradient", m.microbatch,
             send ? "->" : "<-", send ? m.to_rank : m.from_rank);
}

// The cost line of a legend: non-split schedules run B and W as one backward.
// Which model stage each chunk letter is, by the placement.
std::string placement_text(const PipelineShape& sh) {
  switch (sh.placement()) {
    case StagePlacement::V:
      return "chunk letters: a = model stage r, b = model stage 2p-1-r (the V: rank 0 holds the "
             "first and the last)";
    case StagePlacement::MIRRORED:
      return "chunk letters: a = model stage min(r, p-1-r), b = max(r, p-1-r); microbatches "
             "below m/2 go down the ranks, the others up";
    default:
      return "chunk letters a, b, ...: model chunk 0, 1, ... (model stage = chunk x p + rank)";
  }
}

std::string costs_text(const ActionCosts& c, bool split) {
  return split ? strprintf("F %.3g, B %.3g, W %.3g", c.F, c.B, c.W)
               : strprintf("F %.3g, B %.3g (input + weight gradient)", c.F, c.B + c.W);
}

}  // namespace

// ---- Chrome trace ----------------------------------------------------------------------------
std::string chrome_trace_json(const std::vector<TraceSpan>& spans,
                              const std::vector<TraceFlow>& flows, const std::string& title,
                              const std::vector<TraceProcess>& processes) {
  std::vector<TraceProcess> procs = processes;
  if (procs.empty()) {
    std::set<int> ranks;
    for (const TraceSpan& s : spans) ranks.insert(s.rank);
    for (int r : ranks) procs.push_back({r, "rank " + std::to_string(r), {"compute", "send/recv"}});
  }
  JsonWriter j;
  j.begin_object().key("traceEvents").begin_array();
  // Metadata: one process per rank, sorted by rank, with its named lanes.
  for (const TraceProcess& p : procs) {
    j.begin_object().field("name", "process_name").field("ph", "M").field("pid", p.rank);
    j.key("args").begin_object().field("name", p.name).end_object();
    j.end_object();
    j.begin_object().field("name", "process_sort_index").field("ph", "M").field("pid", p.rank);
    j.key("args").begin_object().field("sort_index", p.rank).end_object().end_object();
    for (size_t lane = 0; lane < p.lanes.size(); ++lane) {
      j.begin_object().field("name", "thread_name").field("ph", "M").field("pid", p.rank);
      j.field("tid", (int)lane).key("args").begin_object();
      j.field("name", p.lanes[lane]).end_object().end_object();
    }
  }
  // To the nanosecond: the clocks resolve no finer, and 17 digits only bloat the file.
  auto ns = [](double us) { return std::round(us * 1e3) / 1e3; };
  for (const TraceSpan& s : spans) {
    const double start = ns(s.start_us), dur = ns(s.start_us + s.dur_us) - start;
    if (!(dur > 0)) continue;
    j.begin_object().field("name", s.name).field("cat", s.category).field("ph", "X");
    j.field("ts", start).field("dur", dur).field("pid", s.rank).field("tid", s.lane);
    j.end_object();
  }
  // A flow starts inside the sending slice and binds ("bp": "e") to the receiving one.
  for (size_t i = 0; i < flows.size(); ++i) {
    const TraceFlow& f = flows[i];
    j.begin_object().field("name", f.name).field("cat", "p2p").field("ph", "s");
    j.field("id", (int64_t)i).field("pid", f.from_rank).field("tid", f.from_lane);
    j.field("ts", ns(f.from_us)).end_object();
    j.begin_object().field("name", f.name).field("cat", "p2p").field("ph", "f").field("bp", "e");
    j.field("id", (int64_t)i).field("pid", f.to_rank).field("tid", f.to_lane);
    j.field("ts", ns(f.to_us)).end_object();
  }
  j.end_array().field("displayTimeUnit", "ms");
  j.key("otherData").begin_object().field("title", title).end_object();
  j.end_object();
  return j.str() + "\n";
}

void write_chrome_trace(const std::string& path, const std::vector<TraceSpan>& spans,
                        const std::vector<TraceFlow>& flows, const std::string& title,
                        const std::vector<TraceProcess>& processes) {
  std::ofstream f(path);
  f << chrome_trace_json(spans, flows, title, processes);
  if (!f) throw std::runtime_error("--trace: cannot write " + path);
}

void schedule_trace(const Schedule& s, const Simulation& sim, const ActionCosts& costs,
                    double us, std::vector<TraceSpan>* spans, std::vector<TraceFlow>* flows) {
  const int v = s.shape.v;
  // Where each message is received: (receiving rank, its action's timing).
  std::map<std::tuple<int, int, int, int>, ActionTiming> received;
  auto key = [](const Message& m) {
    return std::make_tuple((int)m.kind, m.microbatch, m.from_stage, m.to_stage);
  };
  for (size_t r = 0; r < s.ranks.size(); ++r)
    for (size_t k = 0; k < sim.timing[r].size(); ++k)
      for (const Message& m : s.ranks[r][k].recvs) received[key(m)] = sim.timing[r][k];
  for (int r = 0; r < (int)s.ranks.size(); ++r) {
    double free_at = 0;
    for (size_t k = 0; k < sim.timing[r].size(); ++k) {
      const Action& a = s.ranks[r][k];
      const ActionTiming& t = sim.timing[r][k];
      if (t.start > free_at)
        spans->push_back({r, 0, "idle", "idle", free_at * us, (t.start - free_at) * us});
      spans->push_back({r, 0, action_label(a, v), "compute", t.start * us, (t.end - t.start) * us});
      free_at = t.end;
      for (const Message& m : a.sends) {
        spans->push_back({r, 1, describe(m, true), "send", t.end * us, costs.comm * us});
        spans->push_back({m.to_rank, 1, describe(m, false), "recv", t.end * us, costs.comm * us});
        auto it = received.find(key(m));
        if (it == received.end()) continue;
        const double inside = std::min(1.0, (t.end - t.start) * us / 2);
        flows->push_back({describe(m, true), r, t.end * us - inside, m.to_rank,
                          it->second.start * us});
      }
    }
    if (sim.step_time > free_at)
      spans->push_back({r, 0, "idle", "idle", free_at * us, (sim.step_time - free_at) * us});
  }
}

// ---- terminal ------------------------------------------------------------------------------
std::string render_timeline(const Schedule& s, const Simulation& sim, const ActionCosts& costs,
                            int max_columns, bool measured, const std::vector<int>& rank_labels) {
  const PipelineShape& sh = s.shape;
  if (sim.deadlock) return "timeline: the schedule deadlocks (" + sim.blocked + ")\n";
  // Columns per unit: enough for every label and a space, unless the step would not fit.
  double need = 1;
  for (size_t r = 0; r < s.ranks.size(); ++r)
    for (size_t k = 0; k < s.ranks[r].size(); ++k) {
      const double cost = sim.timing[r][k].end - sim.timing[r][k].start;
      if (cost > 0)
        need = std::max(need, (action_label(s.ranks[r][k], sh.v).size() + 1) / cost);
    }
  // Long steps wrap into blocks of max_columns at that scale; only a step longer than
  // kMaxBlocks blocks is squeezed (labels then shrink to their first letters).
  constexpr int kMaxBlocks = 8;
  double per_unit = std::ceil(need);
  if (sim.step_time * per_unit > (double)max_columns * kMaxBlocks)
    per_unit = (double)max_columns * kMaxBlocks / sim.step_time;
  auto col = [&](double t) { return (int)std::lround(t * per_unit); };
  const int width = col(sim.step_time);

  // measured: the time axis is ms and the costs the mean ms per action; simulated: both are
  // the plan's cost units. One statement of the scale, in the axis' unit.
  const char* unit = measured ? "ms" : "unit";
  const std::string scale =
      per_unit >= 1 ? strprintf("1 %s = %g column%s", unit, per_unit, per_unit == 1 ? "" : "s")
                    : strprintf("1 column = %.3g %s%s", 1 / per_unit, unit, measured ? "" : "s");
  std::string out = strprintf("timeline, %s: %s, p %d, m %d%s; %s %s, %s; '.' idle\n",
                        measured ? "measured (last step)" : "simulated",
                        schedule_name(sh.kind), sh.p, sh.m,
                        sh.v > 1 ? strprintf(", v %d", sh.v).c_str() : "",
                        costs_text(costs, has_split_backward(s)).c_str(),
                        measured ? "ms (mean per action)" : "cost units", scale.c_str());
  if (sh.v > 1) out += "  " + placement_text(sh) + "\n";
  std::vector<std::string> lines;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    std::string line(width, '.');
    for (size_t k = 0; k < s.ranks[r].size(); ++k) {
      const int c0 = col(sim.timing[r][k].start), c1 = std::min(width, col(sim.timing[r][k].end));
      if (c1 <= c0) continue;
      std::fill(line.begin() + c0, line.begin() + c1, ' ');
      const std::string label = action_label(s.ranks[r][k], sh.v);
      // Keep a space before the next action when there is room for more than one letter.
      const size_t room = c1 - c0 > 1 ? c1 - c0 - 1 : 1;
      line.replace(c0, std::min(label.size(), room), label, 0, std::min(label.size(), room));
    }
    lines.push_back(line);
  }
  auto label = [&](size_t r) { return r < rank_labels.size() ? rank_labels[r] : (int)r; };
  int digits = 1;
  for (size_t r = 0; r < lines.size(); ++r)
    digits = std::max(digits, (int)std::to_string(label(r)).size());
  for (int b = 0; b < width; b += max_columns) {
    const bool last = b + max_columns >= width;
    if (width > max_columns)
      out += strprintf("  %s %g to %g\n", measured ? "ms" : "units", b / per_unit,
                       std::min(width, b + max_columns) / per_unit);
    for (size_t r = 0; r < lines.size(); ++r) {
      out += strprintf("rank %*d: %s", digits, label(r), lines[r].substr(b, max_columns).c_str());
      const double idle = sim.step_time > 0 ? 100 * sim.idle[r] / sim.step_time : 0.0;
      out += last ? strprintf("  idle %.1f%%\n", idle) : "\n";
    }
  }
  return out;
}

// ---- the plan's pipeline section -------------------------------------------------------------
namespace {

std::string stage_layers_text(const PipelineStagePlan& st) {
  std::string t;
  for (size_t c = 0; c < st.chunk_layers.size(); ++c) {
    const int a = st.chunk_first_layer[c], n = st.chunk_layers[c];
    t += (c ? ", " : "") + (n == 1 ? std::to_string(a) : strprintf("%d-%d", a, a + n - 1));
    if (st.chunk_layers.size() > 1) t += char('a' + c % 26);
  }
  if (st.embedding) t += " +embedding";
  if (st.head) t += st.tied_copy ? " +head (tied copy)" : " +head";
  return t;
}

int64_t exchange_calls(const Plan& plan, int rank) {
  int64_t calls = 0;
  for (const Exchange& e : exchanges(plan.pipeline.schedule, rank)) calls += e.empty() ? 0 : 1;
  return calls;
}

}  // namespace

std::string pipeline_text(const Plan& plan) {
  const PipelinePlan& pp = plan.pipeline;
  if (pp.stages.empty()) return "";
  const PipelineShape& sh = pp.shape;
  const Simulation& sim = pp.sim;
  const BubbleClosedForm& cf = pp.closed_form;
  const double MiB = 1024.0 * 1024.0;
  std::string t = strprintf("pipeline %s | p %d stages x m %d microbatches%s | %s cost units, no "
                      "communication time\n",
                      schedule_name(sh.kind), sh.p, sh.m,
                      sh.v > 1 ? strprintf(" x v %d chunks", sh.v).c_str() : "",
                      costs_text(pp.costs, has_split_backward(pp.schedule)).c_str());
  t += strprintf("  bubble   simulated %.2f%% of the step (%.2f%% of the ideal time); closed form %s: "
           "%.2f%% of the step (%.2f%%)\n",
           100 * sim.bubble, 100 * sim.bubble_vs_ideal, cf.formula.c_str(), 100 * cf.of_step,
           100 * cf.vs_ideal);
  if (!pp.costs.stage_F.empty()) {  // an uneven split: each stage's costs by its layers
    std::string f;
    for (double x : pp.costs.stage_F) f += strprintf("%s%.3g", f.empty() ? "" : " ", x / pp.costs.F);
    t += "  uneven stages: each model stage's costs x its layers / the mean (" + f +
         "); the closed form assumes equal stages\n";
  }
  const int per_stage = plan.parallel.world_size / sh.p;
  t += strprintf("  %-5s %-9s %-34s %6s %14s %13s %9s\n", "stage", "ranks", "layers", "holds",
           "idle (units)", "sends act/grad", "calls");
  for (const PipelineStagePlan& st : pp.stages) {
    const int r0 = st.pp_rank * per_stage;
    const std::string ranks =
        per_stage == 1 ? std::to_string(r0) : strprintf("%d-%d", r0, r0 + per_stage - 1);
    t += strprintf("  %-5d %-9s %-34s %6d %6.1f of %-6.1f %6lld/%-6lld %9lld\n", st.pp_rank,
             ranks.c_str(), stage_layers_text(st).c_str(), st.held, st.idle, sim.step_time,
             (long long)st.activations_sent, (long long)st.gradients_sent,
             (long long)exchange_calls(plan, st.pp_rank));
  }
  t += strprintf("  holds: (microbatch, chunk) pairs with F done and B not yet, at the peak; a message "
           "is N_l h = %s MiB; calls: batched send/recv exchanges per step\n",
           strprintf("%.3f", pp.message_bytes / MiB).c_str());
  bool copy = false;
  for (const PipelineStagePlan& st : pp.stages) copy |= st.tied_copy;
  if (copy)
    t += "  gpt: the last stage keeps a copy of the word embedding for the tied head; the "
         "embedding group all-reduces its gradient with stage 0's once per step\n";
  else if (plan.model.tied_embeddings() && sh.placement() != StagePlacement::LOOPED)
    t += "  gpt: the embedding and the head share rank 0 (and its mirror): one word table, "
         "no copy to sum\n";
  if (sh.placement() == StagePlacement::MIRRORED)
    t += "  dualpipe: ranks r and p-1-r hold the same two stages (2x parameters); after the dp "
         "reduction they sum their gradients (group mirror, one all-reduce per vector)\n";
  if (has_split_backward(pp.schedule)) {
    int most = 0;
    for (const PipelineStagePlan& st : pp.stages) most = std::max(most, st.held_until_w);
    t += strprintf("  %s: up to %d (microbatch, chunk) pairs between F and W; from a split B to "
             "its W a layer keeps its four linears' inputs and output gradients (counted in "
             "activations)\n", schedule_name(sh.kind), most);
  }
  return t;
}

void pipeline_json(JsonWriter& j, const Plan& plan) {
  const PipelinePlan& pp = plan.pipeline;
  if (pp.stages.empty()) return;
  const PipelineShape& sh = pp.shape;
  j.key("pipeline").begin_object();
  j.field("schedule", schedule_name(sh.kind)).field("p", sh.p).field("m", sh.m).field("v", sh.v);
  j.field("bubble_simulated", pp.sim.bubble).field("bubble_closed_form", pp.closed_form.of_step);
  j.field("bubble_vs_ideal_simulated", pp.sim.bubble_vs_ideal);
  j.field("bubble_vs_ideal_closed_form", pp.closed_form.vs_ideal);
  j.field("bubble_formula", pp.closed_form.formula).field("step_time_units", pp.sim.step_time);
  j.key("costs").begin_object().field("F", pp.costs.F).field("B", pp.costs.B);
  j.field("W", pp.costs.W).field("split_backward", has_split_backward(pp.schedule));
  j.key("stage_factor").begin_array();  // an uneven split's per-stage scale (empty: even)
  for (double x : pp.costs.stage_F) j.value(x / pp.costs.F);
  j.end_array().end_object();
  j.key("layers_per_model_stage").begin_array();
  for (int n : pp.stage_layers) j.value(n);
  j.end_array();
  j.field("message_bytes", pp.message_bytes);
  j.key("per_rank").begin_array();
  for (const PipelineStagePlan& st : pp.stages) {
    j.begin_object().field("pp_rank", st.pp_rank).key("layers").begin_array();
    for (size_t c = 0; c < st.chunk_layers.size(); ++c) {
      j.begin_object().field("chunk", (int)c).field("first", st.chunk_first_layer[c]);
      j.field("count", st.chunk_layers[c]).end_object();
    }
    j.end_array().field("embedding", st.embedding).field("head", st.head);
    j.field("tied_embedding_copy", st.tied_copy).field("busy", st.busy).field("idle", st.idle);
    j.field("held", st.held).field("held_until_w", st.held_until_w);
    j.field("activation_bytes", st.memory.activations).field("params", st.params);
    j.field("activations_sent", st.activations_sent).field("gradients_sent", st.gradients_sent);
    j.field("exchanges", exchange_calls(plan, st.pp_rank)).end_object();
  }
  j.end_array().end_object();
}

}  // namespace paralab
