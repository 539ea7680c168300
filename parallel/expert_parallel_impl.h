// parallel/expert_parallel_impl.h: the three paths behind parallel/expert_parallel.h's four
// calls, each a strategy object (as nanotron's pipeline engines): a TokenExchange is one
// path's four steps, and expert_parallel.cpp's path_of chooses the path in one place.
//   one rank   the single-rank permute (every expert here)   expert_parallel.cpp
//   alltoall   each row to its expert's rank and back        expert_parallel_alltoall.cpp
//   allgather  every token to every rank, partial sums back  expert_parallel_allgather.cpp
// Each file's header comment is its lesson: the collectives per layer and microbatch, their
// bytes and the buffers they take. Not for other files: expert_parallel.h is the contract.
//
// routing_sizes fills the exchange's sizes (N, k, h, rows, offset, M; the alltoall
// dispatcher's every rank's rows, alltoall_rows) and model/moe.cpp its maps (row_pair, slots)
// before a path's dispatch runs; the path fills the rest (R_ep, R, the local experts' rows and
// its own maps), which its combine and both backwards read.
//
// defines: TokenExchange, alltoall_exchange, allgather_exchange, alltoall_rows,
//          PARALAB_TOKEN_PATH, upload, download
#pragma once
#include <vector>
#include "kernels/ops.h"                // memcpy_from_host, memcpy_to_host
#include "parallel/expert_parallel.h"  // ExpertParallel, LocalRouting, ExpertExchange

namespace paralab {

// One path's four steps, T the hidden rows' element type (float, or bf16 / fp16 with --bf16 /
// --fp16).
template <typename T>
struct TokenExchange {
  virtual ~TokenExchange() = default;
  // u (N, h), gates (N k) -> expert_in (R, h), expert_gates (R), allocated here (activations)
  virtual void dispatch(const ExpertParallel& ep, const T* u, const float* gates,
                        ExpertExchange& x, Buffer<T>& expert_in,
                        Buffer<float>& expert_gates) const = 0;
  // y (R, h) -> out (N, h) "="
  virtual void combine(const ExpertParallel& ep, const ExpertExchange& x, const T* y,
                       T* out) const = 0;
  // dout (N, h) -> dy (R, h) "="
  virtual void combine_backward(const ExpertParallel& ep, const ExpertExchange& x,
                                const T* dout, T* dy) const = 0;
  // dexpert_in (R, h), dexpert_gates (R) -> du (N, h), dgates (N k) "="
  virtual void dispatch_backward(const ExpertParallel& ep, const ExpertExchange& x,
                                 const T* dexpert_in, const float* dexpert_gates, T* du,
                                 float* dgates) const = 0;
};

// The two dispatchers (a path keeps no state: one object serves every call).
template <typename T>
const TokenExchange<T>& alltoall_exchange();
template <typename T>
const TokenExchange<T>& allgather_exchange();
// The alltoall dispatcher's sizes (routing_sizes): every etp_ep rank's rows per expert into
// x.all_rows (all-gathered, one copy; padded to capacity: from the configuration), and this
// rank's among them into x.rows.
void alltoall_rows(const ExpertParallel& ep, const LocalRouting& routing, ExpertExchange& x);

// A path file ends with PARALAB_TOKEN_PATH(its class, its accessor above): the accessor's
// definition, returning the path's one object, for the three element types.
#define PARALAB_TOKEN_PATH(Path, accessor)                  \
  template <typename T>                                     \
  const TokenExchange<T>& accessor() {                      \
    static const Path<T> path;                              \
    return path;                                            \
  }                                                         \
  template const TokenExchange<float>& accessor();          \
  template const TokenExchange<kernels::bf16>& accessor();  \
  template const TokenExchange<kernels::fp16>& accessor();

// A host map to the device (b allocated here in category c), and device routing (counts,
// maps) to the host: a copy counted as the routing's (kernels::count_routing_copy).
inline void upload(kernels::Device dev, Buffer<int>& b, const std::vector<int>& host,
                   Category c) {
  b.allocate(dev, host.size(), c);
  if (!host.empty()) kernels::memcpy_from_host(dev, b.data(), host.data(), host.size() * 4);
}
inline void download(kernels::Device dev, int* host, const int* device, size_t n) {
  if (n == 0) return;
  kernels::memcpy_to_host(dev, host, device, n * 4);
  kernels::count_routing_copy(4.0 * n);
}
inline std::vector<int> download(kernels::Device dev, const Buffer<int>& b) {
  std::vector<int> host(b.size());
  download(dev, host.data(), b.data(), host.size());
  return host;
}

}  // namespace paralab
