// tests/test_kernels_moe.cpp: the mixture-of-experts kernels, grouped GEMM, the per-label GEMM
// counter and RoPE alone, against double-precision references and finite differences (method:
// tests/test_kernels_helpers.h), on every device this binary reaches.
//
// What is exact and what is not:
//  - the top-k selection and its tie rule (larger value first, ties to the lower expert) are
//    checked on hand-made rows; gates against a double reference (1e-5);
//  - every backward (router top-k in its four forms, balancing scores, z loss, the gated
//    activations with their dgates, the shared gate) against central differences (1e-4);
//  - permute / unpermute are sums of copies in a fixed order: checked bit for bit against a
//    float loop in that order, and unpermute(permute(x)) == x for k = 1;
//  - grouped GEMM == the per-group gemm calls bit for bit (fp32 and bf16), which holds on the
//    CPU by construction (the same sgemm); on CUDA cuBLAS may pick another kernel for a grouped
//    problem, so there the comparison is to 1e-6;
//  - RoPE alone: adjoint (<rope x, y> = <x, rope_backward y>) and split(theta 0) + rope ==
//    split(theta) bit for bit;
//  - bf16 storage against the fp32 op on the same (rounded) inputs: one bf16 rounding, 1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/math.h"
#include "kernels/ops.h"
#include "tests/test_kernels_helpers.h"

