// plan/pipeline.cpp: the pipeline stages predicted (plan.h, plan_pipeline), in named steps: the
// schedule and its simulation, then per pp rank its slice of the model, the activations of
// one (microbatch, chunk), its data parallelism over the calls its actions make, the
// activations held as its list runs, its memory, FLOPs and communication; the replays over
// its actions are plan/pipeline_replay.cpp's (parallel/pipeline_schedule.h: the schedules).
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include "model/param_table.h"
#include "plan/context_parallel.h"  // context_parallel_comm
#include "plan/expert_parallel.h"  // expert_parallel_comm
#include "plan/fp8.h"  // fp8_comm, fp8_memory
#include "plan/pipeline_impl.h"     // StageChunks, stage_step_calls, stage_total_peak

namespace paralab {

namespace {

void add_entry(std::vector<CommPlanEntry>& out, CommGroup g, CommOp op, int n, int64_t calls,
               int64_t payload) {
  if (calls > 0) out.push_back({g, op, calls, payload, bus_factor(op, n) * (double)payload});
}

// The schedule: its shape, each model stage's layers, the list of every rank, the unit costs
// (plan.h, PipelinePlan::costs: a B that also makes the weight gradient costs 3 units when
// nothing is split), the simulated and the closed-form bubble, one message's bytes.
void plan_schedule(Plan& plan) {
  const ParallelConfig& par = plan.parallel;
  PipelinePlan& pp = plan.pipeline;
  pp.shape = par.pipeline_shape((int)plan.microbatches_per_rank);
  const std::string bad = check_pipeline_shape(pp.shape);
  if (!bad.empty()) throw std::invalid_argument("plan: pipeline " + bad);
  pp.stage_layers = pipeline_stage_layers(plan.model.num_layers, pp.shape, par.stage_split());
  pp.schedule = make_schedule(pp.shape);
  if (!has_split_backward(pp.schedule)) pp.costs.B = 3, pp.costs.W = 0;
  // Uneven stages cost in proportion to what they hold: their layers, and with Megatron's
  // accounted split the embedding and the loss one layer each (its premise); the closed forms
  // assume equal stages, the simulation does not.
  if (par.stage_split().uneven()) {
    const StageSplit& split = par.stage_split();
    const int S = pp.shape.model_stages();
    std::vector<double> counted(pp.stage_layers.begin(), pp.stage_layers.end());
    counted.front() += split.embedding;
    counted.back() += split.loss;
    double total = 0;
    for (double c : counted) total += c;
    for (double c : counted) {
      const double f = c * S / total;  // 1 on an even split
      pp.costs.stage_F.push_back(pp.costs.F * f);
      pp.costs.stage_B.push_back(pp.costs.B * f);
      pp.costs.stage_W.push_back(pp.costs.W * f);
    }
  }
  pp.sim = simulate(pp.schedule, pp.costs);
  pp.closed_form = bubble_closed_form(pp.shape, pp.costs);
  const int B = plan.train.micro_batch_size;
  pp.message_bytes = local_sizes(plan.model, B, plan.tp, plan.sequence_parallel).N_l *
                     plan.model.hidden_size * storage_bytes(plan.train);
}

// What a split B keeps for its W, per global layer (plan.h, SplitLayerBytes; model/layer.h,
// BackwardPart): from B to W a layer keeps its linears' inputs (norm1.out, attn.ctx,
// norm2.out, mlp.act; with sp the norms' all-gathered N h copies instead of their N_l h rows)
// and output gradients (N x qkv_l, h, fc1_l, h), made during B before it frees anything. An
// MoE layer's B writes its MoE weight gradients itself: W has only the attention's linears
// (no mlp.act, d_fc1, d_fc2, nor with sp norm2's gathered output). Empty without a split B.
std::vector<SplitLayerBytes> split_layer_bytes(const Plan& plan) {
  if (!has_split_backward(plan.pipeline.schedule)) return {};
  const ModelConfig& m = plan.model;
  const int64_t h = m.hidden_size, act = storage_bytes(plan.train);
  const bool sp = plan.sequence_parallel;
  const LocalSizes l = local_sizes(m, plan.train.micro_batch_size, plan.tp, sp);
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
  std::vector<SplitLayerBytes> out;
  for (int layer = 0; layer < m.num_layers; ++layer) {
    SplitLayerBytes b;
    const bool moe = m.moe.is_moe_layer(layer);
    b.before_head_norm = (moe ? 0 : mlp_copies) + d_proj;
    b.copies = b.before_head_norm + attn_tail;
    b.keep = b.copies + attn_in + norm2_out + (moe ? 0 : mlp_act);
    out.push_back(b);
  }
  return out;
}

// The microbatches through chunk c of rank r, in order: all m, or DualPipe's one direction's
// m/2 (every placement gives each chunk of a rank as many).
std::vector<int> chunk_microbatches(const Plan& plan, int r, int c = 0) {
  std::vector<int> ids;
  for (const Action& a : plan.pipeline.schedule.ranks[r])
    if (a.type == ActionType::F && a.chunk == c) ids.push_back(a.microbatch);
  return ids;
}

// A measured routing (plan/moe_memory.h) cut to the microbatches `ids`, renumbered from 0;
// empty stays empty (the configuration's expectation).
MoeRouting routing_of(const MoeRouting& routing, const std::vector<int>& ids) {
  if (!routing.measured()) return routing;
  MoeRouting out = routing;
  for (auto* rows : {&out.rows, &out.expert_rows, &out.ep_rows})
    for (std::vector<int>& per_layer : *rows) {
      if (per_layer.empty()) continue;
      std::vector<int> cut;
      for (int i : ids) cut.push_back(per_layer.at(i));
      per_layer = cut;
    }
  return out;
}

// Rank r's slice of the model (model/param_table.h: the slice the trainer builds) and its
// chunks as the replays read them: one (microbatch, chunk)'s activations, whole and split (its
// input: x0 on model stage 0, else the received activation; its layers, full recompute keeping
// the groups' outputs; the head's on the last model stage; plan/recompute.h,
// chunk_activations), its units, and the layers' largest workspace transients.
StageChunks stage_chunks(const Plan& plan, int r, const std::vector<SplitLayerBytes>& split_bytes,
                         PipelineStagePlan& st, WorkspacePhases& transients) {
  const ModelConfig& m = plan.model;
  const PipelinePlan& pp = plan.pipeline;
  const PipelineShape& sh = pp.shape;
  const StageSlice slice = pipeline_stage_slice(m, sh, r, plan.parallel.stage_split());
  st.pp_rank = r;
  st.embedding = slice.embedding;
  st.head = slice.head;
  st.tied_copy = slice.tied_copy;
  st.chunk_first_layer = slice.chunk_first_layer;
  st.chunk_layers = slice.chunk_layers;
  StageChunks sc;
  const size_t sets = plan.layer_footprints.size();
  sc.whole.assign(sets, {});
  if (!split_bytes.empty()) sc.split.assign(sets, {});
  const int64_t embedding_bytes = sum_bytes(plan.embedding_activations);
  const int64_t head_bytes = sum_bytes(plan.head_activations);
  for (int c = 0; c < sh.v; ++c) {
    const int s = sh.stage_of(r, c), n = pp.stage_layers[s], first = slice.chunk_first_layer[c];
    sc.groups.push_back(m.recompute.full_groups(n));
    add_layer_transients(transients, plan, first, n, chunk_microbatches(plan, r, c));
    std::vector<int64_t> copies, keep;  // split: each layer's (SplitLayerBytes)
    for (int i = 0; !split_bytes.empty() && i < n; ++i) {
      copies.push_back(split_bytes[first + i].copies);
      keep.push_back(split_bytes[first + i].keep);
    }
    const int64_t input = s == 0 ? embedding_bytes : pp.message_bytes;
    const int64_t head = s == sh.model_stages() - 1 ? head_bytes : 0;
    for (size_t mb = 0; mb < sets; ++mb) {
      const std::vector<int64_t> saved = plan.layer_saved((int)mb, first, n);
      sc.whole[mb].push_back(chunk_activations(sc.groups.back(), input, saved,
                                               layer_output_bytes(plan), head));
      if (!split_bytes.empty())
        sc.split[mb].push_back(chunk_activations(sc.groups.back(), input, saved,
                                                 layer_output_bytes(plan), head, copies, keep,
                                                 true));
    }
    st.chunk_activation_bytes.push_back(sc.whole[0].back().kept);
  }
  st.unit_begin = stage_units(m, plan.tp, slice, expert_split(plan.parallel));
  st.expert_unit_begin = stage_expert_units(m, slice, expert_split(plan.parallel));
  st.params = st.unit_begin.back() +
              (st.expert_unit_begin.empty() ? 0 : st.expert_unit_begin.back());
  const std::vector<int> unit_chunk = stage_unit_chunk(slice);
  sc.units.assign(sh.v, {});
  for (int u = 0; u < (int)unit_chunk.size(); ++u) sc.units[unit_chunk[u]].push_back(u);
  sc.embedding_unit = slice.embedding ? 0 : -1;
  sc.head_unit = slice.head ? (int)unit_chunk.size() - 1 : -1;
  sc.tied_here = m.tied_embeddings() && slice.embedding && slice.head;
  return sc;
}

// Its data parallelism: the dense vector's over dp x cp, and with ep > 1 the experts' over
// the expert-data-parallel group, both replaying the calls its actions make.
void stage_data_parallel(const Plan& plan, int r, const StageChunks& sc, PipelineStagePlan& st) {
  const ModelConfig& m = plan.model;
  const ParallelConfig& par = plan.parallel;
  const StageSlice slice = pipeline_stage_slice(m, plan.pipeline.shape, r, par.stage_split());
  const std::vector<int> unit_chunk = stage_unit_chunk(slice);
  st.data_parallel = data_parallel_plan(
      st.unit_begin, stage_step_calls(plan.pipeline.schedule.ranks[r], sc, m.fused_cross_entropy),
      par.zero_stage, plan.dp_cp, plan.options, 1, unit_chunk, stage_deferred_units(m, slice),
      par.offload);
  plan_fp8_param_gather(st.data_parallel, m,  // --fp8-param-gather (plan/fp8.h)
                        stage_param_table(m, plan.tp, slice, expert_split(par)), st.unit_begin,
                        par.zero_stage, storage_bytes(plan.train));
  if (!st.expert_unit_begin.empty()) {
    st.expert_data_parallel =
        data_parallel_plan(st.expert_unit_begin, st.data_parallel.microbatch, par.zero_stage,
                           par.expert_data_parallel(), plan.options, 1, unit_chunk, {},
                           par.offload);
    plan_fp8_param_gather(st.expert_data_parallel, m,
                          stage_expert_table(m, slice, expert_split(par)), st.expert_unit_begin,
                          par.zero_stage, storage_bytes(plan.train));
  }
}

// The schedule on this rank: the activations held at the peak as its list runs (a whole B
// frees its pair, a split B all but what its W reads: SplitLayerBytes::keep per layer, W the
// rest), the remote messages it sends, and the simulation's counts and times.
int64_t stage_schedule(const Plan& plan, int r, const StageChunks& sc, PipelineStagePlan& st) {
  const PipelinePlan& pp = plan.pipeline;
  int64_t held = 0, peak = 0;
  for (const Action& a : pp.schedule.ranks[r]) {
    const ChunkActivations& c = sc.of(a);
    if (a.type == ActionType::F) {
      peak = std::max(peak, held + c.forward_peak);
      held += c.kept;
    } else if (a.type == ActionType::B) {
      peak = std::max(peak, held - c.kept + c.backward_peak);
      held += c.after_backward - c.kept;
    } else {
      held -= c.after_backward;  // W
    }
    peak = std::max(peak, held);
    for (const Message& msg : a.sends)
      if (!msg.local()) ++(msg.kind == Message::ACTIVATION ? st.activations_sent : st.gradients_sent);
  }
  st.held = pp.sim.peak_held[r];
  st.held_until_w = pp.sim.peak_held_until_w[r];
  st.busy = pp.sim.busy[r];
  st.idle = pp.sim.idle[r];
  return peak;
}

// Its memory by category, the replayed peak of the total, and the total replayed call by call
// where no recompute changes the order (plan/total.cpp).
void stage_memory(const Plan& plan, int r, const StageChunks& sc, const WorkspacePhases& transients,
                  int64_t activations_peak, const std::vector<SplitLayerBytes>& split_bytes,
                  PipelineStagePlan& st) {
  const ModelConfig& m = plan.model;
  const TrainConfig& t = plan.train;
  const ParallelConfig& par = plan.parallel;
  const PipelinePlan& pp = plan.pipeline;
  const int B = t.micro_batch_size, tp = plan.tp, act = storage_bytes(t);
  const int S = pp.shape.model_stages();
  const StageSlice slice = pipeline_stage_slice(m, pp.shape, r, par.stage_split());
  const DataParallelPlan& d = st.data_parallel;
  const DataParallelPlan* experts = st.expert_unit_begin.empty() ? nullptr : &st.expert_data_parallel;
  MemoryPlan& mem = st.memory;
  fill_model_states(mem, d, t, experts);
  int moe_layers = 0;  // the MoE layers this stage holds
  for (size_t c = 0; c < st.chunk_layers.size(); ++c)
    for (int i = 0; i < st.chunk_layers[c]; ++i)
      moe_layers += m.moe.is_moe_layer(st.chunk_first_layer[c] + i);
  if (m.moe.expert_bias) {  // E fp32 per MoE layer the stage holds (category params)
    mem.params += (int64_t)moe_layers * m.moe.num_experts * 4;
    mem.resident_params += (int64_t)moe_layers * m.moe.num_experts * 4;
  }
  mem.activations = activations_peak;
  mem.recompute = plan.ranks.empty() ? 0 : plan.ranks[0].memory.recompute;  // one layer's
  const int z = par.zero_stage;
  mem.comm_buffers =
      comm_buffer_bytes(m, t, par, moe_layers) +
      fp8_gather_comm_buffers(d.fp8_message, plan.dp_cp, z, plan.options) +
      (experts ? fp8_gather_comm_buffers(experts->fp8_message, par.expert_data_parallel(), z,
                                         plan.options)
               : 0);
  // --no-fused-ce keeps each microbatch's N V_l fp32 logits from its forward to its
  // backward: as many as the last model stage holds at once (the bf16 copy of their
  // gradient only inside one backward).
  mem.logits = st.head ? logits_bytes(m, B, t.half(), tp) : 0;
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
  // gradients' receive buffers (model/transformer_state.h, grad_recv): the most this rank
  // holds at once (parallel/pipeline_schedule.h gradient_buffers; 1 under the slot rule, 0
  // where no gradient comes back)
  const int64_t grad_recv = (int64_t)gradient_buffers(pp.schedule, r) * pp.message_bytes;
  int stage_layers = 0;  // FP8's per-linear state (plan/fp8.h)
  for (int n : st.chunk_layers) stage_layers += n;
  const Fp8Memory fp8 =
      fp8_memory(m, local_sizes(m, B, tp, plan.sequence_parallel), stage_layers, act,
                 m.moe.num_experts / par.expert_parallel, moe_layers,
                 d.fp8_state_bytes + (experts ? experts->fp8_state_bytes : 0),
                 par.zero_stage);
  mem.fp8_operands = fp8.operands;
  mem.fp8_state = fp8.state;
  WorkspacePhases ws = workspace_phases(m, B, act, tp, plan.sequence_parallel, st.embedding,
                                        st.head, st.chunk_layers.size() == 1);
  ws.forward_transient = transients.forward_transient;
  ws.backward_transient = transients.backward_transient;
  mem.workspace = ws.peak() + grad_recv;
  mem.total_stage = stage_total_peak(pp.schedule.ranks[r], sc, mem, S, m, B, t.half(), tp,
                                     plan.sequence_parallel, act, grad_recv, transients);
  // Each compute beside the layer's own workspace transients (MoE, --qk-layernorm) and the
  // ZeRO-2/3 buffers alive then, not at their peaks (plan/total.cpp); total() takes this
  // where it is made (without transients of either kind equal to total_stage).
  if (m.recompute.granularity != Recompute::Granularity::NONE) return;
  const int64_t embedding_bytes = sum_bytes(plan.embedding_activations);
  std::vector<int64_t> input;
  std::vector<std::vector<int64_t>> kept(sc.whole.size());
  for (int c = 0; c < pp.shape.v; ++c) {
    input.push_back(pp.shape.stage_of(r, c) == 0 ? embedding_bytes : pp.message_bytes);
    for (size_t mb = 0; mb < sc.whole.size(); ++mb) kept[mb].push_back(sc.whole[mb][c].kept);
  }
  const std::vector<int> unit_chunk = stage_unit_chunk(slice);
  mem.total_replayed = replayed_stage_total(
      plan, mem, d, pp.schedule.ranks[r], input, kept, slice.chunk_first_layer, unit_chunk,
      stage_deferred_units(m, slice), sc.embedding_unit, sc.head_unit, grad_recv, split_bytes,
      experts);
}

// Hardware FLOPs per step on each of its ranks: its layers' share of the per-layer matmuls,
// the head's on the last stage, and the recomputed forwards of its layers, each for the
// microbatches its chunks run; model FLOPs the same way, without recompute (MFU never
// counts it). With MoE the layers differ: the stage's own, one by one (FlopsPlan layer_*).
void stage_flops(const Plan& plan, int r, PipelineStagePlan& st) {
  const ModelConfig& m = plan.model;
  const FlopsPlan& f = plan.flops;
  const int64_t k = (int64_t)chunk_microbatches(plan, r).size();
  int layers = 0;
  for (int n : st.chunk_layers) layers += n;
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
  st.model_flops = ((f.model_per_microbatch - head_model) * layers / m.num_layers +
                    (st.head ? head_model : 0)) * (double)k;
  if (!m.moe.enabled()) return;
  // Per step over the microbatches each chunk runs: DualPipe's copies each their direction's
  // half, their rows from the routing's (the model FLOPs' kept pairs in proportion: the
  // routing keeps the step's sum only).
  st.hardware_flops = st.model_flops = 0;
  const int chunks = (int)st.chunk_layers.size();
  for (int c = 0; c < chunks; ++c) {
    const std::vector<int> ids = chunk_microbatches(plan, r, c);
    const bool all = (int64_t)ids.size() == plan.microbatches_per_rank;
    const double share = (double)ids.size() / (double)plan.microbatches_per_rank;
    const FlopsPlan part =
        all ? f
            : flops_plan(m, plan.train.micro_batch_size, plan.global_batch / plan.train.micro_batch_size,
                         (int64_t)ids.size(), plan.options.attention_flops, plan.tp,
                         m.recompute.full() ? plan.pipeline.stage_layers : std::vector<int>{},
                         routing_of(plan.routing, ids), plan.parallel.expert_tensor_parallel);
    if (st.head && c == chunks - 1) {
      st.hardware_flops += part.head_hardware_step;
      st.model_flops += all ? f.head_model_step : f.head_model_step * share;
    }
    for (int i = 0; i < st.chunk_layers[c]; ++i) {
      const int l = st.chunk_first_layer[c] + i;
      st.hardware_flops += part.layer_hardware_step[l] + part.layer_recompute_step[l];
      st.model_flops += all ? f.layer_model_step[l] : f.layer_model_step[l] * share;
    }
  }
}

// Communication per step on each of its ranks (plan.h, plan_pipeline): tp, cp, ep inside its
// layers; pp, its exchanges and the gradient norm; dp (and edp) over its vectors, with CPU
// offload's copies; DualPipe's mirror sum; the tied embedding's all-reduce where a rank keeps
// a copy; the world's loss.
void stage_comm(const Plan& plan, int r, const StageChunks& sc, PipelineStagePlan& st) {
  const ModelConfig& m = plan.model;
  const ParallelConfig& par = plan.parallel;
  const PipelinePlan& pp = plan.pipeline;
  const int B = plan.train.micro_batch_size, tp = plan.tp, act = storage_bytes(plan.train);
  const int z = par.zero_stage, p = pp.shape.p, param_b = act, grad_b = act;
  const int64_t k = (int64_t)chunk_microbatches(plan, r).size();
  const DataParallelPlan& d = st.data_parallel;
  const DataParallelPlan* experts = st.expert_unit_begin.empty() ? nullptr : &st.expert_data_parallel;
  int full_recomputed = 0, layers = 0;
  for (const std::vector<int>& g : sc.groups)
    for (int x : g) full_recomputed += x >= 0;
  for (int n : st.chunk_layers) layers += n;
  ModelSlice model_slice{layers, st.embedding, st.head, full_recomputed, {}, {}, {}};
  std::vector<int> moe_layers, first_microbatch;  // DualPipe: each chunk its direction's
  std::vector<bool> recomputed(m.num_layers, false);
  for (size_t c = 0; c < st.chunk_layers.size(); ++c) {
    const int first = chunk_microbatches(plan, r, (int)c).front();  // a contiguous run
    for (int i = 0; i < st.chunk_layers[c]; ++i) {
      const int l = st.chunk_first_layer[c] + i;
      model_slice.layer_ids.push_back(l);
      recomputed[l] = !sc.groups[c].empty() && sc.groups[c][i] >= 0;
      if (recomputed[l]) model_slice.recomputed_ids.push_back(l);
      if (m.moe.is_moe_layer(l)) moe_layers.push_back(l), first_microbatch.push_back(first);
    }
  }
  // the units in a deferred bucket, by their global numbers (the stage's units are the
  // embedding, the chunks' layers in order, the head: model/transformer.cpp)
  const StageSlice slice = pipeline_stage_slice(m, pp.shape, r, par.stage_split());
  std::vector<int> global_unit;
  if (slice.embedding) global_unit.push_back(0);
  for (size_t c = 0; c < slice.chunk_layers.size(); ++c)
    for (int i = 0; i < slice.chunk_layers[c]; ++i)
      global_unit.push_back(1 + slice.chunk_first_layer[c] + i);
  if (slice.head) global_unit.push_back(m.num_layers + 1);
  for (int u : stage_deferred_units(m, slice))
    for (size_t v = 0; v < global_unit.size(); ++v)
      if (d.layout.bucket_of[v] == d.layout.bucket_of[u])
        model_slice.deferred_bucket_units.push_back(global_unit[v]);
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
  // DualPipe: one all-reduce of each gradient buffer with the mirror rank (data_parallel.h)
  if (pp.shape.placement() == StagePlacement::MIRRORED && pp.shape.mirror_of(r) != r) {
    add_comm(st.comm, CommGroup::MIRROR, CommOp::ALL_REDUCE, 2, d.grads_resident > 0 ? 1 : 0,
             d.grads_resident * grad_b);
    if (experts)
      add_comm(st.comm, CommGroup::MIRROR, CommOp::ALL_REDUCE, 2,
               experts->grads_resident > 0 ? 1 : 0, experts->grads_resident * grad_b);
  }
  expert_parallel_comm(st.comm, m, par, B, act, plan.routing, moe_layers, recomputed, k,
                       first_microbatch);
  context_parallel_comm(st.comm, m, B, act, tp, model_slice.layer_ids, recomputed, k);
  fp8_comm(st.comm, m, tp, plan.dp, par, model_slice.layer_ids, recomputed, k);
  fp8_gather_comm(st.comm, m, d, dp_group, plan.dp_cp, tp);
  if (experts)
    fp8_gather_comm(st.comm, m, *experts, CommGroup::EDP, par.expert_data_parallel(), tp);
  expert_bias_comm(st.comm, m, plan.dp, (int)moe_layers.size());
  // gpt's tied embedding: the first stage and a last stage holding a copy sum its gradient
  bool copies = false;
  for (int q = 0; q < p; ++q)
    copies |= pipeline_stage_slice(m, pp.shape, q, par.stage_split()).tied_copy;
  if (copies && (st.embedding || st.head))
    add_entry(st.comm, CommGroup::EMBEDDING, CommOp::ALL_REDUCE, 2, 1,
              plan.padded_vocab / tp * m.hidden_size * grad_b);
  add_entry(st.comm, CommGroup::WORLD, CommOp::ALL_REDUCE, par.world_size,
            par.world_size > 1 ? 1 : 0, 8);  // the loss and the stop flag
}

// Every rank's plan from its stage's; the plan's rank-0 views.
void ranks_from_stages(Plan& plan) {
  const PipelinePlan& pp = plan.pipeline;
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

}  // namespace

void plan_pipeline(Plan& plan) {
  plan_schedule(plan);
  PipelinePlan& pp = plan.pipeline;
  pp.stages.clear();
  if (pp.shape.p == 1) return;
  const std::vector<SplitLayerBytes> split_bytes = split_layer_bytes(plan);
  for (int r = 0; r < pp.shape.p; ++r) {
    PipelineStagePlan st;
    WorkspacePhases transients;  // the stage's layers' largest workspace transients
    const StageChunks sc = stage_chunks(plan, r, split_bytes, st, transients);
    stage_data_parallel(plan, r, sc, st);
    const int64_t activations = stage_schedule(plan, r, sc, st);
    stage_memory(plan, r, sc, transients, activations, split_bytes, st);
    stage_flops(plan, r, st);
    stage_comm(plan, r, sc, st);
    pp.stages.push_back(std::move(st));
  }
  ranks_from_stages(plan);
}

}  // namespace paralab
