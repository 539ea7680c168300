// tests/test_kernels.cpp: the non-attention kernels against double-precision references and
// finite differences (method: tests/test_kernels_helpers.h). Attention kernels:
// tests/test_kernels_attention.cpp.
//
// Tolerances are normwise relative errors (max |got - want| / max |want|; fp32 rounding gives
// ~1e-7): 1e-6 for ops that round a few times per element, 1e-5 where a transcendental or a
// row reduction adds error, 1e-4 for the nonlinear backward passes (norms, attention, loss)
// against finite differences. The CPU errors measured are 1e-7 to 7e-7 everywhere; the
// margins leave room for the CUDA twin's different summation order and intrinsics.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/math.h"
#include "kernels/ops.h"
#include "tests/test_kernels_helpers.h"

namespace {

using namespace ktest;
using kernels::Device;

class Kernels : public ::testing::TestWithParam<Device> {
 protected:
  Device dev() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Devices, Kernels, ::testing::ValuesIn(test_devices()), device_label);

// ---- memory, dispatch, FLOP counter --------------------------------------------------------

TEST_P(Kernels, MallocIsZeroedAlignedAndCopiesRoundTrip) {
  DevBuf<float> a(dev(), 1001);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u);
  for (float x : a.host()) ASSERT_EQ(x, 0.0f);

  std::vector<float> data = uniform(1001, 1);
  a.upload(data);
  DevBuf<float> b(dev(), 1001);
  kernels::memcpy_device(dev(), b.get(), a.get(), 1001 * sizeof(float));
  EXPECT_EQ(b.host(), data);
  kernels::memset_zero(dev(), b.get(), 1001 * sizeof(float));
  for (float x : b.host()) ASSERT_EQ(x, 0.0f);
}

TEST(KernelsDispatch, FlopCounterCountsGemms) {
  const int m = 3, n = 4, k = 5, batch = 6;
  std::vector<float> A(batch * m * k, 1.0f), B(batch * k * n, 1.0f), C(batch * m * n);
  kernels::reset_flop_counter();
  kernels::gemm(Device::CPU, false, false, m, n, k, 1.0f, A.data(), k, B.data(), n, 0.0f,
                C.data(), n);
  EXPECT_EQ(kernels::flop_counter(), 2.0 * m * n * k);
  kernels::gemm_strided_batched(Device::CPU, false, false, m, n, k, 1.0f, A.data(), k, m * k,
                                B.data(), n, k * n, 0.0f, C.data(), n, m * n, batch);
  EXPECT_EQ(kernels::flop_counter(), 2.0 * m * n * k * (1 + batch));
  kernels::add_flops(7.0);
  EXPECT_EQ(kernels::flop_counter(), 2.0 * m * n * k * (1 + batch) + 7.0);
  kernels::reset_flop_counter();
  EXPECT_EQ(kernels::flop_counter(), 0.0);
}

#ifdef PARALAB_CPU_ONLY
TEST(KernelsDispatch, CudaThrowsInCpuOnlyBuild) {
  EXPECT_FALSE(kernels::cuda_compiled());
  EXPECT_EQ(kernels::cuda_device_count(), 0);
  EXPECT_THROW(kernels::device_malloc(Device::CUDA, 16), std::runtime_error);
  float x = 1.0f;
  EXPECT_THROW(kernels::scale(Device::CUDA, &x, 2.0f, 1), std::runtime_error);
}
#endif

// ---- GEMM ---------------------------------------------------------------------------------

// C = alpha op(A) op(B) + beta C on row-major storage with row strides lda, ldb, ldc.
std::vector<double> ref_gemm(bool ta, bool tb, int m, int n, int k, double alpha,
                             const std::vector<float>& A, int lda, const std::vector<float>& B,
                             int ldb, double beta, const std::vector<float>& C, int ldc) {
  std::vector<double> out = to_double(C);
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < n; j++) {
      double s = 0.0;
      for (int p = 0; p < k; p++) {
        double a = ta ? A[p * lda + i] : A[i * lda + p];
        double b = tb ? B[j * ldb + p] : B[p * ldb + j];
        s += a * b;
      }
      out[i * ldc + j] = alpha * s + beta * C[i * ldc + j];
    }
  }
  return out;
}

