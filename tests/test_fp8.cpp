// tests/test_fp8.cpp: the FP8 formats of kernels/fp8.h, exhaustively, and the CPU twins of
// kernels/ops/fp8.h.
//
// The formats are held to three sources that do not share paralab's code:
//  - the formats' definition (arXiv:2209.05433 Table 1): the special codes and their values;
//  - tests/data/fp8_reference.txt, written by scripts/fp8_reference.py with PyTorch's
//    float8_e4m3fn / float8_e5m2 (or ml_dtypes'): every code's value, and the codes of every FP8
//    value, every midpoint between neighbours and the floats either side, overflow, underflow,
//    inf, NaN and a sweep of float32 bit patterns (tests/scripts/fp8_reference.sh checks the
//    file against a fresh run where torch is installed);
//  - in the CUDA build, CUDA's own host implementation of __nv_cvt_float_to_fp8 with
//    __NV_SATFINITE (cuda_fp8.hpp), on every 4099th float32 bit pattern (about a million).
// And to the properties themselves, over all 256 codes of each format: every finite value
// round-trips, every tie between two neighbours goes to the even code, everything past the
// largest normal saturates, NaN stays NaN.
//
// The kernels: a cast records the right amax and factor, a transposed cast is the cast's
// transpose, the block casts follow their blocks (computed here from the definition), and the
// FP8 GEMM equals the dequantise-then-fp32 product exactly, and a float64 product of the
// decoded values to fp32 summation's error.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/fp8.h"
#include "kernels/ops/fp8.h"
#include "kernels/ops/memory_gemm.h"

#if !defined(PARALAB_CPU_ONLY) && __has_include(<cuda_fp8.h>)
#include <cuda_fp8.h>
#define PARALAB_HAVE_CUDA_FP8 1
#endif

