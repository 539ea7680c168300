// model/optimizer.cpp: AdamW with global-norm clipping and Megatron's learning-rate schedule.
//
// In fp32 training the parameters are their own master copy (master_params holds nothing);
// the Adam moments m and v are 2 x 4 bytes per parameter, category optimizer_states.
#include "model/optimizer.h"
#include <algorithm>
#include <cmath>
#include "kernels/ops.h"

namespace paralab {

namespace {
// Warm-up, then the decay, at position `at` of a schedule of these lengths.
float scheduled(const TrainConfig& t, double at, double warmup, double decay) {
  if (at > decay) return t.min_lr;
  if (t.lr_decay_style == LrDecay::CONSTANT || decay <= warmup) return t.lr;
  const double progress = (at - warmup) / (decay - warmup);
  double coeff;
  if (t.lr_decay_style == LrDecay::LINEAR) coeff = 1.0 - progress;
  else coeff = 0.5 * (1.0 + std::cos(M_PI * progress));  // cosine
  return (float)(t.min_lr + (t.lr - t.min_lr) * coeff);
}
}  // namespace

float learning_rate(const TrainConfig& t, int step) {
  if (t.lr_decay_samples > 0) {
    // Megatron's sample-based schedule (--train-samples): the position is the samples
    // consumed, step x global batch, and the lengths are samples
    const double at = (double)step * t.global_batch_size, warmup = (double)t.lr_warmup_samples;
    if (warmup > 0 && at <= warmup) return (float)(t.lr * at / warmup);
    return scheduled(t, at, warmup, (double)t.lr_decay_samples);
  }
  const int warmup = t.lr_warmup_iters;
  const int decay = t.lr_decay_iters > 0 ? t.lr_decay_iters : t.train_iters;
  if (warmup > 0 && step <= warmup) return t.lr * (float)step / (float)warmup;
  return scheduled(t, step, warmup, decay);
}

AdamW::AdamW(Transformer& model, const TrainConfig& train) : model_(model), train_(train) {
  DataParallel& dp = model.data_parallel();
  DataParallel* experts = model.expert_data_parallel();
  // the states of the dense elements, then (experts apart) those of the experts
  expert_state_offset_ = dp.state_numel();
  const int64_t n = expert_state_offset_ + (experts ? experts->state_numel() : 0);
  m_.allocate(model.device(), n, Category::OPTIMIZER_STATES);
  v_.allocate(model.device(), n, Category::OPTIMIZER_STATES);
  if (model.tensor_parallel().size() > 1)
    norm_scalar_.allocate(model.device(), 1, Category::COMM_BUFFERS);
  if (model.pipeline_group()) pp_norm_scalar_.allocate(model.device(), 1, Category::COMM_BUFFERS);
  if (experts && model.expert_parallel().distributed())
    ep_norm_scalar_.allocate(model.device(), 1, Category::COMM_BUFFERS);
  if (dp.bf16()) {
    master_.allocate(model.device(), n, Category::MASTER_PARAMS);
    auto copy = [&](DataParallel& owner, int64_t base) {
      for (const OwnedSegment& seg : owner.owned_segments())
        kernels::convert(model.device(), master_.data() + base + seg.state_offset,
                         static_cast<const kernels::bf16*>(seg.param), seg.count);
    };
    copy(dp, 0);
    if (experts) copy(*experts, expert_state_offset_);
  }
}

float AdamW::step(float lr, bool skip) {
  DataParallel& dp = model_.data_parallel();
  DataParallel* experts = model_.expert_data_parallel();
  const kernels::Device dev = model_.device();
  dp.finish_gradients();
  if (experts) experts->finish_gradients();
  // the sum of squares over this rank's share; tensor parallelism adds the other slices
  // (replicated tensors count on tp rank 0 only: Transformer excluded them elsewhere), expert
  // parallelism the other ranks' experts (each expert element once: the expert-data-parallel
  // replicas agree), and pipeline parallelism the other stages (gpt's tied copy counts on
  // the first stage only)
  auto sum_over = [&](Communicator& group, Buffer<float>& scalar, double squares) {
    float f = (float)squares;
    kernels::memcpy_from_host(dev, scalar.data(), &f, sizeof f);
    group.all_reduce(scalar.data(), 1);
    kernels::memcpy_to_host(dev, &f, scalar.data(), sizeof f);
    return (double)f;
  };
  double squares = dp.grad_sum_squares();
  const TensorParallel& tp = model_.tensor_parallel();
  if (tp.size() > 1) squares = sum_over(*tp.tp, norm_scalar_, squares);
  // the experts' share over the ranks holding the others: ep, or etp x ep with their
  // widths split (every rank holds every expert when folded over tp without either)
  const ExpertParallel& ep = model_.expert_parallel();
  if (experts && ep.distributed())
    squares += sum_over(ep.etp_size() > 1 ? *ep.etp_ep : *ep.ep, ep_norm_scalar_,
                        experts->grad_sum_squares());
  else if (experts)
    squares += experts->grad_sum_squares();
  if (Communicator* pp = model_.pipeline_group())
    squares = sum_over(*pp, pp_norm_scalar_, squares);
  const double norm = std::sqrt(squares);
  skipped_ = skip || !std::isfinite(norm);
  // clip: g <- g * c / (||g|| + 1e-6) when ||g|| > c (Megatron / PyTorch clip_grad_norm_)
  float clip = 1.0f;
  if (train_.clip_grad > 0.0f && norm > train_.clip_grad)
    clip = (float)(train_.clip_grad / (norm + 1e-6));
  if (!skipped_) ++step_;  // Adam's bias correction counts the updates made
  const float bias1 = 1.0f - std::pow(train_.adam_beta1, (float)step_);
  const float bias2 = 1.0f - std::pow(train_.adam_beta2, (float)step_);
  // Weight decay is per tensor (2-D weights only), an owned segment may span tensors: update
  // each intersection of a segment with a tensor on its own.
  auto update = [&](DataParallel& owner, bool expert, int64_t base) {
    for (const OwnedSegment& seg : owner.owned_segments()) {
      for (const TensorView& v : model_.views()) {
        if (v.expert != expert) continue;
        const int64_t lo = std::max<int64_t>(seg.flat_begin, v.offset);
        const int64_t hi = std::min<int64_t>(seg.flat_begin + seg.count, v.offset + v.numel);
        if (lo >= hi) continue;
        const int64_t k = lo - seg.flat_begin;
        const float wd = v.spec->weight_decay ? train_.weight_decay : 0.0f;
        float* m = m_.data() + base + seg.state_offset + k;
        float* vv = v_.data() + base + seg.state_offset + k;
        if (owner.bf16())
          kernels::adamw_update(dev, master_.data() + base + seg.state_offset + k,
                                static_cast<kernels::bf16*>(seg.param) + k,
                                static_cast<const kernels::bf16*>(seg.grad) + k, m, vv, hi - lo, lr,
                                train_.adam_beta1, train_.adam_beta2, train_.adam_eps, wd, bias1,
                                bias2, clip);
        else
          kernels::adamw_update(dev, static_cast<float*>(seg.param) + k,
                                static_cast<const float*>(seg.grad) + k, m, vv, hi - lo, lr,
                                train_.adam_beta1, train_.adam_beta2, train_.adam_eps, wd, bias1,
                                bias2, clip);
      }
    }
  };
  if (!skipped_) {
    update(dp, false, 0);
    if (experts) update(*experts, true, expert_state_offset_);
  }
  // ZeRO's parameter all-gather runs either way (unchanged shards on a skipped step): the
  // step's collectives stay the plan's
  dp.after_optimizer_step();
  if (experts) experts->after_optimizer_step();
  return (float)norm;
}

}  // namespace paralab
