// kernels/cuda/elementwise.cu: elementwise ops, bias, activations, dropout, and the fp32 <->
// bf16 conversion: the CUDA twins of kernels/ops/elementwise.h, mirroring
// kernels/cpu/elementwise.cpp.
//
// Each kernel is the loop body of its CPU twin (NAME<Device::CPU>) run by one thread per
// element (GRID_STRIDE_LOOP), calling the same kernels/math.h function. Kernels are
// templated on the storage type T (float or bf16): they load with to_float, compute in fp32
// and write with store, so for T = float they are the plain fp32 loops and for T = bf16 the
// "widen, compute, round" of the CPU's bf16 twins. Each op has one template launcher; its
// twins NAME<Device::CUDA, float> and NAME<Device::CUDA, bf16> are one-liners over it.
//
// The only reduction here is over rows of a (N, C) matrix (bias_backward); it sums each
// column in a fixed order, so it is deterministic.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/math.h"
#include "kernels/ops/elementwise.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), cublas(), kThreads, grid_1d, the reductions

// ---- elementwise ---------------------------------------------------------------------------
// mirrors add<Device::CPU>
template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(out[i], to_float(a[i]) + to_float(b[i]));
}
// mirrors accumulate<Device::CPU>
template <typename T>
__global__ void accumulate_kernel(T* out, const T* a, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(out[i], to_float(out[i]) + to_float(a[i]));
}
// mirrors scale<Device::CPU> (fp32 only: elementwise.h has no bf16 scale)
__global__ void scale_kernel(float* x, float s, size_t n) { GRID_STRIDE_LOOP(i, n) x[i] *= s; }
// mirrors add_bias<Device::CPU>: element (row, c) of the flat index i is c = i % C.
template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, size_t n, int C) {
  GRID_STRIDE_LOOP(i, n) store(y[i], to_float(y[i]) + to_float(bias[i % C]));
}
// out = round(in) (float -> bf16, nearest even) or widen(in) (bf16 -> float).
template <typename Out, typename In>
__global__ void convert_kernel(Out* out, const In* in, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(out[i], to_float(in[i]));
}

template <typename T>
static void add_launch(T* out, const T* a, const T* b, size_t n) {
  if (n == 0) return;
  add_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, a, b, n);
  KERNEL_CHECK();
}
template <typename T>
static void accumulate_launch(T* out, const T* a, size_t n) {
  if (n == 0) return;
  accumulate_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, a, n);
  KERNEL_CHECK();
}
template <typename T>
static void add_bias_launch(T* y, const T* bias, int N, int C) {
  size_t n = (size_t)N * C;
  if (n == 0) return;
  add_bias_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(y, bias, n, C);
  KERNEL_CHECK();
}
template <typename Out, typename In>
static void convert_launch(Out* out, const In* in, size_t n) {
  if (n == 0) return;
  convert_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, in, n);
  KERNEL_CHECK();
}

template <> void add<Device::CUDA, float>(float* out, const float* a, const float* b, size_t n) {
  add_launch(out, a, b, n);
}
template <> void add<Device::CUDA, bf16>(bf16* out, const bf16* a, const bf16* b, size_t n) {
  add_launch(out, a, b, n);
}
template <> void add<Device::CUDA, fp16>(fp16* out, const fp16* a, const fp16* b, size_t n) {
  add_launch(out, a, b, n);
}
template <> void accumulate<Device::CUDA, float>(float* out, const float* a, size_t n) {
  accumulate_launch(out, a, n);
}
template <> void accumulate<Device::CUDA, bf16>(bf16* out, const bf16* a, size_t n) {
  accumulate_launch(out, a, n);
}
template <> void accumulate<Device::CUDA, fp16>(fp16* out, const fp16* a, size_t n) {
  accumulate_launch(out, a, n);
}
template <> void scale<Device::CUDA>(float* x, float s, size_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(x, s, n);
  KERNEL_CHECK();
}
template <> void add_bias<Device::CUDA, float>(float* y, const float* bias, int N, int C) {
  add_bias_launch(y, bias, N, C);
}
template <> void add_bias<Device::CUDA, bf16>(bf16* y, const bf16* bias, int N, int C) {
  add_bias_launch(y, bias, N, C);
}
template <> void add_bias<Device::CUDA, fp16>(fp16* y, const fp16* bias, int N, int C) {
  add_bias_launch(y, bias, N, C);
}
template <> void convert<Device::CUDA, bf16, float>(bf16* out, const float* in, size_t n) {
  convert_launch(out, in, n);
}
template <> void convert<Device::CUDA, fp16, float>(fp16* out, const float* in, size_t n) {
  convert_launch(out, in, n);
}
template <> void convert<Device::CUDA, float, bf16>(float* out, const bf16* in, size_t n) {
  convert_launch(out, in, n);
}
template <> void convert<Device::CUDA, float, fp16>(float* out, const fp16* in, size_t n) {
  convert_launch(out, in, n);
}

