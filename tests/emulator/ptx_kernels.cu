// tests/emulator/ptx_kernels.cu: one warp running the tensor-core kernels' own PTX wrappers
// (kernels/cuda/flash_mma.cuh: ldsm_x4, mma_16, pack_16x2, cp_async_16) on the emulated
// device, for tests/emulator/test_ptx.cpp. The wrappers are what the flash kernels call; on the
// emulated device they run kernels/emulator/ptx.cpp.
#include <cstring>

#include "kernels/cuda/flash_mma.cuh"
#include "kernels/cuda/flash_mma_tiles.h"  // kPad
#include "kernels/cuda/mma_layout.h"      // ldsm_a, ldsm_b, ldsm_bt
#include "tests/emulator/test_kernels.h"

namespace emulator_test {

using kernels::bf16;
using kernels::fp16;
namespace fm = kernels::cuda::flash_mma;

namespace {

template <typename T>
T* to_device(const std::vector<T>& host) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, host.size() * sizeof(T) + 16));
  CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}
template <typename T>
std::vector<T> to_host(const T* p, size_t n) {
  std::vector<T> out(n);
  CUDA_CHECK(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(const_cast<T*>(p)));
  return out;
}

__global__ void ldmatrix_kernel(uint32_t* out, const bf16* tile, bool trans) {
  __shared__ __align__(16) bf16 s[16 * 16];
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) s[i] = tile[i];
  __syncwarp();
  const int m = lane / 8, r = lane % 8;
  const bf16* row = s + (8 * (m % 2) + r) * 16 + 8 * (m / 2);
  uint32_t regs[4];
  if (trans) fm::ldsm_x4_trans(regs, row);
  else fm::ldsm_x4(regs, row);
  for (int i = 0; i < 4; i++) out[lane * 4 + i] = regs[i];
}

// The tile in shared memory with the kernels' padded stride; each lane's row address from the
// kernels' own coordinate functions, as flash_mma_forward.cu computes it.
__global__ void kernel_ldmatrix_kernel(uint32_t* out, const bf16* tile, LdmatrixAddress at) {
  constexpr int stride = 16 + fm::kPad;
  __shared__ __align__(16) bf16 s[16 * stride];
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) s[(i / 16) * stride + i % 16] = tile[i];
  __syncwarp();
  const kernels::mma::Coord c = at == LdmatrixAddress::a   ? kernels::mma::ldsm_a(lane)
                                : at == LdmatrixAddress::b ? kernels::mma::ldsm_b(lane)
                                                           : kernels::mma::ldsm_bt(lane);
  uint32_t regs[4];
  if (at == LdmatrixAddress::bt) fm::ldsm_x4_trans(regs, s + c.row * stride + c.col);
  else fm::ldsm_x4(regs, s + c.row * stride + c.col);
  for (int i = 0; i < 4; i++) out[lane * 4 + i] = regs[i];
}

__global__ void mma_kernel(float* d, const uint32_t* a, const uint32_t* b, const float* c,
                           bool f16) {
  const int lane = threadIdx.x;
  uint32_t af[4] = {a[lane * 4], a[lane * 4 + 1], a[lane * 4 + 2], a[lane * 4 + 3]};
  float acc[4] = {c[lane * 4], c[lane * 4 + 1], c[lane * 4 + 2], c[lane * 4 + 3]};
  if (f16) fm::mma_16<fp16>(acc, af, b[lane * 2], b[lane * 2 + 1]);
  else fm::mma_16<bf16>(acc, af, b[lane * 2], b[lane * 2 + 1]);
  for (int i = 0; i < 4; i++) d[lane * 4 + i] = acc[i];
}

__global__ void cvt_kernel(uint32_t* out, const float* lo, const float* hi, int n, bool f16) {
  GRID_STRIDE_LOOP(i, n) out[i] = f16 ? fm::pack_16x2<fp16>(lo[i], hi[i])
                                      : fm::pack_16x2<bf16>(lo[i], hi[i]);
}

