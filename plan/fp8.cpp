// plan/fp8.cpp: FP8 training's memory (operands and state) and amax reductions (plan/fp8.h).
#include "plan/fp8.h"

#include <algorithm>
#include <string>
#include <utility>

#include "kernels/fp8.h"  // fp8_scale_count: the factors of a (rows, cols) copy in its blocks
#include "parallel/data_parallel.h"  // fp8_staging_pairs: the gathers in flight at once
#include "parallel/fp8_scaling.h"  // Fp8Scaling::state_bytes

namespace paralab {

Fp8ScratchSize fp8_scratch_size(const Fp8Config& c, int64_t N,
                                const std::vector<std::pair<int64_t, int64_t>>& linears) {
  using kernels::Fp8Blocks;
  const bool blockwise = c.recipe == Fp8Recipe::Blockwise;
  // DeepSeek-V3's blocks: 1 x 128 tiles of activations and gradients, 128 x 128 of weights
  const Fp8Blocks act = blockwise ? Fp8Blocks::Tiles : Fp8Blocks::Tensor;
  const Fp8Blocks wgt = blockwise ? Fp8Blocks::Blocks : Fp8Blocks::Tensor;
  auto count = [](Fp8Blocks b, int64_t rows, int64_t cols) {
    return (int64_t)kernels::fp8_scale_count(b, (int)rows, (int)cols);
  };
  Fp8ScratchSize s;
  for (const auto& [in, out] : linears) {
    s.a = std::max({s.a, N * in, N * out});            // fprop X, dgrad dY, wgrad dY^T
    s.b = std::max({s.b, out * in, N * in});           // fprop W, dgrad W^T, wgrad X^T
    s.a_factors =
        std::max({s.a_factors, count(act, N, in), count(act, N, out), count(act, out, N)});
    s.b_factors =
        std::max({s.b_factors, count(wgt, out, in), count(wgt, in, out), count(act, in, N)});
  }
  return s;
}

namespace {

// The dense linears' tensors of plan/fp8.h, by category; empty without --fp8-format.
struct Fp8Tensors {
  std::vector<ActivationTensor> operands, state;
};
Fp8Tensors fp8_tensors(const ModelConfig& m, const LocalSizes& l, int layers, int act_bytes,
                       int zero_stage) {
  const Fp8Config& c = m.fp8;
  if (!c.enabled) return {};
  const int64_t h = m.hidden_size;
  std::vector<std::pair<int64_t, int64_t>> linears = {{h, l.qkv}, {l.heads * l.head_dim, h}};
  bool dense_mlp = false;  // the MLP's fc1 and fc2, where a layer has a dense MLP
  for (int i = 0; i < m.num_layers; ++i) dense_mlp = dense_mlp || !m.moe.is_moe_layer(i);
  if (dense_mlp) linears.insert(linears.end(), {{h, l.fc1}, {l.ffn, h}});
  const Fp8ScratchSize s = fp8_scratch_size(c, l.N, linears);
  Fp8Tensors t;
  t.operands = {{"fp8.a", s.a, 1, false},
                {"fp8.b", s.b, 1, false},
                {"fp8.a_factors", s.a_factors, 4, false},
                {"fp8.b_factors", s.b_factors, 4, false}};
  if (c.param_gather && zero_stage == 3) {  // ZeRO-1/2 decode into the parameters
    int64_t w = 0;
    for (const auto& [in, out] : linears) w = std::max(w, in * out);
    t.operands.push_back({"fp8.weight", w, act_bytes, false});
  }
  if (c.recipe == Fp8Recipe::Tensorwise) t.state.push_back({"fp8.amax", 2, 4, false});
  if (c.recipe == Fp8Recipe::Delayed)
    t.state.push_back({"fp8.history", ((int64_t)c.amax_history_len + 1) * 3 * 4 * layers, 4,
                       false});
  if (c.log_scaling) t.state.push_back({"fp8.cast_counts", 2, 8, false});  // --log-fp8-scaling
  return t;
}

}  // namespace

Fp8Memory fp8_memory(const ModelConfig& m, const LocalSizes& l, int layers, int act_bytes,
                     int local_experts, int moe_layers, int64_t gather_state,
                     int zero_stage) {
  Fp8Memory f;
  const Fp8Tensors t = fp8_tensors(m, l, layers, act_bytes, zero_stage);
  for (const ActivationTensor& x : t.operands) f.operands += x.bytes();
  for (const ActivationTensor& x : t.state) f.state += x.bytes();
  f.state += fp8_expert_state_bytes(m, local_experts, moe_layers);
  f.state += gather_state;
  return f;
}

int64_t fp8_expert_scratch_bytes(const ModelConfig& m, int64_t R, int64_t fc1, int64_t f,
                                 int decoded_es) {
  if (!m.fp8.enabled) return 0;
  const int64_t h = m.hidden_size;
  return fp8_scratch_size(m.fp8, R, {{h, fc1}, {f, h}}).bytes() +
         std::max(fc1 * h, f * h) * decoded_es;
}

int64_t fp8_expert_state_bytes(const ModelConfig& m, int local_experts, int moe_layers) {
  if (!m.fp8.enabled) return 0;
  return (int64_t)Fp8Scaling::state_bytes(m.fp8, 2 * local_experts * moe_layers);
}

void fp8_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m, int tp, int dp,
              const ParallelConfig& p, const std::vector<int>& layers,
              const std::vector<bool>& recomputed, int64_t microbatches) {
  const Fp8Config& c = m.fp8;
  if (!c.enabled || layers.empty()) return;
  const int cp = m.context_parallel.size;
  int moe_layers = 0;
  for (int l : layers) moe_layers += m.moe.is_moe_layer(l);
  if (c.recipe == Fp8Recipe::Delayed) {
    const int64_t bytes = 4 * 3 * 4 * (int64_t)layers.size();  // 3 amaxes per linear
    if (tp > 1) add_comm(comm, CommGroup::TP, CommOp::ALL_REDUCE, tp, 2, bytes);
    if (dp * cp > 1)
      add_comm(comm, cp > 1 ? CommGroup::DP_CP : CommGroup::DP, CommOp::ALL_REDUCE, dp * cp, 2,
               bytes);
    // the experts': 3 amaxes per linear, 2 linears per local expert, over etp then edp
    const int64_t experts = 4 * 3 * 2 * (int64_t)(m.moe.num_experts / p.expert_parallel) *
                            moe_layers;
    const int etp = p.expert_tensor_parallel, edp = p.expert_data_parallel();
    if (moe_layers > 0 && etp > 1)
      add_comm(comm, CommGroup::ETP, CommOp::ALL_REDUCE, etp, 2, experts);
    if (moe_layers > 0 && edp > 1)
      add_comm(comm, CommGroup::EDP, CommOp::ALL_REDUCE, edp, 2, experts);
  } else if (c.recipe == Fp8Recipe::Tensorwise) {
    // per microbatch: a linear's 6 casts (2 of W), 2 more (1 of W) per forward run again;
    // with --fp8-param-gather W's casts use the gathered scale, reduced once per gather. An
    // MoE layer's dense linears are qkv and proj.
    const int per_linear = c.param_gather ? 4 : 6, again = c.param_gather ? 1 : 2;
    int64_t casts = 0;
    for (int l : layers) {
      const bool moe = m.moe.is_moe_layer(l);
      const int linears = moe ? 2 : 4;
      casts += per_linear * linears + (recomputed[l] ? again * linears : 0) +
               (m.recompute.recompute_mlp() && !moe ? again : 0);
    }
    casts *= microbatches;
    if (tp > 1) add_comm(comm, CommGroup::TP, CommOp::ALL_REDUCE, tp, casts, 4 * casts);
    if (cp > 1) add_comm(comm, CommGroup::CP, CommOp::ALL_REDUCE, cp, casts, 4 * casts);
  }
}

