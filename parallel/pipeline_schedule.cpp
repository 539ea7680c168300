// parallel/pipeline_schedule.cpp: the schedules' names and shapes, where the model stages live,
// the layers of each, the actions' messages, the checks and the exchanges (design and sources
// in pipeline_schedule.h; the lists themselves in pipeline_generators.cpp, the simulation in
// pipeline_simulation.cpp).
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>
#include "parallel/pipeline_schedule_impl.h"

namespace paralab {

namespace {
constexpr PipelineSchedule kSchedules[] = {
    PipelineSchedule::GPIPE, PipelineSchedule::ONE_F_ONE_B, PipelineSchedule::INTERLEAVED,
    PipelineSchedule::ZB_H1, PipelineSchedule::ZB_V,        PipelineSchedule::DUALPIPE_V,
    PipelineSchedule::DUALPIPE};
}  // namespace

const char* schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::GPIPE: return "gpipe";
    case PipelineSchedule::ONE_F_ONE_B: return "1f1b";
    case PipelineSchedule::INTERLEAVED: return "interleaved";
    case PipelineSchedule::ZB_H1: return "zb-h1";
    case PipelineSchedule::ZB_V: return "zb-v";
    case PipelineSchedule::DUALPIPE_V: return "dualpipev";
    case PipelineSchedule::DUALPIPE: return "dualpipe";
  }
  return "?";
}

bool parse_schedule_name(const std::string& name, PipelineSchedule* out) {
  for (PipelineSchedule s : kSchedules)
    if (name == schedule_name(s)) {
      *out = s;
      return true;
    }
  return false;
}

StagePlacement placement_of(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::ZB_V:
    case PipelineSchedule::DUALPIPE_V: return StagePlacement::V;
    case PipelineSchedule::DUALPIPE: return StagePlacement::MIRRORED;
    default: return StagePlacement::LOOPED;
  }
}

// ---- where the model stages live ------------------------------------------------------------
int PipelineShape::model_stages() const {
  return placement() == StagePlacement::MIRRORED ? p : p * v;
}

int PipelineShape::stage_of(int rank, int chunk) const {
  switch (placement()) {
    case StagePlacement::LOOPED: return chunk * p + rank;
    case StagePlacement::V: return chunk == 0 ? rank : 2 * p - 1 - rank;
    case StagePlacement::MIRRORED:
      return chunk == 0 ? std::min(rank, p - 1 - rank) : std::max(rank, p - 1 - rank);
  }
  return 0;
}

int PipelineShape::rank_of(int stage, int microbatch) const {
  switch (placement()) {
    case StagePlacement::LOOPED: return stage % p;
    case StagePlacement::V: return stage < p ? stage : 2 * p - 1 - stage;
    case StagePlacement::MIRRORED: return microbatch < m / 2 ? stage : p - 1 - stage;
  }
  return 0;
}

int PipelineShape::chunk_of(int stage) const {
  switch (placement()) {
    case StagePlacement::LOOPED: return stage / p;
    case StagePlacement::V: return stage < p ? 0 : 1;
    case StagePlacement::MIRRORED: return stage < p / 2 ? 0 : 1;
  }
  return 0;
}