namespace {

using kernels::bits_to_float;
using kernels::float_to_bits;
using kernels::Device;
using kernels::fp8_decode;
using kernels::fp8_encode;
using kernels::Fp8Blocks;
using kernels::Fp8Format;
using kernels::Fp8Matrix;

const Fp8Format kFormats[] = {Fp8Format::E4M3, Fp8Format::E5M2};

bool is_nan_code(uint8_t c, Fp8Format f) { return std::isnan(fp8_decode(c, f)); }

TEST(Fp8, SpecialCodesAsTheFormatsDefineThem) {
  const Fp8Format e4 = Fp8Format::E4M3, e5 = Fp8Format::E5M2;
  EXPECT_EQ(fp8_decode(0x7E, e4), 448.0f);                          // S.1111.110
  EXPECT_EQ(fp8_decode(0x08, e4), std::ldexp(1.0f, -6));            // min normal
  EXPECT_EQ(fp8_decode(0x07, e4), 0.875f * std::ldexp(1.0f, -6));   // max subnormal
  EXPECT_EQ(fp8_decode(0x01, e4), std::ldexp(1.0f, -9));            // min subnormal
  EXPECT_TRUE(std::isnan(fp8_decode(0x7F, e4)) && std::isnan(fp8_decode(0xFF, e4)));
  EXPECT_EQ(fp8_decode(0x7B, e5), 57344.0f);                        // S.11110.11
  EXPECT_EQ(fp8_decode(0x7C, e5), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp8_decode(0xFC, e5), -std::numeric_limits<float>::infinity());
  for (uint8_t c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(is_nan_code(c, e5));
  EXPECT_EQ(fp8_decode(0x04, e5), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_decode(0x03, e5), 0.75f * std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_decode(0x01, e5), std::ldexp(1.0f, -16));
  EXPECT_EQ(float_to_bits(fp8_decode(0x80, e4)), 0x80000000u);  // -0
  // E4M3 has exactly two NaN codes and no infinity; E5M2 six NaNs and two infinities.
  int nan4 = 0, nan5 = 0, inf4 = 0, inf5 = 0;
  for (int c = 0; c < 256; c++) {
    nan4 += is_nan_code(c, e4), nan5 += is_nan_code(c, e5);
    inf4 += std::isinf(fp8_decode(c, e4)), inf5 += std::isinf(fp8_decode(c, e5));
  }
  EXPECT_EQ(nan4, 2);
  EXPECT_EQ(nan5, 6);
  EXPECT_EQ(inf4, 0);
  EXPECT_EQ(inf5, 2);
  EXPECT_EQ(kernels::fp8_max(e4), 448.0f);
  EXPECT_EQ(kernels::fp8_max(e5), 57344.0f);
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (Fp8Format f : kFormats)
    for (int c = 0; c < 256; c++) {
      const float v = fp8_decode(c, f);
      if (std::isfinite(v)) {
        EXPECT_EQ(fp8_encode(v, f), c) << "code " << c;
      }
    }
}

// Between every two neighbouring finite values (of either sign) the midpoint goes to the code
// whose mantissa is even (the code's lowest bit is the mantissa's), and the floats just either
// side of it go to their side.
TEST(Fp8, EveryTieRoundsToEven) {
  for (Fp8Format f : kFormats) {
    int ties = 0;
    for (int c = 0; c < 255; c++) {
      if (c == 0x7F) continue;  // +NaN / -0 are no neighbours
      const float a = fp8_decode(c, f), b = fp8_decode(c + 1, f);
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
      const float mid = (float)(((double)a + b) / 2);
      ASSERT_EQ((double)mid, ((double)a + b) / 2) << "midpoints of FP8 values are floats";
      const int even = (c % 2 == 0) ? c : c + 1;
      EXPECT_EQ(fp8_encode(mid, f), even) << "tie between codes " << c << " and " << c + 1;
      const float toward_b = std::nextafter(mid, b), toward_a = std::nextafter(mid, a);
      EXPECT_EQ(fp8_encode(toward_b, f), c + 1) << "code " << c;
      EXPECT_EQ(fp8_encode(toward_a, f), c) << "code " << c;
      ties++;
    }
    EXPECT_EQ(ties, f == Fp8Format::E4M3 ? 2 * 126 : 2 * 123);
  }
}

TEST(Fp8, SaturatesNaNStaysNaNUnderflowIsSignedZero) {
  const float inf = std::numeric_limits<float>::infinity();
  for (Fp8Format f : kFormats) {
    const uint8_t max = f == Fp8Format::E4M3 ? 0x7E : 0x7B;
    const float m = kernels::fp8_max(f);
    for (float v : {m, m * 1.0001f, m * 1.2f, m * 4.0f, 3e38f, inf}) {
      EXPECT_EQ(fp8_encode(v, f), max) << v;
      EXPECT_EQ(fp8_encode(-v, f), max | 0x80) << -v;
    }
    EXPECT_EQ(fp8_encode(std::numeric_limits<float>::quiet_NaN(), f), 0x7F);
    EXPECT_TRUE(is_nan_code(fp8_encode(-std::numeric_limits<float>::quiet_NaN(), f), f));
    // half the smallest subnormal is a tie between 0 (even) and the subnormal: 0
    const float min_sub = fp8_decode(0x01, f);
    EXPECT_EQ(fp8_encode(min_sub / 2, f), 0x00);
    EXPECT_EQ(fp8_encode(-min_sub / 2, f), 0x80);
    EXPECT_EQ(fp8_encode(std::nextafter(min_sub / 2, 1.0f), f), 0x01);
    EXPECT_EQ(fp8_encode(1e-30f, f), 0x00);
    EXPECT_EQ(fp8_encode(-0.0f, f), 0x80);
  }
}

// Encoding is monotonic over the finite floats: a larger float never gets a smaller value.
TEST(Fp8, EncodingIsMonotonic) {
  for (Fp8Format f : kFormats) {
    float previous = 0.0f;
    for (uint32_t u = 0; u < 0x7F800000u; u += 4093) {
      const float v = fp8_decode(fp8_encode(bits_to_float(u), f), f);
      EXPECT_GE(v, previous) << "float bits " << std::hex << u;
      previous = v;
    }
  }
}

// tests/data/fp8_reference.txt (scripts/fp8_reference.py: PyTorch or ml_dtypes).
TEST(Fp8, MatchesTheReferenceLibrary) {
  std::ifstream in("tests/data/fp8_reference.txt");
  ASSERT_TRUE(in) << "tests/data/fp8_reference.txt (run from the repository root)";
  std::string line, kind;
  int decodes = 0, encodes = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream row(line);
    row >> kind;
    if (kind == "decode") {
      unsigned code, e4, e5;
      row >> std::hex >> code >> e4 >> e5;
      const uint32_t want[2] = {e4, e5};
      for (int i = 0; i < 2; i++) {
        const float got = fp8_decode(code, kFormats[i]);
        if (std::isnan(bits_to_float(want[i]))) {
          EXPECT_TRUE(std::isnan(got)) << line;
        } else {
          EXPECT_EQ(float_to_bits(got), want[i]) << line << " format " << i;
        }
      }
      decodes++;
    } else if (kind == "encode") {
      unsigned bits, e4, e5;
      row >> std::hex >> bits >> e4 >> e5;
      const unsigned want[2] = {e4, e5};
      for (int i = 0; i < 2; i++) {
        const uint8_t got = fp8_encode(bits_to_float(bits), kFormats[i]);
        if (is_nan_code(want[i], kFormats[i])) {
          EXPECT_TRUE(is_nan_code(got, kFormats[i])) << line;
        } else {
          EXPECT_EQ(got, want[i]) << line << " format " << i;
        }
      }
      encodes++;
    }
  }
  EXPECT_EQ(decodes, 256);
  EXPECT_GT(encodes, 3800);
}

#ifdef PARALAB_HAVE_CUDA_FP8
// CUDA's host implementation of the saturating conversion (cuda_fp8.hpp), on about a million
// float bit patterns, NaNs included.
TEST(Fp8, MatchesCudaSatfiniteOnTheHost) {
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) {
    const float x = bits_to_float((uint32_t)u);
    ASSERT_EQ(fp8_encode(x, Fp8Format::E4M3), __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3))
        << std::hex << u;
    ASSERT_EQ(fp8_encode(x, Fp8Format::E5M2), __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2))
        << std::hex << u;
  }
}
#endif