TEST_P(Kernels, GemmAllTransposesWithPaddedStrides) {
  const int m = 7, n = 5, k = 9, pad = 3;
  const float alpha = 0.7f, beta = 0.3f;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a " << ta << " trans_b " << tb);
      const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
      std::vector<float> A = uniform((ta ? k : m) * lda, 2), B = uniform((tb ? n : k) * ldb, 3),
                         C = uniform(m * ldc, 4);
      DevBuf<float> dA(dev(), A), dB(dev(), B), dC(dev(), C);
      kernels::gemm(dev(), ta, tb, m, n, k, alpha, dA.get(), lda, dB.get(), ldb, beta, dC.get(),
                    ldc);
      std::vector<float> got = dC.host();
      EXPECT_LT(max_rel_err(got, ref_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)),
                1e-6);
      for (int i = 0; i < m; i++) {
        for (int j = n; j < ldc; j++) EXPECT_EQ(got[i * ldc + j], C[i * ldc + j]) << "padding";
      }
    }
  }
}

TEST_P(Kernels, GemmStridedBatched) {
  const int m = 4, n = 6, k = 5, batch = 3, extra = 7;
  for (bool ta : {false, true}) {
    const bool tb = !ta;
    const int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    const long long sa = m * k + extra, sb = k * n + extra, sc = m * n + extra;
    std::vector<float> A = uniform(batch * sa, 5), B = uniform(batch * sb, 6),
                       C = uniform(batch * sc, 7);
    DevBuf<float> dA(dev(), A), dB(dev(), B), dC(dev(), C);
    kernels::gemm_strided_batched(dev(), ta, tb, m, n, k, 1.5f, dA.get(), lda, sa, dB.get(), ldb,
                                  sb, -0.5f, dC.get(), ldc, sc, batch);
    std::vector<float> got = dC.host();
    for (int i = 0; i < batch; i++) {
      std::vector<float> Ai(A.begin() + i * sa, A.begin() + (i + 1) * sa);
      std::vector<float> Bi(B.begin() + i * sb, B.begin() + (i + 1) * sb);
      std::vector<float> Ci(C.begin() + i * sc, C.begin() + (i + 1) * sc);
      std::vector<float> gi(got.begin() + i * sc, got.begin() + (i + 1) * sc);
      EXPECT_LT(max_rel_err(gi, ref_gemm(ta, tb, m, n, k, 1.5, Ai, lda, Bi, ldb, -0.5, Ci, ldc)),
                1e-6)
          << "batch " << i;
    }
  }
}

// ---- elementwise, bias -------------------------------------------------------------------

TEST_P(Kernels, AddAccumulateScale) {
  const size_t n = 37;
  std::vector<float> a = uniform(n, 8), b = uniform(n, 9);
  DevBuf<float> da(dev(), a), db(dev(), b), out(dev(), n);
  kernels::add(dev(), out.get(), da.get(), db.get(), n);
  std::vector<float> sum = out.host();
  kernels::accumulate(dev(), da.get(), db.get(), n);
  std::vector<float> acc = da.host();
  kernels::scale(dev(), db.get(), -2.5f, n);
  std::vector<float> scaled = db.host();
  for (size_t i = 0; i < n; i++) {
    EXPECT_EQ(sum[i], a[i] + b[i]);
    EXPECT_EQ(acc[i], a[i] + b[i]);
    EXPECT_EQ(scaled[i], b[i] * -2.5f);
  }
}

