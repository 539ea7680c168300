// plan/kernel_traffic_parallel.cpp: the non-GEMM kernels of the attention core and of the
// optimizer step (kernel_traffic.h), as parallel/context_parallel.cpp, model/optimizer.cpp and
// parallel/data_parallel.cpp launch them.
//
// The core, per layer and microbatch, rows = b a_l S (S = s/cp), q_n = rows d, kv_n = b g_l S d:
//   one rank    forward one pass: flash 1 launch, naive softmax [+ attention dropout];
//               backward memsets of dq (fp32 for flash), dk, dv, the pass's backward (flash
//               2 launches; naive [dropout backward] + softmax backward), bf16 flash the dq
//               narrowing (convert q_n)
//   p2p ring    forward each pass as above (naive with its lse), the first pass's lse copied
//               (naive) and its output widened (bf16), every later pass merged
//               (attention_merge over its query view), bf16 the output narrowed, naive every
//               pass's P (and P') rescaled; backward naive's delta, the memsets (and at step 1
//               the travelling dK/dV accumulators'), each pass's backward, the own
//               accumulators added back (2 accumulate kv_n). On MPI each flash pass runs
//               per (batch, group): b g calls.
//   all_gather  K and V put in position order (one copy per rank, batch, group and chunk:
//               cp b g_l chunks memcpy_device each), the pass; backward the same again, the
//               gathered dK, dV zeroed (cp kv_n each), and their gradients put back in rank
//               order before the reduce-scatter
//   a2a         q, k, v to head-split and O back: per tensor a pack (cp b copies) and a
//               reorder (cp b H/cp chunks copies) each way, the head-split q, k, v kept (3
//               copies) unless recomputed; backward dO in, dq, dk, dv out, their memsets and
//               flash's dq narrowed from fp32
// The step: zero_grads (a memset of the grads buffer), ZeRO-2/3 add each bucket's reduced
// slice into the shard (accumulate slice) every microbatch (deferred buckets once), ZeRO-3 at
// dp 1 copies each gathered unit (memcpy_device), the gradient norm's sum of squares (one per
// owned run outside the ranges counted on another rank), and one adamw_update for the step:
// every owned device segment cut at the tensors' edges (weight decay is per tensor), dense and
// experts', in one multi-tensor launch.
#include <algorithm>
#include <string>
#include <limits>
#include "model/param_table.h"  // stage_param_table, stage_expert_table, pipeline_stage_slice
#include "plan/kernel_traffic.h"

