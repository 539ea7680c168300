// tests/test_kernels_gemm_grouped.cpp: grouped GEMM (kernels/ops.h gemm_grouped, the
// experts' one call per projection) and the per-label GEMM-call counter, on every device this
// binary reaches.
//
// Grouped GEMM == the per-group gemm calls bit for bit (fp32 and bf16), which holds on the
// CPU by construction (the same sgemm); on CUDA cuBLAS may pick another kernel for a grouped
// problem, so there the comparison is to 1e-6. The counter: a grouped call is one call,
// labels nest, and the labels' FLOPs sum to the global FLOP counter.
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

class GroupedGemm : public ::testing::TestWithParam<Device> {
 protected:
  Device dev() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Devices, GroupedGemm, ::testing::ValuesIn(test_devices()), device_label);

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

TEST_P(GroupedGemm, GroupedGemmEqualsPerGroupGemmFp32) { grouped_equals_per_group<float>(dev()); }
TEST_P(GroupedGemm, GroupedGemmEqualsPerGroupGemmBf16) { grouped_equals_per_group<bf16>(dev()); }

TEST_P(GroupedGemm, GroupedGemmEmptyProductsAndZeroK) {
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


}  // namespace
