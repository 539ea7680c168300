// parallel/pipeline_schedule.cpp: the schedule generators, their checks and the simulator
// (design and sources in pipeline_schedule.h).
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

namespace paralab {

const char* schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::GPIPE: return "gpipe";
    case PipelineSchedule::ONE_F_ONE_B: return "1f1b";
    case PipelineSchedule::INTERLEAVED: return "interleaved";
    case PipelineSchedule::ZB_H1: return "zb-h1";
  }
  return "?";
}

bool parse_schedule_name(const std::string& name, PipelineSchedule* out) {
  for (PipelineSchedule s : {PipelineSchedule::GPIPE, PipelineSchedule::ONE_F_ONE_B,
                             PipelineSchedule::INTERLEAVED, PipelineSchedule::ZB_H1})
    if (name == schedule_name(s)) {
      *out = s;
      return true;
    }
  return false;
}

std::string check_pipeline_shape(const PipelineShape& s) {
  const std::string pmv = " (p " + std::to_string(s.p) + ", m " + std::to_string(s.m) +
                          ", v " + std::to_string(s.v) + ")";
  if (s.p < 1 || s.m < 1 || s.v < 1) return "p, m and v must be >= 1" + pmv;
  if (s.kind != PipelineSchedule::INTERLEAVED)
    return s.v == 1 ? "" : std::string(schedule_name(s.kind)) + " takes no virtual stages" + pmv;
  if (s.p < 2) return "interleaved needs p >= 2" + pmv;
  if (s.v < 2) return "interleaved needs v >= 2 virtual stages" + pmv;
  // Megatron groups the microbatches by p per chunk; a partial group would leave chunks
  // without a partner in the steady state.
  if (s.m % s.p != 0) return "interleaved needs m to be a multiple of p" + pmv;
  return "";
}

std::vector<int> pipeline_stage_layers(int L, int p, int v, int first, int last) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("pipeline layers: " + what + " (L " + std::to_string(L) +
                                ", p " + std::to_string(p) + ", v " + std::to_string(v) +
                                ", first " + std::to_string(first) + ", last " +
                                std::to_string(last) + ")");
  };
  if (L < 1 || p < 1 || v < 1 || first < 0 || last < 0) fail("sizes must be positive");
  if ((first > 0 || last > 0) && p == 1) fail("first/last stage sizes need p > 1");
  const int given = (first > 0) + (last > 0), middle = p - given, rest = L - first - last;
  if (middle == 0 ? rest != 0 : (rest <= 0 || rest % middle != 0))
    fail("the other stages cannot split the remaining layers evenly");
  std::vector<int> layers(p * v);
  for (int r = 0; r < p; ++r) {
    const int n = (r == 0 && first > 0) ? first : (r == p - 1 && last > 0) ? last : rest / middle;
    if (n % v != 0) fail("a rank's layers must split evenly over its chunks");
    for (int c = 0; c < v; ++c) layers[c * p + r] = n / v;
  }
  return layers;
}

