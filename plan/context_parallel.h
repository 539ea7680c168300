// plan/context_parallel.h: the communication of context parallelism on one rank, one step
// (parallel/context_parallel.cpp's table, evaluated per layer and microbatch).
//
// With e the storage bytes, the rank's s/cp tokens of B sequences, a and g its heads and
// groups (after tp), KV = 2 B g (s/cp) d e bytes (its K and V), Q = B a (s/cp) d e:
//   p2p         send/recv       (cp-1) calls of KV forward; backward (cp-1) of KV and
//                               (cp-1) of dKV (payload: the bytes sent)
//   all_gather  all-gather      2 calls (K, V) of cp KV/2 each forward, 2 backward;
//               reduce-scatter  2 calls (dK, dV) of cp KV/2 each backward
//               (bus: (cp-1)/cp of the payload, (cp-1) KV per direction)
//   a2a         all-to-all      4 calls forward (q, k, v in, o out: 2 Q + KV), 4 backward
//                               (dO in, dq, dk, dv out); bus (cp-1)/cp of the payload
// Recompute runs the core's forward again before its backward: full recompute its whole
// forward, selective core_attn its exchanges without a2a's output (o is kept as ctx).
//
// defines: CpExchange, cp_layer_exchanges, context_parallel_comm, AttentionPairs,
//          cp_attention_pairs
#pragma once
#include <vector>
#include "plan/plan.h"

namespace paralab {

// One exchange of one layer and microbatch: the forward's (made again by a recompute), the
// a2a output's (not made again by selective core_attn, which keeps ctx), or the backward's.
struct CpExchange {
  enum Phase { FORWARD, OUTPUT, BACKWARD } phase;
  CommOp op;
  const char* what;  // "K, V blocks", "dK, dV accumulators", ...
  int64_t calls = 0, payload_bytes = 0;
};
// The exchanges of m.context_parallel's comm type (none at cp 1).
std::vector<CpExchange> cp_layer_exchanges(const ModelConfig& m, int B, int act_bytes, int tp);

// Adds to `comm` the step's context-parallel calls of the rank m.context_parallel names,
// over the `layers` it holds (global indices), `recomputed[l]` where full recompute runs
// layer l again; microbatches per step, act_bytes the storage bytes. Nothing at cp 1.
void context_parallel_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m, int B,
                           int act_bytes, int tp, const std::vector<int>& layers,
                           const std::vector<bool>& recomputed, int64_t microbatches);

// Query-key pairs one query head of this rank scores in one sequence, per the kernels'
// passes (parallel/context_parallel.h core_passes): causal (the mask's kept pairs, what the
// flash kernels compute) and scored (every pair of every pass: the naive GEMMs' products).
// a2a's passes run a/cp heads of whole sequences: their pairs are given per query head of
// the rank's a (divided by cp).
struct AttentionPairs {
  double causal = 0, scored = 0;
};
AttentionPairs cp_attention_pairs(const ModelConfig& m, int tp);

}  // namespace paralab
