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
// Per MoE layer and microbatch, N tokens of h, k experts each, es bytes per element
// (4, or 2 with --bf16), M rows this rank sends (its permuted rows: N k dropless, E min(C, N)
// padded to capacity C), R_ep rows it receives over ep (its block), R the rows its experts
// run (every etp peer's block: R = R_ep at etp 1), P = etp ep:
//
//   alltoall (--moe-token-dispatcher-type alltoall)
//     forward   all-gather  etp_ep  the per-expert row counts, E int32      payload P E 4
//               all-to-all-v ep     the rows, dispatch                      M h es
//               all-to-all-v ep     their gates (Megatron's probabilities)  M 4
//               [etp > 1: all-to-all-v etp, every block to every etp peer   etp R_ep h es
//                (an all-gather-v; the comm layer has none), rows and gates + etp R_ep 4]
//               (regroup the rows by local expert, the experts, back to the block order)
//               [etp > 1: all-to-all-v etp, each block's partial outputs to R h es
//                its owner, summed there in etp rank order: a reduce-scatter-v]
//               all-to-all-v ep     the output rows, combine                R_ep h es
//     backward  all-to-all-v ep     the output rows' gradient               M h es
//               [etp > 1: all-to-all-v etp, gathered again                  etp R_ep h es]
//               [etp > 1: all-to-all-v etp, the partial input and gate      R h es + R 4
//                gradients summed back]
//               all-to-all-v ep     the input rows' gradient, back          R_ep h es
//               all-to-all-v ep     the gates' gradient, back               R_ep 4
//     An all-to-all's backward is the all-to-all with the send and receive counts swapped,
//     so backward mirrors forward. Bytes follow the routing: a rank whose experts are
//     popular receives (and sends back) more; the report prints min / mean / max of R.
//
//   allgather (the default, Megatron's), over the P = etp ep ranks
//     forward   all-gather  etp_ep  the hidden states u                     P N h es
//               all-gather  etp_ep  the gates                               P N k 4
//               all-gather  etp_ep  the routing map: per rank its rows per  P (E + N k) 4
//                                   expert and each pair's row (int32)
//               (each rank picks its experts' rows out of the gathered tokens)
//               reduce-scatter etp_ep  the output, each rank's partial sums  P N h es
//     backward  all-gather  etp_ep  the output gradient                     P N h es
//               reduce-scatter etp_ep  the input gradient                   P N h es
//               reduce-scatter etp_ep  the gates' gradient                  P N k 4
//     Every size is fixed by the configuration, whatever the routing; each rank moves
//     P N h where the all-to-all moves M h ~ N k h: cheaper for small P and k, and no
//     counts to wait for. The reduce-scatter sums the etp slices' partial outputs and the
//     ep ranks' experts in one. Megatron gathers (N, E) probabilities and a boolean map;
//     paralab gathers the same information as the k gates and the pair-to-row map.
//
// Both dispatchers hand the local experts the same rows, local expert by local expert and
// within one expert source by source, each source's rows in its own order (kept pairs in
// token order, then padding): the experts compute the same values either way, and with one
// rank the order is the single-rank permutation.
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
// Buffers (category workspace unless said; the plan's moe_memory lists the same):
//   alltoall forward  counts P E x4; send M h es + M x4 with the received block R_ep h es +
//                     R_ep x4; at etp > 1 the gathered R h es + R x4 beside the block and
//                     its etp copies; then the local rows and gates (activations, R h es +
//                     R x4) and the maps regroup, ungroup (activations, R x4 each) beside the
//                     block (or the gathered rows). combine: the block R_ep h es (at etp > 1
//                     with the ungrouped R h es and the peers' partials etp R_ep h es), then
//                     returned M h es.
//            backward combine's: the received block R_ep h es with the permuted M h es, at
//                     etp > 1 then with the gathered R h es and its etp copies; dispatch's:
//                     the block R_ep (h es + 4) (at etp > 1 with the ungrouped R (h es + 4)
//                     and the peers' partials etp R_ep h es), then returned M (h es + 4).
//   allgather forward gathered P N h es + P N k x4 + P (E + N k) x4, then the maps
//                     source_pair R x4 and local_slots P N k x4 (activations); combine: the
//                     full output P N h es. backward: gathered P N h es; the full input
//                     gradient P N h es, then the full gate gradient P N k x4.
#include "parallel/expert_parallel.h"
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include "kernels/ops.h"

