// parallel/context_parallel.cpp: context parallelism (Megatron-Core's --context-parallel-size
// with TransformerEngine's three attention implementations, context_parallel.py:
// AttnFuncWithCPAndKVP2P, ...KVAllGather, ...QKVOA2A).
//
// The idea. Every op of a transformer layer but attention treats tokens independently, so
// a sequence of s tokens split over cp ranks needs nothing for them; attention's query i
// reads every key j <= i, so the ranks must meet there. Activations per rank scale with s/cp.
//
// The layout. The causal mask makes later tokens cost more: cut the sequence in cp pieces
// and rank cp-1's queries see cp times the keys of rank 0's. Cut it in 2cp chunks and give
// rank r chunks r and 2cp-1-r (one early, one late): every rank does the same work
// (--cp-layout contiguous shows the imbalance). Positions (RoPE, learned positions),
// dropout masks (keyed by global position) and the loss follow the layout.
//
// p2p, the ring (load-balanced). K/V blocks (K and V of one rank's tokens: 2 (s/cp) b g d
// elements, "KV") travel around the cp ranks; a query's softmax is assembled from the
// blocks' partial results. Forward, rank r, steps i = 0 .. cp-1, holding the block of rank
// j = r - i (mod cp):
//   1. post the send of the held block to r+1 and the receive of the next from r-1 (i < cp-1);
//   2. attend: i = 0, the diagonal: causal on the local chunk pair;
//      j < r: every local query against the block's first half (chunk j, all earlier);
//      j > r: the local second half of queries (chunk 2cp-1-r, later than all of j's)
//      against the whole block; every off-diagonal step is half a block's work;
//   3. merge the step's (o_i, lse_i) into the running (o, lse):
//        lse' = log(e^lse + e^lse_i),  o' = o e^(lse - lse') + o_i e^(lse_i - lse');
//   4. wait for the transfer.
// Backward runs the ring the other way (blocks r+i), K/V travelling again and dK/dV
// accumulators with them: step 0 adds the diagonal into the rank's own dK, dV; at step
// i >= 1 the accumulator of block r+i (begun by rank r+1 at its step i-1) is received, the
// step's share added, and it is sent on to r-1; the last send reaches the block's owner.
// dQ accumulates locally in fp32. Per layer and microbatch: forward (cp-1) KV sent per
// rank, backward (cp-1) KV + (cp-1) dKV.
//
// all_gather: all-gather K and V (the bus moves (cp-1) KV per rank), put the 2cp chunks in
// position order, and attend the local queries against the whole prefix in one pass.
// Backward gathers K and V again and reduce-scatters dK, dV ((cp-1) dKV).
//
// a2a (Ulysses, DeepSpeed): an all-to-all turns q, k, v from sequence-split (all a heads,
// s/cp tokens) to head-split (a/cp heads, all s tokens), attention runs on whole sequences,
// and an all-to-all brings the output back; backward the mirror (dO in, dq, dk, dv out).
// Each all-to-all moves (cp-1)/cp of its tensor; heads and query groups must divide by cp.
//
// Overlap (p2p). Step i's transfer hides behind step i's attention when the step's attention
// time >= its transfer time: 4 d b a (s/2cp)(s/cp) / F >= KV / bandwidth, F the rank's FLOP/s;
// the plan prints the bandwidth that needs at the rank's peak, the report the exposed
// (waited) time. On the MPI backend a transfer moves only inside MPI calls, so the flash
// passes run one (batch, query group) at a time with comm_progress() between (NCCL's grouped
// send/recv runs on the cp communicator's own stream).
//
// The file follows the lesson: the ring's forward and backward first (the steps above), then
// all_gather's, then a2a's, one function per core and direction; core_attention_forward and
// _backward at the end set up the passes and choose the core, once (the ring at cp 1: one
// step, the single-rank attention). One pass, flash or naive, on one block of rows:
// parallel/attention_pass.cpp.
//
// defines: core_attention_forward, core_attention_backward (the layout, the passes and the
//          buffers: parallel/context_parallel_layout.cpp)
#include "parallel/context_parallel.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/ops.h"
#include "parallel/attention_pass.h"  // AttentionPass

