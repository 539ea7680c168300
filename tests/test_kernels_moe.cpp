// tests/test_kernels_moe.cpp: the mixture-of-experts router kernels (top-k and its gates,
// the load-balancing scores, the aux loss's weighted sum, the z loss) against
// double-precision references and finite differences (method: tests/test_kernels_helpers.h),
// on every device this binary reaches. The experts' kernels (permute, unpermute, gated
// activations, RoPE alone, bf16 storage) are tests/test_kernels_moe_experts.cpp; grouped
// GEMM and the GEMM counter tests/test_kernels_gemm_grouped.cpp.
//
// What is exact and what is not:
//  - the top-k selection and its tie rule (larger value first, ties to the lower expert) are
//    checked on hand-made rows; gates against a double reference (1e-5);
//  - every backward (router top-k in its four forms, balancing scores, z loss) against
//    central differences (1e-4).
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
  const double scale = 0.0123;
  const float factor = 0.25f;
  for (int group : {N, 3}) {
    SCOPED_TRACE(testing::Message() << "group " << group);
    std::vector<float> scores = uniform(N * E, 300);
    std::vector<int> counts((N / group) * E);
    for (size_t i = 0; i < counts.size(); i++) counts[i] = (int)(i * 7 % 11);
    std::vector<float> w(counts.size());  // the weights: scale c, rounded to fp32 once
    for (size_t i = 0; i < w.size(); i++) w[i] = (float)(scale * counts[i]);
    DevBuf<float> ds(dev(), scores), grad(dev(), uniform(N * E, 302));
    DevBuf<int> dc(dev(), counts);
    double want = 0;
    for (int t = 0; t < N; t++)
      for (int e = 0; e < E; e++) want += (double)scores[t * E + e] * w[(t / group) * E + e];
    EXPECT_NEAR(kernels::moe_weighted_sum(dev(), ds.get(), dc.get(), scale, N, E, group), want,
                1e-12);
    kernels::moe_weighted_sum_backward(dev(), grad.get(), dc.get(), scale, factor, N, E, group);
    const std::vector<float> g = grad.host();
    for (int t = 0; t < N; t++)
      for (int e = 0; e < E; e++) EXPECT_EQ(g[t * E + e], w[(t / group) * E + e] * factor);
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


}  // namespace