namespace paralab {

const char* dispatcher_name(TokenDispatcher d) {
  return d == TokenDispatcher::ALLTOALL ? "alltoall" : "allgather";
}

namespace {

using kernels::Device;
constexpr Category kWorkspace = Category::WORKSPACE;
constexpr Category kActivations = Category::ACTIVATIONS;

void upload(Device dev, Buffer<int>& b, const std::vector<int>& host, Category c) {
  b.allocate(dev, host.size(), c);
  if (!host.empty()) kernels::memcpy_from_host(dev, b.data(), host.data(), host.size() * 4);
}

std::vector<int> download(Device dev, const Buffer<int>& b) {
  std::vector<int> host(b.size());
  if (!host.empty()) kernels::memcpy_to_host(dev, host.data(), b.data(), b.bytes());
  return host;
}

std::vector<size_t> times(const std::vector<size_t>& rows, size_t width) {
  std::vector<size_t> out(rows);
  for (size_t& x : out) x *= width;
  return out;
}

// alltoall: from every etp_ep rank's rows per expert (etp ep x E, in etp_ep group order: rank
// t + etp j for etp rank t, ep rank j), what this rank sends and receives over ep, the block
// each etp peer received, and how every block's rows regroup by local expert.
void plan_alltoall(const ExpertParallel& ep, const std::vector<int>& counts, int E,
                   ExpertExchange& x, std::vector<int>& regroup) {
  const int P = ep.size(), T = ep.etp_size(), L = ep.local_experts(E), first = ep.first_expert(E);
  const int me = ep.rank(), mine = ep.etp_rank();
  auto rows = [&](int t, int j, int e) { return counts[(size_t)(t + T * j) * E + e]; };
  x.send_rows.assign(P, 0);
  x.recv_rows.assign(P, 0);
  x.etp_rows.assign(T, 0);
  for (int j = 0; j < P; ++j)
    for (int e = 0; e < L; ++e) {
      x.send_rows[j] += rows(mine, me, j * L + e);  // my rows for ep rank j's experts
      x.recv_rows[j] += rows(mine, j, first + e);   // ep rank j's rows for mine
      for (int t = 0; t < T; ++t) x.etp_rows[t] += rows(t, j, first + e);
    }
  x.R_ep = (int)x.etp_rows[mine];
  // etp peer t's block starts after the blocks of the peers before it; inside a block, ep
  // source j's rows for local experts 0..L-1 in that order, after the sources before j
  std::vector<std::vector<std::vector<size_t>>> start(
      T, std::vector<std::vector<size_t>>(P, std::vector<size_t>(L, 0)));
  size_t pos = 0;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < P; ++j)
      for (int e = 0; e < L; ++e) {
        start[t][j][e] = pos;
        pos += rows(t, j, first + e);
      }
  x.R = (int)pos;
  x.local_rows.assign(L, 0);
  x.local_offset.assign(L + 1, 0);
  regroup.assign(x.R, -1);
  int r = 0;
  for (int e = 0; e < L; ++e) {
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < P; ++j) {
        const int n = rows(t, j, first + e);
        for (int i = 0; i < n; ++i) regroup[r++] = (int)(start[t][j][e] + i);
        x.local_rows[e] += n;
      }
    x.local_offset[e + 1] = r;
  }
}

