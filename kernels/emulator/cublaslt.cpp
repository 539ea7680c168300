// kernels/emulator/cublaslt.cpp: the cuBLASLt FP8 GEMM paralab calls (kernels/cuda/fp8_gemm.cu),
// on the emulated device.
//
// cublasLtMatmul computes D = alpha (a_scale b_scale) op(A) op(B) + beta C, column-major, with
// FP8 A and B, the two factors read from device memory (CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER,
// 1 when unset), C and D fp32 or bf16 (here D must be C, as paralab calls it). The FP8 codes are
// decoded (every FP8 value is a float: here from the formats' definition, ldexp of the fields,
// independently of kernels/fp8.h), multiplied in fp32 by the CPU BLAS with the factors folded
// into alpha, and a bf16 D rounded once; the tensor cores' summation order is not reproduced.
//
// What the emulator refuses, as cuBLASLt on an H100 does (CUBLAS_STATUS_NOT_SUPPORTED from the
// heuristic, with a message naming the rule): an FP8 GEMM that is not "TN" (A transposed, B
// not: the only FP8 layout of sm_89/sm_90), E5M2 x E5M2, m, n or k not multiples of 16, a
// compute type other than CUBLAS_COMPUTE_32F or a scale type other than CUDA_R_32F. Operand
// spans and the factors are checked as device memory like every cuBLAS operand (a sticky
// illegal-address error otherwise). Counted as one library call (kernel_counters.h).
//
// defines: the cublasLt* functions of include/cublasLt.h
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/emulator/device.h"
#include "kernels/emulator/include/cublasLt.h"
#include "kernels/emulator/kernel_counters.h"
#include "kernels/emulator/memory_check.h"
#include "kernels/emulator/streams.h"

namespace emu {
// kernels/emulator/cublas.cpp: records why a call failed, for cublasGetStatusString
cublasStatus_t cublas_refuse(cublasStatus_t s, const std::string& why);
}  // namespace emu

