// kernels/cpu/moe_dispatch.cpp: the MoE dispatch of kernels/ops/moe_dispatch.h, CPU twins: the
// counting sort in its three passes, as plain loops (the CUDA twins run the same passes with a
// thread per expert or per pair: kernels/cuda/moe_dispatch.cu).
//   histogram   counts[g, e] = #{p of group g : experts[p] = e}
//   scan        rows[e] = kept or padded rows, offset[e + 1] = offset[e] + rows[e]
//   scatter     walk the pairs in order; pair p is the place[e]-th pair of its expert e; kept
//               when its rank (the place, or its rank by gate) is below C, taking the next free
//               row of e; the rows of e left over are padding
//   gate rank   each expert's pairs listed in order, each pair's rank = how many of its list
//               beat it (O(n_e^2) per expert, n_e <= N: each token picks an expert once)
//   local maps  the allgather dispatcher's: each gathered pair's row, if a local expert's,
//               placed by its expert's range (a binary search of the ranges' starts)
//   bias update b_e += rate sign(mean - c_e)
//
// defines the CPU twins of kernels/ops/moe_dispatch.h: moe_expert_counts, moe_dispatch_offsets,
//          moe_gate_rank, moe_dispatch_scatter, moe_local_maps, moe_expert_bias_update
#include <algorithm>
#include <vector>

#include "kernels/math.h"
#include "kernels/ops/moe_dispatch.h"

namespace kernels {

template <> void moe_expert_counts<Device::CPU>(int* counts, const int* experts, int N, int k,
                                                int E, int group) {
  const int groups = group > 0 ? N / group : 0;
  for (int i = 0; i < groups * E; i++) counts[i] = 0;
  for (int p = 0; p < N * k; p++) counts[(p / k / group) * E + experts[p]]++;
}

template <> void moe_dispatch_offsets<Device::CPU>(int* rows, int* offset, int* routed_sum,
                                                   int* kept_sum, const int* counts, int E,
                                                   int capacity, int padded_rows,
                                                   bool accumulate) {
  offset[0] = 0;
  for (int e = 0; e < E; e++) {
    rows[e] = moe_expert_rows(counts[e], capacity, padded_rows);
    offset[e + 1] = offset[e] + rows[e];
    if (!routed_sum) continue;
    const int kept = moe_kept_pairs(counts[e], capacity);
    routed_sum[e] = (accumulate ? routed_sum[e] : 0) + counts[e];
    kept_sum[e] = (accumulate ? kept_sum[e] : 0) + kept;
  }
}

template <> void moe_gate_rank<Device::CPU>(int* rank, const int* experts, const float* gates,
                                            int N, int k, int E) {
  const int pairs = N * k;
  std::vector<std::vector<int>> mine(E);  // each expert's pairs, in order
  for (int p = 0; p < pairs; p++) mine[experts[p]].push_back(p);
  for (const std::vector<int>& list : mine)
    for (int p : list) {
      int beaten_by = 0;
      for (int q : list) beaten_by += moe_pair_beats(gates[q], q, gates[p], p);
      rank[p] = beaten_by;
    }
}

template <> void moe_dispatch_scatter<Device::CPU>(int* row_pair, int* slots, const int* experts,
                                                   const int* rank, const int* offset, int N,
                                                   int k, int E, int M, int capacity) {
  std::vector<int> place(E, 0), taken(E, 0);  // per expert: pairs seen, pairs kept
  for (int p = 0; p < N * k; p++) {
    const int e = experts[p];
    const int r = rank ? rank[p] : place[e];
    place[e]++;
    if (capacity >= 0 && r >= capacity) {
      slots[p] = -1;  // dropped
      continue;
    }
    const int row = offset[e] + taken[e]++;
    row_pair[row] = p;
    slots[p] = row;
  }
  for (int e = 0; e < E; e++)  // the rows past an expert's kept pairs: padding
    for (int row = offset[e] + taken[e]; row < offset[e + 1]; row++) row_pair[row] = -1;
  (void)M;
}

template <> void moe_local_maps<Device::CPU>(int* source_pair, int* local_slots,
                                             const int* slots, size_t stride, int P, int pairs,
                                             int L, const int* first_row,
                                             const int* local_base, int R) {
  std::fill(source_pair, source_pair + R, -1);
  std::fill(local_slots, local_slots + (size_t)P * pairs, -1);
  for (int j = 0; j < P; ++j) {
    const int* fr = first_row + (size_t)j * (L + 1);
    for (int p = 0; p < pairs; ++p) {
      const int s = slots[j * stride + p];
      if (s < fr[0] || s >= fr[L]) continue;  // dropped, or another rank's expert
      const int e = (int)(std::upper_bound(fr, fr + L + 1, s) - fr) - 1;  // its range
      const int o = local_base[(size_t)j * L + e] + s - fr[e];
      source_pair[o] = j * pairs + p;
      local_slots[(size_t)j * pairs + p] = o;
    }
  }
}

template <> void moe_expert_bias_update<Device::CPU>(float* bias, const int* counts, int E,
                                                     float rate) {
  double sum = 0.0;  // integers: exact in double
  for (int e = 0; e < E; e++) sum += counts[e];
  const double mean = sum / E;
  for (int e = 0; e < E; e++) bias[e] += rate * moe_bias_step(mean, counts[e]);
}

}  // namespace kernels