// allgather: from every etp_ep rank's [rows per expert (E) | row of each pair (N k)], where
// each of this rank's local rows comes from among the etp ep N k gathered pairs, and the
// inverse.
void plan_allgather(const ExpertParallel& ep, const std::vector<int>& gathered, int E, int N,
                    int k, ExpertExchange& x, std::vector<int>& source_pair,
                    std::vector<int>& local_slots) {
  const int P = ep.size() * ep.etp_size(), L = ep.local_experts(E), first = ep.first_expert(E);
  const size_t per_rank = (size_t)E + (size_t)N * k, pairs = (size_t)N * k;
  // each source's permutation: each expert's first row, and the pair of each row
  std::vector<std::vector<int>> offset(P), row_pair(P);
  for (int j = 0; j < P; ++j) {
    const int* rows = gathered.data() + j * per_rank;
    const int* slots = rows + E;
    offset[j].assign(E + 1, 0);
    for (int e = 0; e < E; ++e) offset[j][e + 1] = offset[j][e] + rows[e];
    row_pair[j].assign(offset[j][E], -1);
    for (size_t p = 0; p < pairs; ++p)
      if (slots[p] >= 0) row_pair[j][slots[p]] = (int)p;
  }
  x.local_rows.assign(L, 0);
  x.local_offset.assign(L + 1, 0);
  source_pair.clear();
  local_slots.assign((size_t)P * pairs, -1);
  for (int e = 0; e < L; ++e) {
    for (int j = 0; j < P; ++j)
      for (int row = offset[j][first + e]; row < offset[j][first + e + 1]; ++row) {
        const int p = row_pair[j][row];
        const int global = p < 0 ? -1 : (int)(j * pairs + p);
        if (global >= 0) local_slots[global] = (int)source_pair.size();
        source_pair.push_back(global);
        x.local_rows[e]++;
      }
    x.local_offset[e + 1] = (int)source_pair.size();
  }
  x.R = (int)source_pair.size();
}

// Rows of `width` to each peer of the ep group by counts (a group of one: a copy).
template <typename T>
void exchange(const ExpertParallel& ep, const T* in, const std::vector<size_t>& send, T* out,
              const std::vector<size_t>& recv, size_t width, DType t) {
  if (ep.size() == 1) {
    kernels::memcpy_device(ep.device, out, in, send[0] * width * sizeof(T));
    return;
  }
  ep.ep->all_to_all_v(in, times(send, width), out, times(recv, width), t);
}

// etp > 1: every etp peer's block (blocks[t] rows of `width`) into out, in peer order: this
// rank sends its block to every peer, an all-to-all-v of etp copies (the comm layer has no
// all-gather-v). The backward of reduce_blocks.
template <typename T>
void gather_blocks(const ExpertParallel& ep, const T* mine, const std::vector<size_t>& blocks,
                   T* out, size_t width, DType t) {
  const int P = ep.etp_size();
  const size_t n = blocks[ep.etp_rank()] * width;
  Buffer<T> copies(ep.device, P * n, kWorkspace);
  for (int r = 0; r < P; ++r) kernels::memcpy_device(ep.device, copies.data() + r * n, mine, n * sizeof(T));
  ep.etp->all_to_all_v(copies.data(), std::vector<size_t>(P, n), out, times(blocks, width), t);
}

// etp > 1: this rank's block summed over etp: it sends peer t its partial of block t (all
// blocks in peer order in `partial`), receives every peer's partial of its own block and adds
// them in peer order into out (the reduce-scatter-v of the experts' partial sums).
template <typename T>
void reduce_blocks(const ExpertParallel& ep, const T* partial, const std::vector<size_t>& blocks,
                   T* out, size_t width, DType t) {
  const int P = ep.etp_size();
  const size_t n = blocks[ep.etp_rank()] * width;
  Buffer<T> parts(ep.device, P * n, kWorkspace);
  ep.etp->all_to_all_v(partial, times(blocks, width), parts.data(), std::vector<size_t>(P, n), t);
  kernels::memcpy_device(ep.device, out, parts.data(), n * sizeof(T));
  for (int r = 1; r < P; ++r) kernels::accumulate(ep.device, out, parts.data() + r * n, n);
}

}  // namespace

