// parallel/expert_parallel.cpp: expert parallelism (GShard, Lepikhin et al. 2020; Megatron-
// Core's moe/token_dispatcher.py, whose two dispatchers these follow).
//
// The idea. An MoE layer's E experts are most of its parameters, and each token uses only k
// of them. Expert parallelism gives each of ep ranks E/ep whole experts (rank r: global
// experts [r E/ep, (r+1) E/ep)) and moves the tokens instead of the weights: every rank
// routes its own N tokens, sends each (token, expert) pair's row to the rank holding that
// expert, the experts run on what arrived, and the results travel back to the tokens' ranks,
// where each token sums its k rows. The ep ranks are data-parallel ranks of the dense layers
// (each has its own tokens), so the expert weights are not replicated over dp any more: the
// rest of the world (expert-data-parallel, edp = world / (etp ep pp)) holds copies.
//
// The expert grid (parallel/topology.h). A second decomposition of the same ranks,
// world = etp x ep x edp x pp with etp fastest, beside the dense tp x cp x dp x pp; the
// pipeline groups are the same in both, and cp ranks become ep or edp ranks (experts do not
// split the sequence). Under tp (with sequence parallelism) every tp rank routes its own N/t
// tokens, and etp is the experts' own choice: etp 1 < tp is Megatron's "MoE parallel
// folding", etp > 1 splits each expert's width like tensor parallelism (fc1's rows, both
// SwiGLU halves alike; fc2's columns), each etp rank running its slice on the rows all of
// them received: their outputs are partial sums over etp.
//
// Two token dispatchers (--moe-token-dispatcher-type, Megatron's), each a file of its own
// whose header comment lists its collectives per layer and microbatch, their bytes and its
// buffers:
//   alltoall   (parallel/expert_parallel_alltoall.cpp) sends each (token, expert) pair's row
//              to the expert's rank over ep and brings the output rows back: M h ~ N k h
//              per rank, following the routing (a popular rank receives more), after an
//              all-gather of the counts that the exchange must wait for.
//   allgather  (parallel/expert_parallel_allgather.cpp, the default) gathers every rank's
//              tokens over the P = etp ep ranks, runs the local experts on the rows they
//              take, and reduce-scatters the partial outputs: P N h per rank, fixed by the
//              configuration; cheaper for small P and k, and no counts to wait for.
// Both hand the local experts the same rows, local expert by local expert and within one
// expert source by source, each source's rows in its own order (kept pairs in token order,
// then padding): the experts compute the same values either way, and with one rank the
// order is the single-rank permutation, the third path below.
//
// Capacity (--moe-expert-capacity-factor) drops per source rank, before dispatch, on the
// rank's own N tokens (Megatron's router does the same): runs with the same data-parallel
// layout drop the same pairs.
//
// Gradients (two DataParallel objects, parallel/data_parallel.h: the dense parameters over
// dp x cp, the experts over edp; their units mirror each other, model/param_table.h). An
// expert's gradient sums every token routed to it from every ep rank, each scaled like the
// dense loss by 1 / (k dp) (Megatron scales expert gradients by the dense data-parallel size
// too): summed over edp it is the gradient of the global batch's mean loss. ZeRO shards the
// expert states over edp and the dense ones over dp x cp; no bucket mixes the two. The
// gradient norm counts each expert element once: on its owners, summed over ep (etp_ep with
// the widths split).
//
// This file: the one-rank path (every expert here, nothing communicated: the permutation is
// the dispatch) and the four calls of expert_parallel.h, each handing its step to the path
// that path_of chooses (the paths: parallel/expert_parallel_impl.h).
#include "parallel/expert_parallel.h"
#include <stdexcept>
#include "kernels/ops.h"
#include "parallel/expert_parallel_impl.h"  // TokenExchange, the dispatchers, download

