// plan/recompute.cpp: see plan/recompute.h.
#include "plan/recompute.h"
#include <algorithm>

namespace paralab {

RecomputeModule recompute_module_of(const std::string& name) {
  if (name == "norm1.stats" || name == "norm1.out") return RecomputeModule::NORM1;
  if (name == "attn.probs" || name == "attn.probs_dropout_mask" ||
      name == "attn.probs_dropped" || name == "attn.lse" || name == "attn.o_heads")
    return RecomputeModule::CORE_ATTN;
  if (name == "norm2.stats" || name == "norm2.out") return RecomputeModule::NORM2;
  if (name == "mlp.fc1_out" || name == "mlp.act") return RecomputeModule::MLP;
  return RecomputeModule::NONE;
}

bool is_recomputed(const ModelConfig& m, RecomputeModule module) {
  const Recompute& r = m.recompute;
  switch (module) {
    case RecomputeModule::NORM1:
    case RecomputeModule::NORM2: return r.recompute_norm();
    case RecomputeModule::CORE_ATTN: return r.recompute_core_attn();
    case RecomputeModule::MLP: return r.recompute_mlp();
    default: return false;
  }
}

int64_t RecomputeBuffers::peak() const {
  return std::max({sum_bytes(norm1), sum_bytes(core), sum_bytes(mlp_block)});
}

int64_t RecomputeBuffers::forward_peak() const {
  int64_t mlp = 0;
  for (const ActivationTensor& t : mlp_block)
    if (t.name != "mlp.fc1_in") mlp += t.bytes();
  return std::max({sum_bytes(norm1), sum_bytes(core), mlp});
}

// The layer's whole list as without recompute; each tensor of a recomputed module goes to
// the group it lives in.
RecomputeBuffers recompute_buffers(const ModelConfig& m, int B, int act_bytes, int mask_bytes,
                                   int tp, bool sp) {
  ModelConfig all = m;
  all.recompute = Recompute();
  RecomputeBuffers r;
  for (const ActivationTensor& t : layer_activation_tensors(all, B, act_bytes, mask_bytes, tp, sp)) {
    const RecomputeModule mod = recompute_module_of(t.name);
    if (!is_recomputed(m, mod)) continue;
    if (mod == RecomputeModule::NORM1) r.norm1.push_back(t);
    else if (mod == RecomputeModule::CORE_ATTN) r.core.push_back(t);
    else r.mlp_block.push_back(t);
  }
  // With sp, fc1's input all-gathered by the MLP recompute, kept for fc1's weight gradient.
  if (m.recompute.recompute_mlp() && sp) {
    const LocalSizes l = local_sizes(m, B, tp, sp);
    r.mlp_block.push_back({"mlp.fc1_in", l.N * m.hidden_size, act_bytes, false});
  }
  return r;
}

int64_t selective_saved_bytes_per_layer(const ModelConfig& m, int B, int act_bytes,
                                        int mask_bytes, int tp, bool sp) {
  ModelConfig all = m;
  all.recompute = Recompute();
  return sum_bytes(layer_activation_tensors(all, B, act_bytes, mask_bytes, tp, sp)) -
         sum_bytes(layer_activation_tensors(m, B, act_bytes, mask_bytes, tp, sp));
}

int64_t total_at_recompute(const Plan& plan, const MemoryPlan& mem) {
  if (mem.recompute == 0) return 0;
  const ModelConfig& m = plan.model;
  const int B = plan.train.micro_batch_size, act = storage_bytes(plan.train);
  const RecomputeBuffers r = recompute_buffers(m, B, act, plan.options.mask_bytes, plan.tp,
                                               plan.sequence_parallel);
  // Workspace (workspace_phases): the common scratch, plus the int32 tokens and targets in
  // the forward; --no-fused-ce's d(xf) lives in the head's backward only, before the layers'.
  const WorkspacePhases w =
      workspace_phases(m, B, act, plan.tp, plan.sequence_parallel);
  // The last layer, forward or backward: every layer's kept tensors and the embedding's
  // output are alive, the head's are not.
  const int64_t in_layer = mem.params + mem.grads + mem.master_params + mem.optimizer_states +
                           mem.comm_buffers + mem.fp8() + w.common + mem.activations -
                           sum_bytes(plan.head_activations);
  return std::max(in_layer + w.forward + r.forward_peak(), in_layer + r.peak());
}

KorthikantiCheck korthikanti_check_recompute(const Plan& plan) {
  const Recompute& r = plan.model.recompute;
  if (!r.selective()) return korthikanti_check(plan);
  KorthikantiCheck c;
  if (!r.core_attn) {
    c = korthikanti_check(plan);
  } else {
    // The attention's assumptions do not touch what core_attn leaves: check the rest under
    // them (naive, attention dropout), then take the selective row.
    Plan q = plan;
    q.model.attention = AttentionImpl::NAIVE;
    q.model.attention_dropout = std::max(q.model.attention_dropout, 0.1f);
    c = korthikanti_check(q);
    const ModelConfig& m = plan.model;
    const double s = m.seq_length, b = plan.train.micro_batch_size, h = m.hidden_size,
                 t = plan.tp;
    c.closed_form_bytes = plan.sequence_parallel ? korthikanti_tp_sp_selective_bytes(s, b, h, t)
                                                 : korthikanti_tp_selective_bytes(s, b, h, t);
    c.formula = plan.tp == 1 ? "34sbh" : plan.sequence_parallel ? "34sbh/t" : "sbh(10 + 24/t)";
  }
  if (r.mlp)
    c.differences.push_back("selective mlp: fc1's and the activation's outputs recomputed, "
                            "not kept (the paper's selective keeps them)");
  if (r.norm)
    c.differences.push_back("selective norm: the norms' outputs recomputed, not kept (the "
                            "paper keeps them)");
  return c;
}

ChunkActivations chunk_activations(const std::vector<int>& g, int64_t input, int64_t layer,
                                   int64_t out, int64_t head, int64_t w_copies, int64_t w_keep,
                                   bool split) {
  const std::vector<int64_t> copies(g.size(), w_copies), keep(g.size(), w_keep);
  return chunk_activations(g, input, std::vector<int64_t>(g.size(), layer), out, head, copies,
                           keep, split);
}

ChunkActivations chunk_activations(const std::vector<int>& g, int64_t input,
                                   const std::vector<int64_t>& layers, int64_t out,
                                   int64_t head, const std::vector<int64_t>& w_copies,
                                   const std::vector<int64_t>& w_keep, bool split) {
  const int n = (int)g.size();
  auto top = [&](int i) { return i + 1 == n || g[i + 1] != g[i]; };  // a group's last layer
  ChunkActivations c;
  // forward: each layer's tensors; inside a group the one below is freed once read, and
  // the group's last keeps only its output
  int64_t cur = input, peak = cur;
  for (int i = 0; i < n; ++i) {
    cur += layers[i];
    peak = std::max(peak, cur);
    if (g[i] < 0) continue;
    if (i > 0 && g[i - 1] == g[i]) cur -= layers[i - 1];
    if (top(i)) cur -= layers[i] - out;
  }
  c.layers_peak = peak;
  cur += head;
  c.forward_peak = std::max(peak, cur);
  c.kept = cur;
  // backward: the head first; at a group's last layer its forward again (the stored output
  // is made anew in place), then every layer frees all of its tensors (split: makes its
  // copies for W first, and keeps w_keep)
  cur -= head;
  peak = c.kept;
  for (int i = n - 1; i >= 0; --i) {
    if (g[i] >= 0 && top(i)) {
      for (int j = i; j >= 0 && g[j] == g[i]; --j) cur += j == i ? layers[j] - out : layers[j];
      peak = std::max(peak, cur);
    }
    if (split) {
      cur += w_copies.at(i);
      peak = std::max(peak, cur);
      cur += w_keep.at(i) - w_copies.at(i);
    }
    cur -= layers[i];
  }
  c.backward_peak = peak;
  c.after_backward = split ? cur - input : 0;  // the input goes at the end of a split B
  return c;
}

}  // namespace paralab
