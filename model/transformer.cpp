// model/transformer.cpp: the whole model around model/layer.cpp: its parameters, the
// embedding, the layer stack; the head and the loss are model/head.cpp (notes/model.md).
//
// Every unit (0 the embedding, l+1 layer l, L+1 the head) asks data parallelism for its
// parameters before use and hands its gradients back after its backward; under sequence
// parallelism the gradients of the unit's tp-replicated parameters (first in the unit) are
// all-reduced over tp before that.
#include "model/transformer.h"
#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include "kernels/math.h"
#include "kernels/ops.h"
#include "model/layer.h"
#include "model/transformer_state.h"

namespace paralab {

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

// The slice of the model one of t tensor-parallel ranks computes: a/t heads, g/t groups,
// f/t ffn, Vp/t vocabulary rows; the head dim stays d.
ModelConfig local_model(const ModelConfig& m, int t) {
  ModelConfig l = m;
  l.kv_channels = m.head_dim();
  l.num_attention_heads = m.num_attention_heads / t;
  l.num_query_groups = m.groups() / t;
  l.ffn_hidden_size = m.ffn() / t;
  l.vocab_size = (int)(padded_vocab(m, t) / t);
  return l;
}
}  // namespace

Transformer::Transformer(const ModelConfig& model, kernels::Device device, DataParallel* dp,
                         const TensorParallel& tp)
    : config_(model),
      local_(local_model(model, tp.size())),
      device_(device),
      tp_(tp),
      full_table_(param_table(model)),
      table_(local_param_table(model, tp.size())) {
  const std::vector<int64_t> units = param_units(model, tp.size());
  replicated_.assign(units.size() - 1, 0);
  size_t offset = 0;
  int unit = 0;
  bool replicated_prefix = true;
  std::vector<std::pair<int64_t, int64_t>> counted_elsewhere;  // for the gradient norm
  for (const ParamSpec& p : table_) {
    while (unit + 1 < (int)units.size() - 1 && (int64_t)offset >= units[unit + 1]) {
      ++unit;
      replicated_prefix = true;
    }
    index_[p.name] = views_.size();
    views_.push_back({&p, offset, (size_t)p.numel(), unit, offset - (size_t)units[unit]});
    const bool replicated = p.split == TpSplit::REPLICATED;
    if (replicated_prefix && replicated) replicated_[unit] += p.numel();
    if (!replicated) replicated_prefix = false;
    // a tp-replicated tensor counts in the gradient norm on tp rank 0 only
    if (replicated && tp.rank() > 0)
      counted_elsewhere.push_back({(int64_t)offset, (int64_t)(offset + p.numel())});
    offset += p.numel();
  }
  num_params_ = offset;
  if (dp) {
    dp_ = dp;
  } else {
    own_dp_.reset(new DataParallel(units, nullptr, DataParallelOptions{}, device));
    dp_ = own_dp_.get();
  }
  dp_->exclude_from_norm(counted_elsewhere);
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
  // the counter RNG, keyed on (seed, tensor index, element) of the FULL tensor, then each
  // tp rank keeps its shard: the values do not depend on the device or on the split.
  std::vector<float> local;
  local.reserve(num_params_);
  const float sigma = 0.02f, scaled = sigma / std::sqrt(2.0f * config_.num_layers);
  for (size_t t = 0; t < full_table_.size(); ++t) {
    const ParamSpec& p = full_table_[t];
    const std::string& name = p.name;
    const bool norm = name.find("norm") != std::string::npos;
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool output_proj = name.find("attn.proj.weight") != std::string::npos ||
                             name.find("mlp.fc2.weight") != std::string::npos;
    std::vector<float> full(p.numel());
    for (size_t i = 0; i < full.size(); ++i) {
      if (bias) full[i] = 0.0f;
      else if (norm) full[i] = 1.0f;
      else {
        float u1 = kernels::counter_uniform(seed, 2 * t, i) + 1e-7f;
        float u2 = kernels::counter_uniform(seed, 2 * t + 1, i);
        float z = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
        full[i] = z * (output_proj ? scaled : sigma);
      }
    }
    const std::vector<float> mine = shard_tensor(p, full, tp_.size(), tp_.rank());
    local.insert(local.end(), mine.begin(), mine.end());
  }
  dp_->load_params(local);
}