namespace paralab {

using kernels::TokenPositions;

namespace {

template <typename T>
void widen(kernels::Device d, float* dst, const T* src, size_t n) {
  if constexpr (std::is_same<T, float>::value) kernels::memcpy_device(d, dst, src, n * 4);
  else kernels::convert(d, dst, src, n);
}
template <typename T>
void narrow(kernels::Device d, T* dst, const float* src, size_t n) {
  if constexpr (std::is_same<T, float>::value) kernels::memcpy_device(d, dst, src, n * 4);
  else kernels::convert(d, dst, src, n);
}

// dq's accumulator, zeroed: fp32 for flash (the kernel's; dq itself when T is float), T for
// naive (its GEMMs': dq itself). After the passes, narrow_dq writes it into dq.
template <typename T>
float* zeroed_dq(kernels::Device d, const CoreShape& s, T* dq, CoreWorkspace<T>& ws,
                 size_t q_n) {
  float* acc = nullptr;
  if constexpr (std::is_same<T, float>::value) acc = dq;
  if (!ws.dq_acc.empty()) acc = ws.dq_acc.data();
  kernels::memset_zero(d, s.flash ? (void*)acc : (void*)dq, q_n * (s.flash ? 4 : sizeof(T)));
  return acc;
}
template <typename T>
void narrow_dq(kernels::Device d, const CoreShape& s, T* dq, const float* acc, size_t q_n) {
  if (s.flash && (const void*)acc != (const void*)dq) narrow(d, dq, acc, q_n);
}

// ---- p2p: the ring ---------------------------------------------------------------------------

// One ring hop: a K/V pair (or its dK/dV accumulator, n elements each) to rank `to`, the next
// pair from rank `from` into (k_in, v_in); one batched send/recv, asynchronous.
template <typename T>
CommHandle ring_hop(const ContextParallel& cp, const T* k, const T* v, int to, T* k_in, T* v_in,
                    int from, size_t n) {
  return cp.cp->send_recv_async(
      {P2POp::send(k, n, to, comm_type<T>()), P2POp::send(v, n, to, comm_type<T>()),
       P2POp::recv(k_in, n, from, comm_type<T>()), P2POp::recv(v_in, n, from, comm_type<T>())});
}

// Forward: steps i = 0 .. cp-1 holding the block of rank j = r - i, the passes (core_passes,
// in this order) merged into the running (o, lse). A rank of one pass (cp 1, or a contiguous
// layout's first) writes its outputs directly.
template <typename T>
void ring_forward(const ContextParallel& cp, const CoreShape& s,
                  const std::vector<CorePass>& passes, const AttentionPass<T>& pass, const T* q,
                  const T* k, const T* v, T* o, CoreSaved<T>& saved, CoreWorkspace<T>& ws) {
  const kernels::Device d = cp.device;
  const int c = cp.size(), r = cp.rank();
  const size_t BA = (size_t)s.B * s.A, rows = BA * s.S, kv_n = (size_t)s.B * s.G * s.S * s.D;
  const bool merging = passes.size() > 1, probs_only = pass.probs_only;
  float* acc = nullptr;  // the running output in fp32 (o itself when T is float)
  if constexpr (std::is_same<T, float>::value) acc = o;
  else acc = ws.o_acc.data();
  const int next = (r + 1) % c, prev = (r + c - 1) % c;
  const T *kb = k, *vb = v;
  size_t n = 0;
  for (int i = 0; i < c; ++i) {
    CommHandle transfer;
    if (i < c - 1)  // 1. the held block on to r+1, the next from r-1
      transfer = ring_hop(cp, kb, vb, next, ws.kv[i % 2][0].data(), ws.kv[i % 2][1].data(), prev,
                          kv_n);
    const int j = (r - i + c) % c;
    if (n < passes.size() && passes[n].source == j) {  // 2. attend, 3. merge
      const CorePass& p = passes[n];
      const bool first = n == 0, direct = !merging || (first && std::is_same<T, float>::value);
      float* lse_p = s.flash ? (first ? saved.lse.data() : ws.lse_pass.data())
                             : (merging ? ws.lse_passes.data() + n * rows : nullptr);
      pass.forward(s, p, n, q, kb, vb, direct ? o : ws.o_pass.data(), lse_p);
      const size_t off = (size_t)p.q_row0 * s.D;
      if (merging && first && !s.flash && !probs_only)
        kernels::memcpy_device(d, saved.lse.data(), lse_p, rows * sizeof(float));
      if (merging && first && !direct && !probs_only) widen(d, acc, ws.o_pass.data(), rows * s.D);
      if (!first && !probs_only)
        kernels::attention_merge(d, acc + off, saved.lse.data() + p.q_row0, ws.o_pass.data() + off,
                                 lse_p + p.q_row0, (int)BA, s.D, p.blk.q);
      ++n;
    }
    if (i < c - 1) {  // 4. the next block has arrived
      transfer.wait();
      kb = ws.kv[i % 2][0].data();
      vb = ws.kv[i % 2][1].data();
    }
  }
  if constexpr (!std::is_same<T, float>::value)
    if (merging) narrow(d, o, acc, rows * s.D);
  // naive: every pass's probabilities become the rows' whole softmax
  for (size_t m = 0; merging && !s.flash && m < passes.size(); ++m) {
    const CorePass& p = passes[m];
    const float* lse_p = ws.lse_passes.data() + m * rows + p.q_row0;
    const float* lse = saved.lse.data() + p.q_row0;
    kernels::attention_probs_rescale(d, saved.probs[m].data(), lse_p, lse, (int)BA, s.D, p.blk);
    if (s.dropout > 0.0f)
      kernels::attention_probs_rescale(d, saved.probs_dropped[m].data(), lse_p, lse, (int)BA, s.D,
                                       p.blk);
  }
}

// Backward: the ring the other way, blocks r+i; dK, dV accumulators travel with them (step
// 0 adds into the rank's own dk, dv; step i >= 1 into block r+i's accumulator, begun here at
// step 1 or received from r+1, then sent on to r-1; the last send reaches the block's owner).
template <typename T>
void ring_backward(const ContextParallel& cp, const CoreShape& s,
                   const std::vector<CorePass>& passes, const AttentionPass<T>& pass, const T* q,
                   const T* k, const T* v, const T* o, const T* dout, T* dq, T* dk, T* dv,
                   CoreWorkspace<T>& ws) {
  const kernels::Device d = cp.device;
  const int c = cp.size(), r = cp.rank();
  const size_t BA = (size_t)s.B * s.A, q_n = BA * s.S * s.D;
  const size_t kv_n = (size_t)s.B * s.G * s.S * s.D;
  auto zero = [&](void* p, size_t bytes) { kernels::memset_zero(d, p, bytes); };
  const bool merged = passes.size() > 1;  // the passes saw parts of the rows: delta given
  if (!s.flash && merged)
    kernels::attention_delta(d, ws.delta.data(), dout, o, (int)BA, s.D, passes[0].blk.q);
  float* dq_acc = zeroed_dq(d, s, dq, ws, q_n);
  zero(dk, kv_n * sizeof(T));
  zero(dv, kv_n * sizeof(T));
  const int next = (r + 1) % c, prev = (r + c - 1) % c;
  const T *kb = k, *vb = v;
  CommHandle accumulated;  // the accumulator arriving for the next step
  for (int i = 0; i < c; ++i) {
    CommHandle transfer;
    if (i < c - 1)
      transfer = ring_hop(cp, kb, vb, prev, ws.kv[i % 2][0].data(), ws.kv[i % 2][1].data(), next,
                          kv_n);
    const int j = (r + i) % c;
    T* dkp = dk;
    T* dvp = dv;
    if (i > 0) {  // block j's accumulator: begun here at step 1, else received from r+1
      dkp = ws.dkv[i % 2][0].data();
      dvp = ws.dkv[i % 2][1].data();
      if (i == 1) zero(dkp, kv_n * sizeof(T)), zero(dvp, kv_n * sizeof(T));
      else accumulated.wait();
    }
    for (size_t n = 0; n < passes.size(); ++n)
      if (passes[n].source == j)
        pass.backward(s, passes[n], n, q, kb, vb, o, dout, dq, dq_acc, dkp, dvp,
                      merged && !s.flash ? ws.delta.data() : nullptr);
    if (i > 0)  // on to r-1; the last send reaches block j's owner
      accumulated = ring_hop(cp, (const T*)dkp, (const T*)dvp, prev, ws.dkv[(i + 1) % 2][0].data(),
                             ws.dkv[(i + 1) % 2][1].data(), next, kv_n);
    if (i < c - 1) {
      transfer.wait();
      kb = ws.kv[i % 2][0].data();
      vb = ws.kv[i % 2][1].data();
    }
  }
  if (c > 1) {  // the own block's accumulator, back from its last visitor
    accumulated.wait();
    kernels::accumulate(d, dk, ws.dkv[c % 2][0].data(), kv_n);
    kernels::accumulate(d, dv, ws.dkv[c % 2][1].data(), kv_n);
  }
  narrow_dq(d, s, dq, dq_acc, q_n);
}

// ---- all_gather ------------------------------------------------------------------------------

// Rank-major blocks (cp, B, H, S, D), each rank's S local tokens, <-> position order
// (B, H, length, D): one copy per (rank, batch, head, chunk).
template <typename T>
void reorder_chunks(kernels::Device d, T* positions, T* ranked, const CoreShape& s, int H,
                    const CpSpec& cp, bool to_positions) {
  const size_t D = s.D;
  for (int j = 0; j < cp.size; ++j) {
    const TokenPositions pos = cp_positions(s.length, cp.size, j, cp.layout);
    const int chunk = std::min(pos.chunk, s.S), chunks = s.S / chunk;
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < H; ++h)
        for (int c = 0; c < chunks; ++c) {
          T* r = ranked + ((((size_t)j * s.B + b) * H + h) * s.S + (size_t)c * chunk) * D;
          T* p = positions + (((size_t)b * H + h) * s.length + pos.start[c]) * D;
          if (to_positions) kernels::memcpy_device(d, p, r, chunk * D * sizeof(T));
          else kernels::memcpy_device(d, r, p, chunk * D * sizeof(T));
        }
  }
}

// Every rank's K and V, in position order (ws.natural): the whole sequence's keys. The
// backward gathers them again (the forward's are not kept).
template <typename T>
void gather_kv(const ContextParallel& cp, const CoreShape& s, const T* k, const T* v,
               CoreWorkspace<T>& ws) {
  const size_t kv_n = (size_t)s.B * s.G * s.S * s.D;
  cp.cp->all_gather(k, ws.gathered[0].data(), kv_n, comm_type<T>());
  cp.cp->all_gather(v, ws.gathered[1].data(), kv_n, comm_type<T>());
  for (int t = 0; t < 2; ++t)
    reorder_chunks(cp.device, ws.natural[t].data(), ws.gathered[t].data(), s, s.G, spec_of(cp),
                   true);
}

// Forward: the local queries against the whole sequence, one pass.
template <typename T>
void all_gather_forward(const ContextParallel& cp, const CoreShape& s, const CorePass& p,
                        const AttentionPass<T>& pass, const T* q, const T* k, const T* v, T* o,
                        CoreSaved<T>& saved, CoreWorkspace<T>& ws) {
  gather_kv(cp, s, k, v, ws);
  pass.forward(s, p, 0, q, ws.natural[0].data(), ws.natural[1].data(), o,
               s.flash ? saved.lse.data() : nullptr);
}

// Backward: the pass's dK, dV cover the whole sequence; back to rank-major blocks, each
// rank's summed over the ranks and scattered to it.
template <typename T>
void all_gather_backward(const ContextParallel& cp, const CoreShape& s, const CorePass& p,
                         const AttentionPass<T>& pass, const T* q, const T* k, const T* v,
                         const T* o, const T* dout, T* dq, T* dk, T* dv, CoreWorkspace<T>& ws) {
  const kernels::Device d = cp.device;
  const size_t q_n = (size_t)s.B * s.A * s.S * s.D, kv_n = (size_t)s.B * s.G * s.S * s.D;
  gather_kv(cp, s, k, v, ws);
  kernels::memset_zero(d, ws.dk_heads.data(), ws.dk_heads.size() * sizeof(T));
  kernels::memset_zero(d, ws.dv_heads.data(), ws.dv_heads.size() * sizeof(T));
  float* dq_acc = zeroed_dq(d, s, dq, ws, q_n);
  pass.backward(s, p, 0, q, ws.natural[0].data(), ws.natural[1].data(), o, dout, dq, dq_acc,
                ws.dk_heads.data(), ws.dv_heads.data(), nullptr);
  reorder_chunks(d, ws.dk_heads.data(), ws.gathered[0].data(), s, s.G, spec_of(cp), false);
  reorder_chunks(d, ws.dv_heads.data(), ws.gathered[1].data(), s, s.G, spec_of(cp), false);
  cp.cp->reduce_scatter(ws.gathered[0].data(), dk, kv_n, comm_type<T>());
  cp.cp->reduce_scatter(ws.gathered[1].data(), dv, kv_n, comm_type<T>());
  narrow_dq(d, s, dq, dq_acc, q_n);
}

// ---- a2a (Ulysses) ---------------------------------------------------------------------------

// (B, H, S, D) <-> (cp, B, H/cp, S, D): rank j's block is heads [j H/cp, (j+1) H/cp).
template <typename T>
void pack_heads(kernels::Device d, T* packed, T* x, const CoreShape& s, int H, int cp,
                bool to_packed) {
  const size_t per = (size_t)(H / cp) * s.S * s.D;
  for (int j = 0; j < cp; ++j)
    for (int b = 0; b < s.B; ++b) {
      T* pk = packed + ((size_t)j * s.B + b) * per;
      T* xs = x + ((size_t)b * H + (size_t)j * (H / cp)) * s.S * s.D;
      if (to_packed) kernels::memcpy_device(d, pk, xs, per * sizeof(T));
      else kernels::memcpy_device(d, xs, pk, per * sizeof(T));
    }
}
// x (B, H, S, D) of the local tokens -> heads (B, H/cp, length, D), and back.
template <typename T>
void to_heads(const ContextParallel& cp, const CoreShape& s, int H, const T* x, T* heads,
              CoreWorkspace<T>& ws) {
  const size_t per = (size_t)s.B * (H / cp.size()) * s.S * s.D;
  pack_heads(cp.device, ws.send.data(), const_cast<T*>(x), s, H, cp.size(), true);
  cp.cp->all_to_all(ws.send.data(), ws.recv.data(), per, comm_type<T>());
  reorder_chunks(cp.device, heads, ws.recv.data(), s, H / cp.size(), spec_of(cp), true);
}
template <typename T>
void from_heads(const ContextParallel& cp, const CoreShape& s, int H, const T* heads, T* x,
                CoreWorkspace<T>& ws) {
  const size_t per = (size_t)s.B * (H / cp.size()) * s.S * s.D;
  reorder_chunks(cp.device, const_cast<T*>(heads), ws.send.data(), s, H / cp.size(),
                 spec_of(cp), false);
  cp.cp->all_to_all(ws.send.data(), ws.recv.data(), per, comm_type<T>());
  pack_heads(cp.device, ws.recv.data(), x, s, H, cp.size(), false);
}

// Forward: q, k, v to head-split, one pass on whole sequences, O back to sequence-split (a
// recompute needs only the saved pass). keep_heads: the backward's q, k, v stay head-split in
// the layer's own buffers.
template <typename T>
void a2a_forward(const ContextParallel& cp, const CoreShape& s, const CorePass& p,
                 const AttentionPass<T>& pass, Buffer<T>& q, Buffer<T>& k, Buffer<T>& v, T* o,
                 CoreSaved<T>& saved, CoreWorkspace<T>& ws, bool keep_heads, bool recompute) {
  const kernels::Device d = cp.device;
  to_heads(cp, s, s.A, q.data(), ws.q_heads.data(), ws);
  to_heads(cp, s, s.G, k.data(), ws.k_heads.data(), ws);
  to_heads(cp, s, s.G, v.data(), ws.v_heads.data(), ws);
  T* o_heads = s.flash ? saved.o_heads.data() : ws.o_heads.data();
  pass.forward(heads_shape(s, cp.size()), p, 0, ws.q_heads.data(), ws.k_heads.data(),
               ws.v_heads.data(), o_heads, s.flash ? saved.lse.data() : nullptr);
  if (!recompute) from_heads(cp, s, s.A, o_heads, o, ws);
  if (keep_heads) {
    kernels::memcpy_device(d, q.data(), ws.q_heads.data(), q.size() * sizeof(T));
    kernels::memcpy_device(d, k.data(), ws.k_heads.data(), k.size() * sizeof(T));
    kernels::memcpy_device(d, v.data(), ws.v_heads.data(), v.size() * sizeof(T));
  }
}

// Backward: dO to head-split, the pass's backward, dq, dk, dv back to sequence-split.
template <typename T>
void a2a_backward(const ContextParallel& cp, const CoreShape& s, const CorePass& p,
                  const AttentionPass<T>& pass, const T* q, const T* k, const T* v,
                  const T* dout, T* dq, T* dk, T* dv, CoreSaved<T>& saved, CoreWorkspace<T>& ws,
                  bool heads_kept) {
  const kernels::Device d = cp.device;
  const size_t q_n = (size_t)s.B * s.A * s.S * s.D, kv_n = (size_t)s.B * s.G * s.S * s.D;
  const T* qh = heads_kept ? q : ws.q_heads.data();
  const T* kh = heads_kept ? k : ws.k_heads.data();
  const T* vh = heads_kept ? v : ws.v_heads.data();
  to_heads(cp, s, s.A, dout, ws.do_heads.data(), ws);
  kernels::memset_zero(d, ws.dk_heads.data(), kv_n * sizeof(T));
  kernels::memset_zero(d, ws.dv_heads.data(), kv_n * sizeof(T));
  T* dq_heads = s.flash ? ws.q_heads.data() : ws.dq_heads.data();
  if (s.flash) kernels::memset_zero(d, ws.dq_acc.data(), q_n * 4);
  else kernels::memset_zero(d, dq_heads, q_n * sizeof(T));
  pass.backward(heads_shape(s, cp.size()), p, 0, qh, kh, vh,
                s.flash ? saved.o_heads.data() : nullptr, ws.do_heads.data(), dq_heads,
                ws.dq_acc.data(), ws.dk_heads.data(), ws.dv_heads.data(), nullptr);
  if (s.flash) narrow(d, dq_heads, ws.dq_acc.data(), q_n);  // q_heads is free now
  from_heads(cp, s, s.A, dq_heads, dq, ws);
  from_heads(cp, s, s.G, ws.dk_heads.data(), dk, ws);
  from_heads(cp, s, s.G, ws.dv_heads.data(), dv, ws);
}

// ---- the core: passes set up, the comm type's core chosen once ------------------------------

// The core a call runs: the ring at cp 1 whatever the comm type (one step: the single rank).
CpCommType core_of(const ContextParallel& cp) {
  return cp.size() == 1 ? CpCommType::P2P : cp.comm_type;
}

template <typename T>
AttentionPass<T> pass_of(const ContextParallel& cp, CoreSaved<T>& saved, CoreWorkspace<T>& ws) {
  AttentionPass<T> pass;
  pass.device = cp.device;
  pass.saved = &saved;
  pass.ws = &ws;
  pass.by_group = core_of(cp) == CpCommType::P2P && cp.size() > 1 &&
                  cp.cp->backend() == CommBackend::MPI;
  return pass;
}

}  // namespace

