// parallel/pipeline_generators.cpp: one list of actions per rank for each schedule, written as
// its source writes it (design and sources in pipeline_schedule.h).
#include <algorithm>
#include <deque>
#include <stdexcept>
#include <utility>
#include "parallel/pipeline_schedule_impl.h"

namespace paralab {
namespace {

// Appends a in a slot of its own after the last one, or in the last one's (a pair).
void push(std::vector<Action>& out, Action a, bool same_slot = false) {
  a.slot = out.empty() ? 0 : out.back().slot + (same_slot ? 0 : 1);
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
  auto F = [&](int k, bool pair) {
    push(out, make_action(ActionType::F, microbatch_of(k), chunk_of(k, true), r, sh), pair);
  };
  auto B = [&](int k, bool pair) {
    push(out, make_action(ActionType::B, microbatch_of(k), chunk_of(k, false), r, sh), pair);
  };
  // Warm-up: the last rank's first backward needs (v - 1) p forwards of its own (every chunk
  // but the last, one group each) and each earlier rank 2 more (its forward and the
  // backward's way back); with m == p Megatron runs every forward first.
  const int warmup = m == p ? total : std::min((p - r - 1) * 2 + (v - 1) * p, total);
  for (int k = 0; k < warmup; ++k) F(k, false);
  // Steady state: forward k + warmup and backward k, one exchange for the pair.
  for (int k = 0; k < total - warmup; ++k) {
    F(k + warmup, false);
    B(k, true);
  }
  // Cool-down.
  for (int k = total - warmup; k < total; ++k) B(k, false);
  return out;
}

Action split_b(int microbatch, int chunk, int r, const PipelineShape& sh) {
  Action a = make_action(ActionType::B, microbatch, chunk, r, sh);
  a.split = true;
  return a;
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
    if (b >= 0 && b < m) push(out, split_b(b, 0, r, sh));
    if (w >= 0 && w < m) push(out, make_action(ActionType::W, w, 0, r, sh));
  }
  return out;
}

// ZB-V as PyTorch writes it (ScheduleZBVZeroBubble._calculate_single_rank_operations): the
// list for max(m, 2p - 1) microbatches, whose actions on microbatches >= m are dropped.
// Chunk 0 is model stage r, chunk 1 stage 2p - 1 - r; every B is split and each chunk's W's
// run in microbatch order.
std::vector<Action> zb_v(int r, const PipelineShape& sh) {
  const int p = sh.p, m = sh.m, n = std::max(m, 2 * p - 1);
  std::vector<Action> out;
  int f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};
  auto F = [&](int c) {
    if (f[c] < m) push(out, make_action(ActionType::F, f[c], c, r, sh));
    ++f[c];
  };
  auto B = [&](int c) {
    if (b[c] < m) push(out, split_b(b[c], c, r, sh));
    ++b[c];
  };
  auto W = [&](int c) {
    if (w[c] < m) push(out, make_action(ActionType::W, w[c], c, r, sh));
    ++w[c];
  };
  // Warm-up: down the V on chunk 0, then chunk 1's forwards interleaved, then chunk 1's
  // first backwards (their W at once) as the V's turn comes back up.
  for (int k = 0; k < 2 * (p - r) - 1; ++k) F(0);
  for (int k = 0; k < r; ++k) F(1), F(0);
  for (int k = 0; k < p - r; ++k) F(1), B(1), W(1);
  // Steady state: F0 B0 W0 F1 B1 W1 until every chunk-0 forward ran and chunk 1 caught up.
  while (f[1] < f[0] || f[0] < n) {
    if (f[0] < n) F(0);
    B(0), W(0);
    F(1), B(1), W(1);
  }
  // Cool-down: the backwards left, W's deferred into the gaps, then the rest of the W's.
  for (int k = 0; k < r; ++k) B(0), B(1);
  for (int k = 0; k < p - r; ++k) B(0), W(0);
  while (w[1] < b[1]) W(1);
  while (w[0] < b[0]) W(0);
  return out;
}