namespace {

using namespace ktest;
using kernels::bf16;
using kernels::Device;

class Moe : public ::testing::TestWithParam<Device> {
 protected:
  Device dev() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Devices, Moe, ::testing::ValuesIn(test_devices()), device_label);

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// ---- router: double references -----------------------------------------------------------

// Gates of fixed picks `ex` (N, k) from logits l (N, E), in double: ops.h's formulas.
std::vector<double> ref_gates(const std::vector<double>& l, const std::vector<int>& ex, int N,
                              int E, int k, int score, bool pre, double scaling) {
  std::vector<double> g(N * k);
  for (int t = 0; t < N; t++) {
    const double* r = &l[t * E];
    const int* e = &ex[t * k];
    if (score == 1) {
      double sum = 0;
      for (int j = 0; j < k; j++) sum += sig(r[e[j]]);
      for (int j = 0; j < k; j++)
        g[t * k + j] = k > 1 ? sig(r[e[j]]) / (sum + 1e-20) : sig(r[e[j]]);
    } else if (pre) {
      double m = r[0], sum = 0;
      for (int i = 1; i < E; i++) m = std::max(m, r[i]);
      for (int i = 0; i < E; i++) sum += std::exp(r[i] - m);
      for (int j = 0; j < k; j++) g[t * k + j] = std::exp(r[e[j]] - m) / sum;
    } else {
      double m = r[e[0]], sum = 0;
      for (int j = 1; j < k; j++) m = std::max(m, r[e[j]]);
      for (int j = 0; j < k; j++) sum += std::exp(r[e[j]] - m);
      for (int j = 0; j < k; j++) g[t * k + j] = std::exp(r[e[j]] - m) / sum;
    }
    if (scaling != 0)
      for (int j = 0; j < k; j++) g[t * k + j] *= scaling;
  }
  return g;
}

// The picks in double: the k largest ranking values (ops.h), ties to the lower index.
std::vector<int> ref_picks(const std::vector<double>& l, const std::vector<double>& bias, int N,
                           int E, int k, int score, bool pre) {
  std::vector<int> ex(N * k);
  for (int t = 0; t < N; t++) {
    std::vector<double> v(E);
    double m = l[t * E], sum = 0;
    for (int i = 0; i < E; i++) m = std::max(m, l[t * E + i]);
    for (int i = 0; i < E; i++) sum += std::exp(l[t * E + i] - m);
    for (int i = 0; i < E; i++) {
      const double x = l[t * E + i];
      v[i] = (score == 1 ? sig(x) : pre ? std::exp(x - m) / sum : x) + (bias.empty() ? 0 : bias[i]);
    }
    std::vector<bool> used(E, false);
    for (int j = 0; j < k; j++) {
      int best = -1;
      for (int i = 0; i < E; i++)
        if (!used[i] && (best < 0 || v[i] > v[best])) best = i;
      used[best] = true;
      ex[t * k + j] = best;
    }
  }
  return ex;
}

struct RouterCase {
  const char* name;
  int k, score;
  bool pre;
  float scaling;
  bool bias;
};

TEST_P(Moe, RouterTopkGatesAndBackwardMatchFiniteDifferences) {
  const int N = 5, E = 8;
  const RouterCase cases[] = {{"softmax k=2 scaled", 2, 0, false, 2.5f, false},
                              {"softmax k=1", 1, 0, false, 0.0f, false},
                              {"pre_softmax k=3", 3, 0, true, 0.0f, false},
                              {"pre_softmax k=2 scaled", 2, 0, true, 1.7f, false},
                              {"sigmoid k=1 scaled", 1, 1, false, 1.5f, false},
                              {"sigmoid k=3 bias", 3, 1, false, 0.0f, true},
                              {"sigmoid k=2 scaled bias", 2, 1, false, 2.0f, true}};
  unsigned seed = 100;
  for (const RouterCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int k = c.k;
    std::vector<float> logits = uniform(N * E, seed++, -2.0f, 2.0f);
    std::vector<float> bias = c.bias ? uniform(E, seed++, -0.3f, 0.3f) : std::vector<float>();
    std::vector<float> R = uniform(N * k, seed++);
    DevBuf<float> dl(dev(), logits), gates(dev(), uniform(N * k, seed++)), dR(dev(), R),
        dlogits(dev(), uniform(N * E, seed++));
    DevBuf<int> experts(dev(), std::vector<int>(N * k, -7));
    DevBuf<float> dbias(dev(), c.bias ? bias : std::vector<float>(1));
    kernels::moe_router_topk(dev(), gates.get(), experts.get(), dl.get(),
                             c.bias ? dbias.get() : nullptr, N, E, k, c.score, c.pre, c.scaling);
    const std::vector<int> ex = experts.host();
    EXPECT_EQ(ex, ref_picks(to_double(logits), to_double(bias), N, E, k, c.score, c.pre));
    EXPECT_LT(max_rel_err(gates.host(),
                          ref_gates(to_double(logits), ex, N, E, k, c.score, c.pre, c.scaling)),
              1e-5);
    kernels::moe_router_topk_backward(dev(), dlogits.get(), dR.get(), dl.get(), experts.get(), N, E,
                                      k, c.score, c.pre, c.scaling);
    auto L = [&](const std::vector<double>& l) {
      return dot(ref_gates(l, ex, N, E, k, c.score, c.pre, c.scaling), to_double(R));
    };
    EXPECT_LT(max_rel_err(dlogits.host(), fd_grad(L, to_double(logits))), 1e-4);
  }
}

// Hand-made rows with equal values: the larger first, ties to the lower expert index, for all
// three ranking values (logits, pre-softmax probabilities, sigmoids).
TEST_P(Moe, RouterTopkTieBreaking) {
  const int E = 6, k = 3, N = 3;
  const std::vector<float> logits = {0.5f, 1.0f,  1.0f, -1.0f, 1.0f, 0.5f,    // three tied 1.0
                                     0.0f, 0.0f,  0.0f, 0.0f,  0.0f, 0.0f,    // all tied
                                     2.0f, -3.0f, 0.5f, 0.5f,  2.0f, 0.25f};  // pairs tied
  const std::vector<int> want = {1, 2, 4, 0, 1, 2, 0, 4, 2};
  for (int score : {0, 1}) {
    for (bool pre : {false, true}) {
      if (score == 1 && pre) continue;
      SCOPED_TRACE(testing::Message() << "score " << score << " pre " << pre);
      DevBuf<float> dl(dev(), logits), gates(dev(), N * k);
      DevBuf<int> experts(dev(), N * k);
      kernels::moe_router_topk(dev(), gates.get(), experts.get(), dl.get(), nullptr, N, E, k, score,
                               pre, 0.0f);
      EXPECT_EQ(experts.host(), want);
      const std::vector<float> g = gates.host();
      for (int t = 0; t < N; t++)  // gates come sorted like their picks
        for (int j = 1; j < k; j++) EXPECT_GE(g[t * k + j - 1], g[t * k + j]);
      // row 1 (all tied): equal gates, 1/k after the softmax over the picks
      if (score == 0 && !pre) {
        for (int j = 0; j < k; j++) EXPECT_FLOAT_EQ(g[k + j], 1.0f / k);
      }
    }
  }
}

// The sigmoid expert bias picks but does not gate: the gates are those of the picks it made,
// computed from the unbiased sigmoids.
TEST_P(Moe, RouterExpertBiasChangesSelectionNotGates) {
  const int E = 4, k = 2, N = 1;
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 5.0f};  // expert 3 now ranks first
  DevBuf<float> dl(dev(), logits), db(dev(), bias), gates(dev(), k), gates0(dev(), k);
  DevBuf<int> experts(dev(), k), experts0(dev(), k);
  kernels::moe_router_topk(dev(), gates0.get(), experts0.get(), dl.get(), nullptr, N, E, k, 1,
                           false, 0.0f);
  kernels::moe_router_topk(dev(), gates.get(), experts.get(), dl.get(), db.get(), N, E, k, 1, false,
                           0.0f);
  EXPECT_EQ(experts0.host(), (std::vector<int>{0, 1}));
  EXPECT_EQ(experts.host(), (std::vector<int>{3, 0}));
  const std::vector<float> g = gates.host();
  const double s3 = sig(-1.0), s0 = sig(2.0);
  EXPECT_NEAR(g[0], s3 / (s3 + s0), 1e-6);
  EXPECT_NEAR(g[1], s0 / (s3 + s0), 1e-6);
}