std::string check_pipeline_shape(const PipelineShape& s) {
  const std::string pmv = " (p " + std::to_string(s.p) + ", m " + std::to_string(s.m) +
                          ", v " + std::to_string(s.v) + ")";
  const std::string name = schedule_name(s.kind);
  if (s.p < 1 || s.m < 1 || s.v < 1) return "p, m and v must be >= 1" + pmv;
  switch (s.kind) {
    case PipelineSchedule::INTERLEAVED:
      if (s.p < 2) return "interleaved needs p >= 2" + pmv;
      if (s.v < 2) return "interleaved needs v >= 2 virtual stages" + pmv;
      // Megatron groups the microbatches by p per chunk; a partial group would leave chunks
      // without a partner in the steady state.
      if (s.m % s.p != 0) return "interleaved needs m to be a multiple of p" + pmv;
      return "";
    case PipelineSchedule::ZB_V:
    case PipelineSchedule::DUALPIPE_V:
    case PipelineSchedule::DUALPIPE:
      if (s.p < 2) return name + " needs p >= 2" + pmv;
      if (s.v != 2) return name + " holds v = 2 chunks per rank" + pmv;
      // DualPipe asserts num_ranks % 2 == 0 and num_chunks % 2 == 0 (the two directions'
      // halves) and num_chunks >= 2 num_ranks, DualPipeV num_chunks >= 2 num_ranks (PyTorch:
      // at least as many microbatches as stages): the steady step runs K - 2N + R + 1 >= 1
      // times on every rank.
      if (s.kind == PipelineSchedule::DUALPIPE && s.p % 2 != 0)
        return "dualpipe needs p even (each rank's mirror holds its two stages)" + pmv;
      if (s.kind == PipelineSchedule::DUALPIPE && s.m % 2 != 0)
        return "dualpipe needs m even (half the microbatches each way)" + pmv;
      if (s.kind != PipelineSchedule::ZB_V && s.m < 2 * s.p)
        return name + " needs m >= 2p" + pmv;
      return "";
    default:
      return s.v == 1 ? "" : name + " takes no virtual stages" + pmv;
  }
}

std::vector<int> pipeline_stage_layers(int L, const PipelineShape& sh, const StageSplit& split) {
  const int p = sh.p, v = sh.v, first = split.first, last = split.last;
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("pipeline layers: " + what + " (L " + std::to_string(L) +
                                ", p " + std::to_string(p) + ", v " + std::to_string(v) +
                                ", first " + std::to_string(first) + ", last " +
                                std::to_string(last) + (split.embedding ? ", +embedding" : "") +
                                (split.loss ? ", +loss" : "") + ")");
  };
  if (L < 1 || p < 1 || v < 1 || first < 0 || last < 0) fail("sizes must be positive");
  if ((first > 0 || last > 0) && p == 1) fail("first/last stage sizes need p > 1");
  if ((first > 0 || last > 0) && (split.embedding || split.loss))
    fail("first/last stage sizes and the embedding or loss counted as a layer exclude each other");
  // Each pp rank's layers (DualPipe: the ranks of copy 0, rank r holding model stage r).
  std::vector<int> per_rank(p);
  if (first > 0 || last > 0) {
    const int given = (first > 0) + (last > 0), middle = p - given, rest = L - first - last;
    if (middle == 0 ? rest != 0 : (rest <= 0 || rest % middle != 0))
      fail("the other stages cannot split the remaining layers evenly");
    for (int r = 0; r < p; ++r)
      per_rank[r] = (r == 0 && first > 0) ? first : (r == p - 1 && last > 0) ? last : rest / middle;
  } else {
    const int counted = L + split.embedding + split.loss;
    if (counted % p != 0) fail("the ranks cannot split the layers evenly");
    per_rank.assign(p, counted / p);
  }
  const bool mirrored = sh.placement() == StagePlacement::MIRRORED;
  std::vector<int> layers(sh.model_stages());
  for (int r = 0; r < p; ++r) {
    const int chunks = mirrored ? 1 : v;
    if (per_rank[r] % chunks != 0) fail("a rank's layers must split evenly over its chunks");
    for (int c = 0; c < chunks; ++c)
      layers[mirrored ? r : sh.stage_of(r, c)] = per_rank[r] / chunks;
  }
  // The embedding on the first model stage and the loss on the last take a layer's place
  // (each stage has at least one: a rank's L + e + l over p is a multiple of its chunks).
  if (split.embedding) --layers.front();
  if (split.loss) --layers.back();
  return layers;
}

