// model/transformer.cpp: the whole model around model/layer.cpp: its parameters, the
// embedding, the layer stack; the head and the loss are model/head.cpp (notes/model.md), the
// pipeline's buffers and hand-overs model/transformer_pipeline.cpp.
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
// A layer's tensors (model/param_table.h), in the order of LayerTensorOffsets.
const char* const kLayerTensors[kLayerTensorCount] = {
    "norm1.weight",          "norm1.bias",           "attn.qkv.weight",
    "attn.qkv.bias",         "attn.proj.weight",     "attn.proj.bias",
    "norm2.weight",          "norm2.bias",           "mlp.fc1.weight",
    "mlp.fc1.bias",          "mlp.fc2.weight",       "mlp.fc2.bias",
    "attn.q_norm.weight",    "attn.q_norm.bias",     "attn.k_norm.weight",
    "attn.k_norm.bias",      "mlp.router.weight",    "mlp.experts.fc1.weight",
    "mlp.experts.fc2.weight", "mlp.shared.fc1.weight", "mlp.shared.fc2.weight",
    "mlp.shared.gate.weight"};

template <typename P>
P at(P base, long offset) { return offset < 0 ? nullptr : base + offset; }

// LayerWeights (const T*) or LayerGrads (T*) from a unit's base and the offsets; the expert
// tensors from the expert unit's base `pe` when they live there (ep > 1), else from p.
template <typename View, typename P>
View layer_view(P p, P pe, const LayerTensorOffsets& o) {
  View v;
  v.norm1_w = at(p, o[0]);  v.norm1_b = at(p, o[1]);   v.qkv_w = at(p, o[2]);
  v.qkv_b = at(p, o[3]);    v.proj_w = at(p, o[4]);    v.proj_b = at(p, o[5]);
  v.norm2_w = at(p, o[6]);  v.norm2_b = at(p, o[7]);   v.fc1_w = at(p, o[8]);
  v.fc1_b = at(p, o[9]);    v.fc2_w = at(p, o[10]);    v.fc2_b = at(p, o[11]);
  v.q_norm_w = at(p, o[12]); v.q_norm_b = at(p, o[13]); v.k_norm_w = at(p, o[14]);
  v.k_norm_b = at(p, o[15]);
  P experts = pe ? pe : p;
  v.moe.router = at(p, o[16]);     v.moe.experts_fc1 = at(experts, o[17]);
  v.moe.experts_fc2 = at(experts, o[18]); v.moe.shared_fc1 = at(p, o[19]);
  v.moe.shared_fc2 = at(p, o[20]);  v.moe.shared_gate = at(p, o[21]);
  return v;
}
template <typename T>
LayerWeights<T> layer_weights(const void* unit, const void* experts, const LayerTensorOffsets& o) {
  return layer_view<LayerWeights<T>>(static_cast<const T*>(unit), static_cast<const T*>(experts),
                                     o);
}
template <typename T>
LayerGrads<T> layer_grads(void* unit, void* experts, const LayerTensorOffsets& o) {
  return layer_view<LayerGrads<T>>(static_cast<T*>(unit), static_cast<T*>(experts), o);
}

// The slice of the model one of t tensor-parallel ranks computes: a/t heads, g/t groups,
// f/t ffn, Vp/t vocabulary rows; the head dim and each expert's width stay.
ModelConfig local_model(const ModelConfig& m, int t) {
  ModelConfig l = m;
  l.kv_channels = m.head_dim();
  l.num_attention_heads = m.num_attention_heads / t;
  l.num_query_groups = m.groups() / t;
  l.ffn_hidden_size = m.ffn() / t;
  l.moe.ffn_hidden_size = m.moe_ffn();  // experts are whole under tp (folded: etp 1)
  l.vocab_size = (int)(padded_vocab(m, t) / t);
  return l;
}
}  // namespace

