// plan/plan.cpp: make_plan, the whole prediction for one configuration, from the concerns
// beside it: memory.cpp (bytes per category), data_parallel.cpp (ZeRO), tensor_parallel.cpp,
// pipeline.cpp, recompute.cpp and flops.cpp. plan.h has the byte conventions.
#include "plan/plan.h"
#include <algorithm>
#include <stdexcept>
#include "model/param_table.h"
#include "plan/context_parallel.h"  // context_parallel_comm
#include "plan/expert_parallel.h"  // expert_parallel_comm
#include "plan/fp8.h"  // fp8_comm, the amax reductions
#include "plan/recompute.h"  // selective recompute: what a layer no longer keeps

namespace paralab {

int64_t layer_output_bytes(const Plan& plan) {
  for (const ActivationTensor& t : plan.layer_activations)
    if (t.name == "out") return t.bytes();
  return 0;
}

void add_comm(std::vector<CommPlanEntry>& comm, CommGroup g, CommOp op, int n, int64_t calls,
              int64_t payload) {
  if (calls == 0) return;
  for (CommPlanEntry& e : comm)
    if (e.group == g && e.op == op) {
      e.calls += calls;
      e.payload_bytes += payload;
      e.bus_bytes += bus_factor(op, n) * (double)payload;
      return;
    }
  comm.push_back({g, op, calls, payload, bus_factor(op, n) * (double)payload});
}

// ---- the plan -------------------------------------------------------------------------
static void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("plan: " + what);
}

