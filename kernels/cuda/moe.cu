// kernels/cuda/moe.cu: the mixture-of-experts ops of kernels/ops/moe.h, CUDA twins of
// kernels/cpu/moe.cpp (the formulas are in that file's header).
//
// Router: one thread per token row runs the row's kernels/math.h moe_*_row helper, the very
// code of the CPU twin, so gates, chosen experts (ties to the lower index) and gradients agree
// with it to the last bit up to the compilers' contraction of multiply-adds. A row is E
// logits (tens to a few hundred): a thread per row is plenty next to the experts' GEMMs.
// The aux-loss weighted sum and the z loss sum are block reductions in double (sum_squares'
// pattern): per-block partials copied back and added on the host, blocking.
//
// Dispatch, element-parallel gathers:
//   permute    fused: one kernel writes the rows and (column 0's thread) the gates;
//              unfused: a rows kernel and a gates kernel.
//   unpermute  fused: one thread per output element sums its k slots in slot order, fp32;
//              unfused: a zeroing pass, then one accumulating pass per slot: the same fp32
//              adds in the same order from 0, so the two agree bit for bit. For bf16 storage
//              the passes accumulate into an fp32 scratch (scratch_alloc: the caching
//              allocator) and a last pass rounds it into out once, as the fused kernel rounds
//              once.
// Gated expert activations and the shared-expert gate: forward one thread per element;
// backward one block per row, whose threads write the row's input gradient and block_sum the
// row's gate gradient (dgates, dz), so no atomics: deterministic.
// Token rows are templated on the storage type T (float or bf16); gates stay fp32 (moe.h).
#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/math.h"
#include "kernels/ops/moe.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), cublas(), kThreads, grid_1d, the reductions

// ---- router -------------------------------------------------------------------------------

// mirrors moe_router_topk<Device::CPU>
__global__ void topk_kernel(float* gates, int* experts, const float* logits, const float* bias,
                            int N, int E, int k, int score, bool pre_softmax, float scaling) {
  GRID_STRIDE_LOOP(t, N) {
    moe_topk_row(gates + t * k, experts + t * k, logits + t * E, bias, E, k, score, pre_softmax,
                 scaling);
  }
}
// mirrors moe_router_topk_backward<Device::CPU>
__global__ void topk_backward_kernel(float* dlogits, const float* dgates, const float* logits,
                                     const int* experts, int N, int E, int k, int score,
                                     bool pre_softmax, float scaling) {
  GRID_STRIDE_LOOP(t, N) {
    moe_topk_backward_row(dlogits + t * E, dgates + t * k, logits + t * E, experts + t * k, E, k,
                          score, pre_softmax, scaling);
  }
}
// mirrors moe_balancing_scores<Device::CPU> / _backward
__global__ void balancing_kernel(float* scores, const float* logits, int N, int E, int score) {
  GRID_STRIDE_LOOP(t, N) moe_balancing_row(scores + t * E, logits + t * E, E, score);
}
__global__ void balancing_backward_kernel(float* dlogits, const float* dscores,
                                          const float* logits, int N, int E, int score) {
  GRID_STRIDE_LOOP(t, N) {
    moe_balancing_backward_row(dlogits + t * E, dscores + t * E, logits + t * E, E, score);
  }
}
// mirrors moe_z_loss_backward<Device::CPU>
__global__ void z_loss_backward_kernel(float* dlogits, const float* logits, int N, int E,
                                       float coeff) {
  GRID_STRIDE_LOOP(t, N) moe_z_loss_backward_row(dlogits + t * E, logits + t * E, E, coeff);
}