Transformer::Transformer(const ModelConfig& model, kernels::Device device, DataParallel* dp,
                         const TensorParallel& tp, const StageSlice& slice, Communicator* pp,
                         Communicator* embedding, const ExpertParallel& ep,
                         DataParallel* expert_dp, const ContextParallel& cp)
    : config_(model),
      local_(local_model(model, tp.size())),
      device_(device),
      tp_(tp),
      slice_(slice.chunk_layers.empty() ? whole_model(model) : slice),
      pp_(pp),
      embedding_(embedding),
      full_table_(param_table(model)),
      table_(stage_param_table(model, tp.size(), slice_, {ep.size(), ep.apart, ep.etp_size()})),
      expert_table_(stage_expert_table(model, slice_, {ep.size(), ep.apart, ep.etp_size()})),
      ep_(ep),
      cp_(cp),
      positions_(cp_positions(model.seq_length, cp.size(), cp.rank(), cp.layout)) {
  ep_.device = device;  // the dispatch's kernels run where the model's tensors live
  cp_.device = device;
  local_.seq_length = model.seq_length / cp.size();  // this rank's tokens of each sequence
  // each expert's slice of the width over etp (fc1's rows, fc2's columns)
  local_.moe.ffn_hidden_size = model.moe_ffn() / ep.etp_size();
  const std::vector<int64_t> units =
      stage_units(model, tp.size(), slice_, {ep.size(), ep.apart, ep.etp_size()});
  const int U = (int)units.size() - 1;
  embedding_unit_ = slice_.embedding ? 0 : -1;
  head_unit_ = slice_.head ? U - 1 : -1;
  layer_unit_.assign(model.num_layers, -1);
  int next_unit = slice_.embedding ? 1 : 0;
  for (size_t c = 0; c < slice_.chunk_layers.size(); ++c)
    for (int i = 0; i < slice_.chunk_layers[c]; ++i)
      layer_unit_[slice_.chunk_first_layer[c] + i] = next_unit++;
  make_fp8();

  replicated_.assign(U, 0);
  size_t offset = 0;
  int unit = 0;
  bool replicated_prefix = true;
  std::vector<std::pair<int64_t, int64_t>> counted_elsewhere;  // for the gradient norm
  for (const ParamSpec& p : table_) {
    while (unit + 1 < U && (int64_t)offset >= units[unit + 1]) {
      ++unit;
      replicated_prefix = true;
    }
    index_[p.name] = views_.size();
    views_.push_back({&p, offset, (size_t)p.numel(), unit, offset - (size_t)units[unit]});
    const bool replicated = p.split == TpSplit::REPLICATED;
    if (replicated_prefix && replicated) replicated_[unit] += p.numel();
    if (!replicated) replicated_prefix = false;
    // a tp-replicated tensor counts in the gradient norm on tp rank 0 only; the tied copy
    // of the word embedding on the first stage only
    const bool tied_copy = slice_.tied_copy && p.name == "embedding.word";
    if ((replicated && tp.rank() > 0) || tied_copy)
      counted_elsewhere.push_back({(int64_t)offset, (int64_t)(offset + p.numel())});
    offset += p.numel();
  }
  num_params_ = offset;
  if (dp) {
    dp_ = dp;
  } else {
    DataParallelOptions options;
    options.unit_chunk = stage_unit_chunk(slice_);
    own_dp_.reset(new DataParallel(units, nullptr, options, device));
    dp_ = own_dp_.get();
  }
  if (dp_->num_units() != U)
    throw std::logic_error("Transformer: data parallelism holds " +
                           std::to_string(dp_->num_units()) + " units, the stage " +
                           std::to_string(U));
  dp_->exclude_from_norm(counted_elsewhere);
  // sp: a replicated parameter's gradient holds only this rank's tokens; its sum over tp is
  // the first step of its bucket's reduction, so it comes once per sum the bucket hands over
  dp_->before_grad_reduce([this](int u, void* grads) {
    with_storage(dp_->storage(), [&](auto type) {
      tp_.reduce_replicated_grads(static_cast<decltype(type)*>(grads), replicated_[u]);
    });
  });
  // ep > 1: the expert tensors, a flat vector of their own whose units mirror the dense ones
  const std::vector<int64_t> expert_units =
      stage_expert_units(model, slice_, {ep.size(), ep.apart, ep.etp_size()});
  size_t expert_offset = 0;
  for (const ParamSpec& p : expert_table_) {
    const int u = layer_unit_[std::stoi(p.name.substr(7))];
    index_[p.name] = views_.size();
    views_.push_back({&p, expert_offset, (size_t)p.numel(), u,
                      expert_offset - (size_t)expert_units[u], true});
    expert_offset += p.numel();
  }
  if (!expert_units.empty()) {
    if (expert_dp) {
      expert_dp_ = expert_dp;
    } else {
      DataParallelOptions options;
      options.storage = dp_->storage();
      options.unit_chunk = stage_unit_chunk(slice_);
      own_expert_dp_.reset(new DataParallel(expert_units, nullptr, options, device));
      expert_dp_ = own_expert_dp_.get();
    }
    if (expert_dp_->num_units() != U || expert_dp_->storage() != dp_->storage())
      throw std::logic_error("Transformer: expert data parallelism holds " +
                             std::to_string(expert_dp_->num_units()) + " units, the stage " +
                             std::to_string(U));
  }
  layer_offsets_.assign(model.num_layers, {});
  for (int l = 0; l < model.num_layers; ++l) {
    if (layer_unit_[l] < 0) continue;
    LayerTensorOffsets o;
    for (int i = 0; i < kLayerTensorCount; ++i) {
      auto it = index_.find("layers." + std::to_string(l) + "." + kLayerTensors[i]);
      o[i] = it == index_.end() ? -1 : (long)views_[it->second].unit_offset;
    }
    layer_offsets_[l] = o;
  }
  make_fp8_param_gather();
  moe_.resize(model.num_layers);
  for (int l = 0; l < model.num_layers; ++l) {
    if (layer_unit_[l] < 0 || !model.moe.is_moe_layer(l)) continue;
    if (model.moe.expert_bias)  // starts at zero (device_malloc zero-fills)
      moe_[l].expert_bias.allocate(device, model.moe.num_experts, Category::PARAMS);
  }
  // the routers' per-expert counts of the step, summed on the device by the dispatch and
  // all-reduced over dp for the expert bias: held for the run like the other scalars
  std::vector<int> moe_here;
  for (int l = 0; l < model.num_layers; ++l)
    if (layer_unit_[l] >= 0 && model.moe.is_moe_layer(l)) moe_here.push_back(l);
  if (!moe_here.empty()) {
    const size_t E = model.moe.num_experts, n = moe_here.size();
    routing_counts_.allocate(device, 2 * n * E, Category::COMM_BUFFERS);
    for (size_t i = 0; i < n; ++i) {
      moe_[moe_here[i]].kept_counts = routing_counts_.data() + i * E;
      moe_[moe_here[i]].routed_counts = routing_counts_.data() + (n + i) * E;
    }
  }
  if (dp_->storage() == DType::BF16) bf16_.reset(new State<kernels::bf16>);
  else if (dp_->storage() == DType::F16) fp16_.reset(new State<kernels::fp16>);
  else fp32_.reset(new State<float>);
}

