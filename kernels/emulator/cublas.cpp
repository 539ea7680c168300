// kernels/emulator/cublas.cpp: the cuBLAS calls paralab makes, on the emulated device.
//
// cuBLAS is column-major: C (m x n, leading dimension ldc) = alpha op(A) op(B) + beta C, op(A)
// m x k (A stored m x k with lda >= m, or k x m with lda >= k when transposed), op(B) k x n.
// The same call goes to the CPU BLAS (cblas_sgemm, CblasColMajor), so a caller's swapped
// operands and transposes mean here what they mean on a GPU. 16-bit operands (cublasGemmEx,
// CUDA_R_16BF or CUDA_R_16F, CUBLAS_COMPUTE_32F) are widened exactly, multiplied in fp32 and C
// rounded to their type once (or kept fp32), with paralab's encodings (kernels/float16.h); the
// tensor cores' order of summation is not reproduced.
//
// Checked as cuBLAS checks (CUBLAS_STATUS_INVALID_VALUE: negative sizes, a leading dimension
// smaller than its matrix's rows) and as the GPU would fault: every matrix's span (lda
// (columns - 1) + rows elements) must lie in one device allocation, and a grouped call's pointer
// arrays must be device memory of one pointer per problem: else a sticky
// cudaErrorIllegalAddress naming the call, the operand and the problem.
//
// Each call is counted as the library's kernel in the emulator's records (kernel_counters.h):
// its 2 m n k FLOPs and the bytes of A, B and C.
//
// defines: the cublas* functions of include/cublas_v2.h, emu::cublas_refuse
#include <cblas.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/emulator/device.h"
#include "kernels/emulator/include/cublas_v2.h"
#include "kernels/emulator/kernel_counters.h"
#include "kernels/emulator/memory_check.h"
#include "kernels/emulator/streams.h"
#include "kernels/float16.h"  // to_float, to_bf16, to_fp16

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

std::string g_message;  // why the last call failed (cublasGetStatusString)
cublasStatus_t g_message_status = CUBLAS_STATUS_SUCCESS;

cublasStatus_t refuse(cublasStatus_t s, const std::string& why) {
  g_message_status = s;
  g_message = "emulator: " + why;
  return s;
}
cublasStatus_t fault(const std::string& why) {
  emu::set_sticky_error(cudaErrorIllegalAddress, "emulator: memcheck: " + why);
  return refuse(CUBLAS_STATUS_EXECUTION_FAILED, "memcheck: " + why);
}

size_t element_bytes(cudaDataType_t t) {
  return t == CUDA_R_32F ? 4 : (t == CUDA_R_64F ? 8 : 2);
}

// A 16-bit element of type t (CUDA_R_16BF or CUDA_R_16F) widened, and a float rounded into one.
float widen16(uint16_t b, cudaDataType_t t) {
  return t == CUDA_R_16BF ? kernels::to_float(kernels::bf16{b}) : kernels::to_float(kernels::fp16{b});
}
uint16_t round16(float f, cudaDataType_t t) {
  return t == CUDA_R_16BF ? kernels::to_bf16(f).bits : kernels::to_fp16(f).bits;
}

// One product's shape, checked as cuBLAS checks it, and its operands' spans.
struct Problem {
  bool ta, tb;
  int m, n, k, lda, ldb, ldc;
  size_t a_elems() const { return span(ta ? k : m, ta ? m : k, lda); }
  size_t b_elems() const { return span(tb ? n : k, tb ? k : n, ldb); }
  size_t c_elems() const { return span(m, n, ldc); }
  static size_t span(int rows, int cols, int ld) {
    return rows == 0 || cols == 0 ? 0 : (size_t)ld * (cols - 1) + rows;
  }
  std::string invalid() const {
    if (m < 0 || n < 0 || k < 0) return "a negative size";
    if (lda < std::max(1, ta ? k : m)) return "lda " + std::to_string(lda) + " below the rows of A";
    if (ldb < std::max(1, tb ? n : k)) return "ldb " + std::to_string(ldb) + " below the rows of B";
    if (ldc < std::max(1, m)) return "ldc " + std::to_string(ldc) + " below the rows of C";
    return "";
  }
};