// ---- generators ---------------------------------------------------------------------------
namespace {

Action make_action(ActionType type, int microbatch, int chunk, int rank, const PipelineShape& sh) {
  Action a;
  a.type = type;
  a.microbatch = microbatch;
  a.chunk = chunk;
  a.stage = chunk * sh.p + rank;
  const int S = sh.model_stages();
  auto msg = [&](Message::Kind k, int from, int to) {
    return Message{k, microbatch, from, to, from % sh.p, to % sh.p};
  };
  if (type == ActionType::F) {
    if (a.stage > 0) a.recvs.push_back(msg(Message::ACTIVATION, a.stage - 1, a.stage));
    if (a.stage < S - 1) a.sends.push_back(msg(Message::ACTIVATION, a.stage, a.stage + 1));
  } else if (type == ActionType::B) {
    if (a.stage < S - 1) a.recvs.push_back(msg(Message::GRADIENT, a.stage + 1, a.stage));
    if (a.stage > 0) a.sends.push_back(msg(Message::GRADIENT, a.stage, a.stage - 1));
  }
  return a;
}

// Appends a in a slot of its own, after the last one.
void push(std::vector<Action>& out, Action a) {
  a.slot = out.empty() ? 0 : out.back().slot + 1;
  out.push_back(std::move(a));
}

std::vector<Action> gpipe(int r, const PipelineShape& sh) {
  std::vector<Action> out;
  for (int i = 0; i < sh.m; ++i) push(out, make_action(ActionType::F, i, 0, r, sh));
  for (int i = 0; i < sh.m; ++i) push(out, make_action(ActionType::B, i, 0, r, sh));
  return out;
}

std::vector<Action> one_f_one_b(int r, const PipelineShape& sh) {
  const int p = sh.p, m = sh.m;
  std::vector<Action> out;
  auto F = [&](int i) { push(out, make_action(ActionType::F, i, 0, r, sh)); };
  auto B = [&](int i) { push(out, make_action(ActionType::B, i, 0, r, sh)); };
  // Warm-up: the first backward reaches rank r after the forward has crossed the p - r - 1
  // ranks after it, so it runs that many forwards first (all m if there are fewer).
  const int warmup = std::min(p - r - 1, m);
  for (int i = 0; i < warmup; ++i) F(i);
  // Steady state: one forward, one backward; each backward frees a microbatch, so the
  // rank never holds more than warmup + 1 = min(p - r, m).
  for (int i = 0; i < m - warmup; ++i) {
    F(warmup + i);
    B(i);
  }
  // Cool-down: the backwards of the warm-up microbatches.
  for (int i = m - warmup; i < m; ++i) B(i);
  return out;
}

std::vector<Action> interleaved(int r, const PipelineShape& sh) {
  const int p = sh.p, m = sh.m, v = sh.v, total = m * v;
  std::vector<Action> out;
  // Megatron's order: the k-th forward of a rank runs chunk (k mod p v) / p on microbatch
  // (k / (p v)) p + k mod p, i.e. p microbatches on chunk 0, the same p on chunk 1, ...;
  // the k-th backward walks the chunks the other way, v - 1 first.
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  auto microbatch_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto F = [&](int k) {
    push(out, make_action(ActionType::F, microbatch_of(k), chunk_of(k, true), r, sh));
  };
  auto B = [&](int k) {
    push(out, make_action(ActionType::B, microbatch_of(k), chunk_of(k, false), r, sh));
  };
  // Warm-up: the last rank's first backward needs (v - 1) p forwards of its own (every chunk
  // but the last, one group each) and each earlier rank 2 more (its forward and the
  // backward's way back); with m == p Megatron runs every forward first.
  const int warmup = m == p ? total : std::min((p - r - 1) * 2 + (v - 1) * p, total);
  for (int k = 0; k < warmup; ++k) F(k);
  // Steady state: forward k + warmup, backward k.
  for (int k = 0; k < total - warmup; ++k) {
    F(k + warmup);
    B(k);
    out.back().slot = out[out.size() - 2].slot;  // one exchange for the pair
  }
  // Cool-down.
  for (int k = total - warmup; k < total; ++k) B(k);
  return out;
}

std::vector<Action> zb_h1(int r, const PipelineShape& sh) {
  const int p = sh.p, m = sh.m;
  std::vector<Action> out;
  // Step x runs F_x, B_{x-(p-1-r)}, W_{x-(p-1)} (each when it exists, Qi et al. Fig. 3):
  // x < p-1-r warm-up forwards; then B joins (1F1B's pairs), and W, r steps behind its B,
  // from x = p - 1; after the last F, B W pairs and finally the r deferred W's fill the
  // cool-down, where 1F1B would wait for gradients.
  for (int x = 0; x < m + p - 1; ++x) {
    if (x < m) push(out, make_action(ActionType::F, x, 0, r, sh));
    const int b = x - (p - 1 - r), w = x - (p - 1);
    if (b >= 0 && b < m) push(out, make_action(ActionType::B, b, 0, r, sh));
    if (w >= 0 && w < m) push(out, make_action(ActionType::W, w, 0, r, sh));
  }
  return out;
}

std::string describe(const Message& msg) {
  return std::string(msg.kind == Message::ACTIVATION ? "activation" : "gradient") +
         " of microbatch " + std::to_string(msg.microbatch) + ", stage " +
         std::to_string(msg.from_stage) + " -> " + std::to_string(msg.to_stage);
}

const char* type_name(ActionType t) {
  return t == ActionType::F ? "F" : t == ActionType::B ? "B" : "W";
}

}  // namespace

