// kernels/counters.h: what the dispatchers (kernels/ops/*.h) count at every launch, and how:
// the counting conventions the plan predicts against (plan/flops.h, plan/gemm_calls.h,
// plan/kernel_traffic.h). The readers and resets are for the model, the benchmark and the
// tests; the count_* functions and KernelTimer are for the dispatchers only, which call them
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
//   adamw_update        28 n over all its runs, one launch (fp32: p, g, m, v read, p, m, v
//                       written; bf16: master, g, m, v read, master, p, m, v written: the same
//                       28)
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
// Time per phase. Every twin call a dispatcher makes is timed (ON_DEVICE wraps the twin in
// a KernelTimer, kernels/dispatch.h), and the phase it is summed into is what the dispatcher
// counted just before it: count_gemm a GEMM, count_attention_kernel a flash attention kernel,
// count_kernel a memory-bound kernel (a call that moves nothing launches nothing and is not
// timed); inside a PhaseScope (the optimizer step and the gradient zeroing) every kernel goes
// to the scope's phase. These are the rows of the run's time table (report/report_time.h),
// beside plan/time_model.h's projection of the same phases.
//
// One mechanism, two backends: a timed call puts a pair of marks around the twin, taken from a
// pool, and the pairs are resolved, summed per phase and per GEMM label, only when the step's
// numbers are read (phase_seconds, once at the step's end). On the CPU backend a mark is the
// steady clock (the call returns when its work is done). A CUDA launch returns at once, so a
// clock around it would time the launch, not the kernel: a mark is a cudaEvent recorded on the
// stream, and phase_seconds waits for the last one (cudaEventSynchronize) and reads each
// pair's cudaEventElapsedTime. The events are created once, when the pool first grows to the
// step's count of timed calls, and reused every step (no cudaEventCreate per call). A pair
// measures the time the stream spent from the start mark to the end mark: the kernel, plus
// the launch's latency when the GPU had caught up with the host (a host-bound step reads
// longer kernels, not a shorter step). What is not in a pair (the gaps between kernels, host
// work, waiting for communication) is the table's "other (the rest)". A cudaEventRecord costs
// about a microsecond of host time, two per call. A pool that fills (kMaxTimerMarks, far
// above a step's calls) is resolved early, which waits for the device.
//
// defines: the counters' readers and resets, count_gemm, add_flops, count_kernel,
//          count_attention_kernel, count_routing_copy, count_moe_permute, count_moe_unpermute,
//          Phase, PhaseSeconds, phase_seconds, reset_phase_seconds, PhaseScope,
//          set_timing_level, timing_level, OpTime, op_times, timer_overhead_seconds, KernelTimer,
//          timer_mark, timer_seconds, AllocationCount, allocation_counts,
//          reset_allocation_counts, count_allocation, count_zero_fill (kernels/counters.cpp;
//          the timer_* twins in kernels/cpu/memory_gemm.cpp and kernels/cuda/memory_gemm.cu)
#pragma once
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
  double seconds = 0;  // the calls' time, added when phase_seconds resolves the step's marks
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

// ---- allocations ---------------------------------------------------------------------------
// What device_malloc did since the last reset (kernels/block_cache.h): `fresh` blocks the
// backend made (cudaMalloc, aligned_alloc) and their bytes, `reused` ones the cache handed out
// again, and the bytes zero-filled (every device_malloc zeroes what it returns, fresh or
// reused: one memset, a write of each byte). The scratch of the CUDA twins (not zeroed) counts
// as blocks too. After the first step a training step makes no fresh block.
struct AllocationCount {
  long long fresh = 0, reused = 0;
  double fresh_bytes = 0, zeroed_bytes = 0;
};
AllocationCount allocation_counts();
void reset_allocation_counts();
void count_allocation(bool fresh, size_t block_bytes);  // kernels/block_cache.cpp
void count_zero_fill(size_t bytes);                      // device_malloc's dispatcher

// ---- time per phase ------------------------------------------------------------------------
// The phases of the time table: GEMM calls, the flash attention kernels, the other (memory-
// bound) kernels, and the optimizer's and the step's kernels (PhaseScope).
enum class Phase { gemm, attention, memory, optimizer, none };
constexpr int kNumPhases = 4;
// Seconds per phase since the last reset; -1 where nothing was timed since the reset.
struct PhaseSeconds {
  double gemm = -1, attention = -1, memory = -1, optimizer = -1;
};
// Resolves the marks taken since the last call (CUDA: waits for the last one), adds each
// pair to its phase and, for a GEMM, to its label's GemmCount::seconds, and returns the sums.
PhaseSeconds phase_seconds();
// Forgets the sums and the marks not yet resolved (their pool is reused).
void reset_phase_seconds();
// Every kernel timed while it lives goes to `phase` (nests: the previous scope comes back).
class PhaseScope {
 public:
  explicit PhaseScope(Phase phase);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
 private:
  Phase previous_;
};
// Lives for one twin call (ON_DEVICE makes one): a pair of marks on device d around it, when
// the dispatcher counted a kernel just before; nothing otherwise (malloc, the host copies).
// --timing-log-level (Megatron-LM's flag and levels; paralab's default is 1 where Megatron's
// is 0, since the time table is a lesson): 0 takes no marks at all (the phases print "-");
// 1 a pair around every timed call, summed per phase; 2 also per op (op_times: the time
// table lists every op). The marks' own cost: timer_overhead_seconds, measured by --benchmark.
void set_timing_level(int level);
int timing_level();
struct OpTime {
  long long calls = 0;
  double seconds = 0;
};
// Level 2: each op's calls and time since the last reset_phase_seconds (resolved with
// phase_seconds), in op-name order.
std::vector<std::pair<std::string, OpTime>> op_times();
// Host seconds one timed call's pair of marks costs on device d (the median of a few hundred).
double timer_overhead_seconds(Device d);

class KernelTimer {
 public:
  explicit KernelTimer(Device d, const char* op = nullptr);
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;
 private:
  Device device_;
  int start_ = -1;  // the start mark, -1: not timed; the end mark is start_ + 1
};
// The pool's size: marks taken between two resolves (half as many timed calls).
constexpr int kMaxTimerMarks = 1 << 17;
// The backends' marks, twins (CPU: the steady clock; CUDA: a cudaEvent on the stream, the pool
// grown by cudaEventCreate on first use of a mark): take mark `mark` now, in stream order; the
// seconds from mark `from` to mark `to` (CUDA: waits for `to`).
template <Device Dev> void timer_mark(int mark);
template <Device Dev> double timer_seconds(int from, int to);

}  // namespace kernels
