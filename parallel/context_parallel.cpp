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
// defines: core_attention_forward, core_attention_backward (the layout, the passes and the
//          buffers: parallel/context_parallel_layout.cpp)
#include "parallel/context_parallel.h"

#include <stdexcept>
#include <type_traits>

#include "kernels/ops.h"
#include "parallel/attention_pass.h"

namespace paralab {

using kernels::AttentionBlock;
using kernels::AttentionRows;
using kernels::TokenPositions;

// ---- moving chunks and heads -------------------------------------------------------------
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
// a2a: x (B, H, S, D) of the local tokens -> heads (B, H/cp, length, D), and back.
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

template <typename T>
void allocate_saved(const CoreShape& s, const CpSpec& cp, kernels::Device d, CoreSaved<T>& saved,
                    Category cat) {
  saved = CoreSaved<T>();
  for (const CoreBuffer& b : core_saved_buffers(s, cp, (int)sizeof(T))) {
    if (b.name == "lse") saved.lse.allocate(d, b.elements, cat);
    if (b.name == "o_heads") saved.o_heads.allocate(d, b.elements, cat);
    if (b.name == "probs") saved.probs.emplace_back(d, b.elements, cat);
    if (b.name == "mask") saved.masks.emplace_back(d, b.elements, cat);
    if (b.name == "probs_dropped") saved.probs_dropped.emplace_back(d, b.elements, cat);
  }
}

// On the MPI backend a posted transfer moves only inside MPI calls, so the ring's flash passes
// run one (batch, group) at a time with comm_progress() between: the block travels during
// the step's attention, and the report's exposed time shows what that hid. Each call is the
// pass on one group's R = A/G heads (B = 1, G = 1), its dropout index's head offset
// carrying (b, g); the heads are independent, so the results are the same bits. run(qh, kh,
// blk): the call at q-view offset qh and k-view offset kh (elements).
template <typename Run>
void flash_by_group(bool split, const CoreShape& s, const AttentionBlock& blk, Run&& run) {
  if (!split) {
    run((size_t)0, (size_t)0, blk, s.B, s.A, s.G);
    return;
  }
  const int R = s.A / s.G;
  for (int b = 0; b < s.B; ++b)
    for (int g = 0; g < s.G; ++g) {
      AttentionBlock one = blk;
      one.dropout_head0 += b * blk.dropout_heads + g * R;
      run((size_t)(b * s.A + g * R) * blk.q.head_stride,
          (size_t)(b * s.G + g) * blk.k.head_stride, one, 1, R, 1);
      comm_progress();
    }
}

// One ring hop: a K/V pair (or its dK/dV accumulator, n elements each) to rank `to`, the next
// pair from rank `from` into (k_in, v_in); one batched send/recv, asynchronous.
template <typename T>
CommHandle ring_hop(const ContextParallel& cp, const T* k, const T* v, int to, T* k_in, T* v_in,
                    int from, size_t n) {
  return cp.cp->send_recv_async(
      {P2POp::send(k, n, to, comm_type<T>()), P2POp::send(v, n, to, comm_type<T>()),
       P2POp::recv(k_in, n, from, comm_type<T>()), P2POp::recv(v_in, n, from, comm_type<T>())});
}

// The a2a pass's shape: a/cp heads and g/cp groups of whole sequences.
CoreShape heads_shape(const CoreShape& s, int cp) {
  CoreShape h = s;
  h.A = s.A / cp;
  h.G = s.G / cp;
  h.S = s.length;
  return h;
}

}  // namespace