Schedule make_schedule(const PipelineShape& shape) {
  const std::string bad = check_pipeline_shape(shape);
  if (!bad.empty()) throw std::invalid_argument("pipeline schedule: " + bad);
  Schedule s;
  s.shape = shape;
  for (int r = 0; r < shape.p; ++r) {
    switch (shape.kind) {
      case PipelineSchedule::GPIPE: s.ranks.push_back(gpipe(r, shape)); break;
      case PipelineSchedule::ONE_F_ONE_B: s.ranks.push_back(one_f_one_b(r, shape)); break;
      case PipelineSchedule::INTERLEAVED: s.ranks.push_back(interleaved(r, shape)); break;
      case PipelineSchedule::ZB_H1: s.ranks.push_back(zb_h1(r, shape)); break;
    }
  }

  return s;
}

std::string check_schedule(const Schedule& s) {
  const PipelineShape& sh = s.shape;
  const bool split = splits_backward(sh.kind);
  // (type, microbatch, stage) -> position on its rank
  std::map<std::tuple<int, int, int>, int> seen;
  for (int r = 0; r < (int)s.ranks.size(); ++r)
    for (int k = 0; k < (int)s.ranks[r].size(); ++k) {
      const Action& a = s.ranks[r][k];
      const std::string what = std::string(type_name(a.type)) + "(" +
                               std::to_string(a.microbatch) + ", stage " +
                               std::to_string(a.stage) + ") on rank " + std::to_string(r);
      if (a.stage % sh.p != r || a.stage / sh.p != a.chunk) return what + ": wrong rank or chunk";
      if (a.type == ActionType::W && !split) return what + ": W in a non-split schedule";
      if (!seen.emplace(std::make_tuple((int)a.type, a.microbatch, a.stage), k).second)
        return what + ": twice";
      if (a.type != ActionType::F) {
        const ActionType before = a.type == ActionType::B ? ActionType::F : ActionType::B;
        auto it = seen.find(std::make_tuple((int)before, a.microbatch, a.stage));
        if (it == seen.end()) return what + ": before its " + type_name(before);
      }
    }
  const size_t per_stage = split ? 3 : 2;
  if (seen.size() != per_stage * sh.m * sh.model_stages())
    return "some (microbatch, stage) misses an action";
  return "";
}

Schedule forward_only_schedule(const Schedule& s) {
  Schedule f{s.shape, std::vector<std::vector<Action>>(s.ranks.size())};
  for (size_t r = 0; r < s.ranks.size(); ++r)
    for (const Action& a : s.ranks[r])
      if (a.type == ActionType::F) {
        f.ranks[r].push_back(a);
        f.ranks[r].back().slot = (int)f.ranks[r].size() - 1;
      }
  return f;
}

std::vector<Exchange> exchanges(const Schedule& s, int rank) {
  // In list order, an action whose slot differs from the one before it opens a new slot;
  // while slot j is open, ex holds j + 2 exchanges: the one before it and the one after.
  std::vector<Exchange> ex(2);
  const std::vector<Action>& acts = s.ranks.at(rank);
  for (size_t k = 0; k < acts.size(); ++k) {
    if (k > 0 && acts[k].slot != acts[k - 1].slot) ex.emplace_back();
    Exchange& before = ex[ex.size() - 2];
    before.recvs.insert(before.recvs.end(), acts[k].recvs.begin(), acts[k].recvs.end());
    ex.back().sends.insert(ex.back().sends.end(), acts[k].sends.begin(), acts[k].sends.end());
  }
  return ex;
}

