// kernels/ops_bf16.cpp: the bf16-storage ops of kernels/ops.h, dispatched by device (the
// attention ones: kernels/ops_bf16_attention.cpp).
//
// CPU twin of every bf16 op: widen the bf16 inputs to fp32 (exact), run the fp32 CPU twin,
// round the outputs back to bf16 (nearest even). So a bf16 run computes exactly what the
// fp32 code computes, on inputs and outputs rounded to bf16: "storage only" (notes/design.md).
// Ops that accumulate (dw += ...) widen their output first so the fp32 twin adds into it.
// The fp32 scratch of the widening lives on the host only while the op runs; it is the CPU
// twin's working memory, like cuBLAS's workspace, and not a tensor the ledger tracks.
// CUDA: the templated kernels of kernels/cuda/ (kernels/cuda_ops.h); FLOPs (and the labelled
// GEMM calls, count_gemm) are counted here with the same formulas as kernels/ops.cpp; the CPU
// path counts through the fp32 dispatcher it calls. The other kernels (kernel_counts) are
// counted here on both paths, with kernels/ops.cpp's formulas at 2 bytes a stored element
// (flash attention's launches: the CUDA path here, the CPU path in the fp32 dispatcher).
// The MoE ops keep their gates, probabilities and logits fp32 (ops.h): only the token rows
// are widened and rounded.
#include <algorithm>
#include <stdexcept>
#include <vector>
#include "kernels/cpu_ops.h"
#include "kernels/math.h"
#include "kernels/ops.h"
#include "kernels/ops_bf16_impl.h"
#ifndef PARALAB_CPU_ONLY
#include "kernels/cuda_ops.h"
#endif