// ---- scales -------------------------------------------------------------------------------
TEST(Fp8Scale, CurrentScalingFromAmax) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(kernels::fp8_scale_from_amax(2.0f, 448.0f), 224.0f);
  EXPECT_EQ(kernels::fp8_scale_from_amax(0.0f, 448.0f), 1.0f);
  EXPECT_EQ(kernels::fp8_scale_from_amax(inf, 448.0f), 1.0f);
  EXPECT_EQ(kernels::fp8_scale_from_amax(std::nanf(""), 448.0f), 1.0f);
  EXPECT_EQ(kernels::fp8_scale_from_amax(1e-39f, 448.0f), FLT_MAX);  // 448 / 1e-39 overflows
}

TEST(Fp8Scale, DelayedScaleKeepsThePreviousOnBadAmax) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(kernels::fp8_delayed_scale(4.0f, 448.0f / 2, 7.0f), 56.0f);  // margin 1
  EXPECT_EQ(kernels::fp8_delayed_scale(0.0f, 448.0f, 7.0f), 7.0f);
  EXPECT_EQ(kernels::fp8_delayed_scale(inf, 448.0f, 7.0f), 7.0f);
  EXPECT_EQ(kernels::fp8_delayed_scale(std::nanf(""), 448.0f, 7.0f), 7.0f);
  EXPECT_EQ(kernels::fp8_delayed_scale(1e-39f, 448.0f, 7.0f), FLT_MAX);
}