// ---- actions ----------------------------------------------------------------------------------
Action make_action(ActionType type, int microbatch, int chunk, int rank, const PipelineShape& sh) {
  Action a;
  a.type = type;
  a.microbatch = microbatch;
  a.chunk = chunk;
  a.stage = sh.stage_of(rank, chunk);
  const int S = sh.model_stages();
  auto msg = [&](Message::Kind k, int from, int to) {
    return Message{k, microbatch, from, to, sh.rank_of(from, microbatch),
                   sh.rank_of(to, microbatch)};
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

const char* type_name(ActionType t) {
  return t == ActionType::F ? "F" : t == ActionType::B ? "B" : "W";
}

namespace {
std::string describe(const Message& msg) {
  return std::string(msg.kind == Message::ACTIVATION ? "activation" : "gradient") +
         " of microbatch " + std::to_string(msg.microbatch) + ", stage " +
         std::to_string(msg.from_stage) + " -> " + std::to_string(msg.to_stage);
}
}  // namespace

Schedule make_schedule(const PipelineShape& shape) {
  const std::string bad = check_pipeline_shape(shape);
  if (!bad.empty()) throw std::invalid_argument("pipeline schedule: " + bad);
  Schedule s;
  s.shape = shape;
  for (int r = 0; r < shape.p; ++r) s.ranks.push_back(rank_actions(shape, r));
  if (shape.placement() != StagePlacement::LOOPED) post_by_timeline(s);
  return s;
}

bool has_split_backward(const Schedule& s) {
  for (const std::vector<Action>& acts : s.ranks)
    for (const Action& a : acts)
      if (a.type == ActionType::B && a.split) return true;
  return false;
}

std::string check_schedule(const Schedule& s) {
  const PipelineShape& sh = s.shape;
  // (type, microbatch, stage) -> position on its rank; and which B's were split
  std::map<std::tuple<int, int, int>, int> seen;
  std::map<std::pair<int, int>, bool> split;
  size_t expected = 0;
  for (int r = 0; r < (int)s.ranks.size(); ++r) {
    const Action* previous_b = nullptr;
    for (int k = 0; k < (int)s.ranks[r].size(); ++k) {
      const Action& a = s.ranks[r][k];
      const std::string what = std::string(type_name(a.type)) + "(" +
                               std::to_string(a.microbatch) + ", stage " +
                               std::to_string(a.stage) + ") on rank " + std::to_string(r);
      if (a.stage != sh.stage_of(r, a.chunk) || sh.rank_of(a.stage, a.microbatch) != r)
        return what + ": wrong rank or chunk";
      if (!seen.emplace(std::make_tuple((int)a.type, a.microbatch, a.stage), k).second)
        return what + ": twice";
      if (a.type == ActionType::B) split[{a.microbatch, a.stage}] = a.split;
      if (a.type == ActionType::W && !split[{a.microbatch, a.stage}])
        return what + ": W without a split B before it";
      if (a.type != ActionType::F) {
        const ActionType before = a.type == ActionType::B ? ActionType::F : ActionType::B;
        auto it = seen.find(std::make_tuple((int)before, a.microbatch, a.stage));
        if (it == seen.end()) return what + ": before its " + type_name(before);
      }
      if (a.type != ActionType::B) continue;
      // the rank's one gradient buffer: a gradient handed over locally is read next
      for (const Message& m : a.recvs)
        if (m.local() && (previous_b == nullptr || previous_b->microbatch != a.microbatch ||
                          previous_b->stage != m.from_stage))
          return what + ": its local gradient is not the previous B's";
      previous_b = &a;
      expected += a.split ? 3 : 2;
    }
  }
  if (seen.size() != expected || expected < 2 * (size_t)sh.m * sh.model_stages())
    return "some (microbatch, stage) misses an action";
  return "";
}

Schedule forward_only_schedule(const Schedule& s) {
  Schedule f{s.shape, std::vector<std::vector<Action>>(s.ranks.size())};
  for (size_t r = 0; r < s.ranks.size(); ++r)
    for (const Action& a : s.ranks[r])
      if (a.type == ActionType::F) {
        f.ranks[r].push_back(a);
        Action& a = f.ranks[r].back();
        a.overlapped = false;
        a.slot = (int)f.ranks[r].size() - 1;
        for (Message& m : a.recvs) m.step = m.before_slot = -1, m.order = 0;
        for (Message& m : a.sends) m.step = m.before_slot = -1, m.order = 0;
      }
  if (s.shape.placement() != StagePlacement::LOOPED) post_by_timeline(f);  // as training's
  return f;
}

std::vector<int> slot_indices(const std::vector<Action>& acts) {
  std::vector<int> j(acts.size());
  for (size_t k = 0; k < acts.size(); ++k)
    j[k] = k == 0 ? 0 : j[k - 1] + (acts[k].slot != acts[k - 1].slot);
  return j;
}

std::vector<Exchange> exchanges(const Schedule& s, int rank) {
  const std::vector<Action>& acts = s.ranks.at(rank);
  const std::vector<int> slot = slot_indices(acts);
  const int slots = acts.empty() ? 0 : slot.back() + 1;
  std::map<int, Exchange> by_step;  // posted by the timeline
  std::vector<Exchange> ex(slots + 1);  // the slot rule: exchange j before slot j
  for (int j = 0; j <= slots; ++j) ex[j].before_slot = j;
  for (size_t k = 0; k < acts.size(); ++k) {
    for (const Message& m : acts[k].recvs) {
      if (m.local()) continue;
      if (m.step < 0) ex[slot[k]].recvs.push_back(m);
      else by_step[m.step].recvs.push_back(m), by_step[m.step].before_slot = m.before_slot;
    }
    for (const Message& m : acts[k].sends) {
      if (m.local()) continue;
      if (m.step < 0) ex[slot[k] + 1].sends.push_back(m);
      else by_step[m.step].sends.push_back(m), by_step[m.step].before_slot = m.before_slot;
    }
  }
  if (by_step.empty()) return ex;
  ex.clear();
  auto by_order = [](const Message& x, const Message& y) { return x.order < y.order; };
  for (auto& [step, e] : by_step) {
    std::sort(e.sends.begin(), e.sends.end(), by_order);
    std::sort(e.recvs.begin(), e.recvs.end(), by_order);
    ex.push_back(std::move(e));
  }
  return ex;
}

int gradient_buffers(const Schedule& s, int rank) {
  const std::vector<Action>& acts = s.ranks.at(rank);
  const std::vector<Exchange> ex = exchanges(s, rank);
  const std::vector<int> slots = slot_indices(acts);
  int held = 0, most = 0;
  size_t e = 0;
  for (size_t k = 0; k <= acts.size(); ++k) {
    const int slot = k < acts.size() ? slots[k] : acts.empty() ? 0 : slots.back() + 1;
    for (; e < ex.size() && ex[e].before_slot <= slot; ++e)
      for (const Message& m : ex[e].recvs) held += m.kind == Message::GRADIENT;
    most = std::max(most, held);
    if (k == acts.size() || acts[k].type != ActionType::B) continue;
    for (const Message& m : acts[k].recvs) {
      if (m.local()) most = std::max(most, held + 1);  // handed over into a buffer, read
      else --held;
    }
  }
  return most;
}

void post_by_timeline(Schedule& s) {
  const int p = s.shape.p;
  // the plan's unit costs, no communication time; a slot starts once all its inputs are in
  const Simulation sim = simulate(s, ActionCosts{}, true);
  // each slot's start, per rank
  std::vector<std::vector<double>> slot_start(p);
  for (int r = 0; r < p; ++r)
    for (size_t k = 0; k < s.ranks[r].size(); ++k)
      if (k == 0 || s.ranks[r][k].slot != s.ranks[r][k - 1].slot)
        slot_start[r].push_back(sim.timing[r][k].start);
  auto slot_at = [&](int r, double t) {  // the first slot starting at or after t
    const std::vector<double>& st = slot_start[r];
    return (int)(std::lower_bound(st.begin(), st.end(), t) - st.begin());
  };
  // where each action is: (type, microbatch, stage) -> (rank, index)
  std::map<std::tuple<int, int, int>, std::pair<int, int>> where;
  for (int r = 0; r < p; ++r)
    for (int k = 0; k < (int)s.ranks[r].size(); ++k) {
      const Action& a = s.ranks[r][k];
      where[std::make_tuple((int)a.type, a.microbatch, a.stage)] = {r, k};
    }
  // every remote message: its time, its two copies
  struct Posted {
    double t;
    Message* sent;
    Message* received;
  };
  std::vector<Posted> all;
  for (int r = 0; r < p; ++r)
    for (int k = 0; k < (int)s.ranks[r].size(); ++k)
      for (Message& m : s.ranks[r][k].sends) {
        if (m.local()) continue;
        const ActionType reader = m.kind == Message::ACTIVATION ? ActionType::F : ActionType::B;
        const auto [q, j] = where.at(std::make_tuple((int)reader, m.microbatch, m.to_stage));
        Message* copy = nullptr;
        for (Message& x : s.ranks[q][j].recvs)
          if (x == m) copy = &x;
        if (copy == nullptr) throw std::logic_error("post_by_timeline: a send without its receive");
        const double t = m.kind == Message::ACTIVATION ? sim.timing[q][j].start
                                                       : sim.timing[r][k].end;
        all.push_back({t, &m, copy});
      }
  std::sort(all.begin(), all.end(), [](const Posted& a, const Posted& b) {
    return std::make_tuple(a.t, (int)a.sent->kind, a.sent->microbatch, a.sent->from_stage) <
           std::make_tuple(b.t, (int)b.sent->kind, b.sent->microbatch, b.sent->from_stage);
  });
  int step = -1;
  for (size_t n = 0; n < all.size(); ++n) {
    Posted& x = all[n];
    if (n == 0 || x.t != all[n - 1].t) ++step;
    x.sent->step = x.received->step = step;
    x.sent->order = x.received->order = (int)n;
    x.sent->before_slot = slot_at(x.sent->from_rank, x.t);
    x.received->before_slot = slot_at(x.received->to_rank, x.t);
  }
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
  if (!hung.empty()) return "deadlock: " + hung;
  // (3) Each message between its action and the one reading it; a B's input gradient out
  // before the rank's next B overwrites it.
  for (int r = 0; r < p; ++r) {
    const std::vector<Action>& acts = s.ranks[r];
    const std::vector<int> slot = slot_indices(acts);
    const Message* unsent = nullptr;
    size_t e = 0;
    for (size_t k = 0; k < acts.size(); ++k) {
      const Action& a = acts[k];
      // a receive before the action reading it, a send after the action making it
      for (const Message& m : a.recvs)
        if (m.step >= 0 && !m.local() && m.before_slot > slot[k])
          return "rank " + std::to_string(r) + ": the " + describe(m) + " arrives after it is read";
      for (const Message& m : a.sends)
        if (m.step >= 0 && !m.local() && m.before_slot <= slot[k])
          return "rank " + std::to_string(r) + ": the " + describe(m) + " is sent before it is made";
      for (; e < ex[r].size() && ex[r][e].before_slot <= slot[k]; ++e)
        for (const Message& m : ex[r][e].sends)
          if (unsent != nullptr && m == *unsent) unsent = nullptr;
      if (a.type != ActionType::B) continue;
      if (unsent != nullptr)
        return "rank " + std::to_string(r) + ": the " + describe(*unsent) +
               " is overwritten by the next B before it is sent";
      for (const Message& m : a.sends)
        if (!m.local()) unsent = &m;
    }
  }
  return "";
}

std::string action_label(const Action& a, int v) {
  std::string l = type_name(a.type) + std::to_string(a.microbatch);
  if (v > 1)
    l += a.chunk < 26 ? std::string(1, char('a' + a.chunk)) : "." + std::to_string(a.chunk);
  return l;
}

}  // namespace paralab
