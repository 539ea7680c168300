// tests/test_kernels_attention.cpp: the attention kernels (QKV split with RoPE and GQA, heads
// merge, the naive softmax, flash attention) on the whole sequence (kernels/math.h
// whole_sequence) against double-precision references and finite differences (method:
// tests/test_kernels_helpers.h), and flash attention against the naive path assembled from
// gemm + attention_softmax + attention_dropout. The passes of context parallelism's ring
// (blocks of query rows against key rows) are tests/test_attention_block.cpp's.
//
// Shapes are chosen so the flash kernels' tiling is exercised: S = 70 and 130 are not
// multiples of a 64-row tile, so there are full, partial and diagonal tiles and skipped
// fully-masked ones; S = 5 is smaller than one tile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/math.h"
#include "kernels/ops.h"
#include "tests/test_kernels_helpers.h"

namespace {

using namespace ktest;
using kernels::Device;

class AttentionKernels : public ::testing::TestWithParam<Device> {
 protected:
  Device dev() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Devices, AttentionKernels, ::testing::ValuesIn(test_devices()),
                         device_label);

// ---- QKV split, heads merge -------------------------------------------------------------------

struct Qkv {
  std::vector<double> q, k, v;
};

// qkv(B*S, (A+2G)*D), row = G groups of [A/G query heads | key | value] -> q(B,A,S,D),
// k, v(B,G,S,D); q and k rotated by RoPE (rotate-half) when theta > 0.
Qkv ref_qkv_split(const std::vector<double>& qkv, int B, int S, int A, int G, int D,
                  double theta) {
  Qkv r{std::vector<double>(B * A * S * D), std::vector<double>(B * G * S * D),
        std::vector<double>(B * G * S * D)};
  const int hpg = A / G, W = (A + 2 * G) * D;
  auto rotate = [&](const double* x, double* y, int s) {
    for (int c = 0; c < D; c++) y[c] = x[c];
    if (theta <= 0) return;
    for (int i = 0; i < D / 2; i++) {
      double angle = s * std::pow(theta, -2.0 * i / D);
      y[i] = x[i] * std::cos(angle) - x[i + D / 2] * std::sin(angle);
      y[i + D / 2] = x[i + D / 2] * std::cos(angle) + x[i] * std::sin(angle);
    }
  };
  for (int b = 0; b < B; b++)
    for (int s = 0; s < S; s++)
      for (int h = 0; h < A; h++) {
        int g = h / hpg, j = h % hpg;
        const double* src = &qkv[(b * S + s) * W + (g * (hpg + 2) + j) * D];
        rotate(src, &r.q[((b * A + h) * S + s) * D], s);
        if (j == 0) {
          const double* ksrc = &qkv[(b * S + s) * W + (g * (hpg + 2) + hpg) * D];
          rotate(ksrc, &r.k[((b * G + g) * S + s) * D], s);
          for (int c = 0; c < D; c++) r.v[((b * G + g) * S + s) * D + c] = ksrc[D + c];
        }
      }
  return r;
}

struct SplitCase {
  int A, G;
  float theta;
};

TEST_P(AttentionKernels, QkvSplitForwardAndBackward) {
  const int B = 2, S = 5, D = 8;
  for (SplitCase c : {SplitCase{4, 4, 0.0f}, SplitCase{4, 2, 10000.0f}, SplitCase{4, 1, 10000.0f},
                      SplitCase{2, 2, 100.0f}}) {
    SCOPED_TRACE(testing::Message() << "A " << c.A << " G " << c.G << " theta " << c.theta);
    const int W = (c.A + 2 * c.G) * D;
    const size_t nq = B * c.A * S * D, nk = B * c.G * S * D, nqkv = B * S * W;
    std::vector<float> qkv = uniform(nqkv, 50), Rq = uniform(nq, 51), Rk = uniform(nk, 52),
                       Rv = uniform(nk, 53);
    DevBuf<float> dqkv(dev(), qkv), q(dev(), nq), k(dev(), nk), v(dev(), nk);
    kernels::qkv_split_forward(dev(), q.get(), k.get(), v.get(), dqkv.get(), B, S, c.A, c.G, D,
                               c.theta);
    Qkv ref = ref_qkv_split(to_double(qkv), B, S, c.A, c.G, D, c.theta);
    EXPECT_LT(max_rel_err(q.host(), ref.q), 1e-6);
    EXPECT_LT(max_rel_err(k.host(), ref.k), 1e-6);
    EXPECT_EQ(max_rel_err(v.host(), ref.v), 0.0);

    // Backward: L(qkv) = R_q . q + R_k . k + R_v . v; the split is linear, so its backward
    // is the adjoint (the finite differences are exact up to rounding).
    DevBuf<float> gq(dev(), Rq), gk(dev(), Rk), gv(dev(), Rv), gqkv(dev(), uniform(nqkv, 54));
    kernels::qkv_split_backward(dev(), gqkv.get(), gq.get(), gk.get(), gv.get(), B, S, c.A, c.G, D,
                                c.theta);
    auto L = [&](const std::vector<double>& x) {
      Qkv r = ref_qkv_split(x, B, S, c.A, c.G, D, c.theta);
      return dot(r.q, to_double(Rq)) + dot(r.k, to_double(Rk)) + dot(r.v, to_double(Rv));
    };
    EXPECT_LT(max_rel_err(gqkv.host(), fd_grad(L, to_double(qkv))), 1e-6);

    // And it is the exact inverse: split(backward(y)) == y (a rotation's transpose inverts it).
    kernels::qkv_split_forward(dev(), q.get(), k.get(), v.get(), gqkv.get(), B, S, c.A, c.G, D,
                               c.theta);
    EXPECT_LT(max_rel_err(q.host(), to_double(Rq)), 1e-6);
    EXPECT_LT(max_rel_err(k.host(), to_double(Rk)), 1e-6);
    EXPECT_EQ(v.host(), Rv);
  }
}

TEST_P(AttentionKernels, HeadsMergeAndItsInverse) {
  const int B = 2, S = 3, A = 4, D = 5;
  const size_t n = B * S * A * D;
  std::vector<float> o = uniform(n, 55);
  DevBuf<float> d_o(dev(), o), out(dev(), n), back(dev(), n);
  kernels::heads_merge_forward(dev(), out.get(), d_o.get(), B, S, A, D);
  std::vector<float> got = out.host();
  for (int b = 0; b < B; b++)
    for (int s = 0; s < S; s++)
      for (int h = 0; h < A; h++)
        for (int c = 0; c < D; c++)
          ASSERT_EQ(got[(b * S + s) * A * D + h * D + c], o[((b * A + h) * S + s) * D + c]);
  kernels::heads_merge_backward(dev(), back.get(), out.get(), B, S, A, D);
  EXPECT_EQ(back.host(), o);
}

// ---- the naive softmax on the whole sequence ----------------------------------------------

std::vector<double> ref_causal_softmax(const std::vector<double>& x, int rows, int S,
                                       double scale) {
  std::vector<double> p(x.size(), 0.0);
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < S; i++) {
      const double* xr = &x[(r * S + i) * S];
      double m = -INFINITY, sum = 0.0;
      for (int j = 0; j <= i; j++) m = std::max(m, scale * xr[j]);
      for (int j = 0; j <= i; j++) sum += std::exp(scale * xr[j] - m);
      for (int j = 0; j <= i; j++) p[(r * S + i) * S + j] = std::exp(scale * xr[j] - m) / sum;
    }
  return p;
}