TEST_P(Kernels, AddBiasAndBiasBackward) {
  const int N = 5, C = 7;
  std::vector<float> y = uniform(N * C, 10), bias = uniform(C, 11), R = uniform(N * C, 12),
                     db0 = uniform(C, 13);
  DevBuf<float> dy(dev(), y), dbias(dev(), bias), dR(dev(), R), ddb(dev(), db0);
  kernels::add_bias(dev(), dy.get(), dbias.get(), N, C);
  std::vector<float> got = dy.host();
  for (int r = 0; r < N; r++)
    for (int c = 0; c < C; c++) EXPECT_EQ(got[r * C + c], y[r * C + c] + bias[c]);

  // L(bias) = sum R * (y + bias): the gradient accumulates onto db0.
  auto loss = [&](const std::vector<double>& b) {
    double L = 0.0;
    for (int r = 0; r < N; r++)
      for (int c = 0; c < C; c++) L += R[r * C + c] * (y[r * C + c] + b[c]);
    return L;
  };
  std::vector<double> want = fd_grad(loss, to_double(bias));
  for (int c = 0; c < C; c++) want[c] += db0[c];
  kernels::bias_backward(dev(), ddb.get(), dR.get(), N, C);
  EXPECT_LT(max_rel_err(ddb.host(), want), 1e-6);
}

// ---- embedding ----------------------------------------------------------------------------

// The whole vocabulary on one rank (vocab_start 0, vocab_rows V) plus the positions from row
// 0: the embedding of a single-GPU run. Tensor-parallel ranges and sequence-parallel first
// rows: tests/test_kernels_vocab.cpp.
TEST_P(Kernels, EmbeddingForwardBackward) {
  const int V = 10, C = 6, S = 4, N = 8;
  const std::vector<int> tokens = {3, 1, 3, 0, 9, 3, 1, 1};  // repeats within and across rows
  std::vector<float> wte = uniform(V * C, 14), wpe = uniform(S * C, 15), R = uniform(N * C, 16);
  std::vector<float> dwte0 = uniform(V * C, 17), dwpe0 = uniform(S * C, 18);
  // L = sum_i R_i . (wte[tok_i] + wpe[i % S]), written as a function of either table.
  auto fwd = [&](const std::vector<double>& te, const std::vector<double>& pe) {
    std::vector<double> out(N * C);
    for (int i = 0; i < N; i++)
      for (int c = 0; c < C; c++) out[i * C + c] = te[tokens[i] * C + c] + pe[(i % S) * C + c];
    return out;
  };
  DevBuf<int> dtok(dev(), tokens);
  DevBuf<float> te(dev(), wte), pe(dev(), wpe), out(dev(), uniform(N * C, 19)), dR(dev(), R);
  DevBuf<float> gte(dev(), dwte0), gpe(dev(), dwpe0);
  kernels::embedding_forward(dev(), out.get(), dtok.get(), te.get(), 0, V, N, C);
  kernels::position_embedding_forward(dev(), out.get(), pe.get(), N, S, 0, C);
  const std::vector<double> te_d = to_double(wte), pe_d = to_double(wpe), R_d = to_double(R);
  EXPECT_LT(max_rel_err(out.host(), fwd(te_d, pe_d)), 1e-7)
      << "the token rows overwrite out (\"=\"), the positions add to them";

  kernels::embedding_backward(dev(), gte.get(), dR.get(), dtok.get(), 0, V, N, C);
  kernels::position_embedding_backward(dev(), gpe.get(), dR.get(), N, S, 0, C);
  auto loss_te = [&](const std::vector<double>& t) { return dot(fwd(t, pe_d), R_d); };
  auto loss_pe = [&](const std::vector<double>& p) { return dot(fwd(te_d, p), R_d); };
  std::vector<double> want_te = fd_grad(loss_te, te_d), want_pe = fd_grad(loss_pe, pe_d);
  for (int k = 0; k < V * C; k++) want_te[k] += dwte0[k];
  for (int k = 0; k < S * C; k++) want_pe[k] += dwpe0[k];
  EXPECT_LT(max_rel_err(gte.host(), want_te), 1e-6);
  EXPECT_LT(max_rel_err(gpe.host(), want_pe), 1e-6);
}

// ---- norms --------------------------------------------------------------------------------

