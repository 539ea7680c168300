// kernels/cuda/elementwise.cu: elementwise ops, bias, embedding, activations and dropout.
//
// Each kernel is the loop body of its CPU twin (kernels::cpu::NAME) run by one thread per
// element (GRID_STRIDE_LOOP), calling the same kernels/math.h function. The only
// reductions here are over rows of a (N, C) matrix (bias_backward, the position
// embedding's gradient); they sum each column in a fixed order, so they are deterministic.
// The token embedding's gradient uses atomicAdd (tokens repeat), so its summation order,
// and with it the last bits, vary from run to run.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda_ops.h"
#include "kernels/math.h"

namespace kernels {
namespace cuda {

// ---- elementwise ---------------------------------------------------------------------------
// mirrors cpu::add
__global__ void add_kernel(float* out, const float* a, const float* b, size_t n) {
  GRID_STRIDE_LOOP(i, n) out[i] = a[i] + b[i];
}
// mirrors cpu::accumulate
__global__ void accumulate_kernel(float* out, const float* a, size_t n) {
  GRID_STRIDE_LOOP(i, n) out[i] += a[i];
}
// mirrors cpu::scale
__global__ void scale_kernel(float* x, float s, size_t n) { GRID_STRIDE_LOOP(i, n) x[i] *= s; }
// mirrors cpu::add_bias: element (row, c) of the flat index i is c = i % C.
__global__ void add_bias_kernel(float* y, const float* bias, size_t n, int C) {
  GRID_STRIDE_LOOP(i, n) y[i] += bias[i % C];
}

void add(float* out, const float* a, const float* b, size_t n) {
  if (n == 0) return;
  add_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, a, b, n);
  KERNEL_CHECK();
}
void accumulate(float* out, const float* a, size_t n) {
  if (n == 0) return;
  accumulate_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, a, n);
  KERNEL_CHECK();
}
void scale(float* x, float s, size_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(x, s, n);
  KERNEL_CHECK();
}
void add_bias(float* y, const float* bias, int N, int C) {
  size_t n = (size_t)N * C;
  if (n == 0) return;
  add_bias_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(y, bias, n, C);
  KERNEL_CHECK();
}

// ---- column sums ---------------------------------------------------------------------------
// mirrors cpu::bias_backward: dbias[c] += sum_n dy[n, c].
// A (32 x 16) block owns 32 adjacent columns: threadIdx.x picks the column, so each warp
// reads 32 consecutive floats of one row (coalesced); threadIdx.y walks the rows with
// stride 16; the 16 partial sums of a column then meet in shared memory in a fixed order.
constexpr int kColumnRows = 16;
__global__ void bias_backward_kernel(float* dbias, const float* dy, int N, int C) {
  __shared__ float partial[kColumnRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < C)
    for (int n = threadIdx.y; n < N; n += kColumnRows) s += dy[(size_t)n * C + c];
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
    for (int r = 0; r < kColumnRows; r++) total += partial[r][threadIdx.x];
    dbias[c] += total;
  }
}

void bias_backward(float* dbias, const float* dy, int N, int C) {
  if (N == 0 || C == 0) return;
  bias_backward_kernel<<<(C + 31) / 32, dim3(32, kColumnRows), 0, stream()>>>(dbias, dy, N, C);
  KERNEL_CHECK();
}

// ---- embedding -----------------------------------------------------------------------------
// mirrors cpu::embedding_forward: out[n, c] = wte[tok[n], c] + wpe[n % seq_len, c].
__global__ void embedding_forward_kernel(float* out, const int* tokens, const float* wte,
                                         const float* wpe, size_t total, int seq_len, int C) {
  GRID_STRIDE_LOOP(i, total) {
    size_t n = i / C;
    int c = (int)(i % C);
    float x = wte[(size_t)tokens[n] * C + c];
    if (wpe != nullptr) x += wpe[(n % seq_len) * C + c];
    out[i] = x;
  }
}

// mirrors cpu::embedding_backward (token part): dwte[tok[n], c] += dout[n, c]. Several rows
// may carry the same token, hence atomicAdd (order-nondeterministic).
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int* tokens,
                                              size_t total, int C) {
  GRID_STRIDE_LOOP(i, total) {
    size_t n = i / C;
    int c = (int)(i % C);
    atomicAdd(&dwte[(size_t)tokens[n] * C + c], dout[i]);
  }
}

// mirrors cpu::embedding_backward (position part): dwpe[s, c] += sum over rows n = s, s +
// seq_len, ... of dout[n, c]. One thread per (s, c) walks its rows: deterministic.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int N, int seq_len,
                                              int C) {
  GRID_STRIDE_LOOP(i, (size_t)seq_len * C) {
    size_t s = i / C, c = i % C;
    float acc = 0.0f;
    for (size_t n = s; n < (size_t)N; n += seq_len) acc += dout[n * C + c];
    dwpe[i] += acc;
  }
}

