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
// Overlap (p2p). Step i's transfer hides behind step i's attention when a block's attention
// time >= its transfer time: 4 b (a/cp) (s/2cp)(s/cp) d / F >= KV bytes / bandwidth per
// half block; the plan states it at the hardware's bandwidth, the report measures the
// exposed (waited) time.
//
// defines: cp_comm_type_name, cp_layout_name, cp_positions, cp_local_tokens, core_passes,
//          core_saved_buffers, core_workspace_buffers, CoreWorkspace::ensure,
//          core_attention_forward, core_attention_backward
#include "parallel/context_parallel.h"

#include <stdexcept>
#include <type_traits>

#include "kernels/ops.h"
#include "parallel/attention_pass.h"

namespace paralab {

using kernels::AttentionBlock;
using kernels::AttentionRows;
using kernels::TokenPositions;

const char* cp_comm_type_name(CpCommType t) {
  return t == CpCommType::P2P ? "p2p" : t == CpCommType::ALL_GATHER ? "all_gather" : "a2a";
}
const char* cp_layout_name(CpLayout l) { return l == CpLayout::ZIGZAG ? "zigzag" : "contiguous"; }

TokenPositions cp_positions(int S, int cp, int rank, CpLayout layout) {
  TokenPositions p;
  if (cp == 1) return p;
  p.local = S / cp;
  p.length = S;
  if (layout == CpLayout::CONTIGUOUS) {
    p.chunk = S / cp;
    p.start[0] = p.start[1] = rank * p.chunk;
  } else {
    p.chunk = S / (2 * cp);
    p.start[0] = rank * p.chunk;
    p.start[1] = (2 * cp - 1 - rank) * p.chunk;
  }
  return p;
}

void cp_local_tokens(const int* full, int* local, int B, int S, int cp, int rank,
                     CpLayout layout) {
  const TokenPositions p = cp_positions(S, cp, rank, layout);
  const int Sl = S / cp;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < Sl; ++i) local[b * Sl + i] = full[b * S + (cp == 1 ? i : p.at(i))];
}

// ---- the passes of a rank ------------------------------------------------------------------
namespace {

AttentionRows rows_of(int rows, int S, int D, const TokenPositions& pos) {
  return AttentionRows{rows, (long long)S * D, pos};
}
// The first or second chunk of a zig-zag rank's rows, as a view of its own.
AttentionRows half_of(const CoreShape& s, const TokenPositions& pos, int which) {
  TokenPositions h;
  h.chunk = pos.chunk;
  h.start[0] = h.start[1] = pos.start[which];
  h.local = pos.local;
  h.length = pos.length;
  return rows_of(pos.chunk, s.S, s.D, h);
}

}  // namespace

std::vector<CorePass> core_passes(const CoreShape& s, const CpSpec& cp) {
  std::vector<CorePass> passes;
  auto dropout_of = [&](AttentionBlock& b, int heads, int head0) {
    b.dropout_heads = heads;
    b.dropout_head0 = head0;
    b.dropout_length = s.length;
  };
  if (cp.type != CpCommType::P2P || cp.size == 1) {
    CorePass p;
    const int L = s.length;
    if (cp.type == CpCommType::A2A && cp.size > 1) {  // a/cp heads, the whole sequence
      p.blk.q = rows_of(L, L, s.D, TokenPositions());
      p.blk.k = p.blk.q;
      dropout_of(p.blk, s.A, cp.rank * (s.A / cp.size));
    } else {  // the local queries against the whole (gathered) sequence
      p.blk.q = rows_of(s.S, s.S, s.D, cp_positions(L, cp.size, cp.rank, cp.layout));
      p.blk.k = rows_of(L, L, s.D, TokenPositions());
      dropout_of(p.blk, s.A, 0);
    }
    passes.push_back(p);
    return passes;
  }
  const TokenPositions mine = cp_positions(s.length, cp.size, cp.rank, cp.layout);
  for (int i = 0; i < cp.size; ++i) {
    const int j = ((cp.rank - i) % cp.size + cp.size) % cp.size;  // forward order
    const TokenPositions theirs = cp_positions(s.length, cp.size, j, cp.layout);
    CorePass p;
    p.source = j;
    p.blk.q = rows_of(s.S, s.S, s.D, mine);
    p.blk.k = rows_of(s.S, s.S, s.D, theirs);
    p.blk.causal = j == cp.rank;
    if (j > cp.rank && cp.layout == CpLayout::CONTIGUOUS) continue;  // all in the future
    if (j < cp.rank && cp.layout == CpLayout::ZIGZAG) p.blk.k = half_of(s, theirs, 0);
    if (j > cp.rank && cp.layout == CpLayout::ZIGZAG) {
      p.blk.q = half_of(s, mine, 1);
      p.q_row0 = mine.chunk;
    }
    dropout_of(p.blk, s.A, 0);
    passes.push_back(p);
  }
  return passes;
}

