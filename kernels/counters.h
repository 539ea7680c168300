// kernels/counters.h: what the dispatchers (kernels/ops/*.h) count at every launch, and how:
// the counting conventions the plan predicts against (plan/flops.h, plan/gemm_calls.h,
// plan/kernel_traffic.h). The readers and resets are for the model, the benchmark and the
// tests; the count_* functions and GemmTimer are for the dispatchers only, which call them
// once per op, before the twin runs (a bf16 CPU twin calls the fp32 twin, never its
// dispatcher, so nothing is counted twice).
//
// FLOPs are counted at launch, by the dispatchers, from the arguments alone (so both
// backends count the same and the CUDA count needs no device round trip). Only matrix
// products are counted, one multiply-add = 2 FLOPs (plan/flops.h compares them with the plan):
//   gemm                      2 m n k
//   gemm_strided_batched      2 m n k batch
//   gemm_grouped              sum over the groups of 2 m_i n_i k_i
//   flash forward             2 products (Q K^T, P V) over the pairs the block's mask keeps:
//                             query i sees blk.visible(i) keys, pairs = sum_i visible(i) per
//                             (b, head) (kernels/math.h visible_pairs; S(S+1)/2 for the whole
//                             causal sequence), 2D FLOPs per pair per product:
//                             2 * 2D * B A pairs = 4 D B A pairs
//   flash backward            5 products (Q K^T recomputed, dP' = dO V^T, dV, dQ, dK):
//                             5 * 2D * B A pairs = 10 D B A pairs
// The tiled kernels also multiply the masked part of each tile that straddles the mask
// (zeroed afterwards); that work is not counted, as FlashAttention's own accounting leaves it
// out. The naive attention pieces (softmax, rescale, dropout, delta, merge) count nothing:
// their products are gemm calls, counted there.
//
// Each GEMM call is also counted per label (GemmLabel): one call and its FLOPs go to the label
// in force, "other" when none; add_flops (the attention kernels) adds FLOPs to it too, so the
// labels' FLOPs sum to flop_counter(). The labels are a few string literals: a short vector
// kept sorted by name, looked up by strcmp, is all the storage they need.
//
// Every other kernel is counted too, at launch and from its arguments (kernel_counts,
// plan/kernel_traffic.h predicts the same): the CUDA kernels the call launches (one for most
// ops; the exceptions below) and the bytes a bandwidth-bound implementation of it moves at
// least, each element read or written once per call at its storage size (e = sizeof(T): 4
// fp32, 2 bf16; 4 for fp32 statistics, lse, gates and int32 indices; 1 per mask
// element). A call that moves nothing (n = 0) launches nothing, as the CUDA twins return.
//   memcpy_device / memset_zero   read + write 2 bytes / write bytes (device to device; the
//                                 host copies, malloc and free cross PCIe or the allocator:
//                                 not counted)
//   add, accumulate     3 n e          scale 2 n 4          convert n (4 + 2)
//   add_bias            (2 N C + C) e  bias_backward (N C + 2 C) e (db is +=: read, write)
//   embedding           fwd 4 N (tokens) + 2 N C e; bwd 4 N + 3 N C e (the rows +=)
//   position embedding  P = min(N, seq_len) table rows: fwd 2 N C e + P C e (out +=),
//                       bwd N C e + 2 P C e
//   layernorm           fwd (2 N C + 2 C) e + 8 N (mean, rstd); bwd (4 N C + 5 C) e + 8 N
//                       (dx, dw, db +=), 2 launches (the dx kernel, the dw/db kernel)
//   rmsnorm             fwd (2 N C + C) e + 4 N; bwd (4 N C + 3 C) e + 4 N, 2 launches
//   gelu                fwd 2 n e, bwd 3 n e;   swiglu fwd 3 N F e, bwd 5 N F e
//   dropout             fwd 2 n e + n (mask), bwd 2 n e + n
//   qkv_split           2 B S (A + 2G) D e either way; heads_merge 2 B S A D e; rope 2 B H S D e
//   naive attention     P = BH q.rows k.rows of a pass: softmax fwd 2 P e (+ 4 BH q.rows lse),
//                       bwd 3 P e (+ 4 BH q.rows delta); probs_rescale 2 P e + 8 BH q.rows;
//                       attention dropout 2 P e + P; delta 2 n D e + 4 n, merge n D (8 + e) +
//                       12 n for the n = BH rows.rows rows of the view (o fp32)
//   flash attention     attention_launches only: forward 1, backward 2 (dq; dk and dv)
//   MoE router (fp32)   topk 4 N E (+ 4 E bias) + 8 N k; topk bwd 8 N E + 8 N k; balancing
//                       scores 8 N E, bwd 16 N E; weighted sum 4 N E + 4 g E (g = N / group),
//                       bwd the same; z loss sum 4 N E, bwd 12 N E; unpermute_gates 12 pairs
//   MoE experts         swiglu fwd 3 M F e + 4 M (gates), bwd 5 M F e + 8 M; gelu fwd 2 M F e
//                       + 4 M, bwd 3 M F e + 8 M; shared gate fwd (3 N C + N) e, bwd (3 N C +
//                       2 N) e
//   moe_permute         4 M (row_pair) + 2 M C e, gates 8 M; fused 1 launch, else rows and
//                       gates apart: 2 launches, row_pair read twice (+ 4 M)
//   moe_unpermute       fused: 4 N k (slots) + N k C e + N C e, 1 launch; unfused: a zeroing
//                       pass (4 N C) and k passes (4 N + N C e + 8 N C: the fp32 accumulator
//                       read and written), bf16 a rounding pass (6 N C): 1 + k (+ 1) launches
//   cross-entropy       row_max 4 N v + 4 N; sum_exp 4 N v + 16 N; finish 4 N v + 4 N V + 20 N
//                       (v valid columns read, all V written)
//   adamw_update        28 n (fp32: p, g, m, v read, p, m, v written; bf16: master, g, m, v
//                       read, master, p, m, v written: the same 28)
//   sum_squares         n e (its partial sums' copy to the host is not counted)
//   MoE dispatch        expert counts 4 N k + 4 g E (g groups); offsets 4 E + 4 E + 4 (E + 1)
//                       (+ 8 E statistics written, 16 E accumulated); gate rank 12 N k;
//                       scatter 8 N k (+ 4 N k ranks) + 4 (E + 1) + 4 M; expert bias update
//                       12 E
//
// Apart from the kernels: the routing's device-to-host copies (count_routing_copy: calls and
// bytes), which model/moe.cpp and parallel/expert_parallel*.cpp make where the host needs a
// size from the router (the grouped GEMM's, the all-to-all's) and once a step for the
// routers' statistics; plan/kernel_traffic.h predicts them too.
//
// GEMM wall time is measured around the twin (GemmTimer): on the CPU backend the call
// returns when the product is done, so the elapsed time is the GEMM's (with bf16 storage,
// its operands' widening and C's rounding included). A CUDA launch returns at once; timing
// it would measure nothing, so a CUDA GEMM marks the counter unmeasured.
//
// defines: the counters' readers and resets, count_gemm, add_flops, count_kernel,
//          count_attention_kernel, count_routing_copy, count_moe_permute, count_moe_unpermute, GemmTimer
//          (kernels/counters.cpp)
#pragma once
#include <chrono>
#include <string>
#include <utility>
#include <vector>
#include "kernels/common.h"  // Device

