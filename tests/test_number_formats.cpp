// tests/test_number_formats.cpp: `trainer --number-formats` (report/number_formats.h) against
// the closed forms of each layout (sign, e exponent bits, m mantissa bits, bias 2^(e-1) - 1):
// min subnormal 2^(1 - bias - m), min normal 2^(1 - bias), epsilon 2^-m, and max
// (2 - 2^-m) 2^(2^e - 2 - bias) where the all-ones exponent is reserved (IEEE 754's fp32 and
// fp16, bf16, E5M2), 448 for E4M3 (Micikevicius et al. 2022, table 1: S.1111.110), and the
// C++ library's own numbers for fp32.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "report/number_formats.h"

namespace {

using paralab::NumberFormat;

const NumberFormat& find(const std::vector<NumberFormat>& all, const std::string& name) {
  for (const NumberFormat& f : all)
    if (f.name == name) return f;
  throw std::runtime_error("no format " + name);
}

void expect_layout(const NumberFormat& f, int e, int m, bool reserved_top_exponent) {
  const int bias = (1 << (e - 1)) - 1;
  EXPECT_EQ(f.bits, 1 + e + m) << f.name;
  EXPECT_EQ(f.min_subnormal, std::ldexp(1.0, 1 - bias - m)) << f.name;
  EXPECT_EQ(f.min_normal, std::ldexp(1.0, 1 - bias)) << f.name;
  EXPECT_EQ(f.epsilon, std::ldexp(1.0, -m)) << f.name;
  if (reserved_top_exponent) {
    EXPECT_EQ(f.max, (2.0 - std::ldexp(1.0, -m)) * std::ldexp(1.0, (1 << e) - 2 - bias))
        << f.name;
    EXPECT_TRUE(f.infinity) << f.name;
  }
}

TEST(NumberFormats, EachLayoutsClosedForms) {
  const std::vector<NumberFormat> all = paralab::number_formats();
  ASSERT_EQ(all.size(), 5u);
  expect_layout(find(all, "fp32"), 8, 23, true);
  expect_layout(find(all, "bf16"), 8, 7, true);
  expect_layout(find(all, "fp16"), 5, 10, true);
  expect_layout(find(all, "e5m2"), 5, 2, true);
  expect_layout(find(all, "e4m3"), 4, 3, false);
  // E4M3 uses the top exponent for numbers, and only S.1111.111 for NaN: no infinity.
  EXPECT_EQ(find(all, "e4m3").max, 448.0);
  EXPECT_FALSE(find(all, "e4m3").infinity);
  EXPECT_EQ(find(all, "e5m2").max, 57344.0);
  EXPECT_EQ(find(all, "fp16").max, 65504.0);
  // fp32 as the C++ library has it
  const NumberFormat& fp32 = find(all, "fp32");
  EXPECT_EQ(fp32.max, (double)FLT_MAX);
  EXPECT_EQ(fp32.min_normal, (double)FLT_MIN);
  EXPECT_EQ(fp32.min_subnormal, (double)std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(fp32.epsilon, (double)FLT_EPSILON);
}

TEST(NumberFormats, TextAndJsonCarryEveryFormat) {
  const std::vector<NumberFormat> all = paralab::number_formats();
  const std::string text = paralab::number_formats_text(all);
  const std::string json = paralab::number_formats_json(all);
  for (const char* name : {"fp32", "bf16", "fp16", "e4m3", "e5m2"}) {
    EXPECT_NE(text.find(std::string("\n") + name + " "), std::string::npos) << name;
    EXPECT_NE(json.find(std::string("\"") + name + "\""), std::string::npos) << name;
  }
  EXPECT_NE(text.find("2^-9"), std::string::npos);  // E4M3's min subnormal, as a power
  EXPECT_NE(json.find("\"max\": 448"), std::string::npos);
}

}  // namespace
