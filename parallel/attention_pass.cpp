// parallel/attention_pass.cpp: a naive attention pass as GEMMs and the block kernels
// (parallel/attention_pass.h). The flash pass is one kernel call each way
// (kernels::flash_attention_forward / backward), made by parallel/context_parallel.cpp.
//
// Per (batch, group) with R = A/G heads of qr query rows and kr key rows:
//   forward   scores = Q K^T (R qr, kr);  P = softmax(scale scores, mask);  P' = dropout(P)
//             O = P' V (R qr, D)
//   backward  dP' = dO V^T;  dV += P'^T dO;  dP = dP' keep / (1-p)
//             dS = scale P (dP - delta);  dQ += dS K;  dK += dS^T Q
// delta_i = rowsum(dP * P) over the whole row: within a pass that is the whole row (the
// single rank, all-gather, all-to-all) the softmax backward computes it itself; a ring pass
// sees part of the row and is given dO_i . O_i instead (equal, kernels/cpu/flash_attention.cpp).
#include "parallel/attention_pass.h"

#include "kernels/ops.h"
#include "parallel/context_parallel.h"

namespace paralab {

namespace {

// One product per (batch, group) of the pass: C(m, n) = alpha op(X) op(Y) + beta C, where
// X is a per-head tensor at the q view (Q, dO, or a pass's probabilities) and Y a per-group
// one at the k view (K, V), or the roles swapped for dK, dV. `head` gives, for head j of a
// group, X's, Y's and C's first element and batch strides; contiguous views make one call
// for all R heads (m or k multiplied by R), else one call per head.
struct Operand {
  long long offset = 0, batch_stride = 0;  // elements
  int ld = 0;
};

template <typename T>
void group_gemm(kernels::Device dev, bool ta, bool tb, int m, int n, int k, float beta,
                const T* X, Operand x, const T* Y, Operand y, T* C, Operand c, int batch) {
  kernels::gemm_strided_batched(dev, ta, tb, m, n, k, 1.0f, X + x.offset, x.ld, x.batch_stride,
                                Y + y.offset, y.ld, y.batch_stride, beta, C + c.offset, c.ld,
                                c.batch_stride, batch);
}

struct PassGeometry {
  int R, qr, kr, D, batch;
  long long qh, kh;  // head strides of the q and k views
  bool contiguous;   // the q view is whole heads: R heads' rows follow one another
  PassGeometry(const CoreShape& s, const kernels::AttentionBlock& blk)
      : R(s.A / s.G), qr(blk.q.rows), kr(blk.k.rows), D(s.D), batch(s.B * s.G),
        qh(blk.q.head_stride), kh(blk.k.head_stride),
        contiguous(blk.q.head_stride == (long long)blk.q.rows * s.D) {}
  int heads_per_call() const { return contiguous ? R : 1; }
  int calls() const { return contiguous ? 1 : R; }
  // head j's per-head tensor at the q view, its probabilities, its group's k-view tensor
  Operand q_view(int j) const { return {j * qh, R * qh, D}; }
  Operand probs(int j) const { return {(long long)j * qr * kr, (long long)R * qr * kr, kr}; }
  Operand k_view() const { return {0, kh, D}; }
};

}  // namespace

int attention_gemm_calls(const CoreShape& s, const kernels::AttentionBlock& blk) {
  return PassGeometry(s, blk).calls();
}

template <typename T>
void naive_pass_probs(kernels::Device dev, const CoreShape& s, const kernels::AttentionBlock& blk,
                      const T* q, const T* k, T* scores, T* probs, float* lse, uint8_t* mask,
                      T* dropped) {
  const PassGeometry g(s, blk);
  // scores = Q K^T: (R qr, D) x (D, kr) per (batch, group)
  for (int j = 0; j < g.calls(); ++j)
    group_gemm(dev, false, true, g.heads_per_call() * g.qr, g.kr, g.D, 0.0f, q, g.q_view(j), k,
               g.k_view(), scores, g.probs(j), g.batch);
  kernels::attention_softmax_forward(dev, probs, lse, scores, s.B * s.A, s.D, s.scale, blk);
  if (s.dropout > 0.0f)
    kernels::attention_dropout_forward(dev, dropped, mask, probs, s.B, s.A, s.dropout, s.seed,
                                       s.stream, blk);
}

template <typename T>
void naive_pass_output(kernels::Device dev, const CoreShape& s,
                       const kernels::AttentionBlock& blk, const T* used, const T* v, T* o) {
  const PassGeometry g(s, blk);
  // O = P' V: (R qr, kr) x (kr, D)
  for (int j = 0; j < g.calls(); ++j)
    group_gemm(dev, false, false, g.heads_per_call() * g.qr, g.D, g.kr, 0.0f, used, g.probs(j),
               v, g.k_view(), o, g.q_view(j), g.batch);
}

template <typename T>
void naive_pass_backward(kernels::Device dev, const CoreShape& s,
                         const kernels::AttentionBlock& blk, const T* q, const T* k, const T* v,
                         const T* probs, const T* dropped, const uint8_t* mask,
                         const float* delta, const T* dout, T* dq, T* dk, T* dv, T* dprobs,
                         T* scores) {
  const PassGeometry g(s, blk);
  const int m = g.heads_per_call() * g.qr;
  const T* used = s.dropout > 0.0f ? dropped : probs;
  for (int j = 0; j < g.calls(); ++j) {
    // dP' = dO V^T: (R qr, D) x (D, kr)
    group_gemm(dev, false, true, m, g.kr, g.D, 0.0f, dout, g.q_view(j), v, g.k_view(), dprobs,
               g.probs(j), g.batch);
    // dV += P'^T dO, summed over the group's heads: (kr, R qr) x (R qr, D)
    group_gemm(dev, true, false, g.kr, g.D, m, 1.0f, used, g.probs(j), dout, g.q_view(j), dv,
               g.k_view(), g.batch);
  }
  const size_t n = (size_t)s.B * s.A * g.qr * g.kr;
  if (s.dropout > 0.0f) kernels::dropout_backward(dev, dprobs, dprobs, mask, n, s.dropout);
  // dS = scale P (dP - delta), into the scores scratch
  kernels::attention_softmax_backward(dev, scores, dprobs, probs, delta, s.B * s.A, s.D, s.scale,
                                      blk);
  for (int j = 0; j < g.calls(); ++j) {
    // dQ += dS K: (R qr, kr) x (kr, D)
    group_gemm(dev, false, false, m, g.D, g.kr, 1.0f, scores, g.probs(j), k, g.k_view(), dq,
               g.q_view(j), g.batch);
    // dK += dS^T Q, summed over the group's heads: (kr, R qr) x (R qr, D)
    group_gemm(dev, true, false, g.kr, g.D, m, 1.0f, scores, g.probs(j), q, g.q_view(j), dk,
               g.k_view(), g.batch);
  }
}

#define PARALAB_PASS(T)                                                                      \
  template void naive_pass_probs(kernels::Device, const CoreShape&,                          \
                                 const kernels::AttentionBlock&, const T*, const T*, T*, T*, \
                                 float*, uint8_t*, T*);                                      \
  template void naive_pass_output(kernels::Device, const CoreShape&,                         \
                                  const kernels::AttentionBlock&, const T*, const T*, T*);   \
  template void naive_pass_backward(kernels::Device, const CoreShape&,                       \
                                    const kernels::AttentionBlock&, const T*, const T*,      \
                                    const T*, const T*, const T*, const uint8_t*,            \
                                    const float*, const T*, T*, T*, T*, T*, T*);
PARALAB_PASS(float)
PARALAB_PASS(kernels::bf16)
#undef PARALAB_PASS

}  // namespace paralab