// ---- the buffers (plan/memory.cpp counts these lists) ----------------------------------------
namespace {
size_t pass_probs(const CoreShape& s, const CpSpec& cp, const CorePass& p) {
  const size_t heads = cp.type == CpCommType::A2A && cp.size > 1 ? s.A / cp.size : s.A;
  return (size_t)s.B * heads * p.blk.q.rows * p.blk.k.rows;
}
}  // namespace

std::vector<CoreBuffer> core_saved_buffers(const CoreShape& s, const CpSpec& cp, int e) {
  std::vector<CoreBuffer> out;
  const size_t rows = (size_t)s.B * s.A * s.S;  // every (b, head, local token): lse's size
  const bool a2a = cp.type == CpCommType::A2A && cp.size > 1;
  if (s.flash) {
    out.push_back({"lse", rows, 4});
    if (a2a) out.push_back({"o_heads", rows * s.D, e});  // O head-split, for the backward
    return out;
  }
  const std::vector<CorePass> passes = core_passes(s, cp);
  for (const CorePass& p : passes) {
    out.push_back({"probs", pass_probs(s, cp, p), e});
    if (s.dropout > 0.0f) {
      out.push_back({"mask", pass_probs(s, cp, p), 1});
      out.push_back({"probs_dropped", pass_probs(s, cp, p), e});
    }
  }
  if (passes.size() > 1) out.push_back({"lse", rows, 4});
  return out;
}

std::vector<CoreBuffer> core_workspace_buffers(const CoreShape& s, const CpSpec& cp, int e) {
  std::vector<CoreBuffer> out;
  const size_t q = (size_t)s.B * s.A * s.S * s.D, kv = (size_t)s.B * s.G * s.S * s.D;
  const size_t rows = (size_t)s.B * s.A * s.S, c = cp.size;
  const bool many = cp.size > 1;
  if (many && cp.type == CpCommType::P2P) {
    for (const char* n : {"kv", "kv", "kv", "kv", "dkv", "dkv", "dkv", "dkv"})
      out.push_back({n, kv, e});
    out.push_back({"o_pass", q, e});
    if (s.flash) out.push_back({"lse_pass", rows, 4});
    else out.push_back({"lse_passes", c * rows, 4});
    if (!s.flash) out.push_back({"delta", rows, 4});
    if (e != 4) out.push_back({"o_acc", q, 4});
  }
  if (many && cp.type == CpCommType::ALL_GATHER) {
    const size_t full = kv * c;
    for (const char* n : {"gathered", "gathered", "natural", "natural", "dk_heads", "dv_heads"})
      out.push_back({n, full, e});
  }
  if (many && cp.type == CpCommType::A2A) {
    for (const char* n : {"send", "recv", "q_heads", "o_heads", "do_heads"})
      out.push_back({n, q, e});
    for (const char* n : {"k_heads", "v_heads", "dk_heads", "dv_heads"}) out.push_back({n, kv, e});
    if (!s.flash) out.push_back({"dq_heads", q, e});
  }
  if (s.flash && (e != 4 || (many && cp.type == CpCommType::A2A))) out.push_back({"dq_acc", q, 4});
  if (!s.flash) {
    size_t most = 0;
    for (const CorePass& p : core_passes(s, cp)) most = std::max(most, pass_probs(s, cp, p));
    out.push_back({"scores", most, e});
    out.push_back({"dprobs", most, e});
  }
  return out;
}

