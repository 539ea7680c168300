// model/transformer_state.h: what one (microbatch, chunk) in flight keeps between the model's
// forward and backward, and the scratch they share (model/transformer.cpp, model/head.cpp);
// internal to model/.
#pragma once
#include <map>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>
#include "kernels/ops.h"
#include "model/layer.h"
#include "model/transformer.h"

namespace paralab {

// One (microbatch, chunk) between its forward and its backward.
template <typename T>
struct Transformer::InFlight {
  std::vector<LayerActivations<T>> acts;  // the chunk's layers
  Buffer<T> input;               // (N_l, h) the chunk's input: the embedding's output on
                                 // model stage 0, else the received activation
  Buffer<float> final_mean, final_rstd;
  Buffer<T> dxf;                 // fused: the head's input gradient (N_l, h; N h before its
                                 // all-reduce without sp); unfused: (N, h) in backward
  Buffer<T> xf_saved;            // unfused: (N_l, h) final-norm output
  Buffer<float> logits;          // unfused: (N, V_l) logits, then their gradient (fp32)
  std::vector<int> host_tokens;  // model stage 0: copied in again for the embedding's backward
  Buffer<int> targets;           // (N) on the device, the last model stage's forward
  int B = 0;
  uint64_t dropout_seed = 0;     // backward regenerates the microbatch's masks from it
  float grad_scale = 1.0f;
  bool forward_done = false;
  bool weight_pending = false;   // split backward: B done, W not yet
  bool forward_only = false;     // evaluation (Microbatch::forward_only): the loss only
};

// Everything of one storage type: the pairs in flight and the scratch they share.
template <typename T>
struct Transformer::State {
  std::map<std::pair<int, int>, std::unique_ptr<InFlight<T>>> in_flight;  // (microbatch, chunk)
  Workspace<T> ws;
  // Pipelines: the output gradient of the next model stage arrives here; a backward swaps
  // it with ws.dres (the running residual gradient), so the input gradient it leaves in
  // dres can still be sent while the next one arrives. Category workspace, (N_l, h).
  Buffer<T> grad_recv;
};

// The head's backward GEMMs take the loss gradient in the storage type: fp32 as it is, bf16
// rounded into `scratch` (category logits, notes/model.md).
template <typename T>
const T* loss_gradient_as(kernels::Device dev, const float* dlogits, size_t n,
                          Buffer<T>& scratch) {
  if constexpr (std::is_same<T, float>::value) {
    (void)dev, (void)n, (void)scratch;
    return dlogits;
  } else {
    if (scratch.size() < n) scratch.allocate(dev, n, Category::LOGITS);
    kernels::convert(dev, scratch.data(), dlogits, n);
    return scratch.data();
  }
}

}  // namespace paralab