Transformer::~Transformer() { dp_->before_grad_reduce(nullptr); }

const TensorView& Transformer::view(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::runtime_error("no parameter named " + name);
  return views_[it->second];
}

void Transformer::init_parameters(uint64_t seed) {
  // Megatron's init: N(0, σ) for weights (σ: --init-method-std, 0.02), N(0, σ/sqrt(2L)) for
  // the two output projections of each layer (scaled init), zero biases, unit norm weights.
  // Element i of full tensor t is drawn from the counter RNG keyed on (seed, 2t, i) and
  // (seed, 2t + 1, i) (kernels/ops/init.h): the values do not depend on the device or the
  // layout, so each rank draws, on its device, exactly the elements it stores: for each of
  // its tensors the rectangles of the full tensor it holds (model/param_table.h shard_blocks:
  // its tp slice, its experts, the vocabulary's padding rows, drawn like the rest as in
  // Megatron's padded tensor), cut to what data parallelism stores here (ZeRO-3: its shard;
  // with --offload-params on the host). A pipeline stage has only its own tensors.
  const float sigma = config_.init_method_std;
  const float scaled = sigma / std::sqrt(2.0f * config_.num_layers);
  for (const bool experts : {false, true}) {
    DataParallel* owner = experts ? expert_dp_ : dp_;
    if (owner == nullptr) continue;
    const size_t element = dtype_size(owner->storage());
    const std::vector<DataParallel::StoredSegment> stored = owner->stored_params();
    for (const TensorView& v : views_) {
      if (v.expert != experts) continue;
      size_t t = 0;
      while (full_table_[t].name != v.spec->name) ++t;
      const ParamSpec& p = full_table_[t];
      const std::string& name = p.name;
      const bool norm = name.find("norm") != std::string::npos;
      const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      // the projections back into the residual stream: attention's, the MLP's, the experts'
      const bool output_proj = name.find("attn.proj.weight") != std::string::npos ||
                               name.find("fc2.weight") != std::string::npos;
      ParamSpec drawn = p;  // VOCAB: rows V.. continue the element index, rows < V stay
      if (p.split == TpSplit::VOCAB) {
        drawn.shape[0] = padded_rows(p, tp_.size());
        drawn.vocab_multiple = 1;
      }
      TensorSlice slice;
      if (experts) {  // this rank's experts (a block of dim 0), its etp share of each
        slice.expert = true;
        slice.ep = ep_.size(), slice.ep_rank = ep_.rank();
        slice.etp = ep_.etp_size(), slice.etp_rank = ep_.etp_rank();
      } else {
        slice.tp = tp_.size(), slice.tp_rank = tp_.rank();
      }
      for (const ShardBlock& b : shard_blocks(drawn, slice)) {
        // the block's elements of the flat vector, [lo, hi), met with each stored segment
        const int64_t lo = (int64_t)v.offset + b.local_offset, hi = lo + b.rows * b.cols;
        for (const DataParallel::StoredSegment& s : stored) {
          const int64_t first = std::max(lo, s.flat_begin);
          const int64_t last = std::min(hi, s.flat_begin + s.count);
          if (first >= last) continue;
          void* dst = static_cast<char*>(s.param) + (first - s.flat_begin) * element;
          const int64_t n = last - first;
          with_storage(owner->storage(), [&](auto type) {
            using T = decltype(type);
            if (bias || norm)
              kernels::fill(s.device, static_cast<T*>(dst), bias ? 0.0f : 1.0f, n);
            else
              kernels::init_normal(s.device, static_cast<T*>(dst), first - lo, n, b.cols,
                                   b.full_offset, b.full_stride, seed, 2 * t,
                                   output_proj ? scaled : sigma);
          });
        }
      }
    }
    owner->params_written();
  }
}