template <typename T>
void CoreWorkspace<T>::ensure(const CoreShape& s, const CpSpec& cp, kernels::Device d) {
  const int e = (int)sizeof(T);
  if (s.B == shape.B && s.S == shape.S && s.A == shape.A && e == element_bytes) return;
  shape = s;
  element_bytes = e;
  *this = CoreWorkspace<T>();
  shape = s;
  element_bytes = e;
  int kv_n = 0, dkv_n = 0, gathered_n = 0, natural_n = 0;
  for (const CoreBuffer& b : core_workspace_buffers(s, cp, e)) {
    const Category w = Category::WORKSPACE;
    Buffer<T>* t = nullptr;
    Buffer<float>* f = nullptr;
    const std::string& n = b.name;
    if (n == "kv") t = &kv[kv_n / 2][kv_n % 2], ++kv_n;
    else if (n == "dkv") t = &dkv[dkv_n / 2][dkv_n % 2], ++dkv_n;
    else if (n == "gathered") t = &gathered[gathered_n++];
    else if (n == "natural") t = &natural[natural_n++];
    else if (n == "o_pass") t = &o_pass;
    else if (n == "send") t = &send;
    else if (n == "recv") t = &recv;
    else if (n == "q_heads") t = &q_heads;
    else if (n == "k_heads") t = &k_heads;
    else if (n == "v_heads") t = &v_heads;
    else if (n == "o_heads") t = &o_heads;
    else if (n == "do_heads") t = &do_heads;
    else if (n == "dq_heads") t = &dq_heads;
    else if (n == "dk_heads") t = &dk_heads;
    else if (n == "dv_heads") t = &dv_heads;
    else if (n == "scores") t = &scores;
    else if (n == "dprobs") t = &dprobs;
    else if (n == "o_acc") f = &o_acc;
    else if (n == "lse_pass") f = &lse_pass;
    else if (n == "lse_passes") f = &lse_passes;
    else if (n == "delta") f = &delta;
    else if (n == "dq_acc") f = &dq_acc;
    else throw std::logic_error("CoreWorkspace: unknown buffer " + n);
    if (t) t->allocate(d, b.elements, w);
    if (f) f->allocate(d, b.elements, w);
  }
}

