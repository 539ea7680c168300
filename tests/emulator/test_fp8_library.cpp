// tests/emulator/test_fp8_library.cpp: the emulated device's FP8 library calls, which op_check's
// fp8 rows take as the CUDA side of the comparison (tests/gpu/op_check_fp8.cpp):
//   cuda_fp8.h's __nv_cvt_float_to_fp8 with __NV_SATFINITE: every cast of
//     tests/data/fp8_reference.txt (PyTorch's float8 dtypes, inputs clamped as torchao does)
//     gives the library's code, NaN the canonical 0x7F;
//   cuBLASLt's FP8 GEMM (kernels/emulator/cublaslt.cpp): D = alpha a_scale b_scale A^T B on
//     small values where fp32 is exact, to the bit, fp32 and bf16 D, beta accumulating; and
//     what an H100 refuses (not "TN", E5M2 x E5M2, sizes not multiples of 16), refused with
//     CUBLAS_STATUS_NOT_SUPPORTED and a message naming the rule.
// Both are written from the formats' definitions, not from kernels/fp8.h: these tests hold them
// to the outside references, op_check holds kernels/fp8.h's CPU twins to them.
#include <gtest/gtest.h>

#include <cublasLt.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/math.h"  // to_bf16

namespace {

TEST(EmulatedFp8, ConversionMatchesTheReferenceLibrary) {
  std::ifstream in("tests/data/fp8_reference.txt");
  ASSERT_TRUE(in) << "tests/data/fp8_reference.txt (run from the repository root)";
  std::string line, kind;
  int casts = 0;
  while (std::getline(in, line)) {
    std::istringstream row(line);
    row >> kind;
    if (kind != "encode") continue;
    unsigned bits, e4, e5;
    row >> std::hex >> bits >> e4 >> e5;
    float x;
    std::memcpy(&x, &bits, 4);
    // the file writes every NaN code as 7f, the canonical NaN the conversion gives
    EXPECT_EQ(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3), e4) << line;
    EXPECT_EQ(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2), e5) << line;
    casts++;
  }
  EXPECT_GT(casts, 3800);
}

// Codes of a few exact values, from the formats' tables (arXiv:2209.05433): 0.5, 1, 2, -1.
const float kValues[4] = {0.5f, 1.0f, 2.0f, -1.0f};
const uint8_t kE4m3[4] = {0x30, 0x38, 0x40, 0xB8};
const uint8_t kE5m2[4] = {0x38, 0x3C, 0x40, 0xBC};

template <typename T> T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(p);
}
template <typename T> std::vector<T> host_copy(const T* p, size_t n) {
  std::vector<T> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// One call as kernels/cuda/fp8_gemm.cu makes it: column-major A (k x m) op T, B (k x n) op N,
// D = C (m x n, ld m). Returns the heuristic's status (the matmul's when that succeeded).
struct Call {
  cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  cudaDataType_t a_type = CUDA_R_8F_E4M3, b_type = CUDA_R_8F_E5M2, c_type = CUDA_R_32F;
  int m = 16, n = 32, k = 48;
  const void *a = nullptr, *b = nullptr;
  void* c = nullptr;
  const float *a_scale = nullptr, *b_scale = nullptr;
  float alpha = 1.0f, beta = 0.0f;

  cublasStatus_t run() const {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb));
    if (a_scale)
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                     sizeof(a_scale));
    if (b_scale)
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                     sizeof(b_scale));
    cublasLtMatrixLayoutCreate(&la, a_type, k, m, k);
    cublasLtMatrixLayoutCreate(&lb, b_type, k, n, k);
    cublasLtMatrixLayoutCreate(&lc, c_type, m, n, m);
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &result, &found);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmul(h, desc, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &result.algo,
                         nullptr, 0, nullptr);
    cudaDeviceSynchronize();
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
    return s;
  }
};

uint16_t bf16_bits(float f) { return kernels::to_bf16(f).bits; }  // rounded to nearest even

// Products and sums of these values are small dyadic numbers: fp32 (and bf16) hold them exactly.
TEST(EmulatedCublasLt, Fp8GemmAppliesBothScalesExactly) {
  Call call;
  std::vector<uint8_t> a((size_t)call.k * call.m), b((size_t)call.k * call.n);
  std::vector<int> ia(a.size()), ib(b.size());
  for (size_t i = 0; i < a.size(); i++) ia[i] = (int)((i * 7 + 3) % 4), a[i] = kE4m3[ia[i]];
  for (size_t i = 0; i < b.size(); i++) ib[i] = (int)((i * 5 + 1) % 4), b[i] = kE5m2[ib[i]];
  const std::vector<float> scales = {0.25f, 8.0f};
  std::vector<float> c0((size_t)call.m * call.n);
  for (size_t i = 0; i < c0.size(); i++) c0[i] = (float)(i % 5) - 2.0f;
  call.a = device_copy(a);
  call.b = device_copy(b);
  const float* s = device_copy(scales);
  call.a_scale = s;
  call.b_scale = s + 1;
  call.alpha = 1.5f;
  call.beta = 0.5f;
  for (cudaDataType_t c_type : {CUDA_R_32F, CUDA_R_16BF}) {
    call.c_type = c_type;
    std::vector<uint16_t> c0_bf16(c0.size());
    for (size_t i = 0; i < c0.size(); i++) c0_bf16[i] = bf16_bits(c0[i]);
    call.c = c_type == CUDA_R_32F ? (void*)device_copy(c0) : (void*)device_copy(c0_bf16);
    ASSERT_EQ(call.run(), CUBLAS_STATUS_SUCCESS) << cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
    for (int j = 0; j < call.n; j++)
      for (int i = 0; i < call.m; i++) {
        double sum = 0.0;
        for (int p = 0; p < call.k; p++)
          sum += (double)kValues[ia[(size_t)i * call.k + p]] * kValues[ib[(size_t)j * call.k + p]];
        const float want = (float)(1.5 * 0.25 * 8.0 * sum + 0.5 * c0[(size_t)j * call.m + i]);
        const size_t at = (size_t)j * call.m + i;
        if (c_type == CUDA_R_32F) {
          EXPECT_EQ(host_copy(static_cast<float*>(call.c), c0.size())[at], want) << i << "," << j;
        } else {
          EXPECT_EQ(host_copy(static_cast<uint16_t*>(call.c), c0.size())[at], bf16_bits(want))
              << i << "," << j;
        }
      }
    cudaFree(call.c);
  }
  cudaFree((void*)call.a);
  cudaFree((void*)call.b);
  cudaFree((void*)s);
}

TEST(EmulatedCublasLt, RefusesWhatAnH100Refuses) {
  struct Case {
    const char* rule;
    Call call;
  };
  std::vector<Case> cases(4);
  cases[0].rule = "TN layout";
  cases[0].call.transa = CUBLAS_OP_N;
  cases[1].rule = "E5M2 x E5M2";
  cases[1].call.a_type = CUDA_R_8F_E5M2;
  cases[2].rule = "multiples of 16";
  cases[2].call.m = 24;
  cases[3].rule = "multiples of 16";
  cases[3].call.k = 40;
  for (const Case& c : cases) {
    const cublasStatus_t s = c.call.run();
    EXPECT_EQ(s, CUBLAS_STATUS_NOT_SUPPORTED) << c.rule;
    EXPECT_NE(std::string(cublasGetStatusString(s)).find(c.rule), std::string::npos)
        << cublasGetStatusString(s);
  }
}

}  // namespace