// DeepSeek's eight steps (deepseek-ai/DualPipe, dualpipev.py and dualpipe.py step()), on
// chunk ("phase") 0 and 1. V: N = p ranks, R = r, K = m microbatches per chunk. Mirrored:
// N = p/2 half ranks, R = min(r, p - 1 - r), K = m/2, and chunk c carries the microbatches
// of direction c xor (r >= p/2) (DualPipe's phase ^ is_in_second_half): K (direction) + j.
// A B is whole unless zero-bubble is on for it (split, its W queued first in, first out).
std::vector<Action> dualpipe_steps(int r, const PipelineShape& sh) {
  const bool v = sh.placement() == StagePlacement::V;
  const int N = v ? sh.p : sh.p / 2, R = v ? r : std::min(r, sh.p - 1 - r);
  const int K = v ? sh.m : sh.m / 2, second_half = !v && r >= sh.p / 2;
  std::vector<Action> out;
  int f[2] = {0, 0}, b[2] = {0, 0};
  std::deque<std::pair<int, int>> weights;  // (microbatch, chunk) of split B's, FIFO
  auto microbatch = [&](int c, int j) { return v ? j : (c ^ second_half) * K + j; };
  auto F = [&](int c, bool pair = false) {
    Action a = make_action(ActionType::F, microbatch(c, f[c]++), c, r, sh);
    a.overlapped = pair;
    push(out, std::move(a));
  };
  auto B = [&](int c, bool zero_bubble, bool pair = false) {
    const int i = microbatch(c, b[c]++);
    Action a = make_action(ActionType::B, i, c, r, sh);
    a.split = zero_bubble;
    a.overlapped = pair;
    push(out, std::move(a), pair);
    if (zero_bubble) weights.push_back({i, c});
  };
  auto W = [&]() {
    if (weights.empty()) return;
    push(out, make_action(ActionType::W, weights.front().first, weights.front().second, r, sh));
    weights.pop_front();
  };
  auto F_and_B = [&](int fc, int bc) { F(fc, true), B(bc, false, true); };

  for (int k = 0; k < (N - R - 1) * 2; ++k) F(0);              // 1: nF0
  for (int k = 0; k < R + 1; ++k) F(0), F(1);                   // 2: nF0F1
  for (int k = 0; k < N - R - 1; ++k) B(1, true), W(), F(1);    // 3: nB1W1F1 (zero bubble)
  for (int k = 0; k < K - 2 * N + R + 1; ++k) {                 // 4: nF0B1F1B0 (the main step)
    // the turning rank's first pair runs apart, "to further reduce bubble size"
    if (k == 0 && R == N - 1) F(0), B(1, false);
    else F_and_B(0, 1);
    F_and_B(1, 0);
  }
  for (int k = 0; k < N - R - 1; ++k) B(1, false), F_and_B(1, 0);  // 5: nB1F1B0
  bool zero_bubble = false;  // 6: nB1B0, the second half of them zero-bubble
  for (int k = 0; k < R + 1; ++k) {
    if (k == (R + 1) / 2 && R % 2 == 1) zero_bubble = true;
    B(1, zero_bubble);
    if (k == (R + 1) / 2 && R % 2 == 0) zero_bubble = true;
    B(0, zero_bubble);
  }
  for (int k = 0; k < N - R - 1; ++k) W(), B(0, true);  // 7: nWB0 (zero bubble)
  for (int k = 0; k < R + 1; ++k) W();                  // 8: nW
  if (!weights.empty()) throw std::logic_error("dualpipe: a W left in the queue");
  return out;
}

}  // namespace

std::vector<Action> rank_actions(const PipelineShape& sh, int r) {
  switch (sh.kind) {
    case PipelineSchedule::GPIPE: return gpipe(r, sh);
    case PipelineSchedule::ONE_F_ONE_B: return one_f_one_b(r, sh);
    case PipelineSchedule::INTERLEAVED: return interleaved(r, sh);
    case PipelineSchedule::ZB_H1: return zb_h1(r, sh);
    case PipelineSchedule::ZB_V: return zb_v(r, sh);
    case PipelineSchedule::DUALPIPE_V:
    case PipelineSchedule::DUALPIPE: return dualpipe_steps(r, sh);
  }
  return {};
}

}  // namespace paralab