template <> void moe_router_topk<Device::CUDA>(float* gates, int* experts, const float* logits,
                                               const float* expert_bias, int N, int E, int k,
                                               int score, bool pre_softmax, float scaling) {
  if (N == 0 || k == 0) return;
  topk_kernel<<<grid_1d(N), kThreads, 0, stream()>>>(gates, experts, logits, expert_bias, N, E, k,
                                                     score, pre_softmax, scaling);
  KERNEL_CHECK();
}
template <> void moe_router_topk_backward<Device::CUDA>(
    float* dlogits, const float* dgates, const float* logits, const int* experts, int N, int E,
    int k, int score, bool pre_softmax, float scaling) {
  if (N == 0) return;
  topk_backward_kernel<<<grid_1d(N), kThreads, 0, stream()>>>(dlogits, dgates, logits, experts, N,
                                                              E, k, score, pre_softmax, scaling);
  KERNEL_CHECK();
}
template <> void moe_balancing_scores<Device::CUDA>(float* scores, const float* logits, int N,
                                                    int E, int score) {
  if (N == 0) return;
  balancing_kernel<<<grid_1d(N), kThreads, 0, stream()>>>(scores, logits, N, E, score);
  KERNEL_CHECK();
}
template <> void moe_balancing_scores_backward<Device::CUDA>(
    float* dlogits, const float* dscores, const float* logits, int N, int E, int score) {
  if (N == 0) return;
  balancing_backward_kernel<<<grid_1d(N), kThreads, 0, stream()>>>(dlogits, dscores, logits, N, E,
                                                                   score);
  KERNEL_CHECK();
}
template <> void moe_z_loss_backward<Device::CUDA>(float* dlogits, const float* logits, int N,
                                                   int E, float coeff) {
  if (N == 0) return;
  z_loss_backward_kernel<<<grid_1d(N), kThreads, 0, stream()>>>(dlogits, logits, N, E, coeff);
  KERNEL_CHECK();
}

// ---- the two sums (double, back to the host) ----------------------------------------------