TEST_P(Moe, BalancingScoresForwardBackward) {
  const int N = 4, E = 7;
  for (int score : {0, 1}) {
    SCOPED_TRACE(testing::Message() << "score " << score);
    std::vector<float> logits = uniform(N * E, 200 + score, -2.0f, 2.0f), R = uniform(N * E, 210),
                       D0 = uniform(N * E, 211);
    auto fwd = [&](const std::vector<double>& l) {
      std::vector<double> p(N * E);
      for (int t = 0; t < N; t++) {
        double m = l[t * E], sum = 0;
        for (int e = 0; e < E; e++) m = std::max(m, l[t * E + e]);
        for (int e = 0; e < E; e++)
          sum += score == 1 ? sig(l[t * E + e]) : std::exp(l[t * E + e] - m);
        for (int e = 0; e < E; e++)
          p[t * E + e] =
              score == 1 ? sig(l[t * E + e]) / (sum + 1e-20) : std::exp(l[t * E + e] - m) / sum;
      }
      return p;
    };
    DevBuf<float> dl(dev(), logits), scores(dev(), uniform(N * E, 212)), dR(dev(), R),
        dlogits(dev(), D0);
    kernels::moe_balancing_scores(dev(), scores.get(), dl.get(), N, E, score);
    EXPECT_LT(max_rel_err(scores.host(), fwd(to_double(logits))), 1e-6);
    kernels::moe_balancing_scores_backward(dev(), dlogits.get(), dR.get(), dl.get(), N, E, score);
    std::vector<double> want = fd_grad(
        [&](const std::vector<double>& l) { return dot(fwd(l), to_double(R)); }, to_double(logits));
    for (size_t i = 0; i < want.size(); i++) want[i] += D0[i];  // "+="
    EXPECT_LT(max_rel_err(dlogits.host(), want), 1e-5);
  }
}

TEST_P(Moe, WeightedSumAndBackward) {
  const int N = 6, E = 5;
  for (int group : {N, 3}) {
    SCOPED_TRACE(testing::Message() << "group " << group);
    std::vector<float> scores = uniform(N * E, 300), w = uniform((N / group) * E, 301);
    DevBuf<float> ds(dev(), scores), dw(dev(), w), grad(dev(), uniform(N * E, 302));
    double want = 0;
    for (int t = 0; t < N; t++)
      for (int e = 0; e < E; e++) want += (double)scores[t * E + e] * w[(t / group) * E + e];
    EXPECT_NEAR(kernels::moe_weighted_sum(dev(), ds.get(), dw.get(), N, E, group), want, 1e-12);
    kernels::moe_weighted_sum_backward(dev(), grad.get(), dw.get(), N, E, group);
    const std::vector<float> g = grad.host();
    for (int t = 0; t < N; t++)
      for (int e = 0; e < E; e++) EXPECT_EQ(g[t * E + e], w[(t / group) * E + e]);
  }
}

TEST_P(Moe, ZLossSumAndBackward) {
  const int N = 5, E = 9;
  const float coeff = 0.3f;
  std::vector<float> logits = uniform(N * E, 400, -3.0f, 3.0f), D0 = uniform(N * E, 401);
  auto zsum = [&](const std::vector<double>& l) {
    double s = 0;
    for (int t = 0; t < N; t++) {
      double m = l[t * E], sum = 0;
      for (int e = 0; e < E; e++) m = std::max(m, l[t * E + e]);
      for (int e = 0; e < E; e++) sum += std::exp(l[t * E + e] - m);
      const double lse = m + std::log(sum);
      s += lse * lse;
    }
    return s;
  };
  DevBuf<float> dl(dev(), logits), dlogits(dev(), D0);
  const double got = kernels::moe_z_loss_sum(dev(), dl.get(), N, E);
  EXPECT_NEAR(got, zsum(to_double(logits)), 1e-5 * zsum(to_double(logits)));
  kernels::moe_z_loss_backward(dev(), dlogits.get(), dl.get(), N, E, coeff);
  std::vector<double> want = fd_grad(zsum, to_double(logits));
  for (size_t i = 0; i < want.size(); i++) want[i] = coeff * want[i] + D0[i];
  EXPECT_LT(max_rel_err(dlogits.host(), want), 1e-5);
}

// ---- permute / unpermute -----------------------------------------------------------------

// A routing of N tokens, k pairs each, into M permuted rows: each kept pair gets a row (in a
// shuffled order), the other rows are padding; every `drop`-th pair is dropped.
struct Routing {
  std::vector<int> row_pair, slots;  // (M), (N k)
  int M;
};
Routing make_routing(int N, int k, int padding, int drop, unsigned seed) {
  const int pairs = N * k;
  std::vector<int> kept;
  for (int p = 0; p < pairs; p++)
    if (drop == 0 || p % drop != drop - 1) kept.push_back(p);
  Routing r;
  r.M = (int)kept.size() + padding;
  r.row_pair.assign(r.M, -1);
  r.slots.assign(pairs, -1);
  std::vector<int> rows(r.M);
  for (int j = 0; j < r.M; j++) rows[j] = j;
  std::mt19937 rng(seed);
  std::shuffle(rows.begin(), rows.end(), rng);
  for (size_t i = 0; i < kept.size(); i++) {
    r.row_pair[rows[i]] = kept[i];
    r.slots[kept[i]] = rows[i];
  }
  return r;
}

