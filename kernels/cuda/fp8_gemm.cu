// kernels/cuda/fp8_gemm.cu: the CUDA twin of kernels/ops/fp8.h's gemm_fp8, mirroring
// kernels/cpu/fp8.cpp's "dequantise, then the fp32 GEMM". Two paths (gemm_fp8_path names the
// one a call takes; the run header prints it):
//
// cuBLASLt (per-tensor factors, m, n, k multiples of 16): the tensor cores multiply the FP8
// codes (each product exact in fp32), accumulate in fp32 and scale the result by the two
// dequantisation factors, D = alpha (a_scale b_scale) op(A) op(B) + beta C, the factors read
// from device memory (CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER), so a delayed or current scale
// never comes back to the host. Hopper's FP8 kernels take only the "TN" layout: in cuBLAS's
// column-major words A transposed and B not, i.e. both operands with K contiguous, which is
// kernels/ops/fp8.h's A(m,k) B(n,k)^T. As in memory_gemm.cu the row-major product is asked as
// its column-major transpose, C^T(n,m) = B(n,k) A(m,k)^T: cuBLAS's A is our B (op T, k x n with
// leading dimension k), its B our A (op N, k x m). FAST_ACCUM stays 0: the kernel promotes its
// partial sums to fp32 at intervals (DeepSeek-V3 section 3.3.2 measured ~14-bit accumulation in
// the tensor cores otherwise; Transformer Engine uses fast accumulation in fprop only).
// No workspace is given (heuristics pick a kernel that needs none): nothing outside the ledger.
//
// Emulated (block factors, or sizes cuBLASLt's FP8 kernels do not take): cuBLASLt on Hopper has
// no 1 x 128 or 128 x 128 scaling (Transformer Engine emulates it on Hopper too), so both
// operands are dequantised into fp32 scratch (fp8_dequantize's kernel) and multiplied by cuBLAS
// sgemm: exactly the CPU twin's computation, at fp32 GEMM speed, in 4 (m + n) k bytes of scratch
// from the caching allocator.
//
// sm_89 (Ada) and sm_90 (Hopper) have FP8 tensor cores; on older GPUs cuBLASLt refuses the call
// with CUBLAS_STATUS_NOT_SUPPORTED, which the check turns into an error naming it (the trainer
// refuses --fp8-format there before any work).
//
// cuBLASLt is called through LT(name): on a GPU the library is found at the first call (dlopen;
// libcublas, which every binary links, needs libcublasLt itself, so it is already loaded) and
// each function looked up once (dlsym). The binaries then link no more than -lcublas, as
// ../shared/gpu/pack.sh links op_check, and a missing library or function fails by name. The
// emulated build links the emulator's cuBLASLt (kernels/emulator/cublaslt.cpp) and calls it.
#include <cublasLt.h>

#include <stdexcept>
#include <string>
#if !defined(PARALAB_EMULATED)
#include <dlfcn.h>
#endif

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/ops/elementwise.h"  // convert's twins (a bf16 C through the emulated path)
#include "kernels/ops/fp8.h"
#include "kernels/ops/memory_gemm.h"

