// instrument/plan.cpp: see plan.h for the byte conventions. The tensor-parallel
// communication and the Korthikanti closed forms are in plan_parallel.cpp.
#include "instrument/plan.h"
#include <algorithm>
#include <stdexcept>
#include "instrument/plan_recompute.h"  // selective recompute: what a layer no longer keeps
#include "model/param_table.h"

namespace paralab {

const char* const kMemoryCategoryNames[kNumMemoryCategories] = {
    "params", "grads", "master_params", "optimizer_states", "activations",
    "recompute", "comm_buffers", "logits", "workspace"};

int64_t MemoryPlan::at(int category) const {
  const int64_t v[kNumMemoryCategories] = {params, grads, master_params, optimizer_states,
                                           activations, recompute, comm_buffers, logits,
                                           workspace};
  return v[category];
}

int64_t MemoryPlan::total() const {
  if (total_stage > 0) return total_stage;
  if (total_full_recompute > 0) return total_full_recompute;
  int64_t s = 0;
  for (int i = 0; i < kNumMemoryCategories; ++i) s += at(i);
  return std::max(s - recompute, total_at_recompute);
}

LocalSizes local_sizes(const ModelConfig& m, int B, int tp, bool sp) {
  LocalSizes l;
  l.N = (int64_t)B * m.seq_length;
  l.N_l = sp ? l.N / tp : l.N;
  l.heads = m.num_attention_heads / tp;
  l.groups = m.groups() / tp;
  l.head_dim = m.head_dim();
  l.ffn = m.ffn() / tp;
  l.fc1 = m.fc1_size() / tp;
  l.qkv = (l.heads + 2 * l.groups) * l.head_dim;
  l.vocab = padded_vocab(m, tp) / tp;
  return l;
}

// ---- activations ----------------------------------------------------------------------
// Each line is one tensor of notes/model.md's list; N = B S tokens, N_l those a rank holds
// between the blocks, a_l g_l f_l its heads, groups and ffn columns (LocalSizes).
// Korthikanti's Table 2 names (in brackets) show where his sbh(34 + 5as/h) comes from, at
// 2-byte activations: attention 11sbh + 5as^2b, MLP 19sbh, norm inputs 4sbh; under tp the
// bracketed terms marked /t shrink with the heads and columns: 24sbh/t + 5as^2b/t, and
// with sp the other 10sbh hold N/t tokens too. act_bytes is the storage type's (4, or 2
// with --bf16); norm statistics and the log-sum-exp are fp32 in both.
std::vector<ActivationTensor> layer_activation_tensors(const ModelConfig& m, int B,
                                                       int act_bytes, int mask_bytes, int tp,
                                                       bool sp) {
  const LocalSizes l = local_sizes(m, B, tp, sp);
  const int64_t S = m.seq_length, N = l.N, Nl = l.N_l, h = m.hidden_size;
  const int64_t a = l.heads, g = l.groups, d = l.head_dim;
  const int64_t stats = m.is_gpt() ? 2 * Nl : Nl;  // LayerNorm mean + rstd; RMSNorm rstd
  // The model keeps a mask whenever a rate is > 0 (model/layer.cpp); llama's stay 0 by default.
  const bool attn_drop = m.attention_dropout > 0;
  const bool hidden_drop = m.hidden_dropout > 0;
  std::vector<ActivationTensor> t;
  auto add = [&](const char* name, int64_t elements, int bytes, bool stat = false) {
    t.push_back({name, elements, bytes, stat});
  };
  // The norm1 input is the previous layer's output (or x0): counted there.   [LN1 input 2sbh]
  add("norm1.stats", stats, 4, true);
  add("norm1.out", Nl * h, act_bytes);                          // u   [QKV input 2sbh]
  add("attn.q", N * a * d, act_bytes);                          // q   [Q, K of QK^T 4sbh/t]
  add("attn.k", N * g * d, act_bytes);                          // k
  add("attn.v", N * g * d, act_bytes);                          // v   [V 2sbh/t]
  if (m.attention == AttentionImpl::NAIVE) {
    add("attn.probs", B * a * S * S, act_bytes);                // P   [softmax 2as^2b/t]
    if (attn_drop) {
      add("attn.probs_dropout_mask", B * a * S * S, mask_bytes);  //   [mask as^2b/t]
      add("attn.probs_dropped", B * a * S * S, act_bytes);      // P'  [2as^2b/t]
    }
  } else {
    add("attn.lse", B * a * S, 4);                              // log-sum-exp per query row
  }
  add("attn.ctx", N * a * d, act_bytes);                        // ctx [proj input 2sbh/t]
  if (hidden_drop) add("attn.proj_dropout_mask", Nl * h, mask_bytes);  // [mask sbh]
  add("resid1", Nl * h, act_bytes);                             // x   [LN2 input 2sbh]
  add("norm2.stats", stats, 4, true);
  add("norm2.out", Nl * h, act_bytes);                          // u2  [fc1 input 2sbh]
  add("mlp.fc1_out", N * l.fc1, act_bytes);                     // z   [GeLU input 8sbh/t]
  add("mlp.act", N * l.ffn, act_bytes);                         // m   [fc2 input 8sbh/t]
  if (hidden_drop) add("mlp.fc2_dropout_mask", Nl * h, mask_bytes);  // [mask sbh]
  add("out", Nl * h, act_bytes);                                // x, the next norm1 input
  // Selective recompute keeps none of its modules' tensors (plan_recompute.h).
  t.erase(std::remove_if(t.begin(), t.end(),
                         [&](const ActivationTensor& x) {
                           return is_recomputed(m, recompute_module_of(x.name));
                         }),
          t.end());
  return t;
}

std::vector<ActivationTensor> embedding_activation_tensors(const ModelConfig& m, int B,
                                                           int act_bytes, int tp, bool sp) {
  const int64_t Nl = local_sizes(m, B, tp, sp).N_l;
  return {{"embedding.out", Nl * m.hidden_size, act_bytes, false}};  // x0, layer 0's norm1 input
}

std::vector<ActivationTensor> head_activation_tensors(const ModelConfig& m, int B,
                                                      int act_bytes, int tp, bool sp) {
  const int64_t Nl = local_sizes(m, B, tp, sp).N_l, h = m.hidden_size;
  std::vector<ActivationTensor> t;
  t.push_back({"final_norm.stats", m.is_gpt() ? 2 * Nl : Nl, 4, true});  // fp32 in both
  // Fused: d(xf), since the fused loss already ran the head's backward (reduced over tp,
  // this rank's N_l tokens of it). Unfused: xf, which the head's backward reads.
  if (m.fused_cross_entropy)
    t.push_back({"final_norm.out_grad", Nl * h, act_bytes, false});
  else
    t.push_back({"final_norm.out", Nl * h, act_bytes, false});
  return t;
}

int64_t sum_bytes(const std::vector<ActivationTensor>& ts, bool include_norm_statistics) {
  int64_t s = 0;
  for (const auto& t : ts)
    if (include_norm_statistics || !t.norm_statistic) s += t.bytes();
  return s;
}

int64_t logits_bytes(const ModelConfig& m, int B, bool bf16, int tp) {
  const LocalSizes l = local_sizes(m, B, tp);
  const int64_t rows = m.fused_cross_entropy ? std::min<int64_t>(l.N, m.cross_entropy_chunk)
                                             : l.N;
  // fp32 logits (4 bytes) in both precisions; with bf16 their gradient is also rounded into
  // a bf16 copy (2 bytes) for the head GEMMs while the fp32 ones live (notes/model.md).
  // Under tp only the rank's V_l columns exist, the padded ones included.
  return rows * l.vocab * (bf16 ? 4 + 2 : 4);
}

// ---- ZeRO ---------------------------------------------------------------------------
int64_t zero_shard_numel(int64_t psi, int dp) { return (psi + dp - 1) / dp; }
int64_t zero_padded_numel(int64_t psi, int dp) { return zero_shard_numel(psi, dp) * dp; }

double zero_model_state_bytes(int stage, double psi, double N) {
  const double K = 12;  // fp32 master 4 + Adam m 4 + v 4
  switch (stage) {
    case 0: return (2 + 2 + K) * psi;          // DDP: 16Ψ
    case 1: return 4 * psi + K * psi / N;      // P_os: 4Ψ + 12Ψ/N
    case 2: return 2 * psi + (2 + K) * psi / N;  // P_os+g: 2Ψ + 14Ψ/N
    case 3: return (2 + 2 + K) * psi / N;      // P_os+g+p: 16Ψ/N
    default: throw std::invalid_argument("zero stage must be 0..3");
  }
}

// ---- workspace (notes/model.md, "Workspace"; model/layer.h Workspace) ---------------------
// Scratch allocated once per microbatch size and reused by every layer, in the storage
// type (act_bytes: 4, or 2 with --bf16) except the fp32 per-token losses, plus what one
// microbatch holds while in flight (int32 tokens and targets). Under tp the local sizes of
// notes/model.md's "Tensor parallelism" section.
std::vector<ActivationTensor> workspace_tensors(const ModelConfig& m, int B, int act_bytes,
                                                int tp, bool sp) {
  const LocalSizes l = local_sizes(m, B, tp, sp);
  const int64_t S = m.seq_length, N = l.N, Nl = l.N_l, h = m.hidden_size;
  const int64_t a = l.heads, g = l.groups, d = l.head_dim;
  std::vector<ActivationTensor> t;
  auto add = [&](const char* name, int64_t elements, int bytes = 0) {
    t.push_back({name, elements, bytes ? bytes : act_bytes, false});
  };
  add("dres", Nl * h);                   // gradient of the residual stream
  add("tmp_h", N * h);                   // proj / fc2 outputs (partial sums under tp)
  if (sp) {
    add("tmp_l", Nl * h);                // a row-parallel output, reduce-scattered
    add("gathered", N * h);              // a column-parallel input or output gradient, gathered
  }
  add("qkv", N * l.qkv);                 // forward qkv, backward dqkv
  add("o_heads", N * a * d);
  add("dctx", N * a * d);
  add("do_heads", N * a * d);
  add("dq", N * a * d);
  add("dk", N * g * d);
  add("dv", N * g * d);
  add("dact", N * l.ffn);
  add("dfc1", N * l.fc1);
  add("losses", N, 4);                   // per-token loss, fp32
  // The loss's row max, sum of exponentials and target logit per row of a chunk
  // (parallel/tensor_parallel.h: the same three-pass loss at every tp, one rank included).
  add("loss_scratch", 3 * std::min<int64_t>(N, m.cross_entropy_chunk), 4);
  if (m.attention == AttentionImpl::NAIVE) {
    add("scores", B * a * S * S);
    add("dprobs", B * a * S * S);
  }
  if (m.fused_cross_entropy) {
    add("xf", N * h);                    // final-norm output (gathered with sp), read by the loss
    if (sp) {
      add("xf_local", Nl * h);           // the final norm's own N_l tokens
      add("dxf_full", N * h);            // the head's partial input gradient, before its RS
    }
  } else {
    add("dxf", N * h);                   // backward only, while the N V_l logits are still held
  }
  add("tokens", N, 4);                   // int32, during the forward (and embedding backward)
  add("targets", N, 4);                  // int32, during the forward
  return t;
}

WorkspacePhases workspace_phases(const ModelConfig& m, int B, int act_bytes, int tp, bool sp,
                                 bool embedding, bool head) {
  WorkspacePhases w;
  int64_t tokens = 0, targets = 0, dxf = 0;
  for (const ActivationTensor& t : workspace_tensors(m, B, act_bytes, tp, sp)) {
    if (t.name == "tokens") tokens = embedding ? t.bytes() : 0;
    else if (t.name == "targets") targets = head ? t.bytes() : 0;
    else if (t.name == "dxf") dxf = head ? t.bytes() : 0;
    else w.common += t.bytes();
  }
  w.forward = tokens + targets;          // model/transformer.cpp, forward_as
  w.backward = std::max(dxf, tokens);    // the head's backward, then the embedding's
  return w;
}

int64_t workspace_bytes(const ModelConfig& m, int B, int act_bytes, int tp, bool sp) {
  return workspace_phases(m, B, act_bytes, tp, sp).peak();
}

// fp32 scalars that collectives reduce on the device (notes/model.md): the gradient norm's
// over dp (ZeRO >= 1) and over tp, and the trainer's loss average over the world.
int64_t comm_buffer_bytes(const ModelConfig&, const TrainConfig&, const ParallelConfig& p) {
  int64_t bytes = 0;
  if (p.zero_stage >= 1 && p.data_parallel() > 1) bytes += 4;
  if (p.tensor_parallel > 1) bytes += 4;
  if (p.pipeline_parallel > 1) bytes += 4;
  if (p.world_size > 1) bytes += 4;
  return bytes;
}

// ---- data parallelism: replaying data_parallel.cpp -------------------------------------------
ZeroStepSimulation simulate_zero_step(const BucketLayout& l, const std::vector<DpCall>& calls,
                                      int z, bool overlap, int prefetch, int64_t microbatches,
                                      const std::vector<int>& unit_chunk,
                                      const std::vector<int>& deferred_units) {
  ZeroStepSimulation r;
  if (z < 2) return r;
  const int U = (int)l.bucket_of.size(), nb = (int)l.buckets.size();
  std::vector<bool> deferred(nb, false);
  for (int u : deferred_units) deferred[l.bucket_of.at(u)] = true;
  auto fail = [](const std::string& what) { throw std::invalid_argument("plan: " + what); };
  // Stage 3 parameters: resident (gathered or in flight) units and their references.
  std::vector<bool> resident(U, false);
  std::vector<int> refs(U, 0);
  int held = 0;
  int64_t params_alive = 0;
  auto gather = [&](int u) {
    resident[u] = true;
    const int64_t n = l.buckets[l.bucket_of[u]].padded;
    params_alive += n;
    r.params_transient_peak = std::max(r.params_transient_peak, params_alive);
    ++r.gathers;
    r.gathered_elements += n;
  };
  // Gradient bucket buffers: alive from their first grads() to their reduction's completion.
  std::vector<bool> alive(nb, false), reduced(nb, false);
  int in_flight = -1;
  int64_t grads_alive = 0;
  auto allocate = [&](int j) {
    if (alive[j]) return;
    alive[j] = true;
    grads_alive += l.buckets[j].padded;
    r.grads_transient_peak = std::max(r.grads_transient_peak, grads_alive);
  };
  auto complete = [&](int j) {
    alive[j] = false;
    grads_alive -= l.buckets[j].padded;
    if (in_flight == j) in_flight = -1;
  };
  auto post = [&](int j) {
    allocate(j);
    reduced[j] = true;
    ++r.grad_reductions;
    r.grad_reduced_elements += l.buckets[j].padded;
  };

  for (int64_t mb = 0; mb < microbatches; ++mb) {
    std::fill(reduced.begin(), reduced.end(), false);
    for (const DpCall& c : calls) {
      if (c.kind == DpCall::BEGIN_MICROBATCH) {
        std::fill(reduced.begin(), reduced.end(), false);
        continue;
      }
      const int u = c.unit, j = l.bucket_of.at(u);
      switch (c.kind) {
        case DpCall::ACQUIRE: {
          if (z < 3) break;
          const bool sweep_step = held == 0;
          if (!resident[u]) gather(u);
          ++refs[u];
          ++held;
          if (sweep_step)
            for (int v : prefetch_window(u, c.forward, U, prefetch, unit_chunk))
              if (!resident[v]) gather(v);
          break;
        }
        case DpCall::RELEASE:
          if (z < 3) break;
          if (refs[u] == 0) fail("release without acquire of unit " + std::to_string(u));
          --held;
          if (--refs[u] == 0) {
            resident[u] = false;
            params_alive -= l.buckets[j].padded;
          }
          break;
        case DpCall::GRADS:
          if (reduced[j]) fail("grads of unit " + std::to_string(u) + " after its reduction");
          allocate(j);
          break;
        case DpCall::BEGIN_MICROBATCH:
          break;
        case DpCall::BACKWARD_DONE:
          if (l.buckets[j].unit_lo != u) break;
          if (deferred[j]) {  // reduced at finish; the chunk's sweep still ends here
            if (overlap && in_flight >= 0 && u == chunk_first_unit(unit_chunk, u))
              complete(in_flight);
            break;
          }
          if (!overlap) {
            post(j);
            complete(j);
          } else {
            if (in_flight >= 0) complete(in_flight);
            post(j);
            in_flight = j;
            if (u == chunk_first_unit(unit_chunk, u)) complete(j);
          }
          break;
      }
    }
    if (held) fail("a microbatch ends with parameters still acquired");
  }
  // finish_gradients completes the reduction in flight, then reduces what was written but
  // never declared done (or deferred).
  if (in_flight >= 0) complete(in_flight);
  for (int j = 0; j < nb; ++j)
    if (alive[j]) {
      post(j);
      complete(j);
    }
  return r;
}

int64_t layer_output_bytes(const Plan& plan) {
  for (const ActivationTensor& t : plan.layer_activations)
    if (t.name == "out") return t.bytes();
  return 0;
}

// ---- the plan -------------------------------------------------------------------------
static void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("plan: " + what);
}