std::string ranges(const Problem& p, const void* A, const void* B, const void* C, size_t es_ab,
                   size_t es_c, const std::string& call) {
  std::string e = emu::device_range_error(A, p.a_elems() * es_ab, call + "'s A");
  if (e.empty() && p.k > 0) e = emu::device_range_error(B, p.b_elems() * es_ab, call + "'s B");
  if (e.empty()) e = emu::device_range_error(C, p.c_elems() * es_c, call + "'s C");
  return e;
}

std::vector<float> widened(const void* p, size_t elems, cudaDataType_t type) {
  std::vector<float> out(elems);
  if (type == CUDA_R_32F) {
    std::memcpy(out.data(), p, elems * 4);
  } else {
    const uint16_t* b = static_cast<const uint16_t*>(p);
    for (size_t i = 0; i < elems; i++) out[i] = widen16(b[i], type);
  }
  return out;
}

// C = alpha op(A) op(B) + beta C for one checked problem, in any of the storage types.
void compute(const Problem& p, float alpha, const void* A, cudaDataType_t at, const void* B,
             cudaDataType_t bt, float beta, void* C, cudaDataType_t ct) {
  if (p.m == 0 || p.n == 0) return;
  const CBLAS_TRANSPOSE ta = p.ta ? CblasTrans : CblasNoTrans, tb = p.tb ? CblasTrans : CblasNoTrans;
  std::vector<float> a = widened(A, p.a_elems(), at), b = widened(B, p.b_elems(), bt);
  if (ct == CUDA_R_32F) {
    cblas_sgemm(CblasColMajor, ta, tb, p.m, p.n, p.k, alpha, a.data(), p.lda, b.data(), p.ldb, beta,
                static_cast<float*>(C), p.ldc);
  } else {
    std::vector<float> c = beta != 0.0f ? widened(C, p.c_elems(), ct) : std::vector<float>(p.c_elems(), 0.0f);
    cblas_sgemm(CblasColMajor, ta, tb, p.m, p.n, p.k, alpha, a.data(), p.lda, b.data(), p.ldb, beta,
                c.data(), p.ldc);
    uint16_t* out = static_cast<uint16_t*>(C);
    for (int j = 0; j < p.n; j++)
      for (int i = 0; i < p.m; i++) out[(size_t)j * p.ldc + i] = round16(c[(size_t)j * p.ldc + i], ct);
  }
  emu::library_call(at == CUDA_R_32F    ? "cuBLAS GEMM (fp32)"
                    : at == CUDA_R_16BF ? "cuBLAS GEMM (bf16)"
                                        : "cuBLAS GEMM (fp16)",
                    2.0 * p.m * p.n * p.k,
                    (double)(p.a_elems() + p.b_elems()) * element_bytes(at) +
                        2.0 * p.c_elems() * element_bytes(ct));
}

bool supported(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }

cublasStatus_t gemm(cublasHandle_t h, const char* call, cublasOperation_t transa,
                    cublasOperation_t transb, int m, int n, int k, float alpha, const void* A,
                    cudaDataType_t at, int lda, const void* B, cudaDataType_t bt, int ldb,
                    float beta, void* C, cudaDataType_t ct, int ldc) {
  if (emu::sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (h == nullptr) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, std::string(call) + ": no handle");
  if (transa == CUBLAS_OP_C || transb == CUBLAS_OP_C || !supported(at) || at != bt || !supported(ct))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, std::string(call) + ": a type or transpose the emulator does not run");
  const Problem p{transa == CUBLAS_OP_T, transb == CUBLAS_OP_T, m, n, k, lda, ldb, ldc};
  const std::string invalid = p.invalid();
  if (!invalid.empty()) return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(call) + ": " + invalid);
  const std::string bad = ranges(p, A, B, C, element_bytes(at), element_bytes(ct), call);
  if (!bad.empty()) return fault(bad);
  emu::stream_ready(h->stream);
  compute(p, alpha, A, at, B, bt, beta, C, ct);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

// cuBLASLt's calls (kernels/emulator/cublaslt.cpp) report their refusals through the same message.
namespace emu {
cublasStatus_t cublas_refuse(cublasStatus_t s, const std::string& why) { return refuse(s, why); }
}  // namespace emu

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }

