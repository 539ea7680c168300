// report/number_formats.h: `trainer --number-formats`, the range of every number format
// paralab computes in, computed from the encoders and decoders the kernels use
// (kernels/float16.h: bf16 and fp16; kernels/fp8.h: E4M3 and E5M2), not typed in.
//
// For a format of e exponent bits and m mantissa bits (bias 2^(e-1) - 1, IEEE 754's layout):
//   min subnormal  the code 1:                      2^(1 - bias - m)
//   min normal     the code 1 << m:                 2^(1 - bias)
//   epsilon        the code after 1.0, less 1.0:    2^-m
//   max            the largest code that decodes to a finite value: (2 - 2^-m) 2^(emax)
//                  where the all-ones exponent is infinity and NaN (fp32, bf16, fp16, E5M2);
//                  E4M3 keeps that exponent for numbers but S.1111.111 for NaN, and has no
//                  infinity: 1.75 x 2^8 = 448 (Micikevicius et al. 2022, arXiv:2209.05433,
//                  table 1)
// Lesson 11 reads this table; tests/test_number_formats.cpp holds it to the closed forms.
//
// defines: NumberFormat, number_formats, number_formats_text, number_formats_json
#pragma once
#include <string>
#include <vector>

namespace paralab {

struct NumberFormat {
  std::string name;         // fp32, bf16, fp16, e4m3, e5m2
  int bits, exponent_bits, mantissa_bits;
  double max, min_normal, min_subnormal, epsilon;
  bool infinity;            // a code decodes to +inf
  std::string used_for;     // where paralab stores values in it
};

// The five formats, each measured by walking its codes through the kernels' decoder.
std::vector<NumberFormat> number_formats();
// An aligned table (powers of two beside the decimal values) / a JSON object {"formats": [...]}.
std::string number_formats_text(const std::vector<NumberFormat>& formats);
std::string number_formats_json(const std::vector<NumberFormat>& formats);

}  // namespace paralab
