// model/transformer_state.h: what one (microbatch, chunk) in flight keeps between the model's
// forward and backward, and the scratch they share (model/transformer.cpp, model/head.cpp);
// internal to model/.
#pragma once
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#include "kernels/ops.h"
#include "model/layer.h"
#include "model/transformer.h"

namespace paralab {

// The model's side of both data parallelisms, with DataParallel's calls: each call on unit u
// goes to the dense DataParallel and, with ep > 1, to the expert one, whose units mirror the
// dense ones (model/param_table.h, stage_expert_units), so that both see one sequence of
// calls (the one plan/ replays) and ZeRO-3 gathers a layer's experts when it gathers the rest.
class UnitParams {
 public:
  UnitParams(DataParallel& dense, DataParallel* experts)
      : dense_(dense), experts_(experts),
        expert_params_(experts ? experts->num_units() : 0, nullptr),
        expert_grads_(expert_params_.size(), nullptr) {}
  const void* acquire_params(int u, bool forward) {
    if (experts_) expert_params_[u] = experts_->acquire_params(u, forward);
    return dense_.acquire_params(u, forward);
  }
  void release_params(int u) {
    dense_.release_params(u);
    if (experts_) experts_->release_params(u);
  }
  void* grads(int u) {
    if (experts_) expert_grads_[u] = experts_->grads(u);
    return dense_.grads(u);
  }
  void backward_done(int u) {
    dense_.backward_done(u);
    if (experts_) experts_->backward_done(u);
  }
  // Unit u's expert parameters (since acquire_params) and gradients (since grads); nullptr
  // without expert parallelism.
  const void* expert_params(int u) const { return experts_ ? expert_params_[u] : nullptr; }
  void* expert_grads(int u) const { return experts_ ? expert_grads_[u] : nullptr; }
  // --fp8-param-gather: unit u's gathered weights' scales and factors (DataParallel): its
  // dense linears' (qkv first), and an MoE layer's experts' (local expert e's fc1 at e, its
  // fc2 at E_l + e), from the expert vector's unit or after the dense unit's qkv and proj.
  Fp8GatheredUnit fp8_weights(int u) const { return dense_.fp8_weights(u); }
  Fp8GatheredUnit fp8_expert_weights(int u) const {
    if (experts_) return experts_->fp8_weights(u);
    Fp8GatheredUnit w = dense_.fp8_weights(u);
    w.first = 2;  // qkv, proj
    return w;
  }

 private:
  DataParallel& dense_;
  DataParallel* experts_;
  std::vector<const void*> expert_params_;
  std::vector<void*> expert_grads_;
};

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
  // Pipelines: the output gradients of the next model stage arrive here, one buffer per
  // gradient held (Transformer::set_gradient_buffers; which pair's is in which: grad_of); a
  // backward swaps its with ws.dres (the running residual gradient), so the input gradient
  // it leaves in dres can still be sent while the next one arrives. Category workspace,
  // (N_l, h) each.
  std::vector<Buffer<T>> grad_recv;
  std::map<std::pair<int, int>, size_t> grad_of;  // (microbatch, chunk) -> its buffer
};

template <typename F>
decltype(auto) Transformer::with_state(F&& f) const {
  if (bf16_) return f(*bf16_);
  if (fp16_) return f(*fp16_);
  return f(*fp32_);
}

// The (microbatch, chunk) pair's activations in flight; `create` makes them at its first
// forward, else a pair not in flight is a schedule's error.
template <typename T>
inline Transformer::InFlight<T>& Transformer::in_flight(State<T>& s, int microbatch, int chunk,
                                                        bool create) {
  auto& slot = s.in_flight[{microbatch, chunk}];
  if (!slot) {
    if (!create)
      throw std::logic_error("Transformer: microbatch " + std::to_string(microbatch) +
                             " is not in flight on chunk " + std::to_string(chunk));
    slot.reset(new InFlight<T>);
    slot->acts.resize(slice_.chunk_layers.at(chunk));
  }
  return *slot;
}


// The head's backward GEMMs take the loss gradient in the storage type: fp32 as it is, 16-bit
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