// partial[block] = sum over the block's grid-strided elements of scores * weights.
__global__ void weighted_sum_kernel(double* partial, const float* scores, const int* counts,
                                    double scale, size_t n, int E, int group) {
  double s = 0.0;
  GRID_STRIDE_LOOP(i, n) {
    const size_t t = i / E;
    s += (double)scores[i] * moe_aux_weight(scale, counts[(t / group) * E + i % E]);
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
// partial[block] = sum over the block's grid-strided rows of lse^2.
__global__ void z_loss_sum_kernel(double* partial, const float* logits, int N, int E) {
  double s = 0.0;
  GRID_STRIDE_LOOP(t, N) {
    const double lse = moe_logsumexp_row(logits + t * E, E);
    s += lse * lse;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

template <> double moe_weighted_sum<Device::CUDA>(const float* scores, const int* counts,
                                                  double scale, int N, int E, int group) {
  const size_t n = (size_t)N * E;
  if (n == 0) return 0.0;
  double* partial = sum_partials();
  weighted_sum_kernel<<<kSumBlocks, kThreads, 0, stream()>>>(partial, scores, counts, scale, n,
                                                             E, group);
  KERNEL_CHECK();
  return add_partials(partial);
}
template <> double moe_z_loss_sum<Device::CUDA>(const float* logits, int N, int E) {
  if (N == 0) return 0.0;
  double* partial = sum_partials();
  z_loss_sum_kernel<<<kSumBlocks, kThreads, 0, stream()>>>(partial, logits, N, E);
  KERNEL_CHECK();
  return add_partials(partial);
}

// mirrors moe_weighted_sum_backward<Device::CPU>: dscores[t, e] = w[t / group, e] factor.
__global__ void weighted_sum_backward_kernel(float* dscores, const int* counts, double scale,
                                             float factor, size_t n, int E, int group) {
  GRID_STRIDE_LOOP(i, n) {
    dscores[i] = moe_aux_weight(scale, counts[(i / E / group) * E + i % E]) * factor;
  }
}
template <> void moe_weighted_sum_backward<Device::CUDA>(float* dscores, const int* counts,
                                                         double scale, float factor, int N,
                                                         int E, int group) {
  const size_t n = (size_t)N * E;
  if (n == 0) return;
  weighted_sum_backward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(dscores, counts, scale,
                                                                      factor, n, E, group);
  KERNEL_CHECK();
}

// ---- permute / unpermute ------------------------------------------------------------------

// mirrors moe_permute<Device::CPU>: element (j, c) of out from token row_pair[j] / k; with
// out_gates (the fused kernel), column 0's thread also writes the row's gate.
template <typename T>
__global__ void permute_rows_kernel(T* out, float* out_gates, const T* in, const float* gates,
                                    const int* row_pair, size_t total, int C, int k) {
  GRID_STRIDE_LOOP(i, total) {
    const size_t j = i / C;
    const int c = (int)(i % C), p = row_pair[j];
    out[i] = p >= 0 ? in[(size_t)(p / k) * C + c] : T{};
    if (out_gates && c == 0) out_gates[j] = p >= 0 ? gates[p] : 0.0f;
  }
}
__global__ void permute_gates_kernel(float* out_gates, const float* gates, const int* row_pair,
                                     int M) {
  GRID_STRIDE_LOOP(j, M) out_gates[j] = row_pair[j] >= 0 ? gates[row_pair[j]] : 0.0f;
}

template <typename T>
static void permute_launch(T* out, float* out_gates, const T* in, const float* gates,
                           const int* row_pair, int M, int C, int k, bool fused) {
  const size_t total = (size_t)M * C;
  if (fused && total > 0) {
    permute_rows_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, out_gates, in, gates,
                                                                   row_pair, total, C, k);
    KERNEL_CHECK();
    return;
  }
  if (total > 0) {
    permute_rows_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(
        out, (float*)nullptr, in, gates, row_pair, total, C, k);
    KERNEL_CHECK();
  }
  if (out_gates && M > 0) {
    permute_gates_kernel<<<grid_1d(M), kThreads, 0, stream()>>>(out_gates, gates, row_pair, M);
    KERNEL_CHECK();
  }
}

// mirrors moe_unpermute<Device::CPU>, fused: out[t, c] = sum over s of in[slots[t k + s], c].
template <typename T>
__global__ void unpermute_kernel(T* out, const T* in, const int* slots, size_t total, int C,
                                 int k) {
  GRID_STRIDE_LOOP(i, total) {
    const size_t t = i / C;
    const int c = (int)(i % C);
    float acc = 0.0f;
    for (int s = 0; s < k; s++) {
      const int row = slots[t * k + s];
      if (row >= 0) acc += to_float(in[(size_t)row * C + c]);
    }
    store(out[i], acc);
  }
}
// One unfused pass: acc[t, c] += in[slots[t k + s], c] for slot s.
template <typename T>
__global__ void unpermute_slot_kernel(float* acc, const T* in, const int* slots, size_t total,
                                      int C, int k, int s) {
  GRID_STRIDE_LOOP(i, total) {
    const size_t t = i / C;
    const int row = slots[t * k + s];
    if (row >= 0) acc[i] += to_float(in[(size_t)row * C + i % C]);
  }
}
template <typename H>
__global__ void round_kernel(H* out, const float* in, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(out[i], in[i]);
}

template <typename T>
static void unpermute_launch(T* out, const T* in, const int* slots, int N, int C, int k,
                             bool fused) {
  const size_t total = (size_t)N * C;
  if (total == 0) return;
  if (fused) {
    unpermute_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, in, slots, total, C, k);
    KERNEL_CHECK();
    return;
  }
  float* acc = nullptr;
  if constexpr (std::is_same<T, float>::value)
    acc = out;
  else
    acc = (float*)scratch_alloc(total * sizeof(float));
  CUDA_CHECK(cudaMemsetAsync(acc, 0, total * sizeof(float), stream()));
  for (int s = 0; s < k; s++) {
    unpermute_slot_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(acc, in, slots, total, C, k,
                                                                     s);
    KERNEL_CHECK();
  }
  if constexpr (!std::is_same<T, float>::value) {
    round_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, acc, total);
    KERNEL_CHECK();
    scratch_free(acc);
  }
}

// mirrors moe_unpermute_gates<Device::CPU>
__global__ void unpermute_gates_kernel(float* dgates, const float* dperm_gates, const int* slots,
                                       int pairs) {
  GRID_STRIDE_LOOP(p, pairs) dgates[p] = slots[p] >= 0 ? dperm_gates[slots[p]] : 0.0f;
}

template <> void moe_permute<Device::CUDA, float>(float* out, float* out_gates, const float* in,
                                                  const float* gates, const int* row_pair, int M,
                                                  int C, int k, bool fused) {
  permute_launch(out, out_gates, in, gates, row_pair, M, C, k, fused);
}
template <> void moe_permute<Device::CUDA, bf16>(bf16* out, float* out_gates, const bf16* in,
                                                 const float* gates, const int* row_pair, int M,
                                                 int C, int k, bool fused) {
  permute_launch(out, out_gates, in, gates, row_pair, M, C, k, fused);
}
template <> void moe_permute<Device::CUDA, fp16>(fp16* out, float* out_gates, const fp16* in,
                                                 const float* gates, const int* row_pair, int M,
                                                 int C, int k, bool fused) {
  permute_launch(out, out_gates, in, gates, row_pair, M, C, k, fused);
}
template <> void moe_unpermute<Device::CUDA, float>(float* out, const float* in, const int* slots,
                                                    int N, int C, int k, bool fused) {
  unpermute_launch(out, in, slots, N, C, k, fused);
}
template <> void moe_unpermute<Device::CUDA, bf16>(bf16* out, const bf16* in, const int* slots,
                                                   int N, int C, int k, bool fused) {
  unpermute_launch(out, in, slots, N, C, k, fused);
}
template <> void moe_unpermute<Device::CUDA, fp16>(fp16* out, const fp16* in, const int* slots,
                                                   int N, int C, int k, bool fused) {
  unpermute_launch(out, in, slots, N, C, k, fused);
}
template <> void moe_unpermute_gates<Device::CUDA>(float* dgates, const float* dperm_gates,
                                                   const int* slots, int pairs) {
  if (pairs == 0) return;
  unpermute_gates_kernel<<<grid_1d(pairs), kThreads, 0, stream()>>>(dgates, dperm_gates, slots,
                                                                    pairs);
  KERNEL_CHECK();
}

// ---- gated expert activations ---------------------------------------------------------------

// mirrors moe_swiglu_forward<Device::CPU>: out[j, f] = silu(gate) * up * gates[j].
template <typename T>
__global__ void moe_swiglu_forward_kernel(T* out, const T* in, const float* gates, size_t total,
                                          int F) {
  GRID_STRIDE_LOOP(i, total) {
    const size_t j = i / F, f = i % F;
    const T* row = in + j * 2 * F;
    store(out[i], silu(to_float(row[f])) * to_float(row[F + f]) * gates[j]);
  }
}
// mirrors moe_swiglu_backward<Device::CPU>: block = row j.
template <typename T>
__global__ void moe_swiglu_backward_kernel(T* din, float* dgates, const T* dout, const T* in,
                                           const float* gates, int F) {
  const size_t j = blockIdx.x;
  const T* row = in + j * 2 * F;
  T* drow = din + j * 2 * F;
  const T* g = dout + j * F;
  float dgate = 0.0f;
  for (int f = threadIdx.x; f < F; f += blockDim.x) {
    const float gate = to_float(row[f]), up = to_float(row[F + f]), gf = to_float(g[f]);
    const float a = silu(gate), gg = gf * gates[j];
    store(drow[f], gg * up * silu_grad(gate));
    store(drow[F + f], gg * a);
    dgate += gf * (a * up);
  }
  dgate = block_sum(dgate);
  if (threadIdx.x == 0) dgates[j] = dgate;
}
// mirrors moe_gelu_forward<Device::CPU> / _backward
template <typename T>
__global__ void moe_gelu_forward_kernel(T* out, const T* in, const float* gates, size_t total,
                                        int F) {
  GRID_STRIDE_LOOP(i, total) store(out[i], gelu(to_float(in[i])) * gates[i / F]);
}
template <typename T>
__global__ void moe_gelu_backward_kernel(T* din, float* dgates, const T* dout, const T* in,
                                         const float* gates, int F) {
  const size_t j = blockIdx.x;
  float dgate = 0.0f;
  for (int f = threadIdx.x; f < F; f += blockDim.x) {
    const size_t i = j * F + f;
    const float x = to_float(in[i]), gf = to_float(dout[i]);
    store(din[i], gf * gates[j] * gelu_grad(x));
    dgate += gf * gelu(x);
  }
  dgate = block_sum(dgate);
  if (threadIdx.x == 0) dgates[j] = dgate;
}

template <typename T>
static void moe_swiglu_forward_launch(T* out, const T* in, const float* gates, int M, int F) {
  const size_t total = (size_t)M * F;
  if (total == 0) return;
  moe_swiglu_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, in, gates, total, F);
  KERNEL_CHECK();
}
template <typename T>
static void moe_swiglu_backward_launch(T* din, float* dgates, const T* dout, const T* in,
                                       const float* gates, int M, int F) {
  if (M == 0) return;
  moe_swiglu_backward_kernel<<<M, kThreads, 0, stream()>>>(din, dgates, dout, in, gates, F);
  KERNEL_CHECK();
}
template <typename T>
static void moe_gelu_forward_launch(T* out, const T* in, const float* gates, int M, int F) {
  const size_t total = (size_t)M * F;
  if (total == 0) return;
  moe_gelu_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, in, gates, total, F);
  KERNEL_CHECK();
}
template <typename T>
static void moe_gelu_backward_launch(T* din, float* dgates, const T* dout, const T* in,
                                     const float* gates, int M, int F) {
  if (M == 0) return;
  moe_gelu_backward_kernel<<<M, kThreads, 0, stream()>>>(din, dgates, dout, in, gates, F);
  KERNEL_CHECK();
}

