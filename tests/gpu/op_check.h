// tests/gpu/op_check.h: the harness every op_check*.cpp shares: random inputs (one seeded
// stream), Twin (one tensor on both twins), the error metric and bounds, and check(), which
// prints one row. The design (metric, bounds, the "+=" / "=" seeding) is in op_check.cpp.
//
// The checks live by op family:
//   op_check.cpp            main, memory, fp32 <-> bf16 conversion
//   op_check_dense.cpp      gemm, elementwise, embedding, norms
//   op_check_attention.cpp  attention layout, the naive pieces of an attention pass, the ring's
//                           merge, flash attention on the whole sequence and on cp passes
//   op_check_moe.cpp        grouped GEMM, the MoE ops, RoPE alone
//   op_check_loss.cpp       cross-entropy, AdamW, sum of squares
//   op_check_fp8.cpp        FP8 casts (per tensor, per block, transposed), amax, scales, FP8 GEMM
// Each check_X<T> runs the fp32 rows (T = float), the bf16 rows (T = bf16) or the fp16 rows
// (T = kernels::fp16) of its ops.
//
// defines: rng, random_floats, round_all, random_values, random_ints, Twin, written, Precision,
//          rel_err, widen, err, err_lse, worst, mismatches, cp_positions, cp_chunk, failures,
//          check, Pass, whole_pass, cp_passes, and the check_X below
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/math.h"  // to_float, to_bf16
#include "kernels/ops.h"   // Device, device_malloc, memcpy_*, and every op's two twins

namespace op_check {

using kernels::bf16;
using kernels::Device;
using Floats = std::vector<float>;
using Bf16s = std::vector<bf16>;

// One stream for every file (an inline variable: one object in the program), so each row's
// inputs depend only on the order main runs the checks in.
inline std::mt19937 rng(20240611);

inline Floats random_floats(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

// Floats rounded to a 16-bit storage type H (bf16 unless told; fp16), nearest even.
template <typename H = bf16>
std::vector<H> round_all(const Floats& x) {
  std::vector<H> out(x.size());
  for (size_t i = 0; i < x.size(); i++) out[i] = kernels::round_to<H>(x[i]);
  return out;
}

// Random values of storage type T: 16-bit ones are rounded floats.
template <typename T>
std::vector<T> random_values(size_t n, float lo = -1.0f, float hi = 1.0f) {
  if constexpr (std::is_same<T, float>::value)
    return random_floats(n, lo, hi);
  else
    return round_all<T>(random_floats(n, lo, hi));
}

inline std::vector<int> random_ints(size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> x(n);
  for (int& v : x) v = dist(rng);
  return x;
}

// One tensor on both twins: `cpu` is the CPU twin's buffer (host memory is the CPU device),
// `gpu` a device copy of the same initial values (or of `gpu_init` when given).
template <typename T>
struct Twin {
  std::vector<T> cpu;
  T* gpu = nullptr;
  explicit Twin(const std::vector<T>& init) : Twin(init, init) {}
  Twin(const std::vector<T>& init, const std::vector<T>& gpu_init) : cpu(init) {
    gpu = (T*)kernels::device_malloc(Device::CUDA, gpu_init.size() * sizeof(T));
    kernels::memcpy_from_host(Device::CUDA, gpu, gpu_init.data(), gpu_init.size() * sizeof(T));
  }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;
  ~Twin() { kernels::device_free(Device::CUDA, gpu); }
  T* c() { return cpu.data(); }
  T* g() { return gpu; }
  std::vector<T> fetch() const {
    std::vector<T> out(cpu.size());
    kernels::memcpy_to_host(Device::CUDA, out.data(), gpu, out.size() * sizeof(T));
    return out;
  }
};

// An "=" output: the two sides start from different garbage.
template <typename T = float>
std::unique_ptr<Twin<T>> written(size_t n) {
  return std::make_unique<Twin<T>>(random_values<T>(n), random_values<T>(n));
}

// Bounds and row-name tag per storage type (see op_check.cpp's header comment).
template <typename T>
struct Precision {
  static constexpr double elementwise = 1e-4, reduction = 1e-3, layout = 1e-4;
  static constexpr const char* tag = "";
};
template <>
struct Precision<bf16> {
  static constexpr double elementwise = 1e-2, reduction = 1e-2, layout = 0.0;
  static constexpr const char* tag = " bf16";
};
// fp16: bf16's bounds (its last bit, 2^-11 relative, is finer than bf16's 2^-8)
template <>
struct Precision<kernels::fp16> {
  static constexpr double elementwise = 1e-2, reduction = 1e-2, layout = 0.0;
  static constexpr const char* tag = " fp16";
};

inline double rel_err(const Floats& gpu, const Floats& cpu) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < cpu.size(); i++) {
    if (!std::isfinite(gpu[i]) || !std::isfinite(cpu[i])) return INFINITY;
    diff = std::max(diff, (double)std::fabs(gpu[i] - cpu[i]));
    scale = std::max(scale, (double)std::fabs(cpu[i]));
  }
  return scale > 0.0 ? diff / scale : diff;
}
inline const Floats& widen(const Floats& x) { return x; }
template <typename H>
Floats widen(const std::vector<H>& x) {
  Floats out(x.size());
  for (size_t i = 0; i < x.size(); i++) out[i] = kernels::to_float(x[i]);
  return out;
}
template <typename T>
double err(const Twin<T>& t) {
  return rel_err(widen(t.fetch()), widen(t.cpu));
}
// A log-sum-exp, where a row that sees no key holds -inf: both twins must put -inf at the same
// rows (else inf), and the other rows are compared as err does.
inline double err_lse(const Twin<float>& t) {
  Floats g = t.fetch(), c = t.cpu;
  for (size_t i = 0; i < c.size(); i++) {
    if ((g[i] == -INFINITY) != (c[i] == -INFINITY)) return INFINITY;
    if (c[i] == -INFINITY) g[i] = c[i] = 0.0f;
  }
  return rel_err(g, c);
}
// The worst of several outputs' errors (they may differ in type).
inline double worst(std::initializer_list<double> errs) { return std::max(errs); }
// Elements whose bytes differ: masks, and the outputs that must match bit for bit.
template <typename T>
double mismatches(const Twin<T>& t) {
  std::vector<T> g = t.fetch();
  double n = 0;
  for (size_t i = 0; i < g.size(); i++) n += std::memcmp(&g[i], &t.cpu[i], sizeof(T)) != 0;
  return n;
}

