// parallel/context_parallel.h: context parallelism, the sequence of every sample split over
// cp ranks, and the attention core that still sees the whole sequence. The lesson (the
// load-balanced layout, the ring's steps, what each comm type moves per layer, the overlap
// condition) is parallel/context_parallel.cpp's header comment; one pass of attention (flash
// or naive, on a set of query and key rows) is parallel/attention_pass.cpp.
//
// How the model uses it, per layer and microbatch (model/attention.cpp):
//   forward   core_attention_forward   q, k, v of the rank's S/cp tokens -> O (head layout),
//                                      and what the backward needs (CoreSaved)
//   backward  core_attention_backward  dO -> dq, dk, dv of the rank's tokens
// With one rank (no cp group) the forward is one causal pass over the sequence: the
// single-rank attention, so there is one path for every configuration.
//
// defines: CpCommType, CpLayout, cp_comm_type_name, cp_layout_name, ContextParallel,
//          cp_positions, cp_local_tokens, CoreShape, CpSpec, spec_of, CorePass, core_passes,
//          heads_shape,
//          CoreSaved, CoreWorkspace, CoreBuffer,
//          core_workspace_buffers, core_saved_buffers, core_attention_forward,
//          core_attention_backward
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "kernels/common.h"
#include "kernels/math.h"
#include "measure/ledger.h"
#include "parallel/comm.h"

