// kernels/emulator/cuda_language.h: CUDA C++'s extensions to C++, for g++, so that paralab's
// kernels (kernels/cuda/*.cu) compile unchanged into the emulated device (make emulated).
//
// What nvcc gives a kernel and what it becomes here:
//   __global__, __device__, __host__    function qualifiers: a kernel is a plain function that
//                                       every emulated thread calls (never inlined: its address
//                                       is its identity, as cudaFuncSetAttribute takes it)
//   threadIdx, blockIdx, blockDim,      calls into the SIMT machine (kernels/emulator/simt.cpp)
//   gridDim                             for the running thread, pure within one thread's run
//   __shared__ variables                rewritten by kernels/emulator/translate.py into
//                                       references into the block's shared memory
//   kernel<<<grid, block, smem, s>>>(a) rewritten into emu::launch (below)
//   __syncthreads, __syncwarp,          the block barrier and the warp collectives: each
//   __shfl*_sync, __ballot_sync         thread waits at a rendezvous, the last to arrive
//                                       computes what the CUDA guide / PTX ISA says
//   atomicAdd                           checked like any access, then done (one host thread
//                                       runs a block's threads, so it is atomic)
//   the PTX of kernels/cuda/flash_mma.cuh  its emulated twins, kernels/emulator/ptx.h
// Every call here that touches the machine is out of line (kernels/emulator/*.cpp, compiled
// without the access hooks): the kernel's own loads and stores are what the hooks see.
//
// __CUDA_ARCH__ is 900 (sm_90) in the emulated kernels' translation units (the Makefile).
//
// defines: the qualifiers and built-ins above, dim3, uint3, emu::launch, and the device math
//          functions the kernels call (__expf, __fmul_rn, __popc, min/max, ...)
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__ __attribute__((noinline))
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// kernels/emulator/translate.py rewrites every __shared__ declaration; one left over is a
// declaration the translation did not recognise, and must not compile into a thread-local.
#define __shared__ __shared__declaration_not_translated_by_kernels_emulator_translate_py
#define __constant__ __constant__memory_is_not_emulated

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

// The vector types, aligned as CUDA aligns them (a float4 load is one 16-byte access).
struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) int4 { int x, y, z, w; };
struct __align__(8) uint2 { unsigned int x, y; };
struct __align__(16) uint4 { unsigned int x, y, z, w; };
struct __align__(16) double2 { double x, y; };
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline int2 make_int2(int x, int y) { return int2{x, y}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

struct CUstream_st;

namespace emu {

// ---- built-in variables: the running thread's (kernels/emulator/simt.cpp) -----------------
// `const`: within one thread's run of the kernel the value never changes, so the compiler may
// keep it in a register.
__attribute__((const)) uint3 thread_idx();
__attribute__((const)) uint3 block_idx();
__attribute__((const)) dim3 block_dim();
__attribute__((const)) dim3 grid_dim();

// ---- synchronisation and warp collectives ------------------------------------------------
void syncthreads();
int syncthreads_reduce(int predicate, int op);  // 0 or, 1 and, 2 count
void syncwarp(unsigned mask);
unsigned ballot(unsigned mask, int predicate);
// One shuffle of `bytes` (4 or 8) from `in` to `out`: kind 0 indexed, 1 up, 2 down, 3 xor.
void shuffle(unsigned mask, const void* in, void* out, size_t bytes, int kind, int arg, int width);
int atomic_add_int(int* p, int v);
unsigned atomic_add_unsigned(unsigned* p, unsigned v);
unsigned long long atomic_add_u64(unsigned long long* p, unsigned long long v);
float atomic_add_float(float* p, float v);
double atomic_add_double(double* p, double v);
int atomic_max_int(int* p, int v);
int atomic_cas_int(int* p, int compare, int v);
size_t shared_offset(const void* p);  // __cvta_generic_to_shared

// ---- __shared__ variables (kernels/emulator/translate.py) ---------------------------------
// A declaration `__shared__ T name[N];` becomes a function-local constant-initialised
// SharedVariable (one per declaration and template instantiation, as nvcc makes one variable
// per instantiation) and a reference to the bytes the running block gives it.
struct SharedVariable {
  const char* name;
};
void* shared_variable(const SharedVariable& declared, size_t bytes, size_t align);
void* dynamic_shared();  // extern __shared__ T name[]: the launch's dynamic shared memory

// ---- launches ----------------------------------------------------------------------------
// kernel<<<grid, block, smem, stream>>>(args) becomes
//   emu::launch(emu::LaunchConfig(grid, block, smem, stream), EMU_LAUNCH_SITE("kernel"),
//               [](auto&... a) { kernel(a...); }, args...)
// The arguments are evaluated once and copied, as into the GPU's parameter space; every thread
// calls the kernel on those copies (so template arguments are deduced as nvcc deduces them).
struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes;
  CUstream_st* stream;
  LaunchConfig(dim3 g, dim3 b, size_t smem = 0, CUstream_st* s = nullptr)
      : grid(g), block(b), shared_bytes(smem), stream(s) {}
};
struct LaunchSite {
  const char* file;
  int line;
  const char* caller;  // __PRETTY_FUNCTION__ of the launching function: its template arguments
  const char* kernel;  // the kernel expression as written
};
#define EMU_LAUNCH_SITE(kernel) ::emu::LaunchSite{__FILE__, __LINE__, __PRETTY_FUNCTION__, kernel}

// Runs body(context) as every thread of the grid (kernels/emulator/simt.cpp); params is the
// copied arguments, the kernel's parameter space (readable by the kernel's threads).
void run_launch(const LaunchConfig& config, const LaunchSite& site, void (*body)(void*),
                void* context, const void* params, size_t params_bytes);

template <class Body, class... Args>
void launch(const LaunchConfig& config, const LaunchSite& site, Body body, Args&&... args) {
  struct Call {  // the kernel's parameter space: the threads read the arguments from here
    Body body;
    std::tuple<std::decay_t<Args>...> params;  // an array argument decays, as in a launch
    static void run(void* self) {
      Call* call = static_cast<Call*>(self);
      std::apply(call->body, call->params);
    }
  } call{body, std::tuple<std::decay_t<Args>...>(args...)};
  run_launch(config, site, &Call::run, &call, &call, sizeof(call));
}

}  // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())
constexpr int warpSize = 32;

