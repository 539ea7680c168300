// model/optimizer.cpp: AdamW with global-norm clipping and Megatron's learning-rate schedule.
//
// In fp32 training the parameters are their own master copy (master_params holds nothing);
// the Adam moments m and v are 2 x 4 bytes per parameter, category optimizer_states (2 x 2
// with --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16).
#include "model/optimizer.h"
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>
#include "kernels/ops.h"
#include "measure/clock.h"      // now_seconds
#include "model/host_adamw.h"  // host_adamw: the offloaded elements' update

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

AdamW::AdamW(Transformer& model, const TrainConfig& train, int host_threads)
    : model_(model), train_(train), host_threads_(std::max(1, host_threads)),
      scaler_(train.loss_scaled() ? LossScaler(train.loss_scaling) : LossScaler()) {
  DataParallel& dp = model.data_parallel();
  DataParallel* experts = model.expert_data_parallel();
  const kernels::Device dev = model.device();
  // the states of the dense elements, then (experts apart) those of the experts; the first
  // H of each on the host (CPU offload), the rest on the device
  dense_n_ = dp.state_numel();
  dense_h_ = dp.host_state_numel();
  expert_h_ = experts ? experts->host_state_numel() : 0;
  const int64_t host = dense_h_ + expert_h_;
  const int64_t n = dense_n_ + (experts ? experts->state_numel() : 0) - host;
  const bool pin = dp.pin_memory();
  const size_t mb = state_bytes(State::EXP_AVG), vb = state_bytes(State::EXP_AVG_SQ);
  m_.allocate(dev, n * mb, Category::OPTIMIZER_STATES);
  v_.allocate(dev, n * vb, Category::OPTIMIZER_STATES);
  host_m_.allocate_host(dev, host * mb, Category::OPTIMIZER_STATES, pin);
  host_v_.allocate_host(dev, host * vb, Category::OPTIMIZER_STATES, pin);
  if (model.tensor_parallel().size() > 1)
    norm_scalar_.allocate(dev, 1, Category::COMM_BUFFERS);
  if (model.pipeline_group()) pp_norm_scalar_.allocate(dev, 1, Category::COMM_BUFFERS);
  if (experts && model.expert_parallel().distributed())
    ep_norm_scalar_.allocate(dev, 1, Category::COMM_BUFFERS);
  if (dp.storage() != DType::F32) {
    master_.allocate(dev, n, Category::MASTER_PARAMS);
    host_master_.allocate_host(dev, host, Category::MASTER_PARAMS, pin);
    auto copy = [&](DataParallel& owner, bool expert) {
      with_storage(owner.storage(), [&](auto type) {
        using T = decltype(type);
        if constexpr (!std::is_same_v<T, float>)  // 16-bit storage alone keeps masters
          for (const OwnedSegment& seg : owner.owned_segments())
            kernels::convert(seg.host ? kernels::Device::CPU : dev,
                             static_cast<float*>(state(State::MASTER, expert, seg.state_offset)),
                             static_cast<const T*>(seg.param), seg.count);
      });
    };
    copy(dp, false);
    if (experts) copy(*experts, true);
  }
}

int64_t AdamW::index(bool expert, int64_t i) const {
  if (!expert) return on_host(false, i) ? i : i - dense_h_;
  return on_host(true, i) ? dense_h_ + i : (dense_n_ - dense_h_) + (i - expert_h_);
}

void* AdamW::state(State s, bool expert, int64_t i) {
  const bool host = on_host(expert, i);
  if (s == State::MASTER) {
    Buffer<float>& b = host ? host_master_ : master_;
    return b.empty() ? nullptr : b.data() + index(expert, i);
  }
  Buffer<uint8_t>& b = s == State::EXP_AVG ? (host ? host_m_ : m_) : (host ? host_v_ : v_);
  return b.empty() ? nullptr : b.data() + index(expert, i) * state_bytes(s);
}

kernels::Device AdamW::state_device(bool expert, int64_t i) const {
  return on_host(expert, i) ? kernels::Device::CPU : model_.device();
}

