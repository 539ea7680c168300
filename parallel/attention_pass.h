// parallel/attention_pass.h: one pass of attention, a set of query rows against a set of key
// rows (kernels/math.h AttentionBlock), flash or naive: the unit that context parallelism's
// ring, all-gather and all-to-all (parallel/context_parallel.cpp) repeat, and that the
// single-rank run does once over the whole sequence.
//
// Layouts: q, o, dout, dq (B, A, rows, D) and k, v, dk, dv (B, G, rows, D) head-major, the
// pointers at the heads' first rows; a naive pass's probabilities (B*A, q.rows, k.rows).
// GQA: the A/G query heads of a group share its key/value head. When the query view is
// contiguous (its rows are the whole head), one GEMM per (batch, group) covers the group's
// heads, as the single-rank path always did; a half view takes one GEMM per head of a group.
//
// defines: AttentionPass, attention_gemm_calls
#pragma once
#include <cstddef>
#include <cstdint>
#include "kernels/common.h"
#include "kernels/math.h"

namespace paralab {

struct CoreShape;
struct CorePass;
template <typename T>
struct CoreSaved;
template <typename T>
struct CoreWorkspace;

// How a core runs its passes (parallel/context_parallel.cpp sets it up once per call). A
// flash pass is one kernel call each way; a naive pass is GEMMs around the block's softmax
// kernels, keeping its probabilities for the backward.
template <typename T>
struct AttentionPass {
  kernels::Device device = kernels::Device::CPU;
  CoreSaved<T>* saved = nullptr;    // naive: pass n's probabilities saved->probs[n] (with
                                    // dropout masks[n], probs_dropped[n]); flash: the rows' lse
  CoreWorkspace<T>* ws = nullptr;   // naive: the scores and dP scratch
  bool by_group = false;    // flash: one (batch, group) at a time with comm_progress() between
                            // (the ring on the MPI backend, parallel/context_parallel.cpp)
  bool probs_only = false;  // naive forward: the probabilities alone (a recompute of one pass)

  // Pass p, the n-th of the rank's, on shape s: o ("=") and lse at the pass's q view (naive:
  // lse may be nullptr). Every pointer is at its heads' first row; the pass finds its query
  // view at p.q_row0.
  void forward(const CoreShape& s, const CorePass& p, size_t n, const T* q, const T* k,
               const T* v, T* o, float* lse) const;
  // Its share of the gradients from dout: dq (+=; naive into dq, flash into the fp32 dq_f),
  // dk, dv (+=); o is the forward's O, delta (naive, nullptr when the pass is every row's
  // whole softmax) the rows' dout . o.
  void backward(const CoreShape& s, const CorePass& p, size_t n, const T* q, const T* k,
                const T* v, const T* o, const T* dout, T* dq, float* dq_f, T* dk, T* dv,
                const float* delta) const;
};

// GEMM calls of one product of a naive pass (plan/flops.h counts them): one per batch of
// (b, group) when the query view is contiguous, else one per head of a group.
int attention_gemm_calls(const CoreShape& s, const kernels::AttentionBlock& blk);

}  // namespace paralab