// ---- moving chunks and heads -------------------------------------------------------------
namespace {

template <typename T>
DType dtype_of() {
  return std::is_same<T, float>::value ? DType::F32 : DType::BF16;
}
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
  cp.cp->all_to_all(ws.send.data(), ws.recv.data(), per, dtype_of<T>());
  reorder_chunks(cp.device, heads, ws.recv.data(), s, H / cp.size(), spec_of(cp), true);
}
template <typename T>
void from_heads(const ContextParallel& cp, const CoreShape& s, int H, const T* heads, T* x,
                CoreWorkspace<T>& ws) {
  const size_t per = (size_t)s.B * (H / cp.size()) * s.S * s.D;
  reorder_chunks(cp.device, const_cast<T*>(heads), ws.send.data(), s, H / cp.size(),
                 spec_of(cp), false);
  cp.cp->all_to_all(ws.send.data(), ws.recv.data(), per, dtype_of<T>());
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
  auto attend = [&](const CoreShape& sh, const CorePass& p, size_t n, const T* qp, const T* kp,
                    const T* vp, T* out, float* lse) {
    const size_t row0 = p.q_row0, off = row0 * sh.D;
    if (sh.flash) {
      kernels::flash_attention_forward(d, out + off, lse + row0, qp + off, kp, vp, sh.B, sh.A,
                                       sh.G, sh.D, sh.scale, sh.dropout, sh.seed, sh.stream,
                                       p.blk);
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
    cp.cp->all_gather(k.data(), ws.gathered[0].data(), kv_n, dtype_of<T>());
    cp.cp->all_gather(v.data(), ws.gathered[1].data(), kv_n, dtype_of<T>());
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
    if (i < c - 1) {  // 1. the held block on to r+1, the next from r-1
      T* kn = ws.kv[i % 2][0].data();
      T* vn = ws.kv[i % 2][1].data();
      transfer = cp.cp->send_recv_async(
          {P2POp::send(kb, kv_n, next, dtype_of<T>()), P2POp::send(vb, kv_n, next, dtype_of<T>()),
           P2POp::recv(kn, kv_n, prev, dtype_of<T>()), P2POp::recv(vn, kv_n, prev, dtype_of<T>())});
    }
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
  auto backward = [&](const CoreShape& sh, const CorePass& p, size_t n, const T* qp,
                      const T* kp, const T* vp, const T* op, const T* dop, T* dq_t, float* dq_f,
                      T* dkp, T* dvp, const float* delta) {
    const size_t row0 = p.q_row0, off = row0 * sh.D;
    if (sh.flash) {
      kernels::flash_attention_backward(d, dq_f + off, dkp, dvp, dop + off, qp + off, kp, vp,
                                        op + off, saved.lse.data() + row0, sh.B, sh.A, sh.G,
                                        sh.D, sh.scale, sh.dropout, sh.seed, sh.stream, p.blk);
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
    cp.cp->all_gather(k.data(), ws.gathered[0].data(), kv_n, dtype_of<T>());
    cp.cp->all_gather(v.data(), ws.gathered[1].data(), kv_n, dtype_of<T>());
    for (int t = 0; t < 2; ++t)
      reorder_chunks(d, ws.natural[t].data(), ws.gathered[t].data(), s, s.G, spec, true);
    zero(ws.dk_heads.data(), ws.dk_heads.size() * sizeof(T));
    zero(ws.dv_heads.data(), ws.dv_heads.size() * sizeof(T));
    zero(s.flash ? (void*)dq_acc : (void*)dq, q_n * (s.flash ? 4 : sizeof(T)));
    backward(s, passes[0], 0, q.data(), ws.natural[0].data(), ws.natural[1].data(), o, dout, dq,
             dq_acc, ws.dk_heads.data(), ws.dv_heads.data(), nullptr);
    reorder_chunks(d, ws.dk_heads.data(), ws.gathered[0].data(), s, s.G, spec, false);
    reorder_chunks(d, ws.dv_heads.data(), ws.gathered[1].data(), s, s.G, spec, false);
    cp.cp->reduce_scatter(ws.gathered[0].data(), dk, kv_n, dtype_of<T>());
    cp.cp->reduce_scatter(ws.gathered[1].data(), dv, kv_n, dtype_of<T>());
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
      transfer = cp.cp->send_recv_async({P2POp::send(kb, kv_n, prev, dtype_of<T>()),
                                         P2POp::send(vb, kv_n, prev, dtype_of<T>()),
                                         P2POp::recv(ws.kv[i % 2][0].data(), kv_n, next,
                                                     dtype_of<T>()),
                                         P2POp::recv(ws.kv[i % 2][1].data(), kv_n, next,
                                                     dtype_of<T>())});
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
      accumulated = cp.cp->send_recv_async(
          {P2POp::send(dkp, kv_n, prev, dtype_of<T>()), P2POp::send(dvp, kv_n, prev, dtype_of<T>()),
           P2POp::recv(ws.dkv[(i + 1) % 2][0].data(), kv_n, next, dtype_of<T>()),
           P2POp::recv(ws.dkv[(i + 1) % 2][1].data(), kv_n, next, dtype_of<T>())});
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
  template struct CoreWorkspace<T>;                                                          \
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