// LayerNorm (rms = false) or RMSNorm (rms = true) of rows of x(N, C) in double; b may be empty.
struct NormRef {
  std::vector<double> out, mean, rstd;
};
NormRef ref_norm(bool rms, const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& b, int N, int C, double eps) {
  NormRef r{std::vector<double>(N * C), std::vector<double>(N), std::vector<double>(N)};
  for (int i = 0; i < N; i++) {
    double mu = 0.0;
    if (!rms) {
      for (int c = 0; c < C; c++) mu += x[i * C + c];
      mu /= C;
    }
    double var = 0.0;
    for (int c = 0; c < C; c++) var += (x[i * C + c] - mu) * (x[i * C + c] - mu);
    double rstd = 1.0 / std::sqrt(var / C + eps);
    for (int c = 0; c < C; c++)
      r.out[i * C + c] = (x[i * C + c] - mu) * rstd * w[c] + (rms ? 0.0 : b[c]);
    r.mean[i] = mu;
    r.rstd[i] = rstd;
  }
  return r;
}

TEST_P(Kernels, LayerNormForwardBackward) {
  const int N = 5, C = 16;
  const float eps = 1e-5f;
  std::vector<float> x = uniform(N * C, 19, -1.0f, 3.0f), w = uniform(C, 20, 0.5f, 1.5f),
                     b = uniform(C, 21), R = uniform(N * C, 22);
  std::vector<float> dx0 = uniform(N * C, 23), dw0 = uniform(C, 24), db0 = uniform(C, 25);
  DevBuf<float> dx_(dev(), x), dw_(dev(), w), db_(dev(), b), out(dev(), N * C), mean(dev(), N),
      rstd(dev(), N), dR(dev(), R), gx(dev(), dx0), gw(dev(), dw0), gb(dev(), db0);
  kernels::layernorm_forward(dev(), out.get(), mean.get(), rstd.get(), dx_.get(), dw_.get(),
                             db_.get(), N, C, eps);
  NormRef ref = ref_norm(false, to_double(x), to_double(w), to_double(b), N, C, eps);
  EXPECT_LT(max_rel_err(out.host(), ref.out), 1e-6);
  EXPECT_LT(max_rel_err(mean.host(), ref.mean), 1e-6);
  EXPECT_LT(max_rel_err(rstd.host(), ref.rstd), 1e-6);

  kernels::layernorm_backward(dev(), gx.get(), gw.get(), gb.get(), dR.get(), dx_.get(),
                              dw_.get(), mean.get(), rstd.get(), N, C);
  const std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b),
                            Rd = to_double(R);
  auto plus_initial = [](std::vector<double> g, const std::vector<float>& g0) {
    for (size_t i = 0; i < g.size(); i++) g[i] += g0[i];
    return g;
  };
  using Vec = std::vector<double>;
  auto L = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
    return dot(ref_norm(false, xv, wv, bv, N, C, eps).out, Rd);
  };
  auto Lx = [&](const Vec& t) { return L(t, wd, bd); };
  auto Lw = [&](const Vec& t) { return L(xd, t, bd); };
  auto Lb = [&](const Vec& t) { return L(xd, wd, t); };
  EXPECT_LT(max_rel_err(gx.host(), plus_initial(fd_grad(Lx, xd), dx0)), 1e-4);
  EXPECT_LT(max_rel_err(gw.host(), plus_initial(fd_grad(Lw, wd), dw0)), 1e-4);
  EXPECT_LT(max_rel_err(gb.host(), plus_initial(fd_grad(Lb, bd), db0)), 1e-4);
}

