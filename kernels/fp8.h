// kernels/fp8.h: the two 8-bit floating-point formats of FP8 training, and the scaling
// arithmetic every recipe shares, on the host and the device alike (HD: the CUDA kernels of
// kernels/cuda/fp8*.cu and their CPU twins run these very functions).
//
// The formats (Micikevicius et al., "FP8 Formats for Deep Learning", arXiv:2209.05433, Table 1;
// the OCP 8-bit floating point spec adopts them; CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2):
//
//              sign exp mant  bias  max normal          min normal  min subnormal  inf   NaN
//   E4M3       1    4   3     7     S.1111.110 = 448    2^-6        2^-9           none  S.1111.111
//   E5M2       1    5   2     15    S.11110.11 = 57344  2^-14       2^-16          yes   S.11111.{01,10,11}
//
// E4M3 gives up infinity (and all but one NaN per sign) for one more binade, 256..448;
// E5M2 is IEEE-754-like. Training uses E4M3 for the forward tensors (activations, weights)
// and, in the "hybrid" format, E5M2 for the gradients, whose range matters more than their
// precision (Transformer Engine's Format.HYBRID).
//
// Encoding (fp8_encode) is round-to-nearest-even and SATURATING, as CUDA's __NV_SATFINITE
// conversions (cvt.rn.satfinite.e4m3x2.f32 on sm_89+) and Transformer Engine's casts are: a
// finite value beyond the largest normal becomes +-max, so does +-inf; NaN becomes the
// canonical NaN 0x7F; a value at most half the smallest subnormal becomes a zero of its sign.
// The paper (section 2): "values that overflow are then saturated to the maximum representable
// value". Decoding (fp8_decode) is exact: every FP8 value is a float.
//
// The integer rounding trick is bf16's (kernels/math.h to_bf16): add half an ulp of the target
// less one, plus the lowest kept bit, and truncate; a carry out of the mantissa moves into the
// exponent, which is exactly rounding up to the next binade.
//
// Scaling: a tensor x is stored as q = encode(x * scale) and read back as decode(q) * scale_inv,
// scale_inv = 1 / scale; the scale maps the tensor's absolute maximum (amax) onto the format's
// max. fp8_scale_from_amax is Transformer Engine's compute_scale_from_amax (current and block
// scaling: transformer_engine/common/recipe/recipe_common.cuh), fp8_delayed_scale the delayed
// recipe's rule, fp8_history_update its amax-history step (recipe/delayed_scaling.cu,
// kernel_bulk: the one TE's PyTorch modules call after the amax reduction).
//
// defines: Fp8Format, fp8_max, fp8_mantissa_bits, fp8_bias, fp8_encode, fp8_decode,
//          Fp8AmaxAlgo, kFp8Block, Fp8Blocks, fp8_blocks_across, fp8_scale_count, fp8_block_of,
//          fp8_shard_block_of,
//          fp8_scale_from_amax, fp8_delayed_scale, fp8_history_update, fp8_round_normal,
//          fp8_saturates
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/math.h"  // bits_to_float, float_to_bits