std::vector<float> Transformer::gather_full(bool grads) {
  const std::vector<float> local = grads ? dp_->gather_grads() : dp_->gather_params();
  const int t = tp_.size();
  std::vector<std::vector<float>> parts(t, local);
  if (t > 1) {  // every rank's local vector: the same size on every tp rank
    Buffer<float> all(device_, local.size() * t, Category::COMM_BUFFERS);
    kernels::memcpy_from_host(device_, all.data() + local.size() * tp_.rank(), local.data(),
                              local.size() * sizeof(float));
    tp_.tp->all_gather(all.data() + local.size() * tp_.rank(), all.data(), local.size());
    for (int r = 0; r < t; ++r)
      kernels::memcpy_to_host(device_, parts[r].data(), all.data() + local.size() * r,
                              local.size() * sizeof(float));
  }
  std::vector<float> out;
  for (size_t i = 0; i < full_table_.size(); ++i) {
    std::vector<std::vector<float>> pieces(t);
    for (int r = 0; r < t; ++r)
      pieces[r].assign(parts[r].begin() + views_[i].offset,
                       parts[r].begin() + views_[i].offset + views_[i].numel);
    const std::vector<float> full = unshard_tensor(full_table_[i], pieces);
    out.insert(out.end(), full.begin(), full.end());
  }
  return out;
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
  const ModelConfig& m = local_;
  const kernels::Device dev = device_;
  const int S = m.seq_length, h = m.hidden_size, N = B * S, Nl = tp_.local_tokens(N);
  const int L = m.num_layers;
  s.B = B;
  s.dropout_seed = dropout_seed;
  s.ws.ensure(m, tp_, dev, B);
  s.tokens.allocate(dev, N, Category::WORKSPACE);
  s.targets.allocate(dev, N, Category::WORKSPACE);
  kernels::memcpy_from_host(dev, s.tokens.data(), tokens, N * sizeof(int));
  kernels::memcpy_from_host(dev, s.targets.data(), targets, N * sizeof(int));
  int valid = 0;
  for (int i = 0; i < N; ++i) valid += targets[i] >= 0;

  // ---- embedding (unit 0): vocabulary-parallel lookup, summed over tp (g, or its
  //      reduce-scatter with sp), then the learned positions of this rank's tokens
  const T* E = static_cast<const T*>(dp.acquire_params(0, true));
  s.x0.allocate(dev, (size_t)Nl * h, Category::ACTIVATIONS);
  T* partial = tp_.sequence_parallel ? s.ws.tmp_h.data() : s.x0.data();
  vocab_parallel_embedding_forward(tp_, partial, s.tokens.data(),
                                   E + view("embedding.word").unit_offset, m.vocab_size, N, h);
  tp_.exit_row_parallel(partial, s.x0.data(), N, h);
  if (m.is_gpt())
    kernels::position_embedding_forward(dev, s.x0.data(),
                                        E + view("embedding.position").unit_offset, Nl, S,
                                        tp_.first_token(N), h);
  dp.release_params(0);

  // ---- layers (units 1..L)
  const T* x = s.x0.data();
  for (int l = 0; l < L; ++l) {
    LayerContext c{m, tp_, dev, l, B, dropout_seed};
    const void* P = dp.acquire_params(l + 1, true);
    layer_forward(c, layer_weights<T>(P, layer_offsets_[l]), x, s.acts[l], s.ws);
    dp.release_params(l + 1);
    x = s.acts[l].out.data();
  }

  // ---- head (unit L+1) and loss: model/head.cpp
  const float loss = head_forward(s, x, B, valid, grad_scale);
  s.pending = true;
  return loss;
}

template <typename T>
void Transformer::backward_as(State<T>& s) {
  if (!s.pending) throw std::logic_error("Transformer::backward without a forward");
  DataParallel& dp = *dp_;
  const ModelConfig& m = local_;
  const kernels::Device dev = device_;
  const int B = s.B, S = m.seq_length, h = m.hidden_size, N = B * S, Nl = tp_.local_tokens(N);
  const int L = m.num_layers;

  head_backward(s);  // writes d(last layer output) into ws.dres

  // ---- layers, last to first
  for (int l = L - 1; l >= 0; --l) {
    LayerContext c{m, tp_, dev, l, B, s.dropout_seed};
    const T* x = l > 0 ? s.acts[l - 1].out.data() : s.x0.data();
    const void* P = dp.acquire_params(l + 1, false);
    T* G = static_cast<T*>(dp.grads(l + 1));
    LayerGrads<T> g = layer_grads<T>(G, layer_offsets_[l]);
    layer_backward(c, layer_weights<T>(P, layer_offsets_[l]), g, x, s.acts[l], s.ws);
    dp.release_params(l + 1);
    if (dp.hands_over_grads()) tp_.reduce_replicated_grads(G, replicated_[l + 1]);
    dp.backward_done(l + 1);
  }

  // ---- embedding (unit 0): needs only its gradients; the lookup's backward takes the
  //      full (N, h) gradient (all-gathered with sp)
  T* G0 = static_cast<T*>(dp.grads(0));
  const T* dres = s.ws.dres.data();
  if (m.is_gpt())
    kernels::position_embedding_backward(dev, G0 + view("embedding.position").unit_offset,
                                         dres, Nl, S, tp_.first_token(N), h);
  const T* d_full = tp_.exit_row_parallel_backward(dres, s.ws.gathered.data(), N, h);
  vocab_parallel_embedding_backward(tp_, G0 + view("embedding.word").unit_offset, d_full,
                                    s.tokens.data(), m.vocab_size, N, h);
  if (dp.hands_over_grads()) tp_.reduce_replicated_grads(G0, replicated_[0]);
  dp.backward_done(0);
  s.x0.reset();
  s.tokens.reset();
  s.targets.reset();
  s.pending = false;
}

}  // namespace paralab