namespace paralab {

const char* dispatcher_name(TokenDispatcher d) {
  return d == TokenDispatcher::ALLTOALL ? "alltoall" : "allgather";
}

namespace {

// Every expert on this rank, whole: dispatch is the single-rank permute (each pair's row
// into its expert's rows), combine the unpermute (each token sums its k rows), and each
// backward the other one.
template <typename T>
struct OneRank final : TokenExchange<T> {
  void dispatch(const ExpertParallel& ep, const T* u, const float* gates, ExpertExchange& x,
                Buffer<T>& expert_in, Buffer<float>& expert_gates) const override {
    x.R = x.R_ep = x.M;
    x.local_rows = x.rows;
    x.local_offset = x.offset;
    expert_in.allocate(ep.device, (size_t)x.R * x.h, Category::ACTIVATIONS);
    expert_gates.allocate(ep.device, x.R, Category::ACTIVATIONS);
    kernels::moe_permute(ep.device, expert_in.data(), expert_gates.data(), u, gates,
                         x.row_pair.data(), x.M, x.h, x.k, x.fused);
  }
  void combine(const ExpertParallel& ep, const ExpertExchange& x, const T* y,
               T* out) const override {
    kernels::moe_unpermute(ep.device, out, y, x.slots.data(), x.N, x.h, x.k, x.fused);
  }
  // unpermute's backward is permute (rows only: the gates are forward's)
  void combine_backward(const ExpertParallel& ep, const ExpertExchange& x, const T* dout,
                        T* dy) const override {
    kernels::moe_permute(ep.device, dy, nullptr, dout, nullptr, x.row_pair.data(), x.M, x.h,
                         x.k, x.fused);
  }
  // permute's backward is unpermute, for the rows and the gates
  void dispatch_backward(const ExpertParallel& ep, const ExpertExchange& x, const T* dexpert_in,
                         const float* dexpert_gates, T* du, float* dgates) const override {
    kernels::moe_unpermute(ep.device, du, dexpert_in, x.slots.data(), x.N, x.h, x.k, x.fused);
    kernels::moe_unpermute_gates(ep.device, dgates, dexpert_gates, x.slots.data(), x.N * x.k);
  }
};

// The path of every call: one rank when no token leaves it, else the configured dispatcher.
template <typename T>
const TokenExchange<T>& path_of(const ExpertParallel& ep) {
  static const OneRank<T> one_rank;
  if (!ep.distributed()) return one_rank;
  if (ep.dispatcher == TokenDispatcher::ALLTOALL) return alltoall_exchange<T>();
  return allgather_exchange<T>();
}

}  // namespace

void routing_sizes(const ExpertParallel& ep, const LocalRouting& routing, ExpertExchange& x) {
  const int E = routing.E;
  if (ep.distributed() && E % ep.size() != 0)
    throw std::logic_error("expert parallelism: E % ep != 0");
  x.N = routing.N;
  x.k = routing.k;
  x.h = routing.h;
  x.padded = routing.padded_rows >= 0;
  if (ep.distributed() && ep.dispatcher == TokenDispatcher::ALLTOALL) {
    alltoall_rows(ep, routing, x);
  } else if (routing.padded_rows >= 0) {
    x.rows.assign(E, routing.padded_rows);  // padded to capacity: known, nothing copied
  } else {
    x.rows.resize(E);  // the grouped GEMM's sizes: the one copy
    download(ep.device, x.rows.data(), routing.rows, E);
  }
  x.offset.assign(E + 1, 0);
  for (int e = 0; e < E; ++e) x.offset[e + 1] = x.offset[e] + x.rows[e];
  x.M = x.offset[E];
}

template <typename T>
void dispatch_tokens(const ExpertParallel& ep, bool fused, const T* u, const float* gates,
                     ExpertExchange& x, Buffer<T>& expert_in, Buffer<float>& expert_gates) {
  x.fused = fused;
  path_of<T>(ep).dispatch(ep, u, gates, x, expert_in, expert_gates);
}

template <typename T>
void combine_tokens(const ExpertParallel& ep, const ExpertExchange& x, const T* y, T* out) {
  path_of<T>(ep).combine(ep, x, y, out);
}

template <typename T>
void combine_tokens_backward(const ExpertParallel& ep, const ExpertExchange& x, const T* dout,
                             T* dy) {
  path_of<T>(ep).combine_backward(ep, x, dout, dy);
}

template <typename T>
void dispatch_tokens_backward(const ExpertParallel& ep, const ExpertExchange& x,
                              const T* dexpert_in, const float* dexpert_gates, T* du,
                              float* dgates) {
  path_of<T>(ep).dispatch_backward(ep, x, dexpert_in, dexpert_gates, du, dgates);
}

#define PARALAB_EXPERT_PARALLEL(T)                                                          \
  template void dispatch_tokens(const ExpertParallel&, bool, const T*, const float*,         \
                                ExpertExchange&, Buffer<T>&, Buffer<float>&);              \
  template void combine_tokens(const ExpertParallel&, const ExpertExchange&, const T*, T*); \
  template void combine_tokens_backward(const ExpertParallel&, const ExpertExchange&,       \
                                        const T*, T*);                                      \
  template void dispatch_tokens_backward(const ExpertParallel&, const ExpertExchange&,      \
                                         const T*, const float*, T*, float*);
PARALAB_EXPERT_PARALLEL(float)
PARALAB_EXPERT_PARALLEL(kernels::bf16)
PARALAB_EXPERT_PARALLEL(kernels::fp16)
#undef PARALAB_EXPERT_PARALLEL

}  // namespace paralab