TEST_P(Kernels, RMSNormForwardBackward) {
  const int N = 5, C = 16;
  const float eps = 1e-5f;
  std::vector<float> x = uniform(N * C, 26, -1.0f, 2.0f), w = uniform(C, 27, 0.5f, 1.5f),
                     R = uniform(N * C, 28), dx0 = uniform(N * C, 29), dw0 = uniform(C, 30);
  DevBuf<float> dx_(dev(), x), dw_(dev(), w), out(dev(), N * C), rstd(dev(), N), dR(dev(), R),
      gx(dev(), dx0), gw(dev(), dw0);
  kernels::rmsnorm_forward(dev(), out.get(), rstd.get(), dx_.get(), dw_.get(), N, C, eps);
  const std::vector<double> xd = to_double(x), wd = to_double(w), Rd = to_double(R);
  NormRef ref = ref_norm(true, xd, wd, {}, N, C, eps);
  EXPECT_LT(max_rel_err(out.host(), ref.out), 1e-6);
  EXPECT_LT(max_rel_err(rstd.host(), ref.rstd), 1e-6);

  kernels::rmsnorm_backward(dev(), gx.get(), gw.get(), dR.get(), dx_.get(), dw_.get(), rstd.get(),
                            N, C);
  using Vec = std::vector<double>;
  auto L = [&](const Vec& xv, const Vec& wv) {
    return dot(ref_norm(true, xv, wv, {}, N, C, eps).out, Rd);
  };
  auto Lx = [&](const Vec& t) { return L(t, wd); };
  auto Lw = [&](const Vec& t) { return L(xd, t); };
  std::vector<double> want_x = fd_grad(Lx, xd), want_w = fd_grad(Lw, wd);
  for (int i = 0; i < N * C; i++) want_x[i] += dx0[i];
  for (int c = 0; c < C; c++) want_w[c] += dw0[c];
  EXPECT_LT(max_rel_err(gx.host(), want_x), 1e-4);
  EXPECT_LT(max_rel_err(gw.host(), want_w), 1e-4);
}

// ---- activations --------------------------------------------------------------------------

double ref_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double ref_silu(double x) { return x / (1.0 + std::exp(-x)); }

TEST_P(Kernels, GeluForwardBackward) {
  const size_t n = 64;
  std::vector<float> x = uniform(n, 31, -4.0f, 4.0f), R = uniform(n, 32);
  DevBuf<float> dx_(dev(), x), out(dev(), n), dR(dev(), R), gx(dev(), uniform(n, 33));
  kernels::gelu_forward(dev(), out.get(), dx_.get(), n);
  auto fwd = [&](const std::vector<double>& v) {
    std::vector<double> o(v.size());
    for (size_t i = 0; i < v.size(); i++) o[i] = ref_gelu(v[i]);
    return o;
  };
  EXPECT_LT(max_rel_err(out.host(), fwd(to_double(x))), 1e-6);
  kernels::gelu_backward(dev(), gx.get(), dR.get(), dx_.get(), n);  // "=": the junk is overwritten
  auto L = [&](const std::vector<double>& v) { return dot(fwd(v), to_double(R)); };
  EXPECT_LT(max_rel_err(gx.host(), fd_grad(L, to_double(x))), 1e-5);
}

TEST_P(Kernels, SwigluForwardBackward) {
  const int N = 3, F = 8;
  std::vector<float> in = uniform(N * 2 * F, 34, -3.0f, 3.0f), R = uniform(N * F, 35);
  DevBuf<float> din_(dev(), in), out(dev(), N * F), dR(dev(), R),
      gin(dev(), uniform(N * 2 * F, 36));
  auto fwd = [&](const std::vector<double>& v) {
    std::vector<double> o(N * F);
    for (int r = 0; r < N; r++)
      for (int c = 0; c < F; c++) o[r * F + c] = ref_silu(v[r * 2 * F + c]) * v[r * 2 * F + F + c];
    return o;
  };
  kernels::swiglu_forward(dev(), out.get(), din_.get(), N, F);
  EXPECT_LT(max_rel_err(out.host(), fwd(to_double(in))), 1e-6);
  kernels::swiglu_backward(dev(), gin.get(), dR.get(), din_.get(), N, F);
  auto L = [&](const std::vector<double>& v) { return dot(fwd(v), to_double(R)); };
  EXPECT_LT(max_rel_err(gin.host(), fd_grad(L, to_double(in))), 1e-5);
}

// ---- dropout ------------------------------------------------------------------------------

TEST_P(Kernels, DropoutZeroIsExactCopy) {
  const size_t n = 1000;
  std::vector<float> x = uniform(n, 37);
  DevBuf<float> dx_(dev(), x), out(dev(), n), din(dev(), n);
  DevBuf<uint8_t> mask(dev(), n);
  kernels::dropout_forward(dev(), out.get(), mask.get(), dx_.get(), n, 0.0f, 1, 2);
  EXPECT_EQ(out.host(), x);
  for (uint8_t m : mask.host()) ASSERT_EQ(m, 1);
  kernels::dropout_backward(dev(), din.get(), dx_.get(), mask.get(), n, 0.0f);
  EXPECT_EQ(din.host(), x);
}