// ---- forward -------------------------------------------------------------------------------
template <typename T>
void core_attention_forward(const ContextParallel& cp, const CoreShape& s, Buffer<T>& q,
                            Buffer<T>& k, Buffer<T>& v, T* o, CoreSaved<T>& saved,
                            CoreWorkspace<T>& ws, Category saved_as, bool keep_heads,
                            bool recompute) {
  const kernels::Device d = cp.device;
  const CpSpec spec = spec_of(cp);
  const int c = cp.size(), r = cp.rank();
  const size_t BA = (size_t)s.B * s.A, rows = BA * s.S, kv_n = (size_t)s.B * s.G * s.S * s.D;
  const std::vector<CorePass> passes = core_passes(s, spec);
  allocate_saved(s, spec, d, saved, saved_as);
  // a single pass is every row's whole softmax: a naive recompute needs only its P again
  const bool probs_only = recompute && !s.flash && passes.size() == 1;
  const bool split =
      c > 1 && cp.comm_type == CpCommType::P2P && cp.cp->backend() == CommBackend::MPI;
  auto attend = [&](const CoreShape& sh, const CorePass& p, size_t n, const T* qp, const T* kp,
                    const T* vp, T* out, float* lse) {
    const size_t row0 = p.q_row0, off = row0 * sh.D;
    if (sh.flash) {
      flash_by_group(split, sh, p.blk, [&](size_t qh, size_t kh, const AttentionBlock& blk,
                                           int B, int A, int G) {
        kernels::flash_attention_forward(d, out + off + qh, lse + row0 + qh / sh.D,
                                         qp + off + qh, kp + kh, vp + kh, B, A, G, sh.D,
                                         sh.scale, sh.dropout, sh.seed, sh.stream, blk);
      });
      return;
    }
    T* dropped = sh.dropout > 0.0f ? saved.probs_dropped[n].data() : nullptr;
    uint8_t* mask = sh.dropout > 0.0f ? saved.masks[n].data() : nullptr;
    naive_pass_probs(d, sh, p.blk, qp + off, kp, ws.scores.data(), saved.probs[n].data(),
                     lse ? lse + row0 : nullptr, mask, dropped);
    if (!probs_only)
      naive_pass_output(d, sh, p.blk, dropped ? dropped : saved.probs[n].data(), vp, out + off);
  };

  if (c > 1 && cp.comm_type == CpCommType::ALL_GATHER) {
    cp.cp->all_gather(k.data(), ws.gathered[0].data(), kv_n, comm_type<T>());
    cp.cp->all_gather(v.data(), ws.gathered[1].data(), kv_n, comm_type<T>());
    for (int t = 0; t < 2; ++t)
      reorder_chunks(d, ws.natural[t].data(), ws.gathered[t].data(), s, s.G, spec, true);
    attend(s, passes[0], 0, q.data(), ws.natural[0].data(), ws.natural[1].data(), o,
           s.flash ? saved.lse.data() : nullptr);
    return;
  }
  if (c > 1 && cp.comm_type == CpCommType::A2A) {
    const CoreShape h = heads_shape(s, c);
    to_heads(cp, s, s.A, q.data(), ws.q_heads.data(), ws);
    to_heads(cp, s, s.G, k.data(), ws.k_heads.data(), ws);
    to_heads(cp, s, s.G, v.data(), ws.v_heads.data(), ws);
    T* o_heads = s.flash ? saved.o_heads.data() : ws.o_heads.data();
    attend(h, passes[0], 0, ws.q_heads.data(), ws.k_heads.data(), ws.v_heads.data(), o_heads,
           s.flash ? saved.lse.data() : nullptr);
    if (!recompute) from_heads(cp, s, s.A, o_heads, o, ws);
    if (keep_heads) {  // the backward's q, k, v: head-split, in the layer's own buffers
      kernels::memcpy_device(d, q.data(), ws.q_heads.data(), q.size() * sizeof(T));
      kernels::memcpy_device(d, k.data(), ws.k_heads.data(), k.size() * sizeof(T));
      kernels::memcpy_device(d, v.data(), ws.v_heads.data(), v.size() * sizeof(T));
    }
    return;
  }

  // p2p: the ring (one step, the single-rank attention, at cp 1); a rank of one pass (cp
  // 1, or a contiguous layout's first) writes its outputs directly, else the passes merge
  const bool merging = passes.size() > 1;
  float* acc = nullptr;  // the running output in fp32 (o itself when T is float)
  if constexpr (std::is_same<T, float>::value) acc = o;
  else acc = ws.o_acc.data();
  const int next = (r + 1) % c, prev = (r + c - 1) % c;
  const T *kb = k.data(), *vb = v.data();
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
      T* out = direct ? o : ws.o_pass.data();
      attend(s, p, n, q.data(), kb, vb, out, lse_p);
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

// ---- backward ------------------------------------------------------------------------------
template <typename T>
void core_attention_backward(const ContextParallel& cp, const CoreShape& s, Buffer<T>& q,
                             Buffer<T>& k, Buffer<T>& v, const T* o, const T* dout, T* dq,
                             T* dk, T* dv, CoreSaved<T>& saved, CoreWorkspace<T>& ws,
                             bool heads_kept) {
  const kernels::Device d = cp.device;
  const CpSpec spec = spec_of(cp);
  const int c = cp.size(), r = cp.rank();
  const size_t BA = (size_t)s.B * s.A, q_n = BA * s.S * s.D;
  const size_t kv_n = (size_t)s.B * s.G * s.S * s.D;
  const std::vector<CorePass> passes = core_passes(s, spec);
  // dq accumulates in fp32 for flash (the kernel's), in T for naive (its GEMMs')
  float* dq_acc = nullptr;
  if constexpr (std::is_same<T, float>::value) dq_acc = dq;
  if (!ws.dq_acc.empty()) dq_acc = ws.dq_acc.data();
  const bool split =
      c > 1 && cp.comm_type == CpCommType::P2P && cp.cp->backend() == CommBackend::MPI;
  auto backward = [&](const CoreShape& sh, const CorePass& p, size_t n, const T* qp,
                      const T* kp, const T* vp, const T* op, const T* dop, T* dq_t, float* dq_f,
                      T* dkp, T* dvp, const float* delta) {
    const size_t row0 = p.q_row0, off = row0 * sh.D;
    if (sh.flash) {
      flash_by_group(split, sh, p.blk, [&](size_t qh, size_t kh, const AttentionBlock& blk,
                                           int B, int A, int G) {
        kernels::flash_attention_backward(d, dq_f + off + qh, dkp + kh, dvp + kh, dop + off + qh,
                                          qp + off + qh, kp + kh, vp + kh, op + off + qh,
                                          saved.lse.data() + row0 + qh / sh.D, B, A, G, sh.D,
                                          sh.scale, sh.dropout, sh.seed, sh.stream, blk);
      });
      return;
    }
    const T* dropped = sh.dropout > 0.0f ? saved.probs_dropped[n].data() : nullptr;
    const uint8_t* mask = sh.dropout > 0.0f ? saved.masks[n].data() : nullptr;
    naive_pass_backward(d, sh, p.blk, qp + off, kp, vp, saved.probs[n].data(), dropped, mask,
                        delta ? delta + row0 : nullptr, dop + off, dq_t + off, dkp, dvp,
                        ws.dprobs.data(), ws.scores.data());
  };
  auto zero = [&](void* p, size_t bytes) { kernels::memset_zero(d, p, bytes); };

  if (c > 1 && cp.comm_type == CpCommType::ALL_GATHER) {
    cp.cp->all_gather(k.data(), ws.gathered[0].data(), kv_n, comm_type<T>());
    cp.cp->all_gather(v.data(), ws.gathered[1].data(), kv_n, comm_type<T>());
    for (int t = 0; t < 2; ++t)
      reorder_chunks(d, ws.natural[t].data(), ws.gathered[t].data(), s, s.G, spec, true);
    zero(ws.dk_heads.data(), ws.dk_heads.size() * sizeof(T));
    zero(ws.dv_heads.data(), ws.dv_heads.size() * sizeof(T));
    zero(s.flash ? (void*)dq_acc : (void*)dq, q_n * (s.flash ? 4 : sizeof(T)));
    backward(s, passes[0], 0, q.data(), ws.natural[0].data(), ws.natural[1].data(), o, dout, dq,
             dq_acc, ws.dk_heads.data(), ws.dv_heads.data(), nullptr);
    reorder_chunks(d, ws.dk_heads.data(), ws.gathered[0].data(), s, s.G, spec, false);
    reorder_chunks(d, ws.dv_heads.data(), ws.gathered[1].data(), s, s.G, spec, false);
    cp.cp->reduce_scatter(ws.gathered[0].data(), dk, kv_n, comm_type<T>());
    cp.cp->reduce_scatter(ws.gathered[1].data(), dv, kv_n, comm_type<T>());
    if (s.flash && (void*)dq_acc != (void*)dq) narrow(d, dq, dq_acc, q_n);
    return;
  }
  if (c > 1 && cp.comm_type == CpCommType::A2A) {
    const CoreShape h = heads_shape(s, c);
    const T* qh = heads_kept ? q.data() : ws.q_heads.data();
    const T* kh = heads_kept ? k.data() : ws.k_heads.data();
    const T* vh = heads_kept ? v.data() : ws.v_heads.data();
    to_heads(cp, s, s.A, dout, ws.do_heads.data(), ws);
    zero(ws.dk_heads.data(), kv_n * sizeof(T));
    zero(ws.dv_heads.data(), kv_n * sizeof(T));
    T* dq_heads = s.flash ? ws.q_heads.data() : ws.dq_heads.data();
    if (s.flash) zero(ws.dq_acc.data(), q_n * 4);
    else zero(dq_heads, q_n * sizeof(T));
    backward(h, passes[0], 0, qh, kh, vh, s.flash ? saved.o_heads.data() : nullptr,
             ws.do_heads.data(), dq_heads, ws.dq_acc.data(), ws.dk_heads.data(),
             ws.dv_heads.data(), nullptr);
    if (s.flash) narrow(d, dq_heads, ws.dq_acc.data(), q_n);  // q_heads is free now
    from_heads(cp, s, s.A, dq_heads, dq, ws);
    from_heads(cp, s, s.G, ws.dk_heads.data(), dk, ws);
    from_heads(cp, s, s.G, ws.dv_heads.data(), dv, ws);
    return;
  }

  // p2p: the ring the other way, blocks r+i; dK, dV accumulators travel with them
  const bool merged = passes.size() > 1;  // the passes saw parts of the rows: delta given
  if (!s.flash && merged)
    kernels::attention_delta(d, ws.delta.data(), dout, o, (int)BA, s.D, passes[0].blk.q);
  zero(s.flash ? (void*)dq_acc : (void*)dq, q_n * (s.flash ? 4 : sizeof(T)));
  zero(dk, kv_n * sizeof(T));
  zero(dv, kv_n * sizeof(T));
  const int next = (r + 1) % c, prev = (r + c - 1) % c;
  const T *kb = k.data(), *vb = v.data();
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
        backward(s, passes[n], n, q.data(), kb, vb, o, dout, dq, dq_acc, dkp, dvp,
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
  if (s.flash && (void*)dq_acc != (void*)dq) narrow(d, dq, dq_acc, q_n);
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
#undef PARALAB_CORE

}  // namespace paralab