template <typename T>
void core_attention_forward(const ContextParallel& cp, const CoreShape& s, Buffer<T>& q,
                            Buffer<T>& k, Buffer<T>& v, T* o, CoreSaved<T>& saved,
                            CoreWorkspace<T>& ws, Category saved_as, bool keep_heads,
                            bool recompute) {
  const std::vector<CorePass> passes = core_passes(s, spec_of(cp));
  saved.allocate(s, spec_of(cp), cp.device, saved_as);
  AttentionPass<T> pass = pass_of(cp, saved, ws);
  // a single pass is every row's whole softmax: a naive recompute needs only its P again
  pass.probs_only = recompute && !s.flash && passes.size() == 1;
  switch (core_of(cp)) {
    case CpCommType::P2P:
      ring_forward(cp, s, passes, pass, q.data(), k.data(), v.data(), o, saved, ws);
      return;
    case CpCommType::ALL_GATHER:
      all_gather_forward(cp, s, passes[0], pass, q.data(), k.data(), v.data(), o, saved, ws);
      return;
    case CpCommType::A2A:
      a2a_forward(cp, s, passes[0], pass, q, k, v, o, saved, ws, keep_heads, recompute);
      return;
  }
}

template <typename T>
void core_attention_backward(const ContextParallel& cp, const CoreShape& s, Buffer<T>& q,
                             Buffer<T>& k, Buffer<T>& v, const T* o, const T* dout, T* dq,
                             T* dk, T* dv, CoreSaved<T>& saved, CoreWorkspace<T>& ws,
                             bool heads_kept) {
  const std::vector<CorePass> passes = core_passes(s, spec_of(cp));
  const AttentionPass<T> pass = pass_of(cp, saved, ws);
  switch (core_of(cp)) {
    case CpCommType::P2P:
      ring_backward(cp, s, passes, pass, q.data(), k.data(), v.data(), o, dout, dq, dk, dv, ws);
      return;
    case CpCommType::ALL_GATHER:
      all_gather_backward(cp, s, passes[0], pass, q.data(), k.data(), v.data(), o, dout, dq, dk,
                          dv, ws);
      return;
    case CpCommType::A2A:
      a2a_backward(cp, s, passes[0], pass, q.data(), k.data(), v.data(), dout, dq, dk, dv, saved,
                   ws, heads_kept);
      return;
  }
}

#define PARALAB_CORE(T)                                                                      \
  template void core_attention_forward(const ContextParallel&, const CoreShape&, Buffer<T>&, \
                                       Buffer<T>&, Buffer<T>&, T*, CoreSaved<T>&,            \
                                       CoreWorkspace<T>&, Category, bool, bool);             \
  template void core_attention_backward(const ContextParallel&, const CoreShape&,            \
                                        Buffer<T>&, Buffer<T>&, Buffer<T>&, const T*,        \
                                        const T*, T*, T*, T*, CoreSaved<T>&,                 \
                                        CoreWorkspace<T>&, bool);
PARALAB_CORE(float)
PARALAB_CORE(kernels::bf16)
PARALAB_CORE(kernels::fp16)
#undef PARALAB_CORE

}  // namespace paralab