void fp8_gather_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m,
                     const DataParallelPlan& d, CommGroup zero_group, int zero_ranks, int tp) {
  if (m.fp8.recipe == Fp8Recipe::Delayed || d.fp8_gathers == 0) return;
  const int cp = m.context_parallel.size;
  const int64_t calls = d.fp8_piece_calls, bytes = d.fp8_piece_bytes;  // the dense weights'
  if (tp > 1 && calls > 0) add_comm(comm, CommGroup::TP, CommOp::ALL_REDUCE, tp, calls, bytes);
  if (cp > 1 && calls > 0) add_comm(comm, CommGroup::CP, CommOp::ALL_REDUCE, cp, calls, bytes);
  if (zero_ranks > 1)  // the shards' amaxes over the ZeRO group
    add_comm(comm, zero_group, CommOp::ALL_REDUCE, zero_ranks, d.fp8_gathers, d.fp8_amax_bytes);
}

std::vector<Fp8GatheredWeight> fp8_gathered_weights(const std::vector<ParamSpec>& table) {
  std::vector<Fp8GatheredWeight> out;
  int64_t offset = 0;
  for (const ParamSpec& p : table) {
    const std::string& n = p.name;
    auto ends = [&](const char* s) {
      const std::string t = s;
      return n.size() > t.size() && n.compare(n.size() - t.size(), t.size(), t) == 0;
    };
    if (!p.expert && (ends(".attn.qkv.weight") || ends(".attn.proj.weight") ||
                      ends(".mlp.fc1.weight") || ends(".mlp.fc2.weight")))
      out.push_back({offset, offset + p.numel(), false, p.shape.back()});
    if (p.expert && (ends(".mlp.experts.fc1.weight") || ends(".mlp.experts.fc2.weight"))) {
      const int64_t each = p.numel() / p.shape[0];  // the local experts, stacked
      for (int64_t e = 0; e < p.shape[0]; ++e)
        out.push_back({offset + e * each, offset + (e + 1) * each, true, p.shape.back()});
    }
    offset += p.numel();
  }
  return out;
}