template <typename T>
void dispatch_tokens(const ExpertParallel& ep, const LocalRouting& routing, bool fused,
                     const T* u, const float* gates, ExpertExchange& x, Buffer<T>& expert_in,
                     Buffer<float>& expert_gates) {
  const Device dev = ep.device;
  const int N = routing.N, k = routing.k, E = routing.E;
  x.N = N;
  x.k = k;
  x.h = routing.h;
  x.M = routing.M();
  x.fused = fused;
  upload(dev, x.row_pair, *routing.row_pair, kActivations);
  upload(dev, x.slots, *routing.slots, kActivations);
  const int h = x.h;
  if (!ep.distributed()) {  // every expert here: the permutation is the dispatch
    x.R = x.R_ep = x.M;
    x.local_rows = *routing.rows;
    x.local_offset = *routing.offset;
    expert_in.allocate(dev, (size_t)x.R * h, kActivations);
    expert_gates.allocate(dev, x.R, kActivations);
    kernels::moe_permute(dev, expert_in.data(), expert_gates.data(), u, gates, x.row_pair.data(),
                         x.M, h, k, fused);
    return;
  }
  if (E % ep.size() != 0) throw std::logic_error("expert parallelism: E % ep != 0");
  const int P = ep.etp_ep->size(), me = ep.etp_ep->rank();  // etp x ep ranks
  if (ep.dispatcher == TokenDispatcher::ALLTOALL) {
    std::vector<int> counts;
    {
      Buffer<int> all(dev, (size_t)P * E, kWorkspace);
      kernels::memcpy_from_host(dev, all.data() + (size_t)me * E, routing.rows->data(),
                                (size_t)E * 4);
      ep.etp_ep->all_gather(all.data() + (size_t)me * E, all.data(), E, DType::I32);
      counts = download(dev, all);
    }
    std::vector<int> regroup, ungroup;
    plan_alltoall(ep, counts, E, x, regroup);
    ungroup.assign(x.R, -1);
    for (int r = 0; r < x.R; ++r) ungroup[regroup[r]] = r;
    Buffer<T> received(dev, (size_t)x.R_ep * h, kWorkspace);
    Buffer<float> received_gates(dev, x.R_ep, kWorkspace);
    {
      Buffer<T> send(dev, (size_t)x.M * h, kWorkspace);
      Buffer<float> send_gates(dev, x.M, kWorkspace);
      kernels::moe_permute(dev, send.data(), send_gates.data(), u, gates, x.row_pair.data(), x.M,
                           h, k, fused);
      exchange(ep, send.data(), x.send_rows, received.data(), x.recv_rows, h, comm_type<T>());
      exchange(ep, send_gates.data(), x.send_rows, received_gates.data(), x.recv_rows, 1,
               DType::F32);
    }
    // etp > 1: each etp peer runs the other slices of the same experts on every block
    Buffer<T> gathered;
    Buffer<float> gathered_gates;
    if (ep.etp_size() > 1) {
      gathered.allocate(dev, (size_t)x.R * h, kWorkspace);
      gathered_gates.allocate(dev, x.R, kWorkspace);
      gather_blocks(ep, received.data(), x.etp_rows, gathered.data(), h, comm_type<T>());
      gather_blocks(ep, received_gates.data(), x.etp_rows, gathered_gates.data(), 1, DType::F32);
      std::swap(received, gathered);  // the rows to regroup; the block itself is freed
      std::swap(received_gates, gathered_gates);
      gathered.reset();
      gathered_gates.reset();
    }
    upload(dev, x.regroup, regroup, kActivations);
    upload(dev, x.ungroup, ungroup, kActivations);
    expert_in.allocate(dev, (size_t)x.R * h, kActivations);
    expert_gates.allocate(dev, x.R, kActivations);
    kernels::moe_permute(dev, expert_in.data(), expert_gates.data(), received.data(),
                         received_gates.data(), x.regroup.data(), x.R, h, 1, fused);
    return;
  }
  // allgather, over the etp x ep ranks
  const size_t per_rank = (size_t)E + (size_t)N * k;
  Buffer<T> all_u(dev, (size_t)P * N * h, kWorkspace);
  Buffer<float> all_gates(dev, (size_t)P * N * k, kWorkspace);
  Buffer<int> all_routing(dev, P * per_rank, kWorkspace);
  std::vector<int> mine(routing.rows->begin(), routing.rows->end());
  mine.insert(mine.end(), routing.slots->begin(), routing.slots->end());
  kernels::memcpy_from_host(dev, all_routing.data() + me * per_rank, mine.data(), per_rank * 4);
  CommHandle hidden =
      ep.etp_ep->all_gather_async(u, all_u.data(), (size_t)N * h, comm_type<T>());
  CommHandle probs = ep.etp_ep->all_gather_async(gates, all_gates.data(), (size_t)N * k);
  ep.etp_ep->all_gather(all_routing.data() + me * per_rank, all_routing.data(), per_rank,
                        DType::I32);
  std::vector<int> source_pair, local_slots;
  plan_allgather(ep, download(dev, all_routing), E, N, k, x, source_pair, local_slots);
  x.R_ep = x.R;
  upload(dev, x.source_pair, source_pair, kActivations);
  upload(dev, x.local_slots, local_slots, kActivations);
  hidden.wait();
  probs.wait();
  expert_in.allocate(dev, (size_t)x.R * h, kActivations);
  expert_gates.allocate(dev, x.R, kActivations);
  kernels::moe_permute(dev, expert_in.data(), expert_gates.data(), all_u.data(), all_gates.data(),
                       x.source_pair.data(), x.R, h, k, fused);
}