inline void __syncthreads() { ::emu::syncthreads(); }
inline int __syncthreads_or(int p) { return ::emu::syncthreads_reduce(p, 0); }
inline int __syncthreads_and(int p) { return ::emu::syncthreads_reduce(p, 1); }
inline int __syncthreads_count(int p) { return ::emu::syncthreads_reduce(p, 2); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::emu::syncwarp(mask); }
inline unsigned __ballot_sync(unsigned mask, int p) { return ::emu::ballot(mask, p); }
inline int __any_sync(unsigned mask, int p) { return ::emu::ballot(mask, p) != 0; }
inline int __all_sync(unsigned mask, int p) { return ::emu::ballot(mask, p) == mask; }

template <class T>
T emu_shuffle(unsigned mask, T v, int kind, int arg, int width) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "a shuffle moves 4 or 8 bytes");
  T out;
  ::emu::shuffle(mask, &v, &out, sizeof(T), kind, arg, width);
  return out;
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return emu_shuffle(mask, v, 0, src, width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return emu_shuffle(mask, v, 1, (int)delta, width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return emu_shuffle(mask, v, 2, (int)delta, width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return emu_shuffle(mask, v, 3, lane_mask, width);
}

inline int atomicAdd(int* p, int v) { return ::emu::atomic_add_int(p, v); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return ::emu::atomic_add_unsigned(p, v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return ::emu::atomic_add_u64(p, v);
}
inline float atomicAdd(float* p, float v) { return ::emu::atomic_add_float(p, v); }
inline double atomicAdd(double* p, double v) { return ::emu::atomic_add_double(p, v); }
inline int atomicMax(int* p, int v) { return ::emu::atomic_max_int(p, v); }
inline int atomicCAS(int* p, int compare, int v) { return ::emu::atomic_cas_int(p, compare, v); }

inline size_t __cvta_generic_to_shared(const void* p) { return ::emu::shared_offset(p); }
template <class T>
inline T __ldg(const T* p) {
  return *p;
}

// ---- device math: what the CUDA math API gives a kernel beyond <cmath> ---------------------
// The _rn forms are IEEE round-to-nearest (the emulated kernels' translation units are built
// with -ffp-contract=off, so no multiply-add fuses unless fmaf asks for it). The fast
// approximations (__expf, __logf, __fdividef) are computed exactly here: the GPU's are within a
// few ulp of these (CUDA C++ Programming Guide, "Intrinsic Functions").
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __uint_as_float(unsigned u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }

// CUDA's device code has min and max for each arithmetic type (CUDA Math API, "Integer
// Intrinsics" and the overloads in crt/math_functions.hpp); std::min would refuse int and
// unsigned mixed, which CUDA takes by the usual conversions.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