// attention_softmax on whole_sequence is the causal softmax; its lse is the row's
// log sum_j e^(scale x_j); backward without delta (the row's own sum) and with delta =
// rowsum(dP * P) handed in agree.
TEST_P(AttentionKernels, CausalSoftmaxForwardBackward) {
  const int rows = 3, S = 6, D = 4;
  const float scale = 0.5f;
  const size_t n = rows * S * S;
  const kernels::AttentionBlock blk = kernels::whole_sequence(S, rows, D);
  std::vector<float> x = uniform(n, 56, -4.0f, 4.0f), R = uniform(n, 57);
  DevBuf<float> dx_(dev(), x), probs(dev(), n), dR(dev(), R), gx(dev(), uniform(n, 58)),
      lse(dev(), rows * S);
  kernels::attention_softmax_forward(dev(), probs.get(), lse.get(), dx_.get(), rows, D, scale,
                                     blk);
  std::vector<float> P = probs.host();
  std::vector<double> want = ref_causal_softmax(to_double(x), rows, S, scale);
  EXPECT_LT(max_rel_err(P, want), 1e-6);
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < S; i++)
      for (int j = i + 1; j < S; j++) EXPECT_EQ(P[(r * S + i) * S + j], 0.0f);
  std::vector<double> want_lse(rows * S);
  for (int r = 0; r < rows * S; r++) {
    double sum = 0.0;
    for (int j = 0; j <= r % S; j++) sum += std::exp(scale * (double)x[r * S + j]);
    want_lse[r] = std::log(sum);
  }
  EXPECT_LT(max_rel_err(lse.host(), want_lse), 1e-6);

  DevBuf<float> inplace(dev(), x);
  kernels::attention_softmax_forward(dev(), inplace.get(), nullptr, inplace.get(), rows, D,
                                     scale, blk);
  EXPECT_EQ(inplace.host(), P);

  kernels::attention_softmax_backward(dev(), gx.get(), dR.get(), probs.get(), nullptr, rows, D,
                                      scale, blk);
  auto L = [&](const std::vector<double>& v) {
    return dot(ref_causal_softmax(v, rows, S, scale), to_double(R));
  };
  const std::vector<float> g = gx.host();
  EXPECT_LT(max_rel_err(g, fd_grad(L, to_double(x))), 1e-5);

  std::vector<float> delta(rows * S, 0.0f);
  for (int r = 0; r < rows * S; r++)
    for (int j = 0; j <= r % S; j++) delta[r] += P[r * S + j] * R[r * S + j];
  DevBuf<float> ddelta(dev(), delta), gx2(dev(), n);
  kernels::attention_softmax_backward(dev(), gx2.get(), dR.get(), probs.get(), ddelta.get(),
                                      rows, D, scale, blk);
  EXPECT_LT(max_rel_err(gx2.host(), to_double(g)), 1e-6);
}

