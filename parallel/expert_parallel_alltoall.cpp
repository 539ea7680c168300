// parallel/expert_parallel_alltoall.cpp: the alltoall token dispatcher
// (--moe-token-dispatcher-type alltoall; Megatron-Core's MoEAlltoAllTokenDispatcher). Each
// rank sends every (token, expert) pair's row to the rank that holds the expert, and only
// those rows: the bytes follow the routing. The idea, the expert grid and how the paths are
// chosen: parallel/expert_parallel.cpp.
//
// Per MoE layer and microbatch, N tokens of h, k experts each, es bytes per element (4, or 2
// with --bf16), M rows this rank sends (its permuted rows: N k dropless, E min(C, N) padded
// to capacity C), R_ep rows it receives over ep (its block), R the rows its experts run
// (every etp peer's block: R = R_ep at etp 1), P = etp ep:
//
//   forward   all-gather  etp_ep  the per-expert row counts, E int32      payload P E 4
//                                 (not padded to capacity, where every rank's are known)
//             all-to-all-v ep     the rows, dispatch                      M h es
//             all-to-all-v ep     their gates (Megatron's probabilities)  M 4
//             [etp > 1: all-to-all-v etp, every block to every etp peer   etp R_ep h es
//              (an all-gather-v; the comm layer has none), rows and gates + etp R_ep 4]
//             (regroup the rows by local expert, the experts, back to the block order)
//             [etp > 1: all-to-all-v etp, each block's partial outputs to R h es
//              its owner, summed there in etp rank order: a reduce-scatter-v]
//             all-to-all-v ep     the output rows, combine                R_ep h es
//   backward  all-to-all-v ep     the output rows' gradient               M h es
//             [etp > 1: all-to-all-v etp, gathered again                  etp R_ep h es]
//             [etp > 1: all-to-all-v etp, the partial input and gate      R h es + R 4
//              gradients summed back]
//             all-to-all-v ep     the input rows' gradient, back          R_ep h es
//             all-to-all-v ep     the gates' gradient, back               R_ep 4
// An all-to-all's backward is the all-to-all with the send and receive counts swapped, so
// backward mirrors forward. Bytes follow the routing: a rank whose experts are popular
// receives (and sends back) more; the report prints min / mean / max of R.
//
// The rows arrive source by source (ep rank j's rows for local experts 0..L-1 in that
// order); the regroup map puts them in the experts' order (parallel/expert_parallel.cpp),
// and its inverse, ungroup, back.
//
// Buffers (category workspace unless said; the plan's moe_memory lists the same):
//   forward   counts P E x4; send M h es + M x4 with the received block R_ep h es + R_ep x4;
//             at etp > 1 the gathered R h es + R x4 beside the block and its etp copies; then
//             the local rows and gates (activations, R h es + R x4) and the maps regroup,
//             ungroup (activations, R x4 each) beside the block (or the gathered rows).
//             combine: the block R_ep h es (at etp > 1 with the ungrouped R h es and the
//             peers' partials etp R_ep h es), then returned M h es.
//   backward  combine's: the received block R_ep h es with the permuted M h es, at etp > 1
//             then with the gathered R h es and its etp copies; dispatch's: the block
//             R_ep (h es + 4) (at etp > 1 with the ungrouped R (h es + 4) and the peers'
//             partials etp R_ep h es), then returned M (h es + 4).
//
// defines: alltoall_exchange (the class AllToAll)
#include <utility>
#include <vector>
#include "kernels/ops.h"
#include "parallel/expert_parallel_impl.h"  // TokenExchange, PARALAB_TOKEN_PATH, upload, download