namespace {
// One value summed over a group's ranks (the gradient norm's squares): through a one-element
// device buffer, as the collectives take device memory.
double all_reduce_scalar(Communicator& group, Buffer<float>& scalar, double value,
                         kernels::Device dev) {
  float f = (float)value;
  kernels::memcpy_from_host(dev, scalar.data(), &f, sizeof f);
  group.all_reduce(scalar.data(), 1);
  kernels::memcpy_to_host(dev, &f, scalar.data(), sizeof f);
  return (double)f;
}

// The clipping coefficient (Megatron / PyTorch clip_grad_norm_): g <- g * c / (||g|| + 1e-6)
// when ||g|| > c, else 1; of the unscaled norm.
float clip_factor(double norm, float clip_grad) {
  if (clip_grad > 0.0f && norm > clip_grad) return (float)(clip_grad / (norm + 1e-6));
  return 1.0f;
}

// What the update multiplies each gradient by: the clipping coefficient on the unscaled
// gradients g = scaled / S, both factors in one multiply; 1/S as megatron-core's inv_scale takes
// it (the reciprocal in double, then fp32).
float gradient_multiplier(float clip, float S) {
  return S == 1.0f ? clip : clip * (float)(1.0 / (double)S);
}

// The step's constants: the learning rate, Adam's betas and epsilon, the moments' storage and
// the bias corrections 1 - beta^t, t the updates made (this one included).
kernels::AdamStep adam_constants(const TrainConfig& t, float lr, int updates,
                                 float grad_scale) {
  kernels::AdamStep s;
  s.lr = lr, s.beta1 = t.adam_beta1, s.beta2 = t.adam_beta2, s.eps = t.adam_eps;
  s.exp_avg_bf16 = t.exp_avg_bf16, s.exp_avg_sq_bf16 = t.exp_avg_sq_bf16;
  s.bias1 = 1.0f - std::pow(t.adam_beta1, (float)updates);
  s.bias2 = 1.0f - std::pow(t.adam_beta2, (float)updates);
  s.grad_scale = grad_scale;
  return s;
}

// The runs of one update: the device's (one multi-tensor launch) and the host's (CPU offload).
struct AdamRuns {
  std::vector<kernels::AdamRun> device, host;
};

// Weight decay is per tensor (2-D weights only), an owned segment may span tensors: each
// intersection of one of `owner`'s segments with a tensor of its vector (dense or experts') is
// a run of its own, with its parameters, gradients and states at the same offset k into the
// segment. A segment on the host joins the host's list.
void add_runs(AdamW& opt, const std::vector<TensorView>& views, DataParallel& owner,
              bool expert, DType storage, float weight_decay, AdamRuns& runs) {
  const bool half = storage != DType::F32;  // 16-bit parameters with fp32 masters
  const int es = (int)dtype_size(storage);
  for (const OwnedSegment& seg : owner.owned_segments()) {
    for (const TensorView& v : views) {
      if (v.expert != expert) continue;
      const int64_t lo = std::max<int64_t>(seg.flat_begin, v.offset);
      const int64_t hi = std::min<int64_t>(seg.flat_begin + seg.count, v.offset + v.numel);
      if (lo >= hi) continue;
      const int64_t k = lo - seg.flat_begin, at = seg.state_offset + k;
      void* param = static_cast<char*>(seg.param) + k * es;
      kernels::AdamRun r;
      r.master = half ? static_cast<float*>(opt.state(AdamW::State::MASTER, expert, at))
                      : static_cast<float*>(param);
      r.params = half ? param : nullptr;
      r.grads = static_cast<const char*>(seg.grad) + k * es;
      r.m = opt.state(AdamW::State::EXP_AVG, expert, at);
      r.v = opt.state(AdamW::State::EXP_AVG_SQ, expert, at);
      r.n = hi - lo;
      r.weight_decay = v.spec->weight_decay ? weight_decay : 0.0f;
      (seg.host ? runs.host : runs.device).push_back(r);
    }
  }
}

// The sum of squares over this rank's share; tensor parallelism adds the other slices
// (replicated tensors count on tp rank 0 only: Transformer excluded them elsewhere), expert
// parallelism the other ranks' experts (each expert element once: the expert-data-parallel
// replicas agree), and pipeline parallelism the other stages (gpt's tied copy counts on the
// first stage only): ||g||^2 over every parameter, each counted once. Each group's sum goes
// through its one-element buffer.
double global_grad_sum_squares(Transformer& model, Buffer<float>& tp_scalar,
                               Buffer<float>& ep_scalar, Buffer<float>& pp_scalar) {
  const kernels::Device dev = model.device();
  DataParallel* experts = model.expert_data_parallel();
  double squares = model.data_parallel().grad_sum_squares();
  const TensorParallel& tp = model.tensor_parallel();
  if (tp.size() > 1) squares = all_reduce_scalar(*tp.tp, tp_scalar, squares, dev);
  // the experts' share over the ranks holding the others: ep, or etp x ep with their
  // widths split (every rank holds every expert when folded over tp without either)
  const ExpertParallel& ep = model.expert_parallel();
  if (experts && ep.distributed())
    squares += all_reduce_scalar(ep.etp_size() > 1 ? *ep.etp_ep : *ep.ep, ep_scalar,
                                 experts->grad_sum_squares(), dev);
  else if (experts)
    squares += experts->grad_sum_squares();
  if (Communicator* pp = model.pipeline_group())
    squares = all_reduce_scalar(*pp, pp_scalar, squares, dev);
  return squares;
}

// One AdamW update of the owned elements with the step's constants: the device's runs, dense
// and experts', in one launch (kernels::adamw_update, multi-tensor), then the host's (CPU
// offload) by host_threads. Returns the host update's seconds.
double update_owned(AdamW& opt, Transformer& model, const kernels::AdamStep& s,
                    float weight_decay, int host_threads) {
  DataParallel& dp = model.data_parallel();
  DataParallel* experts = model.expert_data_parallel();
  const DType storage = dp.storage();
  AdamRuns runs;
  add_runs(opt, model.views(), dp, false, storage, weight_decay, runs);
  if (experts) add_runs(opt, model.views(), *experts, true, storage, weight_decay, runs);
  const int count = (int)runs.device.size();
  with_storage(storage, [&](auto type) {
    kernels::adamw_update<decltype(type)>(model.device(), runs.device.data(), count, s);
  });
  const double t0 = now_seconds();
  if (!runs.host.empty()) host_adamw(runs.host, s, storage, host_threads);
  return now_seconds() - t0;
}
}  // namespace