// ---- column sums ---------------------------------------------------------------------------
// mirrors bias_backward<Device::CPU>: dbias[c] += sum_n dy[n, c].
// A (32 x 16) block owns 32 adjacent columns: threadIdx.x picks the column, so each warp
// reads 32 consecutive elements of one row (coalesced); threadIdx.y walks the rows with
// stride 16; the 16 partial sums of a column then meet in shared memory in a fixed order.
// The sum stays fp32 and is added into a bf16 dbias once, so it is rounded once.
constexpr int kColumnRows = 16;
template <typename T>
__global__ void bias_backward_kernel(T* dbias, const T* dy, int N, int C) {
  __shared__ float partial[kColumnRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < C)
    for (int n = threadIdx.y; n < N; n += kColumnRows) s += to_float(dy[(size_t)n * C + c]);
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
    for (int r = 0; r < kColumnRows; r++) total += partial[r][threadIdx.x];
    store(dbias[c], to_float(dbias[c]) + total);
  }
}

template <typename T>
static void bias_backward_launch(T* dbias, const T* dy, int N, int C) {
  if (N == 0 || C == 0) return;
  bias_backward_kernel<<<(C + 31) / 32, dim3(32, kColumnRows), 0, stream()>>>(dbias, dy, N, C);
  KERNEL_CHECK();
}
template <> void bias_backward<Device::CUDA, float>(float* dbias, const float* dy, int N, int C) {
  bias_backward_launch(dbias, dy, N, C);
}
template <> void bias_backward<Device::CUDA, bf16>(bf16* dbias, const bf16* dy, int N, int C) {
  bias_backward_launch(dbias, dy, N, C);
}
template <> void bias_backward<Device::CUDA, fp16>(fp16* dbias, const fp16* dy, int N, int C) {
  bias_backward_launch(dbias, dy, N, C);
}

// ---- activations ---------------------------------------------------------------------------
// mirrors gelu_forward<Device::CPU>
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* in, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(out[i], gelu(to_float(in[i])));
}
// mirrors gelu_backward<Device::CPU>: din = dout * gelu'(in)
template <typename T>
__global__ void gelu_backward_kernel(T* din, const T* dout, const T* in, size_t n) {
  GRID_STRIDE_LOOP(i, n) store(din[i], to_float(dout[i]) * gelu_grad(to_float(in[i])));
}
// mirrors swiglu_forward<Device::CPU>: row r of in is [gate(F) | up(F)]; out[r, f] = silu(gate) *
// up.
template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* in, size_t total, int F) {
  GRID_STRIDE_LOOP(i, total) {
    size_t r = i / F, f = i % F;
    const T* row = in + r * 2 * F;
    store(out[i], silu(to_float(row[f])) * to_float(row[F + f]));
  }
}
// mirrors swiglu_backward<Device::CPU>: d gate = dout * up * silu'(gate), d up = dout * silu(gate).
template <typename T>
__global__ void swiglu_backward_kernel(T* din, const T* dout, const T* in, size_t total, int F) {
  GRID_STRIDE_LOOP(i, total) {
    size_t r = i / F, f = i % F;
    const T* row = in + r * 2 * F;
    T* drow = din + r * 2 * F;
    float gate = to_float(row[f]), up = to_float(row[F + f]), g = to_float(dout[i]);
    store(drow[f], g * up * silu_grad(gate));
    store(drow[F + f], g * silu(gate));
  }
}

template <typename T>
static void gelu_forward_launch(T* out, const T* in, size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, in, n);
  KERNEL_CHECK();
}
template <typename T>
static void gelu_backward_launch(T* din, const T* dout, const T* in, size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(din, dout, in, n);
  KERNEL_CHECK();
}
template <typename T>
static void swiglu_forward_launch(T* out, const T* in, int N, int F) {
  size_t total = (size_t)N * F;
  if (total == 0) return;
  swiglu_forward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(out, in, total, F);
  KERNEL_CHECK();
}
template <typename T>
static void swiglu_backward_launch(T* din, const T* dout, const T* in, int N, int F) {
  size_t total = (size_t)N * F;
  if (total == 0) return;
  swiglu_backward_kernel<<<grid_1d(total), kThreads, 0, stream()>>>(din, dout, in, total, F);
  KERNEL_CHECK();
}

