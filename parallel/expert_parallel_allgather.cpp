// parallel/expert_parallel_allgather.cpp: the allgather token dispatcher (the default,
// Megatron-Core's MoEAllGatherTokenDispatcher). Every rank gathers every rank's tokens, picks
// out the rows its own experts take, and gives back a partial output for every token, which a
// reduce-scatter sums and returns to the tokens' ranks. The idea, the expert grid and how the
// paths are chosen: parallel/expert_parallel.cpp.
//
// Per MoE layer and microbatch, N tokens of h, k experts each, es bytes per element (4, or 2
// with --bf16), R the rows this rank's experts run, over the P = etp ep ranks of etp_ep:
//
//   forward   all-gather  etp_ep  the hidden states u                     P N h es
//             all-gather  etp_ep  the gates                               P N k 4
//             all-gather  etp_ep  the routing map: per rank its rows per  P (E + N k) 4
//                                 expert and each pair's row (int32)
//             (each rank picks its experts' rows out of the gathered tokens: the host takes
//             every source's rows per expert, one strided copy of P E x4, none padded to
//             capacity, to size its experts' GEMMs and place each source's ranges; the maps
//             source_pair and local_slots are built on the device, kernels::moe_local_maps)
//             reduce-scatter etp_ep  the output, each rank's partial sums  P N h es
//   backward  all-gather  etp_ep  the output gradient                     P N h es
//             reduce-scatter etp_ep  the input gradient                   P N h es
//             reduce-scatter etp_ep  the gates' gradient                  P N k 4
// Every size is fixed by the configuration, whatever the routing; each rank moves P N h
// where the all-to-all moves M h ~ N k h: cheaper for small P and k, and no counts to wait
// for. The reduce-scatter sums the etp slices' partial outputs and the ep ranks' experts in
// one. Megatron gathers (N, E) probabilities and a boolean map; paralab gathers the same
// information as the k gates and the pair-to-row map.
//
// Buffers (category workspace unless said; the plan's moe_memory lists the same):
//   forward   gathered P N h es + P N k x4 + P (E + N k) x4 (the slots copied into this rank's
//             slot of the map on the device), then the maps source_pair R x4
//             and local_slots P N k x4 (activations); combine: the full output P N h es.
//   backward  gathered P N h es; the full input gradient P N h es, then the full gate
//             gradient P N k x4.
//
// defines: allgather_exchange (the class AllGather)
#include <algorithm>
#include <vector>
#include "kernels/ops.h"
#include "parallel/expert_parallel_impl.h"  // TokenExchange, PARALAB_TOKEN_PATH, upload, download

