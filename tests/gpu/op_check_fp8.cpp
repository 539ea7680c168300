// tests/gpu/op_check_fp8.cpp: op_check's rows for FP8 (kernels/ops/fp8.h): the cast of every
// value class, the per-tensor and block casts (plain and transposed, fp32 and bf16 sources),
// what a cast saturates and flushes (fp8_cast_count), amax, dequantisation, the casts of a
// weight's ZeRO shard (--fp8-param-gather), the recipes' scale steps, and the FP8 GEMM on both of its CUDA paths (cuBLASLt, the emulated block-scaled one),
// each CUDA twin against its CPU twin on random data (see op_check.cpp for the metric and the
// bounds).
//
// Codes and factors must agree bit for bit (bound 0: mismatching elements): both twins cast
// with round-to-nearest-even from the same fp32 products, the CUDA one on sm_89+ with the
// hardware's cvt.rn.satfinite, the CPU one with kernels/fp8.h's integer rounding. The GEMM's
// outputs differ by summation order and, on cuBLASLt, by where the two factors are applied (to
// the fp32 sum rather than to each operand): the reduction bound.
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/ops/fp8.h"
#include "tests/gpu/op_check.h"  // defines: Twin, written, Precision, err, mismatches, check, ...

namespace op_check {

using kernels::Fp8Blocks;
using kernels::Fp8Format;
using kernels::Fp8Matrix;
using Codes = std::vector<uint8_t>;

namespace {

const char* name(Fp8Format f) { return f == Fp8Format::E4M3 ? " e4m3" : " e5m2"; }
const char* name(Fp8Blocks b) {
  return b == Fp8Blocks::Tensor ? " tensor" : (b == Fp8Blocks::Tiles ? " 1x128" : " 128x128");
}

// Values spread over many binades (|x| from 2^-12 to 2^4 times the range), signs mixed: a cast
// at a fixed scale meets subnormals, normals and saturation.
Floats spread(size_t n, float range) {
  Floats x = random_floats(n, -range, range);
  std::vector<int> e = random_ints(n, -12, 4);
  for (size_t i = 0; i < n; i++) x[i] = std::ldexp(x[i], e[i]);
  return x;
}

// Every FP8 value of both formats, the midpoints of adjacent ones and their float neighbours
// (the ties and either side of them), beyond-max values, infinities, NaN, signed zeros.
Floats cast_cases() {
  Floats x;
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (int c = 0; c < 256; c++) {
      const float v = kernels::fp8_decode((uint8_t)c, f);
      const float next = kernels::fp8_decode((uint8_t)(c + 1), f);
      x.push_back(v);
      if (std::isfinite(v) && std::isfinite(next) && (c & 0x7F) != 0x7F) {
        const float mid = (float)(((double)v + next) / 2);
        x.push_back(mid);
        x.push_back(std::nextafter(mid, INFINITY));
        x.push_back(std::nextafter(mid, -INFINITY));
      }
    }
  for (float v : {500.0f, 464.0f, 61440.0f, 1e30f, 1e-30f, 0.0f, -0.0f})
    for (float s : {1.0f, -1.0f}) x.push_back(s * v);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  return x;
}

// An "=" output of codes: the two sides start from different garbage bytes.
std::unique_ptr<Twin<uint8_t>> written_codes(size_t n) {
  const std::vector<int> cpu = random_ints(n, 0, 255), gpu = random_ints(n, 0, 255);
  return std::make_unique<Twin<uint8_t>>(Codes(cpu.begin(), cpu.end()),
                                         Codes(gpu.begin(), gpu.end()));
}

template <typename T> std::vector<T> as_storage(const Floats& x) {
  if constexpr (std::is_same<T, float>::value) return x;
  else return round_all(x);
}

// Mismatching elements of several outputs.
template <typename... Twins> double mismatches_of(const Twins&... t) {
  return (mismatches(t) + ...);
}

}  // namespace

void check_fp8_cast() {
  const Floats cases = cast_cases();
  const int n = (int)cases.size();
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    check(std::string("fp8_quantize (every value class)") + name(f), 0.0, [&] {
      Twin<float> x(cases), scale(Floats{1.0f});
      std::unique_ptr<Twin<uint8_t>> q(written_codes(n));
      std::unique_ptr<Twin<float>> scale_inv(written(1));
      kernels::fp8_quantize(Device::CPU, q->c(), scale_inv->c(), (float*)nullptr, x.c(), 1, n, f,
                            scale.c(), false);
      kernels::fp8_quantize(Device::CUDA, q->g(), scale_inv->g(), (float*)nullptr, x.g(), 1, n, f,
                            scale.g(), false);
      return mismatches_of(*q, *scale_inv);
    });
    // the counts start from different garbage: they are written, not accumulated
    check(std::string("fp8_cast_count (every value class)") + name(f), 0.0, [&] {
      Twin<float> x(cases), scale(Floats{1.0f});
      Twin<unsigned long long> counts({7, 9}, {11, 13});
      kernels::fp8_cast_count(Device::CPU, counts.c(), x.c(), (size_t)n, f, scale.c());
      kernels::fp8_cast_count(Device::CUDA, counts.g(), x.g(), (size_t)n, f, scale.g());
      return mismatches(counts) + (counts.cpu[0] == 0) + (counts.cpu[1] == 0);  // both occur
    });
  }
}