void Transformer::begin_microbatch(bool last) {
  dp_->begin_microbatch(last);
  if (expert_dp_) expert_dp_->begin_microbatch(last);
}

void Transformer::zero_grads() {
  dp_->zero_grads();
  if (expert_dp_) expert_dp_->zero_grads();
}

float Transformer::forward(int microbatch, int chunk, const Microbatch& data) {
  return with_state([&](auto& s) { return forward_as(s, microbatch, chunk, data); });
}

void Transformer::backward(int microbatch, int chunk, bool split) {
  with_state([&](auto& s) { backward_as(s, microbatch, chunk, split); });
}

void Transformer::backward_weight(int microbatch, int chunk) {
  with_state([&](auto& s) { backward_weight_as(s, microbatch, chunk); });
}

void Transformer::discard(int microbatch, int chunk) {
  with_state([&](auto& s) { s.in_flight.erase({microbatch, chunk}); });
}

// ---- forward and backward of one (microbatch, chunk) -------------------------------------
// The context a layer's forward or backward runs in: the microbatch's shape, seed and
// gradient scale, the layer's FP8 state and MoE state.
LayerContext Transformer::layer_context(const ModelConfig& m, int layer, int B,
                                        uint64_t dropout_seed, float grad_scale) {
  LayerContext c{m, tp_, ep_, cp_, positions_, device_, layer, B, dropout_seed};
  fp8_context(c);
  c.moe = &moe_[layer];
  c.grad_scale = grad_scale;
  return c;
}

