// parallel/zero_schedule.h: the calls the model makes on DataParallel in one microbatch,
// written once as data, and the ZeRO-3 prefetch rule. Pure: plan/ simulates
// this list to predict the stage-2/3 memory peaks and the ZeRO-3 all-gathers, and
// tests/mpi/test_data_parallel replays it against the real DataParallel, so the model,
// the plan and the tests agree on one sequence.
//
// Units: 0 embedding, 1..L the layers, L+1 the head (final norm, and output.weight unless
// the embedding is tied, as in gpt). Per microbatch:
//   forward   acquire(0) release(0)                           the embedding
//             acquire(l+1) release(l+1)          l = 0..L-1   the layers
//             acquire(L+1) [acquire(0) if tied]               the head: with the fused loss
//             [fused: grads(L+1) untied | grads(0) tied]      its weight gradient is written
//             [release(0) if tied] release(L+1)               here, during forward
//   backward  acquire(L+1)
//             [unfused: grads(L+1) untied | acquire(0) grads(0) release(0) tied]
//             grads(L+1) release(L+1) backward_done(L+1)      final norm
//             [full recompute, at a group's last layer: acquire(j+1) release(j+1) for
//              the group's layers j, in forward order: their forward again]
//             acquire(l+1) grads(l+1) release(l+1) backward_done(l+1)   l = L-1..0
//             grads(0) backward_done(0)                       the embedding's backward only
//                                                             scatters: no params needed
// Forward acquisitions pass forward = true, backward ones false.
//
// ZeRO-3 prefetch: after an acquisition made while the model held no other unit (a step of
// the sweep; the tied embedding fetched inside the head is a side trip and moves nothing),
// the units u+1..u+p going forward, u-1..u-p going backward, clipped to 1..U-1 and to u's
// chunk (parallel/buckets.h: a pipeline chunk's sweep ends at its edge), are gathered
// ahead unless already resident. Unit 0 is never prefetched: forward gathers it
// first anyway, and backward never acquires it (only the tied unfused head does, nested).
//
// defines: DpCall, recompute_calls, microbatch_calls, prefetch_window
#pragma once
#include <vector>
#include "parallel/buckets.h"  // chunk_of

namespace paralab {

struct DpCall {
  // BEGIN_MICROBATCH: a list covering a whole pipeline step marks where each forward
  // action starts (DataParallel::begin_microbatch); per-microbatch lists need none.
  enum Kind { ACQUIRE, RELEASE, GRADS, BACKWARD_DONE, BEGIN_MICROBATCH } kind;
  int unit;
  bool forward;  // ACQUIRE: which way the model is going (decides what ZeRO-3 prefetches)
};

// recompute_group: per layer its full-recompute group (model/config.h, full_groups; -1 or
// empty: none): backward acquires and releases a group's layers once more, in forward
// order, before the group's last layer's backward (its forward again).
// Full recompute at layer i of a run of layers (the backward is going down): at its
// group's last layer, the group's layers' forward again: acquire, release each (units:
// layer j is unit first_unit + j).
inline void recompute_calls(std::vector<DpCall>& c, const std::vector<int>& group, int i,
                            int first_unit) {
  if (group.empty() || group[i] < 0) return;
  if (i + 1 < (int)group.size() && group[i + 1] == group[i]) return;  // not the group's last
  int i0 = i;
  while (i0 > 0 && group[i0 - 1] == group[i]) --i0;
  for (int j = i0; j <= i; ++j) {
    c.push_back({DpCall::ACQUIRE, first_unit + j, false});
    c.push_back({DpCall::RELEASE, first_unit + j, false});
  }
}

inline std::vector<DpCall> microbatch_calls(int num_layers, bool tied_embeddings,
                                            bool fused_loss,
                                            const std::vector<int>& recompute_group = {}) {
  const int L = num_layers, head = L + 1;
  std::vector<DpCall> c;
  auto acquire = [&](int u, bool fwd) { c.push_back({DpCall::ACQUIRE, u, fwd}); };
  auto release = [&](int u) { c.push_back({DpCall::RELEASE, u, false}); };
  auto grads = [&](int u) { c.push_back({DpCall::GRADS, u, false}); };
  auto done = [&](int u) { c.push_back({DpCall::BACKWARD_DONE, u, false}); };
  // The output weight's gradient: output.weight (head) or the tied word embedding (unit 0).
  auto head_weight_grads = [&](bool fwd) {
    if (!tied_embeddings) {
      grads(head);
    } else if (fwd) {
      grads(0);  // unit 0 is already acquired by the head's forward
    } else {
      acquire(0, false);
      grads(0);
      release(0);
    }
  };

  acquire(0, true);
  release(0);
  for (int l = 0; l < L; ++l) {
    acquire(l + 1, true);
    release(l + 1);
  }
  acquire(head, true);
  if (tied_embeddings) acquire(0, true);
  if (fused_loss) head_weight_grads(true);
  if (tied_embeddings) release(0);
  release(head);

  acquire(head, false);
  if (!fused_loss) head_weight_grads(false);
  grads(head);
  release(head);
  done(head);
  for (int l = L - 1; l >= 0; --l) {
    recompute_calls(c, recompute_group, l, 1);
    acquire(l + 1, false);
    grads(l + 1);
    release(l + 1);
    done(l + 1);
  }
  grads(0);
  done(0);
  return c;
}

// The units a sweep step at unit u prefetches, nearest first (before skipping resident
// ones): u+1..u+p forward, u-1..u-p backward, inside 1..num_units-1 and u's chunk.
inline std::vector<int> prefetch_window(int u, bool forward, int num_units, int prefetch,
                                        const std::vector<int>& unit_chunk = {}) {
  std::vector<int> w;
  for (int i = 1; i <= prefetch; ++i) {
    const int v = forward ? u + i : u - i;
    if (v < 1 || v > num_units - 1) break;
    if (chunk_of(unit_chunk, v) != chunk_of(unit_chunk, u)) break;
    w.push_back(v);
  }
  return w;
}

}  // namespace paralab
