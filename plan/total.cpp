// plan/total.cpp: the peak of the ledger's total on one stage (no pipelining) under ZeRO-2/3,
// replayed call by call. ZeRO-2/3's bucket gradient buffers and gathered units are
// transients: the sum of the category peaks holds them at their peak while the activations,
// the logits and the forward's tokens and targets are at theirs, but they do not coincide
// (ZeRO-2's largest buckets are alive in backward, after the loss's logits are gone). Here
// each compute of the microbatch (model/transformer.cpp, model/head.cpp) is paired with the
// buffers alive while it runs, from simulate_zero_step's trace of the same calls
// (parallel/zero_schedule.h, microbatch_calls): a buffer is allocated by the ACQUIRE or
// GRADS before a compute and freed by the RELEASE or BACKWARD_DONE after it, so the total
// peaks at one of these computes:
//   F embedding    common + tokens + targets + x0                       after ACQUIRE(0)
//   F layer l      common + tokens + targets + x0 + layers below + its forward peak (its
//                  tensors and transients, LayerFootprint) + r_f        after ACQUIRE(l+1)
//                  (MoE: max(before its experts + r_attention, its peak + r_norm2))
//   F head (loss)  common + tokens + targets + x0 + the L layers + head + logits (fused: one
//                  chunk; unfused: N V_l fp32)                          before its RELEASE
//   B head         unfused, output weight: + N V_l fp32 logits, their 16-bit copy, d(xf)
//                  final norm: x0 + the L layers + head (unfused: xf freed, d(xf) alive)
//   B layer l      common + x0 + layers 0..l + max(r_b, its backward transients)  after GRADS(l+1)
//                  (MoE: max(r_attention, qk-norm's, r_norm2 + its experts' transients))
//   B embedding    common + tokens + x0                                 after GRADS(0)
// plus the model states held all step (resident params and grads, master, Adam) and the
// comm buffers. r_f, r_b: selective recompute's buffers in a layer's forward and backward
// (plan/recompute.h); r_attention, r_norm2: an MoE layer's, before and beside its experts.
// Each term is the one MemoryPlan's categories and total_at_recompute count, so without
// transients (ZeRO 0-1) the replay equals MemoryPlan::total().
#include <algorithm>
#include "plan/plan.h"
#include "plan/recompute.h"  // recompute_buffers