struct cublasLtContext {};
struct cublasLtMatmulDescEmulated {
  cublasComputeType_t compute;
  cudaDataType_t scale_type;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
};
struct cublasLtMatrixLayoutEmulated {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceEmulated {
  size_t workspace = 0;
};

namespace {

bool is_fp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
size_t element_bytes(cudaDataType_t t) { return is_fp8(t) ? 1 : (t == CUDA_R_32F ? 4 : 2); }

// An FP8 code's value from the format: sign, exponent field, mantissa (OCP / arXiv:2209.05433).
float decode(uint8_t c, bool e4m3) {
  const int mantissa_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int exponent = (c & 0x7F) >> mantissa_bits, mantissa = c & ((1 << mantissa_bits) - 1);
  const double sign = (c & 0x80) ? -1.0 : 1.0;
  if (e4m3 && (c & 0x7F) == 0x7F) return NAN;
  if (!e4m3 && exponent == 31) return mantissa == 0 ? (float)(sign * INFINITY) : NAN;
  if (exponent == 0) return (float)(sign * std::ldexp(mantissa, 1 - bias - mantissa_bits));
  return (float)(sign * std::ldexp(1.0 + std::ldexp(mantissa, -mantissa_bits), exponent - bias));
}

float widen_bf16(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

size_t span(const cublasLtMatrixLayoutEmulated& l) {
  return l.rows == 0 || l.cols == 0 ? 0 : (size_t)l.ld * (l.cols - 1) + l.rows;
}

// Why this problem is not one cuBLASLt's FP8 kernels take ("" when it is).
std::string unsupported(const cublasLtMatmulDescEmulated& d, const cublasLtMatrixLayoutEmulated& a,
                        const cublasLtMatrixLayoutEmulated& b, const cublasLtMatrixLayoutEmulated& c,
                        const cublasLtMatrixLayoutEmulated& dd) {
  if (d.compute != CUBLAS_COMPUTE_32F || d.scale_type != CUDA_R_32F)
    return "only CUBLAS_COMPUTE_32F with CUDA_R_32F scales is emulated";
  if (!is_fp8(a.type) || !is_fp8(b.type)) return "only FP8 A and B are emulated";
  if (a.type == CUDA_R_8F_E5M2 && b.type == CUDA_R_8F_E5M2) return "E5M2 x E5M2 has no FP8 kernel";
  if (d.transa != CUBLAS_OP_T || d.transb != CUBLAS_OP_N)
    return "FP8 GEMMs take only the TN layout (A transposed, B not) on sm_89/sm_90";
  if (c.type != CUDA_R_32F && c.type != CUDA_R_16BF) return "C must be fp32 or bf16";
  if (dd.type != c.type || dd.rows != c.rows || dd.cols != c.cols || dd.ld != c.ld)
    return "D must have C's layout";
  const uint64_t m = c.rows, n = c.cols, k = a.rows;
  if (a.cols != m || b.rows != k || b.cols != n) return "the operands' shapes do not match";
  if ((int64_t)a.ld < (int64_t)a.rows || (int64_t)b.ld < (int64_t)b.rows ||
      (int64_t)c.ld < (int64_t)c.rows)
    return "a leading dimension below its matrix's rows";
  if (m % 16 || n % 16 || k % 16 || a.ld % 16 || b.ld % 16)
    return "FP8 GEMMs need m, n, k and the leading dimensions of A and B multiples of 16 (m " +
           std::to_string(m) + ", n " + std::to_string(n) + ", k " + std::to_string(k) + ")";
  return "";
}

std::vector<float> decoded(const void* p, const cublasLtMatrixLayoutEmulated& l) {
  std::vector<float> out(span(l));
  const uint8_t* codes = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < out.size(); i++) out[i] = decode(codes[i], l.type == CUDA_R_8F_E4M3);
  return out;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  *desc = new cublasLtMatmulDescEmulated{compute, scale_type};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  auto wrong_size = [&](size_t want) {
    return size != want ? emu::cublas_refuse(CUBLAS_STATUS_INVALID_VALUE,
                                             "cublasLtMatmulDescSetAttribute: attribute " +
                                                 std::to_string((int)attr) + " of " +
                                                 std::to_string(size) + " bytes")
                        : CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      if (wrong_size(sizeof(cublasOperation_t))) return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->transa : desc->transb) =
          *static_cast<const cublasOperation_t*>(buf);
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: {
      if (wrong_size(sizeof(void*))) return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_A_SCALE_POINTER ? desc->a_scale : desc->b_scale) =
          *static_cast<const float* const*>(buf);
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
      return wrong_size(sizeof(int8_t));  // the emulation always accumulates in fp32
  }
  return emu::cublas_refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                            "cublasLtMatmulDescSetAttribute: attribute " +
                                std::to_string((int)attr) + " is not emulated");
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *layout = new cublasLtMatrixLayoutEmulated{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceEmulated();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || size != sizeof(size_t))
    return emu::cublas_refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                              "cublasLtMatmulPreferenceSetAttribute: only the workspace size");
  pref->workspace = *static_cast<const size_t*>(buf);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  *returned = 0;
  if (handle == nullptr || requested < 1)
    return emu::cublas_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: no handle or no room");
  const std::string why = unsupported(*desc, *a, *b, *c, *d);
  if (!why.empty())
    return emu::cublas_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic: " + why);
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t a,
                              const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D,
                              cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t*, void*,
                              size_t, cudaStream_t stream) {
  if (emu::sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (handle == nullptr) return emu::cublas_refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmul: no handle");
  const std::string why = unsupported(*desc, *a, *b, *c, *d);
  if (!why.empty()) return emu::cublas_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: " + why);
  if (C != D) return emu::cublas_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: D must be C here");
  std::string bad = emu::device_range_error(A, span(*a), "cublasLtMatmul's A");
  if (bad.empty()) bad = emu::device_range_error(B, span(*b), "cublasLtMatmul's B");
  if (bad.empty()) bad = emu::device_range_error(D, span(*d) * element_bytes(d->type), "cublasLtMatmul's D");
  if (bad.empty() && desc->a_scale) bad = emu::device_range_error(desc->a_scale, 4, "cublasLtMatmul's A scale");
  if (bad.empty() && desc->b_scale) bad = emu::device_range_error(desc->b_scale, 4, "cublasLtMatmul's B scale");
  if (!bad.empty()) {
    emu::set_sticky_error(cudaErrorIllegalAddress, "emulator: memcheck: " + bad);
    return emu::cublas_refuse(CUBLAS_STATUS_EXECUTION_FAILED, "memcheck: " + bad);
  }
  emu::stream_ready(stream);
  const int m = (int)c->rows, n = (int)c->cols, k = (int)a->rows;
  const float scales = (desc->a_scale ? *desc->a_scale : 1.0f) * (desc->b_scale ? *desc->b_scale : 1.0f);
  const float al = *static_cast<const float*>(alpha) * scales, be = *static_cast<const float*>(beta);
  const std::vector<float> fa = decoded(A, *a), fb = decoded(B, *b);
  if (d->type == CUDA_R_32F) {
    cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, m, n, k, al, fa.data(), (int)a->ld,
                fb.data(), (int)b->ld, be, static_cast<float*>(D), (int)d->ld);
  } else {
    uint16_t* out = static_cast<uint16_t*>(D);
    std::vector<float> acc(span(*d), 0.0f);
    if (be != 0.0f)
      for (size_t i = 0; i < acc.size(); i++) acc[i] = widen_bf16(out[i]);
    cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, m, n, k, al, fa.data(), (int)a->ld,
                fb.data(), (int)b->ld, be, acc.data(), (int)d->ld);
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) out[(size_t)j * d->ld + i] = round_bf16(acc[(size_t)j * d->ld + i]);
  }
  emu::library_call("cuBLASLt GEMM (fp8)", 2.0 * m * n * k,
                    (double)(span(*a) + span(*b)) + 2.0 * span(*d) * element_bytes(d->type));
  return CUBLAS_STATUS_SUCCESS;
}