float AdamW::step(float lr, bool skip) {
  DataParallel& dp = model_.data_parallel();
  DataParallel* experts = model_.expert_data_parallel();
  const kernels::Device dev = model_.device();
  dp.finish_gradients();
  if (experts) experts->finish_gradients();
  if (train_.log_fp16_underflow) {
    underflow_ = GradUnderflow();
    count_grad_underflow(dp, dev, scaler_.scale(), underflow_);
    if (experts) count_grad_underflow(*experts, dev, scaler_.scale(), underflow_);
  }
  // the gradients carry the loss scale S: their norm is S times the true one, and an
  // overflow (inf or NaN in some gradient) makes it not finite
  const float S = scaler_.scale();
  const double squares =
      global_grad_sum_squares(model_, norm_scalar_, ep_norm_scalar_, pp_norm_scalar_);
  const double norm = std::sqrt(squares) / S;
  skipped_ = skip || !std::isfinite(norm);
  // megatron-core's optimizer.step: the scaler sees found_inf every step (a loss that is not
  // finite gave gradients that are not either)
  scaler_.update(skipped_);
  if (!skipped_) {
    ++step_;  // Adam's bias correction counts the updates made
    const float grad_scale = gradient_multiplier(clip_factor(norm, train_.clip_grad), S);
    const kernels::AdamStep constants = adam_constants(train_, lr, step_, grad_scale);
    host_seconds_ = update_owned(*this, model_, constants, train_.weight_decay, host_threads_);
  }
  // ZeRO's parameter all-gather runs either way (unchanged shards on a skipped step): the
  // step's collectives stay the plan's
  dp.after_optimizer_step();
  if (experts) experts->after_optimizer_step();
  return (float)norm;
}

}  // namespace paralab
