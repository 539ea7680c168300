// tests/test_fp16.cpp: the fp16 encoding (kernels/float16.h) against two references that share
// none of its code: IEEE-754 binary16 by its definition (a value is (-1)^s 2^(e-15) 1.m, or
// 2^-14 0.m for e = 0, computed with ldexp in double; rounding picks the nearest such value,
// ties to the even code), and the CPU's own converter, the F16C instructions (vcvtph2ps,
// vcvtps2ph with round-to-nearest-even), where the CPU has them.
// Every one of the 65,536 codes decodes to its value and encodes back to itself; every
// midpoint between two neighbours (a tie) goes to the even code, a float either side of it to
// the nearer; overflow, underflow to subnormals and to zero, signed zeros, infinities, NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/float16.h"

namespace {

using kernels::bits_to_float;
using kernels::float_to_bits;
using kernels::fp16;
using kernels::to_float;
using kernels::to_fp16;


// binary16 by its definition: the value of code c (NaN for an all-ones exponent with a
// mantissa, infinity without).
double definition_value(uint16_t c) {
  const int s = c >> 15, e = (c >> 10) & 31, m = c & 1023;
  double v;
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : HUGE_VAL;
  else if (e == 0) v = std::ldexp((double)m, -24);      // 0.m x 2^-14
  else v = std::ldexp(1024.0 + m, e - 25);               // 1.m x 2^(e-15)
  return s ? -v : v;
}

// The codes 0x0000 .. 0x7BFF (every finite non-negative value, increasing) and their values.
struct Table {
  std::vector<double> value;
  Table() {
    for (uint32_t c = 0; c <= 0x7BFF; ++c) value.push_back(definition_value((uint16_t)c));
  }
};
const Table& table() {
  static Table t;
  return t;
}

// Round x (finite) to binary16 by the definition: the nearest finite value, ties to the even
// code; past the largest value, infinity when x is at least max + half an ulp (2^4 = 16: the
// largest value's ulp is 32), where the even neighbour is infinity's code.
uint16_t definition_round(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs((double)x);
  const std::vector<double>& v = table().value;
  if (a >= 65504.0 + 16.0) return sign | 0x7C00;
  const size_t hi = std::lower_bound(v.begin(), v.end(), a) - v.begin();  // v[hi] >= a
  if (hi == v.size()) return sign | 0x7BFF;  // between 65504 and 65520: down to the largest
  if (hi == 0 || v[hi] == a) return sign | (uint16_t)hi;
  const size_t lo = hi - 1;
  const double below = a - v[lo], above = v[hi] - a;  // exact in double
  if (below < above) return sign | (uint16_t)lo;
  if (above < below) return sign | (uint16_t)hi;
  return sign | (uint16_t)((lo % 2 == 0) ? lo : hi);
}

#if defined(__x86_64__)
bool have_f16c() { return __builtin_cpu_supports("f16c"); }
__attribute__((target("f16c"))) uint16_t f16c_encode(float x) {
  return (uint16_t)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) float f16c_decode(uint16_t c) { return _cvtsh_ss(c); }
#else
bool have_f16c() { return false; }
uint16_t f16c_encode(float) { return 0; }
float f16c_decode(uint16_t) { return 0; }
#endif

bool is_nan_code(uint16_t c) { return (c & 0x7C00) == 0x7C00 && (c & 0x3FF); }

TEST(Fp16, EveryCodeDecodesToItsValueAndEncodesBack) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const fp16 h{(uint16_t)c};
    const float f = to_float(h);
    const double want = definition_value((uint16_t)c);
    if (is_nan_code((uint16_t)c)) {
      // a NaN widens to a NaN with the sign and the payload shifted up; it narrows back to the
      // same code with the quiet bit set (a signalling NaN comes back quiet, as F16C does)
      ASSERT_TRUE(std::isnan(f)) << c;
      ASSERT_EQ(float_to_bits(f), ((c & 0x8000u) << 16) | 0x7F800000u | ((c & 0x3FFu) << 13)) << c;
      ASSERT_EQ(to_fp16(f).bits, c | 0x200u) << c;
      continue;
    }
    ASSERT_EQ((double)f, want) << c;
    ASSERT_EQ(std::signbit(f), (c & 0x8000) != 0) << c;  // -0 stays -0
    ASSERT_EQ(to_fp16(f).bits, c) << c;
  }
}

TEST(Fp16, TiesGoToTheEvenCodeAndNeighboursToTheNearer) {
  const std::vector<double>& v = table().value;
  int ties = 0;
  for (size_t c = 0; c + 1 < v.size(); ++c) {
    const float mid = (float)((v[c] + v[c + 1]) / 2);  // 12 significant bits: exact in fp32
    ASSERT_EQ((double)mid, (v[c] + v[c + 1]) / 2);
    const uint16_t even = (uint16_t)(c % 2 == 0 ? c : c + 1);
    ASSERT_EQ(to_fp16(mid).bits, even) << c;
    ASSERT_EQ(to_fp16(-mid).bits, even | 0x8000) << c;
    ASSERT_EQ(to_fp16(std::nextafter(mid, 0.0f)).bits, c) << c;
    ASSERT_EQ(to_fp16(std::nextafter(mid, 1e9f)).bits, c + 1) << c;
    ++ties;
  }
  EXPECT_EQ(ties, 0x7BFF);
}