// Context parallelism's token positions (kernels/math.h TokenPositions): rank r of cp holds
// chunks r and 2cp-1-r of a sequence of 2 cp chunks (Megatron's load-balanced layout), and
// cp_chunk one of them alone (half 0 or 1 of that rank's rows: a half-block pass's view).
inline kernels::TokenPositions cp_positions(int chunk, int rank, int cp) {
  kernels::TokenPositions p;
  p.chunk = chunk;
  p.start[0] = rank * chunk;
  p.start[1] = (2 * cp - 1 - rank) * chunk;
  p.local = 2 * chunk;
  p.length = 2 * cp * chunk;
  return p;
}
inline kernels::TokenPositions cp_chunk(int chunk, int rank, int cp, int half) {
  kernels::TokenPositions p;
  p.chunk = chunk;
  p.start[0] = cp_positions(chunk, rank, cp).start[half];
  p.start[1] = p.start[0] + chunk;  // unused: a view of one chunk has no second one
  return p;
}

inline int failures = 0;

// Runs one check; an exception (e.g. a CUDA error) is a failure with its message.
inline void check(const std::string& op, double bound, const std::function<double()>& run) {
  double e = INFINITY;
  std::string note;
  try {
    e = run();
  } catch (const std::exception& ex) {
    note = std::string("  (") + ex.what() + ")";
  }
  bool pass = e <= bound;
  if (!pass) failures++;
  std::printf("%-52s %12.3e %10.1e   %s%s\n", op.c_str(), e, bound, pass ? "PASS" : "FAIL",
              note.c_str());
  std::fflush(stdout);
}

// ---- attention passes the attention rows share (op_check_attention.cpp, _flash_mma.cpp) ----
// One pass of attention as a test case: its block, where its views start in the local
// tensors (rows), and those tensors' rows.
struct Pass {
  std::string name;
  kernels::AttentionBlock blk;
  int q_first = 0, k_first = 0, q_local = 0, k_local = 0;
  bool whole() const { return blk.q.rows == q_local; }  // the q view covers its tensor
};

inline Pass whole_pass(int S, int A, int D) {
  Pass p;
  p.name = "";
  p.blk = kernels::whole_sequence(S, A, D);
  p.q_local = p.k_local = S;
  return p;
}