// ---- flash attention ----------------------------------------------------------------------

struct AttnCase {
  int B, A, G, S, D;
  float p;
};

struct AttnRef {
  std::vector<double> o, lse;
};

// Naive causal attention in double: for each (b, h, i), s_j = scale q_i . k_j (j <= i,
// k of group h / (A/G)), lse = log sum_j e^(s_j), P_j = e^(s_j - lse), dropped by the
// documented mask dropout_keep(seed, stream, ((b*A + h)*S + i)*S + j) and scaled by 1/(1-p),
// o_i = sum_j P'_j v_j.
AttnRef ref_attention(const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const AttnCase& c, double scale,
                      uint64_t seed, uint64_t stream) {
  const int S = c.S, D = c.D;
  AttnRef r{std::vector<double>(q.size(), 0.0), std::vector<double>(c.B * c.A * S)};
  std::vector<double> s(S);
  for (int b = 0; b < c.B; b++)
    for (int h = 0; h < c.A; h++) {
      const int g = h / (c.A / c.G);
      const double* Q = &q[(b * c.A + h) * S * D];
      const double* K = &k[(b * c.G + g) * S * D];
      const double* V = &v[(b * c.G + g) * S * D];
      for (int i = 0; i < S; i++) {
        double m = -INFINITY;
        for (int j = 0; j <= i; j++) {
          s[j] = 0.0;
          for (int d = 0; d < D; d++) s[j] += Q[i * D + d] * K[j * D + d];
          s[j] *= scale;
          m = std::max(m, s[j]);
        }
        double sum = 0.0;
        for (int j = 0; j <= i; j++) sum += std::exp(s[j] - m);
        const double lse = m + std::log(sum);
        r.lse[(b * c.A + h) * S + i] = lse;
        for (int j = 0; j <= i; j++) {
          uint64_t idx = ((uint64_t)(b * c.A + h) * S + i) * S + j;
          bool keep = c.p == 0.0f || kernels::dropout_keep(seed, stream, idx, c.p);
          double pj = keep ? std::exp(s[j] - lse) / (1.0 - c.p) : 0.0;
          for (int d = 0; d < D; d++) r.o[((b * c.A + h) * S + i) * D + d] += pj * V[j * D + d];
        }
      }
    }
  return r;
}

const uint64_t kSeed = 99, kStream = 4 * 3 + 1;

