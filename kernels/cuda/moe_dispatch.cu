// kernels/cuda/moe_dispatch.cu: the MoE dispatch of kernels/ops/moe_dispatch.h on the GPU,
// CUDA twins of kernels/cpu/moe_dispatch.cpp: the counting sort in its three passes, with no
// sort and no floating-point reduction, so every run writes the same integer maps as the CPU
// twin (P = N k pairs, E experts).
//
// Pass 1, histogram (moe_expert_counts): one block of 1024 threads per group of tokens (one
//   block for the dispatch's N tokens, one per sequence for seq_aux_loss). The group's E
//   counters live in shared memory; each thread adds its strided pairs with shared-memory
//   atomics, whose order does not show in an integer sum; then the block writes them out.
//   Reads P x4, writes groups E x4.
// Pass 2, scan (moe_dispatch_offsets): one block of 1024 threads; thread i holds expert
//   base + i's rows (moe_expert_rows), a Hillis-Steele scan in shared memory gives the inclusive
//   sums of the chunk, and the carry of the chunks before makes them the offsets. Reads E x4,
//   writes rows E x4 and offset (E + 1) x4, and reads/writes the statistics' 2 E x4.
// Pass 3, scatter (moe_dispatch_scatter): one block of 1024 threads per expert, walking the P
//   pairs in order, a tile of 1024 at a time; thread i holds pair base + i. Two block-wide
//   counts (block_count_before: a warp ballot, the set lanes below this one, the warp totals
//   in shared memory) give each pair of the expert its place among the expert's pairs of the
//   tile and among its kept ones; the running totals of the tiles before make them the pair's
//   place in the expert (its rank under the position policy) and its row. Pair order is kept
//   by construction: this is what makes the sort stable, without a sort. Then the expert's
//   padding rows. Each block reads all P expert ids, E P x4 from L2 (16 MiB at Qwen3-30B-A3B's
//   layer, E 128, P 4096 x 8), in E blocks that run as one wave. The variant that reads the
//   ids once (a histogram per chunk of pairs, a scan over the chunks per expert, an ordered
//   scatter inside each chunk) needs a chunks x E table and a rank inside each chunk: two more
//   passes for bytes that stay in L2 at these sizes, so the plain one is kept (the counted
//   bytes, kernels/counters.h's convention, are each element once either way).
// Gate rank (moe_gate_rank, drop policy probs only): one thread per pair p; the pairs pass
//   through shared memory 256 at a time and the thread counts those of its expert that beat it
//   (moe_pair_beats). P^2 comparisons, about 10^9 at P = 32768: a fraction of a millisecond at
//   the GPU's integer rate (not measured yet). Ranking inside each expert's own list would cost
//   sum n_e^2 instead but needs the lists first (a dropless sort); left for when a capacity run
//   at that size shows it.
// Local maps (moe_local_maps, the allgather dispatcher's): two fills of -1, then per source
//   and chunk of kLocalMapExperts local experts one launch, the chunk's ranges in the kernel's
//   parameters (2 KiB); a thread per pair of the source reads its row, and when a local
//   expert of the chunk has it, binary-searches the ranges' starts for that expert and writes
//   the pair's local row both ways. Each row has one pair: no two threads write one entry.
//   Reads P pairs x4, writes R x4 and P pairs x4 (the fills' bytes; the scatter rewrites
//   some).
// Expert bias update: one block; each thread sums its strided counts, block_sum in double (of
//   integers: exact, whatever the order), then each updates its strided experts.
// Nothing here is atomic across blocks or depends on scheduling: deterministic.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/math.h"
#include "kernels/ops/moe_dispatch.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), kThreads, KERNEL_CHECK