TEST_P(Kernels, DropoutMaskScaleAndDeterminism) {
  const size_t n = 100000;
  const float p = 0.3f;
  const uint64_t seed = 1234, stream = 5;
  std::vector<float> x = uniform(n, 38);
  DevBuf<float> dx_(dev(), x), out(dev(), n), out2(dev(), n);
  DevBuf<uint8_t> mask(dev(), n), mask2(dev(), n), mask3(dev(), n);
  kernels::dropout_forward(dev(), out.get(), mask.get(), dx_.get(), n, p, seed, stream);
  kernels::dropout_forward(dev(), out2.get(), mask2.get(), dx_.get(), n, p, seed, stream);
  kernels::dropout_forward(dev(), out2.get(), mask3.get(), dx_.get(), n, p, seed, stream + 1);
  std::vector<float> o = out.host();
  std::vector<uint8_t> m = mask.host(), m3 = mask3.host();
  EXPECT_EQ(mask2.host(), m) << "same (seed, stream) must give the same mask";

  size_t dropped = 0, differ = 0;
  for (size_t i = 0; i < n; i++) {
    dropped += m[i] == 0;
    differ += m[i] != m3[i];
    ASSERT_EQ(m[i], kernels::dropout_keep(seed, stream, i, p) ? 1 : 0) << i;
    ASSERT_FLOAT_EQ(o[i], m[i] ? x[i] / (1.0f - p) : 0.0f) << i;
  }
  // Binomial(n, 0.3): standard deviation of the fraction sqrt(0.21 / n) = 0.0015.
  EXPECT_NEAR((double)dropped / n, p, 0.01);
  // Independent masks differ where exactly one drops: 2 p (1-p) = 0.42.
  EXPECT_NEAR((double)differ / n, 2 * p * (1 - p), 0.01);
}

TEST_P(Kernels, DropoutBackwardMatchesFiniteDifferences) {
  const size_t n = 200;
  const float p = 0.25f;
  std::vector<float> x = uniform(n, 39), R = uniform(n, 40);
  DevBuf<float> dx_(dev(), x), out(dev(), n), dR(dev(), R), gx(dev(), uniform(n, 41));
  DevBuf<uint8_t> mask(dev(), n);
  kernels::dropout_forward(dev(), out.get(), mask.get(), dx_.get(), n, p, 7, 3);
  std::vector<uint8_t> m = mask.host();
  auto L = [&](const std::vector<double>& v) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += R[i] * v[i] * m[i] / (1.0 - p);
    return s;
  };
  kernels::dropout_backward(dev(), gx.get(), dR.get(), mask.get(), n, p);
  EXPECT_LT(max_rel_err(gx.host(), fd_grad(L, to_double(x))), 1e-6);
}

// ---- cross-entropy ------------------------------------------------------------------------

