// plan/fp8.cpp: FP8 training's workspace and amax reductions (plan/fp8.h).
#include "plan/fp8.h"

#include <algorithm>

#include "kernels/fp8.h"  // fp8_scale_count: the factors of a (rows, cols) copy in its blocks

namespace paralab {

std::vector<ActivationTensor> fp8_workspace_tensors(const ModelConfig& m, const LocalSizes& l,
                                                    int layers) {
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
  if (c.recipe == Fp8Recipe::Delayed)
    t.push_back({"fp8.history", ((int64_t)c.amax_history_len + 1) * 3 * 4 * layers, 4, false});
  if (c.log_scaling) t.push_back({"fp8.cast_counts", 2, 8, false});  // --log-fp8-scaling
  return t;
}

void fp8_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m, int tp, int dp,
              const std::vector<int>& layers, const std::vector<bool>& recomputed,
              int64_t microbatches) {
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
    int64_t casts = 0;  // per microbatch
    for (int l : layers)
      casts += 6 * 4 + (recomputed[l] ? 2 * 4 : 0) + (m.recompute.recompute_mlp() ? 2 : 0);
    casts *= microbatches;
    if (tp > 1) add_comm(comm, CommGroup::TP, CommOp::ALL_REDUCE, tp, casts, 4 * casts);
    if (cp > 1) add_comm(comm, CommGroup::CP, CommOp::ALL_REDUCE, cp, casts, 4 * casts);
  }
}

}  // namespace paralab
