// plan/fp8.cpp: FP8 training's workspace and amax reductions (plan/fp8.h).
#include "plan/fp8.h"

#include <algorithm>
#include <string>
#include <utility>

#include "kernels/fp8.h"  // fp8_scale_count: the factors of a (rows, cols) copy in its blocks

namespace paralab {

std::vector<ActivationTensor> fp8_workspace_tensors(const ModelConfig& m, const LocalSizes& l,
                                                    int layers, int act_bytes) {
  const Fp8Config& c = m.fp8;
  if (!c.enabled) return {};
  using kernels::Fp8Blocks;
  const bool blockwise = c.recipe == Fp8Recipe::Blockwise;
  // DeepSeek-V3's blocks: 1 x 128 tiles of activations and gradients, 128 x 128 of weights
  const Fp8Blocks act = blockwise ? Fp8Blocks::Tiles : Fp8Blocks::Tensor;
  const Fp8Blocks wgt = blockwise ? Fp8Blocks::Blocks : Fp8Blocks::Tensor;
  auto count = [](Fp8Blocks b, int64_t rows, int64_t cols) {
    return (int64_t)kernels::fp8_scale_count(b, (int)rows, (int)cols);
  };
  const int64_t N = l.N, h = m.hidden_size;
  const int64_t linears[4][2] = {{h, l.qkv}, {l.heads * l.head_dim, h}, {h, l.fc1}, {l.ffn, h}};
  int64_t a = 0, b = 0, fa = 0, fb = 0;
  for (const auto& io : linears) {
    const int64_t in = io[0], out = io[1];
    a = std::max({a, N * in, N * out});            // fprop X, dgrad dY, wgrad dY^T
    b = std::max({b, out * in, N * in});           // fprop W, dgrad W^T, wgrad X^T
    fa = std::max({fa, count(act, N, in), count(act, N, out), count(act, out, N)});
    fb = std::max({fb, count(wgt, out, in), count(wgt, in, out), count(act, in, N)});
  }
  std::vector<ActivationTensor> t = {{"fp8.a", a, 1, false},
                                     {"fp8.b", b, 1, false},
                                     {"fp8.a_factors", fa, 4, false},
                                     {"fp8.b_factors", fb, 4, false}};
  if (c.recipe == Fp8Recipe::Tensorwise) t.push_back({"fp8.amax", 2, 4, false});
  if (c.param_gather) {
    int64_t w = 0;
    for (const auto& io : linears) w = std::max(w, io[0] * io[1]);
    t.push_back({"fp8.weight", w, act_bytes, false});
  }
  if (c.recipe == Fp8Recipe::Delayed)
    t.push_back({"fp8.history", ((int64_t)c.amax_history_len + 1) * 3 * 4 * layers, 4, false});
  return t;
}

void fp8_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m, int tp, int dp,
              const std::vector<int>& layers, const std::vector<bool>& recomputed,
              int64_t microbatches, int64_t fp8_gathers) {
  const Fp8Config& c = m.fp8;
  if (!c.enabled || layers.empty()) return;
  const int cp = m.context_parallel.size;
  if (c.recipe == Fp8Recipe::Delayed) {
    const int64_t bytes = 4 * 3 * 4 * (int64_t)layers.size();  // 3 amaxes per linear
    if (tp > 1) add_comm(comm, CommGroup::TP, CommOp::ALL_REDUCE, tp, 2, bytes);
    if (dp * cp > 1)
      add_comm(comm, cp > 1 ? CommGroup::DP_CP : CommGroup::DP, CommOp::ALL_REDUCE, dp * cp, 2,
               bytes);
  } else if (c.recipe == Fp8Recipe::Tensorwise) {
    // per microbatch: a linear's 6 casts (2 of W), 2 more (1 of W) per forward run again;
    // with --fp8-param-gather W's casts use the gathered scale, reduced once per gather
    const int per_linear = c.param_gather ? 4 : 6, again = c.param_gather ? 1 : 2;
    int64_t casts = 0;
    for (int l : layers)
      casts += per_linear * 4 + (recomputed[l] ? again * 4 : 0) +
               (m.recompute.recompute_mlp() ? again : 0);
    casts *= microbatches;
    auto reduce = [&](CommGroup g, int n) {
      if (n <= 1) return;
      add_comm(comm, g, CommOp::ALL_REDUCE, n, casts, 4 * casts);
      if (fp8_gathers > 0) add_comm(comm, g, CommOp::ALL_REDUCE, n, fp8_gathers, 16 * fp8_gathers);
    };
    reduce(CommGroup::TP, tp);
    reduce(CommGroup::CP, cp);
    if (fp8_gathers > 0 && dp * cp > 1)  // the shards' amaxes over the ZeRO group
      add_comm(comm, cp > 1 ? CommGroup::DP_CP : CommGroup::DP, CommOp::ALL_REDUCE, dp * cp,
               fp8_gathers, 16 * fp8_gathers);
  }
}

std::vector<int64_t> fp8_gather_messages(const std::vector<ParamSpec>& table,
                                         const std::vector<int64_t>& units, int dp, int es) {
  const int U = (int)units.size() - 1;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> weights(U);  // [begin, end) in the unit
  int64_t offset = 0;
  int u = 0;
  for (const ParamSpec& p : table) {
    while (u + 1 < U && offset >= units[u + 1]) ++u;
    const std::string& n = p.name;
    auto ends = [&](const char* s) {
      const std::string t = s;
      return n.size() > t.size() && n.compare(n.size() - t.size(), t.size(), t) == 0;
    };
    if (!p.expert && (ends(".attn.qkv.weight") || ends(".attn.proj.weight") ||
                      ends(".mlp.fc1.weight") || ends(".mlp.fc2.weight")))
      weights[u].push_back({offset - units[u], offset - units[u] + p.numel()});
    offset += p.numel();
  }
  std::vector<int64_t> out(U, 0);
  for (int v = 0; v < U; ++v) {
    if (weights[v].empty()) continue;
    const int64_t slice = zero_shard_numel(units[v + 1] - units[v], dp);  // ZeRO-3: unit = bucket
    for (int r = 0; r < dp; ++r) {
      const int64_t lo = r * slice, hi = lo + slice;
      int64_t f = 0;  // FP8 elements of slice r
      for (const auto& [b, e] : weights[v]) f += std::max<int64_t>(0, std::min(e, hi) - std::max(b, lo));
      out[v] = std::max(out[v], slice * es - (es - 1) * f);
    }
  }
  return out;
}

int64_t fp8_gather_comm_buffers(const std::vector<int64_t>& messages, int dp) {
  if (messages.empty()) return 0;
  int64_t largest = 0;
  for (int64_t x : messages) largest = std::max(largest, x);
  return 4 * 12 * (int64_t)messages.size() + largest + (dp > 1 ? dp * largest : 0);
}

}  // namespace paralab