namespace {

constexpr int kBlock = 1024;  // the histogram's, the scan's and the scatter's blocks

// How many threads of the block before this one have `flag` set; `total`: how many in the
// whole block. Every thread of the (one-dimensional, 32-multiple) block must call it.
__device__ int block_count_before(bool flag, int& total) {
  __shared__ int warp_total[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  __syncthreads();  // the previous call's readers are done with warp_total
  if (lane == 0) warp_total[warp] = __popc(ballot);
  __syncthreads();
  int before = __popc(ballot & ((1u << lane) - 1u));
  total = 0;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
    if (w < warp) before += warp_total[w];
    total += warp_total[w];
  }
  return before;
}

// mirrors moe_expert_counts<Device::CPU>: block g counts group g's pairs.
__global__ void counts_kernel(int* counts, const int* experts, int k, int E, int group) {
  extern __shared__ int bins[];  // (E)
  const size_t g = blockIdx.x;
  for (int e = threadIdx.x; e < E; e += blockDim.x) bins[e] = 0;
  __syncthreads();
  const int* mine = experts + g * group * k;
  for (int i = threadIdx.x; i < group * k; i += blockDim.x) atomicAdd(&bins[mine[i]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[g * E + e] = bins[e];
}

// mirrors moe_dispatch_offsets<Device::CPU>: one block, the experts in chunks of blockDim.
__global__ void offsets_kernel(int* rows, int* offset, int* routed_sum, int* kept_sum,
                               const int* counts, int E, int capacity, int padded_rows,
                               bool accumulate) {
  __shared__ int sums[kBlock];
  const int i = threadIdx.x;
  if (i == 0) offset[0] = 0;
  int carry = 0;  // the rows of the chunks before
  for (int base = 0; base < E; base += blockDim.x) {
    const int e = base + i;
    const int n = e < E ? moe_expert_rows(counts[e], capacity, padded_rows) : 0;
    if (e < E) {
      rows[e] = n;
      if (routed_sum) {
        const int kept = moe_kept_pairs(counts[e], capacity);
        routed_sum[e] = (accumulate ? routed_sum[e] : 0) + counts[e];
        kept_sum[e] = (accumulate ? kept_sum[e] : 0) + kept;
      }
    }
    sums[i] = n;
    for (int d = 1; d < (int)blockDim.x; d <<= 1) {  // inclusive scan: sums[i] += sums[i - d]
      __syncthreads();
      const int before = i >= d ? sums[i - d] : 0;
      __syncthreads();
      sums[i] += before;
    }
    __syncthreads();
    if (e < E) offset[e + 1] = carry + sums[i];
    carry += sums[blockDim.x - 1];
    __syncthreads();  // every thread has read the chunk's total before the next overwrites it
  }
}

// mirrors moe_gate_rank<Device::CPU>: thread p counts the pairs of its expert that beat it.
__global__ void gate_rank_kernel(int* rank, const int* experts, const float* gates, int P) {
  __shared__ int tile_expert[kThreads];
  __shared__ float tile_gate[kThreads];
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  const int e = p < P ? experts[p] : -1;
  const float g = p < P ? gates[p] : 0.0f;
  int beaten_by = 0;
  for (int base = 0; base < P; base += blockDim.x) {
    const int q = base + threadIdx.x;
    __syncthreads();  // the tile before is read
    tile_expert[threadIdx.x] = q < P ? experts[q] : -1;
    tile_gate[threadIdx.x] = q < P ? gates[q] : 0.0f;
    __syncthreads();
    const int n = min((int)blockDim.x, P - base);
    for (int j = 0; j < n; j++)
      beaten_by += tile_expert[j] == e && moe_pair_beats(tile_gate[j], base + j, g, p);
  }
  if (p < P) rank[p] = beaten_by;
}

// mirrors moe_dispatch_scatter<Device::CPU>: block e places expert e's pairs.
__global__ void scatter_kernel(int* row_pair, int* slots, const int* experts, const int* rank,
                               const int* offset, int P, int capacity) {
  const int e = blockIdx.x;
  const int first = offset[e], end = offset[e + 1];
  int seen = 0, taken = 0;  // the expert's pairs in the tiles before, and its kept ones
  for (int base = 0; base < P; base += blockDim.x) {
    const int p = base + threadIdx.x;
    const bool mine = p < P && experts[p] == e;
    int in_tile = 0, kept_in_tile = 0;
    const int place = seen + block_count_before(mine, in_tile);
    const int r = rank && mine ? rank[p] : place;
    const bool keep = mine && (capacity < 0 || r < capacity);
    const int row = first + taken + block_count_before(keep, kept_in_tile);
    if (mine) slots[p] = keep ? row : -1;
    if (keep) row_pair[row] = p;
    seen += in_tile;
    taken += kept_in_tile;
  }
  for (int row = first + taken + threadIdx.x; row < end; row += blockDim.x) row_pair[row] = -1;
}

__global__ void fill_kernel(int* x, size_t n, int value) {
  GRID_STRIDE_LOOP(i, n) x[i] = value;
}

// One chunk of local experts' ranges for one source: first_row[e] .. first_row[experts] the
// chunk's rows in the source's permutation, base[e] where expert e's start in local order.
struct LocalRanges {
  int first_row[kLocalMapExperts + 1];
  int base[kLocalMapExperts];
  int experts;
};

// mirrors moe_local_maps<Device::CPU> for source j's pairs and one chunk of local experts.
__global__ void local_maps_kernel(int* source_pair, int* local_slots, const int* slots, int j,
                                  int pairs, LocalRanges r) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= pairs) return;
  const int s = slots[p];
  if (s < r.first_row[0] || s >= r.first_row[r.experts]) return;
  int lo = 0, hi = r.experts - 1;  // the last expert whose range starts at or before s
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (r.first_row[mid] <= s) lo = mid;
    else hi = mid - 1;
  }
  const int o = r.base[lo] + s - r.first_row[lo];
  source_pair[o] = j * pairs + p;
  local_slots[(size_t)j * pairs + p] = o;
}