namespace paralab {

// --cp-comm-type (Megatron's names; "allgather" is accepted for all_gather).
enum class CpCommType { P2P, ALL_GATHER, A2A };
// --cp-layout: zigzag (Megatron's load balancing: rank r holds chunks r and 2cp-1-r of 2cp)
// or contiguous (rank r holds the r-th s/cp tokens, picotron's; unbalanced under the mask).
enum class CpLayout { ZIGZAG, CONTIGUOUS };
const char* cp_comm_type_name(CpCommType t);  // "p2p", "all_gather", "a2a"
const char* cp_layout_name(CpLayout l);       // "zigzag", "contiguous"

// The context-parallel group of this rank (parallel/topology.h: cp is the dense grid's
// second-fastest dimension, after tp). Without it (size 1) nothing is communicated.
struct ContextParallel {
  Communicator* cp = nullptr;
  CpCommType comm_type = CpCommType::P2P;
  CpLayout layout = CpLayout::ZIGZAG;
  kernels::Device device = kernels::Device::CPU;
  int size() const { return cp ? cp->size() : 1; }
  int rank() const { return cp ? cp->rank() : 0; }
};

// Where rank `rank` of `cp` holds its S/cp tokens of an S-token sequence (the whole
// sequence, the identity, at cp 1).
kernels::TokenPositions cp_positions(int S, int cp, int rank, CpLayout layout);
// The rank's tokens of B sequences of S: full (B, S) -> local (B, S/cp), in position order
// within each chunk.
void cp_local_tokens(const int* full, int* local, int B, int S, int cp, int rank,
                     CpLayout layout);

// One layer's attention core on this rank: B sequences of S local tokens (S/cp of the full
// `length`), A query heads and G groups (this tensor-parallel rank's), head dim D.
struct CoreShape {
  int B = 0, A = 0, G = 0, S = 0, D = 0;
  int length = 0;  // tokens of the whole sequence
  bool flash = true;
  float scale = 1.0f, dropout = 0.0f;
  uint64_t seed = 0, stream = 0;
};

// What the plan needs of a rank's place in the group (no communicator).
struct CpSpec {
  int size = 1, rank = 0;
  CpCommType type = CpCommType::P2P;
  CpLayout layout = CpLayout::ZIGZAG;
};
inline CpSpec spec_of(const ContextParallel& cp) {
  return CpSpec{cp.size(), cp.rank(), cp.comm_type, cp.layout};
}

// One pass of the rank's attention: its block (kernels/math.h), the rank whose keys it
// reads, and the first query row of the view (a zig-zag ring's second half starts at s/2cp).
// p2p: one per ring step in forward order (the diagonal first; none for a contiguous
// layout's later blocks); all_gather and a2a: one (a2a's on a/cp heads of the whole
// sequence, with the shape's A and G divided by cp).
struct CorePass {
  kernels::AttentionBlock blk;
  int source = 0;
  int q_row0 = 0;
};
std::vector<CorePass> core_passes(const CoreShape& s, const CpSpec& cp);
// a2a's pass shape: a/cp heads and g/cp groups of whole sequences.
CoreShape heads_shape(const CoreShape& s, int cp);

// A buffer of the core's, for the plan (plan/memory.cpp counts the same list the core
// allocates: predicted == the ledger).
struct CoreBuffer {
  std::string name;
  size_t elements = 0;
  int element_bytes = 0;  // 1 (masks), 4 (fp32), or T's (2 with --bf16)
  size_t bytes() const { return elements * (size_t)element_bytes; }
};
// What the forward keeps for the backward (one layer, one microbatch): flash the rows'
// log-sum-exp; naive the probabilities of every pass (and with attention dropout the masks
// and dropped probabilities), and at more than one pass the rows' lse (a recompute
// rescales its passes with it); a2a without recompute the head-split q, k, v live in the
// layer's q, k, v and flash keeps its head-split O here.
std::vector<CoreBuffer> core_saved_buffers(const CoreShape& s, const CpSpec& cp,
                                           int element_bytes);
// Scratch shared by every layer (category workspace): the passes' outputs, the travelling
// K/V and dK/dV blocks, the gathered or head-split tensors.
std::vector<CoreBuffer> core_workspace_buffers(const CoreShape& s, const CpSpec& cp,
                                               int element_bytes);

template <typename T>
struct CoreSaved {
  Buffer<float> lse;
  std::vector<Buffer<T>> probs, probs_dropped;
  std::vector<Buffer<uint8_t>> masks;
  Buffer<T> o_heads;
  bool empty() const { return lse.size() == 0 && probs.empty() && o_heads.size() == 0; }
  // Fresh buffers of core_saved_buffers' list, in category c.
  void allocate(const CoreShape& s, const CpSpec& cp, kernels::Device device, Category c);
};

template <typename T>
struct CoreWorkspace {
  CoreShape shape;  // what it is sized for
  int element_bytes = 0;
  Buffer<T> o_pass, kv[2][2], dkv[2][2], gathered[2], natural[2], send, recv;
  Buffer<T> q_heads, k_heads, v_heads, o_heads, do_heads, dq_heads, dk_heads, dv_heads;
  Buffer<T> scores, dprobs;
  Buffer<float> o_acc, lse_pass, lse_passes, delta, dq_acc;
  void ensure(const CoreShape& s, const CpSpec& cp, kernels::Device device);
};

// q (B,A,S,D), k, v (B,G,S,D) of the rank's tokens -> o (B,A,S,D) and `saved` (allocated
// here in category `saved_as`: activations, or recompute when --recompute-modules core_attn
// drops them until the backward). a2a without recompute leaves head-split tensors in q, k,
// v (the same sizes); `recompute` is the backward's second forward (naive: only the passes'
// probabilities again, rescaled by the saved lse).
template <typename T>
void core_attention_forward(const ContextParallel& cp, const CoreShape& s, Buffer<T>& q,
                            Buffer<T>& k, Buffer<T>& v, T* o, CoreSaved<T>& saved,
                            CoreWorkspace<T>& ws, Category saved_as, bool keep_heads,
                            bool recompute);
// dO (B,A,S,D) -> dq, dk, dv ("=") of the rank's tokens; o is the forward's O (head layout).
template <typename T>
void core_attention_backward(const ContextParallel& cp, const CoreShape& s, Buffer<T>& q,
                             Buffer<T>& k, Buffer<T>& v, const T* o, const T* dout, T* dq,
                             T* dk, T* dv, CoreSaved<T>& saved, CoreWorkspace<T>& ws,
                             bool heads_kept);

}  // namespace paralab