template <> void moe_swiglu_forward<Device::CUDA, float>(float* out, const float* in,
                                                         const float* gates, int M, int F) {
  moe_swiglu_forward_launch(out, in, gates, M, F);
}
template <> void moe_swiglu_forward<Device::CUDA, bf16>(bf16* out, const bf16* in,
                                                        const float* gates, int M, int F) {
  moe_swiglu_forward_launch(out, in, gates, M, F);
}
template <> void moe_swiglu_forward<Device::CUDA, fp16>(fp16* out, const fp16* in,
                                                        const float* gates, int M, int F) {
  moe_swiglu_forward_launch(out, in, gates, M, F);
}
template <> void moe_swiglu_backward<Device::CUDA, float>(float* din, float* dgates,
                                                          const float* dout, const float* in,
                                                          const float* gates, int M, int F) {
  moe_swiglu_backward_launch(din, dgates, dout, in, gates, M, F);
}
template <> void moe_swiglu_backward<Device::CUDA, bf16>(
    bf16* din, float* dgates, const bf16* dout, const bf16* in, const float* gates, int M, int F) {
  moe_swiglu_backward_launch(din, dgates, dout, in, gates, M, F);
}
template <> void moe_swiglu_backward<Device::CUDA, fp16>(
    fp16* din, float* dgates, const fp16* dout, const fp16* in, const float* gates, int M, int F) {
  moe_swiglu_backward_launch(din, dgates, dout, in, gates, M, F);
}
template <> void moe_gelu_forward<Device::CUDA, float>(float* out, const float* in,
                                                       const float* gates, int M, int F) {
  moe_gelu_forward_launch(out, in, gates, M, F);
}
template <> void moe_gelu_forward<Device::CUDA, bf16>(bf16* out, const bf16* in, const float* gates,
                                                      int M, int F) {
  moe_gelu_forward_launch(out, in, gates, M, F);
}
template <> void moe_gelu_forward<Device::CUDA, fp16>(fp16* out, const fp16* in, const float* gates,
                                                      int M, int F) {
  moe_gelu_forward_launch(out, in, gates, M, F);
}
template <> void moe_gelu_backward<Device::CUDA, float>(float* din, float* dgates,
                                                        const float* dout, const float* in,
                                                        const float* gates, int M, int F) {
  moe_gelu_backward_launch(din, dgates, dout, in, gates, M, F);
}
template <> void moe_gelu_backward<Device::CUDA, bf16>(
    bf16* din, float* dgates, const bf16* dout, const bf16* in, const float* gates, int M, int F) {
  moe_gelu_backward_launch(din, dgates, dout, in, gates, M, F);
}
template <> void moe_gelu_backward<Device::CUDA, fp16>(
    fp16* din, float* dgates, const fp16* dout, const fp16* in, const float* gates, int M, int F) {
  moe_gelu_backward_launch(din, dgates, dout, in, gates, M, F);
}