std::string check_exchanges(const Schedule& s) {
  const int p = s.shape.p;
  std::vector<std::vector<Exchange>> ex(p);
  for (int r = 0; r < p; ++r) ex[r] = exchanges(s, r);
  // (1) Posting order per ordered pair of ranks.
  for (int a = 0; a < p; ++a)
    for (int b = 0; b < p; ++b) {
      std::vector<Message> sent, received;
      for (const Exchange& e : ex[a])
        for (const Message& m : e.sends)
          if (m.to_rank == b) sent.push_back(m);
      for (const Exchange& e : ex[b])
        for (const Message& m : e.recvs)
          if (m.from_rank == a) received.push_back(m);
      for (size_t k = 0; k < std::max(sent.size(), received.size()); ++k)
        if (k >= sent.size() || k >= received.size() || !(sent[k] == received[k]))
          return "rank " + std::to_string(a) + " -> " + std::to_string(b) + ", transfer " +
                 std::to_string(k) + ": sent " + (k < sent.size() ? describe(sent[k]) : "nothing") +
                 ", received " + (k < received.size() ? describe(received[k]) : "nothing");
    }
  // (2) Rendezvous: a transfer completes once both ranks have its exchange posted.
  std::vector<size_t> at(p, 0);  // current exchange per rank
  std::vector<std::vector<bool>> sent_done(p), recv_done(p);
  auto enter = [&](int r) {
    while (at[r] < ex[r].size() && ex[r][at[r]].empty()) ++at[r];
    if (at[r] < ex[r].size()) {
      sent_done[r].assign(ex[r][at[r]].sends.size(), false);
      recv_done[r].assign(ex[r][at[r]].recvs.size(), false);
    }
  };
  for (int r = 0; r < p; ++r) enter(r);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      if (at[r] >= ex[r].size()) continue;
      const Exchange& e = ex[r][at[r]];
      for (size_t i = 0; i < e.sends.size(); ++i) {
        const int q = e.sends[i].to_rank;
        if (sent_done[r][i] || at[q] >= ex[q].size()) continue;
        const std::vector<Message>& rv = ex[q][at[q]].recvs;
        for (size_t j = 0; j < rv.size(); ++j)
          if (!recv_done[q][j] && rv[j] == e.sends[i]) sent_done[r][i] = recv_done[q][j] = true;
      }
      auto all = [](const std::vector<bool>& done) {
        return std::all_of(done.begin(), done.end(), [](bool b) { return b; });
      };
      if (all(sent_done[r]) && all(recv_done[r])) {
        ++at[r];
        enter(r);
        progress = true;
      }
    }
  }
  std::string hung;
  for (int r = 0; r < p; ++r)
    if (at[r] < ex[r].size())
      hung += (hung.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
              " waits in exchange " + std::to_string(at[r]);
  return hung.empty() ? "" : "deadlock: " + hung;
}

// ---- simulation ---------------------------------------------------------------------------
double ActionCosts::cost(const Action& a, bool split) const {
  auto pick = [&](const std::vector<double>& per_stage, double all) {
    return a.stage < (int)per_stage.size() ? per_stage[a.stage] : all;
  };
  const double w = pick(stage_W, W);
  switch (a.type) {
    case ActionType::F: return pick(stage_F, F);
    case ActionType::B: return pick(stage_B, B) + (split ? 0 : w);
    case ActionType::W: return w;
  }
  return 0;
}