TEST_P(Moe, PermuteUnpermuteExactAndFusedEqualsUnfused) {
  const int N = 7, C = 13, k = 3;
  const Routing r = make_routing(N, k, 4, 5, 500);
  std::vector<float> x = uniform(N * C, 501), gates = uniform(N * k, 502);
  DevBuf<float> dx(dev(), x), dg(dev(), gates);
  DevBuf<int> rp(dev(), r.row_pair), sl(dev(), r.slots);
  for (bool fused : {true, false}) {
    SCOPED_TRACE(testing::Message() << "fused " << fused);
    DevBuf<float> perm(dev(), uniform(r.M * C, 503)), pg(dev(), uniform(r.M, 504)),
        back(dev(), uniform(N * C, 505));
    kernels::moe_permute(dev(), perm.get(), pg.get(), dx.get(), dg.get(), rp.get(), r.M, C, k,
                         fused);
    const std::vector<float> P = perm.host(), PG = pg.host();
    for (int j = 0; j < r.M; j++) {
      const int p = r.row_pair[j];
      EXPECT_EQ(PG[j], p >= 0 ? gates[p] : 0.0f);
      for (int c = 0; c < C; c++) ASSERT_EQ(P[j * C + c], p >= 0 ? x[(p / k) * C + c] : 0.0f);
    }
    // unpermute of the permuted rows scaled per row: out[t] = sum over kept s of rows
    std::vector<float> Y = uniform(r.M * C, 506);
    DevBuf<float> dy(dev(), Y);
    kernels::moe_unpermute(dev(), back.get(), dy.get(), sl.get(), N, C, k, fused);
    const std::vector<float> B = back.host();
    for (int t = 0; t < N; t++)
      for (int c = 0; c < C; c++) {
        float want = 0.0f;  // in slot order, fp32: the very adds the op does
        for (int s = 0; s < k; s++)
          if (r.slots[t * k + s] >= 0) want += Y[r.slots[t * k + s] * C + c];
        ASSERT_EQ(B[t * C + c], want) << t << "," << c;
      }
    DevBuf<float> dgp(dev(), uniform(N * k, 507));
    kernels::moe_unpermute_gates(dev(), dgp.get(), pg.get(), sl.get(), N * k);
    const std::vector<float> DG = dgp.host();
    for (int p = 0; p < N * k; p++) EXPECT_EQ(DG[p], r.slots[p] >= 0 ? gates[p] : 0.0f);
  }
}

TEST_P(Moe, PermuteThenUnpermuteIsIdentityForTopOne) {
  const int N = 11, C = 17, k = 1;
  const Routing r = make_routing(N, k, 3, 0, 510);
  std::vector<float> x = uniform(N * C, 511);
  DevBuf<float> dx(dev(), x), dg(dev(), uniform(N, 512)), perm(dev(), r.M * C), pg(dev(), r.M),
      back(dev(), N * C);
  DevBuf<int> rp(dev(), r.row_pair), sl(dev(), r.slots);
  for (bool fused : {true, false}) {
    kernels::moe_permute(dev(), perm.get(), pg.get(), dx.get(), dg.get(), rp.get(), r.M, C, k,
                         fused);
    kernels::moe_unpermute(dev(), back.get(), perm.get(), sl.get(), N, C, k, fused);
    EXPECT_EQ(back.host(), x) << "fused " << fused;
  }
}

// ---- gated expert activations and the shared gate ------------------------------------------

double ref_silu(double x) { return x * sig(x); }
double ref_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

TEST_P(Moe, SwigluAndGeluWithGatesForwardBackward) {
  const int M = 4, F = 9;
  for (bool swiglu : {true, false}) {
    SCOPED_TRACE(swiglu ? "swiglu" : "gelu");
    const int W = swiglu ? 2 * F : F;  // input row width
    std::vector<float> in = uniform(M * W, 600, -3.0f, 3.0f), gates = uniform(M, 601, 0.1f, 1.0f),
                       R = uniform(M * F, 602);
    // x = [in | gates]: one vector so that one finite difference covers both gradients
    auto fwd = [&](const std::vector<double>& x) {
      std::vector<double> o(M * F);
      for (int j = 0; j < M; j++)
        for (int f = 0; f < F; f++) {
          const double* row = &x[j * W];
          const double a = swiglu ? ref_silu(row[f]) * row[F + f] : ref_gelu(row[f]);
          o[j * F + f] = a * x[M * W + j];
        }
      return o;
    };
    std::vector<double> x = to_double(in);
    for (float g : gates) x.push_back(g);
    DevBuf<float> din_(dev(), in), dgt(dev(), gates), out(dev(), uniform(M * F, 603)), dR(dev(), R),
        gin(dev(), uniform(M * W, 604)), ggates(dev(), uniform(M, 605));
    if (swiglu) {
      kernels::moe_swiglu_forward(dev(), out.get(), din_.get(), dgt.get(), M, F);
      kernels::moe_swiglu_backward(dev(), gin.get(), ggates.get(), dR.get(), din_.get(), dgt.get(),
                                   M, F);
    } else {
      kernels::moe_gelu_forward(dev(), out.get(), din_.get(), dgt.get(), M, F);
      kernels::moe_gelu_backward(dev(), gin.get(), ggates.get(), dR.get(), din_.get(), dgt.get(), M,
                                 F);
    }
    EXPECT_LT(max_rel_err(out.host(), fwd(x)), 1e-5);
    const std::vector<double> g =
        fd_grad([&](const std::vector<double>& v) { return dot(fwd(v), to_double(R)); }, x);
    EXPECT_LT(max_rel_err(gin.host(), std::vector<double>(g.begin(), g.begin() + M * W)), 1e-5);
    EXPECT_LT(max_rel_err(ggates.host(), std::vector<double>(g.begin() + M * W, g.end())), 1e-5);
  }
}