template <typename T>
float Transformer::forward_as(State<T>& s, int microbatch, int chunk, const Microbatch& data) {
  const ModelConfig& m = local_;
  const int B = data.B;
  const bool first = first_model_stage(chunk), last = last_model_stage(chunk);
  InFlight<T>& f = in_flight(s, microbatch, chunk, first);
  if (f.forward_done) throw std::logic_error("Transformer::forward twice without backward");
  f.B = B;
  f.dropout_seed = data.dropout_seed;
  f.grad_scale = data.grad_scale;
  f.forward_only = data.forward_only;
  s.ws.ensure(m, tp_, cp_, device_, B, m.fp8.param_gather && !dp_->fp8_weights_stored());
  // a stage that gets gradients back (all but one holding only the last model stage) keeps
  // their receive buffer from its first forward on, like the rest of the workspace
  if (receives_gradients(slice_)) output_gradient_input(-1, -1, B);
  Buffer<int> tokens, targets;
  const int valid = forward_inputs(f, data, first, last, tokens, targets);
  if (first) {
    embedding_forward(s, f, tokens.data());
  } else if (f.input.size() != (size_t)tp_.local_tokens(B * m.seq_length) * m.hidden_size) {
    throw std::logic_error("Transformer::forward: chunk " + std::to_string(chunk) +
                           " has no input activation for microbatch " +
                           std::to_string(microbatch));
  }
  const T* x = layers_forward(s, f, microbatch, chunk, data);
  // ---- head and loss: model/head.cpp
  float loss = 0.0f;
  if (last) {
    f.targets = std::move(targets);
    loss = head_forward(s, f, x, valid);
    f.targets.reset();
  }
  f.forward_done = true;
  return loss;
}

// Tokens (model stage 0) and targets (the last) on the device for the forward; returns the
// number of valid targets of the whole sequences. With context parallelism the microbatch
// holds whole sequences and this rank takes its S/cp tokens of each; the loss is the mean over
// every valid token of the sequences, so each rank's share is its tokens' sum over that count
// and the cp ranks' shares add up.
template <typename T>
int Transformer::forward_inputs(InFlight<T>& f, const Microbatch& data, bool first, bool last,
                                Buffer<int>& tokens, Buffer<int>& targets) {
  const kernels::Device dev = device_;
  const int B = data.B, S = local_.seq_length, N = B * S;
  const int cp = cp_.size(), S_full = S * cp;
  std::vector<int> mine(cp > 1 ? N : 0);
  auto local = [&](const int* full) -> const int* {
    if (cp == 1) return full;
    cp_local_tokens(full, mine.data(), B, S_full, cp, cp_.rank(), cp_.layout);
    return mine.data();
  };
  int valid = 0;
  if (first) {
    const int* t = local(data.tokens);
    tokens.allocate(dev, N, Category::WORKSPACE);
    kernels::memcpy_from_host(dev, tokens.data(), t, N * sizeof(int));
    if (!data.forward_only) f.host_tokens.assign(t, t + N);  // its backward
  }
  if (last) {
    for (int i = 0; i < B * S_full; ++i) valid += data.targets[i] >= 0;
    const int* t = local(data.targets);
    targets.allocate(dev, N, Category::WORKSPACE);
    kernels::memcpy_from_host(dev, targets.data(), t, N * sizeof(int));
  }
  return valid;
}

// The embedding: vocabulary-parallel lookup, summed over tp (g, or its reduce-scatter with
// sp), then the learned positions of this rank's tokens, into f.input.
template <typename T>
void Transformer::embedding_forward(State<T>& s, InFlight<T>& f, const int* tokens) {
  UnitParams dp(*dp_, expert_dp_);
  const ModelConfig& m = local_;
  const kernels::Device dev = device_;
  const int S = m.seq_length, h = m.hidden_size, N = f.B * S, Nl = tp_.local_tokens(N);
  const int E_unit = embedding_unit_;
  const T* E = static_cast<const T*>(dp.acquire_params(E_unit, true));
  f.input.allocate(dev, (size_t)Nl * h, Category::ACTIVATIONS);
  T* partial = tp_.sequence_parallel ? s.ws.tmp_h.data() : f.input.data();
  vocab_parallel_embedding_forward(tp_, partial, tokens,
                                   E + view("embedding.word").unit_offset, m.vocab_size, N, h);
  tp_.exit_row_parallel(partial, f.input.data(), N, h);
  if (m.is_gpt())
    kernels::position_embedding_forward(dev, f.input.data(),
                                        E + view("embedding.position").unit_offset, Nl, S,
                                        tp_.first_token(N), h, positions_);
  dp.release_params(E_unit);
}