namespace kernels {

// ---- FLOPs and GEMM calls ------------------------------------------------------------------
// GEMM calls (gemm, gemm_strided_batched, gemm_grouped: one each) and their FLOPs since the
// last reset, per label: the label in force when the call was made (GemmLabel below,
// "other" when none). The model labels its products ("attention", "mlp", "router",
// "experts", "shared_expert", "head"); plan/ predicts each label's count.
struct GemmCount {
  long long calls = 0;
  double flops = 0;
};
// label -> count, in label order; the reset clears every label (reset the FLOP counter with
// it for the labels' FLOPs to sum to flop_counter()).
std::vector<std::pair<std::string, GemmCount>> gemm_counts();
void reset_gemm_counts();
// The label of the GEMMs issued while it lives (nests: the previous label comes back).
// `label` must outlive the scope (a string literal).
class GemmLabel {
 public:
  explicit GemmLabel(const char* label);
  ~GemmLabel();
  GemmLabel(const GemmLabel&) = delete;
  GemmLabel& operator=(const GemmLabel&) = delete;
 private:
  const char* previous_;
};
// FLOPs done by gemm, gemm_strided_batched, gemm_grouped and the attention kernels since the
// last reset (host counter, counted at launch).
double flop_counter();
void reset_flop_counter();
void add_flops(double f);  // also to the current label's FLOPs (not its calls)
// One GEMM call of `flops` FLOPs: add_flops plus one call of the current label. The
// dispatchers call it; model code has no need to.
void count_gemm(double flops);
// Wall-clock seconds spent inside gemm, gemm_strided_batched and gemm_grouped since the last
// reset: the denominator of bench/throughput.sh's step/GEMM ratio. Measured on the CPU backend
// only, where a call returns when its product is done; a CUDA launch returns at once, so there
// it is not measured and gemm_seconds() returns -1.
double gemm_seconds();
void reset_gemm_seconds();

// ---- the other kernels ---------------------------------------------------------------------
// Launches of the kernels that are not GEMM calls since the last reset, and the bytes they
// read plus write (plan/kernel_traffic.h states the convention and predicts both). The
// flash attention kernels are counted apart, launches only (their time is their FLOPs).
struct KernelCount {
  long long launches = 0;
  double bytes = 0;
  long long attention_launches = 0;
  long long routing_copies = 0;  // the MoE routing's device-to-host copies, and their bytes
  double routing_copy_bytes = 0;
};
KernelCount kernel_counts();
void reset_kernel_counts();
// One call's count: `launches` CUDA kernels moving `bytes` (nothing when bytes is 0: the CUDA
// twins launch nothing then). The dispatchers call these; model code has no need to.
void count_kernel(double bytes, int launches = 1);
void count_attention_kernel(int launches);
// One device-to-host copy of `bytes` of MoE routing (counts, sizes, maps); model/ and parallel/
// call it beside the copy.
void count_routing_copy(double bytes);
// What moe_permute and moe_unpermute count (their launches depend on the fusion), e the
// bytes of a row element.
void count_moe_permute(int M, int C, bool gates, bool fused, int e);
void count_moe_unpermute(int N, int C, int k, bool fused, int e);

// Lives for one GEMM call and adds its duration to the GEMM wall time when it ends.
class GemmTimer {
 public:
  explicit GemmTimer(Device d);
  ~GemmTimer();
  GemmTimer(const GemmTimer&) = delete;
  GemmTimer& operator=(const GemmTimer&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kernels