// mirrors moe_expert_bias_update<Device::CPU>
__global__ void bias_update_kernel(float* bias, const int* counts, int E, float rate) {
  double sum = 0.0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) sum += counts[e];
  const double mean = block_sum(sum) / E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) bias[e] += rate * moe_bias_step(mean, counts[e]);
}

}  // namespace

template <> void moe_expert_counts<Device::CUDA>(int* counts, const int* experts, int N, int k,
                                                 int E, int group) {
  const int groups = group > 0 ? N / group : 0;
  if (groups == 0) return;
  counts_kernel<<<groups, kBlock, (size_t)E * sizeof(int), stream()>>>(counts, experts, k, E,
                                                                       group);
  KERNEL_CHECK();
}

template <> void moe_dispatch_offsets<Device::CUDA>(int* rows, int* offset, int* routed_sum,
                                                    int* kept_sum, const int* counts, int E,
                                                    int capacity, int padded_rows,
                                                    bool accumulate) {
  offsets_kernel<<<1, kBlock, 0, stream()>>>(rows, offset, routed_sum, kept_sum, counts, E,
                                             capacity, padded_rows, accumulate);
  KERNEL_CHECK();
}

template <> void moe_gate_rank<Device::CUDA>(int* rank, const int* experts, const float* gates,
                                             int N, int k, int /*E*/) {
  const int P = N * k;
  if (P == 0) return;
  gate_rank_kernel<<<(P + kThreads - 1) / kThreads, kThreads, 0, stream()>>>(rank, experts, gates,
                                                                            P);
  KERNEL_CHECK();
}

template <> void moe_dispatch_scatter<Device::CUDA>(int* row_pair, int* slots, const int* experts,
                                                    const int* rank, const int* offset, int N,
                                                    int k, int E, int /*M*/, int capacity) {
  scatter_kernel<<<E, kBlock, 0, stream()>>>(row_pair, slots, experts, rank, offset, N * k,
                                             capacity);
  KERNEL_CHECK();
}

template <> void moe_local_maps<Device::CUDA>(int* source_pair, int* local_slots,
                                              const int* slots, size_t stride, int P,
                                              int pairs, int L, const int* first_row,
                                              const int* local_base, int R) {
  if (R > 0) fill_kernel<<<grid_1d(R), kThreads, 0, stream()>>>(source_pair, R, -1);
  const size_t all = (size_t)P * pairs;
  if (all > 0) fill_kernel<<<grid_1d(all), kThreads, 0, stream()>>>(local_slots, all, -1);
  KERNEL_CHECK();
  if (pairs == 0) return;
  for (int j = 0; j < P; ++j)
    for (int c = 0; c < L; c += kLocalMapExperts) {
      LocalRanges r;
      r.experts = L - c < kLocalMapExperts ? L - c : kLocalMapExperts;
      for (int e = 0; e <= r.experts; ++e)
        r.first_row[e] = first_row[(size_t)j * (L + 1) + c + e];
      for (int e = 0; e < r.experts; ++e) r.base[e] = local_base[(size_t)j * L + c + e];
      local_maps_kernel<<<(pairs + kThreads - 1) / kThreads, kThreads, 0, stream()>>>(
          source_pair, local_slots, slots + j * stride, j, pairs, r);
      KERNEL_CHECK();
    }
}

template <> void moe_expert_bias_update<Device::CUDA>(float* bias, const int* counts, int E,
                                                      float rate) {
  bias_update_kernel<<<1, kThreads, 0, stream()>>>(bias, counts, E, rate);
  KERNEL_CHECK();
}

}  // namespace kernels
