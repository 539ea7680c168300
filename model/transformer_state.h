// model/transformer_state.h: what one microbatch in flight keeps between the model's forward
// and backward (model/transformer.cpp, model/head.cpp); internal to model/.
#pragma once
#include <type_traits>
#include <vector>
#include "kernels/ops.h"
#include "model/layer.h"
#include "model/transformer.h"

namespace paralab {

template <typename T>
struct Transformer::State {
  std::vector<LayerActivations<T>> acts;
  Workspace<T> ws;
  Buffer<T> x0;                  // (N_l, h) embedding output, activations
  Buffer<float> final_mean, final_rstd;
  Buffer<T> dxf;                 // fused: the head's input gradient (N_l, h; N h before its
                                 // all-reduce without sp); unfused: (N, h) in backward
  Buffer<T> xf_saved;            // unfused: (N_l, h) final-norm output
  Buffer<float> logits;          // unfused: (N, V_l) logits, then their gradient (fp32)
  Buffer<int> tokens, targets;   // (N) on the device
  int B = 0;
  uint64_t dropout_seed = 0;     // of the pending microbatch: backward regenerates its masks
  bool pending = false;          // a forward waits for its backward
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