template <typename T>
void check_fp8_quantize() {
  const std::string tag = Precision<T>::tag;
  const int rows = 67, cols = 301;
  const size_t n = (size_t)rows * cols;
  Twin<T> x(as_storage<T>(spread(n, 3.0f)));
  check("fp8_amax" + tag, 0.0, [&] {
    std::unique_ptr<Twin<float>> amax(written(1));
    kernels::fp8_amax(Device::CPU, amax->c(), x.c(), n);
    kernels::fp8_amax(Device::CUDA, amax->g(), x.g(), n);
    return mismatches(*amax);
  });
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (bool transpose : {false, true}) {
      const std::string row = std::string(transpose ? "fp8_quantize transposed" : "fp8_quantize") +
                              name(f) + tag;
      check(row + " (codes, scale_inv, amax)", 0.0, [&] {
        // a scale that puts some values past the max (saturation) and some below the subnormals
        Twin<float> scale(Floats{0.37f * kernels::fp8_max(f)});
        std::unique_ptr<Twin<uint8_t>> q(written_codes(n));
        std::unique_ptr<Twin<float>> scale_inv(written(1));
        Twin<float> amax(Floats{0.5f});  // max-accumulates: a value below the tensor's amax
        kernels::fp8_quantize(Device::CPU, q->c(), scale_inv->c(), amax.c(), x.c(), rows, cols, f,
                              scale.c(), transpose);
        kernels::fp8_quantize(Device::CUDA, q->g(), scale_inv->g(), amax.g(), x.g(), rows, cols,
                              f, scale.g(), transpose);
        return mismatches_of(*q, *scale_inv, amax);
      });
      if (transpose) continue;
      check("fp8_cast_count" + std::string(name(f)) + tag + " (saturated, flushed)", 0.0, [&] {
        Twin<float> scale(Floats{0.37f * kernels::fp8_max(f)});
        Twin<unsigned long long> counts({1, 2}, {3, 4});
        kernels::fp8_cast_count(Device::CPU, counts.c(), x.c(), n, f, scale.c());
        kernels::fp8_cast_count(Device::CUDA, counts.g(), x.g(), n, f, scale.g());
        return mismatches(counts);
      });
    }
  for (Fp8Blocks b : {Fp8Blocks::Tiles, Fp8Blocks::Blocks})
    for (bool transpose : {false, true}) {
      const std::string row = std::string(transpose ? "fp8_quantize_blocks transposed"
                                                    : "fp8_quantize_blocks") +
                              name(b) + tag;
      const int out_rows = transpose ? cols : rows, out_cols = transpose ? rows : cols;
      const size_t factors = kernels::fp8_scale_count(b, out_rows, out_cols);
      check(row + " (codes, scale_inv)", 0.0, [&] {
        std::unique_ptr<Twin<uint8_t>> q(written_codes(n));
        std::unique_ptr<Twin<float>> scale_inv(written(factors));
        kernels::fp8_quantize_blocks(Device::CPU, q->c(), scale_inv->c(), x.c(), rows, cols,
                                     Fp8Format::E4M3, b, transpose);
        kernels::fp8_quantize_blocks(Device::CUDA, q->g(), scale_inv->g(), x.g(), rows, cols,
                                     Fp8Format::E4M3, b, transpose);
        return mismatches_of(*q, *scale_inv);
      });
    }
  // at given 128 x 128 block scales (a gathered weight's casts), the factors in q's grid
  for (bool transpose : {false, true}) {
    const std::string row = std::string(transpose ? "fp8_quantize transposed" : "fp8_quantize") +
                            name(Fp8Blocks::Blocks) + " at given scales" + tag;
    check(row + " (codes, scale_inv)", 0.0, [&] {
      const size_t blocks = kernels::fp8_scale_count(Fp8Blocks::Blocks, rows, cols);
      Twin<float> scale(random_floats(blocks, 0.1f * kernels::fp8_max(Fp8Format::E4M3),
                                      kernels::fp8_max(Fp8Format::E4M3)));
      std::unique_ptr<Twin<uint8_t>> q(written_codes(n));
      std::unique_ptr<Twin<float>> scale_inv(written(blocks));
      kernels::fp8_quantize(Device::CPU, q->c(), scale_inv->c(), nullptr, x.c(), rows, cols,
                            Fp8Format::E4M3, scale.c(), transpose, Fp8Blocks::Blocks);
      kernels::fp8_quantize(Device::CUDA, q->g(), scale_inv->g(), nullptr, x.g(), rows, cols,
                            Fp8Format::E4M3, scale.g(), transpose, Fp8Blocks::Blocks);
      return mismatches_of(*q, *scale_inv);
    });
  }
  for (Fp8Blocks b : {Fp8Blocks::Tensor, Fp8Blocks::Tiles, Fp8Blocks::Blocks}) {
    const std::vector<int> codes = random_ints(n, 0, 255);
    Codes q_init(n);
    for (size_t i = 0; i < n; i++) q_init[i] = (uint8_t)(codes[i] & 0x7F) == 0x7F ? 0x3C : codes[i];
    Twin<uint8_t> q(q_init);
    Twin<float> scale_inv(random_floats(kernels::fp8_scale_count(b, rows, cols), 0.01f, 2.0f));
    check(std::string("fp8_dequantize") + name(b) + tag, 0.0, [&] {
      std::unique_ptr<Twin<T>> out(written<T>(n));
      kernels::fp8_dequantize(Device::CPU, out->c(), Fp8Matrix{q.c(), scale_inv.c(), Fp8Format::E4M3, b},
                              rows, cols);
      kernels::fp8_dequantize(Device::CUDA, out->g(), Fp8Matrix{q.g(), scale_inv.g(), Fp8Format::E4M3, b},
                              rows, cols);
      return mismatches(*out);
    });
  }
}