namespace kernels {

using namespace bf16_impl;

// ---- GEMM: the fp32 dispatcher counts FLOPs and GEMM time for the CPU path
void gemm(Device d, bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A, int lda,
          const bf16* B, int ldb, float beta, bf16* C, int ldc) {
  if (d == Device::CUDA) count_gemm(2.0 * m * n * k);
  ON_CUDA(gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc));
  Input a(A, ta ? span(k, m, lda) : span(m, k, lda)), b(B, tb ? span(n, k, ldb) : span(k, n, ldb));
  Widened c(C, span(m, n, ldc));
  gemm(d, ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
}
void gemm(Device d, bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A, int lda,
          const bf16* B, int ldb, float beta, float* C, int ldc) {
  if (d == Device::CUDA) count_gemm(2.0 * m * n * k);
  ON_CUDA(gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc));
  Input a(A, ta ? span(k, m, lda) : span(m, k, lda)), b(B, tb ? span(n, k, ldb) : span(k, n, ldb));
  gemm(d, ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
}
void gemm_strided_batched(Device d, bool ta, bool tb, int m, int n, int k, float alpha,
                          const bf16* A, int lda, long long sa, const bf16* B, int ldb,
                          long long sb, float beta, bf16* C, int ldc, long long sc, int batch) {
  if (d == Device::CUDA) count_gemm(2.0 * m * n * k * batch);
  ON_CUDA(gemm_strided_batched(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                               batch));
  const size_t na = (size_t)sa * (batch - 1) + (ta ? span(k, m, lda) : span(m, k, lda));
  const size_t nb = (size_t)sb * (batch - 1) + (tb ? span(n, k, ldb) : span(k, n, ldb));
  Input a(A, na), b(B, nb);
  Widened c(C, (size_t)sc * (batch - 1) + span(m, n, ldc));
  gemm_strided_batched(d, ta, tb, m, n, k, alpha, a.data(), lda, sa, b.data(), ldb, sb, beta,
                       c.data(), ldc, sc, batch);
}

// Grouped: the widened spans cover every group (the furthest element any group reaches); C
// elements outside the groups round-trip exactly, so this is the per-group bf16 gemm calls.
void gemm_grouped(Device d, bool ta, bool tb, float alpha, const bf16* A, int lda, const bf16* B,
                  int ldb, float beta, bf16* C, int ldc, const GemmGroup* groups, int count) {
  if (d == Device::CUDA) count_gemm(grouped_flops(groups, count));
  ON_CUDA(gemm_grouped(ta, tb, alpha, A, lda, B, ldb, beta, C, ldc, groups, count));
  size_t na = 0, nb = 0, nc = 0;
  for (int i = 0; i < count; i++) {
    const GemmGroup& g = groups[i];
    if (g.m == 0 || g.n == 0 || g.k == 0) continue;
    na = std::max(na, (size_t)g.a_offset + (ta ? span(g.k, g.m, lda) : span(g.m, g.k, lda)));
    nb = std::max(nb, (size_t)g.b_offset + (tb ? span(g.n, g.k, ldb) : span(g.k, g.n, ldb)));
    nc = std::max(nc, (size_t)g.c_offset + span(g.m, g.n, ldc));
  }
  Input a(A, na), b(B, nb);
  Widened c(C, nc);
  gemm_grouped(d, ta, tb, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc, groups, count);
}

void convert(Device d, bf16* out, const float* in, size_t n) {
  count_kernel(6.0 * n);
  ON_CUDA(convert(out, in, n));
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}
void convert(Device d, float* out, const bf16* in, size_t n) {
  count_kernel(6.0 * n);
  ON_CUDA(convert(out, in, n));
  for (size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

// ---- elementwise
void add(Device d, bf16* out, const bf16* a, const bf16* b, size_t n) {
  count_kernel(3.0 * n * kE);
  ON_CUDA(add(out, a, b, n));
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(to_float(a[i]) + to_float(b[i]));
}
void accumulate(Device d, bf16* out, const bf16* a, size_t n) {
  count_kernel(3.0 * n * kE);
  ON_CUDA(accumulate(out, a, n));
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(to_float(out[i]) + to_float(a[i]));
}
void add_bias(Device d, bf16* y, const bf16* bias, int N, int C) {
  count_kernel((2.0 * N * C + C) * kE);
  ON_CUDA(add_bias(y, bias, N, C));
  Widened Y(y, (size_t)N * C);
  Input b(bias, C);
  cpu::add_bias(Y.data(), b.data(), N, C);
}
void bias_backward(Device d, bf16* dbias, const bf16* dy, int N, int C) {
  count_kernel(((double)N * C + 2.0 * C) * kE);
  ON_CUDA(bias_backward(dbias, dy, N, C));
  Widened db(dbias, C);
  Input g(dy, (size_t)N * C);
  cpu::bias_backward(db.data(), g.data(), N, C);
}

// ---- embedding
// Rows of a vocab-range table that the tokens in range reach: the fp32 twin touches no other,
// so only these are widened (and, for a gradient, rounded back).
static int rows_used(const int* tokens, int vocab_start, int vocab_rows, int N) {
  int rows = 0;
  for (int i = 0; i < N; i++) {
    const int row = tokens[i] - vocab_start;
    if (row >= 0 && row < vocab_rows) rows = std::max(rows, row + 1);
  }
  return rows;
}
void embedding_forward(Device d, bf16* out, const int* tokens, const bf16* wte, int vocab_start,
                       int vocab_rows, int N, int C) {
  count_kernel(4.0 * N + 2.0 * N * C * kE);
  ON_CUDA(embedding_forward(out, tokens, wte, vocab_start, vocab_rows, N, C));
  Input e(wte, (size_t)rows_used(tokens, vocab_start, vocab_rows, N) * C);
  Widened o(out, (size_t)N * C);
  cpu::embedding_forward(o.data(), tokens, e.data(), vocab_start, vocab_rows, N, C);
}
void embedding_backward(Device d, bf16* dwte, const bf16* dout, const int* tokens,
                        int vocab_start, int vocab_rows, int N, int C) {
  count_kernel(4.0 * N + 3.0 * N * C * kE);
  ON_CUDA(embedding_backward(dwte, dout, tokens, vocab_start, vocab_rows, N, C));
  Widened de(dwte, (size_t)rows_used(tokens, vocab_start, vocab_rows, N) * C);
  Input g(dout, (size_t)N * C);
  cpu::embedding_backward(de.data(), g.data(), tokens, vocab_start, vocab_rows, N, C);
}
void position_embedding_forward(Device d, bf16* out, const bf16* wpe, int N, int seq_len,
                                int first_row, int C, const TokenPositions& pos) {
  count_kernel((2.0 * N + std::min(N, seq_len)) * C * kE);
  ON_CUDA(position_embedding_forward(out, wpe, N, seq_len, first_row, C, pos));
  Input p(wpe, positions_used(pos, seq_len) * C);
  Widened o(out, (size_t)N * C);
  cpu::position_embedding_forward(o.data(), p.data(), N, seq_len, first_row, C, pos);
}
void position_embedding_backward(Device d, bf16* dwpe, const bf16* dout, int N, int seq_len,
                                 int first_row, int C, const TokenPositions& pos) {
  count_kernel(((double)N + 2.0 * std::min(N, seq_len)) * C * kE);
  ON_CUDA(position_embedding_backward(dwpe, dout, N, seq_len, first_row, C, pos));
  Widened dp(dwpe, positions_used(pos, seq_len) * C);
  Input g(dout, (size_t)N * C);
  cpu::position_embedding_backward(dp.data(), g.data(), N, seq_len, first_row, C, pos);
}

// ---- norms
void layernorm_forward(Device d, bf16* out, float* mean, float* rstd, const bf16* x,
                       const bf16* w, const bf16* b, int N, int C, float eps) {
  count_kernel((2.0 * N * C + 2.0 * C) * kE + 8.0 * N);
  ON_CUDA(layernorm_forward(out, mean, rstd, x, w, b, N, C, eps));
  Input X(x, (size_t)N * C), W(w, C), Bb(b, C);
  Widened o(out, (size_t)N * C);
  cpu::layernorm_forward(o.data(), mean, rstd, X.data(), W.data(), Bb.data(), N, C, eps);
}
void layernorm_backward(Device d, bf16* dx, bf16* dw, bf16* db, const bf16* dout, const bf16* x,
                        const bf16* w, const float* mean, const float* rstd, int N, int C) {
  count_kernel((4.0 * N * C + 5.0 * C) * kE + 8.0 * N, 2);
  ON_CUDA(layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C));
  Widened DX(dx, (size_t)N * C), DW(dw, C), DB(db, C);
  Input G(dout, (size_t)N * C), X(x, (size_t)N * C), W(w, C);
  cpu::layernorm_backward(DX.data(), DW.data(), DB.data(), G.data(), X.data(), W.data(), mean,
                          rstd, N, C);
}
void rmsnorm_forward(Device d, bf16* out, float* rstd, const bf16* x, const bf16* w, int N,
                     int C, float eps) {
  count_kernel((2.0 * N * C + C) * kE + 4.0 * N);
  ON_CUDA(rmsnorm_forward(out, rstd, x, w, N, C, eps));
  Input X(x, (size_t)N * C), W(w, C);
  Widened o(out, (size_t)N * C);
  cpu::rmsnorm_forward(o.data(), rstd, X.data(), W.data(), N, C, eps);
}
void rmsnorm_backward(Device d, bf16* dx, bf16* dw, const bf16* dout, const bf16* x,
                      const bf16* w, const float* rstd, int N, int C) {
  count_kernel((4.0 * N * C + 3.0 * C) * kE + 4.0 * N, 2);
  ON_CUDA(rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C));
  Widened DX(dx, (size_t)N * C), DW(dw, C);
  Input G(dout, (size_t)N * C), X(x, (size_t)N * C), W(w, C);
  cpu::rmsnorm_backward(DX.data(), DW.data(), G.data(), X.data(), W.data(), rstd, N, C);
}

// ---- activations and dropout
void gelu_forward(Device d, bf16* out, const bf16* in, size_t n) {
  count_kernel(2.0 * n * kE);
  ON_CUDA(gelu_forward(out, in, n));
  Input I(in, n);
  Widened O(out, n);
  cpu::gelu_forward(O.data(), I.data(), n);
}
void gelu_backward(Device d, bf16* din, const bf16* dout, const bf16* in, size_t n) {
  count_kernel(3.0 * n * kE);
  ON_CUDA(gelu_backward(din, dout, in, n));
  Input G(dout, n), I(in, n);
  Widened D(din, n);
  cpu::gelu_backward(D.data(), G.data(), I.data(), n);
}
void swiglu_forward(Device d, bf16* out, const bf16* in, int N, int F) {
  count_kernel(3.0 * N * F * kE);
  ON_CUDA(swiglu_forward(out, in, N, F));
  Input I(in, (size_t)N * 2 * F);
  Widened O(out, (size_t)N * F);
  cpu::swiglu_forward(O.data(), I.data(), N, F);
}
void swiglu_backward(Device d, bf16* din, const bf16* dout, const bf16* in, int N, int F) {
  count_kernel(5.0 * N * F * kE);
  ON_CUDA(swiglu_backward(din, dout, in, N, F));
  Input G(dout, (size_t)N * F), I(in, (size_t)N * 2 * F);
  Widened D(din, (size_t)N * 2 * F);
  cpu::swiglu_backward(D.data(), G.data(), I.data(), N, F);
}
void dropout_forward(Device d, bf16* out, uint8_t* mask, const bf16* in, size_t n, float p,
                     uint64_t seed, uint64_t stream, const TokenPositions& pos, int width) {
  count_kernel(2.0 * n * kE + n);
  ON_CUDA(dropout_forward(out, mask, in, n, p, seed, stream, pos, width));
  Input I(in, n);
  Widened O(out, n);
  cpu::dropout_forward(O.data(), mask, I.data(), n, p, seed, stream, pos, width);
}
void dropout_backward(Device d, bf16* din, const bf16* dout, const uint8_t* mask, size_t n,
                      float p) {
  count_kernel(2.0 * n * kE + n);
  ON_CUDA(dropout_backward(din, dout, mask, n, p));
  Input G(dout, n);
  Widened D(din, n);
  cpu::dropout_backward(D.data(), G.data(), mask, n, p);
}

// ---- mixture of experts: token rows bf16, gates fp32
// Rows of `in` that a permutation reads: 1 + the largest token (or permuted row) named.
static size_t rows_named(const int* idx, size_t n, int divisor) {
  int rows = 0;
  for (size_t i = 0; i < n; i++)
    if (idx[i] >= 0) rows = std::max(rows, idx[i] / divisor + 1);
  return (size_t)rows;
}
void moe_permute(Device d, bf16* out, float* out_gates, const bf16* in, const float* gates,
                 const int* row_pair, int M, int C, int k, bool fused) {
  count_moe_permute(M, C, out_gates != nullptr, fused, (int)kE);
  ON_CUDA(moe_permute(out, out_gates, in, gates, row_pair, M, C, k, fused));
  Input I(in, rows_named(row_pair, M, k) * C);
  Widened O(out, (size_t)M * C);
  cpu::moe_permute(O.data(), out_gates, I.data(), gates, row_pair, M, C, k, fused);
}
void moe_unpermute(Device d, bf16* out, const bf16* in, const int* slots, int N, int C, int k,
                   bool fused) {
  count_moe_unpermute(N, C, k, fused, (int)kE);
  ON_CUDA(moe_unpermute(out, in, slots, N, C, k, fused));
  Input I(in, rows_named(slots, (size_t)N * k, 1) * C);
  Widened O(out, (size_t)N * C);
  cpu::moe_unpermute(O.data(), I.data(), slots, N, C, k, fused);
}
void moe_swiglu_forward(Device d, bf16* out, const bf16* in, const float* gates, int M, int F) {
  count_kernel(3.0 * M * F * kE + 4.0 * M);
  ON_CUDA(moe_swiglu_forward(out, in, gates, M, F));
  Input I(in, (size_t)M * 2 * F);
  Widened O(out, (size_t)M * F);
  cpu::moe_swiglu_forward(O.data(), I.data(), gates, M, F);
}
void moe_swiglu_backward(Device d, bf16* din, float* dgates, const bf16* dout, const bf16* in,
                         const float* gates, int M, int F) {
  count_kernel(5.0 * M * F * kE + 8.0 * M);
  ON_CUDA(moe_swiglu_backward(din, dgates, dout, in, gates, M, F));
  Input G(dout, (size_t)M * F), I(in, (size_t)M * 2 * F);
  Widened D(din, (size_t)M * 2 * F);
  cpu::moe_swiglu_backward(D.data(), dgates, G.data(), I.data(), gates, M, F);
}
void moe_gelu_forward(Device d, bf16* out, const bf16* in, const float* gates, int M, int F) {
  count_kernel(2.0 * M * F * kE + 4.0 * M);
  ON_CUDA(moe_gelu_forward(out, in, gates, M, F));
  Input I(in, (size_t)M * F);
  Widened O(out, (size_t)M * F);
  cpu::moe_gelu_forward(O.data(), I.data(), gates, M, F);
}
void moe_gelu_backward(Device d, bf16* din, float* dgates, const bf16* dout, const bf16* in,
                       const float* gates, int M, int F) {
  count_kernel(3.0 * M * F * kE + 8.0 * M);
  ON_CUDA(moe_gelu_backward(din, dgates, dout, in, gates, M, F));
  Input G(dout, (size_t)M * F), I(in, (size_t)M * F);
  Widened D(din, (size_t)M * F);
  cpu::moe_gelu_backward(D.data(), dgates, G.data(), I.data(), gates, M, F);
}
void moe_shared_gate_forward(Device d, bf16* out, const bf16* y, const bf16* z, int N, int C) {
  count_kernel((3.0 * N * C + N) * kE);
  ON_CUDA(moe_shared_gate_forward(out, y, z, N, C));
  Input Y(y, (size_t)N * C), Z(z, N);
  Widened O(out, (size_t)N * C);
  cpu::moe_shared_gate_forward(O.data(), Y.data(), Z.data(), N, C);
}
void moe_shared_gate_backward(Device d, bf16* dy, bf16* dz, const bf16* dout, const bf16* y,
                              const bf16* z, int N, int C) {
  count_kernel((3.0 * N * C + 2.0 * N) * kE);
  ON_CUDA(moe_shared_gate_backward(dy, dz, dout, y, z, N, C));
  Input G(dout, (size_t)N * C), Y(y, (size_t)N * C), Z(z, N);
  Widened DY(dy, (size_t)N * C), DZ(dz, N);
  cpu::moe_shared_gate_backward(DY.data(), DZ.data(), G.data(), Y.data(), Z.data(), N, C);
}

// ---- optimizer
void adamw_update(Device d, float* master, bf16* params, const bf16* grads, float* m, float* v,
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  float bias1, float bias2, float grad_scale) {
  count_kernel(28.0 * n);
  ON_CUDA(adamw_update(master, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, bias1,
                       bias2, grad_scale));
  Input g(grads, n);
  cpu::adamw_update(master, g.data(), m, v, n, lr, beta1, beta2, eps, weight_decay, bias1, bias2,
                    grad_scale);
  for (size_t i = 0; i < n; ++i) params[i] = to_bf16(master[i]);
}
double sum_squares(Device d, const bf16* x, size_t n) {
  count_kernel(n * kE);
  if (d == Device::CUDA) {
#ifndef PARALAB_CPU_ONLY
    return cuda::sum_squares(x, n);
#else
    throw std::runtime_error("--device cuda: this binary was built without CUDA (make CPU_ONLY=1)");
#endif
  }
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double f = to_float(x[i]);
    s += f * f;
  }
  return s;
}

}  // namespace kernels
