// kernels/ops/moe_dispatch.h: the dispatch of an MoE layer built on the device: which permuted
// row each (token, expert) pair takes, as a counting sort (model/moe.h, "dispatch").
// Twins: kernels/cpu/moe_dispatch.cpp (the loops), kernels/cuda/moe_dispatch.cu (the kernels,
// whose header says what each thread holds and what each pass reads).
//
// N tokens, k experts each, E experts; pair p = t k + s is token t's s-th expert, experts[p]
// (int32) its expert, P = N k pairs. Capacity C (-1: dropless): an expert keeps at most C of
// its pairs. The dispatch is the pairs sorted stably by expert, over capacity dropped, each
// expert's rows padded (with --moe-pad-expert-input-to-capacity) to min(C, N):
//   1. moe_expert_counts     histogram   counts[e] = pairs routed to e
//   2. moe_dispatch_offsets  scan        rows[e] = kept (min(counts[e], C)) or padded rows;
//                                        offset[e] = rows of the experts before e (E + 1)
//   3. moe_dispatch_scatter  scatter     each expert's kept pairs, in pair (= token) order,
//                                        take rows offset[e], offset[e] + 1, ...; then its
//                                        padding rows: row_pair (M) and slots (P)
// Stable: within an expert the kept rows are in pair order, so the maps are those of a stable
// sort by expert on the host, bit for bit, and the CPU twin's. Which pairs an expert over
// capacity keeps: drop policy "position" keeps its C earliest pairs; "probs" keeps its C
// largest gates, equal gates to the earlier pair, which needs each pair's rank among its
// expert's pairs by gate first (moe_gate_rank), handed to the scatter.
// Every count is an int32 and every pass is deterministic: the maps are integers and the two
// twins must agree exactly (tests/gpu/op_check_moe.cpp, bound 0).
//
// Beside them, once per step, the expert bias's update from the same counts (the pairs each
// expert ran, summed over the step), so that the bias never visits the host either.
//
// defines: moe_expert_counts, moe_dispatch_offsets, moe_gate_rank, moe_dispatch_scatter,
//          kLocalMapExperts, moe_local_maps_launches, moe_local_maps, moe_expert_bias_update
#pragma once
#include "kernels/dispatch.h"

