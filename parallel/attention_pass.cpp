// parallel/attention_pass.cpp: one attention pass (parallel/attention_pass.h), flash or
// naive. The flash pass is one kernel call each way (kernels::flash_attention_forward /
// backward), on the ring over MPI one call per (batch, group); the naive pass is GEMMs and
// the block kernels, per (batch, group) with R = A/G heads of qr query rows and kr key rows:
//   forward   scores = Q K^T (R qr, kr);  P = softmax(scale scores, mask);  P' = dropout(P)
//             O = P' V (R qr, D)
//   backward  dP' = dO V^T;  dV += P'^T dO;  dP = dP' keep / (1-p)
//             dS = scale P (dP - delta);  dQ += dS K;  dK += dS^T Q
// delta_i = rowsum(dP * P) over the whole row: within a pass that is the whole row (the
// single rank, all-gather, all-to-all) the softmax backward computes it itself; a ring pass
// sees part of the row and is given dO_i . O_i instead (equal, kernels/cpu/flash_attention.cpp).
#include "parallel/attention_pass.h"

#include "kernels/ops.h"
#include "parallel/comm.h"              // comm_progress
#include "parallel/context_parallel.h"  // CoreShape, CorePass, CoreSaved, CoreWorkspace

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

// The naive pass, its pointers at the view's first row: scores = Q K^T, probs = the block's
// softmax (lse at the q view, may be nullptr), and with attention dropout its mask and the
// dropped probabilities.
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

// o ("=", at the q view) = P' V.
template <typename T>
void naive_pass_output(kernels::Device dev, const CoreShape& s,
                       const kernels::AttentionBlock& blk, const T* used, const T* v, T* o) {
  const PassGeometry g(s, blk);
  // O = P' V: (R qr, kr) x (kr, D)
  for (int j = 0; j < g.calls(); ++j)
    group_gemm(dev, false, false, g.heads_per_call() * g.qr, g.D, g.kr, 0.0f, used, g.probs(j),
               v, g.k_view(), o, g.q_view(j), g.batch);
}

// The pass's gradients: dq, dk, dv (+=) from dout, with delta (the rows' dout . o at the q
// view; nullptr when the pass is every row's whole softmax). dprobs, scores: scratch of the
// pass's (B*A, q.rows, k.rows).
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

// On the MPI backend a posted transfer moves only inside MPI calls, so the ring's flash passes
// run one (batch, group) at a time with comm_progress() between: the block travels during
// the step's attention, and the report's exposed time shows what that hid. Each call is the
// pass on one group's R = A/G heads (B = 1, G = 1), its dropout index's head offset
// carrying (b, g); the heads are independent, so the results are the same bits. run(qh, kh,
// blk): the call at q-view offset qh and k-view offset kh (elements).
template <typename Run>
void flash_by_group(bool split, const CoreShape& s, const kernels::AttentionBlock& blk,
                    Run&& run) {
  if (!split) {
    run((size_t)0, (size_t)0, blk, s.B, s.A, s.G);
    return;
  }
  const int R = s.A / s.G;
  for (int b = 0; b < s.B; ++b)
    for (int g = 0; g < s.G; ++g) {
      kernels::AttentionBlock one = blk;
      one.dropout_head0 += b * blk.dropout_heads + g * R;
      run((size_t)(b * s.A + g * R) * blk.q.head_stride,
          (size_t)(b * s.G + g) * blk.k.head_stride, one, 1, R, 1);
      comm_progress();
    }
}

}  // namespace

int attention_gemm_calls(const CoreShape& s, const kernels::AttentionBlock& blk) {
  return PassGeometry(s, blk).calls();
}

template <typename T>
void AttentionPass<T>::forward(const CoreShape& s, const CorePass& p, size_t n, const T* q,
                               const T* k, const T* v, T* o, float* lse) const {
  const size_t row0 = p.q_row0, off = row0 * s.D;
  if (s.flash) {
    flash_by_group(by_group, s, p.blk, [&](size_t qh, size_t kh, const kernels::AttentionBlock& blk,
                                           int B, int A, int G) {
      kernels::flash_attention_forward(device, o + off + qh, lse + row0 + qh / s.D, q + off + qh,
                                       k + kh, v + kh, B, A, G, s.D, s.scale, s.dropout, s.seed,
                                       s.stream, blk);
    });
    return;
  }
  T* probs = saved->probs[n].data();
  T* dropped = s.dropout > 0.0f ? saved->probs_dropped[n].data() : nullptr;
  uint8_t* mask = s.dropout > 0.0f ? saved->masks[n].data() : nullptr;
  naive_pass_probs(device, s, p.blk, q + off, k, ws->scores.data(), probs,
                   lse ? lse + row0 : nullptr, mask, dropped);
  if (!probs_only) naive_pass_output(device, s, p.blk, dropped ? dropped : probs, v, o + off);
}

template <typename T>
void AttentionPass<T>::backward(const CoreShape& s, const CorePass& p, size_t n, const T* q,
                                const T* k, const T* v, const T* o, const T* dout, T* dq,
                                float* dq_f, T* dk, T* dv, const float* delta) const {
  const size_t row0 = p.q_row0, off = row0 * s.D;
  if (s.flash) {
    flash_by_group(by_group, s, p.blk, [&](size_t qh, size_t kh, const kernels::AttentionBlock& blk,
                                           int B, int A, int G) {
      kernels::flash_attention_backward(device, dq_f + off + qh, dk + kh, dv + kh,
                                        dout + off + qh, q + off + qh, k + kh, v + kh,
                                        o + off + qh, saved->lse.data() + row0 + qh / s.D, B, A,
                                        G, s.D, s.scale, s.dropout, s.seed, s.stream, blk);
    });
    return;
  }
  const T* dropped = s.dropout > 0.0f ? saved->probs_dropped[n].data() : nullptr;
  const uint8_t* mask = s.dropout > 0.0f ? saved->masks[n].data() : nullptr;
  naive_pass_backward(device, s, p.blk, q + off, k, v, saved->probs[n].data(), dropped, mask,
                      delta ? delta + row0 : nullptr, dout + off, dq + off, dk, dv,
                      ws->dprobs.data(), ws->scores.data());
}

template struct AttentionPass<float>;
template struct AttentionPass<kernels::bf16>;
template struct AttentionPass<kernels::fp16>;

}  // namespace paralab
