// kernels/cuda/loss_optimizer.cu: fused softmax cross-entropy, AdamW, and the sum of
// squares behind the gradient norm: the CUDA twins of kernels/ops/loss_optimizer.h, mirroring
// kernels/cpu/loss_optimizer.cpp.
//
// Cross-entropy: one block per row of logits(N, V), in three passes split at its two
// reductions, so that the vocabulary may be split over tensor-parallel ranks. With
// M = max_j x_j (subtracted so exp cannot overflow):
//   s    = sum_j exp(x_j - M)                        (pass 2)
//   loss = M + log s - x_t                           (t = target; pass 3)
//   dx_j = (exp(x_j - M) / s - [j == t]) grad_scale  (written over the logits; pass 3)
// AdamW, multi-tensor (as apex's multi_tensor_apply): one launch for a step's runs. Block b
// owns a chunk of kAdamChunk elements of one run; a table on the device lists each run (its
// pointers, length and weight decay) with its first block, and the block finds its run by a
// binary search of the first blocks (a step has a few hundred runs: 8-9 probes). Each thread
// then updates every blockDim-th element of the chunk: 28 bytes per element (fp32: p, g, m, v
// read, p, m, v written; bf16: master, g, m, v read, master, p, m, v written; 4 fewer for each
// moment stored in bf16, --exp-avg-dtype / --exp-avg-sq-dtype), about 15 FLOPs:
// memory-bound, as the per-tensor launches were, less 147 launches of GPT-2's step. The table
// is uploaded when the runs change (the first step; a new layout), not every step.
// Sum of squares: a fixed grid of blocks each sums a strided slice of every span in double; the
// host adds the per-block partials in block order, so the result does not depend on the GPU.
//
// AdamW and the sum of squares are templated on the storage type T of gradients (and of the
// model's parameters): float, or bf16 widened on load. The loss stays fp32 (loss_optimizer.h: the
// logits of a bf16 run come from the mixed bf16 x bf16 -> fp32 GEMM).
#include <vector>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/math.h"
#include "kernels/ops/loss_optimizer.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), cublas(), kThreads, grid_1d, the reductions

// ---- cross-entropy in three passes (vocabulary-parallel) -------------------------------------
// The formulas above, as kernels/cpu/loss_optimizer.cpp computes them; the caller combines the
// passes' per-row results over the ranks in between. One block per row; only the first
// `valid` columns take part, the padding gets gradient 0.

// Column of target t on a rank holding ids [vocab_start, vocab_start + V), -1 when the row is
// ignored (t < 0) or another rank holds t.
__device__ inline int held_target(int t, int V, int vocab_start) {
  const int j = t - vocab_start;
  return t >= 0 && j >= 0 && j < V ? j : -1;
}

// mirrors cross_entropy_row_max<Device::CPU>; no valid column (all padding): -inf, the identity of
// max.
__global__ void cross_entropy_row_max_kernel(float* row_max, const float* logits, int V,
                                             int valid) {
  const float* x = logits + (size_t)blockIdx.x * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_max(mx);
  if (threadIdx.x == 0) row_max[blockIdx.x] = mx;
}

// mirrors cross_entropy_sum_exp<Device::CPU>. A target in the padding columns is no token (the CPU
// twin throws; a kernel cannot): NaN, so the loss shows it.
__global__ void cross_entropy_sum_exp_kernel(float* sum_exp, float* target_logit,
                                             const float* logits, const float* row_max,
                                             const int* targets, int V, int valid,
                                             int vocab_start) {
  const size_t row = blockIdx.x;
  const float* x = logits + row * V;
  const float m = row_max[row];
  float s = 0.0f;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) s += expf(x[j] - m);
  s = block_sum(s);
  if (threadIdx.x == 0) {
    sum_exp[row] = s;
    const int t = held_target(targets[row], V, vocab_start);
    target_logit[row] = t < 0 ? 0.0f : t < valid ? x[t] : NAN;
  }
}

// mirrors cross_entropy_finish<Device::CPU>: loss = m + log s - z_t; dz_j = exp(z_j - m) grad_scale
// / s, minus grad_scale at the target's column when this rank holds it.
__global__ void cross_entropy_finish_kernel(float* losses, float* logits, const int* targets,
                                            const float* row_max, const float* sum_exp,
                                            const float* target_logit, int V, int valid,
                                            int vocab_start, float grad_scale) {
  const size_t row = blockIdx.x;
  float* x = logits + row * V;
  if (targets[row] < 0) {  // ignored row: no loss, no gradient
    for (int j = threadIdx.x; j < V; j += blockDim.x) x[j] = 0.0f;
    if (threadIdx.x == 0) losses[row] = 0.0f;
    return;
  }
  const float m = row_max[row], s = sum_exp[row], norm = grad_scale / s;
  if (threadIdx.x == 0) losses[row] = m + logf(s) - target_logit[row];
  const int t = held_target(targets[row], V, vocab_start);
  for (int j = threadIdx.x; j < V; j += blockDim.x)
    x[j] = j < valid ? expf(x[j] - m) * norm - (j == t ? grad_scale : 0.0f) : 0.0f;
}