Plan make_plan(const ModelConfig& model, const TrainConfig& t, const ParallelConfig& p,
               const PlanOptions& o, const MoeRouting& routing) {
  check(p.world_size >= 1, "world size must be >= 1");
  const int cp = p.context_parallel;
  check(cp >= 1 && o.cp_rank >= 0 && o.cp_rank < cp, "context parallel rank out of range");
  check(model.seq_length % (p.cp_layout == CpLayout::ZIGZAG && cp > 1 ? 2 * cp : cp) == 0,
        "context parallel " + std::to_string(cp) + " must cut seq length " +
            std::to_string(model.seq_length) + " into equal chunks");
  // The model as this cp rank holds it: s/cp tokens of each sequence (local_sizes).
  ModelConfig cp_model = model;
  cp_model.context_parallel = CpSpec{cp, o.cp_rank, p.cp_comm_type, p.cp_layout};
  const ModelConfig& m = cp_model;
  const int ep = p.expert_parallel, etp = p.expert_tensor_parallel;
  // etp (default tp) only matters with experts: expert tensor parallelism is not built
  check(ep >= 1 && etp >= 1, "expert parallel sizes must be >= 1");
  check(!m.moe.enabled() || m.moe_ffn() % etp == 0,
        "expert tensor parallel " + std::to_string(etp) + " must divide the expert width " +
            std::to_string(m.moe_ffn()));
  check(ep == 1 || (m.moe.enabled() && m.moe.num_experts % ep == 0),
        "expert parallel " + std::to_string(ep) + " needs experts divisible by it (" +
            std::to_string(m.moe.num_experts) + " experts)");
  check(p.world_size % (etp * ep * p.pipeline_parallel) == 0,
        "expert tensor parallel " + std::to_string(etp) + " x expert parallel " +
            std::to_string(ep) + " x pipeline parallel " + std::to_string(p.pipeline_parallel) +
            " must divide world size " + std::to_string(p.world_size));
  check(p.zero_stage >= 0 && p.zero_stage <= 3, "zero stage must be 0..3");
  check(t.micro_batch_size >= 1, "micro batch size must be >= 1");
  check(m.cross_entropy_chunk >= 1, "cross-entropy chunk must be >= 1");
  const int tp = p.tensor_parallel;
  const int pp = p.pipeline_parallel;
  check(tp >= 1 && pp >= 1 && p.world_size % (tp * cp * pp) == 0,
        "tensor parallel " + std::to_string(tp) + " x context parallel " + std::to_string(cp) +
            " x pipeline parallel " + std::to_string(pp) + " must divide world size " +
            std::to_string(p.world_size));
  check(p.cp_comm_type != CpCommType::A2A ||
            ((m.num_attention_heads / tp) % cp == 0 && (m.groups() / tp) % cp == 0),
        "a2a context parallel " + std::to_string(cp) + " must divide the heads and query "
        "groups per tensor-parallel rank");
  check(m.num_attention_heads % tp == 0 && m.groups() % tp == 0 && m.ffn() % tp == 0,
        "tensor parallel " + std::to_string(tp) + " must divide heads " +
            std::to_string(m.num_attention_heads) + ", query groups " +
            std::to_string(m.groups()) + " and ffn " + std::to_string(m.ffn()));
  // Megatron turns sequence parallelism off at tp 1 (the trainer warns); so does the plan.
  const bool sp = p.sequence_parallel && tp > 1;
  const int B = t.micro_batch_size;
  check(!m.moe.enabled() || tp == 1 || sp,
        "experts with tensor parallelism need sequence parallelism (as in Megatron)");
  check(!m.moe.enabled() || !m.recompute.recompute_mlp(),
        "selective mlp recompute of an MoE layer is not built (model/layer.cpp)");
  check(!m.moe.enabled() || !m.moe.pad_to_capacity || m.moe.capacity_factor > 0,
        "padding to capacity needs a capacity factor");
  check(!sp || (m.seq_length / cp) % tp == 0,
        "sequence parallelism splits the s/cp = " + std::to_string(m.seq_length / cp) +
            " tokens of each sequence over tensor parallel " + std::to_string(tp) +
            ": not divisible");
  Plan plan;
  plan.model = m;
  plan.train = t;
  plan.parallel = p;
  plan.options = o;
  plan.dp = p.data_parallel();
  plan.cp = cp;
  plan.dp_cp = plan.dp * cp;
  plan.tp = tp;
  plan.sequence_parallel = sp;
  plan.padded_vocab = padded_vocab(m, tp);
  const int dp = plan.dp;
  plan.global_batch = t.global_batch_size > 0 ? t.global_batch_size : (int64_t)B * dp;
  check(plan.global_batch % ((int64_t)B * dp) == 0,
        "global batch " + std::to_string(plan.global_batch) +
            " not divisible by micro batch x dp = " + std::to_string((int64_t)B * dp));
  plan.microbatches_per_rank = plan.global_batch / ((int64_t)B * dp);
  plan.tokens_per_step = plan.global_batch * m.seq_length;
  plan.params_total = parameter_count(m);

  const int act = storage_bytes(t);
  plan.embedding_activations = embedding_activation_tensors(m, B, act, tp, sp);
  plan.layer_activations = layer_activation_tensors(m, B, act, o.mask_bytes, tp, sp);
  plan.head_activations = head_activation_tensors(m, B, act, tp, sp);
  plan.activation_bytes_per_layer = sum_bytes(plan.layer_activations);
  // MoE layers (plan/moe_memory.h): their own list at the configuration's M; every layer's
  // footprint per microbatch (one set, or one per measured microbatch).
  plan.routing = routing;
  if (m.moe.enabled()) {
    plan.moe_rows = moe_expected_rows(m, B, moe_token_split(p));
    plan.moe_rows_exact = moe_rows_exact(m);
    plan.moe_layer_activations =
        moe_layer_activation_tensors(m, B, act, o.mask_bytes,
                                     moe_layer_rows(m, p, B, MoeRouting(), -1, 0), tp, sp);
    plan.moe_activation_bytes_per_layer = sum_bytes(plan.moe_layer_activations);
  }
  const int footprint_sets = std::max(1, routing.microbatches());
  plan.layer_footprints.assign(footprint_sets, {});
  for (int mb = 0; mb < footprint_sets; ++mb)
    for (int l = 0; l < m.num_layers; ++l)
      plan.layer_footprints[mb].push_back(layer_footprint(
          m, B, act, o.mask_bytes, tp, sp, l, moe_layer_rows(m, p, B, routing, l, mb)));
  int64_t layers_bytes = 0;
  for (int l = 0; l < m.num_layers; ++l) layers_bytes += plan.footprint(0, l).saved;
  plan.activation_bytes_per_microbatch = sum_bytes(plan.embedding_activations) + layers_bytes +
                                         sum_bytes(plan.head_activations);

  // Full recompute's block method recomputes min(n, l_c) layers of each model chunk c.
  const std::vector<int> chunk_layers =
      m.recompute.full()
          ? pipeline_stage_layers(m.num_layers, p.pipeline_shape((int)plan.microbatches_per_rank),
                                  p.stage_split())
          : std::vector<int>{};
  plan.flops = flops_plan(m, B, plan.global_batch / B, plan.microbatches_per_rank,
                          o.attention_flops, tp, chunk_layers, routing,
                          p.expert_tensor_parallel);

  // Model states per rank (plan.h): elements of each buffer under the ZeRO stage, from the
  // same bucket layout DataParallel builds over the rank's local vector (vocabulary padding
  // included), times bytes per element of each category.
  // With the experts apart (ep > 1, or etp != tp) they are a second flat vector (model/param_table.h), sharded over
  // the expert-data-parallel group: its units mirror the dense ones, so the same calls.
  const StageSlice whole = whole_model(m);
  const int edp = p.expert_data_parallel();
  const std::vector<int64_t> units = stage_units(m, tp, whole, expert_split(p));
  const std::vector<int64_t> expert_units = stage_expert_units(m, whole, expert_split(p));
  const int64_t psi = units.back() + (expert_units.empty() ? 0 : expert_units.back());
  const int z = p.zero_stage;
  const int param_b = act, grad_b = act;  // params and grads in the storage type
  plan.data_parallel = data_parallel_plan(
      units,
      microbatch_calls(m.num_layers, m.tied_embeddings(), m.fused_cross_entropy,
                       m.recompute.full_groups(m.num_layers)),
      z, plan.dp_cp, o, plan.microbatches_per_rank, {}, {}, p.offload);
  // --fp8-param-gather: the FP8 buckets' messages, the step's FP8 gathers (plan/fp8.h)
  plan_fp8_param_gather(plan.data_parallel, m, stage_param_table(m, tp, whole, expert_split(p)),
                        units, z, act);
  const DataParallelPlan& d = plan.data_parallel;
  plan.zero_shard = d.state_numel;
  if (!expert_units.empty()) {
    plan.expert_data_parallel = data_parallel_plan(expert_units, d.microbatch, z, edp, o,
                                                   plan.microbatches_per_rank, {}, {},
                                                   p.offload);
    plan_fp8_param_gather(plan.expert_data_parallel, m,
                          stage_expert_table(m, whole, expert_split(p)), expert_units, z, act);
  }
  const DataParallelPlan* experts = expert_units.empty() ? nullptr : &plan.expert_data_parallel;

  MemoryPlan mem;
  const int64_t params_stored =
      d.params_resident + (experts ? experts->params_resident : 0);
  fill_model_states(mem, d, t, experts);
  // Without pipelining each microbatch's backward frees its activations before the next
  // forward, so one microbatch is held at the peak (with full recompute: its stored group
  // inputs, and one group made again in backward; plan/recompute.h).
  const int held = 1;
  // Per microbatch (they differ with a measured routing), the one with the largest peak.
  ChunkActivations chunk;
  for (int mb = 0; mb < footprint_sets; ++mb) {
    const ChunkActivations c = chunk_activations(
        m.recompute.full_groups(m.num_layers), sum_bytes(plan.embedding_activations),
        plan.layer_saved(mb, 0, m.num_layers), layer_output_bytes(plan),
        sum_bytes(plan.head_activations));
    chunk.kept = std::max(chunk.kept, c.kept);
    chunk.forward_peak = std::max(chunk.forward_peak, c.forward_peak);
    chunk.layers_peak = std::max(chunk.layers_peak, c.layers_peak);
    chunk.backward_peak = std::max(chunk.backward_peak, c.backward_peak);
  }
  mem.activations = std::max(chunk.forward_peak, chunk.backward_peak);
  // the expert bias (--moe-router-enable-expert-bias): E fp32 per MoE layer, category params
  if (m.moe.expert_bias) {
    const int64_t bias = (int64_t)moe_layer_count(m) * m.moe.num_experts * 4;
    mem.params += bias;
    mem.resident_params += bias;
  }
  mem.recompute = recompute_buffers(m, B, act, o.mask_bytes, tp, sp).peak();  // selective
  mem.comm_buffers = comm_buffer_bytes(m, t, p) +
                     fp8_gather_comm_buffers(d.fp8_message, plan.dp_cp, z, o) +
                     (experts ? fp8_gather_comm_buffers(experts->fp8_message, edp, z, o) : 0);
  // FP8's operands and scaling state: the dense linears', the experts' delayed state, the
  // FP8 gathers' scales (plan/fp8.h)
  const Fp8Memory fp8 = fp8_memory(m, local_sizes(m, B, tp, sp), m.num_layers, act,
                                   m.moe.num_experts / p.expert_parallel, moe_layer_count(m),
                                   d.fp8_state_bytes + (experts ? experts->fp8_state_bytes : 0),
                                   z);
  mem.fp8_operands = fp8.operands;
  mem.fp8_state = fp8.state;
  mem.logits = logits_bytes(m, B, t.half(), tp);
  WorkspacePhases ws = workspace_phases(m, B, act, tp, sp);
  add_layer_transients(ws, plan);
  mem.workspace = ws.peak();
  mem.total_at_recompute = total_at_recompute(plan, mem);
  // ZeRO-2/3's transients: the sum of the peaks would hold them beside the loss's logits
  if (z >= 2 && !m.recompute.full()) mem.total_replayed = replayed_total(plan, mem, d, experts);
  // Layers' workspace transients (MoE, --qk-layernorm) inside a layer, not beside the logits
  // (nor, with selective recompute, beside every recompute buffer): the same replay, over
  // buffers of 0 at ZeRO 0-1 (plan/total.cpp).
  if (z < 2 && !m.recompute.full() && (ws.forward_transient > 0 || ws.backward_transient > 0))
    mem.total_replayed = replayed_total(plan, mem, d, experts);
  if (m.recompute.full()) {
    // The total at each phase of the microbatch (model/transformer.cpp): the other
    // categories at their peaks but the logits (alive in the head only) and the workspace's
    // forward tokens and targets (backward: its d(xf) or the tokens again) as they are then.
    const WorkspacePhases& w = ws;
    int64_t others = 0;
    for (int c = 0; c < kNumMemoryCategories; ++c) others += mem.at(c);
    others -= mem.activations + mem.logits + mem.workspace + mem.recompute;
    const int64_t head = others + w.common + w.forward + chunk.kept + mem.logits;  // loss
    // (the layers' workspace transients beside their peak: an upper bound when there are any)
    const int64_t layers_forward =
        others + w.common + w.forward + chunk.forward_peak + w.forward_transient;
    const int64_t layers_backward = others + w.common + chunk.backward_peak + w.backward_transient;
    const int64_t head_backward = others + w.common + w.backward + chunk.kept +
                                  (m.fused_cross_entropy ? 0 : mem.logits);
    mem.total_full_recompute = std::max({head, layers_forward, layers_backward, head_backward});
  }

  // Communication per step (plan.h, Plan::comm). Payload bytes per element: the storage
  // type's for parameters and gradients (param_b, grad_b: 4, or 2 with --bf16), 4 for the
  // norm and loss scalars (fp32 in both).
  plan.comm = tensor_parallel_comm(m, B, tp, sp, act, plan.microbatches_per_rank, p.zero_stage);
  for (const CommPlanEntry& e :
       data_parallel_comm(d, z, plan.dp_cp, grad_b, param_b,
                          cp > 1 ? CommGroup::DP_CP : CommGroup::DP))
    plan.comm.push_back(e);
  if (experts)
    for (const CommPlanEntry& e :
         data_parallel_comm(*experts, z, edp, grad_b, param_b, CommGroup::EDP))
      plan.comm.push_back(e);
  offload_comm(plan.comm, d, plan.dp_cp, act);  // CPU offload's pcie rows
  if (experts) offload_comm(plan.comm, *experts, edp, act);
  {
    std::vector<int> moe_layers;
    std::vector<bool> recomputed(m.num_layers, false);
    const std::vector<int> groups = m.recompute.full_groups(m.num_layers);
    for (int l = 0; l < m.num_layers; ++l) {
      if (m.moe.is_moe_layer(l)) moe_layers.push_back(l);
      recomputed[l] = !groups.empty() && groups[l] >= 0;
    }
    expert_parallel_comm(plan.comm, m, p, B, act, routing, moe_layers, recomputed,
                         plan.microbatches_per_rank);
    std::vector<int> all_layers(m.num_layers);
    for (int l = 0; l < m.num_layers; ++l) all_layers[l] = l;
    context_parallel_comm(plan.comm, m, B, act, tp, all_layers, recomputed,
                          plan.microbatches_per_rank);
    fp8_comm(plan.comm, m, tp, dp, p, all_layers, recomputed, plan.microbatches_per_rank);
    fp8_gather_comm(plan.comm, m, d, cp > 1 ? CommGroup::DP_CP : CommGroup::DP, plan.dp_cp, tp);
    if (experts) fp8_gather_comm(plan.comm, m, *experts, CommGroup::EDP, edp, tp);
  }
  expert_bias_comm(plan.comm, m, dp, moe_layer_count(m));
  // the loss and the stop flag (a signal on any rank), two fp32: 8 bytes (trainer.cu)
  if (p.world_size > 1)
    plan.comm.push_back({CommGroup::WORLD, CommOp::ALL_REDUCE, 1, 8,
                         bus_factor(CommOp::ALL_REDUCE, p.world_size) * 8});

  // Rank order tp fastest, then cp, dp, pp: rank = tp_rank + t (cp_rank + cp (dp_rank +
  // dp pp_rank)). The ranks of a tp group hold the same shapes (local_param_table pads the
  // vocabulary so that even the last one does), and dp replicas the same bytes: one
  // MemoryPlan serves every rank.
  plan.ranks.resize(p.world_size);
  for (int r = 0; r < p.world_size; ++r) {
    RankPlan& rp = plan.ranks[r];
    rp.rank = r;
    rp.tp_rank = r % tp;
    rp.cp_rank = (r / tp) % cp;
    rp.dp_rank = (r / (tp * p.context_parallel)) % dp;
    rp.pp_rank = r / (tp * p.context_parallel * dp);
    rp.params = psi;
    rp.params_stored = params_stored;
    rp.microbatches_held = held;
    rp.memory = mem;
  }
  plan_pipeline(plan);
  plan_checkpoint(plan);
  return plan;
}

}  // namespace paralab
