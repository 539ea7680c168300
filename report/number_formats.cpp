// report/number_formats.cpp: the table of report/number_formats.h, measured by walking each
// format's codes through the kernels' own decoder (so the table is what the kernels do, and
// a kernel that decoded a code wrongly would show here).
#include "report/number_formats.h"

#include <cmath>
#include <cstdint>
#include <functional>

#include "checkpoint/json.h"  // JsonWriter
#include "kernels/float16.h"  // bits_to_float, float_to_bits, to_float, to_bf16, to_fp16
#include "kernels/fp8.h"      // fp8_decode, fp8_encode
#include "report/text.h"      // strprintf

namespace paralab {

namespace {

// A format as the kernels see it: its layout, and code <-> value through their functions.
struct Codec {
  const char* name;
  int bits, exponent_bits, mantissa_bits;
  std::function<double(uint32_t)> decode;
  std::function<uint32_t(float)> encode;
  const char* used_for;
};

std::vector<Codec> codecs() {
  using namespace kernels;
  return {
      {"fp32", 32, 8, 23, [](uint32_t c) { return (double)bits_to_float(c); },
       [](float f) { return float_to_bits(f); },
       "master weights, optimizer moments, accumulation, the loss"},
      {"bf16", 16, 8, 7, [](uint32_t c) { return (double)to_float(bf16{(uint16_t)c}); },
       [](float f) { return (uint32_t)to_bf16(f).bits; },
       "--bf16: parameters, activations, gradients"},
      {"fp16", 16, 5, 10, [](uint32_t c) { return (double)to_float(fp16{(uint16_t)c}); },
       [](float f) { return (uint32_t)to_fp16(f).bits; },
       "--fp16: parameters, activations, gradients (loss-scaled)"},
      {"e4m3", 8, 4, 3,
       [](uint32_t c) { return (double)fp8_decode((uint8_t)c, Fp8Format::E4M3); },
       [](float f) { return (uint32_t)fp8_encode(f, Fp8Format::E4M3); },
       "--fp8-format: linear layers' inputs and weights (and gradients, e4m3)"},
      {"e5m2", 8, 5, 2,
       [](uint32_t c) { return (double)fp8_decode((uint8_t)c, Fp8Format::E5M2); },
       [](float f) { return (uint32_t)fp8_encode(f, Fp8Format::E5M2); },
       "--fp8-format hybrid: linear layers' output gradients"},
  };
}

// The largest positive code that decodes to a finite value: down from 0x7F..F, past the NaN
// codes and the infinity (fp32 has 2^23 NaN codes to pass: a few milliseconds).
uint32_t largest_finite_code(const Codec& c) {
  uint32_t code = (1u << (c.bits - 1)) - 1u;
  while (!std::isfinite(c.decode(code))) --code;
  return code;
}

NumberFormat measure(const Codec& c) {
  NumberFormat f;
  f.name = c.name;
  f.bits = c.bits;
  f.exponent_bits = c.exponent_bits;
  f.mantissa_bits = c.mantissa_bits;
  const uint32_t top = largest_finite_code(c);
  f.max = c.decode(top);
  f.infinity = std::isinf(c.decode(top + 1));
  f.min_subnormal = c.decode(1);
  f.min_normal = c.decode(1u << c.mantissa_bits);  // exponent field 1, mantissa 0
  f.epsilon = c.decode(c.encode(1.0f) + 1u) - 1.0;
  f.used_for = c.used_for;
  return f;
}

// "2^-14" for a power of two, else "".
std::string power_of_two(double v) {
  int e;
  const double m = std::frexp(v, &e);
  return m == 0.5 ? strprintf("2^%d", e - 1) : "";
}

}  // namespace

std::vector<NumberFormat> number_formats() {
  std::vector<NumberFormat> out;
  for (const Codec& c : codecs()) out.push_back(measure(c));
  return out;
}

std::string number_formats_text(const std::vector<NumberFormat>& formats) {
  std::string s =
      "number formats (measured from the kernels' decoders: kernels/float16.h, kernels/fp8.h)\n";
  s += strprintf("%-6s %4s %4s %4s  %-12s  %-22s  %-22s  %-18s  %-3s  %s\n", "format", "bits",
                 "exp", "man", "max", "min normal", "min subnormal", "epsilon", "inf",
                 "paralab stores in it");
  auto both = [](double v) { return strprintf("%-9.4g %-12s", v, power_of_two(v).c_str()); };
  for (const NumberFormat& f : formats)
    s += strprintf("%-6s %4d %4d %4d  %-12.6g  %-22s  %-22s  %-18s  %-3s  %s\n", f.name.c_str(),
                   f.bits, f.exponent_bits, f.mantissa_bits, f.max, both(f.min_normal).c_str(),
                   both(f.min_subnormal).c_str(), both(f.epsilon).c_str(),
                   f.infinity ? "yes" : "no", f.used_for.c_str());
  s += "epsilon: the gap between 1 and the next value; values below min normal lose precision "
       "(subnormal), below half the min subnormal they round to 0\n";
  return s;
}

std::string number_formats_json(const std::vector<NumberFormat>& formats) {
  JsonWriter j(true);
  j.begin_object().key("formats").begin_array();
  for (const NumberFormat& f : formats) {
    j.begin_object()
        .field("name", f.name)
        .field("bits", f.bits)
        .field("exponent_bits", f.exponent_bits)
        .field("mantissa_bits", f.mantissa_bits)
        .field("max", f.max)
        .field("min_normal", f.min_normal)
        .field("min_subnormal", f.min_subnormal)
        .field("epsilon", f.epsilon)
        .field("infinity", f.infinity)
        .field("used_for", f.used_for)
        .end_object();
  }
  j.end_array().end_object();
  return j.str() + "\n";
}

}  // namespace paralab