namespace paralab {

namespace {

using kernels::Device;
constexpr Category kWorkspace = Category::WORKSPACE;
constexpr Category kActivations = Category::ACTIVATIONS;

std::vector<size_t> times(const std::vector<size_t>& rows, size_t width) {
  std::vector<size_t> out(rows);
  for (size_t& x : out) x *= width;
  return out;
}

// From every etp_ep rank's rows per expert (etp ep x E, in etp_ep group order: rank t + etp j
// for etp rank t, ep rank j), what this rank sends and receives over ep, the block each etp
// peer received, and how every block's rows regroup by local expert.
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

}  // namespace

// Every etp_ep rank's rows per expert (its routing.rows), gathered: etp ep x E, in etp_ep group
// order, for plan_alltoall, and copied to the host once: the all-to-all's sizes (Megatron syncs
// them too). Padded to capacity every rank's are min(C, N): neither gathered nor copied.
void alltoall_rows(const ExpertParallel& ep, const LocalRouting& routing, ExpertExchange& x) {
  const int P = ep.etp_ep->size(), me = ep.etp_ep->rank(), E = routing.E;  // etp x ep ranks
  if (routing.padded_rows >= 0) {
    x.all_rows.assign((size_t)P * E, routing.padded_rows);
  } else {
    Buffer<int> all(ep.device, (size_t)P * E, kWorkspace);
    ep.etp_ep->all_gather(routing.rows, all.data(), E, DType::I32);
    x.all_rows = download(ep.device, all);
  }
  x.rows.assign(x.all_rows.begin() + (size_t)me * E, x.all_rows.begin() + (size_t)(me + 1) * E);
}

namespace {

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

// The elements of this rank's own block among the etp peers' (blocks[t] rows of `width`).
size_t own_block(const ExpertParallel& ep, const std::vector<size_t>& blocks, size_t width) {
  return blocks[ep.etp_rank()] * width;
}

// etp > 1: every etp peer's block into out, in peer order: this rank sends its block to every
// peer, an all-to-all-v of etp copies (the comm layer has no all-gather-v). The backward of
// reduce_blocks.
template <typename T>
void gather_blocks(const ExpertParallel& ep, const T* mine, const std::vector<size_t>& blocks,
                   T* out, size_t width, DType t) {
  const int P = ep.etp_size();
  const size_t n = own_block(ep, blocks, width);
  Buffer<T> copies(ep.device, P * n, kWorkspace);
  for (int r = 0; r < P; ++r)
    kernels::memcpy_device(ep.device, copies.data() + r * n, mine, n * sizeof(T));
  ep.etp->all_to_all_v(copies.data(), std::vector<size_t>(P, n), out, times(blocks, width), t);
}

// etp > 1: this rank's block summed over etp: it sends peer t its partial of block t (all
// blocks in peer order in `partial`), receives every peer's partial of its own block and adds
// them in peer order into out (the reduce-scatter-v of the experts' partial sums).
template <typename T>
void reduce_blocks(const ExpertParallel& ep, const T* partial, const std::vector<size_t>& blocks,
                   T* out, size_t width, DType t) {
  const size_t n = own_block(ep, blocks, width);
  Buffer<T> parts(ep.device, ep.etp_size() * n, kWorkspace);
  ep.etp->all_to_all_v(partial, times(blocks, width), parts.data(),
                       std::vector<size_t>(ep.etp_size(), n), t);
  kernels::memcpy_device(ep.device, out, parts.data(), n * sizeof(T));
  for (int r = 1; r < ep.etp_size(); ++r)
    kernels::accumulate(ep.device, out, parts.data() + r * n, n);
}

template <typename T>
struct AllToAll final : TokenExchange<T> {
  // The counts, then the rows and their gates to their experts' ranks; at etp > 1 every
  // block to every etp peer; the rows regrouped by local expert.
  void dispatch(const ExpertParallel& ep, const T* u, const float* gates, ExpertExchange& x,
                Buffer<T>& expert_in, Buffer<float>& expert_gates) const override {
    const Device dev = ep.device;
    const int h = x.h;
    std::vector<int> regroup, ungroup;
    plan_alltoall(ep, x.all_rows, (int)x.rows.size(), x, regroup);
    ungroup.assign(x.R, -1);
    for (int r = 0; r < x.R; ++r) ungroup[regroup[r]] = r;
    Buffer<T> received(dev, (size_t)x.R_ep * h, kWorkspace);
    Buffer<float> received_gates(dev, x.R_ep, kWorkspace);
    {
      Buffer<T> send(dev, (size_t)x.M * h, kWorkspace);
      Buffer<float> send_gates(dev, x.M, kWorkspace);
      kernels::moe_permute(dev, send.data(), send_gates.data(), u, gates, x.row_pair.data(), x.M,
                           h, x.k, x.fused);
      exchange(ep, send.data(), x.send_rows, received.data(), x.recv_rows, h, comm_type<T>());
      exchange(ep, send_gates.data(), x.send_rows, received_gates.data(), x.recv_rows, 1,
               DType::F32);
    }
    // etp > 1: each etp peer runs the other slices of the same experts on every block
    if (ep.etp_size() > 1) {
      Buffer<T> gathered(dev, (size_t)x.R * h, kWorkspace);
      Buffer<float> gathered_gates(dev, x.R, kWorkspace);
      gather_blocks(ep, received.data(), x.etp_rows, gathered.data(), h, comm_type<T>());
      gather_blocks(ep, received_gates.data(), x.etp_rows, gathered_gates.data(), 1, DType::F32);
      std::swap(received, gathered);  // the rows to regroup; the block itself is freed
      std::swap(received_gates, gathered_gates);
    }
    upload(dev, x.regroup, regroup, kActivations);
    upload(dev, x.ungroup, ungroup, kActivations);
    expert_in.allocate(dev, (size_t)x.R * h, kActivations);
    expert_gates.allocate(dev, x.R, kActivations);
    kernels::moe_permute(dev, expert_in.data(), expert_gates.data(), received.data(),
                         received_gates.data(), x.regroup.data(), x.R, h, 1, x.fused);
  }

  // This rank's block, in the order it arrived (at etp > 1 summed over the etp peers'
  // partial outputs), back to the tokens' ranks, where each token sums its k rows.
  void combine(const ExpertParallel& ep, const ExpertExchange& x, const T* y,
               T* out) const override {
    const Device dev = ep.device;
    const int h = x.h;
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
  }

  // Combine's mirror: the output gradient's rows to the experts' ranks (at etp > 1 every
  // block to every etp peer again), regrouped by local expert.
  void combine_backward(const ExpertParallel& ep, const ExpertExchange& x, const T* dout,
                        T* dy) const override {
    const Device dev = ep.device;
    const int h = x.h;
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
  }

  // Dispatch's mirror: the input and gate gradients of this rank's block (at etp > 1 partial
  // over the slices: summed over the etp peers), back to the tokens' ranks.
  void dispatch_backward(const ExpertParallel& ep, const ExpertExchange& x, const T* dexpert_in,
                         const float* dexpert_gates, T* du, float* dgates) const override {
    const Device dev = ep.device;
    const int h = x.h, pairs = x.N * x.k;
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
  }
};

}  // namespace

PARALAB_TOKEN_PATH(AllToAll, alltoall_exchange)

}  // namespace paralab