// A ZeRO shard of a (260, 150) weight (2 x 3 blocks of 128 x 128, the last ones short): a run
// starting mid-row and mid-block, ending mid-block, as --fp8-param-gather's slices cut them.
template <typename T>
void check_fp8_shard() {
  const std::string tag = Precision<T>::tag;
  const int rows = 260, cols = 150;
  const int64_t first = 100 * cols + 77, n = 17000;  // rows 100 .. 213, partly: 2 block rows
  Twin<T> x(as_storage<T>(spread((size_t)n, 3.0f)));
  for (Fp8Blocks b : {Fp8Blocks::Tensor, Fp8Blocks::Blocks}) {
    const size_t blocks = kernels::fp8_scale_count(b, rows, cols);
    check(std::string("fp8_shard_amax") + name(b) + tag, 0.0, [&] {
      Twin<float> amax(random_floats(blocks, 0.0f, 2.0f));  // max-accumulates into these
      kernels::fp8_shard_amax(Device::CPU, amax.c(), x.c(), first, n, cols, b);
      kernels::fp8_shard_amax(Device::CUDA, amax.g(), x.g(), first, n, cols, b);
      return mismatches(amax);
    });
    check(std::string("fp8_shard_quantize") + name(b) + tag + " (codes, amax)", 0.0, [&] {
      Twin<float> scale(random_floats(blocks, 20.0f, 400.0f));
      std::unique_ptr<Twin<uint8_t>> q(written_codes((size_t)n));
      Twin<float> amax(Floats{0.5f});
      float* cpu_amax = b == Fp8Blocks::Tensor ? amax.c() : nullptr;  // delayed: Tensor only
      float* gpu_amax = b == Fp8Blocks::Tensor ? amax.g() : nullptr;
      kernels::fp8_shard_quantize(Device::CPU, q->c(), cpu_amax, x.c(), first, n, cols,
                                  Fp8Format::E4M3, b, scale.c());
      kernels::fp8_shard_quantize(Device::CUDA, q->g(), gpu_amax, x.g(), first, n, cols,
                                  Fp8Format::E4M3, b, scale.g());
      return mismatches_of(*q, amax);
    });
    check(std::string("fp8_shard_dequantize") + name(b) + tag, 0.0, [&] {
      const std::vector<int> codes = random_ints((size_t)n, 0, 255);
      Codes q_init((size_t)n);
      for (int64_t i = 0; i < n; i++)
        q_init[i] = (uint8_t)(codes[i] & 0x7F) == 0x7F ? 0x3C : codes[i];  // no NaN
      Twin<uint8_t> q(q_init);
      Twin<float> factors(random_floats(blocks, 0.01f, 2.0f));
      std::unique_ptr<Twin<T>> out(written<T>((size_t)n));
      kernels::fp8_shard_dequantize(Device::CPU, out->c(),
                                    Fp8Matrix{q.c(), factors.c(), Fp8Format::E4M3, b}, first, n,
                                    cols);
      kernels::fp8_shard_dequantize(Device::CUDA, out->g(),
                                    Fp8Matrix{q.g(), factors.g(), Fp8Format::E4M3, b}, first, n,
                                    cols);
      return mismatches(*out);
    });
  }
}