__global__ void cp_async_kernel(bf16* out, const bf16* first, const bf16* second) {
  __shared__ __align__(16) bf16 a[32 * 8];
  __shared__ __align__(16) bf16 b[32 * 8];
  const int t = threadIdx.x;
  fm::cp_async_16(a + 8 * t, first + 8 * t, true);
  fm::cp_async_commit();
  fm::cp_async_16(b + 8 * t, second + 8 * t, t % 2 == 0);
  fm::cp_async_commit();
  fm::cp_async_wait<1>();
  for (int e = 0; e < 8; e++) out[8 * t + e] = a[8 * t + e];
  for (int e = 0; e < 8; e++) out[256 + 8 * t + e] = b[8 * t + e];
  fm::cp_async_wait<0>();
  for (int e = 0; e < 8; e++) out[512 + 8 * t + e] = b[8 * t + e];
}

}  // namespace

std::vector<uint32_t> run_ldmatrix(const std::vector<uint16_t>& tile, bool trans) {
  const bf16* t = reinterpret_cast<const bf16*>(to_device(tile));
  uint32_t* out = nullptr;
  CUDA_CHECK(cudaMalloc(&out, 128 * sizeof(uint32_t)));
  ldmatrix_kernel<<<1, 32>>>(out, t, trans);
  KERNEL_CHECK();
  CUDA_CHECK(cudaFree(const_cast<bf16*>(t)));
  return to_host(out, 128);
}

std::vector<uint32_t> run_kernel_ldmatrix(const std::vector<uint16_t>& tile, LdmatrixAddress at) {
  const bf16* t = reinterpret_cast<const bf16*>(to_device(tile));
  uint32_t* out = nullptr;
  CUDA_CHECK(cudaMalloc(&out, 128 * sizeof(uint32_t)));
  kernel_ldmatrix_kernel<<<1, 32>>>(out, t, at);
  KERNEL_CHECK();
  CUDA_CHECK(cudaFree(const_cast<bf16*>(t)));
  return to_host(out, 128);
}

std::vector<float> run_mma(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                           const std::vector<float>& c, bool f16) {
  const uint32_t* da = to_device(a);
  const uint32_t* db = to_device(b);
  const float* dc = to_device(c);
  float* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, 128 * sizeof(float)));
  mma_kernel<<<1, 32>>>(d, da, db, dc, f16);
  KERNEL_CHECK();
  for (const void* p : {(const void*)da, (const void*)db, (const void*)dc})
    CUDA_CHECK(cudaFree(const_cast<void*>(p)));
  return to_host(d, 128);
}

std::vector<uint32_t> run_cvt(const std::vector<float>& lo, const std::vector<float>& hi,
                              bool f16) {
  const float* dl = to_device(lo);
  const float* dh = to_device(hi);
  uint32_t* out = nullptr;
  CUDA_CHECK(cudaMalloc(&out, lo.size() * sizeof(uint32_t)));
  cvt_kernel<<<2, 64>>>(out, dl, dh, (int)lo.size(), f16);
  KERNEL_CHECK();
  CUDA_CHECK(cudaFree(const_cast<float*>(dl)));
  CUDA_CHECK(cudaFree(const_cast<float*>(dh)));
  return to_host(out, lo.size());
}

std::vector<uint16_t> run_cp_async(const std::vector<uint16_t>& first,
                                   const std::vector<uint16_t>& second) {
  const bf16* f = reinterpret_cast<const bf16*>(to_device(first));
  const bf16* s = reinterpret_cast<const bf16*>(to_device(second));
  bf16* out = nullptr;
  CUDA_CHECK(cudaMalloc(&out, 3 * 256 * sizeof(bf16)));
  cp_async_kernel<<<1, 32>>>(out, f, s);
  KERNEL_CHECK();
  CUDA_CHECK(cudaFree(const_cast<bf16*>(f)));
  CUDA_CHECK(cudaFree(const_cast<bf16*>(s)));
  std::vector<bf16> host = to_host(out, 768);
  std::vector<uint16_t> bits(768);
  std::memcpy(bits.data(), host.data(), bits.size() * 2);
  return bits;
}

}  // namespace emulator_test