std::vector<int64_t> fp8_gather_messages(const std::vector<ParamSpec>& table,
                                         const BucketLayout& l, int es) {
  const std::vector<Fp8GatheredWeight> weights = fp8_gathered_weights(table);
  std::vector<int64_t> out(l.buckets.size(), 0);
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    bool any = false;
    for (const Fp8GatheredWeight& w : weights) any = any || (w.begin < b.end && w.end > b.begin);
    if (!any) continue;
    const int dp = b.slice > 0 ? (int)(b.padded / b.slice) : 1;
    for (int r = 0; r < dp; ++r) {  // slice r: flat [begin + r slice, begin + (r + 1) slice)
      const int64_t lo = b.begin + r * b.slice, hi = lo + b.slice;
      int64_t f = 0;  // FP8 elements of slice r
      for (const Fp8GatheredWeight& w : weights)
        f += std::max<int64_t>(0, std::min(w.end, hi) - std::max(w.begin, lo));
      out[j] = std::max(out[j], b.slice * es - (es - 1) * f);
    }
  }
  return out;
}

int64_t fp8_gather_comm_buffers(const std::vector<int64_t>& messages, int dp, int zero_stage,
                                const PlanOptions& o) {
  int64_t largest = 0;
  int buckets = 0;
  for (int64_t x : messages) largest = std::max(largest, x), buckets += x > 0;
  const int pairs = fp8_staging_pairs(zero_stage, o.overlap_param_gather,
                                      o.zero3_prefetch_layers, buckets);
  return messages.empty() ? 0 : pairs * (largest + (dp > 1 ? dp * largest : 0));
}

void plan_fp8_param_gather(DataParallelPlan& d, const ModelConfig& m,
                           const std::vector<ParamSpec>& table,
                           const std::vector<int64_t>& unit_begin, int zero_stage, int es) {
  d.fp8_message.clear();
  d.fp8_gathers = d.fp8_amax_bytes = d.fp8_piece_calls = d.fp8_piece_bytes = 0;
  d.fp8_state_bytes = 0;
  if (zero_stage < 1 || !m.fp8.enabled || !m.fp8.param_gather) return;
  d.fp8_message = fp8_gather_messages(table, d.layout, es);
  // per unit its FP8 weights' scale values (one each, blockwise one per 128 x 128 block), and
  // of them the dense weights' (tensorwise reduces those again over the pieces)
  const int units = (int)unit_begin.size() - 1;
  const kernels::Fp8Blocks blocks = Fp8Scaling::blocks(m.fp8, Fp8Role::Weight);
  std::vector<int64_t> values(units, 0), dense(units, 0);
  for (const Fp8GatheredWeight& w : fp8_gathered_weights(table)) {
    const int u = (int)(std::upper_bound(unit_begin.begin(), unit_begin.end(), w.begin) -
                        unit_begin.begin()) - 1;
    const int64_t v = (int64_t)kernels::fp8_scale_count(blocks, (int)((w.end - w.begin) / w.cols),
                                                        (int)w.cols);
    values[u] += v;
    if (!w.expert) dense[u] += v;
    d.fp8_state_bytes += 3 * 4 * v;  // its scales, factors and amaxes
  }
  for (int u = 0; u < units; ++u) {  // ZeRO-1/2: once, after the step; ZeRO-3: each gather
    const int64_t gathers = zero_stage < 3 ? 1 : d.sim.gathers_of.at(u);
    if (values[u] == 0) continue;
    d.fp8_gathers += gathers;
    d.fp8_amax_bytes += gathers * 4 * values[u];
    if (dense[u] == 0 || m.fp8.recipe != Fp8Recipe::Tensorwise) continue;
    d.fp8_piece_calls += gathers;
    d.fp8_piece_bytes += gathers * 4 * dense[u];
  }
}

}  // namespace paralab