namespace kernels {

enum class Fp8Format : uint8_t { E4M3, E5M2 };

HD float fp8_max(Fp8Format f) { return f == Fp8Format::E4M3 ? 448.0f : 57344.0f; }
HD int fp8_mantissa_bits(Fp8Format f) { return f == Fp8Format::E4M3 ? 3 : 2; }
HD int fp8_bias(Fp8Format f) { return f == Fp8Format::E4M3 ? 7 : 15; }
// The code of the largest finite value: S.1111.110 (E4M3), S.11110.11 (E5M2).
HD uint32_t fp8_max_code(Fp8Format f) { return f == Fp8Format::E4M3 ? 0x7Eu : 0x7Bu; }

// The code of |x| = a (float bits, 1.m * 2^e with e >= FP8's smallest normal exponent) rounded
// to nearest even in FP8's normal range, before saturation: drop 23 - mbits mantissa bits, then
// rebias the exponent from 127 to `bias`. A carry may reach the exponent: the next binade, or
// past max (a result above fp8_max_code(f): the value saturates).
HD uint32_t fp8_round_normal(uint32_t a, Fp8Format f) {
  const int mbits = fp8_mantissa_bits(f), drop = 23 - mbits;
  const uint32_t r = (a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) >> drop;
  return r - ((uint32_t)(127 - fp8_bias(f)) << mbits);
}

// float -> FP8 code: round to nearest, ties to even, saturating to +-max (see the header).
HD uint8_t fp8_encode(float x, Fp8Format f) {
  const uint32_t u = float_to_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;  // |x|
  if (a > 0x7F800000u) return 0x7F;    // NaN: the canonical NaN, as cvt.rn.satfinite gives
  const int mbits = fp8_mantissa_bits(f), bias = fp8_bias(f);
  const int e = (int)(a >> 23) - 127;  // |x| = 1.m * 2^e (float subnormals: far below FP8's)
  const int emin = 1 - bias;           // the smallest normal exponent
  uint32_t code;
  if (e >= emin) {
    code = fp8_round_normal(a, f);
    const uint32_t max_code = fp8_max_code(f);
    if (code > max_code) code = max_code;  // saturate (inf too: its exponent field is all ones)
  } else if (e < emin - mbits - 1) {
    code = 0;  // below half the smallest subnormal 2^(emin - mbits): rounds to zero
  } else {
    // Subnormal: the significand 1.m (24 bits) counted in units of 2^(emin - mbits), i.e.
    // shifted right by 23 - mbits + (emin - e), rounded to nearest even. A carry to 2^mbits
    // is the smallest normal's code, which is right.
    const uint32_t m = (a & 0x007FFFFFu) | 0x00800000u;
    const int drop = 23 - mbits + (emin - e);  // 21 + 1 .. 21 + 4 (E4M3), 22 .. 24 (E5M2)
    code = (m + ((1u << (drop - 1)) - 1u) + ((m >> drop) & 1u)) >> drop;
  }
  return (uint8_t)(sign | code);
}

// Whether fp8_encode(x, f) saturates: x is +-inf, or finite and rounds to nearest even past
// the max (E4M3: |x| > 464, the tie 464 going to the even 448; E5M2: |x| >= 61440, the tie
// going to the even 2^16). A value just above max that rounds back to it (fp32's rounding of
// amax * (max / amax), say) is not saturated. NaN is not.
HD bool fp8_saturates(float x, Fp8Format f) {
  const uint32_t a = float_to_bits(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return false;
  const int e = (int)(a >> 23) - 127;
  return e >= 1 - fp8_bias(f) && fp8_round_normal(a, f) > fp8_max_code(f);
}

// FP8 code -> float, exactly. E4M3's S.1111.111 and E5M2's S.11111.{01,10,11} are NaN, E5M2's
// S.11111.00 is +-inf.
HD float fp8_decode(uint8_t c, Fp8Format f) {
  const int mbits = fp8_mantissa_bits(f), bias = fp8_bias(f);
  const uint32_t exp_field = (c & 0x7Fu) >> mbits, mant = c & ((1u << mbits) - 1u);
  const uint32_t exp_all_ones = f == Fp8Format::E4M3 ? 15u : 31u;
  float v;
  if (f == Fp8Format::E4M3 && (c & 0x7Fu) == 0x7Fu) {
    v = bits_to_float(0x7FC00000u);
  } else if (f == Fp8Format::E5M2 && exp_field == exp_all_ones) {
    v = bits_to_float(mant == 0 ? 0x7F800000u : 0x7FC00000u);
  } else if (exp_field == 0) {
    // subnormal: mant * 2^(1 - bias - mbits), a float product that is exact
    v = (float)mant * bits_to_float((uint32_t)(127 + 1 - bias - mbits) << 23);
  } else {
    v = bits_to_float(((exp_field - bias + 127) << 23) | (mant << (23 - mbits)));
  }
  return (c & 0x80u) ? -v : v;
}

// ---- scales -------------------------------------------------------------------------------
// How the delayed recipe reads its amax history (--fp8-amax-compute-algo).
enum class Fp8AmaxAlgo : uint8_t { MostRecent, Max };

// Blocks of DeepSeek-V3's fine-grained quantisation (arXiv:2412.19437, section 3.3.2): 1 x 128
// tiles for activations and gradients, 128 x 128 blocks for weights.
constexpr int kFp8Block = 128;

// The scaling blocks of a quantised matrix (kernels/ops/fp8.h): one factor for the whole tensor,
// one per 1 x 128 tile, or one per 128 x 128 block, laid out row-major over the blocks.
enum class Fp8Blocks : uint8_t { Tensor, Tiles, Blocks };

HD int fp8_blocks_across(int cols) { return (cols + kFp8Block - 1) / kFp8Block; }
// Factors a (rows, cols) matrix quantised in blocks b carries.
HD size_t fp8_scale_count(Fp8Blocks b, int rows, int cols) {
  if (b == Fp8Blocks::Tensor) return 1;
  const size_t down = b == Fp8Blocks::Tiles ? (size_t)rows : (size_t)fp8_blocks_across(rows);
  return down * (size_t)fp8_blocks_across(cols);
}
// The factor of element (r, c) of a (rows, cols) matrix.
HD size_t fp8_block_of(Fp8Blocks b, int r, int c, int cols) {
  if (b == Fp8Blocks::Tensor) return 0;
  const int down = b == Fp8Blocks::Tiles ? r : r / kFp8Block;
  return (size_t)down * fp8_blocks_across(cols) + c / kFp8Block;
}

// The factor of element i of a weight's flat ZeRO shard that starts at the weight's element
// `first` (kernels/ops/fp8.h), the weight row-major with `cols` columns. Per tensor: 0, without
// the divisions (the delayed and tensorwise gathers cast every element through this).
HD size_t fp8_shard_block_of(Fp8Blocks b, int64_t first, int64_t i, int cols) {
  if (b == Fp8Blocks::Tensor) return 0;
  const int64_t e = first + i;
  return fp8_block_of(b, (int)(e / cols), (int)(e % cols), cols);
}

// Current (tensorwise) and block scaling: scale = max / amax, from this tensor's (or block's) own
// amax. TE's compute_scale_from_amax (recipe_common.cuh) with epsilon 0 and fp32 (not
// power-of-2) scales, as DeepSeek-V3 keeps them: amax 0, inf or NaN gives scale 1; a scale that
// overflows fp32 (a tiny amax) becomes FLT_MAX.
HD float fp8_scale_from_amax(float amax, float max) {
  if (!(amax > 0.0f && amax <= FLT_MAX)) return 1.0f;  // 0, NaN (compares false), inf
  const float s = max / amax;
  return s > FLT_MAX ? FLT_MAX : s;
}

// Delayed scaling: scale = scaled_max / amax with scaled_max = max * 2^-margin (TE's
// amax_and_scale_update: "(FP8_MAX / amax) / 2^margin", computed as one division); amax 0, inf
// or NaN keeps the previous scale; a scale that overflows fp32 becomes FLT_MAX.
HD float fp8_delayed_scale(float amax, float scaled_max, float previous) {
  const float s = (amax > 0.0f && amax <= FLT_MAX) ? scaled_max / amax : previous;
  return s > FLT_MAX ? FLT_MAX : s;
}

// One tensor's delayed-scaling step, at the end of its pass (forward or backward), after the
// amaxes were reduced over the group. history is the tensor's column of the (len, n) history
// (element i at history[i * stride]); row 0 holds the amax this pass recorded (the quantising
// kernels max into it). As TE's kernel_bulk (delayed_scaling.cu):
//   - when this pass recorded an amax (row 0 != 0), the window rolls: rows 1..len-1 move up one
//     (the oldest, row 1, drops out), this pass's amax goes to row len-1, row 0 is zeroed for
//     the next pass; the window's max is taken over rows 1..len-1 and this amax, before the roll;
//   - when it recorded none (0: the tensor was not used, or all zero), nothing rolls and the
//     amax used is 0, so the scale is kept;
//   - Max uses the window's max, MostRecent this pass's amax; then fp8_delayed_scale.
HD void fp8_history_update(float* history, int len, int stride, Fp8AmaxAlgo algo,
                           float scaled_max, float* scale) {
  const float last = history[0];
  float window = 0.0f;
  if (last != 0.0f) {
    for (int i = 0; i < len; i++) {
      const float a = i < len - 1 ? history[(size_t)(i + 1) * stride] : last;
      window = fmaxf(window, a);
      history[(size_t)i * stride] = i > 0 ? a : 0.0f;
    }
  }
  const float amax = algo == Fp8AmaxAlgo::MostRecent ? last : window;
  *scale = fp8_delayed_scale(amax, scaled_max, *scale);
}

}  // namespace kernels
