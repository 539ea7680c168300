// parallel/expert_parallel.h: expert parallelism, the experts of an MoE layer spread over ep
// ranks, and the two token dispatchers that bring every token to its experts and back.
// The lesson (the expert grid, the two dispatchers compared, how the expert gradients are
// reduced) is parallel/expert_parallel.cpp's header comment; each dispatcher's collectives,
// bytes and buffers head its own file, parallel/expert_parallel_alltoall.cpp and
// parallel/expert_parallel_allgather.cpp.
//
// How model/moe.cpp uses it, per MoE layer and microbatch, after its router and the device's
// counts per expert (kernels/ops/moe_dispatch.h, handed over as a LocalRouting):
//   forward   routing_sizes     the sizes the host launches with: this rank's rows per expert
//                               and the permuted rows M (then model/moe.cpp builds the maps
//                               row_pair, slots on the device, into the exchange)
//             dispatch_tokens   u (N, h), gates (N k) -> the local experts' input rows
//                               (R, h) and gates (R), local expert by local expert
//             ... the local experts run on their rows (ExpertExchange::local_rows) ...
//             combine_tokens    their output rows (R, h) -> out (N, h)
//   backward  combine_tokens_backward   dout (N, h) -> the rows' output gradient (R, h)
//             ... the experts' backward ...
//             dispatch_tokens_backward  their input and gate gradients (R, h), (R) ->
//                                       du (N, h), dgates (N k)
// With one rank (no ep group) the same calls are the single-rank permute and unpermute, so
// there is one path for every configuration.
//
// The host copies (each counted, kernels::count_routing_copy), per MoE layer and microbatch:
//   one rank, allgather  the rank's E rows per expert (the grouped GEMM's sizes), E x4
//   alltoall             every etp_ep rank's rows per expert, after their all-gather: P E x4
//                        (the all-to-all's send and receive sizes, its own rows among them)
//   allgather            also every source's rows per expert out of the gathered
//                        routing map, one strided copy of P E x4 (its local experts' sizes and
//                        ranges); the local maps (source_pair, local_slots) are built on the
//                        device (kernels::moe_local_maps)
// Padded to capacity (--moe-pad-expert-input-to-capacity) every size follows from the
// configuration: no copy and no all-gather of the counts. Megatron syncs the same counts for
// the same reasons.
//
// defines: TokenDispatcher, dispatcher_name, ExpertParallel, LocalRouting, ExpertExchange,
//          routing_sizes, dispatch_tokens, combine_tokens, combine_tokens_backward,
//          dispatch_tokens_backward
#pragma once
#include <cstddef>
#include <vector>
#include "kernels/common.h"
#include "measure/ledger.h"
#include "parallel/comm.h"

namespace paralab {

// --moe-token-dispatcher-type (Megatron's names; allgather is Megatron's default).
enum class TokenDispatcher { ALLGATHER, ALLTOALL };
const char* dispatcher_name(TokenDispatcher d);  // "allgather", "alltoall"

// The expert-parallel groups of this rank (parallel/topology.h's expert grid). Without ep
// and etp (size 1 both) every expert is local and whole, and nothing is communicated.
struct ExpertParallel {
  Communicator* ep = nullptr;      // the tokens' all-to-all (alltoall)
  Communicator* etp_ep = nullptr;  // the counts' all-gather; the allgather dispatcher's
                                   // gathers and reduce-scatters (ep's members at etp 1)
  TokenDispatcher dispatcher = TokenDispatcher::ALLGATHER;
  kernels::Device device = kernels::Device::CPU;
  // The experts' tensors have their own data parallelism over the expert grid's edp
  // (ParallelConfig::experts_apart), else they are dense parameters.
  bool apart = false;
  Communicator* etp = nullptr;  // each expert's width split over it (fc1 rows, fc2 columns)