TEST(Fp16, OverflowUnderflowZerosInfinitiesNan) {
  // the largest value, 65504 = 0x7BFF; 65519.99 still rounds to it, 65520 (the tie) and above
  // overflow to infinity, as does infinity itself
  EXPECT_EQ(to_fp16(65504.0f).bits, 0x7BFF);
  EXPECT_EQ(to_fp16(std::nextafter(65520.0f, 0.0f)).bits, 0x7BFF);
  EXPECT_EQ(to_fp16(65520.0f).bits, 0x7C00);
  EXPECT_EQ(to_fp16(-1e10f).bits, 0xFC00);
  EXPECT_EQ(to_fp16(std::numeric_limits<float>::infinity()).bits, 0x7C00);
  EXPECT_EQ(to_fp16(-std::numeric_limits<float>::infinity()).bits, 0xFC00);
  EXPECT_TRUE(std::isinf(to_float(fp16{0x7C00})));
  // the smallest normal 2^-14 (0x0400), the largest subnormal, the smallest subnormal 2^-24
  EXPECT_EQ(to_fp16(std::ldexp(1.0f, -14)).bits, 0x0400);
  EXPECT_EQ(to_fp16(std::ldexp(1023.0f, -24)).bits, 0x03FF);
  EXPECT_EQ(to_fp16(std::ldexp(1.0f, -24)).bits, 0x0001);
  // 2^-25 is the tie between 0 and 2^-24: to 0 (even); anything above it to 2^-24
  EXPECT_EQ(to_fp16(std::ldexp(1.0f, -25)).bits, 0x0000);
  EXPECT_EQ(to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits, 0x0001);
  EXPECT_EQ(to_fp16(-std::ldexp(1.0f, -26)).bits, 0x8000);  // flushed, sign kept
  EXPECT_EQ(to_fp16(1e-30f).bits, 0x0000);
  EXPECT_EQ(to_fp16(bits_to_float(1)).bits, 0x0000);  // fp32's smallest subnormal
  // 1.5 x 2^-24 ties between 1 and 2 (x 2^-24): to 2, the even code
  EXPECT_EQ(to_fp16(std::ldexp(3.0f, -25)).bits, 0x0002);
  EXPECT_EQ(to_fp16(0.0f).bits, 0x0000);
  EXPECT_EQ(to_fp16(-0.0f).bits, 0x8000);
  EXPECT_EQ(to_fp16(1.0f).bits, 0x3C00);
  // NaN stays NaN, quiet, its sign kept
  const uint16_t qnan = to_fp16(std::numeric_limits<float>::quiet_NaN()).bits;
  EXPECT_TRUE(is_nan_code(qnan) && (qnan & 0x200));
  EXPECT_EQ(to_fp16(-std::numeric_limits<float>::quiet_NaN()).bits & 0x8000, 0x8000);
  EXPECT_TRUE(std::isnan(to_float(fp16{0x7E00})));
}

// Floats across the whole range (every 257th bit pattern: each exponent, many mantissas) and
// the rounding boundaries above: the definition's rounding, and F16C's.
TEST(Fp16, EncodeEqualsTheDefinitionAndF16c) {
  const bool f16c = have_f16c();
  uint64_t checked = 0;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 257) {
    const float x = bits_to_float((uint32_t)u);
    const uint16_t got = to_fp16(x).bits;
    if (std::isnan(x)) {
      ASSERT_TRUE(is_nan_code(got)) << u;
      if (f16c) { ASSERT_EQ(got, f16c_encode(x)) << u; }
      continue;
    }
    const uint16_t want = std::isinf(x) ? (uint16_t)(std::signbit(x) ? 0xFC00 : 0x7C00)
                                        : definition_round(x);
    ASSERT_EQ(got, want) << std::hex << u;
    if (f16c) { ASSERT_EQ(got, f16c_encode(x)) << std::hex << u; }
    ++checked;
  }
  EXPECT_GT(checked, 1000000u);
  if (!f16c) GTEST_SKIP() << "no F16C on this CPU: checked against the definition only";
  // F16C decodes every non-NaN code to the same float (NaNs: it quiets a signalling one)
  for (uint32_t c = 0; c < 65536; ++c) {
    if (is_nan_code((uint16_t)c)) continue;
    ASSERT_EQ(float_to_bits(to_float(fp16{(uint16_t)c})), float_to_bits(f16c_decode((uint16_t)c))) << c;
  }
}

}  // namespace