// The chunk's layers; returns the last one's output. Full recompute: a group keeps only its
// output (the next group's input); a layer inside it is released once the next one has read
// it. Evaluation runs the layers without dropout (eval mode; the workspace keeps m's sizes).
template <typename T>
const T* Transformer::layers_forward(State<T>& s, InFlight<T>& f, int microbatch, int chunk,
                                     const Microbatch& data) {
  UnitParams dp(*dp_, expert_dp_);
  const ModelConfig& m = local_;
  ModelConfig eval_mode = m;
  eval_mode.hidden_dropout = eval_mode.attention_dropout = 0.0f;
  const ModelConfig& lm = data.forward_only ? eval_mode : m;
  const T* x = f.input.data();
  const int first_layer = slice_.chunk_first_layer[chunk], n = (int)f.acts.size();
  const std::vector<int> group = m.recompute.full_groups(n);
  for (int i = 0; i < n; ++i) {
    const int l = first_layer + i, u = layer_unit_[l];
    LayerContext c = layer_context(lm, l, f.B, f.dropout_seed, data.grad_scale);
    c.record_moe_stats = !data.forward_only;
    c.microbatch = microbatch;
    c.forward_only = data.forward_only;
    const void* P = dp.acquire_params(u, true);
    const void* PE = dp.expert_params(u);
    c.fp8_weights = dp.fp8_weights(u);
    c.fp8_expert_weights = dp.fp8_expert_weights(u);
    layer_forward(c, layer_weights<T>(P, PE, layer_offsets_[l]), x, f.acts[i], s.ws);
    dp.release_params(u);
    x = f.acts[i].out.data();
    if (data.forward_only && i > 0) f.acts[i - 1] = LayerActivations<T>();  // read: no backward
    if (group[i] < 0) continue;
    if (i > 0 && group[i - 1] == group[i]) f.acts[i - 1] = LayerActivations<T>();
    if (i + 1 == n || group[i + 1] != group[i]) {
      Buffer<T> out = std::move(f.acts[i].out);
      f.acts[i] = LayerActivations<T>();
      f.acts[i].out = std::move(out);
    }
  }
  return x;
}

template <typename T>
void Transformer::backward_as(State<T>& s, int microbatch, int chunk, bool split) {
  InFlight<T>& f = in_flight(s, microbatch, chunk, false);
  if (!f.forward_done || f.weight_pending)
    throw std::logic_error("Transformer::backward: not after a forward");
  const int Nl = tp_.local_tokens(f.B * local_.seq_length);
  if (last_model_stage(chunk)) {
    head_backward(s, f);  // writes d(last layer output) into ws.dres
  } else {
    auto it = s.grad_of.find({microbatch, chunk});
    if (it == s.grad_of.end() || s.grad_recv[it->second].size() != (size_t)Nl * local_.hidden_size)
      throw std::logic_error("Transformer::backward: no output gradient received");
    std::swap(s.ws.dres, s.grad_recv[it->second]);  // the received one becomes the running one
    s.grad_of.erase(it);
  }
  layers_backward(s, f, chunk, split);
  if (first_model_stage(chunk)) embedding_backward(s, f, split);
  if (!split) {
    s.in_flight.erase({microbatch, chunk});
    return;
  }
  f.input.reset();  // W reads only what each layer kept
  f.weight_pending = true;
}

// The chunk's layers, last to first (split: the input gradients only, W finishes the unit).
// Full recompute: at a group's last layer, its forward again from the group's input, with
// the same dropout masks (counter-based).
template <typename T>
void Transformer::layers_backward(State<T>& s, InFlight<T>& f, int chunk, bool split) {
  UnitParams dp(*dp_, expert_dp_);
  const ModelConfig& m = local_;
  const BackwardPart part = split ? BackwardPart::INPUT_GRAD : BackwardPart::ALL;
  const int first_layer = slice_.chunk_first_layer[chunk], n = (int)f.acts.size();
  const std::vector<int> group = m.recompute.full_groups(n);
  for (int i = n - 1; i >= 0; --i) {
    const int l = first_layer + i, u = layer_unit_[l];
    if (group[i] >= 0 && (i + 1 == n || group[i + 1] != group[i])) {
      int i0 = i;
      while (i0 > 0 && group[i0 - 1] == group[i]) --i0;
      recompute_forward(s, f, dp, first_layer, i0, i);
    }
    LayerContext c = layer_context(m, l, f.B, f.dropout_seed, f.grad_scale);
    const T* x = i > 0 ? f.acts[i - 1].out.data() : f.input.data();
    const void* P = dp.acquire_params(u, false);
    const void* PE = dp.expert_params(u);
    c.fp8_weights = dp.fp8_weights(u);
    c.fp8_expert_weights = dp.fp8_expert_weights(u);
    T* G = static_cast<T*>(dp.grads(u));
    LayerGrads<T> g = layer_grads<T>(G, dp.expert_grads(u), layer_offsets_[l]);
    layer_backward(c, layer_weights<T>(P, PE, layer_offsets_[l]), g, x, f.acts[i], s.ws, part);
    dp.release_params(u);
    if (split) continue;  // W finishes the unit
    dp.backward_done(u);
  }
}

