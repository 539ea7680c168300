// tests/emulator/planted/driver.cpp: runs one of paralab's CUDA ops once on the emulated device,
// for tests/emulator/planted/defects.sh, which links it against a build variant with one defect
// planted in a kernel's source and expects the emulator to report it.
//
//   driver flash-forward | flash-backward | grouped-gemm
//
// Prints "clean" and exits 0 when the op ran without an error, else prints the error (the
// emulator's report) and exits 1. The shapes are small but reach every path the planted defects
// touch: bf16 at head dim 64 (the tensor-core kernels), 130 rows (two query tiles, three key
// tiles: the double buffer's prefetch and the partial last tile), the last head's rows at the end
// of their allocation; a grouped GEMM of three aligned groups (cuBLAS's grouped call).
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/flash_mma.h"
#include "kernels/ops.h"

namespace {

using kernels::bf16;
using kernels::Device;

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* p = (T*)kernels::device_malloc(Device::CUDA, host.size() * sizeof(T));
  kernels::memcpy_from_host(Device::CUDA, p, host.data(), host.size() * sizeof(T));
  return p;
}
std::vector<bf16> random_bf16(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<bf16> v(n);
  for (bf16& x : v) x = kernels::to_bf16(u(rng));
  return v;
}

void flash(bool backward) {
  std::mt19937 rng(5);
  const int B = 1, A = 2, G = 1, S = 130, D = 64;
  const kernels::AttentionBlock blk = kernels::whole_sequence(S, A, D);
  bf16* q = device_copy(random_bf16((size_t)B * A * S * D, rng));
  bf16* k = device_copy(random_bf16((size_t)B * G * S * D, rng));
  bf16* v = device_copy(random_bf16((size_t)B * G * S * D, rng));
  bf16* o = device_copy(std::vector<bf16>((size_t)B * A * S * D));
  float* lse = device_copy(std::vector<float>((size_t)B * A * S));
  const float scale = 1.0f / std::sqrt((float)D);
  if (!kernels::cuda::flash_mma_forward(o, lse, q, k, v, B, A, G, D, scale, 0.0f, 1, 2, blk))
    throw std::runtime_error("flash_mma_forward declined the shape");
  if (backward) {
    bf16* dout = device_copy(random_bf16((size_t)B * A * S * D, rng));
    float* dq = device_copy(std::vector<float>((size_t)B * A * S * D));
    bf16* dk = device_copy(std::vector<bf16>((size_t)B * G * S * D));
    bf16* dv = device_copy(std::vector<bf16>((size_t)B * G * S * D));
    if (!kernels::cuda::flash_mma_backward(dq, dk, dv, dout, q, k, v, o, lse, B, A, G, D, scale,
                                           0.0f, 1, 2, blk))
      throw std::runtime_error("flash_mma_backward declined the shape");
  }
  kernels::synchronize(Device::CUDA);
}

void grouped_gemm() {
  std::mt19937 rng(6);
  const int groups = 3, m = 16, n = 32, k = 24;
  std::vector<kernels::GemmGroup> g(groups);
  for (int i = 0; i < groups; i++) {
    g[i].m = m;
    g[i].n = n;
    g[i].k = k;
    g[i].a_offset = (long long)i * m * k;
    g[i].b_offset = (long long)i * k * n;
    g[i].c_offset = (long long)i * m * n;
  }
  bf16* a = device_copy(random_bf16((size_t)groups * m * k, rng));
  bf16* b = device_copy(random_bf16((size_t)groups * k * n, rng));
  bf16* c = device_copy(std::vector<bf16>((size_t)groups * m * n));
  kernels::gemm_grouped(Device::CUDA, false, false, 1.0f, a, k, b, n, 0.0f, c, n, g.data(), groups);
  kernels::synchronize(Device::CUDA);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string op = argc > 1 ? argv[1] : "";
  try {
    if (op == "flash-forward") flash(false);
    else if (op == "flash-backward") flash(true);
    else if (op == "grouped-gemm") grouped_gemm();
    else {
      std::fprintf(stderr, "usage: driver flash-forward|flash-backward|grouped-gemm\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  std::printf("clean\n");
  return 0;
}