template <> void gelu_forward<Device::CUDA, float>(float* out, const float* in, size_t n) {
  gelu_forward_launch(out, in, n);
}
template <> void gelu_forward<Device::CUDA, bf16>(bf16* out, const bf16* in, size_t n) {
  gelu_forward_launch(out, in, n);
}
template <> void gelu_forward<Device::CUDA, fp16>(fp16* out, const fp16* in, size_t n) {
  gelu_forward_launch(out, in, n);
}
template <> void gelu_backward<Device::CUDA, float>(float* din, const float* dout, const float* in,
                                                    size_t n) {
  gelu_backward_launch(din, dout, in, n);
}
template <> void gelu_backward<Device::CUDA, bf16>(bf16* din, const bf16* dout, const bf16* in,
                                                   size_t n) {
  gelu_backward_launch(din, dout, in, n);
}
template <> void gelu_backward<Device::CUDA, fp16>(fp16* din, const fp16* dout, const fp16* in,
                                                   size_t n) {
  gelu_backward_launch(din, dout, in, n);
}
template <> void swiglu_forward<Device::CUDA, float>(float* out, const float* in, int N, int F) {
  swiglu_forward_launch(out, in, N, F);
}
template <> void swiglu_forward<Device::CUDA, bf16>(bf16* out, const bf16* in, int N, int F) {
  swiglu_forward_launch(out, in, N, F);
}
template <> void swiglu_forward<Device::CUDA, fp16>(fp16* out, const fp16* in, int N, int F) {
  swiglu_forward_launch(out, in, N, F);
}
template <> void swiglu_backward<Device::CUDA, float>(float* din, const float* dout,
                                                      const float* in, int N, int F) {
  swiglu_backward_launch(din, dout, in, N, F);
}
template <> void swiglu_backward<Device::CUDA, bf16>(bf16* din, const bf16* dout, const bf16* in,
                                                     int N, int F) {
  swiglu_backward_launch(din, dout, in, N, F);
}
template <> void swiglu_backward<Device::CUDA, fp16>(fp16* din, const fp16* dout, const fp16* in,
                                                     int N, int F) {
  swiglu_backward_launch(din, dout, in, N, F);
}

// ---- dropout -------------------------------------------------------------------------------
// Kept values are scaled by 1/(1-p) ("inverted dropout", so inference needs no rescale);
// p >= 1 drops everything, and the scale 0 avoids 0 * inf = NaN.
static float keep_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

// mirrors dropout_forward<Device::CPU>: the mask is a pure function of (seed, stream, index), with
// index = pos.element(i, width) the element's single-rank index (i itself by default), so it
// does not depend on T.
template <typename T>
__global__ void dropout_forward_kernel(T* out, uint8_t* mask, const T* in, size_t n, float p,
                                       float kept_scale, uint64_t seed, uint64_t stream,
                                       TokenPositions pos, int width) {
  GRID_STRIDE_LOOP(i, n) {
    bool keep = p <= 0.0f || dropout_keep(seed, stream, pos.element(i, width), p);
    mask[i] = keep ? 1 : 0;
    store(out[i], keep ? to_float(in[i]) * kept_scale : 0.0f);
  }
}
// mirrors dropout_backward<Device::CPU>: din = dout * mask / (1-p)
template <typename T>
__global__ void dropout_backward_kernel(T* din, const T* dout, const uint8_t* mask, size_t n,
                                        float kept_scale) {
  GRID_STRIDE_LOOP(i, n) store(din[i], mask[i] ? to_float(dout[i]) * kept_scale : 0.0f);
}

template <typename T>
static void dropout_forward_launch(T* out, uint8_t* mask, const T* in, size_t n, float p,
                                   uint64_t seed, uint64_t stream_id, const TokenPositions& pos,
                                   int width) {
  if (n == 0) return;
  if (width <= 0) throw std::invalid_argument("dropout_forward: width must be positive");
  dropout_forward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(out, mask, in, n, p, keep_scale(p),
                                                                seed, stream_id, pos, width);
  KERNEL_CHECK();
}
template <typename T>
static void dropout_backward_launch(T* din, const T* dout, const uint8_t* mask, size_t n,
                                    float p) {
  if (n == 0) return;
  dropout_backward_kernel<<<grid_1d(n), kThreads, 0, stream()>>>(din, dout, mask, n, keep_scale(p));
  KERNEL_CHECK();
}

template <> void dropout_forward<Device::CUDA, float>(
    float* out, uint8_t* mask, const float* in, size_t n, float p, uint64_t seed,
    uint64_t stream_id, const TokenPositions& pos, int width) {
  dropout_forward_launch(out, mask, in, n, p, seed, stream_id, pos, width);
}
template <> void dropout_forward<Device::CUDA, bf16>(
    bf16* out, uint8_t* mask, const bf16* in, size_t n, float p, uint64_t seed, uint64_t stream_id,
    const TokenPositions& pos, int width) {
  dropout_forward_launch(out, mask, in, n, p, seed, stream_id, pos, width);
}
template <> void dropout_forward<Device::CUDA, fp16>(
    fp16* out, uint8_t* mask, const fp16* in, size_t n, float p, uint64_t seed, uint64_t stream_id,
    const TokenPositions& pos, int width) {
  dropout_forward_launch(out, mask, in, n, p, seed, stream_id, pos, width);
}
template <> void dropout_backward<Device::CUDA, float>(float* din, const float* dout,
                                                       const uint8_t* mask, size_t n, float p) {
  dropout_backward_launch(din, dout, mask, n, p);
}
template <> void dropout_backward<Device::CUDA, bf16>(bf16* din, const bf16* dout,
                                                      const uint8_t* mask, size_t n, float p) {
  dropout_backward_launch(din, dout, mask, n, p);
}
template <> void dropout_backward<Device::CUDA, fp16>(fp16* din, const fp16* dout,
                                                      const uint8_t* mask, size_t n, float p) {
  dropout_backward_launch(din, dout, mask, n, p);
}

}  // namespace kernels