Simulation simulate(const Schedule& s, const ActionCosts& costs) {
  const PipelineShape& sh = s.shape;
  const int p = sh.p, m = sh.m, S = sh.model_stages();
  const bool split = splits_backward(sh.kind);
  Simulation sim;
  sim.timing.resize(p);
  // End time of each (stage, microbatch) action; NaN until it has run.
  const std::vector<std::vector<double>> unrun(S, std::vector<double>(m, NAN));
  std::vector<std::vector<double>> end_F = unrun, end_B = unrun, end_W = unrun;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const std::vector<Action>& acts = s.ranks[r];
      while (next[r] < acts.size()) {
        const Action& a = acts[next[r]];
        const int i = a.microbatch, st = a.stage;
        double ready = free_at[r];
        bool ok = true;
        auto need = [&](double end, int stage) {
          if (std::isnan(end)) ok = false;
          else ready = std::max(ready, end + (stage % p != r ? costs.comm : 0.0));
        };
        if (a.type == ActionType::F) {
          if (st > 0) need(end_F[st - 1][i], st - 1);
        } else if (a.type == ActionType::B) {
          need(end_F[st][i], st);
          if (st < S - 1) need(end_B[st + 1][i], st + 1);
        } else {
          need(end_B[st][i], st);
        }
        if (!ok) break;
        const double end = ready + costs.cost(a, split);
        sim.timing[r].push_back({ready, end});
        (a.type == ActionType::F ? end_F : a.type == ActionType::B ? end_B : end_W)[st][i] = end;
        free_at[r] = end;
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (next[r] < s.ranks[r].size()) {
      const Action& a = s.ranks[r][next[r]];
      sim.deadlock = true;
      sim.blocked += (sim.blocked.empty() ? "" : "; ") + std::string("rank ") +
                     std::to_string(r) + " at " + type_name(a.type) + "(" +
                     std::to_string(a.microbatch) + ", stage " + std::to_string(a.stage) + ")";
    }

  sim.busy.assign(p, 0.0);
  sim.peak_held.assign(p, 0);
  sim.peak_held_until_w.assign(p, 0);
  for (int r = 0; r < p; ++r) {
    for (const ActionTiming& t : sim.timing[r]) {
      sim.busy[r] += t.end - t.start;
      sim.step_time = std::max(sim.step_time, t.end);
    }
    int held = 0, until_w = 0;
    const ActionType last_part = split ? ActionType::W : ActionType::B;
    for (const Action& a : s.ranks[r]) {
      held += a.type == ActionType::F ? 1 : a.type == ActionType::B ? -1 : 0;
      until_w += a.type == ActionType::F ? 1 : a.type == last_part ? -1 : 0;
      sim.peak_held[r] = std::max(sim.peak_held[r], held);
      sim.peak_held_until_w[r] = std::max(sim.peak_held_until_w[r], until_w);
    }
  }
  summarize_idle(sim);
  return sim;
}

void summarize_idle(Simulation& sim) {
  const size_t p = sim.busy.size();
  double idle = 0, busy = 0;
  sim.idle.assign(p, 0.0);
  for (size_t r = 0; r < p; ++r) {
    sim.idle[r] = sim.step_time - sim.busy[r];
    idle += sim.idle[r];
    busy += sim.busy[r];
  }
  sim.bubble = sim.step_time > 0 ? idle / ((double)p * sim.step_time) : 0;
  sim.bubble_vs_ideal = busy > 0 ? idle / busy : 0;
}

BubbleClosedForm bubble_closed_form(const PipelineShape& s, const ActionCosts& c) {
  const double p = s.p, m = s.m, v = s.v;
  BubbleClosedForm b;
  switch (s.kind) {
    case PipelineSchedule::GPIPE:
    case PipelineSchedule::ONE_F_ONE_B:
      b.of_step = (p - 1) / (m + p - 1);
      b.vs_ideal = (p - 1) / m;
      b.formula = "(p-1)/(m+p-1)";
      break;
    case PipelineSchedule::INTERLEAVED:
      b.vs_ideal = (p - 1) / (v * m);
      b.of_step = b.vs_ideal / (1 + b.vs_ideal);
      b.formula = "(p-1)/(v m) of the ideal time";
      break;
    case PipelineSchedule::ZB_H1: {
      const double idle = (p - 1) * (c.F + c.B - c.W), ideal = m * (c.F + c.B + c.W);
      b.vs_ideal = idle / ideal;
      b.of_step = idle / (ideal + idle);
      b.formula = "(p-1)(T_F+T_B-T_W)";
      break;
    }
  }
  return b;
}

std::string action_label(const Action& a, int v) {
  std::string l = type_name(a.type) + std::to_string(a.microbatch);
  if (v > 1)
    l += a.chunk < 26 ? std::string(1, char('a' + a.chunk)) : "." + std::to_string(a.chunk);
  return l;
}

}  // namespace paralab