// ---- shared-expert gate ---------------------------------------------------------------------

// mirrors moe_shared_gate_forward<Device::CPU>: out[t, c] += sigmoid(z_t) y[t, c].
template <typename T>
__global__ void shared_gate_forward_kernel(T* out, const T* y, const T* z, size_t total, int C) {
  GRID_STRIDE_LOOP(i, total) {
    const float s = sigmoid(to_float(z[i / C]));
    store(out[i], to_float(out[i]) + s * to_float(y[i]));
  }
}
// mirrors moe_shared_gate_backward<Device::CPU>: block = row t.
template <typename T>
__global__ void shared_gate_backward_kernel(T* dy, T* dz, const T* dout, const T* y, const T* z,
                                            int C) {
  const size_t t = blockIdx.x;
  const float s = sigmoid(to_float(z[t]));
  float dot = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const size_t i = t * C + c;
    const float g = to_float(dout[i]);
    store(dy[i], s * g);
    dot += g * to_float(y[i]);
  }
  dot = block_sum(dot);
  if (threadIdx.x == 0) store(dz[t], s * (1.0f - s) * dot);
}

template <typename T>
static void shared_gate_forward_launch(T* out, const T* y, const T* z, int N, int C) {
  const size_t total = (size_t)N * C;
  if (total == 0) return;
  shared_gate_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, y, z, total, C);
  KERNEL_CHECK();
}
template <typename T>
static void shared_gate_backward_launch(T* dy, T* dz, const T* dout, const T* y, const T* z, int N,
                                        int C) {
  if (N == 0) return;
  shared_gate_backward_kernel<<<N, kThreads, 0, stream()>>>(dy, dz, dout, y, z, C);
  KERNEL_CHECK();
}