  int size() const { return ep ? ep->size() : 1; }
  int rank() const { return ep ? ep->rank() : 0; }
  int etp_size() const { return etp ? etp->size() : 1; }
  int etp_rank() const { return etp ? etp->rank() : 0; }
  // Whether tokens leave the rank at all (else dispatch is the one-rank permute).
  bool distributed() const { return size() > 1 || etp_size() > 1; }
  // Of E experts, rank r holds [r E/ep, (r+1) E/ep): global ids in ep-rank order.
  int local_experts(int E) const { return E / size(); }
  int first_expert(int E) const { return rank() * local_experts(E); }
};

// One microbatch's routing on this rank, as the device holds it: rows[e] (device, E int32)
// the rows expert e (global id) takes of this rank's tokens: its kept pairs in token order,
// then its padding rows (kernels::moe_dispatch_offsets). padded_rows >= 0: every expert takes
// that many, min(C, N) (padding to capacity), known without looking.
struct LocalRouting {
  int N = 0, k = 0, E = 0, h = 0;
  const int* rows = nullptr;
  int padded_rows = -1;
};

// What one microbatch's exchange keeps from its forward for the combine and the backward
// (device maps category activations; the plan counts them, plan/moe_memory.h).
struct ExpertExchange {
  int N = 0, k = 0, h = 0;
  int M = 0;     // rows this rank's tokens sent (its permuted rows)
  std::vector<int> rows, offset;  // (E), (E + 1) host: this rank's rows per global expert, and
                                  // the first permuted row of each
  bool padded = false;  // padded to capacity: every rank's rows are min(C, N), known
  std::vector<int> all_rows;      // alltoall (P E) host: every etp_ep rank's rows, group order
  int R_ep = 0;  // alltoall: rows it received over ep (its block; = R at etp 1)
  int R = 0;     // rows its local experts run: every etp peer's block (received over ep)
  bool fused = false;                         // --moe-permute-fusion
  std::vector<int> local_rows, local_offset;  // (E/ep), (E/ep + 1): per local expert
  std::vector<size_t> send_rows, recv_rows;   // alltoall: rows to / from each ep rank
  std::vector<size_t> etp_rows;               // alltoall: each etp peer's block (its R_ep)
  Buffer<int> row_pair;     // (M) this rank's permutation (every dispatcher), built on the
  Buffer<int> slots;        // (N k) device by model/moe.cpp (kernels::moe_dispatch_scatter)
  Buffer<int> regroup;      // alltoall (R): local row r is received (at etp > 1: gathered)
                            // row regroup[r]
  Buffer<int> ungroup;      // alltoall (R): its inverse, received order <- local order
  Buffer<int> source_pair;  // allgather (R): each local row's pair among the etp ep N k
                            // gathered pairs (-1: padding)
  Buffer<int> local_slots;  // allgather (etp ep N k): each gathered pair's local row, -1 when
                            // another rank's expert (or nobody) takes it
};

// Forward, first: the exchange's N, k, h, this rank's rows per expert and offsets on the host
// and M (the header's copies), before model/moe.cpp allocates and writes x.row_pair (M) and
// x.slots (N k).
void routing_sizes(const ExpertParallel& ep, const LocalRouting& routing, ExpertExchange& x);
// Forward, then: the rows to the local experts. expert_in (R, h) and expert_gates (R) are
// allocated here (category activations).
template <typename T>
void dispatch_tokens(const ExpertParallel& ep, bool fused, const T* u, const float* gates,
                     ExpertExchange& x, Buffer<T>& expert_in, Buffer<float>& expert_gates);
// y (R, h): the local experts' output rows (gated) -> out (N, h) "=", each token's k rows
// summed.
template <typename T>
void combine_tokens(const ExpertParallel& ep, const ExpertExchange& x, const T* y, T* out);
// Backward of combine: dout (N, h) -> dy (R, h) "=" (the caller's buffer).
template <typename T>
void combine_tokens_backward(const ExpertParallel& ep, const ExpertExchange& x, const T* dout,
                             T* dy);
// Backward of dispatch: the gradients of expert_in (R, h) and expert_gates (R) -> du (N, h)
// "=" and dgates (N k) "=".
template <typename T>
void dispatch_tokens_backward(const ExpertParallel& ep, const ExpertExchange& x,
                              const T* dexpert_in, const float* dexpert_gates, T* du,
                              float* dgates);

}  // namespace paralab
