// kernels/ops.h: every device operation the model uses. Include this; call kernels::NAME(Device,
// ...).
//
// Each op is declared once, in its family's header below, as a template on the device and the
// storage type with its dispatcher right beneath (kernels/dispatch.h shows the pattern). Its
// two twins: kernels/cpu/<family>.cpp (plain loops and OpenBLAS: the pseudocode a student
// reads) and kernels/cuda/<family>.cu (the CUDA kernels that mirror them, with the same
// kernels/math.h arithmetic; a large family splits by job into files of parallel names on
// both sides, as the table shows). kernels/ knows nothing of parallelism or of the model.
//
//   kernels/ops/           kernels/cpu/          kernels/cuda/
//   memory_gemm.h          memory_gemm.cpp       memory_gemm.cu       memory, GEMM, grouped GEMM
//   elementwise.h          elementwise.cpp       elementwise.cu       arithmetic, bias, convert,
//                                                                     GeLU, SwiGLU, dropout
//   embedding.h            embedding.cpp         embedding.cu         token and position tables
//   norms.h                norms.cpp             norms.cu             LayerNorm, RMSNorm
//   attention.h            attention_layout.cpp  attention_layout.cu  QKV split, heads merge,
//                                                                     RoPE
//                          attention_softmax.cpp attention_softmax.cu the naive pass's softmax,
//                                                                     dropout, delta; the merge
//   flash_attention.h      flash_attention.cpp   flash_attention.cu,  tiled attention
//                                                flash_attention_backward.cu
//   moe.h                  moe.cpp               moe.cu               router, permute, experts
//   moe_dispatch.h         moe_dispatch.cpp      moe_dispatch.cu      the dispatch's counting
//                                                                     sort: counts, offsets,
//                                                                     scatter
//   loss_optimizer.h       loss_optimizer.cpp    loss_optimizer.cu    cross-entropy, AdamW,
//                                                                     sum of squares
//   init.h                 init.cpp              init.cu              the parameters' first
//                                                                     values
//   fp8.h                  fp8.cpp               fp8.cu, fp8_gemm.cu  FP8 casts, scales, the
//                                                                     FP8 GEMM (kernels/fp8.h:
//                                                                     the formats)
//
// Conventions, for all ops:
//  - row-major; a "row" is one token; N = number of tokens (b*s), C = channels;
//  - every pointer lives on the op's device;
//  - T, the storage type, is float or bf16 (--bf16). A bf16 op widens its inputs (exact),
//    computes in fp32 and rounds its outputs to nearest even once: the CPU twin runs the fp32
//    twin between a widening and a rounding (kernels/cpu/widen.h), the CUDA kernels are
//    templated on T. What stays fp32 in a bf16 run: norm statistics (mean, rstd), the
//    log-sum-exp and delta, the loss and its logits, router math and gates, master weights and
//    Adam moments; those arguments are spelled float;
//  - parameter gradients (dw, db) are ACCUMULATED (+=): microbatches and tied weights add
//    into one gradient buffer;
//  - activation gradients follow the comment on each op ("=" writes, "+=" accumulates);
//  - ops are asynchronous on CUDA (one stream); kernels::synchronize waits;
//  - every dispatch is counted (FLOPs, GEMM calls, the other kernels' launches and bytes:
//    kernels/counters.h, where the readers and resets are too).
#pragma once
#include "kernels/common.h"    // Device, bf16, the device queries
#include "kernels/counters.h"  // flop_counter, gemm_counts, GemmLabel, kernel_counts, ...
#include "kernels/math.h"      // TokenPositions, AttentionRows, AttentionBlock

// defines: device_malloc .. synchronize, gemm, gemm_strided_batched, GemmGroup, gemm_grouped
#include "kernels/ops/memory_gemm.h"
// defines: add, accumulate, scale, add_bias, bias_backward, convert, gelu_*, swiglu_*,
//          dropout_*
#include "kernels/ops/elementwise.h"
// defines: embedding_forward, embedding_backward, position_embedding_forward, _backward
#include "kernels/ops/embedding.h"
// defines: layernorm_forward, layernorm_backward, rmsnorm_forward, rmsnorm_backward
#include "kernels/ops/norms.h"
// defines: qkv_split_*, heads_merge_*, rope_*, attention_softmax_*, attention_probs_rescale,
//          attention_dropout_forward, attention_delta, attention_merge
#include "kernels/ops/attention.h"
// defines: flash_attention_forward, flash_attention_backward
#include "kernels/ops/flash_attention.h"
// defines: moe_router_topk*, moe_balancing_scores*, moe_weighted_sum*, moe_z_loss_*,
//          moe_permute, moe_unpermute, moe_unpermute_gates, moe_swiglu_*, moe_gelu_*,
//          moe_shared_gate_*
#include "kernels/ops/moe.h"
// defines: moe_expert_counts, moe_dispatch_offsets, moe_gate_rank, moe_dispatch_scatter
#include "kernels/ops/moe_dispatch.h"
// defines: cross_entropy_row_max, cross_entropy_sum_exp, cross_entropy_finish, adamw_update,
//          sum_squares
#include "kernels/ops/loss_optimizer.h"
// defines: init_normal, fill
#include "kernels/ops/init.h"
// defines: Fp8Matrix, fp8_amax, fp8_quantize, fp8_quantize_blocks, fp8_dequantize,
//          fp8_current_scale, fp8_delayed_update, gemm_fp8, gemm_fp8_path
#include "kernels/ops/fp8.h"
