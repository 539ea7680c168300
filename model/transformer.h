// model/transformer.h: the decoder-only transformer (gpt or llama), one rank, with explicit
// forward and backward per layer (no autograd). notes/model.md is the exact math.
//
// Parameters and gradients belong to parallel/data_parallel (DDP or a ZeRO stage), which
// hands out each unit's (embedding, layer, head) parameters before use and takes its
// gradients back after backward; activations are allocated per microbatch in forward and
// released by backward, each tagged in the ledger. With tensor parallelism
// (parallel/tensor_parallel.h) every rank holds the local parameter table
// (model/param_table.h: heads, groups, ffn and vocabulary split over tp).
#pragma once
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "instrument/ledger.h"
#include "model/config.h"
#include "model/param_table.h"
#include "parallel/data_parallel.h"
#include "parallel/tensor_parallel.h"

namespace paralab {

// A view of one named tensor inside the flat parameter (or gradient) buffer.
struct TensorView {
  const ParamSpec* spec = nullptr;
  size_t offset = 0;       // elements from the start of the flat vector
  size_t numel = 0;
  int unit = 0;            // 0 embedding, l+1 layer l, L+1 head (parallel/buckets.h)
  size_t unit_offset = 0;  // elements from the start of its unit
};

class Transformer {
 public:
  // dp == nullptr: the model owns a single-rank fp32 DDP (tests, tools). The storage type
  // of parameters, gradients and activations is data parallelism's: fp32, or bf16 with
  // --bf16 (DataParallelOptions::bf16). dp must be built on param_units(model, tp size).
  Transformer(const ModelConfig& model, kernels::Device device, DataParallel* dp = nullptr,
              const TensorParallel& tp = TensorParallel());
  ~Transformer();

  // Megatron's initialisation (notes/model.md) from a counter-based RNG keyed on seed.
  void init_parameters(uint64_t seed);

  // One microbatch (after data_parallel().begin_microbatch): tokens and targets are host
  // arrays of B*S int32 (target < 0 ignored). Runs the forward pass and the loss, keeps what backward needs, returns the mean loss over
  // the microbatch's tokens. grad_scale multiplies the loss's gradient (1/(k*dp), notes).
  // dropout_seed keys every dropout mask of this microbatch.
  float forward(const int* tokens, const int* targets, int B, float grad_scale,
                uint64_t dropout_seed);
  // Backward of the last forward: accumulates (+=) into data parallelism's gradients,
  // releases the microbatch's activations.
  void backward();

  const ModelConfig& config() const { return config_; }
  // This rank's slice: a/t heads, g/t groups, f/t ffn, Vp/t vocabulary rows (kv_channels d).
  const ModelConfig& local_config() const { return local_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  kernels::Device device() const { return device_; }
  const std::vector<ParamSpec>& table() const { return table_; }
  const std::vector<TensorView>& views() const { return views_; }
  const TensorView& view(const std::string& name) const;

  DataParallel& data_parallel() { return *dp_; }
  size_t num_params() const { return num_params_; }
  void zero_grads() { dp_->zero_grads(); }

  // Every parameter (grads = false) or the last step's summed gradient (grads = true) at
  // full shape, in param_table order: gathered over dp and tp (collective over both).
  std::vector<float> gather_full(bool grads);

  // Host copies of this rank's (local) tensor by name (tests, golden files); collective
  // over dp.
  std::vector<float> get_param(const std::string& name);
  void set_param(const std::string& name, const std::vector<float>& values);
  std::vector<float> get_grad(const std::string& name);
  // Logits (B*S, V) of the last forward; only kept when keep_logits(true) was set (tests).
  void keep_logits(bool keep) { keep_logits_ = keep; }
  std::vector<float> last_logits() const { return last_logits_; }

 private:
  // The microbatch in flight and the scratch, per storage type (float or kernels::bf16).
  template <typename T>
  struct State;
  template <typename T>
  float forward_as(State<T>& s, const int* tokens, const int* targets, int B, float grad_scale,
                   uint64_t dropout_seed);
  template <typename T>
  void backward_as(State<T>& s);
  // model/head.cpp: final norm, output layer and vocabulary-parallel loss (unit L+1).
  template <typename T>
  float head_forward(State<T>& s, const T* x, int B, int valid_targets, float grad_scale);
  template <typename T>
  void head_backward(State<T>& s);

  ModelConfig config_;
  ModelConfig local_;
  kernels::Device device_;
  TensorParallel tp_;
  std::vector<ParamSpec> full_table_;  // full shapes: initialisation and gather_full
  std::vector<ParamSpec> table_;       // this rank's shapes: the flat vector
  std::vector<TensorView> views_;
  std::map<std::string, size_t> index_;
  std::unique_ptr<DataParallel> own_dp_;
  DataParallel* dp_;
  size_t num_params_ = 0;
  bool keep_logits_ = false;
  std::vector<float> last_logits_;
  // Per layer, the unit-relative offset of each of its 12 tensors (-1: absent, e.g. llama
  // biases), in LayerWeights field order.
  std::vector<std::array<long, 12>> layer_offsets_;
  // Per unit: elements at its start replicated over tp (their gradients are all-reduced
  // over tp under sequence parallelism: param_table puts them first).
  std::vector<int64_t> replicated_;
  std::unique_ptr<State<float>> fp32_;
  std::unique_ptr<State<kernels::bf16>> bf16_;
};

}  // namespace paralab