// Passes of cp = 2 over S = 4 chunk positions, seen from the ranks' local tensors of 2 chunk
// rows (rank 0 holds positions [0, c) and [3c, 4c), rank 1 [c, 3c)):
//   diagonal  rank 0's rows against its own, causal;
//   q half    rank 0's second chunk (positions 3c..) against rank 1's rows: all visible;
//   k half    rank 1's rows against rank 0's first chunk, causal off (all visible);
//   no key    rank 0's rows against rank 1's first chunk, causal: the rows of rank 0's first
//             chunk see no key (lse -inf, o 0), the others all of it.
inline std::vector<Pass> cp_passes(int c, int A, int D) {
  const long long stride = 2LL * c * D;
  using kernels::TokenPositions;
  auto block = [&](int q_rows, const TokenPositions& qp, int k_rows, const TokenPositions& kp,
                   bool causal) {
    kernels::AttentionBlock b;
    b.q = kernels::AttentionRows{q_rows, stride, qp};
    b.k = kernels::AttentionRows{k_rows, stride, kp};
    b.causal = causal;
    b.dropout_heads = A;
    b.dropout_length = 4 * c;
    return b;
  };
  const TokenPositions r0 = cp_positions(c, 0, 2), r1 = cp_positions(c, 1, 2);
  std::vector<Pass> passes(4);
  passes[0].name = " cp diagonal";
  passes[0].blk = block(2 * c, r0, 2 * c, r0, true);
  passes[1].name = " cp q half";
  passes[1].blk = block(c, cp_chunk(c, 0, 2, 1), 2 * c, r1, true);
  passes[1].q_first = c;
  passes[2].name = " cp k half";
  passes[2].blk = block(2 * c, r1, c, cp_chunk(c, 0, 2, 0), false);
  passes[3].name = " cp no key";
  passes[3].blk = block(2 * c, r0, c, cp_chunk(c, 1, 2, 0), true);
  for (Pass& p : passes) p.q_local = p.k_local = 2 * c;
  return passes;
}

// ---- the checks, one family per file ---------------------------------------------------------
void check_memory();   // op_check.cpp
void check_convert();  // op_check.cpp
void check_convert_fp16();  // op_check.cpp
template <typename T> void check_gemm();         // op_check_dense.cpp
template <typename T> void check_elementwise();  // op_check_dense.cpp
template <typename T> void check_embedding(int B, int S, int C, int V);  // op_check_dense.cpp
template <typename T> void check_norms();        // op_check_dense.cpp
template <typename T> void check_attention_layout();  // op_check_attention.cpp
template <typename T> void check_attention_naive();   // op_check_attention.cpp
template <typename T> void check_flash_cases();       // op_check_attention.cpp
void check_loss_optimizer();  // op_check_loss.cpp
void check_optimizer_bf16();  // op_check_loss.cpp
void check_optimizer_bf16_moments();  // op_check_loss.cpp
void check_moe_router();      // op_check_moe.cpp: router, balancing, z loss (fp32 only)
void check_moe_dispatch();    // op_check_moe.cpp: the dispatch's counting sort (integers)
void check_gemm_grouped_cases();  // op_check_moe.cpp: the grouped GEMM's layouts, fp32 and bf16
void check_flash_mma_whole();     // op_check_flash_mma.cpp: the tensor-core flash attention,
void check_flash_mma_cp();        //   whole sequences; cp passes and declined shapes
int attention_main(int argc, char** argv);  // op_check_attention_bench.cpp: its two modes
int kernel_table_main(int argc, char** argv);  // op_check_kernel_table.cpp: --kernel-table
int lane_map_main();  // op_check_lane_map.cpp: --lane-map
template <typename T> void check_moe();  // op_check_moe.cpp: grouped GEMM, permute, experts
void check_fp8_cast();                           // op_check_fp8.cpp: every value class, both formats
template <typename T> void check_fp8_quantize();  // op_check_fp8.cpp: amax, casts, dequantise
template <typename T> void check_fp8_shard();     // op_check_fp8.cpp: a weight shard's casts
void check_fp8_scales();                         // op_check_fp8.cpp: current and delayed scales
template <typename TC> void check_gemm_fp8();     // op_check_fp8.cpp: cuBLASLt and emulated paths

}  // namespace op_check