template <typename T>
void combine_tokens(const ExpertParallel& ep, const ExpertExchange& x, const T* y, T* out) {
  const Device dev = ep.device;
  const int h = x.h;
  if (!ep.distributed()) {
    kernels::moe_unpermute(dev, out, y, x.slots.data(), x.N, h, x.k, x.fused);
    return;
  }
  if (ep.dispatcher == TokenDispatcher::ALLTOALL) {
    // this rank's block, in the order it arrived (at etp > 1 summed over the etp peers'
    // partial outputs), back to the tokens' ranks
    Buffer<T> block(dev, (size_t)x.R_ep * h, kWorkspace);
    if (ep.etp_size() > 1) {
      Buffer<T> ungrouped(dev, (size_t)x.R * h, kWorkspace);
      kernels::moe_permute(dev, ungrouped.data(), nullptr, y, nullptr, x.ungroup.data(), x.R, h,
                           1, x.fused);
      reduce_blocks(ep, ungrouped.data(), x.etp_rows, block.data(), h, comm_type<T>());
    } else {
      kernels::moe_permute(dev, block.data(), nullptr, y, nullptr, x.ungroup.data(), x.R, h, 1,
                           x.fused);
    }
    Buffer<T> returned(dev, (size_t)x.M * h, kWorkspace);
    exchange(ep, block.data(), x.recv_rows, returned.data(), x.send_rows, h, comm_type<T>());
    kernels::moe_unpermute(dev, out, returned.data(), x.slots.data(), x.N, h, x.k, x.fused);
    return;
  }
  // allgather: this rank's partial sums for every gathered token, summed over the group
  const int P = ep.etp_ep->size();
  Buffer<T> full(dev, (size_t)P * x.N * h, kWorkspace);
  kernels::moe_unpermute(dev, full.data(), y, x.local_slots.data(), P * x.N, h, x.k, x.fused);
  ep.etp_ep->reduce_scatter(full.data(), out, (size_t)x.N * h, comm_type<T>());
}

template <typename T>
void combine_tokens_backward(const ExpertParallel& ep, const ExpertExchange& x, const T* dout,
                             T* dy) {
  const Device dev = ep.device;
  const int h = x.h;
  if (!ep.distributed()) {  // unpermute's backward is permute (rows only: the gates are forward's)
    kernels::moe_permute(dev, dy, nullptr, dout, nullptr, x.row_pair.data(), x.M, h, x.k,
                         x.fused);
    return;
  }
  if (ep.dispatcher == TokenDispatcher::ALLTOALL) {
    Buffer<T> received(dev, (size_t)x.R_ep * h, kWorkspace);
    {
      Buffer<T> permuted(dev, (size_t)x.M * h, kWorkspace);
      kernels::moe_permute(dev, permuted.data(), nullptr, dout, nullptr, x.row_pair.data(), x.M,
                           h, x.k, x.fused);
      exchange(ep, permuted.data(), x.send_rows, received.data(), x.recv_rows, h, comm_type<T>());
    }
    if (ep.etp_size() > 1) {  // every etp slice needs every block's output gradient
      Buffer<T> gathered(dev, (size_t)x.R * h, kWorkspace);
      gather_blocks(ep, received.data(), x.etp_rows, gathered.data(), h, comm_type<T>());
      std::swap(received, gathered);  // the block itself is freed at the scope's end
    }
    kernels::moe_permute(dev, dy, nullptr, received.data(), nullptr, x.regroup.data(), x.R, h, 1,
                         x.fused);
    return;
  }
  const int P = ep.etp_ep->size();
  Buffer<T> gathered(dev, (size_t)P * x.N * h, kWorkspace);
  ep.etp_ep->all_gather(dout, gathered.data(), (size_t)x.N * h, comm_type<T>());
  kernels::moe_permute(dev, dy, nullptr, gathered.data(), nullptr, x.source_pair.data(), x.R, h,
                       x.k, x.fused);
}

