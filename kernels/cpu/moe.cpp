// kernels/cpu/moe.cpp: the mixture-of-experts ops of kernels/ops/moe.h, CPU twins.
//
// Router (fp32 whatever the storage): top-k selection and gates, the load-balancing scores,
// the aux loss as a weighted sum and the z loss. The per-row math (the tie rule, the three
// gate formulas and their backward) is kernels/math.h moe_*_row, shared with the CUDA kernel.
//   aux / seq-aux loss   sum_t sum_e scores[t,e] w[t / group, e]   (double accumulation),
//                        w = (float)(scale counts) (kernels/math.h moe_aux_weight)
//   z loss               sum_t lse_t^2,  d/dl_te = 2 lse_t softmax(l_t)_e
// Dispatch: pair p = t*k + s is token t's s-th expert. Permute gathers pair rows into the
// experts' order (row_pair: permuted row -> pair, -1 padding); unpermute sums each token's k
// expert outputs back in slot order (slots: pair -> permuted row, -1 dropped), which is also
// permute's backward:
//   permute     out[j] = in[row_pair[j] / k],         out_gates[j] = gates[row_pair[j]]
//   unpermute   out[t] = sum_{s<k} in[slots[t k + s]]  (fp32, s ascending)
// Expert activations with the gate after them, row j of out = act(in_j) gate_j:
//   swiglu   out = silu(g) u gate;  dg = dout gate u silu'(g), du = dout gate silu(g),
//            dgate = sum_f dout silu(g) u
//   gelu     out = gelu(x) gate;    dx = dout gate gelu'(x),  dgate = sum_f dout gelu(x)
// Shared-expert gate: out += sigmoid(z) y;  dy = sigmoid(z) dout, dz = s(1-s) sum_c dout y.
// The CPU runs one loop per op whatever the `fused` flag says (fusion is a CUDA launch choice).
// 16-bit storage: only the token rows are widened and rounded (kernels/cpu/widen.h); gates,
// probabilities and logits are fp32 whatever the storage.
//
// defines the CPU twins of kernels/ops/moe.h: moe_router_topk, moe_router_topk_backward,
//          moe_balancing_scores, moe_balancing_scores_backward, moe_weighted_sum,
//          moe_weighted_sum_backward, moe_z_loss_sum, moe_z_loss_backward, moe_permute,
//          moe_unpermute, moe_unpermute_gates, moe_swiglu_forward, moe_swiglu_backward,
//          moe_gelu_forward, moe_gelu_backward, moe_shared_gate_forward,
//          moe_shared_gate_backward
#include <algorithm>

#include "kernels/cpu/widen.h"  // defines: Input, Widened
#include "kernels/math.h"
#include "kernels/ops/moe.h"