// The recipes' scale steps on the amaxes and histories they meet: zeros (nothing recorded),
// an infinity, a NaN, tiny amaxes whose scale overflows fp32, ordinary ones.
void check_fp8_scales() {
  const int n = 11, len = 5;
  Floats amax = random_floats(n, 0.01f, 900.0f);
  amax[2] = 0.0f;
  amax[4] = std::numeric_limits<float>::infinity();
  amax[5] = std::numeric_limits<float>::quiet_NaN();
  amax[7] = 1e-39f;
  check("fp8_current_scale", 0.0, [&] {
    Twin<float> a(amax);
    std::unique_ptr<Twin<float>> scale(written(n));
    kernels::fp8_current_scale(Device::CPU, scale->c(), a.c(), n, Fp8Format::E5M2);
    kernels::fp8_current_scale(Device::CUDA, scale->g(), a.g(), n, Fp8Format::E5M2);
    return mismatches(*scale);
  });
  check("fp8_scale_inverse", 0.0, [&] {
    Twin<float> scale(random_floats(n, 0.001f, 3e4f));
    std::unique_ptr<Twin<float>> inverse(written(n));
    kernels::fp8_scale_inverse(Device::CPU, inverse->c(), scale.c(), n);
    kernels::fp8_scale_inverse(Device::CUDA, inverse->g(), scale.g(), n);
    return mismatches(*inverse);
  });
  for (kernels::Fp8AmaxAlgo algo : {kernels::Fp8AmaxAlgo::Max, kernels::Fp8AmaxAlgo::MostRecent}) {
    Floats history = random_floats((size_t)len * n, 0.1f, 300.0f);
    for (int t = 0; t < n; t++) history[t] = amax[t];  // row 0: this pass's amaxes
    check(std::string("fp8_delayed_update (history, scale) ") +
              (algo == kernels::Fp8AmaxAlgo::Max ? "max" : "most_recent"),
          0.0, [&] {
            Twin<float> h(history), scale(random_floats(n, 0.5f, 4.0f));
            kernels::fp8_delayed_update(Device::CPU, h.c(), scale.c(), len, n, algo, 448.0f / 4);
            kernels::fp8_delayed_update(Device::CUDA, h.g(), scale.g(), len, n, algo, 448.0f / 4);
            return mismatches_of(h, scale);
          });
  }
}