namespace paralab {

namespace {
// The transient buffers alive after each call: d's simulation (data_parallel_plan), plus the
// experts' data parallelism's, whose calls mirror d's one for one.
std::vector<std::array<int64_t, 2>> with_experts(const DataParallelPlan& d,
                                                 const DataParallelPlan* experts) {
  std::vector<std::array<int64_t, 2>> trace = d.trace;
  if (experts)
    for (size_t k = 0; k < trace.size() && k < experts->trace.size(); ++k) {
      trace[k][0] += experts->trace[k][0];
      trace[k][1] += experts->trace[k][1];
    }
  return trace;
}
}  // namespace

int64_t replayed_total(const Plan& plan, const MemoryPlan& mem, const DataParallelPlan& d,
                       const DataParallelPlan* experts) {
  const ModelConfig& m = plan.model;
  const int B = plan.train.micro_batch_size, act = storage_bytes(plan.train), tp = plan.tp;
  const bool sp = plan.sequence_parallel, half = plan.train.half();
  std::vector<std::array<int64_t, 2>> trace = with_experts(d, experts);
  const size_t n = d.microbatch.size();
  // stages 0-1 have no transients: the same walk over buffers of 0 (equal to
  // MemoryPlan::total(), which tests/test_plan_zero.cpp holds)
  if (trace.empty()) trace.assign((size_t)plan.microbatches_per_rank * n, {0, 0});
  const int64_t base = mem.resident_params + mem.resident_grads + mem.master_params +
                       mem.optimizer_states + mem.comm_buffers + mem.fp8();
  const WorkspacePhases w = workspace_phases(m, B, act, tp, sp);
  const LocalSizes l = local_sizes(m, B, tp, sp);
  const int64_t x0 = sum_bytes(plan.embedding_activations);
  const int64_t head = sum_bytes(plan.head_activations);
  const int L = m.num_layers, head_unit = L + 1;
  // Per microbatch the layers' saved bytes below layer l (below[l], below[L] all of them), and
  // each layer's own peak in its forward and its transients in its backward (LayerFootprint).
  auto below = [&](size_t mb, int l) {
    int64_t s = 0;
    for (int j = 0; j < l; ++j) s += plan.footprint((int)mb, j).saved;
    return s;
  };
  int64_t head_out = 0;  // --no-fused-ce's xf, freed with the logits in the head's backward
  for (const ActivationTensor& t : plan.head_activations)
    if (t.name == "final_norm.out") head_out = t.bytes();
  const RecomputeBuffers r = recompute_buffers(m, B, act, plan.options.mask_bytes, tp, sp);
  const bool selective = mem.recompute > 0;
  const int64_t r_f = selective ? r.forward_peak() : 0, r_b = selective ? r.peak() : 0;
  // an MoE layer's: the attention block's buffers (norm1's, the core's) before the experts,
  // norm2's beside them (its output is their input; selective mlp is refused with experts)
  const int64_t r_attention = selective ? std::max(sum_bytes(r.norm1), sum_bytes(r.core)) : 0;
  const int64_t r_norm2 = selective ? sum_bytes(r.mlp_block) : 0;
  const int64_t qk_norm = qk_norm_transient_bytes(m, B, act, tp);
  const int64_t tokens = 4 * l.N;  // int32, the embedding's backward
  const int64_t unfused_logits = l.N * l.vocab * 4, half_copy = half ? l.N * l.vocab * 2 : 0;
  const int64_t dxf = (int64_t)l.N * m.hidden_size * act;
  const int64_t loss_logits = m.fused_cross_entropy ? logits_bytes(m, B, half, tp) : unfused_logits;
  const int pb = act, gb = act;  // parameters and gradients in the storage type

  int64_t peak = 0;
  // The walk: state per microbatch (forward or backward, inside the head, GRADS of the head
  // seen in its backward).
  for (size_t mb = 0; mb * n < trace.size(); ++mb) {
    bool forward = true, in_head = false;
    int head_grads = 0;
    for (size_t i = 0; i < n; ++i) {
      const DpCall& c = d.microbatch[i];
      const size_t at = mb * n + i;
      auto probe = [&](size_t k, int64_t other) {
        peak = std::max(peak, base + other + trace[k][0] * pb + trace[k][1] * gb);
      };
      const int u = c.unit;
      if (forward) {
        if (c.kind == DpCall::ACQUIRE && !c.forward) {
          forward = false;  // the head's backward begins
        } else if (c.kind == DpCall::ACQUIRE && u == head_unit) {
          in_head = true;
        } else if (c.kind == DpCall::ACQUIRE && !in_head && u == 0) {
          probe(at, w.common + w.forward + x0);
        } else if (c.kind == DpCall::ACQUIRE && !in_head) {
          const LayerFootprint& f = plan.footprint((int)mb, u - 1);
          const int64_t layer = m.moe.is_moe_layer(u - 1)
                                    ? std::max(f.before_moe + r_attention, f.forward_peak + r_norm2)
                                    : f.forward_peak + r_f;
          probe(at, w.common + w.forward + x0 + below(mb, u - 1) + layer);
        } else if (c.kind == DpCall::RELEASE && in_head) {
          probe(at - 1, w.common + w.forward + x0 + below(mb, L) + head + loss_logits);
          in_head = false;
        }
        if (forward) continue;
        in_head = true;
        continue;
      }
      if (c.kind == DpCall::GRADS && in_head) {
        const bool output_weight = !m.fused_cross_entropy && head_grads == 0;
        ++head_grads;
        if (output_weight)
          probe(at, w.common + x0 + below(mb, L) + head + unfused_logits + half_copy + dxf);
        else
          probe(at, w.common + x0 + below(mb, L) +
                        (m.fused_cross_entropy ? head : head - head_out + dxf));
      } else if (c.kind == DpCall::BACKWARD_DONE && u == head_unit) {
        in_head = false;
      } else if (c.kind == DpCall::GRADS && u >= 1 && u <= L) {
        // an MoE layer's transients live beside norm2's recompute, --qk-layernorm's after
        // the core's is freed
        const LayerFootprint& f = plan.footprint((int)mb, u - 1);
        probe(at, w.common + x0 + below(mb, u) +
                      (m.moe.is_moe_layer(u - 1)
                           ? std::max({r_attention, qk_norm, r_norm2 + f.moe_backward_transient})
                           : std::max(r_b, f.backward_transient)));
      } else if (c.kind == DpCall::GRADS && u == 0 && !in_head) {
        probe(at, w.common + tokens + x0);
      }
    }
  }
  return peak;
}

// ---- a pipeline stage ----------------------------------------------------------------------
// The same pairing over a stage's step (plan_pipeline's stage_step_calls: BEGIN_MICROBATCH
// before each action, then its units), without recompute (elsewhere stage_total_peak holds
// the transients at their peak). Per action on chunk c (input in_c: x0 or the received
// activation; n layers, saved_j layer j's tensors; kept_c its forward's whole keep) with H
// held before it, the other bytes at each compute:
//   F  embedding  common + tokens + targets + H + logits held + x0
//      layer i    common + tokens + targets + H + logits held + in_c + saved_0..i-1 + layer
//                 i's forward peak (its tensors and transients, LayerFootprint)
//      head       common + tokens + targets + H + kept_c + the loss's logits (unfused: the
//                 held ones beside this microbatch's)
//   B  head       unfused output weight: common + H + logits held + 16-bit copy + d(xf);
//                 final norm: common + H + logits held (unfused: - xf + d(xf))
//      layer i    common + H - kept_c + in_c + saved_0..i + logits held + its backward
//                 transients; split (zb-h1): + keep_j of the layers above it (j > i), and
//                 instead of the transients the most its B makes beside its tensors:
//                 max(an MoE layer's transients (no copies made yet), the copies made before
//                 head_norm_backward + its d_raw, all its copies) (plan.h, SplitLayerBytes)
//      embedding  common + tokens + H - kept_c + x0 [split: + every layer's keep_j]
//   W  layer i    common + H + logits held, H still holding keep_0..i (each freed after its W)
// tokens on model stage 0, targets on the last; common includes the gradient receive buffer.
int64_t replayed_stage_total(const Plan& plan, const MemoryPlan& mem, const DataParallelPlan& d,
                             const std::vector<Action>& actions,
                             const std::vector<int64_t>& chunk_input,
                             const std::vector<std::vector<int64_t>>& kept_sets,
                             const std::vector<int>& chunk_first_layer,
                             const std::vector<int>& unit_chunk,
                             const std::vector<int>& deferred_units, int embedding_unit,
                             int head_unit, int64_t grad_recv,
                             const std::vector<SplitLayerBytes>& split,
                             const DataParallelPlan* experts) {
  const ModelConfig& m = plan.model;
  const int B = plan.train.micro_batch_size, act = storage_bytes(plan.train), tp = plan.tp;
  const bool sp = plan.sequence_parallel, half = plan.train.half(), fused = m.fused_cross_entropy;
  (void)deferred_units;  // d's simulation (data_parallel_plan) was given them
  std::vector<std::array<int64_t, 2>> trace = with_experts(d, experts);
  // stages 0-1 have no transients: the same walk over buffers of 0 (equal to
  // stage_total_peak then, which tests/test_plan_pipeline.cpp holds)
  if (trace.empty()) trace.assign(d.microbatch.size(), {0, 0});
  const int64_t base = mem.resident_params + mem.resident_grads + mem.master_params +
                       mem.optimizer_states + mem.comm_buffers + mem.fp8();
  const WorkspacePhases w = workspace_phases(m, B, act, tp, sp);
  const LocalSizes l = local_sizes(m, B, tp, sp);
  const int64_t common = w.common + grad_recv;
  // the first n layers of chunk c in microbatch mb, each with its own bytes (Plan::footprint)
  auto first_layers = [&](int mb, int c, int n) {
    int64_t s = 0;
    for (int j = 0; j < n; ++j) s += plan.footprint(mb, chunk_first_layer.at(c) + j).saved;
    return s;
  };
  const int64_t x0 = sum_bytes(plan.embedding_activations);
  int64_t head_out = 0;
  for (const ActivationTensor& t : plan.head_activations)
    if (t.name == "final_norm.out") head_out = t.bytes();
  const int64_t unfused_logits = fused ? 0 : l.N * l.vocab * 4;
  const int64_t half_copy = half ? l.N * l.vocab * 2 : 0;
  const int64_t dxf = fused ? 0 : (int64_t)l.N * m.hidden_size * act;
  const int64_t loss_logits = logits_bytes(m, B, half, tp);
  const int S = plan.pipeline.shape.model_stages();
  const int pb = act, gb = act;

  const int64_t d_raw = qk_norm_transient_bytes(m, B, act, tp);  // --qk-layernorm's

  // gpt with both ends here: the head's calls on the embedding's unit are the head's own
  const bool tied_here = m.tied_embeddings() && embedding_unit >= 0 && head_unit >= 0;
  int64_t peak = 0, held = 0, logits_held = 0;
  int64_t above = 0;  // split B: the keeps of the chunk's layers it has done so far
  int k = -1, layers_seen = 0, head_grads = 0, n_layers = 0, mb = 0;
  std::vector<int64_t> chunk_kept = kept_sets.at(0);
  bool first = false, last = false, split_b = false, in_head = false;
  ActionType type = ActionType::F;
  int chunk = 0;
  for (size_t i = 0; i < d.microbatch.size(); ++i) {
    const DpCall& c = d.microbatch[i];
    auto probe = [&](size_t at, int64_t other) {
      peak = std::max(peak, base + other + trace[at][0] * pb + trace[at][1] * gb);
    };
    if (c.kind == DpCall::BEGIN_MICROBATCH) {
      // the previous action's end: what it keeps (a split B its layers' keeps; W has freed
      // them layer by layer)
      if (k >= 0 && type == ActionType::F) {
        held += chunk_kept[chunk];
        if (last) logits_held += unfused_logits;
      } else if (k >= 0 && type == ActionType::B) {
        held += above - chunk_kept[chunk];
      }
      const Action& a = actions.at(++k);
      mb = a.microbatch;
      chunk_kept = kept_sets.at(mb % kept_sets.size());
      type = a.type;
      split_b = a.type == ActionType::B && a.split;
      chunk = a.chunk;
      first = a.stage == 0;
      last = a.stage == S - 1;
      layers_seen = head_grads = 0;
      above = 0;
      n_layers = 0;
      for (int u = 0; u < (int)unit_chunk.size(); ++u)
        n_layers += unit_chunk[u] == chunk && u != embedding_unit && u != head_unit;
      continue;
    }
    if (c.kind == DpCall::ACQUIRE && c.unit == head_unit) in_head = true;
    if (c.kind == DpCall::RELEASE && c.unit == head_unit) in_head = false;
    // inside the head the embedding's unit is the head's table (tied here)
    const bool table = tied_here && in_head && c.unit == embedding_unit;
    const int u = table ? head_unit : c.unit;
    const int64_t tokens = first ? 4 * l.N : 0, targets = last ? 4 * l.N : 0;
    const int64_t in = chunk_input[chunk];
    const bool layer = u != embedding_unit && u != head_unit;
    if (type == ActionType::F) {
      if (c.kind == DpCall::ACQUIRE && u == embedding_unit) {
        probe(i, common + tokens + targets + held + logits_held + x0);
      } else if (c.kind == DpCall::ACQUIRE && layer) {
        const int j = layers_seen++;  // the chunk's layer j, the ones below it done
        probe(i, common + tokens + targets + held + logits_held + in +
                     first_layers(mb, chunk, j) +
                     plan.footprint(mb, chunk_first_layer.at(chunk) + j).forward_peak);
      } else if (c.kind == DpCall::RELEASE && u == head_unit && table == tied_here) {
        // the loss ran before: before the table's release when tied here
        probe(i - 1, common + tokens + targets + held + chunk_kept[chunk] +
                         (fused ? loss_logits : logits_held + unfused_logits));
      }
    } else if (type == ActionType::B) {
      if (c.kind == DpCall::GRADS && u == head_unit) {
        if (!fused && head_grads++ == 0) {
          probe(i, common + held + logits_held + half_copy + dxf);
          logits_held -= unfused_logits;
        } else {
          probe(i, common + held + logits_held + (fused ? 0 : dxf - head_out));
        }
      } else if (c.kind == DpCall::GRADS && u == embedding_unit) {
        probe(i, common + tokens + held - chunk_kept[chunk] + x0 + above);
      } else if (c.kind == DpCall::GRADS) {
        const int j = n_layers - 1 - layers_seen++;  // layers 0..j of the chunk alive
        const int gl = chunk_first_layer.at(chunk) + j;
        const LayerFootprint& f = plan.footprint(mb, gl);
        int64_t own = f.backward_transient;
        if (split_b) {
          const SplitLayerBytes& s = split.at(gl);
          own = std::max({m.moe.is_moe_layer(gl) ? f.backward_transient : 0,
                          s.before_head_norm + d_raw, s.copies});
        }
        probe(i, common + held - chunk_kept[chunk] + in + first_layers(mb, chunk, j + 1) +
                     above + logits_held + own);
        if (split_b) above += split.at(gl).keep;
      }
    } else if (c.kind == DpCall::GRADS && layer) {  // W: layer j's weight gradients
      const int j = n_layers - 1 - layers_seen++;
      probe(i, common + held + logits_held);
      held -= split.at(chunk_first_layer.at(chunk) + j).keep;
    }
  }
  return peak;
}

}  // namespace paralab