namespace kernels {

// ---- router ---------------------------------------------------------------------------------

template <> void moe_router_topk<Device::CPU>(float* gates, int* experts, const float* logits,
                                              const float* expert_bias, int N, int E, int k,
                                              int score, bool pre_softmax, float scaling) {
  for (int t = 0; t < N; t++)
    moe_topk_row(gates + (size_t)t * k, experts + (size_t)t * k, logits + (size_t)t * E,
                 expert_bias, E, k, score, pre_softmax, scaling);
}

template <> void moe_router_topk_backward<Device::CPU>(
    float* dlogits, const float* dgates, const float* logits, const int* experts, int N, int E,
    int k, int score, bool pre_softmax, float scaling) {
  for (int t = 0; t < N; t++)
    moe_topk_backward_row(dlogits + (size_t)t * E, dgates + (size_t)t * k,
                          logits + (size_t)t * E, experts + (size_t)t * k, E, k, score,
                          pre_softmax, scaling);
}

template <> void moe_balancing_scores<Device::CPU>(float* scores, const float* logits, int N, int E,
                                                   int score) {
  for (int t = 0; t < N; t++)
    moe_balancing_row(scores + (size_t)t * E, logits + (size_t)t * E, E, score);
}

template <> void moe_balancing_scores_backward<Device::CPU>(
    float* dlogits, const float* dscores, const float* logits, int N, int E, int score) {
  for (int t = 0; t < N; t++)
    moe_balancing_backward_row(dlogits + (size_t)t * E, dscores + (size_t)t * E,
                               logits + (size_t)t * E, E, score);
}

template <> double moe_weighted_sum<Device::CPU>(const float* scores, const int* counts,
                                                 double scale, int N, int E, int group) {
  double total = 0.0;
  for (int t = 0; t < N; t++) {
    const int* c = counts + (size_t)(t / group) * E;  // the counts of t's group
    for (int e = 0; e < E; e++) total += (double)scores[(size_t)t * E + e] * moe_aux_weight(scale, c[e]);
  }
  return total;
}

template <> void moe_weighted_sum_backward<Device::CPU>(float* dscores, const int* counts,
                                                        double scale, float factor, int N, int E,
                                                        int group) {
  for (int t = 0; t < N; t++)
    for (int e = 0; e < E; e++)
      dscores[(size_t)t * E + e] =
          moe_aux_weight(scale, counts[(size_t)(t / group) * E + e]) * factor;
}

template <> double moe_z_loss_sum<Device::CPU>(const float* logits, int N, int E) {
  double total = 0.0;
  for (int t = 0; t < N; t++) {
    const double lse = moe_logsumexp_row(logits + (size_t)t * E, E);
    total += lse * lse;
  }
  return total;
}

template <> void moe_z_loss_backward<Device::CPU>(float* dlogits, const float* logits, int N, int E,
                                                  float coeff) {
  for (int t = 0; t < N; t++)
    moe_z_loss_backward_row(dlogits + (size_t)t * E, logits + (size_t)t * E, E, coeff);
}

// ---- dispatch -------------------------------------------------------------------------------

template <> void moe_permute<Device::CPU, float>(float* out, float* out_gates, const float* in,
                                                 const float* gates, const int* row_pair, int M,
                                                 int C, int k, bool /*fused*/) {
  for (int j = 0; j < M; j++) {
    const int p = row_pair[j];
    float* dst = out + (size_t)j * C;
    const float* src = p >= 0 ? in + (size_t)(p / k) * C : nullptr;  // token p / k's row
    for (int c = 0; c < C; c++) dst[c] = src ? src[c] : 0.0f;
    if (out_gates) out_gates[j] = p >= 0 ? gates[p] : 0.0f;
  }
}

template <> void moe_unpermute<Device::CPU, float>(float* out, const float* in, const int* slots,
                                                   int N, int C, int k, bool /*fused*/) {
  for (int t = 0; t < N; t++) {
    float* dst = out + (size_t)t * C;
    for (int c = 0; c < C; c++) dst[c] = 0.0f;
    for (int s = 0; s < k; s++) {
      const int row = slots[(size_t)t * k + s];
      if (row < 0) continue;  // dropped by the capacity
      const float* src = in + (size_t)row * C;
      for (int c = 0; c < C; c++) dst[c] += src[c];
    }
  }
}

template <> void moe_unpermute_gates<Device::CPU>(float* dgates, const float* dperm_gates,
                                                  const int* slots, int pairs) {
  for (int p = 0; p < pairs; p++) dgates[p] = slots[p] >= 0 ? dperm_gates[slots[p]] : 0.0f;
}

// ---- expert activations -----------------------------------------------------------------------

template <> void moe_swiglu_forward<Device::CPU, float>(float* out, const float* in,
                                                        const float* gates, int M, int F) {
  for (int j = 0; j < M; j++) {
    const float* row = in + (size_t)j * 2 * F;  // [gate | up]
    for (int f = 0; f < F; f++) out[(size_t)j * F + f] = silu(row[f]) * row[F + f] * gates[j];
  }
}

template <> void moe_swiglu_backward<Device::CPU, float>(float* din, float* dgates,
                                                         const float* dout, const float* in,
                                                         const float* gates, int M, int F) {
  for (int j = 0; j < M; j++) {
    const float* row = in + (size_t)j * 2 * F;
    float* drow = din + (size_t)j * 2 * F;
    const float* g = dout + (size_t)j * F;
    float dgate = 0.0f;
    for (int f = 0; f < F; f++) {
      const float up = row[F + f], a = silu(row[f]), gg = g[f] * gates[j];
      drow[f] = gg * up * silu_grad(row[f]);
      drow[F + f] = gg * a;
      dgate += g[f] * (a * up);
    }
    dgates[j] = dgate;
  }
}

template <> void moe_gelu_forward<Device::CPU, float>(float* out, const float* in,
                                                      const float* gates, int M, int F) {
  for (int j = 0; j < M; j++)
    for (int f = 0; f < F; f++) {
      const size_t i = (size_t)j * F + f;
      out[i] = gelu(in[i]) * gates[j];
    }
}

template <> void moe_gelu_backward<Device::CPU, float>(float* din, float* dgates, const float* dout,
                                                       const float* in, const float* gates, int M,
                                                       int F) {
  for (int j = 0; j < M; j++) {
    float dgate = 0.0f;
    for (int f = 0; f < F; f++) {
      const size_t i = (size_t)j * F + f;
      din[i] = dout[i] * gates[j] * gelu_grad(in[i]);
      dgate += dout[i] * gelu(in[i]);
    }
    dgates[j] = dgate;
  }
}

// ---- shared-expert gate ------------------------------------------------------------------------

template <> void moe_shared_gate_forward<Device::CPU, float>(float* out, const float* y,
                                                             const float* z, int N, int C) {
  for (int t = 0; t < N; t++) {
    const float s = sigmoid(z[t]);
    for (int c = 0; c < C; c++) out[(size_t)t * C + c] += s * y[(size_t)t * C + c];
  }
}

template <> void moe_shared_gate_backward<Device::CPU, float>(
    float* dy, float* dz, const float* dout, const float* y, const float* z, int N, int C) {
  for (int t = 0; t < N; t++) {
    const float s = sigmoid(z[t]);
    float dot = 0.0f;
    for (int c = 0; c < C; c++) {
      const size_t i = (size_t)t * C + c;
      dy[i] = s * dout[i];
      dot += dout[i] * y[i];
    }
    dz[t] = s * (1.0f - s) * dot;
  }
}

// ---- 16-bit storage (bf16, fp16): widen the token rows, the fp32 twin above, round -------------
using cpu::Input;
using cpu::Widened;

// Rows of `in` that a permutation reads: 1 + the largest token (or permuted row) named.
static size_t rows_named(const int* idx, size_t n, int divisor) {
  int rows = 0;
  for (size_t i = 0; i < n; i++)
    if (idx[i] >= 0) rows = std::max(rows, idx[i] / divisor + 1);
  return (size_t)rows;
}
template <class H>
static void moe_permute_16(H* out, float* out_gates, const H* in, const float* gates,
                           const int* row_pair, int M, int C, int k, bool fused) {
  Input I(in, rows_named(row_pair, M, k) * C);
  Widened O(out, (size_t)M * C);
  moe_permute<Device::CPU>(O.data(), out_gates, I.data(), gates, row_pair, M, C, k, fused);
}
template <> void moe_permute<Device::CPU, bf16>(bf16* out, float* out_gates, const bf16* in,
                                                const float* gates, const int* row_pair, int M,
                                                int C, int k, bool fused) {
  moe_permute_16(out, out_gates, in, gates, row_pair, M, C, k, fused);
}
template <> void moe_permute<Device::CPU, fp16>(fp16* out, float* out_gates, const fp16* in,
                                                const float* gates, const int* row_pair, int M,
                                                int C, int k, bool fused) {
  moe_permute_16(out, out_gates, in, gates, row_pair, M, C, k, fused);
}
template <class H>
static void moe_unpermute_16(H* out, const H* in, const int* slots, int N, int C, int k,
                             bool fused) {
  Input I(in, rows_named(slots, (size_t)N * k, 1) * C);
  Widened O(out, (size_t)N * C);
  moe_unpermute<Device::CPU>(O.data(), I.data(), slots, N, C, k, fused);
}
template <> void moe_unpermute<Device::CPU, bf16>(bf16* out, const bf16* in, const int* slots,
                                                  int N, int C, int k, bool fused) {
  moe_unpermute_16(out, in, slots, N, C, k, fused);
}
template <> void moe_unpermute<Device::CPU, fp16>(fp16* out, const fp16* in, const int* slots,
                                                  int N, int C, int k, bool fused) {
  moe_unpermute_16(out, in, slots, N, C, k, fused);
}

template <class H>
static void moe_swiglu_forward_16(H* out, const H* in, const float* gates, int M, int F) {
  Input I(in, (size_t)M * 2 * F);
  Widened O(out, (size_t)M * F);
  moe_swiglu_forward<Device::CPU>(O.data(), I.data(), gates, M, F);
}
template <> void moe_swiglu_forward<Device::CPU, bf16>(bf16* out, const bf16* in,
                                                       const float* gates, int M, int F) {
  moe_swiglu_forward_16(out, in, gates, M, F);
}
template <> void moe_swiglu_forward<Device::CPU, fp16>(fp16* out, const fp16* in,
                                                       const float* gates, int M, int F) {
  moe_swiglu_forward_16(out, in, gates, M, F);
}
template <class H>
static void moe_swiglu_backward_16(H* din, float* dgates, const H* dout, const H* in,
                                   const float* gates, int M, int F) {
  Input G(dout, (size_t)M * F), I(in, (size_t)M * 2 * F);
  Widened D(din, (size_t)M * 2 * F);
  moe_swiglu_backward<Device::CPU>(D.data(), dgates, G.data(), I.data(), gates, M, F);
}
template <> void moe_swiglu_backward<Device::CPU, bf16>(bf16* din, float* dgates, const bf16* dout,
                                                        const bf16* in, const float* gates, int M,
                                                        int F) {
  moe_swiglu_backward_16(din, dgates, dout, in, gates, M, F);
}
template <> void moe_swiglu_backward<Device::CPU, fp16>(fp16* din, float* dgates, const fp16* dout,
                                                        const fp16* in, const float* gates, int M,
                                                        int F) {
  moe_swiglu_backward_16(din, dgates, dout, in, gates, M, F);
}
template <class H>
static void moe_gelu_forward_16(H* out, const H* in, const float* gates, int M, int F) {
  Input I(in, (size_t)M * F);
  Widened O(out, (size_t)M * F);
  moe_gelu_forward<Device::CPU>(O.data(), I.data(), gates, M, F);
}
template <> void moe_gelu_forward<Device::CPU, bf16>(bf16* out, const bf16* in, const float* gates,
                                                     int M, int F) {
  moe_gelu_forward_16(out, in, gates, M, F);
}
template <> void moe_gelu_forward<Device::CPU, fp16>(fp16* out, const fp16* in, const float* gates,
                                                     int M, int F) {
  moe_gelu_forward_16(out, in, gates, M, F);
}
template <class H>
static void moe_gelu_backward_16(H* din, float* dgates, const H* dout, const H* in,
                                 const float* gates, int M, int F) {
  Input G(dout, (size_t)M * F), I(in, (size_t)M * F);
  Widened D(din, (size_t)M * F);
  moe_gelu_backward<Device::CPU>(D.data(), dgates, G.data(), I.data(), gates, M, F);
}
template <> void moe_gelu_backward<Device::CPU, bf16>(bf16* din, float* dgates, const bf16* dout,
                                                      const bf16* in, const float* gates, int M,
                                                      int F) {
  moe_gelu_backward_16(din, dgates, dout, in, gates, M, F);
}
template <> void moe_gelu_backward<Device::CPU, fp16>(fp16* din, float* dgates, const fp16* dout,
                                                      const fp16* in, const float* gates, int M,
                                                      int F) {
  moe_gelu_backward_16(din, dgates, dout, in, gates, M, F);
}

template <class H>
static void moe_shared_gate_forward_16(H* out, const H* y, const H* z, int N, int C) {
  Input Y(y, (size_t)N * C), Z(z, N);
  Widened O(out, (size_t)N * C);
  moe_shared_gate_forward<Device::CPU>(O.data(), Y.data(), Z.data(), N, C);
}
template <> void moe_shared_gate_forward<Device::CPU, bf16>(bf16* out, const bf16* y, const bf16* z,
    int N, int C) {
  moe_shared_gate_forward_16(out, y, z, N, C);
}
template <> void moe_shared_gate_forward<Device::CPU, fp16>(fp16* out, const fp16* y, const fp16* z,
    int N, int C) {
  moe_shared_gate_forward_16(out, y, z, N, C);
}
template <class H>
static void moe_shared_gate_backward_16(H* dy, H* dz, const H* dout, const H* y, const H* z, int N,
                                        int C) {
  Input G(dout, (size_t)N * C), Y(y, (size_t)N * C), Z(z, N);
  Widened DY(dy, (size_t)N * C), DZ(dz, N);
  moe_shared_gate_backward<Device::CPU>(DY.data(), DZ.data(), G.data(), Y.data(), Z.data(), N, C);
}
template <> void moe_shared_gate_backward<Device::CPU, bf16>(bf16* dy, bf16* dz, const bf16* dout,
    const bf16* y, const bf16* z, int N, int C) {
  moe_shared_gate_backward_16(dy, dz, dout, y, z, N, C);
}
template <> void moe_shared_gate_backward<Device::CPU, fp16>(fp16* dy, fp16* dz, const fp16* dout,
    const fp16* y, const fp16* z, int N, int C) {
  moe_shared_gate_backward_16(dy, dz, dout, y, z, N, C);
}

}  // namespace kernels
