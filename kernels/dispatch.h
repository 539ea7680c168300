// kernels/dispatch.h: how every op of kernels/ops/ is declared once and dispatched.
//
// An op is one function template, whose specializations are its twins, and one dispatcher
// right below it, in the op's family header kernels/ops/<family>.h:
//
//   // out = a + b
//   template <Device Dev, class T> void add(T* out, const T* a, const T* b, size_t n);
//   template <class T> void add(Device d, T* out, const T* a, const T* b, size_t n) {
//     count_kernel(3.0 * n * sizeof(T));
//     ON_DEVICE(add, T)(out, a, b, n);
//   }
//
// T is the storage type of the op's tensors, float or bf16 (kernels/common.h); what is fp32
// whatever the storage (norm statistics, lse, gates, master weights) is spelled float. An op
// with two storage types takes both: gemm<Dev, T, TC> (bf16 A and B, fp32 C: the logits),
// convert<Dev, To, From>. The twins are the template's explicit specializations:
// add<Device::CPU, float> and add<Device::CPU, bf16> in kernels/cpu/<family>.cpp,
// add<Device::CUDA, float> and add<Device::CUDA, bf16> in kernels/cuda/<family>.cu. model/
// and parallel/ call the dispatcher, kernels::add(device, ...); a test that wants one twin
// names it, kernels::add<Device::CPU>(out, a, b, n). A new op touches three files: its family
// header (the declaration, its comment, the dispatcher), its CPU file and its CUDA file.
//
// The dispatcher counts the call (kernels/counters.h), once, from its arguments, at sizeof(T)
// bytes a stored element; then ON_DEVICE(NAME, template arguments) is the twin for the call's
// device `d`, which the dispatcher calls, wrapped in a KernelTimer (kernels/counters.h): the
// call is timed in the phase the dispatcher's count named, by the device's clock (CUDA
// events on the GPU). The twins count nothing: a bf16 CPU twin that runs the fp32 one calls
// the fp32 twin, not its dispatcher.
//
// Two details of C++ shape the pattern:
//  - every dispatcher is a template, even one whose op has no storage type (the memory ops and
//    the fp32-only ones are written `template <class = void>`): a plain inline function would
//    use its twins where the header defines it, and the backend files, which include the
//    header before they define the twins, could no longer specialize them ("specialization
//    after instantiation");
//  - a file that calls a twin sees only the template's declaration and links to the backend
//    file's specialization. The standard asks for an explicit specialization to be declared
//    wherever it is used (no diagnostic required); g++ and nvcc name and link it as any
//    instantiation of the template, which is what this relies on.
//
// In a CPU_ONLY build (g++ -DPARALAB_CPU_ONLY, no CUDA toolkit) ON_DEVICE names the CPU twin
// alone, so no CUDA symbol is referenced, and a call on Device::CUDA throws no_cuda's message.
//
// defines: ON_DEVICE, twin_for, Timed, timed, no_cuda (kernels/device.cpp)
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/common.h"    // Device, bf16
#include "kernels/counters.h"  // count_kernel, count_gemm, add_flops, KernelTimer, ...
#include "kernels/math.h"      // TokenPositions, AttentionRows, AttentionBlock

namespace kernels {

// Throws "--device cuda: this binary was built without CUDA (make CPU_ONLY=1)".
[[noreturn]] void no_cuda();

// A twin bound to its device: calling it runs the twin inside a KernelTimer.
template <class F>
struct Timed {
  Device d;
  const char* op;  // the op's name, for --timing-log-level 2
  F* twin;
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    KernelTimer timer(d, op);
    return twin(std::forward<Args>(args)...);
  }
};
template <class F>
Timed<F> timed(Device d, const char* op, F* twin) {
  return Timed<F>{d, op, twin};
}

#ifndef PARALAB_CPU_ONLY
// The twin for device d; F is the twins' function type.
template <class F>
F* twin_for(Device d, F* cpu, F* cuda) {
  return d == Device::CUDA ? cuda : cpu;
}
#define ON_DEVICE(NAME, ...)                                                                \
  ::kernels::timed(d, #NAME, ::kernels::twin_for(d, NAME<Device::CPU, ##__VA_ARGS__>,        \
                                                 NAME<Device::CUDA, ##__VA_ARGS__>))
#else
template <class F>
F* twin_for(Device d, F* cpu) {
  if (d == Device::CUDA) no_cuda();
  return cpu;
}
#define ON_DEVICE(NAME, ...) \
  ::kernels::timed(d, #NAME, ::kernels::twin_for(d, NAME<Device::CPU, ##__VA_ARGS__>))
#endif

}  // namespace kernels
