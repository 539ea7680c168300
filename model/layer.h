// model/layer.h: one transformer layer's forward and backward (attention block + MLP block),
// and the buffers they share with model/transformer.cpp.
//
// defines: LayerWeights, LayerGrads (pointers into the flat buffers), LayerActivations (what
// backward needs, category activations), Workspace (scratch reused by every layer, category
// workspace), layer_forward, layer_backward, attention_forward, attention_backward,
// attention_recompute, qk_norm_forward, qk_norm_backward
//
// Everything is templated on the storage type T: float, or kernels::bf16 with --bf16
// (notes/model.md: norm statistics, the log-sum-exp and the losses stay float). The
// kernels are overloaded on T, so the code reads the same for both.
#pragma once
#include <cstdint>
#include "measure/ledger.h"
#include "model/config.h"
#include "model/moe.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"

namespace paralab {

// Parameters of one layer, pointers into the flat parameter buffer (nullptr where the
// architecture has none, e.g. llama biases).
template <typename T>
struct LayerWeights {
  const T *norm1_w = nullptr, *norm1_b = nullptr;
  const T *qkv_w = nullptr, *qkv_b = nullptr;    // ((a+2g)d, h), ((a+2g)d)
  const T *proj_w = nullptr, *proj_b = nullptr;  // (h, a d), (h)
  const T *norm2_w = nullptr, *norm2_b = nullptr;
  const T *fc1_w = nullptr, *fc1_b = nullptr;    // (fc1, h), (fc1)
  const T *fc2_w = nullptr, *fc2_b = nullptr;    // (h, f), (h)
  const T *q_norm_w = nullptr, *q_norm_b = nullptr;  // --qk-layernorm: (d) each
  const T *k_norm_w = nullptr, *k_norm_b = nullptr;
  MoeWeights<T> moe;                             // MoE layers instead of fc1, fc2
};
// The same layout in the flat gradient buffer.
template <typename T>
struct LayerGrads {
  T *norm1_w = nullptr, *norm1_b = nullptr, *qkv_w = nullptr, *qkv_b = nullptr;
  T *proj_w = nullptr, *proj_b = nullptr, *norm2_w = nullptr, *norm2_b = nullptr;
  T *fc1_w = nullptr, *fc1_b = nullptr, *fc2_w = nullptr, *fc2_b = nullptr;
  T *q_norm_w = nullptr, *q_norm_b = nullptr, *k_norm_w = nullptr, *k_norm_b = nullptr;
  MoeGrads<T> moe;
};

// Saved for backward, one microbatch, one layer (notes/model.md lists each with its size).
// With selective recompute (model/config.h Recompute) the recomputed modules' tensors are
// not saved: they exist in category recompute only inside their block, in forward and again
// in backward (model/layer.cpp, plan/recompute.h).
template <typename T>
struct LayerActivations {
  Buffer<float> norm1_mean, norm1_rstd;  // (N) each; mean gpt only
  Buffer<T> norm1_out;                   // (N, h)
  Buffer<T> q, k, v;                     // (B,a,S,d), (B,g,S,d), (B,g,S,d)
  CoreSaved<T> core;                     // the attention core's: flash the lse (B,a,S),
                                         // naive each pass's P [+ mask, P'] (B,a,S,S at
                                         // one rank; parallel/context_parallel.h)
  Buffer<T> ctx;                         // (N, a d)
  Buffer<uint8_t> proj_mask;             // hidden dropout: (N, h)
  Buffer<T> x_mid;                       // (N, h) residual after attention
  Buffer<float> norm2_mean, norm2_rstd;  // (N) each
  Buffer<T> norm2_out;                   // (N, h)
  Buffer<T> fc1_out;                     // (N, fc1)
  Buffer<T> act_out;                     // (N, f)
  Buffer<T> fc1_in;                      // selective mlp with sp, backward only: (N, h)
                                         // fc1's all-gathered input (category recompute)
  Buffer<uint8_t> fc2_mask;              // hidden dropout: (N, h)
  Buffer<T> out;                         // (N, h) layer output = next layer's input
  // Split backward (zb-h1): the output gradients of the four linear layers, kept from B to
  // W beside their inputs (norm1_out, ctx, norm2_out, act_out), category activations.
  Buffer<T> d_qkv, d_proj, d_fc1, d_fc2;  // (N, qkv_l), (N, h), (N, fc1_l), (N, h)
  // --qk-layernorm: q and k before their norm (B,a,S,d), (B,g,S,d), and its statistics.
  Buffer<T> q_raw, k_raw;
  Buffer<float> q_norm_mean, q_norm_rstd, k_norm_mean, k_norm_rstd;  // (B a S), (B g S)
  MoeActivations<T> moe;                  // MoE layers: the router's and experts' tensors
};

// What a layer's backward computes: all of it, or a split schedule's two halves
// (parallel/pipeline_schedule.h, zb-h1): INPUT_GRAD is B, the input gradient (and the
// norms' and the row-parallel biases' gradients, vector work on tensors at hand); its
// weight GEMMs are left for WEIGHT_GRAD, W (layer_weight_backward). With sequence
// parallelism B keeps the all-gathered qkv and fc1 inputs (N rows), so W communicates
// nothing. Not with selective mlp or norm recompute (W reads fc1's activation and the
// norms' outputs, which those drop); full recompute makes them again before B.
enum class BackwardPart { ALL, INPUT_GRAD };

// Scratch shared by all layers of one microbatch; sizes in notes/model.md ("Workspace").
template <typename T>
struct Workspace {
  int tokens = 0;                        // N the buffers are sized for
  Buffer<T> dres;                        // (N_l, h) gradient of the residual stream
  Buffer<T> tmp_h;                       // (N, h) row-parallel partial outputs, gradients
  Buffer<T> tmp_l;                       // sp: (N_l, h) reduce-scattered outputs
  Buffer<T> gathered;                    // sp: (N, h) all-gathered inputs / gradients
  Buffer<T> qkv;                         // (N, (a+2g)d) forward qkv, backward dqkv
  Buffer<T> o_heads;                     // (B,a,S,d) attention output in head layout
  Buffer<T> dctx;                        // (N, a d)
  Buffer<T> do_heads;                    // (B,a,S,d)
  Buffer<T> dq, dk, dv;                  // (B,a,S,d), (B,g,S,d), (B,g,S,d)
  Buffer<T> dact;                        // (N, f)
  Buffer<T> dfc1;                        // (N, fc1)
  CoreWorkspace<T> core;                 // the attention core's scratch: naive scores and
                                         // dprobs, context parallelism's blocks
  Buffer<T> xf;                          // fused loss only: (N, h) final-norm output
  Buffer<T> xf_local;                    // fused loss with sp: (N_l, h) its own tokens
  Buffer<T> dxf_full;                    // fused loss with sp: (N, h) partial d(xf)
  Buffer<float> losses;                  // (N) per-token loss
  Buffer<float> loss_scratch;            // 3 x chunk: row max, sum of exp, target logit
  Fp8Scratch fp8;                        // --fp8-format: the FP8 GEMMs' two operands
                                         // (parallel/fp8_linear.h), sized for the largest
  // m: the rank's local model config (heads, groups, ffn divided by tp, the sequence by cp);
  // fp8_decoded_weight: --fp8-param-gather at ZeRO-3, whose dgrad decodes a gathered W into
  // fp8.weight (parallel/fp8_linear.h).
  void ensure(const ModelConfig& m, const TensorParallel& tp, const ContextParallel& cp,
              kernels::Device device, int B, bool fp8_decoded_weight);
};

struct LayerContext {
  const ModelConfig& model;  // this rank's local config: a/t heads, g/t groups, f/t ffn
  const TensorParallel& tp;
  const ExpertParallel& ep;  // where an MoE layer's experts live (parallel/expert_parallel.h)
  const ContextParallel& cp; // the sequence's other ranks (parallel/context_parallel.h)
  kernels::TokenPositions positions;  // the global positions of this rank's S/cp tokens
  kernels::Device device;
  int layer;             // index, keys the dropout streams 4l+1, 4l+2, 4l+3 (notes/model.md)
  int B;                 // microbatch size
  uint64_t dropout_seed; // the microbatch's seed
  // MoE layers (model/moe.h): the layer's state (expert bias, statistics), whether this
  // forward records statistics (a training forward, not a recompute's second one), whether it
  // is an evaluation (no balancing losses), and the scale of the auxiliary losses' gradients.
  MoeLayerState* moe = nullptr;
  bool record_moe_stats = false;
  int microbatch = 0;  // the step's microbatch, recorded beside its statistics
  bool forward_only = false;
  float grad_scale = 1.0f;
  // FP8 (--fp8-format): the stage's scaling and this layer's first linear in it (its qkv;
  // proj, fc1, fc2 follow). nullptr: the linears run in the storage type.
  Fp8Scaling* fp8 = nullptr;
  int fp8_first = 0;
  // --fp8-param-gather (parallel/data_parallel.h Fp8ParamGather): the layer's dense weights
  // (qkv, proj, fc1, fc2: k = 0..3) and its experts' (local expert e's fc1 at e, fc2 at
  // E_l + e) were gathered in FP8 with these scales and factors; at ZeRO-3 they hold the
  // codes, at ZeRO-1/2 (fp8_weights_stored) the stored values, the codes decoded into them.
  // state nullptr: W as stored, cast as the recipe says.
  Fp8GatheredUnit fp8_weights{}, fp8_expert_weights{};
  bool fp8_weights_stored = false;
  // The experts' FP8 (an MoE layer, --fp8-format): the stage's experts' scaling and this
  // layer's first expert linear in it (local expert e's fc1 is fp8_experts_first + 2 e, its fc2
  // the next). nullptr: the experts run in the storage type.
  Fp8Scaling* fp8_experts = nullptr;
  int fp8_experts_first = 0;
};

// The attention core's shape for this rank's local config (model/attention.cpp): heads and
// groups after tp, S/cp tokens of the sequence; the dropout seed and stream left 0.
CoreShape core_shape(const ModelConfig& m, int B, const ContextParallel& cp);

// Instantiated for T = float and kernels::bf16 (model/layer.cpp, model/attention.cpp).
template <typename T>
void layer_forward(const LayerContext& c, const LayerWeights<T>& w, const T* x,
                   LayerActivations<T>& act, Workspace<T>& ws);
// dres holds d(layer output) on entry and d(layer input) on return. ALL releases the
// layer's saved tensors; INPUT_GRAD keeps what layer_weight_backward reads.
template <typename T>
void layer_backward(const LayerContext& c, const LayerWeights<T>& w, LayerGrads<T>& g,
                    const T* x, LayerActivations<T>& act, Workspace<T>& ws,
                    BackwardPart part = BackwardPart::ALL);
// W of a split backward: dW += dy^T x of qkv, proj, fc1, fc2 (and the column-parallel
// biases), then releases the rest of the layer's tensors (ws: the FP8 GEMMs' scratch).
template <typename T>
void layer_weight_backward(const LayerContext& c, LayerGrads<T>& g, LayerActivations<T>& act,
                           Workspace<T>& ws);
// Attention core: act.q/k/v -> act.ctx (and probs / lse); backward ws.dctx -> ws.dq/dk/dv.
template <typename T>
void attention_forward(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws);
template <typename T>
void attention_backward(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws);
// Selective core_attn: before attention_backward, makes again (into the caller's buffers)
// what it reads and the forward did not keep: naive P [+ dropout mask and P'], flash the
// log-sum-exp and O (ws.o_heads), with the forward's kernels on the kept q, k, v.
template <typename T>
void attention_recompute(const LayerContext& c, LayerActivations<T>& act, Workspace<T>& ws);
// --qk-layernorm (model/attention.cpp): act.q_raw, k_raw -> act.q, act.k normalised per head,
// then rotated (llama); backward turns ws.dq, dk (after the core) into d(q_raw), d(k_raw)
// in place and accumulates the norms' weight gradients.
template <typename T>
void qk_norm_forward(const LayerContext& c, const LayerWeights<T>& w, LayerActivations<T>& act);
template <typename T>
void qk_norm_backward(const LayerContext& c, const LayerWeights<T>& w, LayerGrads<T>& g,
                      LayerActivations<T>& act, Workspace<T>& ws);

}  // namespace paralab
