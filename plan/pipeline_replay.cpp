// plan/pipeline_replay.cpp: a pipeline stage replayed over its actions, as the executor runs
// the rank's list (plan/pipeline_impl.h): the calls its model makes on data parallelism
// (which the ZeRO simulation of plan/data_parallel.cpp replays), and the peak of its total.
#include <algorithm>
#include "plan/pipeline_impl.h"

namespace paralab {

// A stage's calls over the whole step, as model/transformer.cpp makes them while the
// executor runs the rank's list of the schedule (model/pipeline_stage.h): before every
// action begin_microbatch; F(i, c) sweeps chunk c's units up (the embedding first on model
// stage 0; the head last on the last one, writing its weight gradient in forward with the
// fused loss: gpt's tied copy is inside the head unit); B(i, c) sweeps them down, each unit
// writing its gradients and declaring them done; the embedding's backward only scatters (no
// parameters). sc.units[c]: chunk c's units in ascending order.
// A split B (zero-bubble schedules): writes the layers' norm and bias gradients but
// declares nothing done; its W writes their weight gradients and declares each layer done,
// then the embedding (written in B: its bucket's lowest unit must finish last).
// Full recompute: sc.groups[c], the full-recompute group of each of chunk c's layers
// (model/config.h, full_groups), adds recompute_calls (zero_schedule.h) to its backward.
// gpt with both ends on the rank (a V's or a mirror's rank 0, zero_schedule.h's one stage):
// the head acquires the embedding's unit for its table and writes its gradient there.
std::vector<DpCall> stage_step_calls(const std::vector<Action>& actions, const StageChunks& sc,
                                     bool fused) {
  const int embedding_unit = sc.embedding_unit, head_unit = sc.head_unit;
  std::vector<DpCall> c;
  for (const Action& a : actions) {
    c.push_back({DpCall::BEGIN_MICROBATCH, 0, false});
    const std::vector<int>& units = sc.units.at(a.chunk);
    const bool split = a.type != ActionType::F && a.split;
    if (a.type == ActionType::F) {
      for (int u : units) {
        c.push_back({DpCall::ACQUIRE, u, true});
        if (u == head_unit && sc.tied_here) c.push_back({DpCall::ACQUIRE, embedding_unit, true});
        if (u == head_unit && fused)
          c.push_back({DpCall::GRADS, sc.tied_here ? embedding_unit : u, false});
        if (u == head_unit && sc.tied_here) c.push_back({DpCall::RELEASE, embedding_unit, false});
        c.push_back({DpCall::RELEASE, u, false});
      }
      continue;
    }
    for (auto it = units.rbegin(); it != units.rend(); ++it) {
      const int u = *it;
      const bool layer = u != embedding_unit && u != head_unit;
      if (a.type == ActionType::W) {
        if (layer) c.push_back({DpCall::GRADS, u, false});
        if (u != head_unit) c.push_back({DpCall::BACKWARD_DONE, u, false});
        continue;
      }
      if (u == embedding_unit) {
        c.push_back({DpCall::GRADS, u, false});
        if (!split) c.push_back({DpCall::BACKWARD_DONE, u, false});
        continue;
      }
      if (layer) {  // the chunk's layer i = u - its first layer's unit
        const int first_layer_unit = units.front() == embedding_unit ? units[1] : units[0];
        recompute_calls(c, sc.groups.at(a.chunk), u - first_layer_unit, first_layer_unit);
      }
      c.push_back({DpCall::ACQUIRE, u, false});
      if (u == head_unit && !fused && sc.tied_here) {  // the table's gradient, on its unit
        c.push_back({DpCall::ACQUIRE, embedding_unit, false});
        c.push_back({DpCall::GRADS, embedding_unit, false});
        c.push_back({DpCall::RELEASE, embedding_unit, false});
      } else if (u == head_unit && !fused) {
        c.push_back({DpCall::GRADS, u, false});
      }
      c.push_back({DpCall::GRADS, u, false});
      c.push_back({DpCall::RELEASE, u, false});
      if (!split || !layer) c.push_back({DpCall::BACKWARD_DONE, u, false});
    }
  }
  return c;
}

// The peak of a stage's total, replayed over its actions (model/transformer.cpp's order):
// the model states and comm buffers at their peaks throughout; per phase of each action the
// activations held then, the logits alive then and the workspace's transients:
//   F, layers      held + the chunk's layers' peak, [selective recompute], the forward's
//                  tokens (model stage 0) and targets (the last), older unfused logits
//   F, head        held + the chunk kept, the loss's logits (fused: one chunk; unfused:
//                  this microbatch's beside the older ones)
//   B, head        unfused: held, d(xf) and the 16-bit copy of the logits' gradient
//   B, layers      held - kept + the chunk's backward peak, [selective recompute]
//   B, embedding   the tokens again
// Exact where the replay's order is the code's; ZeRO-2/3's transients stay at their peaks, and
// so do the layers' workspace transients (MoE, --qk-layernorm: an upper bound with them).
// total() takes it only with recompute: without, plan/total.cpp's replayed_stage_total puts
// each layer's transients inside that layer (total_replayed).
int64_t stage_total_peak(const std::vector<Action>& actions, const StageChunks& sc,
                         const MemoryPlan& mem, int S, const ModelConfig& m, int B, bool half,
                         int tp, bool sp, int act, int64_t grad_recv,
                         const WorkspacePhases& transients) {
  const int64_t base = mem.params + mem.grads + mem.master_params + mem.optimizer_states +
                       mem.comm_buffers + mem.fp8();
  const WorkspacePhases w = workspace_phases(m, B, act, tp, sp);
  const LocalSizes l = local_sizes(m, B, tp, sp);
  const int64_t N = l.N, common = w.common + grad_recv;
  const int64_t unfused_logits = m.fused_cross_entropy ? 0 : N * l.vocab * 4;
  const int64_t loss_logits = logits_bytes(m, B, half, tp);  // the loss's, while it runs
  const int64_t dxf = m.fused_cross_entropy ? 0 : N * m.hidden_size * act;
  int64_t held = 0, peak = 0, logits_held = 0;
  for (const Action& a : actions) {
    const ChunkActivations& c = sc.of(a);
    const bool first = a.stage == 0, last = a.stage == S - 1;
    const int64_t tokens = first ? 4 * N : 0, targets = last ? 4 * N : 0;
    if (a.type == ActionType::F) {
      peak = std::max(peak, base + common + tokens + targets + held + c.layers_peak +
                                mem.recompute + logits_held + transients.forward_transient);
      if (last)
        peak = std::max(peak, base + common + tokens + targets + held + c.kept +
                                  (m.fused_cross_entropy ? loss_logits
                                                         : logits_held + unfused_logits));
      held += c.kept;
      if (last) logits_held += unfused_logits;
    } else if (a.type == ActionType::B) {
      if (last && !m.fused_cross_entropy)
        peak = std::max(peak, base + common + dxf + held + logits_held +
                                  (half ? N * l.vocab * 2 : 0));
      if (last) logits_held -= unfused_logits;
      peak = std::max(peak, base + common + held - c.kept + c.backward_peak + mem.recompute +
                                logits_held + transients.backward_transient);
      held += c.after_backward - c.kept;
      if (first) peak = std::max(peak, base + common + tokens + held + logits_held);
    } else {
      held -= c.after_backward;
    }
  }
  return peak;
}

}  // namespace paralab