TEST_P(Moe, SharedGateForwardBackward) {
  const int N = 5, C = 11;
  std::vector<float> y = uniform(N * C, 700), z = uniform(N, 701, -2.0f, 2.0f),
                     out0 = uniform(N * C, 702), R = uniform(N * C, 703);
  auto fwd = [&](const std::vector<double>& x) {  // x = [y | z]
    std::vector<double> o(N * C);
    for (int t = 0; t < N; t++)
      for (int c = 0; c < C; c++) o[t * C + c] = sig(x[N * C + t]) * x[t * C + c];
    return o;
  };
  std::vector<double> x = to_double(y);
  for (float v : z) x.push_back(v);
  DevBuf<float> dy_(dev(), y), dz_(dev(), z), out(dev(), out0), dR(dev(), R),
      gy(dev(), uniform(N * C, 704)), gz(dev(), uniform(N, 705));
  kernels::moe_shared_gate_forward(dev(), out.get(), dy_.get(), dz_.get(), N, C);
  std::vector<double> want = fwd(x);
  for (size_t i = 0; i < want.size(); i++) want[i] += out0[i];  // "+="
  EXPECT_LT(max_rel_err(out.host(), want), 1e-6);
  kernels::moe_shared_gate_backward(dev(), gy.get(), gz.get(), dR.get(), dy_.get(), dz_.get(), N,
                                    C);
  const std::vector<double> g =
      fd_grad([&](const std::vector<double>& v) { return dot(fwd(v), to_double(R)); }, x);
  EXPECT_LT(max_rel_err(gy.host(), std::vector<double>(g.begin(), g.begin() + N * C)), 1e-5);
  EXPECT_LT(max_rel_err(gz.host(), std::vector<double>(g.begin() + N * C, g.end())), 1e-5);
}

// ---- RoPE alone ------------------------------------------------------------------------------

TEST_P(Moe, RopeAdjointInverseAndEqualsSplitRope) {
  const int B = 2, H = 3, S = 5, D = 8;
  const float theta = 10000.0f;
  const size_t n = (size_t)B * H * S * D;
  std::vector<float> x = uniform(n, 800), y = uniform(n, 801);
  DevBuf<float> dx(dev(), x), dy(dev(), y);
  kernels::rope_forward(dev(), dx.get(), B, H, S, D, theta);
  kernels::rope_backward(dev(), dy.get(), B, H, S, D, theta);
  // <rope x, y> == <x, rope^T y>
  EXPECT_NEAR(dot(to_double(dx.host()), to_double(y)), dot(to_double(x), to_double(dy.host())),
              1e-5);
  // backward is the inverse rotation
  kernels::rope_backward(dev(), dx.get(), B, H, S, D, theta);
  EXPECT_LT(max_rel_err(dx.host(), to_double(x)), 1e-6);
  // position 0 is not rotated
  DevBuf<float> one(dev(), x);
  kernels::rope_forward(dev(), one.get(), 1, 1, 1, D, theta);
  const std::vector<float> o = one.host();
  for (int c = 0; c < D; c++) EXPECT_EQ(o[c], x[c]);

  // split with theta == split with theta 0, then rope on q and k
  const int A = 4, G = 2;
  std::vector<float> qkv = uniform((size_t)B * S * (A + 2 * G) * D, 802);
  DevBuf<float> dqkv(dev(), qkv), q1(dev(), (size_t)B * A * S * D),
      k1(dev(), (size_t)B * G * S * D), v1(dev(), (size_t)B * G * S * D),
      q2(dev(), (size_t)B * A * S * D), k2(dev(), (size_t)B * G * S * D),
      v2(dev(), (size_t)B * G * S * D);
  kernels::qkv_split_forward(dev(), q1.get(), k1.get(), v1.get(), dqkv.get(), B, S, A, G, D, theta);
  kernels::qkv_split_forward(dev(), q2.get(), k2.get(), v2.get(), dqkv.get(), B, S, A, G, D, 0.0f);
  kernels::rope_forward(dev(), q2.get(), B, A, S, D, theta);
  kernels::rope_forward(dev(), k2.get(), B, G, S, D, theta);
  EXPECT_EQ(q1.host(), q2.host());
  EXPECT_EQ(k1.host(), k2.host());
  EXPECT_EQ(v1.host(), v2.host());
}

