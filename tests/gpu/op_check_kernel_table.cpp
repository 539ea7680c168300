// tests/gpu/op_check_kernel_table.cpp: op_check --kernel-table, the emulated device's kernel
// table (report/kernel_table.h) for the tensor-core flash attention: forward and backward, causal
// bf16, at one sequence length and head dims 64 and 128, each launch counted by the emulator and
// projected on the GPU it plays (the hardware profile its name matches, or --hardware).
//
//   op_check --kernel-table [--seq 1024] [--heads 32] [--group 1] [--head-dim 64|128]
//                           [--hardware h100-sxm]
//
// One group of --group query heads sharing their keys and values is emulated (B = G = 1, A =
// --group: GQA's shape when above 1); the projection places --heads / --group copies of its
// grid (a real run's groups x batch identical grids), so a student sees the waves and the tail
// of the real shape without emulating all of it. FLOPs by FlashAttention's count (forward 4 D pairs,
// backward 10 D pairs) are printed beside the kernels' own tensor-core FLOPs (the backward runs
// 7 products where FlashAttention-2 runs 5; causal tiles multiply their masked half too).
// Needs the emulated build (make emulated): its counters are the emulator's.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/flash_mma.h"
#include "kernels/emulator/kernel_counters.h"
#include "measure/hardware.h"
#include "report/kernel_table.h"
#include "tests/gpu/op_check.h"

#if defined(PARALAB_EMULATED)
namespace {

using kernels::bf16;
using kernels::Device;

template <typename T>
T* device_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> host(n);
  for (T& x : host) {
    if constexpr (std::is_same<T, float>::value) x = 0.0f;
    else x = kernels::to_bf16(u(rng));
  }
  T* p = (T*)kernels::device_malloc(Device::CUDA, n * sizeof(T));
  kernels::memcpy_from_host(Device::CUDA, p, host.data(), n * sizeof(T));
  return p;
}

void run_shape(int S, int D, int A, std::mt19937& rng) {
  const kernels::AttentionBlock blk = kernels::whole_sequence(S, A, D);
  const size_t n = (size_t)S * D;
  bf16 *q = device_values<bf16>(A * n, rng), *k = device_values<bf16>(n, rng),
       *v = device_values<bf16>(n, rng), *o = device_values<bf16>(A * n, rng),
       *dout = device_values<bf16>(A * n, rng), *dk = device_values<bf16>(n, rng),
       *dv = device_values<bf16>(n, rng);
  float *lse = device_values<float>((size_t)A * S, rng), *dq = device_values<float>(A * n, rng);
  const float scale = 1.0f / std::sqrt((float)D);
  if (!kernels::cuda::flash_mma_forward(o, lse, q, k, v, 1, A, 1, D, scale, 0.0f, 1, 2, blk) ||
      !kernels::cuda::flash_mma_backward(dq, dk, dv, dout, q, k, v, o, lse, 1, A, 1, D, scale,
                                         0.0f, 1, 2, blk))
    throw std::runtime_error("the tensor-core kernels declined S " + std::to_string(S));
  kernels::synchronize(Device::CUDA);
}

}  // namespace
#endif

namespace op_check {

int kernel_table_main(int argc, char** argv) {
#if !defined(PARALAB_EMULATED)
  (void)argc;
  (void)argv;
  std::fprintf(stderr, "op_check --kernel-table: the counters are the emulated device's: run "
                       "build/emulated/op_check (make emulated)\n");
  return 2;
#else
  int S = 1024, heads = 32, group = 1, head_dim = 0;  // head_dim 0: both 64 and 128
  std::string hardware;
  for (int i = 2; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--seq" && i + 1 < argc) S = std::atoi(argv[++i]);
    else if (a == "--heads" && i + 1 < argc) heads = std::atoi(argv[++i]);
    else if (a == "--group" && i + 1 < argc) group = std::atoi(argv[++i]);
    else if (a == "--head-dim" && i + 1 < argc) head_dim = std::atoi(argv[++i]);
    else if (a == "--hardware" && i + 1 < argc) hardware = argv[++i];
    else {
      std::fprintf(stderr, "usage: op_check --kernel-table [--seq S] [--heads H] [--group N] "
                           "[--head-dim 64|128] [--hardware NAME]\n");
      return 2;
    }
  }
  if (head_dim != 0 && head_dim != 64 && head_dim != 128) {
    std::fprintf(stderr, "op_check --kernel-table: --head-dim must be 64 or 128, got %d\n", head_dim);
    return 2;
  }
  if (S < 1 || group < 1 || heads < group || heads % group != 0) {
    std::fprintf(stderr, "op_check --kernel-table: --seq and --group must be >= 1 and --heads a "
                         "multiple of --group, got %d, %d, %d\n", S, group, heads);
    return 2;
  }
  try {
    const paralab::HardwareProfile gpu =
        hardware.empty()
            ? *paralab::match_hardware_profile(paralab::load_hardware_profiles("configs/hardware"),
                                               kernels::cuda_device_name())
            : paralab::find_hardware_profile(hardware, "configs/hardware");
    emu::record_launches(true);
    for (int D : {64, 128}) {
      if (head_dim != 0 && D != head_dim) continue;
      emu::reset_kernel_records();
      std::mt19937 rng(7);
      run_shape(S, D, group, rng);
      const double pairs = (double)S * (S + 1) / 2 * heads;
      std::printf("---- causal bf16, S %d, D %d, %d heads in groups of %d: FlashAttention's count "
                  "%.2f GFLOP forward, %.2f backward\n",
                  S, D, heads, group, 4.0 * D * pairs / 1e9, 10.0 * D * pairs / 1e9);
      std::printf("%s", paralab::kernel_table(emu::kernel_records(), gpu, heads / group).c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "op_check --kernel-table: %s\n", e.what());
    return 1;
  }
  return 0;
#endif
}

}  // namespace op_check