template <> void cross_entropy_row_max<Device::CUDA>(float* row_max, const float* logits, int N,
                                                     int V, int valid) {
  if (N == 0) return;
  cross_entropy_row_max_kernel<<<N, kThreads, 0, stream()>>>(row_max, logits, V, valid);
  KERNEL_CHECK();
}
template <> void cross_entropy_sum_exp<Device::CUDA>(
    float* sum_exp, float* target_logit, const float* logits, const float* row_max,
    const int* targets, int N, int V, int valid, int vocab_start) {
  if (N == 0) return;
  cross_entropy_sum_exp_kernel<<<N, kThreads, 0, stream()>>>(sum_exp, target_logit, logits,
                                                             row_max, targets, V, valid,
                                                             vocab_start);
  KERNEL_CHECK();
}
template <> void cross_entropy_finish<Device::CUDA>(
    float* losses, float* logits, const int* targets, const float* row_max, const float* sum_exp,
    const float* target_logit, int N, int V, int valid, int vocab_start, float grad_scale) {
  if (N == 0) return;
  cross_entropy_finish_kernel<<<N, kThreads, 0, stream()>>>(losses, logits, targets, row_max,
                                                            sum_exp, target_logit, V, valid,
                                                            vocab_start, grad_scale);
  KERNEL_CHECK();
}

// ---- AdamW ---------------------------------------------------------------------------------
namespace {

constexpr int64_t kAdamChunk = 4096;  // elements per block: 16 per thread of kThreads

struct AdamTableRow {
  AdamRun run;
  int64_t first_block = 0;  // the run's chunks are blocks first_block, first_block + 1, ...
};

// mirrors adamw_update<Device::CPU>: the gradient is scaled by the clipping coefficient first;
// params, when given, receive round(master).
// M16, V16: the moments stored in bf16 (AdamStep::exp_avg_bf16, exp_avg_sq_bf16), as the CPU
// twin's adamw_runs.
template <typename T, bool M16, bool V16>
__global__ void adamw_runs_kernel(const AdamTableRow* table, int count, AdamStep s) {
  const int64_t block = blockIdx.x;
  int lo = 0, hi = count - 1;  // the last run whose first block is <= this one
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[mid].first_block <= block) lo = mid;
    else hi = mid - 1;
  }
  const AdamRun r = table[lo].run;
  const T* g = static_cast<const T*>(r.grads);
  T* p = static_cast<T*>(r.params);
  const int64_t begin = (block - table[lo].first_block) * kAdamChunk;
  const int64_t end = begin + kAdamChunk < r.n ? begin + kAdamChunk : r.n;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    adamw_step_stored(r.master[i], r.m, r.v, i, M16, V16, to_float(g[i]) * s.grad_scale, s.lr,
                      s.beta1, s.beta2, s.eps, r.weight_decay, s.bias1, s.bias2);
    if (p != nullptr) store(p[i], r.master[i]);
  }
}

bool same_run(const AdamRun& a, const AdamRun& b) {
  return a.master == b.master && a.params == b.params && a.grads == b.grads && a.m == b.m &&
         a.v == b.v && a.n == b.n && a.weight_decay == b.weight_decay;
}

// The table on the device and what it holds: kept for the process (a few KiB, outside the
// ledger like the cuBLAS workspace), grown only when a step has more runs than any before.
struct AdamTable {
  AdamTableRow* rows = nullptr;
  size_t capacity = 0;
  std::vector<AdamTableRow> held;
};

