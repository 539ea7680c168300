// model/transformer_pipeline.cpp: the Transformer's side of pipeline parallelism
// (parallel/pipeline*.cpp drives it): the buffers a stage receives activations and output
// gradients into, the hand-over between two chunks on one rank (the V schedules), and the tied
// embedding's gradient all-reduce between the first and last stage.
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/param_table.h"  // stage_deferred_units
#include "model/transformer.h"
#include "model/transformer_state.h"

namespace paralab {

void* Transformer::activation_input(int microbatch, int chunk, int B) {
  const size_t n = (size_t)tp_.local_tokens(B * local_.seq_length) * local_.hidden_size;
  auto input = [&](auto& s) -> void* {
    auto& f = in_flight(s, microbatch, chunk, true);
    f.input.allocate(device_, n, Category::ACTIVATIONS);
    return f.input.data();
  };
  return with_state(input);
}

const void* Transformer::activation_output(int microbatch, int chunk) const {
  auto output = [&](auto& s) -> const void* {
    auto it = s.in_flight.find({microbatch, chunk});
    if (it == s.in_flight.end() || !it->second->forward_done)
      throw std::logic_error("Transformer: no output of microbatch " +
                             std::to_string(microbatch) + " on chunk " + std::to_string(chunk));
    const auto& f = *it->second;
    return f.acts.empty() ? (const void*)f.input.data() : (const void*)f.acts.back().out.data();
  };
  return with_state(output);
}

void* Transformer::output_gradient_input(int microbatch, int chunk, int B) {
  const size_t n = (size_t)tp_.local_tokens(B * local_.seq_length) * local_.hidden_size;
  auto buffer = [&](auto& s) -> void* {
    if (s.grad_recv.size() != (size_t)gradient_buffers_) s.grad_recv.resize(gradient_buffers_);
    for (auto& b : s.grad_recv)
      if (b.size() != n) b.allocate(device_, n, Category::WORKSPACE);
    if (microbatch < 0) return nullptr;  // the first forward: allocate them all
    std::vector<bool> busy(s.grad_recv.size(), false);
    for (const auto& [pair, k] : s.grad_of) busy[k] = true;
    for (size_t k = 0; k < busy.size(); ++k)
      if (!busy[k]) {
        s.grad_of[{microbatch, chunk}] = k;
        return s.grad_recv[k].data();
      }
    throw std::logic_error("Transformer: more output gradients held than the " +
                           std::to_string(gradient_buffers_) + " receive buffers");
  };
  return with_state(buffer);
}

void Transformer::hand_over(bool activation, int microbatch, int from_chunk, int to_chunk) {
  // the pair that exists now: the sender of an activation, the receiver of a gradient
  const int known = activation ? from_chunk : to_chunk;
  auto pair_b = [&](auto& s) { return in_flight(s, microbatch, known, false).B; };
  const int B = with_state(pair_b);
  const size_t bytes = (size_t)tp_.local_tokens(B * local_.seq_length) * local_.hidden_size *
                       dtype_size(dp_->storage());
  void* to = activation ? activation_input(microbatch, to_chunk, B)
                        : output_gradient_input(microbatch, to_chunk, B);
  const void* from = activation ? activation_output(microbatch, from_chunk) : input_gradient();
  kernels::memcpy_device(device_, to, from, bytes);
}

const void* Transformer::input_gradient() const {
  return with_state([](auto& s) { return (const void*)s.ws.dres.data(); });
}

void Transformer::sync_tied_embedding() {
  if (stage_deferred_units(config_, slice_).empty()) return;  // untied, or one stage has both
  if (!embedding_) throw std::logic_error("Transformer: a tied pipeline stage needs the embedding group");
  const TensorView& word = view("embedding.word");
  void* g = static_cast<char*>(dp_->grads(word.unit)) +
            word.unit_offset * dtype_size(dp_->storage());
  embedding_->all_reduce(g, word.numel, ReduceOp::SUM, dp_->storage());
}

}  // namespace paralab
