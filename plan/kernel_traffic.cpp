// plan/kernel_traffic.cpp: the non-GEMM kernels of a step (kernel_traffic.h): a layer's
// forward and backward as model/layer.cpp and model/attention.cpp call them, the embedding
// (model/transformer.cpp), the head and the loss (model/head.cpp), and the step's sum over the
// rank's pipeline chunks and microbatches. Sizes are the rank's (plan/plan.h LocalSizes): N =
// B S tokens of the microbatch (S = s/cp), N_l = N/t with sequence parallelism (what the
// norms, dropout and the residual see), a_l, g_l, f_l, fc1_l, qkv_l the tp share, V_l the
// vocabulary columns. Every GEMM the code makes in between is plan/gemm_calls.h's.
//
// Per dense layer and microbatch (gpt: LayerNorm, biases, GeLU; llama: RMSNorm, SwiGLU, RoPE
// inside qkv_split), forward:
//   norm1 (N_l h)  [add_bias qkv (N, qkv_l)]  qkv_split  [qk-layernorm: 2 head norms, 2 rope]
//   core (kernel_traffic_parallel.cpp)  heads_merge  [add_bias proj]  [dropout]  add
//   norm2  [add_bias fc1]  gelu | swiglu  [add_bias fc2]  [dropout]  add
// backward: the mirror (bias_backward for each bias, dropout_backward, gelu | swiglu backward,
// the norms' backwards, heads_merge backward twice: dO and O's head layout, unless the core is
// recomputed and made O itself), the core's backward, qkv_split backward; a split backward
// (zero-bubble schedules) copies the linears' output gradients for W (memcpy_device) and W
// does the column-parallel biases' gradients. A pipeline rank's message between two of its
// chunks (the V's turn) is one more copy. Recompute adds: selective norm2, fc1's bias and activation
// (mlp), the core's forward (core_attn), norm1 (norm); full: the whole forward again.
// Head, per microbatch: final norm; per loss chunk of c rows the three cross-entropy kernels
// (bf16: the logits' gradient rounded, convert chunk V_l, with the fused loss); backward: the
// unfused loss's convert (bf16), a memset of d(x) and the final norm's backward.
// Embedding: lookup (N), gpt positions (N_l); backward positions and the lookup's scatter.
#include "plan/kernel_traffic.h"
#include <algorithm>
#include "model/param_table.h"  // padded_vocab