TEST_P(Kernels, CrossEntropyLossesAndGradient) {
  const int N = 6, V = 11;
  const float grad_scale = 0.25f;
  const std::vector<int> targets = {3, -1, 10, 0, 5, -1};
  std::vector<float> z = uniform(N * V, 42, -3.0f, 3.0f);
  for (int j = 0; j < V; j++) z[4 * V + j] += 80.0f;  // exp(80) overflows float: needs the max
  // loss_i = logsumexp(z_i) - z_i[t_i] in double; L = grad_scale * sum_i loss_i.
  auto losses_of = [&](const std::vector<double>& v) {
    std::vector<double> l(N, 0.0);
    for (int i = 0; i < N; i++) {
      if (targets[i] < 0) continue;
      double m = -INFINITY, s = 0.0;
      for (int j = 0; j < V; j++) m = std::max(m, v[i * V + j]);
      for (int j = 0; j < V; j++) s += std::exp(v[i * V + j] - m);
      l[i] = m + std::log(s) - v[i * V + targets[i]];
    }
    return l;
  };
  // One rank holds the whole vocabulary: the three passes back to back (vocab_start 0, no
  // padding). Split over ranks and padded: tests/test_kernels_vocab.cpp.
  DevBuf<float> dz(dev(), z), losses(dev(), N), row_max(dev(), N), sum_exp(dev(), N);
  DevBuf<float> target_logit(dev(), N);
  DevBuf<int> dt(dev(), targets);
  kernels::cross_entropy_row_max(dev(), row_max.get(), dz.get(), N, V, V);
  kernels::cross_entropy_sum_exp(dev(), sum_exp.get(), target_logit.get(), dz.get(),
                                 row_max.get(), dt.get(), N, V, V, 0);
  kernels::cross_entropy_finish(dev(), losses.get(), dz.get(), dt.get(), row_max.get(),
                                sum_exp.get(), target_logit.get(), N, V, V, 0, grad_scale);
  std::vector<float> got_l = losses.host(), got_g = dz.host();
  EXPECT_LT(max_rel_err(got_l, losses_of(to_double(z))), 1e-5);

  auto L = [&](const std::vector<double>& v) {
    std::vector<double> l = losses_of(v);
    return grad_scale * std::accumulate(l.begin(), l.end(), 0.0);
  };
  EXPECT_LT(max_rel_err(got_g, fd_grad(L, to_double(z))), 1e-4);
  for (int i : {1, 5}) {
    EXPECT_EQ(got_l[i], 0.0f);
    for (int j = 0; j < V; j++) EXPECT_EQ(got_g[i * V + j], 0.0f) << "ignored row " << i;
  }
}

// ---- optimizer ----------------------------------------------------------------------------

// One launch over runs of odd lengths (0 and 1 among them), each its own weight decay, two
// steps, against AdamW in double element by element.
TEST_P(Kernels, AdamWRunsTwoStepsMatchDoubleReference) {
  const std::vector<int64_t> lengths = {50, 0, 1, 4099, 7};  // 4099: past one CUDA block's chunk
  const std::vector<float> decays = {0.1f, 0.1f, 0.0f, 0.1f, 0.0f};
  int64_t n = 0;
  for (int64_t len : lengths) n += len;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, gscale = 0.5f;
  std::vector<float> p = uniform(n, 43), g1 = uniform(n, 44), g2 = uniform(n, 45);
  DevBuf<float> dp(dev(), p), dm(dev(), n), dv(dev(), n), dg1(dev(), g1), dg2(dev(), g2);
  std::vector<double> rp = to_double(p), rm(n, 0.0), rv(n, 0.0);
  const std::vector<float>* grads[2] = {&g1, &g2};
  DevBuf<float>* dgrads[2] = {&dg1, &dg2};
  for (int t = 1; t <= 2; t++) {
    const double bias1 = 1.0 - std::pow((double)b1, t), bias2 = 1.0 - std::pow((double)b2, t);
    std::vector<kernels::AdamRun> runs;
    int64_t at = 0;
    for (size_t r = 0; r < lengths.size(); at += lengths[r], r++) {
      kernels::AdamRun run;
      run.master = dp.get() + at, run.grads = dgrads[t - 1]->get() + at;
      run.m = dm.get() + at, run.v = dv.get() + at, run.n = lengths[r];
      run.weight_decay = decays[r];
      runs.push_back(run);
    }
    kernels::AdamStep step;
    step.lr = lr, step.beta1 = b1, step.beta2 = b2, step.eps = eps;
    step.bias1 = (float)bias1, step.bias2 = (float)bias2, step.grad_scale = gscale;
    kernels::adamw_update<float>(dev(), runs.data(), (int)runs.size(), step);
    at = 0;
    for (size_t r = 0; r < lengths.size(); at += lengths[r], r++)
      for (int64_t i = at; i < at + lengths[r]; i++) {
        double g = (*grads[t - 1])[i] * (double)gscale;
        rm[i] = b1 * rm[i] + (1.0 - b1) * g;
        rv[i] = b2 * rv[i] + (1.0 - b2) * g * g;
        double update = (rm[i] / bias1) / (std::sqrt(rv[i] / bias2) + eps);
        rp[i] -= lr * (update + decays[r] * rp[i]);
      }
  }
  EXPECT_LT(max_rel_err(dp.host(), rp), 1e-6);
  EXPECT_LT(max_rel_err(dm.host(), rm), 1e-6);
  EXPECT_LT(max_rel_err(dv.host(), rv), 1e-6);
}

