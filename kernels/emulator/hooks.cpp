// kernels/emulator/hooks.cpp: where the emulated kernels' loads, stores and function entries
// arrive. The kernels' translation units are compiled with g++'s -fsanitize=thread, which
// calls __tsan_readN / __tsan_writeN (and the _range and unaligned forms) before every memory
// access the optimised code still makes, and -finstrument-functions, which calls
// __cyg_profile_func_enter at every function entry (the Makefile's emulated build). No
// ThreadSanitizer runtime is linked: these definitions are the whole runtime, and they hand
// each access to memcheck (memory_check.h) and each first entry of a launch's kernel to the
// scheduler (simt.cpp: that is how a launch learns its kernel's address). Outside a kernel, or
// inside the emulator's own code, they return at once.
//
// defines: the __tsan_* and __cyg_profile_* entry points g++ emits calls to
#include <cstddef>
#include <cstdint>

#include "kernels/emulator/machine.h"
#include "kernels/emulator/memory_check.h"

namespace emu {
void kernel_entered(const void* function);  // simt.cpp
}

#define SITE ((uintptr_t)__builtin_return_address(0))

extern "C" {

void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

#define EMU_ACCESS(N)                                                                      \
  void __tsan_read##N(void* p) { emu::on_access((uintptr_t)p, N, false, SITE, emu::kAligned); } \
  void __tsan_write##N(void* p) { emu::on_access((uintptr_t)p, N, true, SITE, emu::kAligned); } \
  void __tsan_unaligned_read##N(void* p) { emu::on_access((uintptr_t)p, N, false, SITE, 0); } \
  void __tsan_unaligned_write##N(void* p) { emu::on_access((uintptr_t)p, N, true, SITE, 0); } \
  void __tsan_volatile_read##N(void* p) { emu::on_access((uintptr_t)p, N, false, SITE, emu::kAligned); } \
  void __tsan_volatile_write##N(void* p) { emu::on_access((uintptr_t)p, N, true, SITE, emu::kAligned); }
EMU_ACCESS(1)
EMU_ACCESS(2)
EMU_ACCESS(4)
EMU_ACCESS(8)
EMU_ACCESS(16)
#undef EMU_ACCESS

void __tsan_read_range(void* p, size_t n) {
  if (n > 0) emu::on_access((uintptr_t)p, (uint32_t)n, false, SITE, 0);
}
void __tsan_write_range(void* p, size_t n) {
  if (n > 0) emu::on_access((uintptr_t)p, (uint32_t)n, true, SITE, 0);
}

// Atomics in the kernels' units (library code; the kernels' own atomicAdd is
// cuda_language.h's): done as asked, seen as an access.
#define EMU_ATOMIC(BITS, T)                                                                   \
  T __tsan_atomic##BITS##_load(const volatile T* a, int) {                                    \
    emu::on_access((uintptr_t)a, BITS / 8, false, SITE, emu::kAligned | emu::kAtomic);        \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                              \
  }                                                                                           \
  void __tsan_atomic##BITS##_store(volatile T* a, T v, int) {                                 \
    emu::on_access((uintptr_t)a, BITS / 8, true, SITE, emu::kAligned | emu::kAtomic);         \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                 \
  }                                                                                           \
  T __tsan_atomic##BITS##_fetch_add(volatile T* a, T v, int) {                                \
    emu::on_access((uintptr_t)a, BITS / 8, true, SITE, emu::kAligned | emu::kAtomic);         \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                        \
  }                                                                                           \
  T __tsan_atomic##BITS##_fetch_sub(volatile T* a, T v, int) {                                \
    emu::on_access((uintptr_t)a, BITS / 8, true, SITE, emu::kAligned | emu::kAtomic);         \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                        \
  }                                                                                           \
  T __tsan_atomic##BITS##_exchange(volatile T* a, T v, int) {                                 \
    emu::on_access((uintptr_t)a, BITS / 8, true, SITE, emu::kAligned | emu::kAtomic);         \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                       \
  }                                                                                           \
  int __tsan_atomic##BITS##_compare_exchange_strong(volatile T* a, T* expected, T v, int, int) { \
    emu::on_access((uintptr_t)a, BITS / 8, true, SITE, emu::kAligned | emu::kAtomic);         \
    return __atomic_compare_exchange_n(a, expected, v, false, __ATOMIC_SEQ_CST,               \
                                       __ATOMIC_SEQ_CST);                                     \
  }
EMU_ATOMIC(8, uint8_t)
EMU_ATOMIC(16, uint16_t)
EMU_ATOMIC(32, uint32_t)
EMU_ATOMIC(64, uint64_t)
#undef EMU_ATOMIC
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) {}

void __cyg_profile_func_enter(void* function, void*) {
  emu::Lane* lane = emu::g_lane;
  if (lane == nullptr || lane->in_emulator) return;
  emu::EmulatorCode inside;
  emu::kernel_entered(function);
}
void __cyg_profile_func_exit(void*, void*) {}

}  // extern "C"