TEST_P(AttentionKernels, FlashForwardMatchesNaiveDouble) {
  for (AttnCase c : {AttnCase{2, 2, 2, 70, 8, 0.0f}, AttnCase{1, 4, 2, 130, 16, 0.0f},
                     AttnCase{2, 4, 1, 70, 8, 0.2f}, AttnCase{1, 2, 2, 5, 4, 0.0f}}) {
    SCOPED_TRACE(testing::Message() << "B " << c.B << " A " << c.A << " G " << c.G << " S " << c.S
                                    << " D " << c.D << " p " << c.p);
    const size_t nq = c.B * c.A * c.S * c.D, nk = c.B * c.G * c.S * c.D;
    const float scale = 1.0f / std::sqrt((float)c.D);
    std::vector<float> q = uniform(nq, 60, -2.0f, 2.0f), k = uniform(nk, 61, -2.0f, 2.0f),
                       v = uniform(nk, 62);
    DevBuf<float> dq(dev(), q), dk(dev(), k), dv(dev(), v), o(dev(), nq),
        lse(dev(), c.B * c.A * c.S);
    kernels::flash_attention_forward(dev(), o.get(), lse.get(), dq.get(), dk.get(), dv.get(), c.B,
                                     c.A, c.G, c.D, scale, c.p, kSeed, kStream,
                                     kernels::whole_sequence(c.S, c.A, c.D));
    AttnRef ref = ref_attention(to_double(q), to_double(k), to_double(v), c, scale, kSeed, kStream);
    EXPECT_LT(max_rel_err(o.host(), ref.o), 1e-5);
    EXPECT_LT(max_rel_err(lse.host(), ref.lse), 1e-5);
  }
}

TEST_P(AttentionKernels, FlashBackwardMatchesFiniteDifferences) {
  for (AttnCase c : {AttnCase{1, 2, 1, 70, 4, 0.0f}, AttnCase{1, 2, 2, 70, 4, 0.25f},
                     AttnCase{2, 4, 2, 9, 4, 0.25f}}) {
    SCOPED_TRACE(testing::Message() << "B " << c.B << " A " << c.A << " G " << c.G << " S " << c.S
                                    << " D " << c.D << " p " << c.p);
    const size_t nq = c.B * c.A * c.S * c.D, nk = c.B * c.G * c.S * c.D;
    const float scale = 1.0f / std::sqrt((float)c.D);
    std::vector<float> q = uniform(nq, 63, -2.0f, 2.0f), k = uniform(nk, 64, -2.0f, 2.0f),
                       v = uniform(nk, 65), R = uniform(nq, 66);
    DevBuf<float> dq_(dev(), q), dk_(dev(), k), dv_(dev(), v), o(dev(), nq),
        lse(dev(), c.B * c.A * c.S), dR(dev(), R);
    // dq, dk, dv are "+=": start them with junk J and take it away after.
    const std::vector<float> Jq = uniform(nq, 67), Jk = uniform(nk, 68), Jv = uniform(nk, 69);
    DevBuf<float> gq(dev(), Jq), gk(dev(), Jk), gv(dev(), Jv);
    const kernels::AttentionBlock blk = kernels::whole_sequence(c.S, c.A, c.D);
    kernels::flash_attention_forward(dev(), o.get(), lse.get(), dq_.get(), dk_.get(), dv_.get(),
                                     c.B, c.A, c.G, c.D, scale, c.p, kSeed, kStream, blk);
    kernels::flash_attention_backward(dev(), gq.get(), gk.get(), gv.get(), dR.get(), dq_.get(),
                                      dk_.get(), dv_.get(), o.get(), lse.get(), c.B, c.A, c.G,
                                      c.D, scale, c.p, kSeed, kStream, blk);
    auto minus = [](std::vector<float> a, const std::vector<float>& b) {
      for (size_t i = 0; i < a.size(); i++) a[i] -= b[i];
      return a;
    };
    const std::vector<double> qd = to_double(q), kd = to_double(k), vd = to_double(v),
                              Rd = to_double(R);
    using Vec = std::vector<double>;
    auto L = [&](const Vec& qv, const Vec& kv, const Vec& vv) {
      return dot(ref_attention(qv, kv, vv, c, scale, kSeed, kStream).o, Rd);
    };
    auto Lq = [&](const Vec& t) { return L(t, kd, vd); };
    auto Lk = [&](const Vec& t) { return L(qd, t, vd); };
    auto Lv = [&](const Vec& t) { return L(qd, kd, t); };
    EXPECT_LT(max_rel_err(minus(gq.host(), Jq), fd_grad(Lq, qd)), 1e-4);
    EXPECT_LT(max_rel_err(minus(gk.host(), Jk), fd_grad(Lk, kd)), 1e-4);
    EXPECT_LT(max_rel_err(minus(gv.host(), Jv), fd_grad(Lv, vd)), 1e-4);
  }
}

