// tests/emulator/test_kernels.h: small kernels that exercise one instruction or one defect each
// on the emulated device (tests/emulator/ptx_kernels.cu, check_kernels.cu), and what their host
// wrappers return, for tests/emulator/test_ptx.cpp and test_checks.cpp.
//
// defines: emulator_test::{Outcome, run_ldmatrix, LdmatrixAddress, run_kernel_ldmatrix, run_mma, run_cvt, run_cp_async, run_scenario,
//          kScenarios}
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace emulator_test {

// ---- ptx_kernels.cu: one warp, the kernels' own PTX wrappers (kernels/cuda/flash_mma.cuh) ----
// ldmatrix.x4 of a 16 x 16 bf16 tile (row-major, bits) in shared memory, lane L pointing at
// row L % 8 of 8 x 8 matrix L / 8 (matrix m: rows 8 (m % 2), columns 8 (m / 2)): each lane's 4
// registers, lane-major.
std::vector<uint32_t> run_ldmatrix(const std::vector<uint16_t>& tile, bool trans);
// ldmatrix.x4 of the same tile stored with the kernels' padded row stride (16 + kPad), each lane
// pointing where the kernels point it (kernels/cuda/mma_layout.h): ldsm_a, ldsm_b, or ldsm_bt
// with .trans. Each lane's 4 registers, lane-major.
enum class LdmatrixAddress { a, b, bt };
std::vector<uint32_t> run_kernel_ldmatrix(const std::vector<uint16_t>& tile, LdmatrixAddress at);
// mma.m16n8k16 on each lane's fragments (a: 4 registers, b: 2, c: 4 floats a lane): d, lane-major;
// bf16 inputs, or fp16 with f16.
std::vector<float> run_mma(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                           const std::vector<float>& c, bool f16 = false);
// pack_16x2<bf16>(lo, hi) (or <fp16>, f16) for each pair of the inputs, in a kernel.
std::vector<uint32_t> run_cvt(const std::vector<float>& lo, const std::vector<float>& hi,
                              bool f16 = false);
// 32 threads each cp.async 16 bytes of `first` (group 0) and of `second` (group 1, odd threads'
// with src-size 0: zero-filled), then read their own destination: after wait_group 1, before
// wait_group 0, after it. Returns the three snapshots (32 x 8 bf16 each) in a row.
std::vector<uint16_t> run_cp_async(const std::vector<uint16_t>& first,
                                   const std::vector<uint16_t>& second);

// ---- check_kernels.cu: a defect or its correct twin per scenario ------------------------------
struct Outcome {
  int error = 0;        // cudaGetLastError after the launch and a synchronize (0: success)
  std::string message;  // cudaGetErrorString of it
};
Outcome run_scenario(const std::string& name);
// Every scenario's name, and whether it is a defect (the others must run clean).
struct Scenario {
  const char* name;
  bool defect;
};
extern const Scenario kScenarios[];
extern const int kScenarioCount;

}  // namespace emulator_test