const char* cublasGetStatusString(cublasStatus_t s) {
  if (s != CUBLAS_STATUS_SUCCESS && s == g_message_status) return g_message.c_str();
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float* alpha, const float* A, int lda,
                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  return gemm(h, "cublasSgemm", ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb,
              *beta, C, CUDA_R_32F, ldc);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType_t at,
                            int lda, const void* B, cudaDataType_t bt, int ldb, const void* beta,
                            void* C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasGemmEx: only CUBLAS_COMPUTE_32F is emulated");
  return gemm(h, "cublasGemmEx", ta, tb, m, n, k, *static_cast<const float*>(alpha), A, at, lda, B,
              bt, ldb, *static_cast<const float*>(beta), C, ct, ldc);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long sa, const float* B, int ldb, long long sb,
                                         const float* beta, float* C, int ldc, long long sc,
                                         int batch) {
  for (int i = 0; i < batch; i++) {
    const cublasStatus_t s = gemm(h, "cublasSgemmStridedBatched", ta, tb, m, n, k, *alpha,
                                  A + i * sa, CUDA_R_32F, lda, B + i * sb, CUDA_R_32F, ldb, *beta,
                                  C + i * sc, CUDA_R_32F, ldc);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType_t at,
                                          int lda, long long sa, const void* B, cudaDataType_t bt,
                                          int ldb, long long sb, const void* beta, void* C,
                                          cudaDataType_t ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasGemmStridedBatchedEx: only CUBLAS_COMPUTE_32F is emulated");
  const size_t ea = element_bytes(at), ec = element_bytes(ct);
  for (int i = 0; i < batch; i++) {
    const cublasStatus_t s = gemm(
        h, "cublasGemmStridedBatchedEx", ta, tb, m, n, k, *static_cast<const float*>(alpha),
        static_cast<const char*>(A) + i * sa * ea, at, lda,
        static_cast<const char*>(B) + i * sb * ea, bt, ldb, *static_cast<const float*>(beta),
        static_cast<char*>(C) + i * sc * ec, ct, ldc);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The problems of group g all share its sizes, transposes, scalars; their matrices come from
// the device pointer arrays, one pointer per problem.
cublasStatus_t cublasGemmGroupedBatchedEx(
    cublasHandle_t h, const cublasOperation_t ta[], const cublasOperation_t tb[], const int m[],
    const int n[], const int k[], const void* alpha, const void* const Aarray[],
    cudaDataType_t at, const int lda[], const void* const Barray[], cudaDataType_t bt,
    const int ldb[], const void* beta, void* const Carray[], cudaDataType_t ct, const int ldc[],
    int group_count, const int group_size[], cublasComputeType_t compute) {
  if (compute != CUBLAS_COMPUTE_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasGemmGroupedBatchedEx: only CUBLAS_COMPUTE_32F is emulated");
  if (group_count < 0) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmGroupedBatchedEx: negative group_count");
  size_t problems = 0;
  for (int g = 0; g < group_count; g++) {
    if (group_size[g] < 0) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmGroupedBatchedEx: negative group_size");
    problems += group_size[g];
  }
  const char* names[3] = {"Aarray", "Barray", "Carray"};
  const void* arrays[3] = {Aarray, Barray, Carray};
  for (int a = 0; a < 3; a++) {
    const std::string bad = emu::device_range_error(arrays[a], problems * sizeof(void*),
                                                    std::string("cublasGemmGroupedBatchedEx's ") +
                                                        names[a] + " of " + std::to_string(problems) + " pointers");
    if (!bad.empty()) return fault(bad);
  }
  const float* alphas = static_cast<const float*>(alpha);
  const float* betas = static_cast<const float*>(beta);
  size_t i = 0;
  for (int g = 0; g < group_count; g++)
    for (int p = 0; p < group_size[g]; p++, i++) {
      const std::string call = "cublasGemmGroupedBatchedEx (group " + std::to_string(g) +
                               ", problem " + std::to_string(i) + ")";
      const cublasStatus_t s = gemm(h, call.c_str(), ta[g], tb[g], m[g], n[g], k[g], alphas[g],
                                    Aarray[i], at, lda[g], Barray[i], bt, ldb[g], betas[g],
                                    Carray[i], ct, ldc[g]);
      if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
  return CUBLAS_STATUS_SUCCESS;
}