// ---- grouped GEMM ----------------------------------------------------------------------------

// Experts' projections: group i multiplies rows [row_i, row_i + m_i) of X (tokens, K) by the
// expert's weight W_i (K, Nn) stored at i*K*Nn (or W_i^T, trans_b), into the same rows of Y.
struct GroupedCase {
  std::vector<kernels::GemmGroup> groups;
  int rows, K, Nn;
};
GroupedCase expert_groups(bool ta, int K, int Nn, std::vector<int> m) {
  GroupedCase g;
  g.K = K;
  g.Nn = Nn;
  g.rows = 0;
  for (size_t i = 0; i < m.size(); i++) {
    kernels::GemmGroup gr;
    gr.m = m[i];
    gr.n = Nn;
    gr.k = K;
    gr.a_offset = ta ? g.rows : (long long)g.rows * K;  // A stored (K, rows) when transposed
    gr.b_offset = (long long)i * K * Nn;
    gr.c_offset = (long long)g.rows * Nn;
    g.rows += m[i];
    g.groups.push_back(gr);
  }
  return g;
}

template <typename T>
std::vector<T> values(const std::vector<float>& v) {
  if constexpr (std::is_same<T, float>::value) {
    return v;
  } else {
    std::vector<T> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = kernels::to_bf16(v[i]);
    return out;
  }
}
float widen1(float x) { return x; }
float widen1(bf16 x) { return kernels::to_float(x); }

template <typename T>
void grouped_equals_per_group(Device d) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a " << ta << " trans_b " << tb);
      const int K = 12, Nn = 10;
      GroupedCase g = expert_groups(ta, K, Nn, {5, 0, 3, 9, 1});
      const int lda = ta ? g.rows : K, ldb = tb ? K : Nn, ldc = Nn;
      const size_t experts = g.groups.size();
      std::vector<T> A = values<T>(uniform((size_t)g.rows * K, 900)),
                     B = values<T>(uniform(experts * K * Nn, 901)),
                     C = values<T>(uniform((size_t)g.rows * Nn, 902));
      DevBuf<T> dA(d, A), dB(d, B), c1(d, C), c2(d, C);
      kernels::gemm_grouped(d, ta, tb, 0.8f, dA.get(), lda, dB.get(), ldb, 0.5f, c1.get(), ldc,
                            g.groups.data(), (int)experts);
      for (const kernels::GemmGroup& gr : g.groups)
        kernels::gemm(d, ta, tb, gr.m, gr.n, gr.k, 0.8f, dA.get() + gr.a_offset, lda,
                      dB.get() + gr.b_offset, ldb, 0.5f, c2.get() + gr.c_offset, ldc);
      const std::vector<T> h1 = c1.host(), h2 = c2.host();
      if (d == Device::CPU) {
        ASSERT_EQ(std::memcmp(h1.data(), h2.data(), h1.size() * sizeof(T)), 0);
      } else {
        std::vector<float> f1;
        std::vector<double> f2;
        for (size_t i = 0; i < h1.size(); i++) {
          f1.push_back(widen1(h1[i]));
          f2.push_back(widen1(h2[i]));
        }
        EXPECT_LT(max_rel_err(f1, f2), (std::is_same<T, float>::value ? 1e-6 : 1e-2));
      }
    }
}

TEST_P(Moe, GroupedGemmEqualsPerGroupGemmFp32) { grouped_equals_per_group<float>(dev()); }
TEST_P(Moe, GroupedGemmEqualsPerGroupGemmBf16) { grouped_equals_per_group<bf16>(dev()); }

TEST_P(Moe, GroupedGemmEmptyProductsAndZeroK) {
  const int K = 4, Nn = 3;
  std::vector<kernels::GemmGroup> groups(3);
  groups[0] = {2, Nn, K, 0, 0, 0};
  groups[1] = {2, Nn, 0, 2 * K, K * Nn, 2 * Nn};  // k == 0: C_1 stays
  groups[2] = {0, Nn, K, 4 * K, 2 * K * Nn, 4 * Nn};
  std::vector<float> A = uniform(4 * K, 910), B = uniform(3 * K * Nn, 911),
                     C = uniform(4 * Nn, 912);
  DevBuf<float> dA(dev(), A), dB(dev(), B), dC(dev(), C), ref(dev(), C);
  kernels::gemm_grouped(dev(), false, false, 1.0f, dA.get(), K, dB.get(), Nn, 1.0f, dC.get(), Nn,
                        groups.data(), 3);
  kernels::gemm(dev(), false, false, 2, Nn, K, 1.0f, dA.get(), K, dB.get(), Nn, 1.0f, ref.get(),
                Nn);
  const std::vector<float> got = dC.host(), want = ref.host();
  for (int i = 0; i < 2 * Nn; i++) EXPECT_NEAR(got[i], want[i], 1e-6);
  for (int i = 2 * Nn; i < 4 * Nn; i++) EXPECT_EQ(got[i], C[i]);  // untouched
  EXPECT_THROW(kernels::gemm_grouped(dev(), false, false, 1.0f, dA.get(), K, dB.get(), Nn, 0.0f,
                                     dC.get(), Nn, groups.data(), 3),
               std::invalid_argument);
}