// The runs' order and grouping do not change a bit: one call over every run equals a call per
// run (the per-tensor launches the fused one replaced).
TEST_P(Kernels, AdamWOneCallEqualsACallPerRun) {
  const std::vector<int64_t> lengths = {3, 5000, 1, 0, 129};
  int64_t n = 0;
  for (int64_t len : lengths) n += len;
  std::vector<float> p = uniform(n, 61), g = uniform(n, 62), m = uniform(n, 63);
  std::vector<float> v = uniform(n, 64);
  for (float& x : v) x = x * x;  // a second moment is not negative
  DevBuf<float> p1(dev(), p), m1(dev(), m), v1(dev(), v), p2(dev(), p), m2(dev(), m),
      v2(dev(), v), dg(dev(), g);
  kernels::AdamStep step;
  step.lr = 3e-3f, step.beta1 = 0.8f, step.beta2 = 0.99f, step.eps = 1e-6f;
  step.bias1 = 0.5f, step.bias2 = 0.3f, step.grad_scale = 0.9f;
  auto runs_over = [&](DevBuf<float>& pp, DevBuf<float>& mm, DevBuf<float>& vv) {
    std::vector<kernels::AdamRun> runs;
    int64_t at = 0;
    for (size_t r = 0; r < lengths.size(); at += lengths[r], r++) {
      kernels::AdamRun run;
      run.master = pp.get() + at, run.grads = dg.get() + at, run.m = mm.get() + at;
      run.v = vv.get() + at, run.n = lengths[r], run.weight_decay = r % 2 ? 0.1f : 0.0f;
      runs.push_back(run);
    }
    return runs;
  };
  const std::vector<kernels::AdamRun> all = runs_over(p1, m1, v1), each = runs_over(p2, m2, v2);
  kernels::adamw_update<float>(dev(), all.data(), (int)all.size(), step);
  for (const kernels::AdamRun& run : each) kernels::adamw_update<float>(dev(), &run, 1, step);
  EXPECT_EQ(p1.host(), p2.host());
  EXPECT_EQ(m1.host(), m2.host());
  EXPECT_EQ(v1.host(), v2.host());
}

TEST_P(Kernels, SumSquaresInDouble) {
  const size_t n = 100003;  // not a multiple of any vector width
  std::vector<float> x = uniform(n, 46);
  x[17] = 3e3f;  // one large value: a float running sum would drop the small squares' bits
  DevBuf<float> dx_(dev(), x);
  double want = 0.0;
  for (float v : x) want += (double)v * v;
  const kernels::Span all{dx_.get(), (int64_t)n};
  EXPECT_NEAR(kernels::sum_squares<float>(dev(), &all, 1), want, want * 1e-12);
}

// Spans of odd lengths, an empty one among them, and more than one launch's worth
// (kSquareSpansPerLaunch): the sum of every span's squares, counted as the launches it takes.
TEST_P(Kernels, SumSquaresOverSpans) {
  const int spans = kernels::kSquareSpansPerLaunch + 3;
  std::vector<kernels::Span> list;
  std::vector<float> x = uniform(40000, 47);
  DevBuf<float> dx(dev(), x);
  double want = 0.0;
  int64_t at = 0;
  for (int k = 0; k < spans; ++k) {
    const int64_t n = k == 5 ? 0 : 1 + (k * 37) % 250;  // 1..250, one empty
    list.push_back({dx.get() + at, n});
    for (int64_t i = at; i < at + n; ++i) want += (double)x[i] * x[i];
    at += n + 3;  // gaps: elements another rank counts
  }
  ASSERT_LE(at, (int64_t)x.size());
  kernels::reset_kernel_counts();
  EXPECT_NEAR(kernels::sum_squares<float>(dev(), list.data(), spans), want, want * 1e-12);
  EXPECT_EQ(kernels::kernel_counts().launches, 2);  // 130 non-empty spans: 128 + 2
}

}  // namespace