namespace kernels {

// Pass 1, the histogram: counts(N / group, E) "=", counts[g, e] the pairs of tokens
// [g group, (g + 1) group) routed to expert e. The dispatch counts all N tokens (group N); the
// aux loss counts each group of its balancing (seq_aux_loss: each sequence, group S).
template <Device Dev>
void moe_expert_counts(int* counts, const int* experts, int N, int k, int E, int group);
template <class = void>
void moe_expert_counts(Device d, int* counts, const int* experts, int N, int k, int E,
                       int group) {
  count_kernel(4.0 * N * k + 4.0 * (N / (group > 0 ? group : 1)) * E);
  ON_DEVICE(moe_expert_counts)(counts, experts, N, k, E, group);
}

// Pass 2, the scan: per expert its kept pairs kept_e = moe_kept_pairs(counts[e], capacity) and
// its rows rows[e] = moe_expert_rows(counts[e], capacity, padded_rows) (kernels/math.h;
// padded_rows >= 0: every expert runs that many), "=" (E); offset (E + 1) "=" the exclusive
// scan of rows, offset[E] = M the permuted rows. The router's statistics, when routed_sum and
// kept_sum are given (E each): counts and kept_e added to them (accumulate) or written.
template <Device Dev>
void moe_dispatch_offsets(int* rows, int* offset, int* routed_sum, int* kept_sum,
                          const int* counts, int E, int capacity, int padded_rows,
                          bool accumulate);
template <class = void>
void moe_dispatch_offsets(Device d, int* rows, int* offset, int* routed_sum, int* kept_sum,
                          const int* counts, int E, int capacity, int padded_rows,
                          bool accumulate) {
  const double stats = routed_sum ? (accumulate ? 16.0 : 8.0) * E : 0.0;
  count_kernel(4.0 * E + 4.0 * E + 4.0 * (E + 1) + stats);
  ON_DEVICE(moe_dispatch_offsets)(rows, offset, routed_sum, kept_sum, counts, E, capacity,
                                  padded_rows, accumulate);
}

// The probs drop policy's ranks: rank(N k) "=", rank[p] the pairs of p's expert that beat it,
// q beating p when gates[q] > gates[p], or equal gates and q < p (kernels/math.h
// moe_pair_beats). An expert keeps the pairs of rank < C: its C largest gates, ties to the
// earlier token (Megatron's drop policy "probs": a top-C of each expert's gates).
template <Device Dev>
void moe_gate_rank(int* rank, const int* experts, const float* gates, int N, int k, int E);
template <class = void>
void moe_gate_rank(Device d, int* rank, const int* experts, const float* gates, int N, int k,
                   int E) {
  count_kernel(12.0 * N * k);
  ON_DEVICE(moe_gate_rank)(rank, experts, gates, N, k, E);
}

// Pass 3, the stable scatter: each expert's pairs in pair order, pair p of rank r_p (rank[p],
// or with rank null its place among its expert's pairs: the position policy) kept when
// capacity < 0 or r_p < capacity; the kept ones take rows offset[e], offset[e] + 1, ... in pair
// order, the expert's remaining rows up to offset[e + 1] are padding. row_pair(M) "=" each
// row's pair (-1: padding), slots(N k) "=" each pair's row (-1: dropped). M = offset[E].
template <Device Dev>
void moe_dispatch_scatter(int* row_pair, int* slots, const int* experts, const int* rank,
                          const int* offset, int N, int k, int E, int M, int capacity);
template <class = void>
void moe_dispatch_scatter(Device d, int* row_pair, int* slots, const int* experts,
                          const int* rank, const int* offset, int N, int k, int E, int M,
                          int capacity) {
  count_kernel(4.0 * N * k * (rank ? 3 : 2) + 4.0 * (E + 1) + 4.0 * M);
  ON_DEVICE(moe_dispatch_scatter)(row_pair, slots, experts, rank, offset, N, k, E, M, capacity);
}

// The allgather dispatcher's local maps (parallel/expert_parallel_allgather.cpp), from the
// gathered routing of the P = etp ep sources: source j's pair slots (N k = pairs of them) at
// slots + j stride. Per source j and local expert e (L of them) the host passes where e's rows
// start in j's permutation, first_row[j (L + 1) + e] (its last entry: where the local experts'
// rows end), and where they start in this rank's R local rows, local_base[j L + e] (both host
// arrays: they ride in the kernels' parameters). Pair p of source j with row s in local expert
// e's range takes local row o = local_base[j L + e] + s - first_row[j (L + 1) + e]:
// source_pair(R) "=", source_pair[o] = j pairs + p; local_slots(P pairs) "=",
// local_slots[j pairs + p] = o; every other entry -1 (padding rows, and pairs another rank's
// experts take). Launches: the two fills, then one per source and kLocalMapExperts experts.
constexpr int kLocalMapExperts = 256;
inline int moe_local_maps_launches(int P, int L) {
  return 2 + P * ((L + kLocalMapExperts - 1) / kLocalMapExperts);
}
template <Device Dev>
void moe_local_maps(int* source_pair, int* local_slots, const int* slots, size_t stride, int P,
                    int pairs, int L, const int* first_row, const int* local_base, int R);
template <class = void>
void moe_local_maps(Device d, int* source_pair, int* local_slots, const int* slots,
                    size_t stride, int P, int pairs, int L, const int* first_row,
                    const int* local_base, int R) {
  count_kernel(4.0 * R + 8.0 * P * pairs, moe_local_maps_launches(P, L));
  ON_DEVICE(moe_local_maps)(source_pair, local_slots, slots, stride, P, pairs, L, first_row,
                            local_base, R);
}

// Aux-loss-free balancing (DeepSeek-V3), once per step: bias(E) += rate sign(mean - counts[e]),
// mean = sum counts / E in double, sign(0) = 0; counts (E) the pairs each expert ran.
template <Device Dev>
void moe_expert_bias_update(float* bias, const int* counts, int E, float rate);
template <class = void>
void moe_expert_bias_update(Device d, float* bias, const int* counts, int E, float rate) {
  count_kernel(12.0 * E);
  ON_DEVICE(moe_expert_bias_update)(bias, counts, E, rate);
}

}  // namespace kernels