namespace paralab {

namespace {

// One rank's sizes and switches, what every piece below reads.
struct RankShape {
  const ModelConfig& m;
  const ParallelConfig& p;
  LocalSizes l;
  int B = 1, e = 4, tp_rank = 0;
  CoreShape core;
  CpSpec cp;
  bool gpt = true, by_group = false;
  RankShape(const Plan& plan, int rank)
      : m(plan.model), p(plan.parallel) {
    B = plan.train.micro_batch_size;
    e = storage_bytes(plan.train);
    l = local_sizes(m, B, plan.tp, plan.sequence_parallel);
    core = plan_core_shape(m, B, plan.tp);
    cp = m.context_parallel;
    if (!plan.ranks.empty()) {
      cp.rank = plan.ranks.at(rank).cp_rank;
      tp_rank = plan.ranks.at(rank).tp_rank;
    }
    gpt = m.is_gpt();
    by_group = plan.options.flash_ring_by_group && cp.size > 1 && cp.type == CpCommType::P2P;
  }
};

void norm_forward(KernelTally& k, const RankShape& r, double rows, double C) {
  if (r.gpt) k.layernorm_forward(rows, C);
  else k.rmsnorm_forward(rows, C);
}
void norm_backward(KernelTally& k, const RankShape& r, double rows, double C) {
  if (r.gpt) k.layernorm_backward(rows, C);
  else k.rmsnorm_backward(rows, C);
}

// The dense MLP up to fc2's input (mlp_up): fc1's bias, the activation.
void mlp_up(KernelTally& k, const RankShape& r) {
  const LocalSizes& l = r.l;
  if (r.gpt) k.add_bias(l.N, l.fc1);       // add_bias (fc1.bias)
  if (r.gpt) k.gelu_forward(l.N * l.ffn);  // gelu_forward
  else k.swiglu_forward(l.N, l.ffn);       // swiglu_forward
}

// The layer's forward (layer_forward), or full recompute's second one (no statistics).
void layer_forward(KernelTally& k, const RankShape& r, int layer, const MoeRows& rows,
                   bool record_stats, bool first = false) {
  const ModelConfig& m = r.m;
  const LocalSizes& l = r.l;
  const double h = m.hidden_size, B = r.B, S = l.S, A = l.heads, G = l.groups, D = l.head_dim;
  const bool dropout = m.hidden_dropout > 0.0f, moe = m.moe.is_moe_layer(layer);
  norm_forward(k, r, l.N_l, h);                 // norm1
  if (r.gpt) k.add_bias(l.N, l.qkv);            // add_bias (qkv.bias)
  k.qkv_split(B, S, A, G, D);                   // qkv_split_forward
  if (m.qk_layernorm) {                         // qk_norm_forward
    norm_forward(k, r, B * A * S, D);           //   q's head norm
    norm_forward(k, r, B * G * S, D);           //   k's head norm
    if (!r.gpt) k.rope(B, A, S, D), k.rope(B, G, S, D);  // rope_forward q, k
  }
  const bool keep_heads = !m.recompute.recompute_core_attn();
  core_attention_traffic(k, r.core, r.cp, r.by_group, false, keep_heads);
  k.heads_merge(B, S, A, D);                    // heads_merge_forward
  if (r.gpt) k.add_bias(l.N_l, h);              // finish_block: add_bias (proj.bias)
  if (dropout) k.dropout_forward(l.N_l * h);    //   dropout_forward
  k.add(l.N_l * h);                             // add: x_mid
  norm_forward(k, r, l.N_l, h);                 // norm2
  if (moe) {
    moe_forward_traffic(k, m, rows, (int)S, record_stats, first);
  } else {
    mlp_up(k, r);
    if (r.gpt) k.add_bias(l.N_l, h);            // finish_block: add_bias (fc2.bias)
  }
  if (dropout) k.dropout_forward(l.N_l * h);    //   dropout_forward
  k.add(l.N_l * h);                             // add: out
}

// The layer's backward (layer_backward; with a split, B and W together), and apart in
// `again` what selective recompute runs first.
void layer_backward(KernelTally& k, KernelTally& again, const RankShape& r, int layer,
                    const MoeRows& rows, bool split) {
  const ModelConfig& m = r.m;
  const LocalSizes& l = r.l;
  const Recompute& rc = m.recompute;
  const double h = m.hidden_size, B = r.B, S = l.S, A = l.heads, G = l.groups, D = l.head_dim;
  const bool dropout = m.hidden_dropout > 0.0f, moe = m.moe.is_moe_layer(layer);
  const bool sp = r.p.sequence_parallel && r.p.tensor_parallel > 1;
  // ---- MLP block
  if (rc.recompute_norm()) norm_forward(again, r, l.N_l, h);  // norm2 again
  if (rc.recompute_mlp()) mlp_up(again, r);                   // fc1's bias and act again
  if (dropout) k.dropout_backward(l.N_l * h);   // finish_block_backward: dropout_backward
  if (moe) {
    moe_backward_traffic(k, m, rows, (int)S);
  } else {
    if (r.gpt) k.bias_backward(l.N_l, h);       //   bias_backward (fc2.bias)
    if (split) k.memcpy_device(l.N * h * r.e);  // defer d_fc2
    if (r.gpt) k.gelu_backward(l.N * l.ffn);    // gelu_backward
    else k.swiglu_backward(l.N, l.ffn);         // swiglu_backward
    if (split && sp) k.memcpy_device(l.N * h * r.e);      // defer fc1_in
    if (split) k.memcpy_device(l.N * l.fc1 * r.e);        // defer d_fc1
    if (r.gpt) k.bias_backward(l.N, l.fc1);     // bias_backward (fc1.bias): B, or W's
  }
  norm_backward(k, r, l.N_l, h);                // norm2
  // ---- attention block
  if (dropout) k.dropout_backward(l.N_l * h);   // finish_block_backward: dropout_backward
  if (r.gpt) k.bias_backward(l.N_l, h);         //   bias_backward (proj.bias)
  if (split) k.memcpy_device(l.N * h * r.e);    // defer d_proj
  if (rc.recompute_core_attn())                 // attention_recompute
    core_attention_traffic(again, r.core, r.cp, r.by_group, true, false);
  k.heads_merge(B, S, A, D);                    // heads_merge_backward: dO
  if (!rc.recompute_core_attn()) k.heads_merge(B, S, A, D);  // O from ctx
  core_attention_backward_traffic(k, r.core, r.cp, r.by_group);
  if (m.qk_layernorm) {                         // qk_norm_backward
    if (!r.gpt) k.rope(B, A, S, D), k.rope(B, G, S, D);  // rope_backward dq, dk
    for (double heads : {A, G}) {               // head_norm_backward q, then k
      k.memset_zero(B * heads * S * D * r.e);   //   d_raw = 0
      norm_backward(k, r, B * heads * S, D);
      k.memcpy_device(B * heads * S * D * r.e); //   d_raw back into dq | dk
    }
  }
  k.qkv_split(B, S, A, G, D);                   // qkv_split_backward
  if (rc.recompute_norm()) norm_forward(again, r, l.N_l, h);  // norm1 again
  if (split && sp) k.memcpy_device(l.N * h * r.e);     // defer qkv_in
  if (split) k.memcpy_device(l.N * l.qkv * r.e);       // defer d_qkv
  if (r.gpt) k.bias_backward(l.N, l.qkv);       // bias_backward (qkv.bias): B, or W's
  norm_backward(k, r, l.N_l, h);                // norm1
}

void embedding_forward(KernelTally& k, const RankShape& r) {
  const double h = r.m.hidden_size;
  k.embedding_forward(r.l.N, h);                                 // vocab-parallel lookup
  if (r.gpt) k.position_embedding_forward(r.l.N_l, r.l.S, h);    // learned positions
}
void embedding_backward(KernelTally& k, const RankShape& r) {
  const double h = r.m.hidden_size;
  if (r.gpt) k.position_embedding_backward(r.l.N_l, r.l.S, h);
  k.embedding_backward(r.l.N, h);
}

void head_forward(KernelTally& k, const RankShape& r) {
  const ModelConfig& m = r.m;
  const double V = r.l.vocab, h = m.hidden_size;
  // the rank's real columns: the last tp rank's may be padding
  const double cols = std::max<double>(0, std::min<double>(V, m.vocab_size - r.tp_rank * V));
  const int chunk = (int)std::min<int64_t>(r.l.N, std::max(1, m.cross_entropy_chunk));
  norm_forward(k, r, r.l.N_l, h);  // final norm
  for (int64_t t0 = 0; t0 < r.l.N; t0 += chunk) {
    const double n = (double)std::min<int64_t>(chunk, r.l.N - t0);
    k.cross_entropy_row_max(n, cols);   // vocab_parallel_cross_entropy: 1.
    k.cross_entropy_sum_exp(n, cols);   //   2.
    k.cross_entropy_finish(n, V, cols); //   3.
    // loss_gradient_as: the fused chunk's gradient rounded for its GEMMs (a whole chunk)
    if (m.fused_cross_entropy && r.e != 4) k.convert((double)chunk * V);
  }
}
void head_backward(KernelTally& k, const RankShape& r) {
  const double h = r.m.hidden_size;
  if (!r.m.fused_cross_entropy && r.e != 4) k.convert(r.l.N * r.l.vocab);  // loss_gradient_as
  k.memset_zero(r.l.N_l * h * r.e);  // dres = 0: the final norm's dx is +=
  norm_backward(k, r, r.l.N_l, h);   // final norm
}

}  // namespace

KernelTrafficPlan kernel_traffic_plan(const Plan& plan, int rank) {
  return kernel_traffic_plan(plan, rank, KernelTrafficOptions());
}

KernelTrafficPlan kernel_traffic_plan(const Plan& plan, int rank, const KernelTrafficOptions& o) {
  const RankShape r(plan, rank);
  const ModelConfig& m = plan.model;
  const int L = m.num_layers, e = r.e;
  const int64_t micro = std::max<int64_t>(1, plan.microbatches_per_rank);
  const MoeRouting& routing = o.routing ? *o.routing : plan.routing;
  KernelTrafficPlan t;
  t.layer_forward.assign(L, {});
  t.layer_backward.assign(L, {});
  t.layer_recompute.assign(L, {});
  t.layer_attention_forward.assign(L, {});
  t.layer_attention_backward.assign(L, {});
  // the rank's chunks of layers, and whether it holds the embedding and the head
  std::vector<int> first{0}, count{L};
  bool embedding = true, head = true;
  const int pp_rank = plan.ranks.empty() ? 0 : plan.ranks.at(rank).pp_rank;
  if (!plan.pipeline.stages.empty()) {
    const PipelineStagePlan& st = plan.pipeline.stages.at(pp_rank);
    first = st.chunk_first_layer;
    count = st.chunk_layers;
    embedding = st.embedding;
    head = st.head;
  }
  // each chunk's backwards: (microbatch, split) in the rank's list; every microbatch whole
  // without pipelining
  std::vector<std::vector<std::pair<int, bool>>> backwards(first.size());
  int64_t handed_over = 0;  // messages between two of the rank's chunks: one copy each
  if (!plan.pipeline.stages.empty()) {
    for (const Action& a : plan.pipeline.schedule.ranks.at(pp_rank)) {
      if (a.type == ActionType::B) backwards.at(a.chunk).push_back({a.microbatch, a.split});
      for (const Message& msg : a.recvs) handed_over += msg.local();
    }
  } else {
    for (int64_t mb = 0; mb < micro; ++mb) backwards[0].push_back({(int)mb, false});
  }
  // the microbatches through a chunk (each chunk of a rank runs as many)
  const int64_t runs = std::max<int64_t>(1, (int64_t)backwards[0].size());
  KernelTally total(e);
  for (size_t c = 0; c < first.size(); ++c) {
    const std::vector<int> group = m.recompute.full_groups(count[c]);
    for (int i = 0; i < count[c]; ++i) {
      const int l = first[c] + i;
      KernelTally fwd(e), bwd(e), again(e);
      for (size_t j = 0; j < backwards[c].size(); ++j) {
        const int mb = backwards[c][j].first;
        const MoeRows rows = m.moe.is_moe_layer(l)
                                 ? moe_layer_rows(m, plan.parallel, r.B, routing, l, mb)
                                 : MoeRows();
        layer_forward(fwd, r, l, rows, true, j == 0);
        if (group[i] >= 0) layer_forward(again, r, l, rows, false);  // full: forward again
        layer_backward(bwd, again, r, l, rows, backwards[c][j].second);
      }
      total.traffic.add(fwd.traffic);
      total.traffic.add(bwd.traffic);
      total.traffic.add(again.traffic);
      total.attention.add(fwd.attention);
      total.attention.add(bwd.attention);
      total.attention.add(again.attention);
      total.routing.add(fwd.routing);
      total.routing.add(again.routing);
      // per microbatch: the mean (all alike but for a measured routing's rows)
      auto mean = [&](const KernelTraffic& x) {
        return KernelTraffic{x.launches / runs, x.bytes / (double)runs};
      };
      t.layer_forward[l] = mean(fwd.traffic);
      t.layer_backward[l] = mean(bwd.traffic);
      t.layer_recompute[l] = mean(again.traffic);
      t.layer_attention_forward[l] = mean(fwd.attention);
      KernelTraffic attention_back = bwd.attention;
      attention_back.add(again.attention);  // a recompute's flash forwards run in backward
      t.layer_attention_backward[l] = mean(attention_back);
      if (m.moe.is_moe_layer(l) && !moe_rows_exact(m) && !routing.measured()) t.exact = false;
      const bool apart = plan.parallel.expert_parallel * plan.parallel.expert_tensor_parallel > 1;
      if (m.moe.is_moe_layer(l) && apart && routing.expert_rows.empty() &&
          !(m.moe.pad_to_capacity && m.moe.capacity_factor > 0))
        t.exact = false;  // the rows a rank's experts receive follow the routing
    }
  }
  // the embedding or the head: one microbatch's forward and backward, every microbatch's
  auto end = [&](void (*forward)(KernelTally&, const RankShape&),
                 void (*backward)(KernelTally&, const RankShape&), KernelTraffic& f_out,
                 KernelTraffic& b_out) {
    KernelTally f(e), b(e);
    forward(f, r);
    backward(b, r);
    f_out = f.traffic, b_out = b.traffic;
    total.traffic.add(f.traffic, (double)runs);
    total.traffic.add(b.traffic, (double)runs);
  };
  if (embedding)
    end(embedding_forward, embedding_backward, t.embedding_forward, t.embedding_backward);
  if (head) end(head_forward, head_backward, t.head_forward, t.head_backward);
  KernelTally hand_over(e);  // Transformer::hand_over: one device copy a message
  for (int64_t i = 0; i < handed_over; ++i)
    hand_over.memcpy_device((double)plan.pipeline.message_bytes);
  total.traffic.add(hand_over.traffic);
  KernelTally other(e);
  optimizer_step_traffic(other, plan, rank);
  moe_step_traffic(other, plan, rank);
  t.step_other = other.traffic;
  total.traffic.add(other.traffic);
  total.routing.add(other.routing);
  t.step_total = total.traffic;
  t.step_attention = total.attention;
  t.step_routing = total.routing;
  return t;
}

}  // namespace paralab