// Full recompute: the forward of the chunk's layers [i0, i] again from the group's input (no
// statistics: a second time).
template <typename T>
void Transformer::recompute_forward(State<T>& s, InFlight<T>& f, UnitParams& dp, int first_layer,
                                    int i0, int i) {
  for (int j = i0; j <= i; ++j) {
    const int lj = first_layer + j, uj = layer_unit_[lj];
    LayerContext cj = layer_context(local_, lj, f.B, f.dropout_seed, f.grad_scale);
    const void* P = dp.acquire_params(uj, false);
    const void* PE = dp.expert_params(uj);
    cj.fp8_weights = dp.fp8_weights(uj);
    cj.fp8_expert_weights = dp.fp8_expert_weights(uj);
    layer_forward(cj, layer_weights<T>(P, PE, layer_offsets_[lj]),
                  j > 0 ? f.acts[j - 1].out.data() : f.input.data(), f.acts[j], s.ws);
    dp.release_params(uj);
  }
}

// The embedding's backward: needs only its gradients; the lookup's backward takes the full
// (N, h) gradient (all-gathered with sp). split: W declares the unit done, after the layers
// above it in its bucket.
template <typename T>
void Transformer::embedding_backward(State<T>& s, InFlight<T>& f, bool split) {
  UnitParams dp(*dp_, expert_dp_);
  const ModelConfig& m = local_;
  const kernels::Device dev = device_;
  const int S = m.seq_length, h = m.hidden_size, N = f.B * S, Nl = tp_.local_tokens(N);
  const int E_unit = embedding_unit_;
  Buffer<int> tokens(dev, N, Category::WORKSPACE);
  kernels::memcpy_from_host(dev, tokens.data(), f.host_tokens.data(), N * sizeof(int));
  T* G0 = static_cast<T*>(dp.grads(E_unit));
  const T* dres = s.ws.dres.data();
  if (m.is_gpt())
    kernels::position_embedding_backward(dev, G0 + view("embedding.position").unit_offset, dres,
                                         Nl, S, tp_.first_token(N), h, positions_);
  const T* d_full = tp_.exit_row_parallel_backward(dres, s.ws.gathered.data(), N, h);
  vocab_parallel_embedding_backward(tp_, G0 + view("embedding.word").unit_offset, d_full,
                                    tokens.data(), m.vocab_size, N, h);
  if (split) return;
  dp.backward_done(E_unit);
}

template <typename T>
void Transformer::backward_weight_as(State<T>& s, int microbatch, int chunk) {
  UnitParams dp(*dp_, expert_dp_);
  const ModelConfig& m = local_;
  InFlight<T>& f = in_flight(s, microbatch, chunk, false);
  if (!f.weight_pending) throw std::logic_error("Transformer::backward_weight before its B");
  const int first_layer = slice_.chunk_first_layer[chunk];
  for (int i = (int)f.acts.size() - 1; i >= 0; --i) {
    const int l = first_layer + i, u = layer_unit_[l];
    LayerContext c = layer_context(m, l, f.B, f.dropout_seed, f.grad_scale);
    T* G = static_cast<T*>(dp.grads(u));
    LayerGrads<T> g = layer_grads<T>(G, dp.expert_grads(u), layer_offsets_[l]);
    layer_weight_backward(c, g, f.acts[i], s.ws);
    dp.backward_done(u);
  }
  if (first_model_stage(chunk)) dp.backward_done(embedding_unit_);
  s.in_flight.erase({microbatch, chunk});
}

}  // namespace paralab
