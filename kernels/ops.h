// kernels/ops.h: every device operation the model uses, one declaration each.
//
// Each op exists twice with the same signature: kernels::cpu::NAME (kernels/cpu/, plain
// loops and OpenBLAS: the pseudocode a student reads) and kernels::cuda::NAME
// (kernels/cuda/, the CUDA kernel that mirrors it). kernels::NAME(Device, ...) below
// dispatches (kernels/ops.cpp). kernels/ knows nothing of parallelism or of the model.
//
// Conventions, for all ops:
//  - row-major; a "row" is one token; N = number of tokens (b*s), C = channels;
//  - every pointer lives on the op's device; float is fp32;
//  - parameter gradients (dw, db) are ACCUMULATED (+=): microbatches and tied weights add
//    into one gradient buffer;
//  - activation gradients follow the comment on each op ("=" writes, "+=" accumulates);
//  - ops are asynchronous on CUDA (one stream); kernels::synchronize waits.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "kernels/common.h"
#include "kernels/math.h"  // TokenPositions, AttentionRows, AttentionBlock

namespace kernels {

// ---- memory -----------------------------------------------------------------------
void* device_malloc(Device d, size_t bytes);  // zero-filled
void device_free(Device d, void* p);
void memcpy_to_host(Device d, void* host_dst, const void* src, size_t bytes);
void memcpy_from_host(Device d, void* dst, const void* host_src, size_t bytes);
void memcpy_device(Device d, void* dst, const void* src, size_t bytes);
void memset_zero(Device d, void* p, size_t bytes);
void synchronize(Device d);

// ---- GEMM -----------------------------------------------------------------------
// C(m,n) = alpha * op(A)(m,k) * op(B)(k,n) + beta * C, row-major, op = transpose if flag.
// lda/ldb/ldc are row strides of the matrices as stored. cuBLAS / OpenBLAS sgemm.
// Every call adds 2*m*n*k to the FLOP counter below (the measured FLOPs of a step).
void gemm(Device d, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc);
// The same for `batch` independent products, matrix i at A + i*stride_a etc.
void gemm_strided_batched(Device d, bool trans_a, bool trans_b, int m, int n, int k,
                          float alpha, const float* A, int lda, long long stride_a,
                          const float* B, int ldb, long long stride_b, float beta, float* C,
                          int ldc, long long stride_c, int batch);
// Grouped GEMM: `count` independent products in ONE call (one launch: the MoE experts'
// projections, --moe-grouped-gemm). Group i is C_i(m_i, n_i) = alpha op(A_i) op(B_i) + beta
// C_i with A_i = A + a_offset_i etc. (elements), the row strides shared by every group. A
// group with m or n == 0 does nothing; one with k == 0 leaves C_i = beta C_i (beta must be 1
// there: its product is empty). `groups` is a host array. CPU: one function running the
// group's products one after another with the same sgemm as gemm (bit for bit the per-group
// gemm calls); CUDA: cublasGemmGroupedBatchedEx. Counts as one GEMM call, sum 2 m n k FLOPs.
struct GemmGroup {
  int m = 0, n = 0, k = 0;
  long long a_offset = 0, b_offset = 0, c_offset = 0;
};
void gemm_grouped(Device d, bool trans_a, bool trans_b, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc,
                  const GemmGroup* groups, int count);
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
// dispatchers (kernels/ops.cpp, ops_bf16.cpp) call it; model code has no need to.
void count_gemm(double flops);
// sum over the groups of 2 m n k: what gemm_grouped counts.
double grouped_flops(const GemmGroup* groups, int count);
// Wall-clock seconds spent inside gemm, gemm_strided_batched and gemm_grouped since the last
// reset: the denominator of bench/throughput.sh's step/GEMM ratio. Measured on the CPU backend
// only, where a call returns when its product is done; a CUDA launch returns at once, so there
// it is not measured and gemm_seconds() returns -1.
double gemm_seconds();
void reset_gemm_seconds();

// Launches of the kernels that are not GEMM calls since the last reset, and the bytes they
// read plus write (plan/kernel_traffic.h states the convention and predicts both). The
// flash attention kernels are counted apart, launches only (their time is their FLOPs).
struct KernelCount {
  long long launches = 0;
  double bytes = 0;
  long long attention_launches = 0;
};
KernelCount kernel_counts();
void reset_kernel_counts();
// One call's count: `launches` CUDA kernels moving `bytes` (nothing when bytes is 0: the CUDA
// twins launch nothing then). The dispatchers (kernels/ops.cpp, ops_bf16.cpp) call these;
// model code has no need to.
void count_kernel(double bytes, int launches = 1);
void count_attention_kernel(int launches);
// What moe_permute and moe_unpermute count (their launches depend on the fusion), e the
// bytes of a row element.
void count_moe_permute(int M, int C, bool gates, bool fused, int e);
void count_moe_unpermute(int N, int C, int k, bool fused, int e);

// ---- elementwise ------------------------------------------------------------------
void add(Device d, float* out, const float* a, const float* b, size_t n);   // out = a + b
void accumulate(Device d, float* out, const float* a, size_t n);            // out += a
void scale(Device d, float* x, float s, size_t n);                          // x *= s
// y(N,C) += bias(C) broadcast over rows.
void add_bias(Device d, float* y, const float* bias, int N, int C);
// dbias(C) += sum over rows of dy(N,C).
void bias_backward(Device d, float* dbias, const float* dy, int N, int C);

// ---- embedding ----------------------------------------------------------------------
// A table of vocab_rows rows holding token ids [vocab_start, vocab_start + vocab_rows) (the
// whole vocabulary on one rank; a tensor-parallel rank's slice otherwise). tokens int32.
// out(N,C) ("=") = wte[tokens[i] - vocab_start] for the tokens in range, 0 for the others.
void embedding_forward(Device d, float* out, const int* tokens, const float* wte,
                       int vocab_start, int vocab_rows, int N, int C);
// dwte[tokens[i] - vocab_start] += dout[i] for the tokens in range.
void embedding_backward(Device d, float* dwte, const float* dout, const int* tokens,
                        int vocab_start, int vocab_rows, int N, int C);
// Learned positions: row i of out(N,C) is token row first_row + i of a (batch, seq_len)
// layout, at local position s = (first_row + i) % seq_len, global position pos.at(s)
// (context parallelism; the identity by default): out[i] += wpe[pos.at(s)].
void position_embedding_forward(Device d, float* out, const float* wpe, int N, int seq_len,
                                int first_row, int C, const TokenPositions& pos = TokenPositions());
// dwpe[pos.at((first_row + i) % seq_len)] += dout[i].
void position_embedding_backward(Device d, float* dwpe, const float* dout, int N, int seq_len,
                                 int first_row, int C,
                                 const TokenPositions& pos = TokenPositions());

// ---- norms --------------------------------------------------------------------------
// LayerNorm: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps) (biased variance).
// Saves mean(N) and rstd(N) for backward.
void layernorm_forward(Device d, float* out, float* mean, float* rstd, const float* x,
                       const float* w, const float* b, int N, int C, float eps);
// dx += ..., dw += ..., db += ...
void layernorm_backward(Device d, float* dx, float* dw, float* db, const float* dout,
                        const float* x, const float* w, const float* mean,
                        const float* rstd, int N, int C);
// RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). Saves rstd(N).
void rmsnorm_forward(Device d, float* out, float* rstd, const float* x, const float* w,
                     int N, int C, float eps);
// dx += ..., dw += ...
void rmsnorm_backward(Device d, float* dx, float* dw, const float* dout, const float* x,
                      const float* w, const float* rstd, int N, int C);

// ---- activations ----------------------------------------------------------------------
void gelu_forward(Device d, float* out, const float* in, size_t n);
// din = dout * gelu'(in)   ("=")
void gelu_backward(Device d, float* din, const float* dout, const float* in, size_t n);
// in(N, 2F) holds [gate | up] per row; out(N,F) = silu(gate) * up.
void swiglu_forward(Device d, float* out, const float* in, int N, int F);
// din(N,2F) = ("=") [dout*up*silu'(gate) | dout*silu(gate)]
void swiglu_backward(Device d, float* din, const float* dout, const float* in, int N, int F);

// ---- dropout --------------------------------------------------------------------------
// Keep element i when counter_uniform(seed, stream, pos.element(i, width)) >= p
// (kernels/math.h); out = in * keep / (1-p); mask[i] = keep (1 byte). p == 0 copies and sets
// mask to 1. pos and width: a (B * pos.local, width) tensor of a context-parallel rank's
// tokens draws the single-rank run's bits (the default: index i itself).
void dropout_forward(Device d, float* out, uint8_t* mask, const float* in, size_t n, float p,
                     uint64_t seed, uint64_t stream, const TokenPositions& pos = TokenPositions(),
                     int width = 1);
// din = ("=") dout * mask / (1-p)
void dropout_backward(Device d, float* din, const float* dout, const uint8_t* mask,
                      size_t n, float p);

// ---- attention layout -----------------------------------------------------------------
// Attention shapes: B batch, S sequence, A query heads, G query groups (key/value heads,
// A % G == 0), D head dim. Per token the fused QKV row holds G groups, each
// [A/G query heads | 1 key head | 1 value head] of D channels (Megatron's layout, so a
// tensor-parallel rank owns whole groups).
// qkv(B*S, (A+2G)*D) -> q(B,A,S,D), k(B,G,S,D), v(B,G,S,D); when rope_theta > 0 rotates q and
// k by position s (rotate-half RoPE, kernels/math.h).
// pos: the tokens' global positions (context parallelism), which RoPE rotates by.
void qkv_split_forward(Device d, float* q, float* k, float* v, const float* qkv, int B, int S,
                       int A, int G, int D, float rope_theta,
                       const TokenPositions& pos = TokenPositions());
// The inverse: dqkv ("=") from dq, dk, dv, un-rotating dq and dk.
void qkv_split_backward(Device d, float* dqkv, const float* dq, const float* dk,
                        const float* dv, int B, int S, int A, int G, int D, float rope_theta,
                        const TokenPositions& pos = TokenPositions());
// o(B,A,S,D) -> out(B*S, A*D) and back ("=").
void heads_merge_forward(Device d, float* out, const float* o, int B, int S, int A, int D);
void heads_merge_backward(Device d, float* d_o, const float* dout, int B, int S, int A, int D);

// ---- attention, one pass of query rows against key rows (kernels/math.h AttentionBlock) ----
// The whole sequence is whole_sequence(S, A, D); ring attention's steps are passes on the
// local chunks or their halves (parallel/context_parallel.cpp). q, o, dout, dq, lse point at
// the q view's row 0 of head (0, 0), k, v, dk, dv at the k view's. GQA: query head h reads
// group h / (A/G). The mask and the dropout keep bit of (b, h, i, j) come from the block
// (causal by global position; keep = dropout_keep(seed, stream, blk.dropout_index(b,h,i,j))).
//
// Naive pieces (the probabilities are materialised, P of a pass is (B*A, q.rows, k.rows),
// contiguous). EVERY lse and delta argument of every op here (naive and flash, forward,
// backward, merge) sits at the q view: row i of head bh at bh * (q.head_stride / D) + i,
// which is why the naive ops take D too (the lead's final rule; it supersedes any
// "contiguous per pass" wording elsewhere).
// probs ("=") = softmax over the keys query i sees of scale * scores, 0 for the others;
// lse (may be nullptr) = log sum over those keys of e^(scale s_ij) (-inf when none). In place
// (probs == scores) is fine.
void attention_softmax_forward(Device d, float* probs, float* lse, const float* scores, int BH,
                               int D, float scale, const AttentionBlock& blk);
// dscores ("=") = scale * P * (dP - delta_i), 0 where masked. delta at the q view is the
// whole row's dout_i . o_i (attention_delta); nullptr: rowsum(dP * P) of this pass, which
// equals it when the pass is the whole row.
void attention_softmax_backward(Device d, float* dscores, const float* dprobs, const float* probs,
                                const float* delta, int BH, int D, float scale,
                                const AttentionBlock& blk);
// probs *= e^(lse_pass_i - lse_i): a pass's probabilities become the whole row's once the
// row's final lse is known (both at the q view).
void attention_probs_rescale(Device d, float* probs, const float* lse_pass, const float* lse,
                             int BH, int D, const AttentionBlock& blk);
// out ("=") = probs * keep / (1-p), mask = keep, probs (B*A, q.rows, k.rows).
void attention_dropout_forward(Device d, float* out, uint8_t* mask, const float* probs, int B,
                               int A, float p, uint64_t seed, uint64_t stream,
                               const AttentionBlock& blk);
// delta ("=") = dout_i . o_i for every row of the view (BH heads of rows.rows rows), at the
// view (bh * (rows.head_stride / D) + i).
void attention_delta(Device d, float* delta, const float* dout, const float* o, int BH, int D,
                     const AttentionRows& rows);
// Ring attention's log-sum-exp merge, at the view's rows (o, o_pass: D channels, lse, lse_pass:
// head_stride / D), o fp32:
//   lse' = log(e^lse + e^lse_pass),  o' = o e^(lse - lse') + o_pass e^(lse_pass - lse').
// lse = -inf (nothing merged yet) gives o' = o_pass.
void attention_merge(Device d, float* o, float* lse, const float* o_pass, const float* lse_pass,
                     int BH, int D, const AttentionRows& rows);

// ---- attention, flash (tiled, online softmax, saves only the log-sum-exp) ---------------
// o ("=") = softmax(q k^T * scale, the block's mask) v with dropout p on the probabilities,
// lse ("=") = log sum_j e^(scale q_i . k_j) over the keys query i sees (before dropout; -inf
// and o = 0 when it sees none), both at the q view.
void flash_attention_forward(Device d, float* o, float* lse, const float* q, const float* k,
                             const float* v, int B, int A, int G, int D, float scale,
                             float dropout_p, uint64_t seed, uint64_t stream,
                             const AttentionBlock& blk);
// The pass's share of the gradients: dq (fp32, +=), dk, dv (+=), recomputing the
// probabilities from q, k and the whole row's lse (P_ij = e^(scale q_i.k_j - lse_i)), with
// the whole row's o for D_i = dout_i . o_i. Over the whole sequence it is the full backward.
void flash_attention_backward(Device d, float* dq, float* dk, float* dv, const float* dout,
                              const float* q, const float* k, const float* v, const float* o,
                              const float* lse, int B, int A, int G, int D, float scale,
                              float dropout_p, uint64_t seed, uint64_t stream,
                              const AttentionBlock& blk);

// ---- mixture of experts (model/moe.h) -----------------------------------------------------
// Router math is fp32 whatever the storage (logits, scores, gate values). N tokens, E
// experts, k experts per token; a (token, slot) "pair" is p = t*k + s.
// Score functions: 0 softmax, 1 sigmoid (model/config.h Moe::Score).
//
// Top-k routing of logits(N,E) (kernels/math.h moe_* helpers hold the per-row math):
//   softmax, pre_softmax false: the k largest logits, gates = softmax over those k;
//   softmax, pre_softmax true:  p = softmax over all E, the k largest p, gates = those p;
//   sigmoid: s = sigmoid(logits); the k largest s + expert_bias (bias may be null; it only
//            picks), gates = the picked s / (their sum + 1e-20) when k > 1, s when k == 1.
// Then gates *= scaling (scaling 0: none). Order within a row: by the selection value,
// largest first; ties go to the lower expert index. experts(N,k) int32, gates(N,k) "=".
void moe_router_topk(Device d, float* gates, int* experts, const float* logits,
                     const float* expert_bias, int N, int E, int k, int score, bool pre_softmax,
                     float scaling);
// dlogits(N,E) "=" from dgates(N,k), the selection not differentiated (it recomputes the
// scores from the logits).
void moe_router_topk_backward(Device d, float* dlogits, const float* dgates, const float* logits,
                              const int* experts, int N, int E, int k, int score,
                              bool pre_softmax, float scaling);
// The load-balancing scores(N,E) "=": softmax over E (softmax) or sigmoid / (row sum + 1e-20)
// (sigmoid), whatever pre_softmax says (Megatron's compute_routing_scores_for_aux_loss).
void moe_balancing_scores(Device d, float* scores, const float* logits, int N, int E, int score);
// dlogits(N,E) += the scores' backward of dscores(N,E), recomputing the scores from logits.
void moe_balancing_scores_backward(Device d, float* dlogits, const float* dscores,
                                   const float* logits, int N, int E, int score);
// The aux loss as a weighted sum: returns sum_t sum_e scores[t,e] * weights[t / group, e]
// (to the host, blocking; double accumulation). aux_loss: one group of all N tokens;
// seq_aux_loss: one per sequence (group = S). And its gradient dscores(N,E) "=" weights
// broadcast over each group's rows.
double moe_weighted_sum(Device d, const float* scores, const float* weights, int N, int E,
                        int group);
void moe_weighted_sum_backward(Device d, float* dscores, const float* weights, int N, int E,
                               int group);
// z loss pieces: returns sum_t logsumexp(logits_t)^2 (host, blocking); dlogits += coeff *
// 2 lse_t softmax(logits_t).
double moe_z_loss_sum(Device d, const float* logits, int N, int E);
void moe_z_loss_backward(Device d, float* dlogits, const float* logits, int N, int E,
                         float coeff);
// Permute: row j of out(M,C) "=" in[row_pair[j] / k] (row_pair[j] a pair index, -1: a
// padding row of zeros), and out_gates[j] = gates[row_pair[j]] (0 for padding; out_gates
// null: rows only). fused: one kernel for rows and gates (--moe-permute-fusion, CUDA); else
// two. The CPU runs one loop.
void moe_permute(Device d, float* out, float* out_gates, const float* in, const float* gates,
                 const int* row_pair, int M, int C, int k, bool fused);
// Unpermute: out(N,C) "=" sum over s < k of in[slots[t*k + s]] (slots: the permuted row of
// pair (t, s), -1 when dropped), summed in slot order in fp32. fused: one kernel; else a
// zeroing pass and k accumulating passes (one per slot). Also permute's backward.
void moe_unpermute(Device d, float* out, const float* in, const int* slots, int N, int C, int k,
                   bool fused);
// The gates' gradient back to pairs: dgates(N*k) "=" dperm_gates[slots[p]], 0 when dropped.
void moe_unpermute_gates(Device d, float* dgates, const float* dperm_gates, const int* slots,
                         int pairs);
// Expert activations with the gate applied after them (Megatron's experts): row j of
// out(M,F) = act(in_j) * gate[j]. swiglu: in(M,2F) [gate | up] per row; gelu: in(M,F).
void moe_swiglu_forward(Device d, float* out, const float* in, const float* gates, int M, int F);
// din(M,2F) "=" and dgates(M) "=" (sum over the row of dout * act(in)).
void moe_swiglu_backward(Device d, float* din, float* dgates, const float* dout, const float* in,
                         const float* gates, int M, int F);
void moe_gelu_forward(Device d, float* out, const float* in, const float* gates, int M, int F);
void moe_gelu_backward(Device d, float* din, float* dgates, const float* dout, const float* in,
                       const float* gates, int M, int F);
// The shared expert's sigmoid gate (Qwen2-MoE): out(N,C) += sigmoid(z_t) * y(N,C); backward
// dy "=" sigmoid(z) dout, dz(N) "=" sigmoid'(z) sum_c dout y.
void moe_shared_gate_forward(Device d, float* out, const float* y, const float* z, int N, int C);
void moe_shared_gate_backward(Device d, float* dy, float* dz, const float* dout, const float* y,
                              const float* z, int N, int C);

// ---- rotary embedding alone (qk-layernorm: the norm comes between the split and RoPE) ----
// x(B,H,S,D) rotated in place by global position pos.at(s) (rotate-half, kernels/math.h);
// backward rotates the gradient back (the inverse rotation).
void rope_forward(Device d, float* x, int B, int H, int S, int D, float theta,
                  const TokenPositions& pos = TokenPositions());
void rope_backward(Device d, float* dx, int B, int H, int S, int D, float theta,
                   const TokenPositions& pos = TokenPositions());

// ---- loss -------------------------------------------------------------------------------
// Softmax cross-entropy fused with its backward, in three passes so that the vocabulary may
// be split over ranks (parallel/tensor_parallel.cpp reduces between them; one rank calls
// them back to back). logits (N, V) fp32 hold this rank's columns, global ids
// [vocab_start, vocab_start + V); only the first `valid` columns are real (the rest is
// vocabulary padding: ignored, gradient 0). Rows whose target < 0 are ignored (loss 0,
// gradient 0).
// 1. row_max[i] = max over the valid columns of logits_i.
void cross_entropy_row_max(Device d, float* row_max, const float* logits, int N, int V,
                           int valid);
// 2. sum_exp[i] = sum over valid j of exp(logits_ij - row_max[i]); target_logit[i] =
//    logits_i[target_i - vocab_start] when this rank holds the target, else 0.
void cross_entropy_sum_exp(Device d, float* sum_exp, float* target_logit, const float* logits,
                           const float* row_max, const int* targets, int N, int V, int valid,
                           int vocab_start);
// 3. losses[i] = log(sum_exp[i]) + row_max[i] - target_logit[i]; logits become
//    dlogits_ij = (exp(logits_ij - row_max[i]) / sum_exp[i] - [j is the target]) grad_scale.
void cross_entropy_finish(Device d, float* losses, float* logits, const int* targets,
                          const float* row_max, const float* sum_exp, const float* target_logit,
                          int N, int V, int valid, int vocab_start, float grad_scale);

// ---- optimizer ----------------------------------------------------------------------------
// AdamW (kernels/math.h adamw_step) on n elements; the gradient is multiplied by grad_scale
// (the clipping coefficient) first; wd applies to every element given.
void adamw_update(Device d, float* params, const float* grads, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float bias1, float bias2, float grad_scale);
// Sum of squares of x(n), accumulated in double, returned to the host (blocking).
double sum_squares(Device d, const float* x, size_t n);

}  // namespace kernels

