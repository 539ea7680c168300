// parallel/context_parallel_layout.cpp: context parallelism's bookkeeping, beside the
// exchanges of parallel/context_parallel.cpp: where each rank's tokens sit (cp_positions),
// which attention passes a rank runs (core_passes: the ring's blocks and their halves), and
// what the attention core keeps and the scratch it uses (core_saved_buffers,
// core_workspace_buffers), one list that CoreWorkspace::ensure and CoreSaved::allocate
// allocate from and plan/memory.cpp counts, so the ledger and the plan name the same buffers.
//
// Per layer and microbatch, with rows = b a (s/cp) (local heads after tp) and a pass's
// probabilities b a q_rows k_rows:
//   saved      flash: lse (rows, fp32); a2a also O head-split (rows d)
//              naive: P of each pass [+ mask, P'], and with several passes (the ring) the
//              rows' lse (the rescale of a recompute's passes)
//   workspace  p2p (cp > 1): 2 x 2 K/V blocks and 2 x 2 dK/dV accumulators (b g (s/cp) d
//              each), a pass's output (rows d) and lse (flash) or every pass's lse (naive),
//              naive's delta; bf16: the fp32 running output
//              all_gather: gathered K, V (cp b g (s/cp) d each), in position order, and
//              their gradients
//              a2a: the all-to-all's send and receive buffers, q, o, dO head-split (rows d)
//              and k, v, dk, dv (b g (s/cp) d); naive dq head-split
//              flash, bf16 or a2a: dq in fp32 (rows d); naive: a pass's scores and dP
//
// defines: cp_comm_type_name, cp_layout_name, cp_positions, cp_local_tokens, core_passes,
//          heads_shape, core_saved_buffers, core_workspace_buffers, CoreSaved::allocate,
//          CoreWorkspace::ensure
#include <algorithm>
#include <stdexcept>

#include "parallel/context_parallel.h"

#include "kernels/math.h"

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

CoreShape heads_shape(const CoreShape& s, int cp) {
  CoreShape h = s;
  h.A = s.A / cp;
  h.G = s.G / cp;
  h.S = s.length;
  return h;
}

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
void CoreSaved<T>::allocate(const CoreShape& s, const CpSpec& cp, kernels::Device d, Category c) {
  *this = CoreSaved<T>();
  for (const CoreBuffer& b : core_saved_buffers(s, cp, (int)sizeof(T))) {
    if (b.name == "lse") lse.allocate(d, b.elements, c);
    if (b.name == "o_heads") o_heads.allocate(d, b.elements, c);
    if (b.name == "probs") probs.emplace_back(d, b.elements, c);
    if (b.name == "mask") masks.emplace_back(d, b.elements, c);
    if (b.name == "probs_dropped") probs_dropped.emplace_back(d, b.elements, c);
  }
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

template struct CoreSaved<float>;
template struct CoreSaved<kernels::bf16>;
template struct CoreSaved<kernels::fp16>;
template struct CoreWorkspace<float>;
template struct CoreWorkspace<kernels::bf16>;
template struct CoreWorkspace<kernels::fp16>;

}  // namespace paralab
