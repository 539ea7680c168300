// tests/gpu/op_check_attention.cpp: op_check's rows for attention: the layout ops (qkv split
// with and without RoPE, at the whole sequence's and at a context-parallel rank's positions,
// heads merge), the naive pieces of an attention pass (softmax and its backward, the rescale to
// the row's final lse, dropout, delta), ring attention's merge, and flash attention forward and
// backward, on the whole sequence (shapes with partial tiles and GQA) and on passes of cp = 2,
// each on both storage types (see op_check.cpp for the metric and the bounds).
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/gpu/op_check.h"  // defines: Twin, written, Precision, err, err_lse, check, ...

namespace op_check {

using kernels::AttentionBlock;
using kernels::AttentionRows;
using kernels::TokenPositions;

namespace {

// One pass of attention over local tensors of q_local (k_local) rows per head: the block, and
// the rows of those tensors its q and k views start at.
// An output of the q view: "=" garbage that differs between the twins when the view covers the
// tensor, else the same values (rows outside the view are not written and must stay equal).
template <typename T>
std::unique_ptr<Twin<T>> view_output(const Pass& pass, size_t n) {
  if (pass.whole()) return written<T>(n);
  return std::make_unique<Twin<T>>(random_values<T>(n));
}

}  // namespace

// Layout ops without RoPE only move values (P::layout: exact in bf16); RoPE computes.
template <typename T>
void check_attention_layout() {
  using P = Precision<T>;
  const int B = 2, S = 38, A = 6, G = 2, D = 16, W = (A + 2 * G) * D;
  const size_t nq = (size_t)B * A * S * D, nkv = (size_t)B * G * S * D;
  Twin<T> qkv(random_values<T>((size_t)B * S * W));
  Twin<T> dq(random_values<T>(nq)), dk(random_values<T>(nkv)), dv(random_values<T>(nkv));
  // The whole sequence without and with RoPE, then RoPE at rank 0 of cp 2's positions
  // ([0, 19) and [57, 76)).
  struct Case {
    float theta;
    TokenPositions pos;
    const char* name;
  };
  for (const Case& c : {Case{0.0f, TokenPositions(), ""}, Case{10000.0f, TokenPositions(), " rope"},
                        Case{10000.0f, cp_positions(S / 2, 0, 2), " rope cp"}}) {
    const std::string tag = c.name + std::string(P::tag);
    const double bound = c.theta > 0 ? P::elementwise : P::layout;
    check("qkv_split_forward" + tag, bound, [&] {
      std::unique_ptr<Twin<T>> q(written<T>(nq)), k(written<T>(nkv)), v(written<T>(nkv));
      kernels::qkv_split_forward(Device::CPU, q->c(), k->c(), v->c(), qkv.c(), B, S, A, G, D,
                                 c.theta, c.pos);
      kernels::qkv_split_forward(Device::CUDA, q->g(), k->g(), v->g(), qkv.g(), B, S, A, G, D,
                                 c.theta, c.pos);
      return worst({err(*q), err(*k), err(*v)});
    });
    check("qkv_split_backward" + tag, bound, [&] {
      std::unique_ptr<Twin<T>> dqkv(written<T>((size_t)B * S * W));
      kernels::qkv_split_backward(Device::CPU, dqkv->c(), dq.c(), dk.c(), dv.c(), B, S, A, G, D,
                                  c.theta, c.pos);
      kernels::qkv_split_backward(Device::CUDA, dqkv->g(), dq.g(), dk.g(), dv.g(), B, S, A, G, D,
                                  c.theta, c.pos);
      return err(*dqkv);
    });
  }
  check(std::string("heads_merge_forward") + P::tag, P::layout, [&] {
    std::unique_ptr<Twin<T>> out(written<T>(nq));
    kernels::heads_merge_forward(Device::CPU, out->c(), dq.c(), B, S, A, D);
    kernels::heads_merge_forward(Device::CUDA, out->g(), dq.g(), B, S, A, D);
    return err(*out);
  });
  check(std::string("heads_merge_backward") + P::tag, P::layout, [&] {
    std::unique_ptr<Twin<T>> d_o(written<T>(nq));
    kernels::heads_merge_backward(Device::CPU, d_o->c(), dq.c(), B, S, A, D);
    kernels::heads_merge_backward(Device::CUDA, d_o->g(), dq.g(), B, S, A, D);
    return err(*d_o);
  });
}

// The naive pieces of one pass: probabilities (B*A, q.rows, k.rows) contiguous, lse and delta
// fp32 at the q view (bh * q_local + i), so their rows of a partial view leave the rest alone.
// The whole sequence has L > the block size (threads loop over columns); the cp passes check
// the views, the masks of other positions and the rows that see no key.
template <typename T>
void check_attention_naive() {
  using P = Precision<T>;
  using F = Precision<float>;
  const int B = 2, A = 3, D = 8, BH = B * A;
  const float scale = 0.7f;
  std::vector<Pass> passes = cp_passes(48, A, D);
  passes.insert(passes.begin(), whole_pass(300, A, D));
  for (const Pass& pass : passes) {
    const std::string tag = pass.name + P::tag;
    const AttentionBlock& blk = pass.blk;
    const size_t np = (size_t)BH * blk.q.rows * blk.k.rows, nl = (size_t)BH * pass.q_local;
    const size_t first = pass.q_first;  // the view's row 0 in an lse or delta of the q view
    // The whole sequence in place (probs holds the scores); the passes into an "=" output.
    Twin<T> scores(random_values<T>(np, -4.0f, 4.0f));
    std::unique_ptr<Twin<T>> probs_owner =
        pass.whole() ? std::make_unique<Twin<T>>(scores.cpu) : written<T>(np);
    Twin<T>& probs = *probs_owner;
    Twin<T>& from = pass.whole() ? probs : scores;
    std::unique_ptr<Twin<float>> lse(view_output<float>(pass, nl));
    check("attention_softmax_forward (probs, lse)" +
              std::string(pass.whole() ? " (in place)" : "") + tag,
          P::reduction, [&] {
            kernels::attention_softmax_forward(Device::CPU, probs.c(), lse->c() + first, from.c(),
                                               BH, D, scale, blk);
            kernels::attention_softmax_forward(Device::CUDA, probs.g(), lse->g() + first,
                                               from.g(), BH, D, scale, blk);
            return worst({err(probs), err_lse(*lse)});
          });
    // The rest differentiate, rescale and drop the CPU forward's P and lse on both twins.
    kernels::memcpy_from_host(Device::CUDA, probs.g(), probs.c(), np * sizeof(T));
    kernels::memcpy_from_host(Device::CUDA, lse->g(), lse->c(), nl * sizeof(float));
    Twin<T> dprobs(random_values<T>(np));
    for (bool with_delta : {false, true}) {
      check(std::string("attention_softmax_backward") + (with_delta ? " (delta)" : "") + tag,
            P::reduction, [&] {
              Twin<float> delta(random_floats(nl));
              std::unique_ptr<Twin<T>> dscores(written<T>(np));
              const float* dc = with_delta ? delta.c() + first : nullptr;
              const float* dg = with_delta ? delta.g() + first : nullptr;
              kernels::attention_softmax_backward(Device::CPU, dscores->c(), dprobs.c(), probs.c(),
                                                  dc, BH, D, scale, blk);
              kernels::attention_softmax_backward(Device::CUDA, dscores->g(), dprobs.g(),
                                                  probs.g(), dg, BH, D, scale, blk);
              return err(*dscores);
            });
    }
    check("attention_probs_rescale" + tag, P::elementwise, [&] {
      // The row's final lse is at least the pass's: the pass's plus [0, 2), or any value for
      // a row this pass gave nothing (its probabilities are 0 and stay so).
      Floats final_lse = random_floats(nl, 0.0f, 2.0f);
      for (size_t r = 0; r < nl; r++)
        if (lse->cpu[r] != -INFINITY) final_lse[r] += lse->cpu[r];
      Twin<float> whole_lse(final_lse);
      Twin<T> p(probs.cpu);
      kernels::attention_probs_rescale(Device::CPU, p.c(), lse->c() + first, whole_lse.c() + first,
                                       BH, D, blk);
      kernels::attention_probs_rescale(Device::CUDA, p.g(), lse->g() + first,
                                       whole_lse.g() + first, BH, D, blk);
      return err(p);
    });
    for (float p : {0.0f, 0.3f}) {
      check("attention_dropout_forward (out, mask) p=" + std::string(p > 0 ? "0.3" : "0") + tag,
            P::elementwise, [&] {
              std::unique_ptr<Twin<T>> out(written<T>(np));
              Twin<uint8_t> mask(std::vector<uint8_t>(np, 7));
              kernels::attention_dropout_forward(Device::CPU, out->c(), mask.c(), probs.c(), B, A,
                                                 p, 99, 5, blk);
              kernels::attention_dropout_forward(Device::CUDA, out->g(), mask.g(), probs.g(), B,
                                                 A, p, 99, 5, blk);
              return mismatches(mask) > 0 ? INFINITY : err(*out);
            });
    }
    // delta and the merge at the q view's rows of (B, A, q_local, D) tensors; their outputs
    // are fp32, so the fp32 bounds.
    const size_t no = nl * D, off = first * D;
    check("attention_delta" + tag, F::reduction, [&] {
      Twin<T> dout(random_values<T>(no)), o(random_values<T>(no));
      std::unique_ptr<Twin<float>> delta(view_output<float>(pass, nl));
      kernels::attention_delta(Device::CPU, delta->c() + first, dout.c() + off, o.c() + off, BH, D,
                               blk.q);
      kernels::attention_delta(Device::CUDA, delta->g() + first, dout.g() + off, o.g() + off, BH,
                               D, blk.q);
      return err(*delta);
    });
    check("attention_merge (o, lse)" + tag, F::elementwise, [&] {
      // Rows with nothing merged yet (lse -inf, o garbage: NaN in the view's rows where the
      // pass brings something, which must not leak) and rows the pass saw nothing of
      // (lse_pass -inf: unchanged).
      Floats o0 = random_floats(no), l0 = random_floats(nl, -2.0f, 2.0f);
      Floats lp = random_floats(nl, -2.0f, 2.0f);
      for (size_t r = 0; r < nl; r++) {
        const size_t i = r % pass.q_local;
        const bool in_view = i >= first && i < first + blk.q.rows;
        if (r % 7 == 3) lp[r] = -INFINITY;
        if (r % 5 == 1) {
          l0[r] = -INFINITY;
          if (in_view && lp[r] != -INFINITY)
            for (int c = 0; c < D; c++) o0[r * D + c] = NAN;
        }
      }
      Twin<float> o(o0), l(l0), lse_pass(lp);
      Twin<T> o_pass(random_values<T>(no));
      kernels::attention_merge(Device::CPU, o.c() + off, l.c() + first, o_pass.c() + off,
                               lse_pass.c() + first, BH, D, blk.q);
      kernels::attention_merge(Device::CUDA, o.g() + off, l.g() + first, o_pass.g() + off,
                               lse_pass.g() + first, BH, D, blk.q);
      return worst({err(o), err_lse(l)});
    });
  }
}

// Flash attention on one pass: tiles of 32 on the GPU, 64 on the CPU, so rows not a multiple of
// either exercise partial tiles; GQA (A/G = 2) exercises the group sums of dk, dv. lse and dq
// are fp32 in both storage types; the backward's dq, dk, dv are "+=", so both twins start from
// the same values.
template <typename T>
void check_flash(int B, int A, int G, int D, float p, const Pass& pass) {
  using P = Precision<T>;
  const AttentionBlock& blk = pass.blk;
  char tag[128];
  std::snprintf(tag, sizeof(tag), " B%d A%d G%d S%d D%d p=%g%s%s", B, A, G, pass.q_local, D, p,
                pass.name.c_str(), P::tag);
  const size_t nq = (size_t)B * A * pass.q_local * D, nkv = (size_t)B * G * pass.k_local * D;
  const size_t nl = (size_t)B * A * pass.q_local;
  const size_t qo = (size_t)pass.q_first * D, ko = (size_t)pass.k_first * D, lo = pass.q_first;
  const float scale = 1.0f / std::sqrt((float)D);
  Twin<T> q(random_values<T>(nq, -2.0f, 2.0f)), k(random_values<T>(nkv, -2.0f, 2.0f));
  Twin<T> v(random_values<T>(nkv)), dout(random_values<T>(nq));
  std::unique_ptr<Twin<T>> o(view_output<T>(pass, nq));
  std::unique_ptr<Twin<float>> lse(view_output<float>(pass, nl));
  check(std::string("flash_attention_forward") + tag, P::reduction, [&] {
    kernels::flash_attention_forward(Device::CPU, o->c() + qo, lse->c() + lo, q.c() + qo,
                                     k.c() + ko, v.c() + ko, B, A, G, D, scale, p, 7, 11, blk);
    kernels::flash_attention_forward(Device::CUDA, o->g() + qo, lse->g() + lo, q.g() + qo,
                                     k.g() + ko, v.g() + ko, B, A, G, D, scale, p, 7, 11, blk);
    return worst({err(*o), err_lse(*lse)});
  });
  check(std::string("flash_attention_backward (+=)") + tag, P::reduction, [&] {
    // Both twins differentiate the CPU forward's o and lse.
    kernels::memcpy_from_host(Device::CUDA, o->g(), o->c(), nq * sizeof(T));
    kernels::memcpy_from_host(Device::CUDA, lse->g(), lse->c(), nl * sizeof(float));
    Twin<float> dq(random_floats(nq));
    Twin<T> dk(random_values<T>(nkv)), dv(random_values<T>(nkv));
    kernels::flash_attention_backward(Device::CPU, dq.c() + qo, dk.c() + ko, dv.c() + ko,
                                      dout.c() + qo, q.c() + qo, k.c() + ko, v.c() + ko,
                                      o->c() + qo, lse->c() + lo, B, A, G, D, scale, p, 7, 11,
                                      blk);
    kernels::flash_attention_backward(Device::CUDA, dq.g() + qo, dk.g() + ko, dv.g() + ko,
                                      dout.g() + qo, q.g() + qo, k.g() + ko, v.g() + ko,
                                      o->g() + qo, lse->g() + lo, B, A, G, D, scale, p, 7, 11,
                                      blk);
    return worst({err(dq), err(dk), err(dv)});
  });
}

template <typename T>
void check_flash_cases() {
  struct Shape {
    int B, A, G, S, D;
    float p;
  };
  for (const Shape& s : {Shape{2, 4, 2, 77, 40, 0.0f}, Shape{2, 4, 2, 77, 40, 0.2f},
                         Shape{1, 3, 3, 130, 64, 0.0f}, Shape{1, 2, 1, 33, 128, 0.1f}})
    check_flash<T>(s.B, s.A, s.G, s.D, s.p, whole_pass(s.S, s.A, s.D));
  // cp = 2 on S = 96: chunks of 24 rows, so the passes' views have partial tiles too.
  for (float p : {0.0f, 0.2f})
    for (const Pass& pass : cp_passes(24, 4, 40)) check_flash<T>(2, 4, 2, 40, p, pass);
}

// The two storage types main runs.
template void check_attention_layout<float>();
template void check_attention_layout<bf16>();
template void check_attention_layout<kernels::fp16>();
template void check_attention_naive<float>();
template void check_attention_naive<bf16>();
template void check_attention_naive<kernels::fp16>();
template void check_flash_cases<float>();
template void check_flash_cases<bf16>();
template void check_flash_cases<kernels::fp16>();

}  // namespace op_check
