// parallel/fp8_linear.cpp: the linear GEMMs of parallel/fp8_linear.h. Each FP8 GEMM is three
// named steps: quantise A (K contiguous), quantise B (K contiguous), gemm_fp8.
#include "parallel/fp8_linear.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "kernels/ops.h"

namespace paralab {

namespace {

using kernels::Device;

// A quantised operand in the scratch: where its codes and factors are, the matrix the GEMM reads.
struct Fp8Operand {
  uint8_t* codes;
  float* factors;
  kernels::Fp8Matrix matrix;
};

// Copy of role r of the (rows, cols) tensor x: as stored, or transposed ((cols, rows)), into
// one of the scratch's two operands (a: the GEMM's A, else its B).
template <typename T>
Fp8Operand quantize(const Fp8Linear& fp8, Fp8Role r, const T* x, int rows, int cols,
                    bool transpose, bool a) {
  Fp8Scaling& s = *fp8.scaling;
  Fp8Scratch& scratch = *fp8.scratch;
  Fp8Operand o{a ? scratch.a.data() : scratch.b.data(),
               a ? scratch.a_factors.data() : scratch.b_factors.data(), {}};
  if (transpose)
    s.quantize(fp8.index, r, x, rows, cols, nullptr, nullptr, o.codes, o.factors);
  else
    s.quantize(fp8.index, r, x, rows, cols, o.codes, o.factors, nullptr, nullptr);
  o.matrix = {o.codes, o.factors, s.format(r), s.blocks(r)};
  return o;
}

template <typename T>
void gemm(Device d, int m, int n, int k, const Fp8Operand& a, const Fp8Operand& b, float beta,
          T* c, int ldc) {
  kernels::gemm_fp8(d, m, n, k, 1.0f, a.matrix, b.matrix, beta, c, ldc);
}

// gemm_fp8 stores C in fp32 or bf16 and the recipes cast from those: fp16 storage has no FP8
// path here (the CLI refuses --fp8-format with --fp16, docs/fp8.md).
template <typename T>
constexpr bool kFp8Storage = !std::is_same_v<T, kernels::fp16>;
[[noreturn]] void no_fp16() {
  throw std::logic_error(
      "fp8 linear: fp16 storage has no FP8 GEMM (--fp8-format needs fp32 or --bf16)");
}

}  // namespace

// The gathered W (--fp8-param-gather), cast for fprop (W) or dgrad (W^T) at the gathered
// scales, recording nothing. ZeRO-3: W's place holds the codes, read as they are (fprop) or
// decoded and cast transposed (dgrad). ZeRO-1/2: W as stored (the other ranks' slices decoded
// from their codes), cast either way.
template <typename T>
Fp8Operand gathered_weight(Device d, const Fp8Linear& fp8, const T* W, int out, int in,
                           bool transpose) {
  Fp8Scaling& s = *fp8.scaling;
  Fp8Scratch& scratch = *fp8.scratch;
  const kernels::Fp8Format f = s.format(Fp8Role::Weight);
  const kernels::Fp8Blocks blocks = s.blocks(Fp8Role::Weight);  // W's and W^T's alike
  const Fp8Operand cast{scratch.b.data(), scratch.b_factors.data(),
                        {scratch.b.data(), scratch.b_factors.data(), f, blocks}};
  if (fp8.weight_stored) {
    s.quantize_at(Fp8Role::Weight, W, out, in, fp8.gathered_scale, cast.codes, cast.factors,
                  transpose);
    return cast;
  }
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(W);
  if (!transpose)
    return {nullptr, nullptr, {codes, fp8.gathered_factor, f, blocks}};
  T* decoded = reinterpret_cast<T*>(scratch.weight.data());
  kernels::fp8_dequantize(d, decoded, {codes, fp8.gathered_factor, f, blocks}, out, in);
  s.quantize_at(Fp8Role::Weight, decoded, out, in, fp8.gathered_scale, cast.codes, cast.factors,
                true);
  return cast;
}

void Fp8Scratch::allocate(Device d, const Fp8Config& c, int N,
                          const std::vector<std::pair<int, int>>& linears, int decoded_es,
                          Category where) {
  using R = Fp8Role;
  auto factors = [&](R r, int rows, int cols) {
    return Fp8Scaling::scale_bytes(c, r, rows, cols) / sizeof(float);
  };
  size_t ca = 0, cb = 0, fa = 0, fb = 0, w = 0;
  for (const auto& [in, out] : linears) {
    const size_t n = N;
    w = std::max(w, (size_t)out * in);
    ca = std::max({ca, n * in, n * out});                    // X, dY, dY^T
    cb = std::max({cb, (size_t)out * in, n * in});           // W, W^T, X^T
    fa = std::max({fa, factors(R::Input, N, in), factors(R::OutputGrad, N, out),
                   factors(R::OutputGrad, out, N)});
    fb = std::max({fb, factors(R::Weight, out, in), factors(R::Weight, in, out),
                   factors(R::Input, in, N)});
  }
  a.allocate(d, ca, where);
  b.allocate(d, cb, where);
  a_factors.allocate(d, fa, where);
  b_factors.allocate(d, fb, where);
  if (decoded_es > 0) weight.allocate(d, w * decoded_es, where);
  else weight = Buffer<char>();
}

template <typename T>
void linear_fprop(Device d, const Fp8Linear& fp8, T* y, const T* x, const T* W, int N, int in,
                  int out) {
  if (!fp8.on()) {
    kernels::gemm(d, false, true, N, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
    return;
  }
  if constexpr (!kFp8Storage<T>) {
    no_fp16();
  } else {
    const Fp8Operand xq = quantize(fp8, Fp8Role::Input, x, N, in, false, true);     // X
    const Fp8Operand wq = fp8.gathered_scale ? gathered_weight(d, fp8, W, out, in, false)
                                             : quantize(fp8, Fp8Role::Weight, W, out, in,
                                                        false, false);               // W
    gemm(d, N, out, in, xq, wq, 0.0f, y, out);
  }
}

template <typename T>
void linear_dgrad(Device d, const Fp8Linear& fp8, T* dx, const T* dy, const T* W, int N, int in,
                  int out) {
  if (!fp8.on()) {
    kernels::gemm(d, false, false, N, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
    return;
  }
  if constexpr (!kFp8Storage<T>) {
    no_fp16();
  } else {
    const Fp8Operand dyq = quantize(fp8, Fp8Role::OutputGrad, dy, N, out, false, true);  // dY
    const Fp8Operand wtq = fp8.gathered_scale ? gathered_weight(d, fp8, W, out, in, true)
                                              : quantize(fp8, Fp8Role::Weight, W, out, in,
                                                         true, false);                 // W^T
    gemm(d, N, in, out, dyq, wtq, 0.0f, dx, in);
  }
}

template <typename T>
void linear_wgrad(Device d, const Fp8Linear& fp8, T* dW, const T* dy, const T* x, int N, int in,
                  int out) {
  if (!fp8.on()) {
    kernels::gemm(d, true, false, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in);
    return;
  }
  if constexpr (!kFp8Storage<T>) {
    no_fp16();
  } else {
    const Fp8Operand dytq = quantize(fp8, Fp8Role::OutputGrad, dy, N, out, true, true);  // dY^T
    const Fp8Operand xtq = quantize(fp8, Fp8Role::Input, x, N, in, true, false);         // X^T
    gemm(d, out, in, N, dytq, xtq, 1.0f, dW, in);
  }
}

#define PARALAB_FP8_LINEAR_INSTANTIATE(T)                                                     \
  template void linear_fprop(Device, const Fp8Linear&, T*, const T*, const T*, int, int, int); \
  template void linear_dgrad(Device, const Fp8Linear&, T*, const T*, const T*, int, int, int); \
  template void linear_wgrad(Device, const Fp8Linear&, T*, const T*, const T*, int, int, int);
PARALAB_FP8_LINEAR_INSTANTIATE(float)
PARALAB_FP8_LINEAR_INSTANTIATE(kernels::bf16)
PARALAB_FP8_LINEAR_INSTANTIATE(kernels::fp16)
#undef PARALAB_FP8_LINEAR_INSTANTIATE

}  // namespace paralab
