// tests/test_kernels_moe_experts.cpp: the mixture-of-experts kernels after the router —
// permute and unpermute, the experts' gated activations, the shared expert's gate, RoPE alone
// (--qk-layernorm) and their bf16 storage — against double-precision references and finite
// differences (method: tests/test_kernels_helpers.h), on every device this binary reaches.
//
// What is exact and what is not:
//  - permute / unpermute are sums of copies in a fixed order: checked bit for bit against a
//    float loop in that order, and unpermute(permute(x)) == x for k = 1;
//  - every backward (the gated activations with their dgates, the shared gate) against
//    central differences (1e-4);
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

class MoeExperts : public ::testing::TestWithParam<Device> {
 protected:
  Device dev() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Devices, MoeExperts, ::testing::ValuesIn(test_devices()), device_label);

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

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

TEST_P(MoeExperts, PermuteUnpermuteExactAndFusedEqualsUnfused) {
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

TEST_P(MoeExperts, PermuteThenUnpermuteIsIdentityForTopOne) {
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

TEST_P(MoeExperts, SwigluAndGeluWithGatesForwardBackward) {
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

TEST_P(MoeExperts, SharedGateForwardBackward) {
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

TEST_P(MoeExperts, RopeAdjointInverseAndEqualsSplitRope) {
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

TEST_P(MoeExperts, Bf16VariantsMatchFp32) {
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

