// model/config.h: the configuration structs every part of paralab reads.
//
// Plain data, no behaviour beyond derived sizes: plan/ is pure arithmetic on
// these, the CLI (trainer.cu) fills them, the model allocates from them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
// defines: PipelineSchedule (the schedules are data, parallel/ owns them)
#include "parallel/pipeline_schedule.h"
// defines: TokenDispatcher (how tokens reach the experts of other ranks)
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
// defines: Precision (fp32, bf16, fp16: the peak a run's GEMMs reach)
#include "measure/hardware.h"
// defines: Fp8Config (the --fp8-* flags), Fp8Recipe
#include "parallel/fp8_scaling.h"

namespace paralab {

enum class Arch { GPT, LLAMA };
enum class AttentionImpl { FLASH, NAIVE };
enum class AttentionFlops { FULL, CAUSAL };  // convention for *model* FLOPs (plan, MFU)
enum class LrDecay { CONSTANT, LINEAR, COSINE };

// Activation recomputation, Megatron-LM's --recompute-* flags (Korthikanti et al. 2022):
// drop tensors in forward and make them again in backward, trading FLOPs for memory.
//  full       a layer keeps only its input; backward reruns its whole forward first.
//             method uniform: the layers of a pipeline stage (model chunk) in groups of
//             num_layers, each group storing its input only (the last group may be partial,
//             as in Megatron); block: the first num_layers layers of each stage (chunk) are
//             recomputed, the others keep their activations. 1 <= num_layers <= the layers
//             of a pipeline rank (Megatron's constraint).
//  selective  every layer keeps its inputs and outputs but not the internals of the listed
//             modules (Megatron's --recompute-modules), which backward makes again:
//               core_attn  the attention core's internals: naive P, dropout mask and P'
//                          (the 5as/h of Korthikanti's sbh(34 + 5as/h)); flash its
//                          log-sum-exp only (it keeps no S x S tensor anyway)
//               mlp        fc1's output and the activation's output, from norm2's output
//               norm       both norms' outputs and statistics, from their inputs
//             No method and no layer count (Megatron: they are full's).
// notes/model.md lists the bytes each option saves and what backward recomputes.
struct Recompute {
  enum class Granularity { NONE, SELECTIVE, FULL };
  enum class Method { NONE, UNIFORM, BLOCK };
  Granularity granularity = Granularity::NONE;
  Method method = Method::NONE;  // full only
  int num_layers = 0;            // full only
  bool core_attn = false, mlp = false, norm = false;  // selective only
  bool full() const { return granularity == Granularity::FULL; }
  bool selective() const { return granularity == Granularity::SELECTIVE; }
  // The modules a layer recomputes (never with full or none, whatever the bools say).
  bool recompute_core_attn() const { return selective() && core_attn; }
  bool recompute_mlp() const { return selective() && mlp; }
  bool recompute_norm() const { return selective() && norm; }
  // Full recompute over the `layers` consecutive layers of one pipeline chunk: per layer the
  // group it is recomputed with, -1 when it keeps its activations. uniform: groups of N
  // consecutive layers (the last may be shorter); block: the first N layers, each alone.
  // A group stores only its input and recomputes its layers' forward in backward.
  std::vector<int> full_groups(int layers) const {
    std::vector<int> g(layers, -1);
    if (!full()) return g;
    for (int i = 0; i < layers; ++i)
      g[i] = method == Method::BLOCK ? (i < num_layers ? i : -1) : i / num_layers;
    return g;
  }
};

// Mixture of experts (Megatron-Core's --num-experts and --moe-* flags; model/moe.h is the
// lesson). num_experts == 0: every layer's MLP is dense. Otherwise the layers moe_layer
// picks run E experts, each the family's MLP (SwiGLU | GeLU, no biases) of width
// ffn_hidden_size, behind a router h -> E computed in fp32.
struct Moe {
  enum class Score { SOFTMAX, SIGMOID };
  enum class Balancing { AUX_LOSS, SEQ_AUX_LOSS, NONE };
  enum class DropPolicy { PROBS, POSITION };
  int num_experts = 0;                 // E; 0: dense model
  int ffn_hidden_size = 0;             // each expert's width; 0 -> the model's ffn()
  std::vector<int> layer_pattern;      // per layer 1 = MoE, 0 = dense; empty: every layer
  int topk = 2;                        // k experts per token
  Score score = Score::SOFTMAX;
  bool pre_softmax = false;            // softmax over all E, then top-k (no renormalising)
  float topk_scaling_factor = 0.0f;    // 0: none; else multiplies the gate values
  Balancing balancing = Balancing::AUX_LOSS;
  float aux_loss_coeff = 0.0f;         // alpha
  float z_loss_coeff = 0.0f;           // beta
  bool expert_bias = false;            // aux-loss-free balancing (sigmoid only)
  float bias_update_rate = 1e-3f;
  float capacity_factor = 0.0f;        // 0: dropless; else capacity = ceil(T k / E * cf)
  DropPolicy drop_policy = DropPolicy::PROBS;
  bool pad_to_capacity = false;        // every expert runs exactly min(capacity, T) rows
  int shared_expert_size = 0;          // 0: none; else a dense expert of this width
  bool shared_expert_gate = false;     // Qwen2-MoE's sigmoid gate on the shared expert
  bool grouped_gemm = false;           // one GEMM call per projection for all experts
  bool permute_fusion = false;         // CUDA: one fused permute / unpermute kernel
  bool enabled() const { return num_experts > 0; }
  bool is_moe_layer(int layer) const {
    return enabled() && (layer_pattern.empty() || layer_pattern.at(layer) != 0);
  }
};

struct ModelConfig {
  Arch arch = Arch::GPT;
  int num_layers = 2;
  int hidden_size = 64;          // h
  int ffn_hidden_size = 0;       // 0 -> 4h
  int num_attention_heads = 4;   // a
  int num_query_groups = 0;      // g; 0 -> a (multi-head attention)
  int kv_channels = 0;           // head dim d; 0 -> h/a (a tensor-parallel rank's local
                                 // config keeps d while its heads are a/t)
  int seq_length = 32;           // s
  // The plan's copy (make_plan) names the context-parallel rank it describes: each holds
  // seq_length / context_parallel.size tokens of every sequence (plan/memory.cpp
  // local_sizes). Elsewhere size 1 (the model's local config divides seq_length instead).
  CpSpec context_parallel;
  int vocab_size = 256;          // V
  // Megatron's --make-vocab-size-divisible-by: the embedding and output layer hold V rounded
  // up to a multiple of this x tp rows (padded_vocab), so the output layer's GEMMs have
  // leading dimensions the fast kernels take (GPT-2: 50257 -> 50304). The padding rows are
  // initialised like the rest and masked out of the loss; checkpoints and exports hold V.
  int vocab_divisible_by = 128;
  float hidden_dropout = 0.0f;   // after attention projection and after MLP (gpt)
  float attention_dropout = 0.0f;// on attention probabilities (gpt)
  float norm_epsilon = 1e-5f;
  float rope_theta = 10000.0f;   // llama only (--rotary-base)
  // The initial weights' standard deviation (Megatron's --init-method-std): N(0, std), the
  // two output projections of each layer N(0, std / sqrt(2L)).
  float init_method_std = 0.02f;
  bool qk_layernorm = false;     // RMSNorm (LayerNorm for gpt) of q and k per head, before RoPE
  AttentionImpl attention = AttentionImpl::FLASH;
  bool fused_cross_entropy = true;
  int cross_entropy_chunk = 1024;  // tokens per chunk of the fused loss
  Recompute recompute;             // --recompute-*: here because the layer code reads it
  Moe moe;                         // --num-experts, --moe-*
  Fp8Config fp8;                   // --fp8-*: the dense linears' GEMMs (parallel/fp8_linear.h)

  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  int head_dim() const { return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads; }
  bool is_gpt() const { return arch == Arch::GPT; }
  bool tied_embeddings() const { return arch == Arch::GPT; }
  bool has_bias() const { return arch == Arch::GPT; }
  // Width of the fused QKV projection output: (a + 2g) * head_dim.
  int qkv_size() const { return (num_attention_heads + 2 * groups()) * head_dim(); }
  // Width of fc1's output: SwiGLU computes gate and up in one GEMM.
  int fc1_size() const { return arch == Arch::LLAMA ? 2 * ffn() : ffn(); }
  // An expert's width and fc1 output; the shared expert's.
  int moe_ffn() const { return moe.ffn_hidden_size > 0 ? moe.ffn_hidden_size : ffn(); }
  int moe_fc1_size() const { return arch == Arch::LLAMA ? 2 * moe_ffn() : moe_ffn(); }
  int shared_fc1_size() const {
    return arch == Arch::LLAMA ? 2 * moe.shared_expert_size : moe.shared_expert_size;
  }
};

// --fp16's loss scaling (model/loss_scaler.h), Megatron's flags and defaults
// (megatron/training/arguments.py; megatron/core/optimizer/__init__.py builds the scaler): a
// static scale with --loss-scale S > 0 (ConstantGradScaler, which --bf16 takes too), else
// dynamic (DynamicGradScaler: growth x2 after loss_scale_window clean steps, back-off x0.5 once
// hysteresis overflows have been seen since the last growth, never below min_loss_scale).
// consecutive_hysteresis is DeepSpeed's (fp16.consecutive_hysteresis): every clean step
// refills the hysteresis, so only consecutive overflows count.
struct LossScaleConfig {
  double loss_scale = 0;                     // --loss-scale; 0: dynamic
  double initial_loss_scale = 4294967296.0;  // --initial-loss-scale, 2^32
  double min_loss_scale = 1.0;               // --min-loss-scale
  int loss_scale_window = 1000;              // --loss-scale-window
  int hysteresis = 2;                        // --hysteresis
  bool consecutive_hysteresis = false;       // --consecutive-hysteresis (DeepSpeed's)
};

struct TrainConfig {
  int micro_batch_size = 4;      // b
  int global_batch_size = 0;     // 0 -> micro_batch_size * dp
  int train_iters = 200;
  float lr = 1e-3f;
  float min_lr = 1e-4f;
  int lr_warmup_iters = 0;
  int lr_decay_iters = 0;        // 0 -> train_iters
  LrDecay lr_decay_style = LrDecay::COSINE;
  float weight_decay = 0.1f;
  float clip_grad = 1.0f;        // 0 disables clipping
  float adam_beta1 = 0.9f;
  float adam_beta2 = 0.95f;
  float adam_eps = 1e-8f;
  uint64_t seed = 1234;
  // parameter/gradient/activation storage: Megatron's --bf16 and --fp16 (at most one), each
  // with fp32 master weights and Adam moments; neither: fp32
  bool bf16 = false;
  bool fp16 = false;
  LossScaleConfig loss_scaling;  // --fp16 (and --bf16 --loss-scale S)
  bool log_fp16_underflow = false;  // --log-fp16-underflow (model/grad_underflow.h)
  // Megatron's precision-aware optimizer (--use-precision-aware-optimizer with --exp-avg-dtype
  // bf16, --exp-avg-sq-dtype bf16; cli/flags_precision_optimizer.cpp): Adam's first and second
  // moments stored in bf16 between steps, the update still computed in fp32 (Transformer
  // Engine's FusedAdam: loaded and widened, updated, rounded to nearest even on the store).
  bool exp_avg_bf16 = false, exp_avg_sq_bf16 = false;
  int exp_avg_bytes() const { return exp_avg_bf16 ? 2 : 4; }
  int exp_avg_sq_bytes() const { return exp_avg_sq_bf16 ? 2 : 4; }
  Precision precision() const {
    return bf16 ? Precision::BF16 : fp16 ? Precision::FP16 : Precision::FP32;
  }
  bool half() const { return bf16 || fp16; }  // 16-bit storage, fp32 masters
  // A loss scaler runs: --fp16 always (dynamic or --loss-scale), --bf16 with --loss-scale
  // (Megatron's ConstantGradScaler); fp32 never.
  bool loss_scaled() const { return fp16 || (bf16 && loss_scaling.loss_scale > 0); }
  // A step whose loss or gradient norm is not finite is skipped (no update); this many in a
  // row stop the run (exit 3): the weights are gone, more steps would only repeat the NaN.
  int max_skipped_steps = 10;
  // Megatron's sample-based schedule (--train-samples): warm-up and decay in samples, the
  // step's position step x global batch; 0: the schedule counts steps.
  int64_t lr_warmup_samples = 0, lr_decay_samples = 0;
  // --split: the data's training and validation shares (Megatron's weights, normalised);
  // 0: the default (a file's last 10% validates).
  double split_train = 0, split_valid = 0;
};

// CPU offload (parallel/offload.h; DeepSpeed's offload_optimizer and offload_param, Megatron's
// --optimizer-cpu-offload): which model states of a rank live in host memory.
//   optimizer  the fp32 master weights and Adam moments of the first `fraction` of the rank's
//              optimizer-state elements live on the host, with a host copy of their summed
//              gradient and updated parameter; the AdamW step on them runs on the host
//   params     ZeRO-3 only: the rank's parameter shard lives on the host (implies optimizer
//              at fraction 1); each unit's gather starts from it
//   pin_memory host buffers page-locked (cudaHostAlloc) on CUDA; nothing on the CPU backend
struct OffloadConfig {
  bool optimizer = false;
  double fraction = 1.0;
  bool params = false;
  bool pin_memory = true;
  bool enabled() const { return optimizer || params; }
  // The share of the optimizer's elements on the host: 0 without offload.
  double host_fraction() const { return params ? 1.0 : optimizer ? fraction : 0.0; }
};

// The parallel layout; issue 2 runs every dimension at 1 except data parallelism.
struct ParallelConfig {
  int world_size = 1;
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  // Context parallelism (parallel/context_parallel.h): each sequence split over cp ranks,
  // attention's keys and values exchanged by --cp-comm-type, tokens laid out by --cp-layout.
  int context_parallel = 1;
  CpCommType cp_comm_type = CpCommType::P2P;
  CpLayout cp_layout = CpLayout::ZIGZAG;
  // Expert parallelism (parallel/expert_parallel.h): the experts split over ep ranks, each
  // expert's width over etp ranks (Megatron's default etp = tp; the flags resolve it), the
  // expert-data-parallel ranks the rest: world = etp x ep x edp x pp.
  int expert_parallel = 1;
  int expert_tensor_parallel = 1;
  TokenDispatcher token_dispatcher = TokenDispatcher::ALLGATHER;
  int zero_stage = 0;
  OffloadConfig offload;           // --optimizer-cpu-offload, --offload-params (ZeRO-Offload)
  bool sequence_parallel = false;  // with tensor parallelism: split the tokens between blocks
  // Pipeline (parallel/pipeline_schedule.h): the schedule, v model chunks per pp rank
  // (interleaved's virtual stages; 2 for zb-v and the DualPipes), and how the layers split
  // when not evenly (Megatron's --decoder-first/last-pipeline-num-layers, 0: the even split;
  // --account-for-embedding/loss-in-pipeline-split).
  PipelineSchedule pipeline_schedule = PipelineSchedule::ONE_F_ONE_B;
  int virtual_pipeline = 1;
  int first_stage_layers = 0;
  int last_stage_layers = 0;
  bool account_for_embedding = false, account_for_loss = false;
  StageSplit stage_split() const {
    return {first_stage_layers, last_stage_layers, account_for_embedding, account_for_loss};
  }
  // The schedule's shape for m microbatches per step; without pipelining 1F1B on one stage.
  PipelineShape pipeline_shape(int microbatches) const {
    return pipeline_parallel == 1
               ? PipelineShape{PipelineSchedule::ONE_F_ONE_B, 1, microbatches, 1}
               : PipelineShape{pipeline_schedule, pipeline_parallel, microbatches,
                               virtual_pipeline};
  }
  int data_parallel() const {
    return world_size / (tensor_parallel * pipeline_parallel * context_parallel);
  }
  int expert_data_parallel() const {
    return world_size / (expert_tensor_parallel * expert_parallel * pipeline_parallel);
  }
  // The experts have their own flat vector and data parallelism (over the expert grid's edp)
  // as soon as they are spread at all: ep > 1, etp > 1 (their width split), or tp > 1 (the
  // tp ranks route their own tokens, folded onto the expert grid). Otherwise (one rank's
  // worth of experts everywhere) they are dense parameters, as in Megatron.
  bool experts_apart() const {
    return expert_parallel > 1 || expert_tensor_parallel > 1 || tensor_parallel > 1;
  }
};

// Bytes of one activation/parameter element in storage.
inline int storage_bytes(const TrainConfig& t) { return t.half() ? 2 : 4; }
// The storage type's element type on the wire (parallel/comm.h): F32, BF16 or F16.
inline DType storage_type(const TrainConfig& t) {
  return t.bf16 ? DType::BF16 : t.fp16 ? DType::F16 : DType::F32;
}

}  // namespace paralab