// A history of 3 through an amax spike, step by step as Transformer Engine's kernel_bulk
// (delayed_scaling.cu) does it: the window max is taken over rows 1..2 and this pass's amax
// before the roll, so the spike (8) sets the scale for 3 passes (the history's length) and only
// then drops out; a pass that records nothing (0) rolls nothing and keeps the scale.
TEST(Fp8Scale, DelayedHistoryRollsAsTransformerEngine) {
  struct Pass {
    float amax;
    float history_after[3];
    float scale_max, scale_most_recent;
  };
  const Pass passes[] = {
      {2.0f, {0, 0, 2}, 224.0f, 224.0f},
      {8.0f, {0, 2, 8}, 56.0f, 56.0f},
      {1.0f, {0, 8, 1}, 56.0f, 448.0f},
      {0.0f, {0, 8, 1}, 56.0f, 448.0f},  // nothing recorded: no roll, scales kept
      {1.0f, {0, 1, 1}, 56.0f, 448.0f},  // the spike leaves the window in this roll
      {1.0f, {0, 1, 1}, 448.0f, 448.0f},
  };
  for (kernels::Fp8AmaxAlgo algo : {kernels::Fp8AmaxAlgo::Max, kernels::Fp8AmaxAlgo::MostRecent}) {
    float history[3] = {0, 0, 0}, scale = 1.0f;
    int step = 0;
    for (const Pass& p : passes) {
      history[0] = p.amax;
      kernels::fp8_history_update(history, 3, 1, algo, 448.0f, &scale);
      for (int i = 0; i < 3; i++) EXPECT_EQ(history[i], p.history_after[i]) << "pass " << step;
      EXPECT_EQ(scale, algo == kernels::Fp8AmaxAlgo::Max ? p.scale_max : p.scale_most_recent)
          << "pass " << step;
      step++;
    }
  }
}

// The (len, n) layout: each tensor's column updates on its own (the CPU twin of the op).
TEST(Fp8Scale, DelayedUpdateOpWorksColumnByColumn) {
  const int len = 4, n = 3;
  std::vector<float> history = {5, 0, 9, 1, 1, 1, 2, 2, 2, 3, 3, 3}, scale = {1, 1, 1};
  kernels::fp8_delayed_update<Device::CPU>(history.data(), scale.data(), len, n,
                                           kernels::Fp8AmaxAlgo::Max, 448.0f);
  // tensor 0: window max(1, 2, 3, 5) = 5, rolled to (0, 2, 3, 5); tensor 1 recorded nothing
  const std::vector<float> want = {0, 0, 0, 2, 1, 2, 3, 2, 3, 5, 3, 9};
  EXPECT_EQ(history, want);
  EXPECT_EQ(scale[0], 448.0f / 5);
  EXPECT_EQ(scale[1], 1.0f);
  EXPECT_EQ(scale[2], 448.0f / 9);
}

// ---- casts --------------------------------------------------------------------------------
std::vector<float> random_matrix(int rows, int cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_int_distribution<int> e(-10, 3);
  std::vector<float> x((size_t)rows * cols);
  for (float& v : x) v = std::ldexp(u(rng), e(rng));
  return x;
}

TEST(Fp8Cast, TensorCastRecordsAmaxAndFactorAndTransposes) {
  const int rows = 13, cols = 37;
  const std::vector<float> x = random_matrix(rows, cols, 1);
  float amax = 0.0f;
  kernels::fp8_amax<Device::CPU, float>(&amax, x.data(), x.size());
  float want_amax = 0.0f;
  for (float v : x) want_amax = std::max(want_amax, std::fabs(v));
  EXPECT_EQ(amax, want_amax);
  const float scale = 448.0f / amax * 0.5f;
  std::vector<uint8_t> q(x.size()), qt(x.size());
  float scale_inv = 0.0f, scale_inv_t = 0.0f, recorded = 1.0f, recorded_t = 1e9f;
  kernels::fp8_quantize(Device::CPU, q.data(), &scale_inv, &recorded, x.data(), rows, cols,
                                            Fp8Format::E4M3, &scale, false);
  kernels::fp8_quantize(Device::CPU, qt.data(), &scale_inv_t, &recorded_t, x.data(), rows,
                                            cols, Fp8Format::E4M3, &scale, true);
  EXPECT_EQ(scale_inv, 1.0f / scale);
  EXPECT_EQ(recorded, std::max(1.0f, amax));  // max-accumulated into what was there
  EXPECT_EQ(recorded_t, 1e9f);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      EXPECT_EQ(q[r * cols + c], fp8_encode(x[r * cols + c] * scale, Fp8Format::E4M3));
      EXPECT_EQ(qt[c * rows + r], q[r * cols + c]);
    }
}