namespace paralab {

namespace {

using kernels::Device;
constexpr Category kWorkspace = Category::WORKSPACE;
constexpr Category kActivations = Category::ACTIVATIONS;

// From every etp_ep rank's rows per expert (host, P E), this rank's local experts' rows and
// offsets and R, and the ranges moe_local_maps places each gathered pair by: per source j and
// local expert e, where e's rows start in j's permutation (first_row, L + 1 per source) and in
// the local order (local_base, L per source). Local order: local expert by local expert,
// source by source, each source's rows in its order.
void local_ranges(const ExpertParallel& ep, const std::vector<int>& rows, int E, int P,
                  ExpertExchange& x, std::vector<int>& first_row, std::vector<int>& local_base) {
  const int L = ep.local_experts(E), first = ep.first_expert(E);
  x.local_rows.assign(L, 0);
  x.local_offset.assign(L + 1, 0);
  for (int e = 0; e < L; ++e) {
    for (int j = 0; j < P; ++j) x.local_rows[e] += rows[(size_t)j * E + first + e];
    x.local_offset[e + 1] = x.local_offset[e] + x.local_rows[e];
  }
  x.R = x.local_offset[L];
  first_row.assign((size_t)P * (L + 1), 0);
  local_base.assign((size_t)P * L, 0);
  for (int j = 0; j < P; ++j) {
    const int* mine = rows.data() + (size_t)j * E;
    int at = 0;  // the source's rows of the experts before
    for (int e = 0; e < first; ++e) at += mine[e];
    for (int e = 0; e <= L; ++e) {
      first_row[(size_t)j * (L + 1) + e] = at;
      if (e < L) at += mine[first + e];
    }
  }
  for (int e = 0; e < L; ++e) {
    int base = x.local_offset[e];
    for (int j = 0; j < P; ++j) {
      local_base[(size_t)j * L + e] = base;
      base += rows[(size_t)j * E + first + e];
    }
  }
}

template <typename T>
struct AllGather final : TokenExchange<T> {
  // Every rank's tokens, gates and routing map; this rank's experts' rows picked out of them
  // (the two large gathers run while the map is read).
  void dispatch(const ExpertParallel& ep, const T* u, const float* gates, ExpertExchange& x,
                Buffer<T>& expert_in, Buffer<float>& expert_gates) const override {
    const Device dev = ep.device;
    const int N = x.N, k = x.k, E = (int)x.rows.size(), h = x.h;
    const int P = ep.etp_ep->size(), me = ep.etp_ep->rank();  // etp x ep ranks
    const size_t per_rank = (size_t)E + (size_t)N * k;
    Buffer<T> all_u(dev, (size_t)P * N * h, kWorkspace);
    Buffer<float> all_gates(dev, (size_t)P * N * k, kWorkspace);
    Buffer<int> all_routing(dev, P * per_rank, kWorkspace);
    // this rank's map in its slot: the rows per expert (the host has them), the slots (device)
    int* slot = all_routing.data() + me * per_rank;
    kernels::memcpy_from_host(dev, slot, x.rows.data(), (size_t)E * 4);
    kernels::memcpy_device(dev, slot + E, x.slots.data(), (size_t)N * k * 4);
    CommHandle hidden =
        ep.etp_ep->all_gather_async(u, all_u.data(), (size_t)N * h, comm_type<T>());
    CommHandle probs = ep.etp_ep->all_gather_async(gates, all_gates.data(), (size_t)N * k);
    ep.etp_ep->all_gather(all_routing.data() + me * per_rank, all_routing.data(), per_rank,
                          DType::I32);
    // every source's rows per expert, out of each block of the map in one strided copy
    // (padded to capacity all known: min(C, N) each)
    std::vector<int> rows((size_t)P * E);
    if (x.padded) {
      for (int j = 0; j < P; ++j) std::copy(x.rows.begin(), x.rows.end(), rows.begin() + j * E);
    } else {
      kernels::memcpy_to_host_strided(dev, rows.data(), all_routing.data(), (size_t)E * 4,
                                      per_rank * 4, P);
      kernels::count_routing_copy(4.0 * P * E);
    }
    std::vector<int> first_row, local_base;
    local_ranges(ep, rows, E, P, x, first_row, local_base);
    x.R_ep = x.R;
    x.source_pair.allocate(dev, x.R, kActivations);
    x.local_slots.allocate(dev, (size_t)P * N * k, kActivations);
    kernels::moe_local_maps(dev, x.source_pair.data(), x.local_slots.data(),
                            all_routing.data() + E, per_rank, P, N * k,
                            ep.local_experts(E), first_row.data(), local_base.data(), x.R);
    hidden.wait();
    probs.wait();
    expert_in.allocate(dev, (size_t)x.R * h, kActivations);
    expert_gates.allocate(dev, x.R, kActivations);
    kernels::moe_permute(dev, expert_in.data(), expert_gates.data(), all_u.data(),
                         all_gates.data(), x.source_pair.data(), x.R, h, k, x.fused);
  }

  // This rank's partial sums for every gathered token, summed over the group and scattered
  // back to the tokens' ranks.
  void combine(const ExpertParallel& ep, const ExpertExchange& x, const T* y,
               T* out) const override {
    const int P = ep.etp_ep->size();
    Buffer<T> full(ep.device, (size_t)P * x.N * x.h, kWorkspace);
    kernels::moe_unpermute(ep.device, full.data(), y, x.local_slots.data(), P * x.N, x.h, x.k,
                           x.fused);
    ep.etp_ep->reduce_scatter(full.data(), out, (size_t)x.N * x.h, comm_type<T>());
  }

  // The reduce-scatter's backward is an all-gather: every token's output gradient, this
  // rank's experts' rows picked out of it.
  void combine_backward(const ExpertParallel& ep, const ExpertExchange& x, const T* dout,
                        T* dy) const override {
    const int P = ep.etp_ep->size();
    Buffer<T> gathered(ep.device, (size_t)P * x.N * x.h, kWorkspace);
    ep.etp_ep->all_gather(dout, gathered.data(), (size_t)x.N * x.h, comm_type<T>());
    kernels::moe_permute(ep.device, dy, nullptr, gathered.data(), nullptr, x.source_pair.data(),
                         x.R, x.h, x.k, x.fused);
  }

  // The all-gathers' backward are reduce-scatters: every token's input and gate gradients
  // from this rank's experts, summed over the group back on the tokens' ranks.
  void dispatch_backward(const ExpertParallel& ep, const ExpertExchange& x, const T* dexpert_in,
                         const float* dexpert_gates, T* du, float* dgates) const override {
    const Device dev = ep.device;
    const int P = ep.etp_ep->size(), h = x.h, pairs = x.N * x.k;
    {
      Buffer<T> full(dev, (size_t)P * x.N * h, kWorkspace);
      kernels::moe_unpermute(dev, full.data(), dexpert_in, x.local_slots.data(), P * x.N, h, x.k,
                             x.fused);
      ep.etp_ep->reduce_scatter(full.data(), du, (size_t)x.N * h, comm_type<T>());
    }
    Buffer<float> full_gates(dev, (size_t)P * pairs, kWorkspace);
    kernels::moe_unpermute_gates(dev, full_gates.data(), dexpert_gates, x.local_slots.data(),
                                 P * pairs);
    ep.etp_ep->reduce_scatter(full_gates.data(), dgates, pairs);
  }
};

}  // namespace

PARALAB_TOKEN_PATH(AllGather, allgather_exchange)

}  // namespace paralab