Plan make_plan(const ModelConfig& m, const TrainConfig& t, const ParallelConfig& p,
               const PlanOptions& o) {
  check(p.world_size >= 1, "world size must be >= 1");
  check(p.context_parallel == 1 && p.expert_parallel == 1,
        "context and expert parallelism are not modelled yet (sizes must be 1)");
  check(p.zero_stage >= 0 && p.zero_stage <= 3, "zero stage must be 0..3");
  check(t.micro_batch_size >= 1, "micro batch size must be >= 1");
  check(m.cross_entropy_chunk >= 1, "cross-entropy chunk must be >= 1");
  const int tp = p.tensor_parallel;
  const int pp = p.pipeline_parallel;
  check(tp >= 1 && pp >= 1 && p.world_size % (tp * pp) == 0,
        "tensor parallel " + std::to_string(tp) + " x pipeline parallel " + std::to_string(pp) +
            " must divide world size " + std::to_string(p.world_size));
  check(m.num_attention_heads % tp == 0 && m.groups() % tp == 0 && m.ffn() % tp == 0,
        "tensor parallel " + std::to_string(tp) + " must divide heads " +
            std::to_string(m.num_attention_heads) + ", query groups " +
            std::to_string(m.groups()) + " and ffn " + std::to_string(m.ffn()));
  // Megatron turns sequence parallelism off at tp 1 (the trainer warns); so does the plan.
  const bool sp = p.sequence_parallel && tp > 1;
  const int B = t.micro_batch_size;
  check(!sp || (int64_t)B * m.seq_length % tp == 0,
        "sequence parallelism splits N = micro batch x seq = " +
            std::to_string((int64_t)B * m.seq_length) + " tokens over tensor parallel " +
            std::to_string(tp) + ": not divisible");
  Plan plan;
  plan.model = m;
  plan.train = t;
  plan.parallel = p;
  plan.options = o;
  plan.dp = p.data_parallel();
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
  plan.activation_bytes_per_microbatch = sum_bytes(plan.embedding_activations) +
                                         m.num_layers * plan.activation_bytes_per_layer +
                                         sum_bytes(plan.head_activations);

  // Full recompute's block method recomputes min(n, l_c) layers of each model chunk c.
  const std::vector<int> chunk_layers =
      m.recompute.full() ? pipeline_stage_layers(m.num_layers, pp, p.virtual_pipeline,
                                                 p.first_stage_layers, p.last_stage_layers)
                         : std::vector<int>{};
  plan.flops = flops_plan(m, B, plan.global_batch / B, plan.microbatches_per_rank,
                          o.attention_flops, tp, chunk_layers);

  // Model states per rank (plan.h): elements of each buffer under the ZeRO stage, from the
  // same bucket layout DataParallel builds over the rank's local vector (vocabulary padding
  // included), times bytes per element of each category.
  const std::vector<int64_t> units = param_units(m, tp);
  const int64_t psi = units.back();
  const int z = p.zero_stage;
  const int param_b = act, grad_b = act, master_b = t.bf16 ? 4 : 0, optim_b = 8;
  plan.data_parallel = data_parallel_plan(
      units,
      microbatch_calls(m.num_layers, m.tied_embeddings(), m.fused_cross_entropy,
                       m.recompute.full_groups(m.num_layers)),
      z, dp, o, plan.microbatches_per_rank);
  const DataParallelPlan& d = plan.data_parallel;
  plan.zero_shard = d.state_numel;

  MemoryPlan mem;
  const int64_t params_stored = d.params_resident;
  mem.params = (d.params_resident + d.sim.params_transient_peak) * param_b;
  mem.grads = (d.grads_resident + d.sim.grads_transient_peak) * grad_b;
  mem.master_params = d.state_numel * master_b;
  mem.optimizer_states = d.state_numel * optim_b;
  // Without pipelining each microbatch's backward frees its activations before the next
  // forward, so one microbatch is held at the peak (with full recompute: its stored group
  // inputs, and one group made again in backward; plan_recompute.h).
  const int held = 1;
  const ChunkActivations chunk = chunk_activations(
      m.recompute.full_groups(m.num_layers), sum_bytes(plan.embedding_activations),
      plan.activation_bytes_per_layer, layer_output_bytes(plan), sum_bytes(plan.head_activations));
  mem.activations = std::max(chunk.forward_peak, chunk.backward_peak);
  mem.recompute = recompute_buffers(m, B, act, o.mask_bytes, tp, sp).peak();  // selective
  mem.comm_buffers = comm_buffer_bytes(m, t, p);
  mem.logits = logits_bytes(m, B, t.bf16, tp);
  mem.workspace = workspace_bytes(m, B, act, tp, sp);
  mem.total_at_recompute = total_at_recompute(plan, mem);
  if (m.recompute.full()) {
    // The total at each phase of the microbatch (model/transformer.cpp): the other
    // categories at their peaks but the logits (alive in the head only) and the workspace's
    // forward tokens and targets (backward: its d(xf) or the tokens again) as they are then.
    const WorkspacePhases w = workspace_phases(m, B, act, tp, sp);
    int64_t others = 0;
    for (int c = 0; c < kNumMemoryCategories; ++c) others += mem.at(c);
    others -= mem.activations + mem.logits + mem.workspace + mem.recompute;
    const int64_t head = others + w.common + w.forward + chunk.kept + mem.logits;  // loss
    const int64_t layers_forward = others + w.common + w.forward + chunk.forward_peak;
    const int64_t layers_backward = others + w.common + chunk.backward_peak;
    const int64_t head_backward = others + w.common + w.backward + chunk.kept +
                                  (m.fused_cross_entropy ? 0 : mem.logits);
    mem.total_full_recompute = std::max({head, layers_forward, layers_backward, head_backward});
  }

  // Communication per step (plan.h, Plan::comm). Payload bytes per element: the storage
  // type's for parameters and gradients (param_b, grad_b: 4, or 2 with --bf16), 4 for the
  // norm and loss scalars (fp32 in both).
  plan.comm = tensor_parallel_comm(m, B, tp, sp, act, plan.microbatches_per_rank, p.zero_stage);
  for (const CommPlanEntry& e :
       data_parallel_comm(d, z, dp, grad_b, param_b))
    plan.comm.push_back(e);
  if (p.world_size > 1)
    plan.comm.push_back({CommGroup::WORLD, CommOp::ALL_REDUCE, 1, 4,
                         bus_factor(CommOp::ALL_REDUCE, p.world_size) * 4});

  // Rank order tp fastest, then cp, dp, pp: rank = tp_rank + t (cp_rank + cp (dp_rank +
  // dp pp_rank)). The ranks of a tp group hold the same shapes (local_param_table pads the
  // vocabulary so that even the last one does), and dp replicas the same bytes: one
  // MemoryPlan serves every rank.
  plan.ranks.resize(p.world_size);
  for (int r = 0; r < p.world_size; ++r) {
    RankPlan& rp = plan.ranks[r];
    rp.rank = r;
    rp.tp_rank = r % tp;
    rp.dp_rank = (r / (tp * p.context_parallel)) % dp;
    rp.pp_rank = r / (tp * p.context_parallel * dp);
    rp.params = psi;
    rp.params_stored = params_stored;
    rp.microbatches_held = held;
    rp.memory = mem;
  }
  plan_pipeline(plan);
  return plan;
}

}  // namespace paralab