// Saturation is where round-to-nearest-even would go past the max: E4M3's next value would be
// 480 (S.1111.111, its NaN), so |x| > 464 saturates and the tie 464 goes to the even 448; E5M2's
// is 2^16 (its infinity, mantissa 00: even), so the tie 61440 saturates.
TEST(Fp8Cast, SaturatesWhereRoundingPassesTheMax) {
  const float inf = std::numeric_limits<float>::infinity();
  const float first[] = {std::nextafter(464.0f, inf), 61440.0f};  // the smallest that saturate
  for (Fp8Format f : kFormats) {
    const float t = first[f == Fp8Format::E5M2];
    for (float sign : {1.0f, -1.0f}) {
      EXPECT_TRUE(kernels::fp8_saturates(sign * t, f)) << t;
      EXPECT_FALSE(kernels::fp8_saturates(sign * std::nextafter(t, 0.0f), f)) << t;
      EXPECT_FALSE(kernels::fp8_saturates(sign * kernels::fp8_max(f), f));
      EXPECT_FALSE(kernels::fp8_saturates(sign * std::nextafter(kernels::fp8_max(f), inf), f));
      EXPECT_TRUE(kernels::fp8_saturates(sign * inf, f));
      EXPECT_FALSE(kernels::fp8_saturates(sign * 1e-30f, f));
    }
    EXPECT_FALSE(kernels::fp8_saturates(std::numeric_limits<float>::quiet_NaN(), f));
    // every float between 1 and 2^17 (a stride of 997 bit patterns): saturated iff at or past t
    for (uint32_t b = float_to_bits(1.0f); b < float_to_bits(131072.0f); b += 997)
      EXPECT_EQ(kernels::fp8_saturates(bits_to_float(b), f), bits_to_float(b) >= t);
  }
}

// fp8_cast_count: the saturated and the flushed (nonzero, cast to a zero) of a tensor at a scale.
TEST(Fp8Cast, CountsWhatTheCastSaturatesAndFlushes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  //                              sat    sat     kept  kept  flushed flushed zero  NaN
  const std::vector<float> x = {300.0f, -250.0f, 1.0f, 0.0f, 1e-5f, -2e-6f, -0.0f, nan};
  const float scale = 2.0f;  // 300 -> 600 and -250 -> -500 pass 464; 1e-5 -> 2e-5 < 2^-10
  unsigned long long counts[2] = {99, 99};
  kernels::fp8_cast_count<Device::CPU, float>(counts, x.data(), x.size(), Fp8Format::E4M3, &scale);
  EXPECT_EQ(counts[0], 2u);
  EXPECT_EQ(counts[1], 2u);
  for (size_t i = 0; i < x.size(); i++) {  // the flushed are those the cast made zero
    const uint8_t code = fp8_encode(x[i] * scale, Fp8Format::E4M3);
    EXPECT_EQ(i == 4 || i == 5, x[i] != 0.0f && !std::isnan(x[i]) && (code & 0x7F) == 0) << i;
  }
  kernels::fp8_cast_count<Device::CPU, float>(counts, x.data(), x.size(), Fp8Format::E5M2, &scale);
  EXPECT_EQ(counts[0], 0u);  // E5M2 keeps 600 (max 57344) and 2e-5 (above 2^-17, half its
  EXPECT_EQ(counts[1], 1u);  // smallest subnormal); -4e-6 flushes
}