namespace paralab {

namespace {

// context_parallel.cpp's reorder_chunks: one copy per (rank j, batch, head, chunk).
void reorder_chunks(KernelTally& k, const CoreShape& s, int H, const CpSpec& cp) {
  for (int j = 0; j < cp.size; ++j) {
    const kernels::TokenPositions pos = cp_positions(s.length, cp.size, j, cp.layout);
    const int chunk = std::min(pos.chunk, s.S), chunks = s.S / chunk;
    for (int64_t c = 0; c < (int64_t)s.B * H * chunks; ++c)
      k.memcpy_device((double)chunk * s.D * k.e());
  }
}
// pack_heads: one copy per (rank j, batch) of H/cp heads.
void pack_heads(KernelTally& k, const CoreShape& s, int H, int cp) {
  for (int c = 0; c < cp * s.B; ++c) k.memcpy_device((double)(H / cp) * s.S * s.D * k.e());
}
// to_heads and from_heads: a pack and a reorder, in either order.
void heads_exchange(KernelTally& k, const CoreShape& s, int H, const CpSpec& cp) {
  pack_heads(k, s, H, cp.size);
  reorder_chunks(k, s, H / cp.size, cp);
}

double probs_of(const CoreShape& s, const kernels::AttentionBlock& blk) {
  return (double)s.B * s.A * blk.q.rows * blk.k.rows;
}

// One pass forward (attend) and backward.
void pass_forward(KernelTally& k, const CoreShape& s, const CorePass& p, bool by_group,
                  bool lse) {
  if (s.flash) return k.flash_attention_forward(by_group ? s.B * s.G : 1);
  k.attention_softmax_forward(probs_of(s, p.blk), (double)s.B * s.A * p.blk.q.rows, lse);
  if (s.dropout > 0.0f) k.attention_dropout_forward(probs_of(s, p.blk));
}
void pass_backward(KernelTally& k, const CoreShape& s, const CorePass& p, bool by_group,
                   bool delta) {
  if (s.flash) return k.flash_attention_backward(by_group ? s.B * s.G : 1);
  if (s.dropout > 0.0f) k.dropout_backward(probs_of(s, p.blk));  // in place on dP'
  k.attention_softmax_backward(probs_of(s, p.blk), (double)s.B * s.A * p.blk.q.rows, delta);
}

// Whether the core accumulates dq in an fp32 buffer of its own (core_workspace_buffers).
bool dq_apart(const CoreShape& s, const CpSpec& cp, int e) {
  return s.flash && (e != 4 || (cp.size > 1 && cp.type == CpCommType::A2A));
}

}  // namespace

void core_attention_traffic(KernelTally& k, const CoreShape& s, const CpSpec& cp, bool by_group,
                            bool recompute, bool keep_heads) {
  const std::vector<CorePass> passes = core_passes(s, cp);
  const int c = cp.size, e = k.e();
  const double BA = (double)s.B * s.A, rows = BA * s.S, N = (double)s.B * s.S;
  const bool probs_only = recompute && !s.flash && passes.size() == 1;
  if (c > 1 && cp.type == CpCommType::ALL_GATHER) {
    reorder_chunks(k, s, s.G, cp);  // K in position order
    reorder_chunks(k, s, s.G, cp);  // V
    pass_forward(k, s, passes[0], false, false);
    return;
  }
  if (c > 1 && cp.type == CpCommType::A2A) {
    const CoreShape hs = heads_shape(s, c);
    heads_exchange(k, s, s.A, cp);  // to_heads q
    heads_exchange(k, s, s.G, cp);  //          k
    heads_exchange(k, s, s.G, cp);  //          v
    pass_forward(k, hs, passes[0], false, false);
    if (!recompute) heads_exchange(k, s, s.A, cp);  // from_heads O
    if (keep_heads) {  // the head-split q, k, v into the layer's buffers
      k.memcpy_device(N * s.A * s.D * e);
      k.memcpy_device(N * s.G * s.D * e);
      k.memcpy_device(N * s.G * s.D * e);
    }
    return;
  }
  // p2p: the ring (cp 1: one causal pass)
  const bool merging = passes.size() > 1;
  for (size_t n = 0; n < passes.size(); ++n) {
    const CorePass& p = passes[n];
    const bool first = n == 0, direct = !merging || (first && e == 4);
    pass_forward(k, s, p, by_group, merging);
    if (merging && first && !s.flash && !probs_only) k.memcpy_device(rows * 4);  // the lse
    if (merging && first && !direct && !probs_only) k.widen(rows * s.D);        // o_acc
    if (!first && !probs_only) k.attention_merge(BA * p.blk.q.rows, s.D);
  }
  if (e != 4 && merging) k.widen(rows * s.D);  // narrow o_acc into o
  for (size_t n = 0; merging && !s.flash && n < passes.size(); ++n) {
    const double P = probs_of(s, passes[n].blk), qn = BA * passes[n].blk.q.rows;
    k.attention_probs_rescale(P, qn);
    if (s.dropout > 0.0f) k.attention_probs_rescale(P, qn);
  }
}

void core_attention_backward_traffic(KernelTally& k, const CoreShape& s, const CpSpec& cp,
                                     bool by_group) {
  const std::vector<CorePass> passes = core_passes(s, cp);
  const int c = cp.size, e = k.e();
  const double BA = (double)s.B * s.A, q_n = BA * s.S * s.D;
  const double kv_n = (double)s.B * s.G * s.S * s.D;
  const bool apart = dq_apart(s, cp, e);
  if (c > 1 && cp.type == CpCommType::ALL_GATHER) {
    reorder_chunks(k, s, s.G, cp);  // K, V gathered again, in position order
    reorder_chunks(k, s, s.G, cp);
    k.memset_zero(c * kv_n * e);    // dk_heads, dv_heads: the whole sequence's
    k.memset_zero(c * kv_n * e);
    k.memset_zero(q_n * (s.flash ? 4 : e));
    pass_backward(k, s, passes[0], false, false);
    reorder_chunks(k, s, s.G, cp);  // dK, dV back in rank order
    reorder_chunks(k, s, s.G, cp);
    if (apart) k.widen(q_n);        // narrow dq
    return;
  }
  if (c > 1 && cp.type == CpCommType::A2A) {
    const CoreShape hs = heads_shape(s, c);
    heads_exchange(k, s, s.A, cp);  // to_heads dO
    k.memset_zero(kv_n * e);
    k.memset_zero(kv_n * e);
    k.memset_zero(q_n * (s.flash ? 4 : e));
    pass_backward(k, hs, passes[0], false, false);
    if (s.flash) k.widen(q_n);      // narrow dq into q_heads
    heads_exchange(k, s, s.A, cp);  // from_heads dq
    heads_exchange(k, s, s.G, cp);  //            dk
    heads_exchange(k, s, s.G, cp);  //            dv
    return;
  }
  const bool merged = passes.size() > 1;
  if (!s.flash && merged) k.attention_delta(BA * passes[0].blk.q.rows, s.D);
  k.memset_zero(q_n * (s.flash ? 4 : e));
  k.memset_zero(kv_n * e);
  k.memset_zero(kv_n * e);
  if (c > 1) k.memset_zero(kv_n * e), k.memset_zero(kv_n * e);  // step 1's accumulators
  for (const CorePass& p : passes) pass_backward(k, s, p, by_group, merged && !s.flash);
  if (c > 1) k.accumulate(kv_n), k.accumulate(kv_n);  // the own block's, back from the ring
  if (apart) k.widen(q_n);
}

// ---- the optimizer step -------------------------------------------------------------------
namespace {

// One flat vector's data parallelism (parallel/data_parallel.cpp) on a rank of `n` at `r`:
// tensors the [begin, end) of each tensor, excluded the ranges its norm leaves to others.
void vector_step(KernelTally& k, const DataParallelPlan& d, int zero, int n, int r,
                 int64_t microbatches, const std::vector<std::pair<int64_t, int64_t>>& tensors,
                 const std::vector<std::pair<int64_t, int64_t>>& excluded,
                 const std::vector<int>& deferred_units, double& adam_elements) {
  const BucketLayout& l = d.layout;
  const int e = k.e();
  // CPU offload (parallel/offload.h): a host bucket's update, and at ZeRO-2/3 its gradient's
  // zeroing and sums, are host loops (no kernel); the device's shard holds the other buckets
  std::vector<bool> host(l.buckets.size(), false);
  for (const OffloadCopy& c : d.copies) host[c.bucket] = true;
  const int64_t grads = zero == 0 ? l.total : zero == 1 ? l.padded_total
                                                        : l.shard_numel - d.host_numel;
  k.memset_zero((double)grads * e);  // zero_grads
  if (zero >= 2)  // complete_grad_reduce: the reduced slice into the shard
    for (size_t j = 0; j < l.buckets.size(); ++j) {
      if (host[j]) continue;
      bool deferred = false;
      for (int u : deferred_units) deferred = deferred || l.bucket_of.at(u) == (int)j;
      for (int64_t i = 0; i < (deferred ? 1 : microbatches); ++i)
        k.accumulate((double)l.buckets[j].slice);
    }
  // post_gather on one rank: a copy per gather (with the shard on the host, CPU offload's
  // copy up instead: PCIe, not a kernel)
  if (zero == 3 && n == 1 && !d.params_on_host)
    for (int64_t g = 0; g < d.sim.gathers; ++g)
      k.memcpy_device((double)d.sim.gathered_elements / d.sim.gathers * e);
  // the owned segments (DataParallel's constructor), and where their states start
  std::vector<std::pair<int64_t, int64_t>> owned;
  std::vector<bool> owned_on_host;
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    if (zero == 0) owned.push_back({b.begin, b.end}), owned_on_host.push_back(host[j]);
    const int64_t lo = std::min(b.end, b.begin + r * b.slice);
    const int64_t hi = std::min(b.end, b.begin + (r + 1) * b.slice);
    if (zero > 0 && hi > lo) owned.push_back({lo, hi}), owned_on_host.push_back(host[j]);
  }
  // grad_sum_squares: the counted spans of [0, total) at stage 0, else of each owned segment,
  // summed in one call for the device's spans and one for the host's (CPU offload)
  double elements[2] = {0, 0};
  int spans[2] = {0, 0};
  auto squares = [&](int64_t begin, int64_t count, bool on_host) {
    int64_t pos = begin;
    const int64_t end = begin + count;
    auto span = [&](int64_t n) { elements[on_host] += (double)n, spans[on_host]++; };
    for (const auto& [lo, hi] : excluded) {
      if (hi <= pos || lo >= end) continue;
      if (lo > pos) span(lo - pos);
      pos = std::max(pos, hi);
    }
    if (pos < end) span(end - pos);
  };
  if (zero == 0) squares(0, l.total, false);
  else
    for (size_t i = 0; i < owned.size(); ++i)
      // the norm reads a host bucket's gradient from the host only where it lives there
      // (ZeRO-2/3, sharded gradients); at ZeRO-1 from the device
      squares(owned[i].first, owned[i].second - owned[i].first, owned_on_host[i] && zero >= 2);
  for (int h : {0, 1}) k.sum_squares(elements[h], spans[h]);
  // AdamW: the elements of the device's runs (each intersection of a device segment with a
  // tensor; a host bucket's segment is updated on the host: no kernel), one launch for all of
  // them in optimizer_step_traffic
  for (size_t i = 0; i < owned.size(); ++i) {
    if (owned_on_host[i]) continue;
    const auto [lo, hi] = owned[i];
    for (const auto& [a, b] : tensors)
      if (std::max(lo, a) < std::min(hi, b)) adam_elements += (double)(std::min(hi, b) - std::max(lo, a));
  }
}

std::vector<std::pair<int64_t, int64_t>> ranges_of(const std::vector<ParamSpec>& table) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (const ParamSpec& p : table) {
    out.push_back({at, at + p.numel()});
    at += p.numel();
  }
  return out;
}

}  // namespace