template <typename T>
void adamw_runs_launch(const AdamRun* runs, int count, const AdamStep& s) {
  static AdamTable table;
  std::vector<AdamTableRow> rows;
  int64_t blocks = 0;
  for (int r = 0; r < count; ++r) {
    if (runs[r].n == 0) continue;  // no block of its own
    rows.push_back({runs[r], blocks});
    blocks += (runs[r].n + kAdamChunk - 1) / kAdamChunk;
  }
  if (blocks == 0) return;
  bool same = rows.size() == table.held.size();
  for (size_t i = 0; same && i < rows.size(); ++i) same = same_run(rows[i].run, table.held[i].run);
  if (!same) {
    if (rows.size() > table.capacity) {
      CUDA_CHECK(cudaStreamSynchronize(stream()));  // the old table's last reader is done
      CUDA_CHECK(cudaFree(table.rows));
      CUDA_CHECK(cudaMalloc(&table.rows, rows.size() * sizeof(AdamTableRow)));
      table.capacity = rows.size();
    }
    // from pageable memory: staged before the call returns, ordered after the last launch
    CUDA_CHECK(cudaMemcpyAsync(table.rows, rows.data(), rows.size() * sizeof(AdamTableRow),
                               cudaMemcpyHostToDevice, stream()));
    table.held = std::move(rows);
  }
  const unsigned grid = (unsigned)blocks;
  const int held = (int)table.held.size();
  if (s.exp_avg_bf16 && s.exp_avg_sq_bf16)
    adamw_runs_kernel<T, true, true><<<grid, kThreads, 0, stream()>>>(table.rows, held, s);
  else if (s.exp_avg_bf16)
    adamw_runs_kernel<T, true, false><<<grid, kThreads, 0, stream()>>>(table.rows, held, s);
  else if (s.exp_avg_sq_bf16)
    adamw_runs_kernel<T, false, true><<<grid, kThreads, 0, stream()>>>(table.rows, held, s);
  else
    adamw_runs_kernel<T, false, false><<<grid, kThreads, 0, stream()>>>(table.rows, held, s);
  KERNEL_CHECK();
}

}  // namespace

template <> void adamw_update<Device::CUDA, float>(const AdamRun* runs, int count,
                                                   const AdamStep& s) {
  adamw_runs_launch<float>(runs, count, s);
}
template <> void adamw_update<Device::CUDA, bf16>(const AdamRun* runs, int count,
                                                  const AdamStep& s) {
  adamw_runs_launch<bf16>(runs, count, s);
}
template <> void adamw_update<Device::CUDA, fp16>(const AdamRun* runs, int count,
                                                  const AdamStep& s) {
  adamw_runs_launch<fp16>(runs, count, s);
}

// ---- sum of squares ------------------------------------------------------------------------

// The spans of one launch, in its parameters (kSquareSpansPerLaunch x 16 bytes: 2 KiB, inside
// the 4 KiB every architecture takes).
struct SquareSpans {
  const void* data[kSquareSpansPerLaunch];
  int64_t n[kSquareSpansPerLaunch];
  int count;
};

// partial[block] (+)= the block's grid-strided elements of every span, span by span.
template <typename T>
__global__ void sum_squares_kernel(double* partial, SquareSpans spans, bool accumulate) {
  double s = 0.0;
  for (int k = 0; k < spans.count; ++k) {
    const T* x = static_cast<const T*>(spans.data[k]);
    const size_t n = (size_t)spans.n[k];
    GRID_STRIDE_LOOP(i, n) {
      const double xi = to_float(x[i]);
      s += xi * xi;
    }
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = (accumulate ? partial[blockIdx.x] : 0.0) + s;
}

// A small device buffer kept for the life of the process (2 KiB, outside the ledger), for
// every reduction to the host (sum_squares here, the MoE losses in moe.cu).
double* cuda::sum_partials() {
  static double* partial = nullptr;
  if (partial == nullptr) CUDA_CHECK(cudaMalloc(&partial, kSumBlocks * sizeof(double)));
  return partial;
}

double cuda::add_partials(const double* partial) {
  double host[kSumBlocks];
  CUDA_CHECK(cudaMemcpyAsync(host, partial, sizeof(host), cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  double total = 0.0;
  for (double p : host) total += p;
  return total;
}

// mirrors sum_squares<Device::CPU>: the non-empty spans in launches of kSquareSpansPerLaunch,
// each block's partial accumulated over them, then one copy to the host.
template <typename T>
static double sum_squares_launch(const Span* spans, int count) {
  SquareSpans batch;
  batch.count = 0;
  double* partial = sum_partials();
  bool launched = false;
  auto flush = [&] {
    sum_squares_kernel<T><<<kSumBlocks, kThreads, 0, stream()>>>(partial, batch, launched);
    KERNEL_CHECK();
    launched = true;
    batch.count = 0;
  };
  for (int k = 0; k < count; ++k) {
    if (spans[k].n == 0) continue;
    batch.data[batch.count] = spans[k].data;
    batch.n[batch.count] = spans[k].n;
    if (++batch.count == kSquareSpansPerLaunch) flush();
  }
  if (batch.count > 0) flush();
  return launched ? add_partials(partial) : 0.0;
}

template <> double sum_squares<Device::CUDA, float>(const Span* spans, int count) {
  return sum_squares_launch<float>(spans, count);
}
template <> double sum_squares<Device::CUDA, bf16>(const Span* spans, int count) {
  return sum_squares_launch<bf16>(spans, count);
}
template <> double sum_squares<Device::CUDA, fp16>(const Span* spans, int count) {
  return sum_squares_launch<fp16>(spans, count);
}

}  // namespace kernels
