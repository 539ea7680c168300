// plan/memory.cpp: the bytes of each memory category a rank holds: the categories, the
// local sizes under tensor parallelism, every activation tensor of notes/model.md's list, the
// logits, the workspace and the communication buffers (plan.h has the byte conventions).
// Korthikanti et al.'s closed forms, which the plan is held to, are here too.
#include <algorithm>
#include <stdexcept>
#include "model/param_table.h"
#include "plan/plan.h"
#include "plan/moe_memory.h"  // moe_tensors
#include "plan/recompute.h"  // recompute_module_of, is_recomputed

namespace paralab {

const char* const kMemoryCategoryNames[kNumMemoryCategories] = {
    "params", "grads", "master_params", "optimizer_states", "activations",
    "recompute", "comm_buffers", "logits", "workspace", "fp8_operands", "fp8_state"};

int64_t MemoryPlan::at(int category) const {
  const int64_t v[kNumMemoryCategories] = {params, grads, master_params, optimizer_states,
                                           activations, recompute, comm_buffers, logits,
                                           workspace, fp8_operands, fp8_state};
  return v[category];
}

int64_t HostMemoryPlan::at(int category) const {
  const int64_t v[4] = {params, grads, master_params, optimizer_states};
  return category >= 0 && category < 4 ? v[category] : 0;
}

int64_t MemoryPlan::total() const {
  if (total_replayed > 0) return total_replayed;
  if (total_stage > 0) return total_stage;
  if (total_full_recompute > 0) return total_full_recompute;
  int64_t s = 0;
  for (int i = 0; i < kNumMemoryCategories; ++i) s += at(i);
  return std::max(s - recompute, total_at_recompute);
}

CoreShape plan_core_shape(const ModelConfig& m, int B, int tp) {
  CoreShape s;
  s.B = B;
  s.A = m.num_attention_heads / tp;
  s.G = m.groups() / tp;
  s.S = m.seq_length / m.context_parallel.size;
  s.D = m.head_dim();
  s.length = m.seq_length;
  s.flash = m.attention == AttentionImpl::FLASH;
  s.dropout = m.attention_dropout;
  return s;
}

LocalSizes local_sizes(const ModelConfig& m, int B, int tp, bool sp) {
  LocalSizes l;
  l.S = m.seq_length / m.context_parallel.size;
  l.N = (int64_t)B * l.S;
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
  const int64_t N = l.N, Nl = l.N_l, h = m.hidden_size;
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
  if (m.qk_layernorm) {  // q and k before their per-head norm, and its statistics
    const int64_t per_row = m.is_gpt() ? 2 : 1;                  // LayerNorm mean + rstd
    add("attn.q_raw", N * a * d, act_bytes);
    add("attn.k_raw", N * g * d, act_bytes);
    add("attn.q_norm.stats", per_row * N * a, 4, true);
    add("attn.k_norm.stats", per_row * N * g, 4, true);
  }
  // The core's (parallel/context_parallel.h core_saved_buffers): naive P of each pass
  // [softmax 2as^2b/t; one pass of S x S at cp 1, with cp the S/cp x (keys) blocks], with
  // attention dropout its mask [as^2b/t] and P' [2as^2b/t]; flash the log-sum-exp per query
  // row (fp32), and under a2a O head-split; a ring's naive passes also the rows' lse.
  (void)attn_drop;
  for (const CoreBuffer& b :
       core_saved_buffers(plan_core_shape(m, B, tp), m.context_parallel, act_bytes)) {
    const std::string name = b.name == "mask" ? "attn.probs_dropout_mask" : "attn." + b.name;
    t.push_back({name, (int64_t)b.elements, b.name == "mask" ? mask_bytes : b.element_bytes,
                 false});
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
  // Selective recompute keeps none of its modules' tensors (plan/recompute.h).
  t.erase(std::remove_if(t.begin(), t.end(),
                         [&](const ActivationTensor& x) {
                           return is_recomputed(m, recompute_module_of(x.name));
                         }),
          t.end());
  return t;
}

std::vector<ActivationTensor> moe_layer_activation_tensors(const ModelConfig& m, int B,
                                                           int act_bytes, int mask_bytes,
                                                           const MoeRows& rows, int tp, bool sp) {
  std::vector<ActivationTensor> t = layer_activation_tensors(m, B, act_bytes, mask_bytes, tp, sp);
  // selective mlp recompute is refused with experts (make_plan), so mlp.fc1_out is there
  std::vector<ActivationTensor> out;
  bool placed = false;
  for (ActivationTensor& x : t) {
    if (x.name == "mlp.fc1_out")  // where the dense MLP's are (plan/moe_memory.h)
      for (ActivationTensor& y : moe_tensors(m, B, act_bytes, rows)) out.push_back(y), placed = true;
    if (x.name == "mlp.fc1_out" || x.name == "mlp.act") continue;  // the experts' instead
    out.push_back(x);
  }
  if (!placed)
    for (ActivationTensor& y : moe_tensors(m, B, act_bytes, rows)) out.push_back(y);
  return out;
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

int64_t logits_bytes(const ModelConfig& m, int B, bool half, int tp) {
  const LocalSizes l = local_sizes(m, B, tp);
  const int64_t rows = m.fused_cross_entropy ? std::min<int64_t>(l.N, m.cross_entropy_chunk)
                                             : l.N;
  // fp32 logits (4 bytes) in every precision; with 16-bit storage (bf16, fp16) their gradient
  // is also rounded into a 16-bit copy (2 bytes) for the head GEMMs while the fp32 ones live
  // (notes/model.md).
  // Under tp only the rank's V_l columns exist, the padded ones included.
  return rows * l.vocab * (half ? 4 + 2 : 4);
}

// ---- workspace (notes/model.md, "Workspace"; model/layer.h Workspace) ---------------------
// Scratch allocated once per microbatch size and reused by every layer, in the storage
// type (act_bytes: 4, or 2 with --bf16) except the fp32 per-token losses, plus what one
// microbatch holds while in flight (int32 tokens and targets). Under tp the local sizes of
// notes/model.md's "Tensor parallelism" section.
std::vector<ActivationTensor> workspace_tensors(const ModelConfig& m, int B, int act_bytes,
                                                int tp, bool sp) {
  const LocalSizes l = local_sizes(m, B, tp, sp);
  const int64_t N = l.N, Nl = l.N_l, h = m.hidden_size;
  const int64_t a = l.heads, g = l.groups, d = l.head_dim;
  std::vector<ActivationTensor> t;
  auto add = [&](const std::string& name, int64_t elements, int bytes = 0) {
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
  if (dense_layer_count(m) > 0) {        // the dense MLP's gradients (model/moe.cpp: its own)
    add("dact", N * l.ffn);
    add("dfc1", N * l.fc1);
  }
  add("losses", N, 4);                   // per-token loss, fp32
  // The loss's row max, sum of exponentials and target logit per row of a chunk
  // (parallel/tensor_parallel.h: the same three-pass loss at every tp, one rank included).
  add("loss_scratch", 3 * std::min<int64_t>(N, m.cross_entropy_chunk), 4);
  // the attention core's (core_workspace_buffers): naive's scores and dprobs of the largest
  // pass, and with context parallelism the travelling, gathered or head-split blocks
  for (const CoreBuffer& b :
       core_workspace_buffers(plan_core_shape(m, B, tp), m.context_parallel, act_bytes))
    add("core." + b.name, (int64_t)b.elements, b.element_bytes);
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
                                 bool embedding, bool head, bool one_chunk) {
  WorkspacePhases w;
  int64_t tokens = 0, targets = 0, dxf = 0;
  for (const ActivationTensor& t : workspace_tensors(m, B, act_bytes, tp, sp)) {
    if (t.name == "tokens") tokens = embedding ? t.bytes() : 0;
    else if (t.name == "targets") targets = head ? t.bytes() : 0;
    else if (t.name == "dxf") dxf = head ? t.bytes() : 0;
    else w.common += t.bytes();
  }
  // model/transformer.cpp, forward_as: one forward reads both ends' only if they share a
  // chunk (a V's rank 0 runs them in two: tokens, then targets)
  w.forward = one_chunk ? tokens + targets : std::max(tokens, targets);
  w.backward = std::max(dxf, tokens);    // the head's backward, then the embedding's
  return w;
}

void add_layer_transients(WorkspacePhases& w, const Plan& plan, int first, int n,
                          const std::vector<int>& microbatches) {
  if (n < 0) n = plan.model.num_layers - first;
  for (size_t mb = 0; mb < plan.layer_footprints.size(); ++mb)
    for (int l = first; l < first + n; ++l) {
      // one set for all microbatches, or per microbatch: only those run here
      if (plan.layer_footprints.size() > 1 && !microbatches.empty() &&
          std::find(microbatches.begin(), microbatches.end(), (int)mb) == microbatches.end())
        continue;
      const LayerFootprint& f = plan.layer_footprints[mb].at(l);
      w.forward_transient = std::max(w.forward_transient, f.forward_transient);
      w.backward_transient = std::max(w.backward_transient, f.backward_transient);
    }
}

std::vector<int64_t> Plan::layer_saved(int microbatch, int first, int n) const {
  std::vector<int64_t> v;
  for (int l = first; l < first + n; ++l) v.push_back(footprint(microbatch, l).saved);
  return v;
}

int64_t workspace_bytes(const ModelConfig& m, int B, int act_bytes, int tp, bool sp) {
  return workspace_phases(m, B, act_bytes, tp, sp).peak();
}

// fp32 scalars that collectives reduce on the device (notes/model.md): the gradient norm's
// over dp (ZeRO >= 1) and over tp, and the trainer's loss average over the world (with the
// stop flag beside it).
int64_t comm_buffer_bytes(const ModelConfig& m, const TrainConfig&, const ParallelConfig& p,
                          int moe_layers_here) {
  int64_t bytes = 0;
  if (p.zero_stage >= 1 && p.data_parallel() * p.context_parallel > 1) bytes += 4;
  if (p.tensor_parallel > 1) bytes += 4;
  if (p.pipeline_parallel > 1) bytes += 4;
  if (p.world_size > 1) bytes += 8;  // the loss and the stop flag (model/evaluate.h)
  // the routers' counts of the step: each expert's kept and routed pairs, summed on the device
  // by the dispatch, 2 E int32 per MoE layer the rank holds, whose kept half the expert bias's
  // update all-reduces over dp (dp x cp under context parallelism) in place
  // (model/transformer.h routing_counts_)
  const int moe_layers = moe_layers_here >= 0 ? moe_layers_here : moe_layer_count(m);
  if (m.moe.enabled()) bytes += 8 * (int64_t)m.moe.num_experts * moe_layers;
  // experts apart, and here: the norm's expert share over ep (etp_ep with etp > 1;
  // model/optimizer.cpp), and their own ZeRO >= 1 all-reduce over the expert-data-parallel
  // group (parallel/data_parallel.cpp)
  if (p.experts_apart() && moe_layers > 0) {
    if (p.expert_parallel * p.expert_tensor_parallel > 1) bytes += 4;
    if (p.zero_stage >= 1 && p.expert_data_parallel() > 1) bytes += 4;
  }
  return bytes;
}

// ---- Korthikanti Table 2 -------------------------------------------------------------
// Multiplied out, sbh(10 + 24/t + 5as/(ht)) = 10sbh + 24sbh/t + 5as^2b/t: every term is an
// integer product divided once, so the double is exact whenever the bytes are whole.
double korthikanti_layer_bytes(double s, double b, double h, double a) {
  return 34 * s * b * h + 5 * a * s * s * b;
}
double korthikanti_tp_bytes(double s, double b, double h, double a, double t) {
  return 10 * s * b * h + 24 * s * b * h / t + 5 * a * s * s * b / t;
}
double korthikanti_tp_sp_bytes(double s, double b, double h, double a, double t) {
  return 34 * s * b * h / t + 5 * a * s * s * b / t;
}
double korthikanti_tp_selective_bytes(double s, double b, double h, double t) {
  return 10 * s * b * h + 24 * s * b * h / t;
}
double korthikanti_tp_sp_selective_bytes(double s, double b, double h, double t) {
  return 34 * s * b * h / t;
}
double korthikanti_full_recompute_bytes(double s, double b, double h) { return 2 * s * b * h; }

KorthikantiCheck korthikanti_check(const Plan& plan) {
  const ModelConfig& m = plan.model;
  // with context parallelism the rank's s/cp tokens: the closed form at s/cp
  const double s = m.seq_length / plan.cp, b = plan.train.micro_batch_size,
               h = m.hidden_size, a = m.num_attention_heads, t = plan.tp;
  const bool sp = plan.sequence_parallel, naive = m.attention == AttentionImpl::NAIVE;
  KorthikantiCheck c;
  c.plan_bytes = sum_bytes(plan.layer_activations, false);
  c.norm_statistics_bytes = sum_bytes(plan.layer_activations) - c.plan_bytes;
  // Table 2's rows; flash keeps no a s s tensor, which leaves the selective-recompute rows.
  if (naive) {
    c.closed_form_bytes = sp ? korthikanti_tp_sp_bytes(s, b, h, a, t)
                             : korthikanti_tp_bytes(s, b, h, a, t);
    c.formula = plan.tp == 1 ? "sbh(34 + 5as/h)"
                : sp         ? "sbh(34/t + 5as/(ht))"
                             : "sbh(10 + 24/t + 5as/(ht))";
  } else {
    c.closed_form_bytes = sp ? korthikanti_tp_sp_selective_bytes(s, b, h, t)
                             : korthikanti_tp_selective_bytes(s, b, h, t);
    c.formula = plan.tp == 1 ? "34sbh" : sp ? "34sbh/t" : "sbh(10 + 24/t)";
  }
  auto differs = [&](bool cond, std::string what) {
    if (cond) c.differences.push_back(std::move(what));
  };
  char buf[160];
  differs(!m.is_gpt(), "llama: RMSNorm, SwiGLU fc1 of 2f, no dropout (the paper's layer is GPT)");
  std::snprintf(buf, sizeof buf, "ffn %d, not 4h = %d", m.ffn(), 4 * m.hidden_size);
  differs(m.ffn() != 4 * m.hidden_size, buf);
  std::snprintf(buf, sizeof buf, "GQA: %d query groups for %d heads (k, v smaller)", m.groups(),
                m.num_attention_heads);
  differs(m.groups() != m.num_attention_heads, buf);
  differs(m.head_dim() * m.num_attention_heads != m.hidden_size, "head dim x heads != h");
  differs(!plan.train.half(), "fp32: 4-byte activations (the paper's are 16-bit)");
  std::snprintf(buf, sizeof buf, "%d-byte dropout masks (the paper's are 1 byte)",
                plan.options.mask_bytes);
  differs(plan.options.mask_bytes != 1, buf);
  differs(m.hidden_dropout <= 0, "no hidden dropout: no masks after proj and fc2");
  differs(naive && m.attention_dropout <= 0,
          "no attention dropout: no mask nor dropped P (3as/(ht) of the 5as/(ht))");
  differs(!naive, "flash attention: no 5as/(ht) term; an fp32 log-sum-exp of 4bas/t instead");
  std::snprintf(buf, sizeof buf,
                "context parallelism %d: s = %d tokens per rank; naive keeps each pass's P "
                "(its queries x the keys it saw), not (s/cp)^2",
                plan.cp, m.seq_length / plan.cp);
  differs(plan.cp > 1 && naive, buf);
  return c;
}

}  // namespace paralab
