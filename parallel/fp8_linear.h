// parallel/fp8_linear.h: the three GEMMs of a linear layer y = x W^T, in the storage type or
// with FP8 inputs (Transformer Engine's Linear; DeepSeek-V3 section 3.3):
//   fprop   y (N, out)  = x (N, in) W (out, in)^T       reads X and W
//   dgrad   dx (N, in)  = dy (N, out) W                  reads dY and W^T
//   wgrad   dW (out, in) += dy^T x                       reads dY^T and X^T
// In FP8 each operand is quantised by the linear's recipe (parallel/fp8_scaling.h) into a
// K-contiguous copy (kernels/ops/fp8.h: the transposed copies are what Hopper's "TN"-only FP8
// GEMM needs), and kernels::gemm_fp8 multiplies them with fp32 accumulation into the storage
// type. The copies and their factors go to one Fp8Scratch (category workspace, through the
// ledger) that every linear of the stage shares, sized for the largest operands: paralab
// quantises an operand again where it is read (X in fprop and again in wgrad, W in fprop and
// dgrad) rather than keeping Transformer Engine's cached FP8 copies; within a step the scale is
// the same (delayed: the history's; tensorwise and blockwise: from the same values), so the
// codes are the same ones TE would have kept.
//
// defines: Fp8Scratch, Fp8Linear, linear_fprop, linear_dgrad, linear_wgrad
#pragma once
#include <utility>
#include <vector>

#include "kernels/common.h"
#include "parallel/fp8_scaling.h"

namespace paralab {

// The two quantised operands of one FP8 GEMM, A (m, k) and B (n, k): codes and factors, reused
// by every GEMM. For a linear (N tokens, in -> out) the operands are
//   fprop  A = X (N, in)     B = W (out, in)
//   dgrad  A = dY (N, out)   B = W^T (in, out)
//   wgrad  A = dY^T (out, N) B = X^T (in, N)
// so A holds N max(in, out) codes and B max(out in, N in); the factors are the recipe's count
// of each shape (kernels::fp8_scale_count), the largest taken.
// With --fp8-param-gather at ZeRO-3 `weight` holds a gathered W's codes decoded into the storage
// type (decoded_es bytes per element, out in of the largest weight), for dgrad's W^T (below);
// ZeRO-1/2 decode into the parameters themselves, so there (and without the flag) decoded_es
// is 0 and `weight` is empty.
struct Fp8Scratch {
  Buffer<uint8_t> a, b;
  Buffer<float> a_factors, b_factors;
  Buffer<char> weight;
  // Sized for the largest operands of the linears (in, out) at N tokens (replacing what it
  // held: the workspace re-sizes with the microbatch); decoded_es: above; in
  // category `where`: fp8_operands for the dense linears' standing set, workspace for the
  // experts' transient one (plan/fp8.h).
  void allocate(kernels::Device d, const Fp8Config& c, int N,
                const std::vector<std::pair<int, int>>& linears, int decoded_es,
                Category where);
};

// A gathered unit's FP8 weights (--fp8-param-gather: parallel/data_parallel.h
// DataParallel::fp8_weights): the unit's `values` scales (one per weight, or blockwise one per
// 128 x 128 block of each) and after them their factors 1 / scale; weight k's start at
// state[offset[first + k]] and state[values + offset[first + k]]; state nullptr: not gathered
// in FP8. `first` skips the unit's weights a caller does not own (an MoE layer's experts come
// after its qkv and proj).
struct Fp8GatheredUnit {
  const float* state = nullptr;
  const int* offset = nullptr;
  int values = 0, first = 0;
  const float* scale(int k) const { return state + offset[first + k]; }
  const float* factor(int k) const { return state + values + offset[first + k]; }
};

// Which FP8 state a linear layer's GEMMs use: the chunk's scaling and the linear's number in it
// (layer l of the chunk: 4 l + 0 qkv, + 1 proj, + 2 fc1, + 3 fc2). scaling == nullptr: the
// GEMMs run in the storage type (the default; attention and the output layer never take FP8).
//
// --fp8-param-gather (parallel/data_parallel.h Fp8ParamGather): ZeRO-3 gathered W as FP8 codes,
// which sit in W's place (W's pointer is the codes'), with its scales and factors 1 / scale (one
// each, or blockwise one per 128 x 128 block of W).
// fprop reads the codes as they are; dgrad's W^T is the codes decoded (into the storage type)
// and cast transposed at the same scale, which gives back the same codes: decode(c) / s s lies
// within a relative 2^-8 of decode(c) (bf16's rounding; fp32's 2^-23), well inside half of
// E4M3's spacing (2^-4 relative), so the cast rounds it to c: the codes, and the GEMMs,
// are those of the unsharded cast (Transformer Engine transposes the gathered codes instead).
struct Fp8Linear {
  Fp8Scaling* scaling = nullptr;
  int index = 0;
  Fp8Scratch* scratch = nullptr;  // sized (ensure) for this linear's operands
  const float* gathered_scale = nullptr;   // non-null: W was gathered in FP8 (above), W's
  const float* gathered_factor = nullptr;  // blocks of the recipe (blockwise: 128 x 128)
  // ZeRO-1/2 (weight_stored): W as stored, the other ranks' slices decoded from the codes they
  // sent, the owner's own slice exact; fprop's W and dgrad's W^T cast at the gathered scales give
  // the codes the owner sent (the same rounding argument), recording nothing.
  bool weight_stored = false;
  bool on() const { return scaling != nullptr; }
};

// y = x W^T (no bias; beta 0).
template <typename T>
void linear_fprop(kernels::Device d, const Fp8Linear& fp8, T* y, const T* x, const T* W, int N,
                  int in, int out);
// dx = dy W (beta 0).
template <typename T>
void linear_dgrad(kernels::Device d, const Fp8Linear& fp8, T* dx, const T* dy, const T* W, int N,
                  int in, int out);
// dW += dy^T x (beta 1: gradient accumulation).
template <typename T>
void linear_wgrad(kernels::Device d, const Fp8Linear& fp8, T* dW, const T* dy, const T* x, int N,
                  int in, int out);

}  // namespace paralab
