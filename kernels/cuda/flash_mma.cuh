// kernels/cuda/flash_mma.cuh: what the tensor-core flash attention kernels share
// (kernels/cuda/flash_mma_forward.cu, flash_mma_backward.cu): the PTX wrappers (ldmatrix,
// mma.sync m16n8k16 bf16 or fp16 -> fp32, cp.async), the 16-bit pair packing, the predicated
// tile load into padded shared memory, the quad reductions of a row's fragments, and the shape
// checks. The kernels are templates on the storage type H, bf16 or fp16: the two differ only in
// the mma instruction's input type and the conversion that packs P (mma_16, pack_16x2); ldmatrix
// and cp.async move 16-bit elements whatever they encode.
//
// Fragments: which lane holds which element of A, B and C is kernels/cuda/mma_layout.h (with
// the diagram and the PTX ISA sections); the kernels take every lane address from there.
//
// Shared tiles are row-major 16-bit with a row stride of D + 8 elements (D + 8 = 72 or 136): a
// row is 2D + 16 bytes, so the 8 rows one ldmatrix matrix reads start 16 bytes (4 banks) apart
// and cover the 32 banks once: no bank conflict, without a swizzle. Rows past the view's end
// are zero-filled by cp.async (src-size 0), so partial tiles need no special case in the math:
// a zero key scores 0 and is masked, a zero value row adds 0 * p = 0 (never 0 * garbage = NaN).
//
// defines: ldsm_x4, ldsm_x4_trans, mma_16, pack_16x2, cp_async_16, cp_async_4, cp_async_commit,
//          cp_async_wait, load_rows_async, quad_max, quad_sum, keep_bits, aligned16,
//          flash_mma_shape_ok, has_mma_sync, set_smem
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"  // stream(), CUDA_CHECK, KERNEL_CHECK
#include "kernels/cuda/flash_mma.h"
#include "kernels/cuda/flash_mma_tiles.h"  // tile sizes, tile_needs_mask, first_query_seeing
#include "kernels/cuda/mma_layout.h"
#include "kernels/math.h"  // AttentionBlock, dropout_keep, bf16, fp16
#if defined(PARALAB_EMULATED)
#include "kernels/emulator/ptx.h"  // the instructions' emulated twins
#endif