namespace kernels {

using namespace cuda;  // cuda_check.cuh: stream(), scratch_alloc, scratch_free

namespace {

#if defined(PARALAB_EMULATED)
#define LT(name) name
#else
void* cublaslt_library() {
  static void* library = [] {
    for (const char* file : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
      if (void* handle = dlopen(file, RTLD_NOW | RTLD_GLOBAL)) return handle;
    const char* why = dlerror();
    throw std::runtime_error(std::string("cuBLASLt: dlopen(libcublasLt.so.13) failed: ") +
                             (why != nullptr ? why : "no reason given"));
  }();
  return library;
}
template <class Function> Function cublaslt_function(const char* name) {
  void* f = dlsym(cublaslt_library(), name);
  if (f == nullptr) throw std::runtime_error(std::string("cuBLASLt: no function ") + name);
  return reinterpret_cast<Function>(f);
}
// decltype names the header's declaration without using it: nothing to link.
#define LT(name) \
  ([] { static const auto f = cublaslt_function<decltype(&name)>(#name); return f; }())
#endif

cublasLtHandle_t lt() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t created;
    CUBLAS_CHECK(LT(cublasLtCreate)(&created));
    return created;
  }();
  return h;
}

cudaDataType_t fp8_type(Fp8Format f) {
  return f == Fp8Format::E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

// The descriptors of one call, destroyed with it.
struct LtCall {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) LT(cublasLtMatmulPreferenceDestroy)(pref);
    if (c) LT(cublasLtMatrixLayoutDestroy)(c);
    if (b) LT(cublasLtMatrixLayoutDestroy)(b);
    if (a) LT(cublasLtMatrixLayoutDestroy)(a);
    if (desc) LT(cublasLtMatmulDescDestroy)(desc);
  }
};

void gemm_cublaslt(int m, int n, int k, float alpha, const Fp8Matrix& A, const Fp8Matrix& B,
                   float beta, void* C, cudaDataType_t c_type, int ldc) {
  LtCall call;
  CUBLAS_CHECK(LT(cublasLtMatmulDescCreate)(&call.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  const int8_t fast_accum = 0;
  const void* a_scale = B.scale_inv;  // cuBLAS's A is our B
  const void* b_scale = A.scale_inv;
  CUBLAS_CHECK(LT(cublasLtMatmulDescSetAttribute)(call.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t,
                                              sizeof(op_t)));
  CUBLAS_CHECK(LT(cublasLtMatmulDescSetAttribute)(call.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n,
                                              sizeof(op_n)));
  CUBLAS_CHECK(LT(cublasLtMatmulDescSetAttribute)(call.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &a_scale, sizeof(a_scale)));
  CUBLAS_CHECK(LT(cublasLtMatmulDescSetAttribute)(call.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &b_scale, sizeof(b_scale)));
  CUBLAS_CHECK(LT(cublasLtMatmulDescSetAttribute)(call.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                              &fast_accum, sizeof(fast_accum)));
  // Column-major shapes as stored: our B is (k x n, ld k), our A (k x m, ld k), C (n x m, ld ldc).
  CUBLAS_CHECK(LT(cublasLtMatrixLayoutCreate)(&call.a, fp8_type(B.format), k, n, k));
  CUBLAS_CHECK(LT(cublasLtMatrixLayoutCreate)(&call.b, fp8_type(A.format), k, m, k));
  CUBLAS_CHECK(LT(cublasLtMatrixLayoutCreate)(&call.c, c_type, n, m, ldc));
  CUBLAS_CHECK(LT(cublasLtMatmulPreferenceCreate)(&call.pref));
  const size_t workspace = 0;
  CUBLAS_CHECK(LT(cublasLtMatmulPreferenceSetAttribute)(
      call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  cublasLtMatmulHeuristicResult_t heuristic;
  int found = 0;
  CUBLAS_CHECK(LT(cublasLtMatmulAlgoGetHeuristic)(lt(), call.desc, call.a, call.b, call.c, call.c,
                                              call.pref, 1, &heuristic, &found));
  if (found == 0)
    throw std::runtime_error("gemm_fp8: cuBLASLt has no FP8 kernel for m " + std::to_string(m) +
                             ", n " + std::to_string(n) + ", k " + std::to_string(k));
  CUBLAS_CHECK(LT(cublasLtMatmul)(lt(), call.desc, &alpha, B.data, call.a, A.data, call.b, &beta, C,
                              call.c, C, call.c, &heuristic.algo, nullptr, 0, stream()));
}

// Both operands dequantised to fp32 scratch, then the fp32 GEMM (the CPU twin's computation).
void gemm_emulated(int m, int n, int k, float alpha, const Fp8Matrix& A, const Fp8Matrix& B,
                   float beta, float* C, int ldc) {
  float* a = (float*)scratch_alloc((size_t)m * k * sizeof(float));
  float* b = (float*)scratch_alloc((size_t)n * k * sizeof(float));
  fp8_dequantize<Device::CUDA, float>(a, A, m, k);
  fp8_dequantize<Device::CUDA, float>(b, B, n, k);
  gemm<Device::CUDA, float, float>(false, true, m, n, k, alpha, a, k, b, k, beta, C, ldc);
  scratch_free(b);
  scratch_free(a);
}

void check_formats(const Fp8Matrix& A, const Fp8Matrix& B) {
  if (A.format == Fp8Format::E5M2 && B.format == Fp8Format::E5M2)
    throw std::invalid_argument("gemm_fp8: E5M2 x E5M2 has no FP8 GEMM (cuBLASLt); one operand "
                                "must be E4M3");
}

}  // namespace

template <> void gemm_fp8<Device::CUDA, float>(int m, int n, int k, float alpha, Fp8Matrix A,
                                               Fp8Matrix B, float beta, float* C, int ldc) {
  check_formats(A, B);
  if (m == 0 || n == 0) return;
  if (gemm_fp8_uses_cublaslt(A.blocks, B.blocks, m, n, k))
    gemm_cublaslt(m, n, k, alpha, A, B, beta, C, CUDA_R_32F, ldc);
  else
    gemm_emulated(m, n, k, alpha, A, B, beta, C, ldc);
}

template <> void gemm_fp8<Device::CUDA, bf16>(int m, int n, int k, float alpha, Fp8Matrix A,
                                              Fp8Matrix B, float beta, bf16* C, int ldc) {
  check_formats(A, B);
  if (m == 0 || n == 0) return;
  if (gemm_fp8_uses_cublaslt(A.blocks, B.blocks, m, n, k)) {
    gemm_cublaslt(m, n, k, alpha, A, B, beta, C, CUDA_R_16BF, ldc);
    return;
  }
  // fp32 C in scratch (ldc kept, so the rows between stay where they are), rounded back once.
  const size_t span = (size_t)(m - 1) * ldc + n;
  float* c = (float*)scratch_alloc(span * sizeof(float));
  convert<Device::CUDA, float, bf16>(c, C, span);
  gemm_emulated(m, n, k, alpha, A, B, beta, c, ldc);
  convert<Device::CUDA, bf16, float>(C, c, span);
  scratch_free(c);
}

}  // namespace kernels