// Each block of the output, from the definition: its amax, scale = max / amax, codes, 1 / scale.
void expect_blocks(const std::vector<float>& x, int rows, int cols, Fp8Blocks b, bool transpose) {
  const int out_rows = transpose ? cols : rows, out_cols = transpose ? rows : cols;
  auto at = [&](int r, int c) { return transpose ? x[(size_t)c * cols + r] : x[(size_t)r * cols + c]; };
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(kernels::fp8_scale_count(b, out_rows, out_cols));
  kernels::fp8_quantize_blocks<Device::CPU, float>(q.data(), s.data(), x.data(), rows, cols,
                                                   Fp8Format::E4M3, b, transpose);
  const int down = b == Fp8Blocks::Tiles ? 1 : 128;
  size_t block = 0;
  for (int r0 = 0; r0 < out_rows; r0 += down)
    for (int c0 = 0; c0 < out_cols; c0 += 128, block++) {
      float amax = 0.0f;
      for (int r = r0; r < std::min(r0 + down, out_rows); r++)
        for (int c = c0; c < std::min(c0 + 128, out_cols); c++) amax = std::max(amax, std::fabs(at(r, c)));
      const float scale = amax > 0 ? 448.0f / amax : 1.0f;
      ASSERT_EQ(s[block], 1.0f / scale) << "block " << block;
      for (int r = r0; r < std::min(r0 + down, out_rows); r++)
        for (int c = c0; c < std::min(c0 + 128, out_cols); c++)
          ASSERT_EQ(q[(size_t)r * out_cols + c], fp8_encode(at(r, c) * scale, Fp8Format::E4M3));
    }
  EXPECT_EQ(block, s.size());
}

TEST(Fp8Cast, BlockCastsFollowTheirBlocks) {
  const int rows = 150, cols = 300;  // neither a multiple of 128: short last blocks
  std::vector<float> x = random_matrix(rows, cols, 2);
  for (int c = 0; c < 128; c++) x[c] = 0.0f;  // an all-zero tile: scale 1, codes 0
  for (Fp8Blocks b : {Fp8Blocks::Tiles, Fp8Blocks::Blocks})
    for (bool transpose : {false, true}) expect_blocks(x, rows, cols, b, transpose);
  EXPECT_EQ(kernels::fp8_scale_count(Fp8Blocks::Tiles, rows, cols), (size_t)150 * 3);
  EXPECT_EQ(kernels::fp8_scale_count(Fp8Blocks::Blocks, rows, cols), (size_t)2 * 3);
}

// A 128 x 128 block of x^T is x's block transposed: same factors (transposed), same codes.
TEST(Fp8Cast, WeightBlocksTransposeExactly) {
  const int rows = 200, cols = 260;
  const std::vector<float> x = random_matrix(rows, cols, 3);
  std::vector<uint8_t> q(x.size()), qt(x.size());
  std::vector<float> s(kernels::fp8_scale_count(Fp8Blocks::Blocks, rows, cols)), st(s.size());
  kernels::fp8_quantize_blocks<Device::CPU, float>(q.data(), s.data(), x.data(), rows, cols,
                                                   Fp8Format::E4M3, Fp8Blocks::Blocks, false);
  kernels::fp8_quantize_blocks<Device::CPU, float>(qt.data(), st.data(), x.data(), rows, cols,
                                                   Fp8Format::E4M3, Fp8Blocks::Blocks, true);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) ASSERT_EQ(qt[(size_t)c * rows + r], q[(size_t)r * cols + c]);
  const int br = 2, bc = 3;
  for (int i = 0; i < br; i++)
    for (int j = 0; j < bc; j++) EXPECT_EQ(st[j * br + i], s[i * bc + j]);
}

// ---- the GEMM -----------------------------------------------------------------------------
struct Quantised {
  std::vector<uint8_t> q;
  std::vector<float> s;
  Fp8Matrix view(Fp8Format f, Fp8Blocks b) const { return Fp8Matrix{q.data(), s.data(), f, b}; }
};
Quantised quantise(const std::vector<float>& x, int rows, int cols, Fp8Format f, Fp8Blocks b) {
  Quantised out{std::vector<uint8_t>(x.size()),
                std::vector<float>(kernels::fp8_scale_count(b, rows, cols))};
  if (b == Fp8Blocks::Tensor) {
    float amax = 0.0f, scale = 0.0f;
    kernels::fp8_amax<Device::CPU, float>(&amax, x.data(), x.size());
    kernels::fp8_current_scale<Device::CPU>(&scale, &amax, 1, f);
    kernels::fp8_quantize(Device::CPU, out.q.data(), out.s.data(), nullptr, x.data(), rows,
                                              cols, f, &scale, false);
  } else {
    kernels::fp8_quantize_blocks<Device::CPU, float>(out.q.data(), out.s.data(), x.data(), rows,
                                                     cols, f, b, false);
  }
  return out;
}