template <> void moe_shared_gate_forward<Device::CUDA, float>(float* out, const float* y,
                                                              const float* z, int N, int C) {
  shared_gate_forward_launch(out, y, z, N, C);
}
template <> void moe_shared_gate_forward<Device::CUDA, bf16>(bf16* out, const bf16* y,
                                                             const bf16* z, int N, int C) {
  shared_gate_forward_launch(out, y, z, N, C);
}
template <> void moe_shared_gate_forward<Device::CUDA, fp16>(fp16* out, const fp16* y,
                                                             const fp16* z, int N, int C) {
  shared_gate_forward_launch(out, y, z, N, C);
}
template <> void moe_shared_gate_backward<Device::CUDA, float>(
    float* dy, float* dz, const float* dout, const float* y, const float* z, int N, int C) {
  shared_gate_backward_launch(dy, dz, dout, y, z, N, C);
}
template <> void moe_shared_gate_backward<Device::CUDA, bf16>(
    bf16* dy, bf16* dz, const bf16* dout, const bf16* y, const bf16* z, int N, int C) {
  shared_gate_backward_launch(dy, dz, dout, y, z, N, C);
}
template <> void moe_shared_gate_backward<Device::CUDA, fp16>(
    fp16* dy, fp16* dz, const fp16* dout, const fp16* y, const fp16* z, int N, int C) {
  shared_gate_backward_launch(dy, dz, dout, y, z, N, C);
}

}  // namespace kernels
