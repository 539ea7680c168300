// parallel/fp8_scaling.cpp: the recipes of parallel/fp8_scaling.h. Each cast goes through one
// or two of kernels/ops/fp8.h's ops; the recipe only chooses the scale: the history's
// (delayed), this tensor's amax (tensorwise), each block's (blockwise).
//
// defines: Fp8Scaling
#include "parallel/fp8_scaling.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/ops/memory_gemm.h"  // memcpy_from_host

namespace paralab {

using kernels::Fp8Blocks;
using kernels::Fp8Format;

namespace {
void fill(kernels::Device d, Buffer<float>& b, float v) {
  const std::vector<float> host(b.size(), v);
  kernels::memcpy_from_host(d, b.data(), host.data(), host.size() * sizeof(float));
}
// The first n floats of a device buffer, on the host.
std::vector<float> host_copy_first(int n, const Buffer<float>& b) {
  std::vector<float> h((size_t)n);
  kernels::memcpy_to_host(b.device(), h.data(), b.data(), h.size() * sizeof(float));
  return h;
}
}  // namespace

Fp8Scaling::Fp8Scaling(const Fp8Config& config, kernels::Device device, int linears,
                       Fp8Scaling* share)
    : config_(config), device_(device), linears_(linears) {
  const Category state = Category::FP8_STATE;  // the ledger's row (plan/fp8.h)
  if (config.recipe == Fp8Recipe::Delayed) {
    const size_t len = (size_t)config.amax_history_len;
    history_fwd_.allocate(device, len * 2 * linears, state);
    scale_fwd_.allocate(device, 2 * (size_t)linears, state);
    history_bwd_.allocate(device, len * linears, state);
    scale_bwd_.allocate(device, (size_t)linears, state);
    fill(device, scale_fwd_, 1.0f);
    fill(device, scale_bwd_, 1.0f);
  } else if (config.recipe == Fp8Recipe::Tensorwise) {
    if (share == nullptr) scratch_.allocate(device, 2, state);
    tensorwise_ = share != nullptr ? share->tensorwise_ : scratch_.data();
  }
  if (config.log_scaling) {  // plan/fp8.h's fp8.cast_counts, shared as tensorwise's scratch
    if (share == nullptr) cast_counts_.allocate(device, 2, state);
    counts_ = share != nullptr ? share->counts_ : cast_counts_.data();
    log_.resize(3 * (size_t)linears);
  }
}

size_t Fp8Scaling::state_bytes(const Fp8Config& config, int linears) {
  if (config.recipe != Fp8Recipe::Delayed) return 0;
  return sizeof(float) * ((size_t)config.amax_history_len + 1) * 3 * linears;
}

void Fp8Scaling::set_reductions(Reduce pieces, Reduce amax_group) {
  pieces_ = std::move(pieces);
  amax_group_ = std::move(amax_group);
}

Fp8Format Fp8Scaling::format(Fp8Role r) const {
  return forward(r) ? config_.forward_format() : config_.backward_format();
}

Fp8Blocks Fp8Scaling::blocks(const Fp8Config& config, Fp8Role r) {
  if (config.recipe != Fp8Recipe::Blockwise) return Fp8Blocks::Tensor;
  return r == Fp8Role::Weight ? Fp8Blocks::Blocks : Fp8Blocks::Tiles;
}

size_t Fp8Scaling::scale_bytes(const Fp8Config& config, Fp8Role r, int rows, int cols) {
  return sizeof(float) * kernels::fp8_scale_count(blocks(config, r), rows, cols);
}

int Fp8Scaling::slot(int linear, Fp8Role role) const {
  if (linear < 0 || linear >= linears_)
    throw std::out_of_range("Fp8Scaling: linear " + std::to_string(linear) + " of " +
                            std::to_string(linears_));
  return role == Fp8Role::OutputGrad ? linear : 2 * linear + (role == Fp8Role::Weight);
}

// One scale for x: its copies as asked, amax recorded when `amax` is not null.
template <class T>
void Fp8Scaling::quantize_tensor(const T* x, int rows, int cols, Fp8Format f, const float* scale,
                                 float* amax, uint8_t* q, float* q_scale_inv, uint8_t* qt,
                                 float* qt_scale_inv) {
  if (q != nullptr)
    kernels::fp8_quantize(device_, q, q_scale_inv, amax, x, rows, cols, f, scale, false);
  if (qt != nullptr)
    kernels::fp8_quantize(device_, qt, qt_scale_inv, q != nullptr ? nullptr : amax, x, rows, cols,
                          f, scale, true);
}

template <class T>
void Fp8Scaling::quantize(int linear, Fp8Role role, const T* x, int rows, int cols, uint8_t* q,
                          float* q_scale_inv, uint8_t* qt, float* qt_scale_inv) {
  const int s = slot(linear, role);
  const Fp8Format f = format(role);
  switch (config_.recipe) {
    case Fp8Recipe::Delayed: {
      // the history's scale; this tensor's amax max-accumulates into row 0 of its column
      float* history = forward(role) ? history_fwd_.data() : history_bwd_.data();
      const float* scale = (forward(role) ? scale_fwd_.data() : scale_bwd_.data()) + s;
      quantize_tensor(x, rows, cols, f, scale, history + s, q, q_scale_inv, qt, qt_scale_inv);
      if (config_.log_scaling && q != nullptr) count_cast(linear, role, x, (size_t)rows * cols,
                                                          scale);
      return;
    }
    case Fp8Recipe::Tensorwise: {
      float* amax = tensorwise_;
      float* scale = tensorwise_ + 1;
      kernels::fp8_amax(device_, amax, x, (size_t)rows * cols);
      if (pieces_) pieces_(amax, 1);
      kernels::fp8_current_scale(device_, scale, amax, 1, f);
      quantize_tensor(x, rows, cols, f, scale, nullptr, q, q_scale_inv, qt, qt_scale_inv);
      if (config_.log_scaling && q != nullptr) count_cast(linear, role, x, (size_t)rows * cols,
                                                          scale);
      return;
    }
    case Fp8Recipe::Blockwise: {
      if (q != nullptr)
        kernels::fp8_quantize_blocks(device_, q, q_scale_inv, x, rows, cols, f, blocks(role), false);
      if (qt != nullptr)
        kernels::fp8_quantize_blocks(device_, qt, qt_scale_inv, x, rows, cols, f, blocks(role), true);
      return;
    }
  }
}

void Fp8Scaling::gather_scales(const std::vector<int>& linears, int values, float* amax,
                               float* scale, float* factor) {
  const int n = (int)linears.size();
  const Fp8Format f = config_.forward_format();
  switch (config_.recipe) {
    case Fp8Recipe::Delayed:
      for (int k = 0; k < n; ++k)
        kernels::memcpy_device(device_, scale + k,
                               scale_fwd_.data() + slot(linears[k], Fp8Role::Weight),
                               sizeof(float));
      break;
    case Fp8Recipe::Tensorwise:
      if (pieces_) pieces_(amax, n);
      kernels::fp8_current_scale(device_, scale, amax, n, f);
      break;
    case Fp8Recipe::Blockwise:
      kernels::fp8_current_scale(device_, scale, amax, values, f);
      break;
  }
  kernels::fp8_scale_inverse(device_, factor, scale, values);
}

template <class T>
void Fp8Scaling::quantize_shard(int linear, const T* x, int64_t first, int64_t n, int cols,
                                const float* scale, uint8_t* q) {
  float* amax = config_.recipe == Fp8Recipe::Delayed
                    ? history_fwd_.data() + slot(linear, Fp8Role::Weight)
                    : nullptr;
  kernels::fp8_shard_quantize(device_, q, amax, x, first, n, cols, config_.forward_format(),
                              blocks(Fp8Role::Weight), scale);
}

template <class T>
void Fp8Scaling::quantize_at(Fp8Role role, const T* x, int rows, int cols, const float* scale,
                             uint8_t* q, float* factor, bool transpose) {
  kernels::fp8_quantize(device_, q, factor, nullptr, x, rows, cols, format(role), scale,
                        transpose, blocks(role));
}

template <class T>
void Fp8Scaling::count_cast(int linear, Fp8Role role, const T* x, size_t n, const float* scale) {
  kernels::fp8_cast_count(device_, counts_, x, n, format(role), scale);
  unsigned long long counts[2];
  kernels::memcpy_to_host(device_, counts, counts_, sizeof(counts));
  Fp8TensorLog cast;
  cast.saturated = (int64_t)counts[0];
  cast.flushed = (int64_t)counts[1];
  cast.elements = (int64_t)n;
  if (config_.recipe == Fp8Recipe::Tensorwise) {  // this cast's amax and scale (tensorwise_)
    float amax_scale[2];
    kernels::memcpy_to_host(device_, amax_scale, tensorwise_, sizeof(amax_scale));
    cast.amax = amax_scale[0], cast.scale = amax_scale[1];
  }
  log_[log_slot(linear, role)].fold(cast);
}

// The step's amaxes (row 0, reduced) and the scales its casts used, before the update.
void Fp8Scaling::log_delayed_state() {
  const std::vector<float> hf = host_copy_first(2 * linears_, history_fwd_);
  const std::vector<float> sf = host_copy_first(2 * linears_, scale_fwd_);
  const std::vector<float> hb = host_copy_first(linears_, history_bwd_);
  const std::vector<float> sb = host_copy_first(linears_, scale_bwd_);
  for (int l = 0; l < linears_; ++l) {
    Fp8TensorLog* t = &log_[log_slot(l, Fp8Role::Input)];
    t[0].amax = hf[2 * l], t[0].scale = sf[2 * l];          // input
    t[1].amax = hf[2 * l + 1], t[1].scale = sf[2 * l + 1];  // weight
    t[2].amax = hb[l], t[2].scale = sb[l];                  // output gradient
  }
}

void Fp8Scaling::step_end() {
  if (config_.recipe != Fp8Recipe::Delayed) return;
  const float scaled_fwd = kernels::fp8_max(config_.forward_format()) * std::ldexp(1.0f, -config_.margin);
  const float scaled_bwd = kernels::fp8_max(config_.backward_format()) * std::ldexp(1.0f, -config_.margin);
  // Row 0 of each history holds the step's amaxes, contiguous: one reduction each.
  if (amax_group_) {
    amax_group_(history_fwd_.data(), 2 * linears_);
    amax_group_(history_bwd_.data(), linears_);
  }
  if (config_.log_scaling) log_delayed_state();
  kernels::fp8_delayed_update(device_, history_fwd_.data(), scale_fwd_.data(),
                              config_.amax_history_len, 2 * linears_, config_.amax_compute_algo,
                              scaled_fwd);
  kernels::fp8_delayed_update(device_, history_bwd_.data(), scale_bwd_.data(),
                              config_.amax_history_len, linears_, config_.amax_compute_algo,
                              scaled_bwd);
}

std::vector<Fp8Scaling::State> Fp8Scaling::state() {
  if (config_.recipe != Fp8Recipe::Delayed) return {};
  return {{"fp8_amax_history_fwd", &history_fwd_},
          {"fp8_scale_fwd", &scale_fwd_},
          {"fp8_amax_history_bwd", &history_bwd_},
          {"fp8_scale_bwd", &scale_bwd_}};
}

namespace {
// The host copy of a device buffer, and back.
std::vector<float> host_copy(kernels::Device d, const Buffer<float>& b) {
  std::vector<float> h(b.size());
  kernels::memcpy_to_host(d, h.data(), b.data(), h.size() * sizeof(float));
  return h;
}
// Columns [first, first + count) of a (rows, cols) row-major matrix, appended to out
// (put_columns: written from `in` at `at`, which moves on).
void columns(const std::vector<float>& m, int rows, int cols, int first, int count,
             std::vector<float>& out) {
  for (int r = 0; r < rows; ++r)
    out.insert(out.end(), m.begin() + (size_t)r * cols + first,
               m.begin() + (size_t)r * cols + first + count);
}
void put_columns(std::vector<float>& m, int rows, int cols, int first, int count,
                 const std::vector<float>& in, size_t& at) {
  for (int r = 0; r < rows; ++r, at += count)
    std::copy(in.begin() + at, in.begin() + at + count, m.begin() + (size_t)r * cols + first);
}
}  // namespace

std::vector<float> Fp8Scaling::linears_state(int first, int count) const {
  std::vector<float> out;
  if (config_.recipe != Fp8Recipe::Delayed) return out;
  const int len = config_.amax_history_len;
  std::vector<float> hf = host_copy(device_, history_fwd_), sf = host_copy(device_, scale_fwd_);
  std::vector<float> hb = host_copy(device_, history_bwd_), sb = host_copy(device_, scale_bwd_);
  columns(hf, len, 2 * linears_, 2 * first, 2 * count, out);
  columns(sf, 1, 2 * linears_, 2 * first, 2 * count, out);
  columns(hb, len, linears_, first, count, out);
  columns(sb, 1, linears_, first, count, out);
  return out;
}

void Fp8Scaling::set_linears_state(int first, int count, const std::vector<float>& values) {
  if (config_.recipe != Fp8Recipe::Delayed) return;
  if (values.size() != state_bytes(config_, count) / sizeof(float))
    throw std::logic_error("Fp8Scaling::set_linears_state: " + std::to_string(values.size()) +
                           " floats for " + std::to_string(count) + " linears");
  const int len = config_.amax_history_len;
  std::vector<float> hf = host_copy(device_, history_fwd_), sf = host_copy(device_, scale_fwd_);
  std::vector<float> hb = host_copy(device_, history_bwd_), sb = host_copy(device_, scale_bwd_);
  size_t at = 0;
  put_columns(hf, len, 2 * linears_, 2 * first, 2 * count, values, at);
  put_columns(sf, 1, 2 * linears_, 2 * first, 2 * count, values, at);
  put_columns(hb, len, linears_, first, count, values, at);
  put_columns(sb, 1, linears_, first, count, values, at);
  const auto back = [this](Buffer<float>& b, const std::vector<float>& h) {
    kernels::memcpy_from_host(device_, b.data(), h.data(), h.size() * sizeof(float));
  };
  back(history_fwd_, hf), back(scale_fwd_, sf), back(history_bwd_, hb), back(scale_bwd_, sb);
}

template void Fp8Scaling::quantize<float>(int, Fp8Role, const float*, int, int, uint8_t*, float*,
                                          uint8_t*, float*);
template void Fp8Scaling::quantize<kernels::bf16>(int, Fp8Role, const kernels::bf16*, int, int,
                                                  uint8_t*, float*, uint8_t*, float*);
template void Fp8Scaling::quantize_shard<float>(int, const float*, int64_t, int64_t, int,
                                                const float*, uint8_t*);
template void Fp8Scaling::quantize_shard<kernels::bf16>(int, const kernels::bf16*, int64_t,
                                                        int64_t, int, const float*, uint8_t*);
template void Fp8Scaling::quantize_at<float>(Fp8Role, const float*, int, int, const float*,
                                             uint8_t*, float*, bool);
template void Fp8Scaling::quantize_at<kernels::bf16>(Fp8Role, const kernels::bf16*, int, int,
                                                     const float*, uint8_t*, float*, bool);

}  // namespace paralab