// ---- the per-label GEMM counter ----------------------------------------------------------------

kernels::GemmCount count_of(const char* label) {
  for (const auto& entry : kernels::gemm_counts())
    if (entry.first == label) return entry.second;
  return kernels::GemmCount{};
}

TEST(GemmCount, LabelsNestGroupedIsOneCallAndFlopsSumToTheCounter) {
  const int K = 3, Nn = 2;
  GroupedCase g = expert_groups(false, K, Nn, {2, 0, 4});
  std::vector<float> A(g.rows * K, 1.0f), B(3 * K * Nn, 1.0f), C(g.rows * Nn);
  kernels::reset_gemm_counts();
  kernels::reset_flop_counter();
  const double group_flops = 2.0 * (2 + 4) * Nn * K;
  {
    kernels::GemmLabel experts("experts");
    kernels::gemm_grouped(Device::CPU, false, false, 1.0f, A.data(), K, B.data(), Nn, 0.0f,
                          C.data(), Nn, g.groups.data(), 3);
    {
      kernels::GemmLabel router("router");
      kernels::gemm(Device::CPU, false, false, 2, Nn, K, 1.0f, A.data(), K, B.data(), Nn, 0.0f,
                    C.data(), Nn);
    }
    for (const kernels::GemmGroup& gr : g.groups)  // back to "experts"
      kernels::gemm(Device::CPU, false, false, gr.m, gr.n, gr.k, 1.0f, A.data() + gr.a_offset, K,
                    B.data() + gr.b_offset, Nn, 0.0f, C.data() + gr.c_offset, Nn);
  }
  kernels::gemm_strided_batched(Device::CPU, false, false, 2, Nn, K, 1.0f, A.data(), K, 0, B.data(),
                                Nn, 0, 0.0f, C.data(), Nn, 0, 2);  // "other"
  {
    kernels::GemmLabel attention("attention");
    kernels::add_flops(100.0);  // flash attention: FLOPs, no call
    std::vector<bf16> Ab(2 * K), Bb(K * Nn), Cb(2 * Nn);
    kernels::gemm(Device::CPU, false, false, 2, Nn, K, 1.0f, Ab.data(), K, Bb.data(), Nn, 0.0f,
                  Cb.data(), Nn);
  }
  EXPECT_EQ(count_of("experts").calls, 1 + 3);  // one grouped call, three per-group calls
  EXPECT_EQ(count_of("experts").flops, 2 * group_flops);
  EXPECT_EQ(count_of("router").calls, 1);
  EXPECT_EQ(count_of("router").flops, 2.0 * 2 * Nn * K);
  EXPECT_EQ(count_of("other").calls, 1);
  EXPECT_EQ(count_of("other").flops, 2.0 * 2 * Nn * K * 2);
  EXPECT_EQ(count_of("attention").calls, 1);
  EXPECT_EQ(count_of("attention").flops, 100.0 + 2.0 * 2 * Nn * K);
  double sum = 0;
  std::string previous;
  for (const auto& entry : kernels::gemm_counts()) {
    sum += entry.second.flops;
    EXPECT_LT(previous, entry.first);  // in label order
    previous = entry.first;
  }
  EXPECT_EQ(sum, kernels::flop_counter());
  kernels::reset_gemm_counts();
  EXPECT_TRUE(kernels::gemm_counts().empty());
  kernels::reset_flop_counter();
}

// ---- bf16 storage against fp32 on the same rounded inputs ------------------------------------

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = kernels::to_float(kernels::to_bf16(v[i]));
  return out;
}
std::vector<float> widened(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = kernels::to_float(v[i]);
  return out;
}
double bf16_err(const std::vector<bf16>& got, const std::vector<float>& want) {
  return max_rel_err(widened(got), to_double(want));
}

