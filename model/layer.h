// model/layer.h: one transformer layer's forward and backward (attention block + MLP block),
// and the buffers they share with model/transformer.cpp.
//
// defines: LayerWeights, LayerGrads (pointers into the flat buffers), LayerActivations (what
// backward needs, category activations), Workspace (scratch reused by every layer, category
// workspace), layer_forward, layer_backward, attention_forward, attention_backward
#pragma once
#include <cstdint>
#include "instrument/ledger.h"
#include "model/config.h"

namespace paralab {

// Parameters of one layer, pointers into the flat parameter buffer (nullptr where the
// architecture has none, e.g. llama biases).
struct LayerWeights {
  const float *norm1_w = nullptr, *norm1_b = nullptr;
  const float *qkv_w = nullptr, *qkv_b = nullptr;    // ((a+2g)d, h), ((a+2g)d)
  const float *proj_w = nullptr, *proj_b = nullptr;  // (h, a d), (h)
  const float *norm2_w = nullptr, *norm2_b = nullptr;
  const float *fc1_w = nullptr, *fc1_b = nullptr;    // (fc1, h), (fc1)
  const float *fc2_w = nullptr, *fc2_b = nullptr;    // (h, f), (h)
};
// The same layout in the flat gradient buffer.
struct LayerGrads {
  float *norm1_w = nullptr, *norm1_b = nullptr, *qkv_w = nullptr, *qkv_b = nullptr;
  float *proj_w = nullptr, *proj_b = nullptr, *norm2_w = nullptr, *norm2_b = nullptr;
  float *fc1_w = nullptr, *fc1_b = nullptr, *fc2_w = nullptr, *fc2_b = nullptr;
};

// Saved for backward, one microbatch, one layer (notes/model.md lists each with its size).
struct LayerActivations {
  Buffer<float> norm1_mean, norm1_rstd;  // (N) each; mean gpt only
  Buffer<float> norm1_out;               // (N, h)
  Buffer<float> q, k, v;                 // (B,a,S,d), (B,g,S,d), (B,g,S,d)
  Buffer<float> probs;                   // naive: (B,a,S,S)
  Buffer<uint8_t> attn_mask;             // naive with attention dropout: (B,a,S,S)
  Buffer<float> probs_dropped;           // naive with attention dropout: (B,a,S,S)
  Buffer<float> lse;                     // flash: (B,a,S)
  Buffer<float> ctx;                     // (N, a d)
  Buffer<uint8_t> proj_mask;             // hidden dropout: (N, h)
  Buffer<float> x_mid;                   // (N, h) residual after attention
  Buffer<float> norm2_mean, norm2_rstd;  // (N) each
  Buffer<float> norm2_out;               // (N, h)
  Buffer<float> fc1_out;                 // (N, fc1)
  Buffer<float> act_out;                 // (N, f)
  Buffer<uint8_t> fc2_mask;              // hidden dropout: (N, h)
  Buffer<float> out;                     // (N, h) layer output = next layer's input
};

// Scratch shared by all layers of one microbatch; sizes in notes/model.md ("Workspace").
struct Workspace {
  int tokens = 0;                        // N the buffers are sized for
  Buffer<float> dres;                    // (N, h) gradient of the residual stream
  Buffer<float> tmp_h;                   // (N, h) proj / fc2 outputs and their gradients
  Buffer<float> qkv;                     // (N, (a+2g)d) forward qkv, backward dqkv
  Buffer<float> o_heads;                 // (B,a,S,d) attention output in head layout
  Buffer<float> dctx;                    // (N, a d)
  Buffer<float> do_heads;                // (B,a,S,d)
  Buffer<float> dq, dk, dv;              // (B,a,S,d), (B,g,S,d), (B,g,S,d)
  Buffer<float> dact;                    // (N, f)
  Buffer<float> dfc1;                    // (N, fc1)
  Buffer<float> scores, dprobs;          // naive only: (B,a,S,S) each
  Buffer<float> xf;                      // fused loss only: (N, h) final-norm output
  Buffer<float> losses;                  // (N) per-token loss
  void ensure(const ModelConfig& m, kernels::Device device, int B);
};

struct LayerContext {
  const ModelConfig& model;
  kernels::Device device;
  int layer;             // index, keys the dropout streams 4l+1, 4l+2, 4l+3
  int B;                 // microbatch size
  uint64_t dropout_seed; // the microbatch's seed
};

void layer_forward(const LayerContext& c, const LayerWeights& w, const float* x,
                   LayerActivations& act, Workspace& ws);
// dres holds d(layer output) on entry and d(layer input) on return.
void layer_backward(const LayerContext& c, const LayerWeights& w, LayerGrads& g, const float* x,
                    LayerActivations& act, Workspace& ws);
// Attention core: act.q/k/v -> act.ctx (and probs / lse); backward ws.dctx -> ws.dq/dk/dv.
void attention_forward(const LayerContext& c, LayerActivations& act, Workspace& ws);
void attention_backward(const LayerContext& c, LayerActivations& act, Workspace& ws);

}  // namespace paralab
