// model/transformer.cpp: the whole model around model/layer.cpp: embedding, the layer stack,
// the final norm, the output head and the loss (notes/model.md).
//
// The head and the loss are fused by default (--no-fused-ce turns it off): tokens go through
// in chunks of `cross_entropy_chunk`; per chunk the logits (chunk, V) are computed, turned in
// place into their gradient by the fused softmax cross-entropy, and immediately multiplied
// back: d(xf) = dlogits W_out and dW_out += dlogits^T xf. So full-vocabulary logits never
// exist, and what the forward leaves for backward is d(xf) (N, h) instead of xf.
#include "model/transformer.h"
#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <stdexcept>
#include "kernels/math.h"
#include "kernels/ops.h"
#include "model/layer.h"

namespace paralab {

template <typename T>
struct Transformer::State {
  std::vector<LayerActivations<T>> acts;
  Workspace<T> ws;
  Buffer<T> x0;                  // (N, h) embedding output, activations
  Buffer<float> final_mean, final_rstd;
  Buffer<T> dxf;                 // fused: (N, h) gradient of the final-norm output
  Buffer<T> xf_saved;            // unfused: (N, h) final-norm output
  Buffer<float> logits;          // unfused: (N, V) logits, then their gradient (fp32)
  Buffer<int> tokens, targets;   // (N) on the device
  int B = 0;
  uint64_t dropout_seed = 0;     // of the pending microbatch: backward regenerates its masks
  bool pending = false;          // a forward waits for its backward
};

namespace {
const char* const kLayerTensors[12] = {
    "norm1.weight",     "norm1.bias",     "attn.qkv.weight", "attn.qkv.bias",
    "attn.proj.weight", "attn.proj.bias", "norm2.weight",    "norm2.bias",
    "mlp.fc1.weight",   "mlp.fc1.bias",   "mlp.fc2.weight",  "mlp.fc2.bias"};

template <typename P>
P at(P base, long offset) { return offset < 0 ? nullptr : base + offset; }

template <typename T>
LayerWeights<T> layer_weights(const void* unit, const std::array<long, 12>& o) {
  const T* p = static_cast<const T*>(unit);
  return {at(p, o[0]), at(p, o[1]), at(p, o[2]), at(p, o[3]),  at(p, o[4]),  at(p, o[5]),
          at(p, o[6]), at(p, o[7]), at(p, o[8]), at(p, o[9]), at(p, o[10]), at(p, o[11])};
}
template <typename T>
LayerGrads<T> layer_grads(void* unit, const std::array<long, 12>& o) {
  T* g = static_cast<T*>(unit);
  return {at(g, o[0]), at(g, o[1]), at(g, o[2]), at(g, o[3]),  at(g, o[4]),  at(g, o[5]),
          at(g, o[6]), at(g, o[7]), at(g, o[8]), at(g, o[9]), at(g, o[10]), at(g, o[11])};
}

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
}  // namespace

Transformer::Transformer(const ModelConfig& model, kernels::Device device, DataParallel* dp)
    : config_(model), device_(device), table_(param_table(model)) {
  const std::vector<int64_t> units = param_units(model);
  size_t offset = 0;
  int unit = 0;
  for (const ParamSpec& p : table_) {
    while (unit + 1 < (int)units.size() - 1 && (int64_t)offset >= units[unit + 1]) ++unit;
    index_[p.name] = views_.size();
    views_.push_back({&p, offset, (size_t)p.numel(), unit, offset - (size_t)units[unit]});
    offset += p.numel();
  }
  num_params_ = offset;
  if (dp) {
    dp_ = dp;
  } else {
    own_dp_.reset(new DataParallel(units, nullptr, DataParallelOptions{}, device));
    dp_ = own_dp_.get();
  }
  for (int l = 0; l < model.num_layers; ++l) {
    std::array<long, 12> o;
    for (int i = 0; i < 12; ++i) {
      auto it = index_.find("layers." + std::to_string(l) + "." + kLayerTensors[i]);
      o[i] = it == index_.end() ? -1 : (long)views_[it->second].unit_offset;
    }
    layer_offsets_.push_back(o);
  }
  if (dp_->bf16()) {
    bf16_.reset(new State<kernels::bf16>);
    bf16_->acts.resize(model.num_layers);
  } else {
    fp32_.reset(new State<float>);
    fp32_->acts.resize(model.num_layers);
  }
}

Transformer::~Transformer() = default;

const TensorView& Transformer::view(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::runtime_error("no parameter named " + name);
  return views_[it->second];
}

void Transformer::init_parameters(uint64_t seed) {
  // Megatron's init: N(0, 0.02) for weights, N(0, 0.02/sqrt(2L)) for the two output
  // projections of each layer (scaled init), zero biases, unit norm weights. Box-Muller on
  // the counter RNG, keyed on (seed, tensor index, element), so the values do not depend on
  // the device or on how parameters are sharded.
  std::vector<float> host(num_params_);
  const float sigma = 0.02f, scaled = sigma / std::sqrt(2.0f * config_.num_layers);
  for (size_t t = 0; t < views_.size(); ++t) {
    const TensorView& v = views_[t];
    const std::string& name = v.spec->name;
    const bool norm = name.find("norm") != std::string::npos;
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool output_proj = name.find("attn.proj.weight") != std::string::npos ||
                             name.find("mlp.fc2.weight") != std::string::npos;
    for (size_t i = 0; i < v.numel; ++i) {
      float value;
      if (bias) value = 0.0f;
      else if (norm) value = 1.0f;
      else {
        float u1 = kernels::counter_uniform(seed, 2 * t, i) + 1e-7f;
        float u2 = kernels::counter_uniform(seed, 2 * t + 1, i);
        float z = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
        value = z * (output_proj ? scaled : sigma);
      }
      host[v.offset + i] = value;
    }
  }
  dp_->load_params(host);
}

std::vector<float> Transformer::get_param(const std::string& name) {
  const TensorView& v = view(name);
  const std::vector<float> all = dp_->gather_params();
  return std::vector<float>(all.begin() + v.offset, all.begin() + v.offset + v.numel);
}

void Transformer::set_param(const std::string& name, const std::vector<float>& values) {
  const TensorView& v = view(name);
  if (values.size() != v.numel)
    throw std::runtime_error(name + ": expected " + std::to_string(v.numel) + " values, got " +
                             std::to_string(values.size()));
  std::vector<float> all = dp_->gather_params();
  std::copy(values.begin(), values.end(), all.begin() + v.offset);
  dp_->load_params(all);
}

std::vector<float> Transformer::get_grad(const std::string& name) {
  const TensorView& v = view(name);
  const std::vector<float> all = dp_->gather_grads();
  return std::vector<float>(all.begin() + v.offset, all.begin() + v.offset + v.numel);
}

float Transformer::forward(const int* tokens, const int* targets, int B, float grad_scale,
                           uint64_t dropout_seed) {
  return bf16_ ? forward_as(*bf16_, tokens, targets, B, grad_scale, dropout_seed)
               : forward_as(*fp32_, tokens, targets, B, grad_scale, dropout_seed);
}

void Transformer::backward() {
  if (bf16_) backward_as(*bf16_);
  else backward_as(*fp32_);
}

template <typename T>
float Transformer::forward_as(State<T>& s, const int* tokens, const int* targets, int B,
                              float grad_scale, uint64_t dropout_seed) {
  if (s.pending) throw std::logic_error("Transformer::forward called twice without backward");
  DataParallel& dp = *dp_;
  const ModelConfig& m = config_;
  const kernels::Device dev = device_;
  const int S = m.seq_length, h = m.hidden_size, V = m.vocab_size, N = B * S, L = m.num_layers;
  const Category act = Category::ACTIVATIONS;
  s.B = B;
  s.dropout_seed = dropout_seed;
  s.ws.ensure(m, dev, B);
  s.tokens.allocate(dev, N, Category::WORKSPACE);
  s.targets.allocate(dev, N, Category::WORKSPACE);
  kernels::memcpy_from_host(dev, s.tokens.data(), tokens, N * sizeof(int));
  kernels::memcpy_from_host(dev, s.targets.data(), targets, N * sizeof(int));
  int valid = 0;
  for (int i = 0; i < N; ++i) valid += targets[i] >= 0;

  // ---- embedding (unit 0)
  const T* E = static_cast<const T*>(dp.acquire_params(0, true));
  const T* wpe = m.is_gpt() ? E + view("embedding.position").unit_offset : nullptr;
  s.x0.allocate(dev, (size_t)N * h, act);
  kernels::embedding_forward(dev, s.x0.data(), s.tokens.data(),
                             E + view("embedding.word").unit_offset, wpe, N, S, h);
  dp.release_params(0);

  // ---- layers (units 1..L)
  const T* x = s.x0.data();
  for (int l = 0; l < L; ++l) {
    LayerContext c{m, dev, l, B, dropout_seed};
    const void* P = dp.acquire_params(l + 1, true);
    layer_forward(c, layer_weights<T>(P, layer_offsets_[l]), x, s.acts[l], s.ws);
    dp.release_params(l + 1);
    x = s.acts[l].out.data();
  }

  // ---- head (unit L+1; gpt's output weight is the tied embedding of unit 0)
  const T* H = static_cast<const T*>(dp.acquire_params(L + 1, true));
  if (m.is_gpt()) s.final_mean.allocate(dev, N, act);
  s.final_rstd.allocate(dev, N, act);
  T* xf;  // scratch when the loss is fused, saved for backward otherwise
  if (m.fused_cross_entropy) {
    xf = s.ws.xf.data();
  } else {
    s.xf_saved.allocate(dev, (size_t)N * h, act);
    xf = s.xf_saved.data();
  }
  const T* fw = H + view("final_norm.weight").unit_offset;
  if (m.is_gpt())
    kernels::layernorm_forward(dev, xf, s.final_mean.data(), s.final_rstd.data(), x, fw,
                               H + view("final_norm.bias").unit_offset, N, h, m.norm_epsilon);
  else
    kernels::rmsnorm_forward(dev, xf, s.final_rstd.data(), x, fw, N, h, m.norm_epsilon);

  // the gradient of the mean loss over the valid tokens, scaled by grad_scale
  const float ce_scale = valid > 0 ? grad_scale / valid : 0.0f;
  if (keep_logits_) last_logits_.assign((size_t)N * V, 0.0f);
  const TensorView& head = view(m.tied_embeddings() ? "embedding.word" : "output.weight");
  const T* W = (m.tied_embeddings() ? static_cast<const T*>(dp.acquire_params(0, true)) : H) +
               head.unit_offset;
  if (m.fused_cross_entropy) {
    T* dW = static_cast<T*>(dp.grads(head.unit)) + head.unit_offset;
    s.dxf.allocate(dev, (size_t)N * h, act);
    const int chunk = std::min(N, std::max(1, m.cross_entropy_chunk));
    Buffer<float> logits(dev, (size_t)chunk * V, Category::LOGITS);
    Buffer<T> dlogits_scratch;  // bf16 only: the loss gradient rounded for the GEMMs
    for (int t0 = 0; t0 < N; t0 += chunk) {
      const int n = std::min(chunk, N - t0);
      kernels::gemm(dev, false, true, n, V, h, 1.0f, xf + (size_t)t0 * h, h, W, h, 0.0f,
                    logits.data(), V);
      if (keep_logits_)
        kernels::memcpy_to_host(dev, last_logits_.data() + (size_t)t0 * V, logits.data(),
                                (size_t)n * V * sizeof(float));
      kernels::cross_entropy_forward_backward(dev, s.ws.losses.data() + t0, logits.data(),
                                              s.targets.data() + t0, n, V, ce_scale);
      // d(xf) = dlogits W;  dW += dlogits^T xf
      const T* dlogits =
          loss_gradient_as<T>(dev, logits.data(), (size_t)chunk * V, dlogits_scratch);
      kernels::gemm(dev, false, false, n, h, V, 1.0f, dlogits, V, W, h, 0.0f,
                    s.dxf.data() + (size_t)t0 * h, h);
      kernels::gemm(dev, true, false, V, h, n, 1.0f, dlogits, V, xf + (size_t)t0 * h, h, 1.0f,
                    dW, h);
    }
  } else {
    s.logits.allocate(dev, (size_t)N * V, Category::LOGITS);
    kernels::gemm(dev, false, true, N, V, h, 1.0f, xf, h, W, h, 0.0f, s.logits.data(), V);
    if (keep_logits_)
      kernels::memcpy_to_host(dev, last_logits_.data(), s.logits.data(),
                              (size_t)N * V * sizeof(float));
    kernels::cross_entropy_forward_backward(dev, s.ws.losses.data(), s.logits.data(),
                                            s.targets.data(), N, V, ce_scale);
  }
  if (m.tied_embeddings()) dp.release_params(0);
  dp.release_params(L + 1);

  std::vector<float> losses(N);
  kernels::memcpy_to_host(dev, losses.data(), s.ws.losses.data(), N * sizeof(float));
  double sum = 0.0;
  for (int i = 0; i < N; ++i) sum += losses[i];
  s.pending = true;
  return valid > 0 ? (float)(sum / valid) : 0.0f;
}

template <typename T>
void Transformer::backward_as(State<T>& s) {
  if (!s.pending) throw std::logic_error("Transformer::backward without a forward");
  DataParallel& dp = *dp_;
  const ModelConfig& m = config_;
  const kernels::Device dev = device_;
  const int B = s.B, S = m.seq_length, h = m.hidden_size, V = m.vocab_size, N = B * S;
  const int L = m.num_layers;

  // ---- head (unit L+1)
  const T* H = static_cast<const T*>(dp.acquire_params(L + 1, false));
  const T* dxf = s.dxf.data();
  if (!m.fused_cross_entropy) {
    // d(xf) = dlogits W, dW += dlogits^T xf
    const TensorView& head = view(m.tied_embeddings() ? "embedding.word" : "output.weight");
    const T* W = (m.tied_embeddings() ? static_cast<const T*>(dp.acquire_params(0, false)) : H) +
                 head.unit_offset;
    T* dW = static_cast<T*>(dp.grads(head.unit)) + head.unit_offset;
    s.dxf.allocate(dev, (size_t)N * h, Category::WORKSPACE);
    Buffer<T> dlogits_scratch;
    const T* dlogits = loss_gradient_as<T>(dev, s.logits.data(), (size_t)N * V, dlogits_scratch);
    kernels::gemm(dev, false, false, N, h, V, 1.0f, dlogits, V, W, h, 0.0f, s.dxf.data(), h);
    kernels::gemm(dev, true, false, V, h, N, 1.0f, dlogits, V, s.xf_saved.data(), h, 1.0f, dW, h);
    if (m.tied_embeddings()) dp.release_params(0);
    s.logits.reset();
    s.xf_saved.reset();
    dxf = s.dxf.data();
  }
  // the final norm's backward writes d(last layer output) into dres
  T* G = static_cast<T*>(dp.grads(L + 1));
  T* dres = s.ws.dres.data();
  kernels::memset_zero(dev, dres, (size_t)N * h * sizeof(T));
  const T* x_last = L > 0 ? s.acts.back().out.data() : s.x0.data();
  const size_t fw = view("final_norm.weight").unit_offset;
  if (m.is_gpt()) {
    const size_t fb = view("final_norm.bias").unit_offset;
    kernels::layernorm_backward(dev, dres, G + fw, G + fb, dxf, x_last, H + fw,
                                s.final_mean.data(), s.final_rstd.data(), N, h);
  } else {
    kernels::rmsnorm_backward(dev, dres, G + fw, dxf, x_last, H + fw, s.final_rstd.data(), N, h);
  }
  dp.release_params(L + 1);
  dp.backward_done(L + 1);
  s.dxf.reset();
  s.final_mean.reset();
  s.final_rstd.reset();

  // ---- layers, last to first
  for (int l = L - 1; l >= 0; --l) {
    LayerContext c{m, dev, l, B, s.dropout_seed};
    const T* x = l > 0 ? s.acts[l - 1].out.data() : s.x0.data();
    const void* P = dp.acquire_params(l + 1, false);
    LayerGrads<T> g = layer_grads<T>(dp.grads(l + 1), layer_offsets_[l]);
    layer_backward(c, layer_weights<T>(P, layer_offsets_[l]), g, x, s.acts[l], s.ws);
    dp.release_params(l + 1);
    dp.backward_done(l + 1);
  }

  // ---- embedding (unit 0): needs only its gradients
  T* G0 = static_cast<T*>(dp.grads(0));
  T* dwpe = m.is_gpt() ? G0 + view("embedding.position").unit_offset : nullptr;
  kernels::embedding_backward(dev, G0 + view("embedding.word").unit_offset, dwpe, dres,
                              s.tokens.data(), N, S, h);
  dp.backward_done(0);
  s.x0.reset();
  s.tokens.reset();
  s.targets.reset();
  s.pending = false;
}

}  // namespace paralab