template <typename T>
void dispatch_tokens_backward(const ExpertParallel& ep, const ExpertExchange& x,
                              const T* dexpert_in, const float* dexpert_gates, T* du,
                              float* dgates) {
  const Device dev = ep.device;
  const int h = x.h, pairs = x.N * x.k;
  if (!ep.distributed()) {  // permute's backward is unpermute, for the rows and the gates
    kernels::moe_unpermute(dev, du, dexpert_in, x.slots.data(), x.N, h, x.k, x.fused);
    kernels::moe_unpermute_gates(dev, dgates, dexpert_gates, x.slots.data(), pairs);
    return;
  }
  if (ep.dispatcher == TokenDispatcher::ALLTOALL) {
    // the input and gate gradients of this rank's block (at etp > 1 partial over the slices:
    // summed over the etp peers), back to the tokens' ranks
    Buffer<T> block(dev, (size_t)x.R_ep * h, kWorkspace);
    Buffer<float> block_gates(dev, x.R_ep, kWorkspace);
    if (ep.etp_size() > 1) {
      Buffer<T> ungrouped(dev, (size_t)x.R * h, kWorkspace);
      Buffer<float> ungrouped_gates(dev, x.R, kWorkspace);
      kernels::moe_permute(dev, ungrouped.data(), ungrouped_gates.data(), dexpert_in,
                           dexpert_gates, x.ungroup.data(), x.R, h, 1, x.fused);
      reduce_blocks(ep, ungrouped.data(), x.etp_rows, block.data(), h, comm_type<T>());
      reduce_blocks(ep, ungrouped_gates.data(), x.etp_rows, block_gates.data(), 1, DType::F32);
    } else {
      kernels::moe_permute(dev, block.data(), block_gates.data(), dexpert_in, dexpert_gates,
                           x.ungroup.data(), x.R, h, 1, x.fused);
    }
    Buffer<T> returned(dev, (size_t)x.M * h, kWorkspace);
    Buffer<float> returned_gates(dev, x.M, kWorkspace);
    exchange(ep, block.data(), x.recv_rows, returned.data(), x.send_rows, h, comm_type<T>());
    exchange(ep, block_gates.data(), x.recv_rows, returned_gates.data(), x.send_rows, 1,
             DType::F32);
    kernels::moe_unpermute(dev, du, returned.data(), x.slots.data(), x.N, h, x.k, x.fused);
    kernels::moe_unpermute_gates(dev, dgates, returned_gates.data(), x.slots.data(), pairs);
    return;
  }
  const int P = ep.etp_ep->size();
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

#define PARALAB_EXPERT_PARALLEL(T)                                                          \
  template void dispatch_tokens(const ExpertParallel&, const LocalRouting&, bool, const T*, \
                                const float*, ExpertExchange&, Buffer<T>&, Buffer<float>&); \
  template void combine_tokens(const ExpertParallel&, const ExpertExchange&, const T*, T*); \
  template void combine_tokens_backward(const ExpertParallel&, const ExpertExchange&,       \
                                        const T*, T*);                                      \
  template void dispatch_tokens_backward(const ExpertParallel&, const ExpertExchange&,      \
                                         const T*, const float*, T*, float*);
PARALAB_EXPERT_PARALLEL(float)
PARALAB_EXPERT_PARALLEL(kernels::bf16)
#undef PARALAB_EXPERT_PARALLEL

}  // namespace paralab