// The naive path, from the ops the model uses when --attention naive: per head
// scores = Q K^T, P = attention_softmax(scores * scale), P' = attention_dropout(P), O = P' V;
// backward
// dP' = dO V^T, dV += P'^T dO, dP = dropout_backward(dP'), dS = softmax_backward(dP),
// dQ = dS K, dK += dS^T Q. Same seed and stream, so the same mask as flash.
TEST_P(AttentionKernels, FlashEqualsNaiveOpsPath) {
  const AttnCase c{2, 4, 2, 70, 8, 0.2f};
  const int S = c.S, D = c.D, BA = c.B * c.A;
  const size_t nq = BA * S * D, nk = c.B * c.G * S * D, np = (size_t)BA * S * S;
  const float scale = 1.0f / std::sqrt((float)D);
  const Device d = dev();
  DevBuf<float> q(d, uniform(nq, 70, -2.0f, 2.0f)), k(d, uniform(nk, 71, -2.0f, 2.0f)),
      v(d, uniform(nk, 72)), dO(d, uniform(nq, 73));
  DevBuf<float> scores(d, np), P(d, np), Pd(d, np), dPd(d, np), dP(d, np), dS(d, np);
  DevBuf<uint8_t> mask(d, np);
  DevBuf<float> o_naive(d, nq), dq_naive(d, nq), dk_naive(d, nk), dv_naive(d, nk);
  auto head = [&](DevBuf<float>& t, int bh) { return t.get() + (size_t)bh * S * D; };
  auto group = [&](DevBuf<float>& t, int bh) {
    return t.get() + ((size_t)(bh / c.A) * c.G + (bh % c.A) / (c.A / c.G)) * S * D;
  };
  auto mat = [&](DevBuf<float>& t, int bh) { return t.get() + (size_t)bh * S * S; };
  const kernels::AttentionBlock blk = kernels::whole_sequence(S, c.A, D);

  for (int bh = 0; bh < BA; bh++)
    kernels::gemm(d, false, true, S, S, D, 1.0f, head(q, bh), D, group(k, bh), D, 0.0f,
                  mat(scores, bh), S);
  kernels::attention_softmax_forward(d, P.get(), nullptr, scores.get(), BA, D, scale, blk);
  kernels::attention_dropout_forward(d, Pd.get(), mask.get(), P.get(), c.B, c.A, c.p, kSeed,
                                     kStream, blk);
  for (int bh = 0; bh < BA; bh++)
    kernels::gemm(d, false, false, S, D, S, 1.0f, mat(Pd, bh), S, group(v, bh), D, 0.0f,
                  head(o_naive, bh), D);
  for (int bh = 0; bh < BA; bh++) {
    kernels::gemm(d, false, true, S, S, D, 1.0f, head(dO, bh), D, group(v, bh), D, 0.0f,
                  mat(dPd, bh), S);
    kernels::gemm(d, true, false, S, D, S, 1.0f, mat(Pd, bh), S, head(dO, bh), D, 1.0f,
                  group(dv_naive, bh), D);
  }
  kernels::dropout_backward(d, dP.get(), dPd.get(), mask.get(), np, c.p);
  kernels::attention_softmax_backward(d, dS.get(), dP.get(), P.get(), nullptr, BA, D, scale,
                                      blk);
  for (int bh = 0; bh < BA; bh++) {
    kernels::gemm(d, false, false, S, D, S, 1.0f, mat(dS, bh), S, group(k, bh), D, 0.0f,
                  head(dq_naive, bh), D);
    kernels::gemm(d, true, false, S, D, S, 1.0f, mat(dS, bh), S, head(q, bh), D, 1.0f,
                  group(dk_naive, bh), D);
  }

  DevBuf<float> o(d, nq), lse(d, BA * S), dq(d, nq), dk(d, nk), dv(d, nk);
  kernels::flash_attention_forward(d, o.get(), lse.get(), q.get(), k.get(), v.get(), c.B, c.A,
                                   c.G, D, scale, c.p, kSeed, kStream, blk);
  kernels::flash_attention_backward(d, dq.get(), dk.get(), dv.get(), dO.get(), q.get(), k.get(),
                                    v.get(), o.get(), lse.get(), c.B, c.A, c.G, D, scale, c.p,
                                    kSeed, kStream, blk);
  EXPECT_LT(max_rel_err(o.host(), to_double(o_naive.host())), 1e-5);
  EXPECT_LT(max_rel_err(dq.host(), to_double(dq_naive.host())), 1e-5);
  EXPECT_LT(max_rel_err(dk.host(), to_double(dk_naive.host())), 1e-5);
  EXPECT_LT(max_rel_err(dv.host(), to_double(dv_naive.host())), 1e-5);
}

