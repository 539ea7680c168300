// plan/pipeline.cpp: the pipeline stages predicted: each stage's calls over the step as the
// executor runs the schedule's list, its peak total replayed over its actions, its memory,
// p2p traffic and FLOPs (plan.h, plan_pipeline; parallel/pipeline_schedule.h).
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include "model/param_table.h"
#include "plan/context_parallel.h"  // context_parallel_comm
#include "plan/expert_parallel.h"  // expert_parallel_comm
#include "plan/plan.h"
#include "plan/recompute.h"  // total_at_recompute

namespace paralab {

// ---- pipeline stages ------------------------------------------------------------------
namespace {

// A stage's calls over the whole step, as model/transformer.cpp makes them while the
// executor runs the rank's list of the schedule (model/pipeline_stage.h): before every
// action begin_microbatch; F(i, c) sweeps chunk c's units up (the embedding first on model
// stage 0; the head last on the last one, writing its weight gradient in forward with the
// fused loss: gpt's tied copy is inside the head unit); B(i, c) sweeps them down, each unit
// writing its gradients and declaring them done; the embedding's backward only scatters (no
// parameters). chunk_units[c]: chunk c's units in ascending order.
// A split schedule (zb-h1): B writes the layers' norm and bias gradients but declares
// nothing done; W writes their weight gradients and declares each layer done, then the
// embedding (written in B: its bucket's lowest unit must finish last).
// Full recompute: chunk_groups[c], the full-recompute group of each of chunk c's layers
// (model/config.h, full_groups), adds recompute_calls (zero_schedule.h) to its backward.
std::vector<DpCall> stage_step_calls(const std::vector<Action>& actions,
                                     const std::vector<std::vector<int>>& chunk_units,
                                     int embedding_unit, int head_unit, bool fused,
                                     bool split,
                                     const std::vector<std::vector<int>>& chunk_groups) {
  std::vector<DpCall> c;
  for (const Action& a : actions) {
    c.push_back({DpCall::BEGIN_MICROBATCH, 0, false});
    const std::vector<int>& units = chunk_units.at(a.chunk);
    if (a.type == ActionType::F) {
      for (int u : units) {
        c.push_back({DpCall::ACQUIRE, u, true});
        if (u == head_unit && fused) c.push_back({DpCall::GRADS, u, false});
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
        recompute_calls(c, chunk_groups.at(a.chunk), u - first_layer_unit, first_layer_unit);
      }
      c.push_back({DpCall::ACQUIRE, u, false});
      if (u == head_unit && !fused) c.push_back({DpCall::GRADS, u, false});
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
//   B, head        unfused: held, d(xf) and the bf16 copy of the logits' gradient
//   B, layers      held - kept + the chunk's backward peak, [selective recompute]
//   B, embedding   the tokens again
// Exact where the replay's order is the code's; ZeRO-2/3's transients stay at their peaks, and
// so do the layers' workspace transients (MoE, --qk-layernorm: an upper bound with them).
// total() takes it only with recompute: without, plan/total.cpp's replayed_stage_total puts
// each layer's transients inside that layer (total_replayed).
int64_t stage_total_peak(const std::vector<Action>& actions,
                         const std::vector<std::vector<ChunkActivations>>& chunk_sets,
                         const MemoryPlan& mem, int S, const ModelConfig& m, int B, bool bf16,
                         int tp, bool sp, int act, int64_t grad_recv,
                         const WorkspacePhases& transients) {
  const int64_t base = mem.params + mem.grads + mem.master_params + mem.optimizer_states +
                       mem.comm_buffers;
  const WorkspacePhases w = workspace_phases(m, B, act, tp, sp);
  const LocalSizes l = local_sizes(m, B, tp, sp);
  const int64_t N = l.N, common = w.common + grad_recv;
  const int64_t unfused_logits = m.fused_cross_entropy ? 0 : N * l.vocab * 4;
  const int64_t loss_logits = logits_bytes(m, B, bf16, tp);  // the loss's, while it runs
  const int64_t dxf = m.fused_cross_entropy ? 0 : N * m.hidden_size * act;
  int64_t held = 0, peak = 0, logits_held = 0;
  for (const Action& a : actions) {
    const ChunkActivations& c = chunk_sets.at(a.microbatch % chunk_sets.size()).at(a.chunk);
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
                                  (bf16 ? N * l.vocab * 2 : 0));
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

void add_entry(std::vector<CommPlanEntry>& out, CommGroup g, CommOp op, int n, int64_t calls,
               int64_t payload) {
  if (calls > 0) out.push_back({g, op, calls, payload, bus_factor(op, n) * (double)payload});
}

}  // namespace

void plan_pipeline(Plan& plan) {
  const ModelConfig& m = plan.model;
  const TrainConfig& t = plan.train;
  const ParallelConfig& par = plan.parallel;
  PipelinePlan& pp = plan.pipeline;
  const int p = par.pipeline_parallel, v = par.virtual_pipeline;
  // Without pipelining the trainer runs F, B of each microbatch in turn: 1F1B on one stage.
  pp.shape = {p == 1 ? PipelineSchedule::ONE_F_ONE_B : par.pipeline_schedule, p,
              (int)plan.microbatches_per_rank, v};
  const std::string bad = check_pipeline_shape(pp.shape);
  if (!bad.empty()) throw std::invalid_argument("plan: pipeline " + bad);
  pp.stage_layers = pipeline_stage_layers(m.num_layers, p, v, par.first_stage_layers,
                                          par.last_stage_layers);
  pp.schedule = make_schedule(pp.shape);
  // plan.h, PipelinePlan::costs: a B that also makes the weight gradient costs 3 units
  if (!splits_backward(pp.shape.kind)) pp.costs.B = 3, pp.costs.W = 0;
  pp.sim = simulate(pp.schedule, pp.costs);
  pp.closed_form = bubble_closed_form(pp.shape, pp.costs);
  const int B = t.micro_batch_size, tp = plan.tp, act = storage_bytes(t), z = par.zero_stage;
  const int64_t h = m.hidden_size, k = plan.microbatches_per_rank;
  pp.message_bytes = local_sizes(m, B, tp, plan.sequence_parallel).N_l * h * act;
  pp.stages.clear();
  if (p == 1) return;

  const int S = pp.shape.model_stages(), dp = plan.dp;
  const int64_t word_local = plan.padded_vocab / tp * h;
  // A chunk keeps its input for backward: x0 on model stage 0, the received activation on
  // the others (N_l h each); the head's tensors on the last model stage.
  const int64_t embedding_bytes = sum_bytes(plan.embedding_activations);
  const int64_t head_bytes = sum_bytes(plan.head_activations);
  const int param_b = act, grad_b = act;  // params and grads in the storage type
  // zb-h1 (model/layer.h, BackwardPart): from B to W a layer keeps its linears' inputs
  // (norm1.out, attn.ctx, norm2.out, mlp.act; with sp the norms' all-gathered N h copies
  // instead of their N_l h rows) and output gradients (N x qkv_l, h, fc1_l, h), made during
  // B before it frees anything (plan.h, SplitLayerBytes). An MoE layer's B writes its MoE
  // weight gradients itself: W has only the attention's linears (no mlp.act, d_fc1, d_fc2,
  // nor with sp norm2's gathered output).
  const bool split = splits_backward(pp.shape.kind);
  std::vector<SplitLayerBytes> split_bytes;  // per global layer, empty without a split
  if (split) {
    const LocalSizes l = local_sizes(m, B, tp, plan.sequence_parallel);
    const bool sp = plan.sequence_parallel;
    // the inputs kept (with sp the norms' gathered copies instead, counted below)
    int64_t attn_in = 0, norm2_out = 0, mlp_act = 0;
    for (const ActivationTensor& x : plan.layer_activations) {
      if (x.name == "attn.ctx" || (!sp && x.name == "norm1.out")) attn_in += x.bytes();
      if (!sp && x.name == "norm2.out") norm2_out += x.bytes();  // an MoE layer's too
      if (x.name == "mlp.act") mlp_act += x.bytes();
    }
    // copied in B, in the code's order: d_fc2, [fc1_in], d_fc1 (dense only), d_proj, then
    // after head_norm_backward [qkv_in], d_qkv ([ ]: with sp, a norm's output on all N rows)
    const int64_t gathered = sp ? l.N * h * act : 0;
    const int64_t mlp_copies = l.N * h * act + gathered + l.N * l.fc1 * act;
    const int64_t d_proj = l.N * h * act, attn_tail = gathered + l.N * l.qkv * act;
    for (int layer = 0; layer < m.num_layers; ++layer) {
      SplitLayerBytes b;
      const bool moe = m.moe.is_moe_layer(layer);
      b.before_head_norm = (moe ? 0 : mlp_copies) + d_proj;
      b.copies = b.before_head_norm + attn_tail;
      b.keep = b.copies + attn_in + norm2_out + (moe ? 0 : mlp_act);
      split_bytes.push_back(b);
    }
  }

  for (int r = 0; r < p; ++r) {
    PipelineStagePlan st;
    st.pp_rank = r;
    // model/param_table.h: the same slice, units and chunks the trainer builds
    const StageSlice slice = pipeline_stage_slice(m, p, v, r, par.first_stage_layers,
                                                  par.last_stage_layers);
    st.embedding = slice.embedding;
    st.head = slice.head;
    st.tied_copy = slice.tied_copy;
    st.chunk_first_layer = slice.chunk_first_layer;
    st.chunk_layers = slice.chunk_layers;
    // One (microbatch, chunk): its input, its layers (full recompute: the groups' outputs),
    // the head's on the last model stage (plan/recompute.h, chunk_activations).
    // Each chunk's own layers (MoE and dense differ); per microbatch with a measured routing.
    int layers = 0;
    const size_t sets = plan.layer_footprints.size();
    std::vector<std::vector<ChunkActivations>> chunk_sets(sets);
    std::vector<std::vector<int>> chunk_groups;
    WorkspacePhases transients;  // the stage's layers' largest workspace transients
    for (int c = 0; c < v; ++c) {
      const int s = c * p + r, n = pp.stage_layers[s], first = slice.chunk_first_layer[c];
      layers += n;
      chunk_groups.push_back(m.recompute.full_groups(n));
      add_layer_transients(transients, plan, first, n);
      std::vector<int64_t> copies, keep;  // split: each layer's (SplitLayerBytes)
      for (int i = 0; split && i < n; ++i) {
        copies.push_back(split_bytes[first + i].copies);
        keep.push_back(split_bytes[first + i].keep);
      }
      for (size_t mb = 0; mb < sets; ++mb)
        chunk_sets[mb].push_back(chunk_activations(
            chunk_groups.back(), s == 0 ? embedding_bytes : pp.message_bytes,
            plan.layer_saved((int)mb, first, n), layer_output_bytes(plan),
            s == S - 1 ? head_bytes : 0, copies, keep, split));
      st.chunk_activation_bytes.push_back(chunk_sets[0].back().kept);
    }
    st.unit_begin = stage_units(m, tp, slice, expert_split(par));
    st.expert_unit_begin = stage_expert_units(m, slice, expert_split(par));
    st.params = st.unit_begin.back() +
                (st.expert_unit_begin.empty() ? 0 : st.expert_unit_begin.back());
    const std::vector<int> unit_chunk = stage_unit_chunk(slice);
    std::vector<std::vector<int>> chunk_units(v);
    for (int u = 0; u < (int)unit_chunk.size(); ++u) chunk_units[unit_chunk[u]].push_back(u);
    const int U = (int)unit_chunk.size();
    st.data_parallel = data_parallel_plan(
        st.unit_begin,
        stage_step_calls(pp.schedule.ranks[r], chunk_units, slice.embedding ? 0 : -1,
                         slice.head ? U - 1 : -1, m.fused_cross_entropy, split, chunk_groups),
        z, plan.dp_cp, plan.options, 1, unit_chunk, stage_deferred_units(m, slice),
        par.offload);
    const DataParallelPlan& d = st.data_parallel;
    // ep > 1: the stage's experts, the same calls over the expert-data-parallel group
    if (!st.expert_unit_begin.empty())
      st.expert_data_parallel = data_parallel_plan(st.expert_unit_begin, d.microbatch, z,
                                                   par.expert_data_parallel(), plan.options, 1,
                                                   unit_chunk, {}, par.offload);
    const DataParallelPlan* experts =
        st.expert_unit_begin.empty() ? nullptr : &st.expert_data_parallel;

    // The schedule: activations held at the peak (order-based), time, messages sent. A
    // split B frees all but what W reads (SplitLayerBytes::keep per layer), W the rest.
    int64_t held_bytes = 0, peak_bytes = 0;
    for (const Action& a : pp.schedule.ranks[r]) {
      const ChunkActivations& cb = chunk_sets[a.microbatch % sets][a.chunk];
      const int64_t chunk = cb.kept;
      if (a.type == ActionType::F) {
        peak_bytes = std::max(peak_bytes, held_bytes + cb.forward_peak);
        held_bytes += chunk;
      } else if (a.type == ActionType::B) {
        peak_bytes = std::max(peak_bytes, held_bytes - chunk + cb.backward_peak);
        held_bytes += cb.after_backward - chunk;
      } else {
        held_bytes -= cb.after_backward;  // W
      }
      peak_bytes = std::max(peak_bytes, held_bytes);
      for (const Message& msg : a.sends)
        ++(msg.kind == Message::ACTIVATION ? st.activations_sent : st.gradients_sent);
    }
    st.held = pp.sim.peak_held[r];
    st.held_until_w = pp.sim.peak_held_until_w[r];
    st.busy = pp.sim.busy[r];
    st.idle = pp.sim.idle[r];

    MemoryPlan& mem = st.memory;
    fill_model_states(mem, d, t, experts);
    int moe_layers = 0;  // the MoE layers this stage holds
    for (int c = 0; c < v; ++c)
      for (int i = 0; i < st.chunk_layers[c]; ++i)
        moe_layers += m.moe.is_moe_layer(st.chunk_first_layer[c] + i);
    if (m.moe.expert_bias) {  // E fp32 per MoE layer the stage holds (category params)
      mem.params += (int64_t)moe_layers * m.moe.num_experts * 4;
      mem.resident_params += (int64_t)moe_layers * m.moe.num_experts * 4;
    }
    mem.activations = peak_bytes;
    mem.recompute = plan.ranks.empty() ? 0 : plan.ranks[0].memory.recompute;  // one layer's
    mem.comm_buffers = comm_buffer_bytes(m, t, par, moe_layers);
    // --no-fused-ce keeps each microbatch's N V_l fp32 logits from its forward to its
    // backward: as many as the last model stage holds at once (the bf16 copy of their
    // gradient only inside one backward).
    mem.logits = st.head ? logits_bytes(m, B, t.bf16, tp) : 0;
    if (st.head && !m.fused_cross_entropy) {
      int alive = 0, most = 0;
      for (const Action& a : pp.schedule.ranks[r]) {
        if (a.stage != S - 1 || a.type == ActionType::W) continue;
        alive += a.type == ActionType::F ? 1 : -1;
        most = std::max(most, alive);
      }
      mem.logits += (int64_t)(most - 1) * local_sizes(m, B, tp).N * (plan.padded_vocab / tp) * 4;
    }
    // the tokens (int32) on the first stage only, the targets on the last only; the output
    // gradient's receive buffer (model/transformer_state.h, grad_recv) on every stage but a
    // rank whose only chunk is the last model stage (no gradient comes back to it)
    WorkspacePhases ws =
        workspace_phases(m, B, act, tp, plan.sequence_parallel, st.embedding, st.head);
    ws.forward_transient = transients.forward_transient;
    ws.backward_transient = transients.backward_transient;
    mem.workspace = ws.peak() + (receives_gradients(slice) ? pp.message_bytes : 0);
    mem.total_stage = stage_total_peak(pp.schedule.ranks[r], chunk_sets, mem, S, m, B, t.bf16,
                                       tp, plan.sequence_parallel, act,
                                       receives_gradients(slice) ? pp.message_bytes : 0,
                                       transients);
    // Each compute beside the layer's own workspace transients (MoE, --qk-layernorm) and the
    // ZeRO-2/3 buffers alive then, not at their peaks (plan/total.cpp); total() takes this
    // where it is made (without transients of either kind equal to total_stage).
    if (m.recompute.granularity == Recompute::Granularity::NONE) {
      std::vector<int64_t> input;
      std::vector<std::vector<int64_t>> kept(sets);
      for (int c = 0; c < v; ++c) {
        input.push_back(c * p + r == 0 ? embedding_bytes : pp.message_bytes);
        for (size_t mb = 0; mb < sets; ++mb) kept[mb].push_back(chunk_sets[mb][c].kept);
      }
      mem.total_replayed = replayed_stage_total(
          plan, mem, d, pp.schedule.ranks[r], input, kept, slice.chunk_first_layer, unit_chunk,
          stage_deferred_units(m, slice), slice.embedding ? 0 : -1, slice.head ? U - 1 : -1,
          receives_gradients(slice) ? pp.message_bytes : 0, split_bytes, experts);
    }

    // Hardware FLOPs per step on each of its ranks: its layers' share of the per-layer
    // matmuls, the head's on the last stage, and the recomputed forwards of its layers.
    const FlopsPlan& f = plan.flops;
    double head_flops = 0, head_model = 0;
    for (const MatmulFlops& mm : f.matmuls)
      if (!mm.per_layer) head_flops += mm.hardware, head_model += mm.model;
    const Recompute& rc = m.recompute;
    int64_t recomputed = 0;
    for (int n : st.chunk_layers)
      recomputed += rc.selective() ? n
                    : !rc.full()   ? 0
                    : rc.method == Recompute::Method::BLOCK ? std::min(rc.num_layers, n)
                                                            : n;
    const double per_recomputed =
        f.recomputed_layers > 0 ? f.recompute_per_microbatch / (double)f.recomputed_layers : 0;
    st.hardware_flops =
        ((f.hardware_per_microbatch - head_flops) * layers / m.num_layers +
         (st.head ? head_flops : 0) + per_recomputed * (double)recomputed) * (double)k;
    // Model FLOPs the same way, without recompute (MFU never counts it).
    st.model_flops = ((f.model_per_microbatch - head_model) * layers / m.num_layers +
                      (st.head ? head_model : 0)) * (double)k;
    if (m.moe.enabled()) {  // layers differ: the stage's own, one by one (FlopsPlan layer_*)
      st.hardware_flops = st.head ? f.head_hardware_step : 0;
      st.model_flops = st.head ? f.head_model_step : 0;
      for (int c = 0; c < v; ++c)
        for (int i = 0; i < st.chunk_layers[c]; ++i) {
          const int l = st.chunk_first_layer[c] + i;
          st.hardware_flops += f.layer_hardware_step[l] + f.layer_recompute_step[l];
          st.model_flops += f.layer_model_step[l];
        }
    }

    // Communication per step (plan.h, plan_pipeline): tp, pp, dp, embedding, world.
    int full_recomputed = 0;
    for (const std::vector<int>& g : chunk_groups)
      for (int x : g) full_recomputed += x >= 0;
    ModelSlice model_slice{layers, st.embedding, st.head, full_recomputed, {}, {}};
    for (int c = 0; c < v; ++c)
      for (int i = 0; i < st.chunk_layers[c]; ++i) {
        model_slice.layer_ids.push_back(st.chunk_first_layer[c] + i);
        if (!chunk_groups[c].empty() && chunk_groups[c][i] >= 0)
          model_slice.recomputed_ids.push_back(st.chunk_first_layer[c] + i);
      }
    st.comm = tensor_parallel_comm(m, B, tp, plan.sequence_parallel, act, k, z, model_slice);
    int64_t calls = 0;
    for (const Exchange& e : exchanges(pp.schedule, r)) calls += e.empty() ? 0 : 1;
    add_entry(st.comm, CommGroup::PP, CommOp::SEND_RECV, p, calls,
              (st.activations_sent + st.gradients_sent) * pp.message_bytes);
    add_entry(st.comm, CommGroup::PP, CommOp::ALL_REDUCE, p, 1, 4);  // the gradient norm
    const CommGroup dp_group = plan.cp > 1 ? CommGroup::DP_CP : CommGroup::DP;
    for (const CommPlanEntry& e : data_parallel_comm(d, z, plan.dp_cp, grad_b, param_b, dp_group))
      st.comm.push_back(e);
    if (experts)
      for (const CommPlanEntry& e : data_parallel_comm(*experts, z, par.expert_data_parallel(),
                                                       grad_b, param_b, CommGroup::EDP))
        st.comm.push_back(e);
    offload_comm(st.comm, d, plan.dp_cp, act);  // CPU offload's pcie rows
    if (experts) offload_comm(st.comm, *experts, par.expert_data_parallel(), act);
    {
      std::vector<int> stage_moe_layers;
      std::vector<bool> recomputed(m.num_layers, false);
      for (int c = 0; c < v; ++c)
        for (int i = 0; i < st.chunk_layers[c]; ++i) {
          const int l = st.chunk_first_layer[c] + i;
          if (m.moe.is_moe_layer(l)) stage_moe_layers.push_back(l);
          recomputed[l] = !chunk_groups[c].empty() && chunk_groups[c][i] >= 0;
        }
      expert_parallel_comm(st.comm, m, par, B, act, plan.routing, stage_moe_layers, recomputed,
                           k);
      context_parallel_comm(st.comm, m, B, act, tp, model_slice.layer_ids, recomputed, k);
    }
    expert_bias_comm(st.comm, m, dp, moe_layers);
    if (m.tied_embeddings() && (st.embedding || st.head))
      add_entry(st.comm, CommGroup::EMBEDDING, CommOp::ALL_REDUCE, 2, 1, word_local * grad_b);
    add_entry(st.comm, CommGroup::WORLD, CommOp::ALL_REDUCE, par.world_size,
              par.world_size > 1 ? 1 : 0, 8);  // the loss and the stop flag
    pp.stages.push_back(std::move(st));
  }

  for (RankPlan& rp : plan.ranks) {
    const PipelineStagePlan& st = pp.stages.at(rp.pp_rank);
    rp.params = st.params;
    rp.params_stored = st.data_parallel.params_resident + st.expert_data_parallel.params_resident;
    rp.microbatches_held = st.held;
    rp.memory = st.memory;
  }
  plan.flops.hardware_per_rank_step = pp.stages[0].hardware_flops;
  plan.flops.model_per_rank_step = pp.stages[0].model_flops;
  plan.data_parallel = pp.stages[0].data_parallel;
  plan.expert_data_parallel = pp.stages[0].expert_data_parallel;
  plan.zero_shard = plan.data_parallel.state_numel;
  plan.comm = pp.stages[0].comm;
}

}  // namespace paralab