void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int N,
                       int seq_len, int C) {
  size_t total = (size_t)N * C;
  if (total == 0) return;
  embedding_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, tokens, wte, wpe, total,
                                                                      seq_len, C);
  KERNEL_CHECK();
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int N,
                        int seq_len, int C) {
  size_t total = (size_t)N * C;
  if (total == 0) return;
  embedding_backward_wte_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(dwte, dout, tokens,
                                                                           total, C);
  KERNEL_CHECK();
  if (dwpe != nullptr) {
    embedding_backward_wpe_kernel<<<grid_1d((size_t)seq_len * C), kThreads, 0, stream()>>>(
        dwpe, dout, N, seq_len, C);
    KERNEL_CHECK();
  }
}

// ---- activations ---------------------------------------------------------------------------
// mirrors cpu::gelu_forward
__global__ void gelu_forward_kernel(float* out, const float* in, size_t n) {
  GRID_STRIDE_LOOP(i, n) out[i] = gelu(in[i]);
}
// mirrors cpu::gelu_backward: din = dout * gelu'(in)
__global__ void gelu_backward_kernel(float* din, const float* dout, const float* in, size_t n) {
  GRID_STRIDE_LOOP(i, n) din[i] = dout[i] * gelu_grad(in[i]);
}
// mirrors cpu::swiglu_forward: row r of in is [gate(F) | up(F)]; out[r, f] = silu(gate) * up.
__global__ void swiglu_forward_kernel(float* out, const float* in, size_t total, int F) {
  GRID_STRIDE_LOOP(i, total) {
    size_t r = i / F, f = i % F;
    const float* row = in + r * 2 * F;
    out[i] = silu(row[f]) * row[F + f];
  }
}
// mirrors cpu::swiglu_backward: d gate = dout * up * silu'(gate), d up = dout * silu(gate).
__global__ void swiglu_backward_kernel(float* din, const float* dout, const float* in, size_t total,
                                       int F) {
  GRID_STRIDE_LOOP(i, total) {
    size_t r = i / F, f = i % F;
    const float* row = in + r * 2 * F;
    float* drow = din + r * 2 * F;
    float gate = row[f], up = row[F + f];
    drow[f] = dout[i] * up * silu_grad(gate);
    drow[F + f] = dout[i] * silu(gate);
  }
}

void gelu_forward(float* out, const float* in, size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, in, n);
  KERNEL_CHECK();
}
void gelu_backward(float* din, const float* dout, const float* in, size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(din, dout, in, n);
  KERNEL_CHECK();
}
void swiglu_forward(float* out, const float* in, int N, int F) {
  size_t total = (size_t)N * F;
  if (total == 0) return;
  swiglu_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, in, total, F);
  KERNEL_CHECK();
}
void swiglu_backward(float* din, const float* dout, const float* in, int N, int F) {
  size_t total = (size_t)N * F;
  if (total == 0) return;
  swiglu_backward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(din, dout, in, total, F);
  KERNEL_CHECK();
}

// ---- dropout -------------------------------------------------------------------------------
// Kept values are scaled by 1/(1-p) ("inverted dropout", so inference needs no rescale);
// p >= 1 drops everything, and the scale 0 avoids 0 * inf = NaN.
static float keep_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

// mirrors cpu::dropout_forward: the mask is a pure function of (seed, stream, i).
__global__ void dropout_forward_kernel(float* out, uint8_t* mask, const float* in, size_t n,
                                       float p, float kept_scale, uint64_t seed, uint64_t stream) {
  GRID_STRIDE_LOOP(i, n) {
    bool keep = p <= 0.0f || dropout_keep(seed, stream, i, p);
    mask[i] = keep ? 1 : 0;
    out[i] = keep ? in[i] * kept_scale : 0.0f;
  }
}
// mirrors cpu::dropout_backward: din = dout * mask / (1-p)
__global__ void dropout_backward_kernel(float* din, const float* dout, const uint8_t* mask,
                                        size_t n, float kept_scale) {
  GRID_STRIDE_LOOP(i, n) din[i] = mask[i] ? dout[i] * kept_scale : 0.0f;
}

void dropout_forward(float* out, uint8_t* mask, const float* in, size_t n, float p, uint64_t seed,
                     uint64_t stream_id) {
  if (n == 0) return;
  dropout_forward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, mask, in, n, p, keep_scale(p),
                                                                seed, stream_id);
  KERNEL_CHECK();
}
void dropout_backward(float* din, const float* dout, const uint8_t* mask, size_t n, float p) {
  if (n == 0) return;
  dropout_backward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(din, dout, mask, n, keep_scale(p));
  KERNEL_CHECK();
}

}  // namespace cuda
}  // namespace kernels
