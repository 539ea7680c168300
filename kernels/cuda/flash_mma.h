// kernels/cuda/flash_mma.h: the tensor-core flash attention (FlashAttention-2, Dao 2023) for
// 16-bit storage (bf16 or fp16), host entry points. Plain C++, no CUDA types, so g++-compiled code (the
// dispatcher, op_check) can include it.
//
// Same arguments and semantics as the 16-bit CUDA twins flash_attention_forward / _backward
// (kernels/ops/flash_attention.h; the math of kernels/cpu/flash_attention.cpp, which both
// mirror), which call these first and fall back to the scalar kernels: one pass
// of attention (kernels/math.h AttentionBlock: positions, causal by position, views with their
// own rows and head strides), GQA (query head h reads group h / (A/G)), dropout with the counter
// RNG's keep bits (dropout_keep at blk.dropout_index) and kept values scaled by 1/(1-p); a row
// that sees no key gets o = 0 and lse = -inf. lse is fp32, natural log, at the q view's
// bh * (q.head_stride / D) + i. Backward: dq fp32 "+=", dk and dv 16-bit "+=" (each block sums
// its share in fp32, adds it to the widened old value, rounds once); deterministic (no atomics).
//
// Each returns false, having launched nothing, when it does not handle the call (D not 64 or
// 128; A % G != 0; scale not positive and finite; p outside [0, 1); a pointer not 16-byte
// aligned or a head stride not a multiple of 8 elements; more shared memory than the device
// allows; grid limits): the caller then runs the scalar kernels of flash_attention.cu. True
// means queued on the ops' stream (kernels::cuda::stream()); CUDA errors throw
// std::runtime_error like every op. The backward computes delta_i = dO_i . o_i itself (a small
// kernel into stream-ordered scratch), so it takes today's argument list unchanged.
//
// defined in: kernels/cuda/flash_mma_forward.cu, kernels/cuda/flash_mma_backward.cu
#pragma once
#include <cstdint>

#include "kernels/common.h"  // kernels::bf16, kernels::fp16

namespace kernels {
struct AttentionBlock;  // kernels/math.h
namespace cuda {

bool flash_mma_forward(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v, int B,
                       int A, int G, int D, float scale, float dropout_p, uint64_t seed,
                       uint64_t rng_stream, const AttentionBlock& blk);

bool flash_mma_backward(float* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                        const bf16* k, const bf16* v, const bf16* o, const float* lse, int B,
                        int A, int G, int D, float scale, float dropout_p, uint64_t seed,
                        uint64_t rng_stream, const AttentionBlock& blk);
// The same for fp16 (mma.sync's .f16 inputs; P and dS rounded to fp16).
bool flash_mma_forward(fp16* o, float* lse, const fp16* q, const fp16* k, const fp16* v, int B,
                       int A, int G, int D, float scale, float dropout_p, uint64_t seed,
                       uint64_t rng_stream, const AttentionBlock& blk);
bool flash_mma_backward(float* dq, fp16* dk, fp16* dv, const fp16* dout, const fp16* q,
                        const fp16* k, const fp16* v, const fp16* o, const float* lse, int B,
                        int A, int G, int D, float scale, float dropout_p, uint64_t seed,
                        uint64_t rng_stream, const AttentionBlock& blk);

// The name the run's header can print for the kernel that ran ("flash-mma (FA2, mma.sync
// m16n8k16 bf16/fp16)"), and whether the shape alone (not the pointers) is one it handles.
const char* flash_mma_name();
bool flash_mma_handles(int A, int G, int D, float scale, float dropout_p,
                       const AttentionBlock& blk);

}  // namespace cuda
}  // namespace kernels