namespace kernels {
namespace cuda {
namespace flash_mma {

// ---- PTX wrappers ----------------------------------------------------------------------------
#if defined(PARALAB_EMULATED)
// The emulated device (make emulated) runs each instruction as kernels/emulator/ptx.h's twin,
// which computes what the PTX ISA says it does and checks its addresses; the arguments and
// results are the same registers.
__device__ inline void ldsm_x4(uint32_t (&r)[4], const void* p) { emu::ptx::ldmatrix_x4(r, p, false); }
__device__ inline void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  emu::ptx::ldmatrix_x4(r, p, true);
}
template <class H>
__device__ inline void mma_16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same<H, bf16>::value) emu::ptx::mma_bf16(d, a, b0, b1);
  else emu::ptx::mma_f16(d, a, b0, b1);
}
template <class H>
__device__ inline uint32_t pack_16x2(float lo, float hi) {
  if constexpr (std::is_same<H, bf16>::value) return emu::ptx::cvt_bf16x2(hi, lo);
  else return emu::ptx::cvt_f16x2(hi, lo);
}
__device__ inline void cp_async_16(void* dst, const void* src, bool full) {
  emu::ptx::cp_async(dst, src, 16, full ? 16 : 0);
}
__device__ inline void cp_async_4(float* dst, const float* src, bool full) {
  emu::ptx::cp_async(dst, src, 4, full ? 4 : 0);
}
__device__ inline void cp_async_commit() { emu::ptx::cp_async_commit(); }
template <int N>
__device__ inline void cp_async_wait() {
  emu::ptx::cp_async_wait(N);
}
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// The PTX for V100 and T4 (the Makefile's compute_70 or compute_75 target): mma.sync
// m16n8k16, cp.async and the paired cvt are sm_80's, so these bodies trap. No kernel that calls
// them is launched there: has_mma_sync() (below) is false on those GPUs, so the entry points
// return false and the scalar kernels of flash_attention.cu, which take fp32 and fp16 alike, run.
__device__ inline void ldsm_x4(uint32_t (&)[4], const void*) { __trap(); }
__device__ inline void ldsm_x4_trans(uint32_t (&)[4], const void*) { __trap(); }
template <class H>
__device__ inline void mma_16(float (&)[4], const uint32_t (&)[4], uint32_t, uint32_t) {
  __trap();
}
template <class H>
__device__ inline uint32_t pack_16x2(float, float) {
  __trap();
  return 0;
}
__device__ inline void cp_async_16(void*, const void*, bool) { __trap(); }
__device__ inline void cp_async_4(float*, const float*, bool) { __trap(); }
__device__ inline void cp_async_commit() { __trap(); }
template <int N>
__device__ inline void cp_async_wait() {
  __trap();
}
#else
__device__ inline uint32_t smem_addr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
// Four 8 x 8 matrices of 16-bit elements; lane L addresses row L % 8 of matrix L / 8
// (mma_layout.h).
__device__ inline void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ inline void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// d (16 x 8 fp32) += a (16 x 16 H) b (16 x 8 H): one tensor-core instruction per warp, H bf16
// or fp16 (the same fragments, the inputs' type in the instruction's name).
template <class H>
__device__ inline void mma_16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same<H, bf16>::value)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats rounded to nearest even into one register of H pair, lo in the low half (the lower
// column). cvt.rn.{bf16x2,f16x2}.f32 d, a, b puts a in the UPPER half (PTX ISA, cvt), hence
// (hi, lo).
template <class H>
__device__ inline uint32_t pack_16x2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same<H, bf16>::value)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// 16 bytes global -> shared, asynchronously; full = false writes 16 zero bytes and reads
// nothing (src must still be a valid address: callers pass the head's first row).
__device__ inline void cp_async_16(void* dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
               "l"(src), "r"(full ? 16 : 0));
}
// 4 bytes (a float), cached in L1 on the way (.ca: .cg takes only 16); full = false writes 0.
__device__ inline void cp_async_4(float* dst, const float* src, bool full) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(full ? 4 : 0));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N committed groups are still in flight (this thread's copies only: a
// __syncthreads must follow before other threads' rows are read).
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif

// ---- tiles -----------------------------------------------------------------------------------
// Rows row0 .. row0 + ROWS - 1 of a head's (rows, D) 16-bit slice (rows D apart) into a shared
// tile of ROWS x (D + kPad), by THREADS threads in 16-byte pieces; rows >= rows are zeroed.
template <int D, int ROWS, int THREADS, class H>
__device__ inline void load_rows_async(H* dst, const H* head, int row0, int rows) {
  constexpr int kPieces = D / 8;  // 16-byte pieces per row
  static_assert((ROWS * kPieces) % THREADS == 0, "whole rounds of pieces");
#pragma unroll
  for (int round = 0; round < ROWS * kPieces / THREADS; round++) {
    const int e = round * THREADS + threadIdx.x;
    const int r = e / kPieces, c = e % kPieces;
    const bool inside = row0 + r < rows;
    const H* src = inside ? head + (size_t)(row0 + r) * D + c * 8 : head;
    cp_async_16(dst + r * (D + kPad) + c * 8, src, inside);
  }
}

// A row's fragments sit in the 4 lanes of a quad (lanes 4g .. 4g+3): xor 1 and 2 reach them.
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Dropout's keep bits of a lane's 32 elements of a 16 x 64 score tile whose rows are queries
// (forward, dQ): bit 4 nt + e for element e of n-tile nt, at query row[e / 2] and key
// k0 + 8 nt + 2 tig + e % 2 (mma_layout.h c_coord). Drawn in a rolled loop before the tile's
// products, so that the 64-bit hashing never competes with the fragments for registers; key is
// the stream's dropout_key (hashed once per kernel), each row's index base computed once, so an
// element costs one mix64 (kernels/math.h).
__device__ inline uint32_t keep_bits(const AttentionBlock& blk, int b, int h, const int (&row)[2],
                                     int k0, int lane, float p, uint64_t key) {
  const uint64_t top = blk.dropout_row(b, h, row[0]), bottom = blk.dropout_row(b, h, row[1]);
  uint32_t keep = 0;
#pragma unroll 1
  for (int bit = 0; bit < 32; bit++) {
    const mma::Coord at = mma::c_coord(lane, bit & 3);
    const uint64_t index = (at.row < 8 ? top : bottom) + (uint64_t)blk.k.pos.at(k0 + 8 * (bit >> 2) + at.col);
    keep |= (uint32_t)dropout_keep_keyed(key, index, p) << bit;
  }
  return keep;
}

// ---- host-side checks ------------------------------------------------------------------------
inline bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// What the kernels handle: D 64 or 128, whole groups, a positive finite scale, p in [0, 1),
// heads starting on 16-byte boundaries (head strides multiples of 8 elements) and the lse
// layout's whole rows (q.head_stride % D == 0), grid dimensions within CUDA's limits.
inline bool flash_mma_shape_ok(int B, int A, int G, int D, float scale, float dropout_p,
                               const AttentionBlock& blk) {
  return (D == 64 || D == 128) && G > 0 && A > 0 && A % G == 0 && scale > 0.0f &&
         scale < INFINITY && dropout_p >= 0.0f && dropout_p < 1.0f && blk.q.head_stride % 8 == 0 &&
         blk.k.head_stride % 8 == 0 && blk.q.head_stride % D == 0 && B <= 65535 && A <= 65535 &&
         G <= 65535 && blk.q.rows >= 0 && blk.k.rows >= 0;
}

// Whether the current device has the instructions the kernels use (mma.sync m16n8k16, cp.async:
// compute capability 8.0 and later; PTX ISA, "Warp Level Matrix Multiply-Accumulate
// Instructions" and "cp.async"). On a V100 or T4 the entry points launch nothing. Asked once
// (kernels/common.h cuda_compute_capability): a rank keeps its GPU, and every attention call of
// every layer passes here.
inline bool has_mma_sync() {
  static const bool has = kernels::cuda_compute_capability() >= 80;
  return has;
}

// Opts the kernel into `bytes` of dynamic shared memory; false when the device allows less
// (the caller then launches nothing and says "not handled").
template <typename Kernel>
inline bool set_smem(Kernel kernel, size_t bytes) {
  int device = 0, limit = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > (size_t)limit) return false;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  return true;
}

}  // namespace flash_mma
}  // namespace cuda
}  // namespace kernels