TEST_P(Moe, Bf16VariantsMatchFp32) {
  const Device d = dev();
  const int N = 6, C = 20, k = 2, F = 12;
  const Routing r = make_routing(N, k, 2, 0, 1000);
  const std::vector<float> x = rounded(uniform(N * C, 1001)), gates = uniform(N * k, 1002);
  DevBuf<int> rp(d, r.row_pair), sl(d, r.slots);
  DevBuf<float> dg(d, gates);
  {  // permute is a copy: exact; unpermute rounds its fp32 sum once, fused == unfused
    DevBuf<float> xf(d, x), pf(d, r.M * C), pgf(d, r.M), uf(d, N * C);
    DevBuf<bf16> xb(d, values<bf16>(x)), pb(d, r.M * C), ub(d, N * C), ub2(d, N * C);
    DevBuf<float> pgb(d, r.M);
    kernels::moe_permute(d, pf.get(), pgf.get(), xf.get(), dg.get(), rp.get(), r.M, C, k, true);
    kernels::moe_permute(d, pb.get(), pgb.get(), xb.get(), dg.get(), rp.get(), r.M, C, k, true);
    EXPECT_EQ(widened(pb.host()), pf.host());
    EXPECT_EQ(pgb.host(), pgf.host());
    kernels::moe_unpermute(d, uf.get(), pf.get(), sl.get(), N, C, k, true);
    kernels::moe_unpermute(d, ub.get(), pb.get(), sl.get(), N, C, k, true);
    kernels::moe_unpermute(d, ub2.get(), pb.get(), sl.get(), N, C, k, false);
    const std::vector<float> want = uf.host();
    const std::vector<bf16> got = ub.host(), got2 = ub2.host();
    for (size_t i = 0; i < want.size(); i++) {
      EXPECT_EQ(got[i].bits, kernels::to_bf16(want[i]).bits);
      EXPECT_EQ(got2[i].bits, got[i].bits);
    }
  }
  for (bool swiglu : {true, false}) {
    SCOPED_TRACE(swiglu ? "swiglu" : "gelu");
    const int M = 5, W = swiglu ? 2 * F : F;
    const std::vector<float> in = rounded(uniform(M * W, 1010, -2.0f, 2.0f)),
                             g = uniform(M, 1011, 0.2f, 1.0f), R = rounded(uniform(M * F, 1012));
    DevBuf<float> inf(d, in), gf(d, g), Rf(d, R), of(d, M * F), dinf(d, M * W), dgf(d, M);
    DevBuf<bf16> inb(d, values<bf16>(in)), Rb(d, values<bf16>(R)), ob(d, M * F), dinb(d, M * W);
    DevBuf<float> dgb(d, M);
    if (swiglu) {
      kernels::moe_swiglu_forward(d, of.get(), inf.get(), gf.get(), M, F);
      kernels::moe_swiglu_forward(d, ob.get(), inb.get(), gf.get(), M, F);
      kernels::moe_swiglu_backward(d, dinf.get(), dgf.get(), Rf.get(), inf.get(), gf.get(), M, F);
      kernels::moe_swiglu_backward(d, dinb.get(), dgb.get(), Rb.get(), inb.get(), gf.get(), M, F);
    } else {
      kernels::moe_gelu_forward(d, of.get(), inf.get(), gf.get(), M, F);
      kernels::moe_gelu_forward(d, ob.get(), inb.get(), gf.get(), M, F);
      kernels::moe_gelu_backward(d, dinf.get(), dgf.get(), Rf.get(), inf.get(), gf.get(), M, F);
      kernels::moe_gelu_backward(d, dinb.get(), dgb.get(), Rb.get(), inb.get(), gf.get(), M, F);
    }
    EXPECT_LT(bf16_err(ob.host(), of.host()), 1e-2);
    EXPECT_LT(bf16_err(dinb.host(), dinf.host()), 1e-2);
    EXPECT_LT(max_rel_err(dgb.host(), to_double(dgf.host())), 1e-5);  // fp32 output
  }
  {  // shared gate
    const std::vector<float> y = rounded(uniform(N * C, 1020)), z = rounded(uniform(N, 1021)),
                             o0 = rounded(uniform(N * C, 1022)), R = rounded(uniform(N * C, 1023));
    DevBuf<float> yf(d, y), zf(d, z), of(d, o0), Rf(d, R), dyf(d, N * C), dzf(d, N);
    DevBuf<bf16> yb(d, values<bf16>(y)), zb(d, values<bf16>(z)), ob(d, values<bf16>(o0)),
        Rb(d, values<bf16>(R)), dyb(d, N * C), dzb(d, N);
    kernels::moe_shared_gate_forward(d, of.get(), yf.get(), zf.get(), N, C);
    kernels::moe_shared_gate_forward(d, ob.get(), yb.get(), zb.get(), N, C);
    kernels::moe_shared_gate_backward(d, dyf.get(), dzf.get(), Rf.get(), yf.get(), zf.get(), N, C);
    kernels::moe_shared_gate_backward(d, dyb.get(), dzb.get(), Rb.get(), yb.get(), zb.get(), N, C);
    EXPECT_LT(bf16_err(ob.host(), of.host()), 1e-2);
    EXPECT_LT(bf16_err(dyb.host(), dyf.host()), 1e-2);
    EXPECT_LT(bf16_err(dzb.host(), dzf.host()), 1e-2);
  }
  {  // RoPE
    const int B = 2, H = 2, S = 4, D = 8;
    const std::vector<float> v = rounded(uniform((size_t)B * H * S * D, 1030));
    DevBuf<float> vf(d, v);
    DevBuf<bf16> vb(d, values<bf16>(v));
    kernels::rope_forward(d, vf.get(), B, H, S, D, 500.0f);
    kernels::rope_forward(d, vb.get(), B, H, S, D, 500.0f);
    EXPECT_LT(bf16_err(vb.host(), vf.host()), 1e-2);
    kernels::rope_backward(d, vf.get(), B, H, S, D, 500.0f);
    kernels::rope_backward(d, vb.get(), B, H, S, D, 500.0f);
    EXPECT_LT(bf16_err(vb.host(), vf.host()), 1e-2);
  }
}

}  // namespace