// One FP8 GEMM case: A (m,k) and B (n,k) cast from random data in the given formats and blocks
// (on the CPU, copied to the device: the GEMM is what is compared), C = alpha A B^T + beta C.
template <typename TC>
void gemm_case(int m, int n, int k, Fp8Format fa, Fp8Blocks ba, Fp8Format fb, Fp8Blocks bb,
               float beta) {
  using P = Precision<TC>;
  auto operand = [](int rows, int cols, Fp8Format f, Fp8Blocks b, Codes& q, Floats& s) {
    const Floats x = spread((size_t)rows * cols, 2.0f);
    q.assign((size_t)rows * cols, 0);
    s.assign(kernels::fp8_scale_count(b, rows, cols), 0.0f);
    if (b == Fp8Blocks::Tensor) {
      float amax = 0.0f, scale = 0.0f;
      kernels::fp8_amax<Device::CPU, float>(&amax, x.data(), x.size());
      kernels::fp8_current_scale<Device::CPU>(&scale, &amax, 1, f);
      kernels::fp8_quantize(Device::CPU, q.data(), s.data(), nullptr, x.data(), rows, cols,
                                                f, &scale, false);
    } else {
      kernels::fp8_quantize_blocks<Device::CPU, float>(q.data(), s.data(), x.data(), rows, cols,
                                                       f, b, false);
    }
  };
  Codes qa, qb;
  Floats sa, sb;
  operand(m, k, fa, ba, qa, sa);
  operand(n, k, fb, bb, qb, sb);
  Twin<uint8_t> A(qa), B(qb);
  Twin<float> SA(sa), SB(sb);
  const int ldc = n + 3;
  Twin<TC> C(random_values<TC>((size_t)m * ldc));
  const std::string row = "gemm_fp8 " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                          std::to_string(k) + name(fa) + name(ba) + " x" + name(fb) + name(bb) +
                          (beta != 0.0f ? " +=" : "") + P::tag + " [" +
                          kernels::gemm_fp8_path(ba, bb, m, n, k).substr(0, 8) + "]";
  check(row, P::reduction, [&] {
    kernels::gemm_fp8(Device::CPU, m, n, k, 0.75f, Fp8Matrix{A.c(), SA.c(), fa, ba},
                      Fp8Matrix{B.c(), SB.c(), fb, bb}, beta, C.c(), ldc);
    kernels::gemm_fp8(Device::CUDA, m, n, k, 0.75f, Fp8Matrix{A.g(), SA.g(), fa, ba},
                      Fp8Matrix{B.g(), SB.g(), fb, bb}, beta, C.g(), ldc);
    return err(C);
  });
}

template <typename TC>
void check_gemm_fp8() {
  const Fp8Format e4 = Fp8Format::E4M3, e5 = Fp8Format::E5M2;
  const Fp8Blocks tensor = Fp8Blocks::Tensor, tiles = Fp8Blocks::Tiles, blocks = Fp8Blocks::Blocks;
  gemm_case<TC>(64, 48, 96, e4, tensor, e4, tensor, 0.0f);   // fprop: cuBLASLt
  gemm_case<TC>(64, 48, 96, e5, tensor, e4, tensor, 1.0f);   // hybrid dgrad, accumulating
  gemm_case<TC>(37, 45, 70, e4, tensor, e5, tensor, 0.0f);   // not multiples of 16: emulated
  gemm_case<TC>(67, 150, 260, e4, tiles, e4, blocks, 0.0f);  // DeepSeek-V3 fprop/dgrad
  gemm_case<TC>(67, 150, 260, e4, tiles, e4, tiles, 1.0f);   // its wgrad, accumulating
}

template void check_fp8_quantize<float>();
template void check_fp8_quantize<bf16>();
template void check_fp8_shard<float>();
template void check_fp8_shard<bf16>();
template void check_gemm_fp8<float>();
template void check_gemm_fp8<bf16>();

}  // namespace op_check