void optimizer_step_traffic(KernelTally& k, const Plan& plan, int rank) {
  const ModelConfig& m = plan.model;
  const ParallelConfig& p = plan.parallel;
  const RankPlan none;
  const RankPlan& me = plan.ranks.empty() ? none : plan.ranks.at(rank);
  const int pp = p.pipeline_parallel;
  const PipelineShape& shape = plan.pipeline.shape;
  const StageSlice slice =
      pp > 1 ? pipeline_stage_slice(m, shape, me.pp_rank, p.stage_split()) : whole_model(m);
  // DualPipe: the mirror's second rank leaves its norm to the first (data_parallel.h)
  const bool mirror_copy = shape.placement() == StagePlacement::MIRRORED &&
                           me.pp_rank > shape.mirror_of(me.pp_rank);
  const std::pair<int64_t, int64_t> everything{0, std::numeric_limits<int64_t>::max()};
  const bool staged = !plan.pipeline.stages.empty();
  const DataParallelPlan& dense =
      staged ? plan.pipeline.stages.at(me.pp_rank).data_parallel : plan.data_parallel;
  const DataParallelPlan& experts = staged ? plan.pipeline.stages.at(me.pp_rank).expert_data_parallel
                                           : plan.expert_data_parallel;
  // the microbatches through each of the rank's chunks (DualPipe's: one direction's m/2)
  int64_t micro = std::max<int64_t>(1, plan.microbatches_per_rank);
  if (staged) {
    micro = 0;
    for (const Action& a : plan.pipeline.schedule.ranks.at(me.pp_rank))
      micro += a.type == ActionType::F && a.chunk == 0;
  }
  // the dense vector over dp x cp (rank cp + cp dp in that group)
  const std::vector<ParamSpec> table = stage_param_table(m, plan.tp, slice, expert_split(p));
  const std::vector<std::pair<int64_t, int64_t>> tensors = ranges_of(table);
  std::vector<std::pair<int64_t, int64_t>> excluded;  // Transformer's exclude_from_norm
  for (size_t i = 0; i < table.size(); ++i) {
    const bool replicated = table[i].split == TpSplit::REPLICATED;
    const bool tied_copy = slice.tied_copy && table[i].name == "embedding.word";
    if ((replicated && me.tp_rank > 0) || tied_copy) excluded.push_back(tensors[i]);
  }
  if (mirror_copy) excluded = {everything};
  double adam_elements = 0;
  vector_step(k, dense, p.zero_stage, plan.dp_cp, me.cp_rank + plan.cp * me.dp_rank, micro,
              tensors, excluded, stage_deferred_units(m, slice), adam_elements);
  // the experts' vector over edp (the expert grid: rank = etp + etp (ep + ep (edp + edp pp)))
  if (!experts.layout.buckets.empty() && experts.layout.total > 0) {
    const int edp = p.expert_data_parallel();
    const int edp_rank = (rank / (p.expert_tensor_parallel * p.expert_parallel)) % edp;
    vector_step(k, experts, p.zero_stage, edp, edp_rank, micro,
                ranges_of(stage_expert_table(m, slice, expert_split(p))),
                mirror_copy ? std::vector<std::pair<int64_t, int64_t>>{everything}
                            : std::vector<std::pair<int64_t, int64_t>>{},
                {}, adam_elements);
  }
  // model/optimizer.cpp: the device's runs in one launch
  k.adamw_update(adam_elements, (int)plan.train.exp_avg_bf16 + (int)plan.train.exp_avg_sq_bf16);
}

}  // namespace paralab