// On the whole sequence the pass's dropout draws what dropout_forward on P draws (index
// ((b*A + h)*S + i)*S + j), bit for bit, and p = 0 copies.
TEST_P(AttentionKernels, AttentionDropoutIsDropoutOnTheWholeSequence) {
  const int B = 2, A = 3, S = 7, D = 4;
  const size_t np = (size_t)B * A * S * S;
  const kernels::AttentionBlock blk = kernels::whole_sequence(S, A, D);
  DevBuf<float> P(dev(), uniform(np, 74, 0.0f, 1.0f)), out(dev(), np), want(dev(), np);
  DevBuf<uint8_t> mask(dev(), np), want_mask(dev(), np);
  for (float p : {0.0f, 0.3f}) {
    kernels::attention_dropout_forward(dev(), out.get(), mask.get(), P.get(), B, A, p, kSeed,
                                       kStream, blk);
    kernels::dropout_forward(dev(), want.get(), want_mask.get(), P.get(), np, p, kSeed, kStream);
    EXPECT_EQ(out.host(), want.host());
    EXPECT_EQ(mask.host(), want_mask.host());
  }
}

TEST(AttentionFlops, FlashCountsCausalPairs) {
  const int B = 2, A = 3, G = 1, S = 5, D = 4;
  std::vector<float> q(B * A * S * D, 0.1f), kv(B * G * S * D, 0.1f), o(q.size()), lse(B * A * S);
  std::vector<float> dq(q.size()), dk(kv.size()), dv(kv.size());
  const double pairs = B * A * S * (S + 1) / 2.0;  // query i sees keys 0..i
  const kernels::AttentionBlock blk = kernels::whole_sequence(S, A, D);
  EXPECT_EQ(kernels::visible_pairs(blk), S * (S + 1) / 2);
  kernels::reset_flop_counter();
  kernels::flash_attention_forward(Device::CPU, o.data(), lse.data(), q.data(), kv.data(),
                                   kv.data(), B, A, G, D, 0.5f, 0.0f, 0, 0, blk);
  EXPECT_EQ(kernels::flop_counter(), 2 * 2.0 * D * pairs);  // Q K^T and P V
  kernels::reset_flop_counter();
  kernels::flash_attention_backward(Device::CPU, dq.data(), dk.data(), dv.data(), q.data(),
                                    q.data(), kv.data(), kv.data(), o.data(), lse.data(), B, A,
                                    G, D, 0.5f, 0.0f, 0, 0, blk);
  EXPECT_EQ(kernels::flop_counter(), 5 * 2.0 * D * pairs);  // Q K^T, dP', dV, dQ, dK
  kernels::reset_flop_counter();

  // A pass of the last 2 rows against 3 earlier keys they all see: 2 * 3 pairs per head.
  kernels::AttentionBlock pass;
  pass.q = kernels::AttentionRows{2, (long long)S * D, kernels::TokenPositions()};
  pass.q.pos.start[0] = 3;
  pass.k = kernels::AttentionRows{3, (long long)S * D, kernels::TokenPositions()};
  EXPECT_EQ(kernels::visible_pairs(pass), 6);
  kernels::flash_attention_forward(Device::CPU, o.data(), lse.data(), q.data(), kv.data(),
                                   kv.data(), B, A, G, D, 0.5f, 0.0f, 0, 0, pass);
  EXPECT_EQ(kernels::flop_counter(), 2 * 2.0 * D * B * A * 6);
  kernels::reset_flop_counter();
}

}  // namespace