// An FP8 GEMM is the product of its dequantised operands: exactly the fp32 GEMM of
// fp8_dequantize's matrices, and a float64 product of decode(q) * factor to the fp32
// summation error (k ulps of the largest partial sum, bounded here by k 2^-24 sum|a||b|).
TEST(Fp8Gemm, EqualsTheDequantisedFp32ProductExactly) {
  const int m = 37, n = 45, k = 300;
  struct Case {
    Fp8Format fa, fb;
    Fp8Blocks ba, bb;
  };
  const Case cases[] = {{Fp8Format::E4M3, Fp8Format::E4M3, Fp8Blocks::Tensor, Fp8Blocks::Tensor},
                        {Fp8Format::E5M2, Fp8Format::E4M3, Fp8Blocks::Tensor, Fp8Blocks::Tensor},
                        {Fp8Format::E4M3, Fp8Format::E4M3, Fp8Blocks::Tiles, Fp8Blocks::Blocks},
                        {Fp8Format::E4M3, Fp8Format::E4M3, Fp8Blocks::Tiles, Fp8Blocks::Tiles}};
  for (const Case& cs : cases) {
    const Quantised A = quantise(random_matrix(m, k, 4), m, k, cs.fa, cs.ba);
    const Quantised B = quantise(random_matrix(n, k, 5), n, k, cs.fb, cs.bb);
    std::vector<float> a((size_t)m * k), b((size_t)n * k);
    kernels::fp8_dequantize<Device::CPU, float>(a.data(), A.view(cs.fa, cs.ba), m, k);
    kernels::fp8_dequantize<Device::CPU, float>(b.data(), B.view(cs.fb, cs.bb), n, k);
    std::vector<float> want((size_t)m * n, 0.25f), got = want;
    kernels::gemm<Device::CPU, float, float>(false, true, m, n, k, 1.5f, a.data(), k, b.data(), k,
                                             0.5f, want.data(), n);
    kernels::gemm_fp8<Device::CPU, float>(m, n, k, 1.5f, A.view(cs.fa, cs.ba),
                                          B.view(cs.fb, cs.bb), 0.5f, got.data(), n);
    EXPECT_EQ(got, want);
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        double sum = 0.0, mag = 0.0;
        for (int p = 0; p < k; p++) {
          const size_t ia = (size_t)i * k + p, ib = (size_t)j * k + p;
          const double da = (double)fp8_decode(A.q[ia], cs.fa) *
                            A.s[kernels::fp8_block_of(cs.ba, i, p, k)];
          const double db = (double)fp8_decode(B.q[ib], cs.fb) *
                            B.s[kernels::fp8_block_of(cs.bb, j, p, k)];
          sum += da * db;
          mag += std::fabs(da * db);
        }
        const double exact = 1.5 * sum + 0.5 * 0.25;
        ASSERT_NEAR(got[(size_t)i * n + j], exact, 1.5 * (k + 2) * std::ldexp(mag, -24) + 1e-7);
      }
  }
}

TEST(Fp8Gemm, RefusesE5M2TimesE5M2AndNamesThePath) {
  std::vector<uint8_t> q(16 * 16, 0x38);
  float s = 1.0f, c[256] = {};
  const Fp8Matrix e5{q.data(), &s, Fp8Format::E5M2, Fp8Blocks::Tensor};
  auto e5_times_e5 = [&] {
    kernels::gemm_fp8<Device::CPU, float>(16, 16, 16, 1.0f, e5, e5, 0.0f, c, 16);
  };
  EXPECT_THROW(e5_times_e5(), std::invalid_argument);
  EXPECT_NE(kernels::gemm_fp8_path(Fp8Blocks::Tensor, Fp8Blocks::Tensor, 64, 64, 64).find("cuBLASLt"),
            std::string::npos);
  EXPECT_NE(kernels::gemm_fp8_path(Fp8Blocks::Tiles, Fp8Blocks::Blocks, 64, 64, 64).find("emulated"),
            std::string::npos);
  EXPECT_NE(kernels::gemm_fp8_path(Fp8Blocks::Tensor, Fp8Blocks::Tensor, 64, 63, 64).find("emulated"),
            std::string::npos);
}

}  // namespace