// ---- bf16 storage (--bf16) ----------------------------------------------------------------
// The same ops on bf16 tensors (kernels/ops_bf16.cpp): inputs widened to fp32, fp32
// arithmetic, outputs rounded to bf16. What stays fp32 in a bf16 run: norm statistics
// (mean, rstd), the log-sum-exp, the loss and its logits, master weights and Adam moments.
// On the CPU the twin of each op is "widen, run the fp32 twin, round"; on CUDA the kernels
// are templated on the storage type.
namespace kernels {

// C(bf16) = alpha op(A) op(B) + beta C, fp32 accumulation.
void gemm(Device d, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* A,
          int lda, const bf16* B, int ldb, float beta, bf16* C, int ldc);
// C(fp32) from bf16 A and B: the logits, which the loss needs in fp32.
void gemm(Device d, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* A,
          int lda, const bf16* B, int ldb, float beta, float* C, int ldc);
void gemm_strided_batched(Device d, bool trans_a, bool trans_b, int m, int n, int k,
                          float alpha, const bf16* A, int lda, long long stride_a,
                          const bf16* B, int ldb, long long stride_b, float beta, bf16* C,
                          int ldc, long long stride_c, int batch);
// out = round(in) and out = widen(in).
void convert(Device d, bf16* out, const float* in, size_t n);
void convert(Device d, float* out, const bf16* in, size_t n);

void add(Device d, bf16* out, const bf16* a, const bf16* b, size_t n);
void accumulate(Device d, bf16* out, const bf16* a, size_t n);
void add_bias(Device d, bf16* y, const bf16* bias, int N, int C);
void bias_backward(Device d, bf16* dbias, const bf16* dy, int N, int C);
void embedding_forward(Device d, bf16* out, const int* tokens, const bf16* wte,
                       int vocab_start, int vocab_rows, int N, int C);
void embedding_backward(Device d, bf16* dwte, const bf16* dout, const int* tokens,
                        int vocab_start, int vocab_rows, int N, int C);
void position_embedding_forward(Device d, bf16* out, const bf16* wpe, int N, int seq_len,
                                int first_row, int C, const TokenPositions& pos = TokenPositions());
void position_embedding_backward(Device d, bf16* dwpe, const bf16* dout, int N, int seq_len,
                                 int first_row, int C,
                                 const TokenPositions& pos = TokenPositions());
void layernorm_forward(Device d, bf16* out, float* mean, float* rstd, const bf16* x,
                       const bf16* w, const bf16* b, int N, int C, float eps);
void layernorm_backward(Device d, bf16* dx, bf16* dw, bf16* db, const bf16* dout,
                        const bf16* x, const bf16* w, const float* mean, const float* rstd,
                        int N, int C);
void rmsnorm_forward(Device d, bf16* out, float* rstd, const bf16* x, const bf16* w, int N,
                     int C, float eps);
void rmsnorm_backward(Device d, bf16* dx, bf16* dw, const bf16* dout, const bf16* x,
                      const bf16* w, const float* rstd, int N, int C);
void gelu_forward(Device d, bf16* out, const bf16* in, size_t n);
void gelu_backward(Device d, bf16* din, const bf16* dout, const bf16* in, size_t n);
void swiglu_forward(Device d, bf16* out, const bf16* in, int N, int F);
void swiglu_backward(Device d, bf16* din, const bf16* dout, const bf16* in, int N, int F);
void dropout_forward(Device d, bf16* out, uint8_t* mask, const bf16* in, size_t n, float p,
                     uint64_t seed, uint64_t stream, const TokenPositions& pos = TokenPositions(),
                     int width = 1);
void dropout_backward(Device d, bf16* din, const bf16* dout, const uint8_t* mask, size_t n,
                      float p);
void qkv_split_forward(Device d, bf16* q, bf16* k, bf16* v, const bf16* qkv, int B, int S, int A,
                       int G, int D, float rope_theta,
                       const TokenPositions& pos = TokenPositions());
void qkv_split_backward(Device d, bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv,
                        int B, int S, int A, int G, int D, float rope_theta,
                        const TokenPositions& pos = TokenPositions());
void heads_merge_forward(Device d, bf16* out, const bf16* o, int B, int S, int A, int D);
void heads_merge_backward(Device d, bf16* d_o, const bf16* dout, int B, int S, int A, int D);
void attention_softmax_forward(Device d, bf16* probs, float* lse, const bf16* scores, int BH,
                               int D, float scale, const AttentionBlock& blk);
void attention_softmax_backward(Device d, bf16* dscores, const bf16* dprobs, const bf16* probs,
                                const float* delta, int BH, int D, float scale,
                                const AttentionBlock& blk);
void attention_probs_rescale(Device d, bf16* probs, const float* lse_pass, const float* lse,
                             int BH, int D, const AttentionBlock& blk);
void attention_dropout_forward(Device d, bf16* out, uint8_t* mask, const bf16* probs, int B,
                               int A, float p, uint64_t seed, uint64_t stream,
                               const AttentionBlock& blk);
void attention_delta(Device d, float* delta, const bf16* dout, const bf16* o, int BH, int D,
                     const AttentionRows& rows);
// o stays fp32 (the ring's accumulator); o_pass is the pass's bf16 output.
void attention_merge(Device d, float* o, float* lse, const bf16* o_pass, const float* lse_pass,
                     int BH, int D, const AttentionRows& rows);
void flash_attention_forward(Device d, bf16* o, float* lse, const bf16* q, const bf16* k,
                             const bf16* v, int B, int A, int G, int D, float scale,
                             float dropout_p, uint64_t seed, uint64_t stream,
                             const AttentionBlock& blk);
// dq fp32 (+=), dk, dv bf16 (+=: widened, added in fp32, rounded)
void flash_attention_backward(Device d, float* dq, bf16* dk, bf16* dv, const bf16* dout,
                              const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                              const float* lse, int B, int A, int G, int D, float scale,
                              float dropout_p, uint64_t seed, uint64_t stream,
                              const AttentionBlock& blk);
void gemm_grouped(Device d, bool trans_a, bool trans_b, float alpha, const bf16* A, int lda,
                  const bf16* B, int ldb, float beta, bf16* C, int ldc,
                  const GemmGroup* groups, int count);
void moe_permute(Device d, bf16* out, float* out_gates, const bf16* in, const float* gates,
                 const int* row_pair, int M, int C, int k, bool fused);
void moe_unpermute(Device d, bf16* out, const bf16* in, const int* slots, int N, int C, int k,
                   bool fused);
void moe_swiglu_forward(Device d, bf16* out, const bf16* in, const float* gates, int M, int F);
void moe_swiglu_backward(Device d, bf16* din, float* dgates, const bf16* dout, const bf16* in,
                         const float* gates, int M, int F);
void moe_gelu_forward(Device d, bf16* out, const bf16* in, const float* gates, int M, int F);
void moe_gelu_backward(Device d, bf16* din, float* dgates, const bf16* dout, const bf16* in,
                       const float* gates, int M, int F);
void moe_shared_gate_forward(Device d, bf16* out, const bf16* y, const bf16* z, int N, int C);
void moe_shared_gate_backward(Device d, bf16* dy, bf16* dz, const bf16* dout, const bf16* y,
                              const bf16* z, int N, int C);
void rope_forward(Device d, bf16* x, int B, int H, int S, int D, float theta,
                  const TokenPositions& pos = TokenPositions());
void rope_backward(Device d, bf16* dx, int B, int H, int S, int D, float theta,
                   const TokenPositions& pos = TokenPositions());
// AdamW on fp32 master weights with bf16 gradients; then params = round(master).
void adamw_update(Device d, float* master, bf16* params, const bf16* grads, float* m, float* v,
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  float bias1, float bias2, float grad_scale);
double sum_squares(Device d, const bf16* x, size_t n);

}  // namespace kernels
