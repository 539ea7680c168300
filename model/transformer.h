// model/transformer.h: the decoder-only transformer (gpt or llama), one rank, with explicit
// forward and backward per layer (no autograd). notes/model.md is the exact math.
//
// Parameters and gradients belong to parallel/data_parallel (DDP or a ZeRO stage), which
// hands out each unit's (embedding, layer, head) parameters before use and takes its
// gradients back after backward; activations are allocated per microbatch in forward and
// released by backward, each tagged in the ledger. With tensor parallelism
// (parallel/tensor_parallel.h) every rank holds the local parameter table
// (model/param_table.h: heads, groups, ffn and vocabulary split over tp). With pipeline
// parallelism it holds one StageSlice of the model (v chunks of layers, the embedding on
// the first stage, the head on the last) and runs one microbatch on one chunk at a time:
// forward(i, c) / backward(i, c) keep each (microbatch, chunk)'s activations apart, so as
// many microbatches as the schedule wants can be in flight (model/pipeline_stage.h drives
// it from the executor).
#pragma once
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "measure/ledger.h"
#include "model/config.h"
#include "model/moe.h"
#include "model/param_table.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/tensor_parallel.h"

namespace paralab {

class UnitParams;  // model/transformer_state.h: a unit's parameters and gradients, dense and expert

// A view of one named tensor inside the flat parameter (or gradient) buffer.
struct TensorView {
  const ParamSpec* spec = nullptr;
  size_t offset = 0;       // elements from the start of the flat vector
  size_t numel = 0;
  int unit = 0;            // 0 embedding, l+1 layer l, L+1 head (parallel/buckets.h)
  size_t unit_offset = 0;  // elements from the start of its unit
  bool expert = false;     // in the expert flat vector (ep > 1; its units: the MoE layers)
};

// Per layer, where each of its tensors starts in its unit (-1: absent), in the order of
// model/transformer.cpp's kLayerTensors.
constexpr int kLayerTensorCount = 22;
using LayerTensorOffsets = std::array<long, kLayerTensorCount>;

class Transformer {
 public:
  // dp == nullptr: the model owns a single-rank fp32 DDP (tests, tools). The storage type
  // of parameters, gradients and activations is data parallelism's: fp32, or bf16 with
  // --bf16 (DataParallelOptions::bf16). dp must be built on param_units(model, tp size).
  // slice: the stage this rank holds (empty chunk list: the whole model). pp and embedding
  // (the pipeline and tied-embedding groups) are needed with more than one stage.
  // ep: expert parallelism (parallel/expert_parallel.h); with ep > 1 the stage's expert
  // tensors live in expert_dp, built on stage_expert_units (the same units as dp, with
  // stage_unit_chunk) over the expert-data-parallel group (nullptr: a single-rank one; none
  // when the stage has no MoE layer).
  Transformer(const ModelConfig& model, kernels::Device device, DataParallel* dp = nullptr,
              const TensorParallel& tp = TensorParallel(), const StageSlice& slice = {},
              Communicator* pp = nullptr, Communicator* embedding = nullptr,
              const ExpertParallel& ep = ExpertParallel(), DataParallel* expert_dp = nullptr,
              const ContextParallel& cp = ContextParallel());
  ~Transformer();

  // Megatron's initialisation (notes/model.md) from a counter-based RNG keyed on seed.
  void init_parameters(uint64_t seed);

  // One microbatch's data. tokens and targets: host arrays of B*S int32 (target < 0
  // ignored); the first model stage reads tokens, the last targets. grad_scale multiplies
  // the loss's gradient (1/(k*dp), notes/model.md); dropout_seed keys every dropout mask.
  struct Microbatch {
    const int* tokens = nullptr;
    const int* targets = nullptr;
    int B = 0;
    float grad_scale = 1.0f;
    uint64_t dropout_seed = 0;
    // Evaluation: no dropout, the head computes the loss only (no logits gradient, no
    // weight gradient: the fused loss's backward half is skipped), a layer's activations
    // are dropped once the next layer has read them, and nothing waits for a backward:
    // discard(i, c) ends the pair once its output has been sent.
    bool forward_only = false;
  };
  // Forward of microbatch i on chunk c (after data_parallel().begin_microbatch): the
  // embedding on model stage 0 (else the input arrived in activation_input(i, c)), the
  // chunk's layers, and on the last model stage the head and the loss, whose mean over the
  // microbatch's tokens it returns (0 elsewhere). Keeps what backward needs.
  float forward(int microbatch, int chunk, const Microbatch& data);
  // Backward of microbatch i on chunk c: accumulates (+=) into data parallelism's gradients,
  // releases the pair's activations. The output gradient (not on the last model stage) must
  // be in output_gradient_input(i, c); the input gradient is left in input_gradient() (not
  // on model stage 0).
  // split (zb-h1): B only, the input gradient; the layers' weight GEMMs wait for
  // backward_weight(i, c), W, which also declares every unit's gradients done.
  void backward(int microbatch, int chunk, bool split = false);
  void backward_weight(int microbatch, int chunk);
  // Releases what a forward_only forward of (i, c) kept (its output, for the next stage).
  void discard(int microbatch, int chunk);
  // The whole model on one rank: forward(0, 0, ...) and backward(0, 0).
  float forward(const int* tokens, const int* targets, int B, float grad_scale,
                uint64_t dropout_seed) {
    return forward(0, 0, Microbatch{tokens, targets, B, grad_scale, dropout_seed, false});
  }
  void backward() { backward(0, 0); }

  // ---- pipeline buffers (storage type elements, N_l h each)
  void* activation_input(int microbatch, int chunk, int B);  // allocates the pair's input
  const void* activation_output(int microbatch, int chunk) const;
  // The receive buffers of the output gradients: `buffers` of them (the schedule's
  // gradient_buffers for this rank), allocated at the first forward; each holds one pair's
  // gradient from its arrival to its backward.
  void set_gradient_buffers(int buffers) { gradient_buffers_ = buffers; }
  void* output_gradient_input(int microbatch, int chunk, int B);  // a free buffer, now (i, c)'s
  const void* input_gradient() const;
  // A message between two of this rank's chunks (the V's turn): the activation or gradient
  // copied to where the receiving chunk reads it (one device copy of N_l h).
  void hand_over(bool activation, int microbatch, int from_chunk, int to_chunk);
  const StageSlice& slice() const { return slice_; }
  bool first_model_stage(int chunk) const { return slice_.embedding && chunk == 0; }
  bool last_model_stage(int chunk) const {
    return slice_.head && chunk == (int)slice_.chunk_layers.size() - 1;
  }
  // gpt with pipelining: the first and last stage sum their word-embedding gradients over
  // the embedding group (after the schedule, before data parallelism reduces them; their
  // buckets are model/param_table.h's stage_deferred_units).
  void sync_tied_embedding();

  // ---- mixture of experts (model/moe.h): one entry per global layer (empty for dense layers
  // and layers on other stages). Statistics sum the training forwards since the reset; their
  // per-expert counts are summed on the device, and reading the layers copies them first when
  // a forward has added to them since (collect_moe_stats).
  const std::vector<MoeLayerState>& moe_layers() const {
    collect_moe_stats();
    return moe_;
  }
  void reset_moe_stats();
  // The step's per-expert counts of every MoE layer here to the host, into each layer's stats
  // (tokens and kept pairs per expert, dropped pairs, padding rows): one copy of 2 E int32 per
  // layer, once a step (the trainer calls it after the microbatches); nothing when no forward
  // recorded since the last call.
  void collect_moe_stats() const;
  // Aux-loss-free balancing, once per step after the last microbatch, before the reset:
  // each layer's expert bias moves by the sign of its load error, the counts summed over
  // the data-parallel group (nullptr or size 1: this rank's), all on the device
  // (kernels::moe_expert_bias_update); apply false (a skipped step): the counts' all-reduce
  // runs, as planned, the bias stays. Collects the statistics first (the sum overwrites the
  // device's counts of this rank).
  void update_expert_bias(Communicator* data_parallel_group, bool apply = true);
  std::vector<float> expert_bias(int layer) const;  // host copy, (E) or empty
  void set_expert_bias(int layer, const std::vector<float>& bias);  // a checkpoint's, (E)

  const ModelConfig& config() const { return config_; }
  // This rank's slice: a/t heads, g/t groups, f/t ffn, Vp/t vocabulary rows (kv_channels d).
  const ModelConfig& local_config() const { return local_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  Communicator* pipeline_group() const { return pp_ && pp_->size() > 1 ? pp_ : nullptr; }
  kernels::Device device() const { return device_; }
  const std::vector<ParamSpec>& table() const { return table_; }
  const std::vector<TensorView>& views() const { return views_; }
  const TensorView& view(const std::string& name) const;

  // ---- FP8 (--fp8-format; parallel/fp8_scaling.h, model/transformer_fp8.cpp): the scaling
  // of this stage's dense linear layers, 4 per layer (qkv, proj, fc1, fc2) numbered in the
  // stage's layer order over its chunks; nullptr without FP8. Its `pieces` reduction is wired
  // here (the tp group, then the cp group); set_fp8_amax_group wires delayed scaling's per-step
  // reduction over tp x dp x cp (Megatron's amax reduction group, parallel_state
  // get_amax_reduction_group(with_context_parallel=True)): the tp group, then
  // data_parallel_group (dp, or dp x cp with context parallelism); nullptr: tp only.
  // The experts' GEMMs have a scaling of their own (fp8_expert_scaling: 2 linears, fc1 and
  // fc2, per local expert of each MoE layer here, numbered layer by layer then expert by
  // expert), reduced per expert over the ranks that hold that expert: its etp slices, then
  // expert_group (edp: its copies), passed here too.
  Fp8Scaling* fp8_scaling() { return fp8_.get(); }
  Fp8Scaling* fp8_expert_scaling() { return fp8_experts_.get(); }
  void set_fp8_amax_group(Communicator* data_parallel_group, Communicator* expert_group);
  // After the step's last backward: delayed scaling's reduction and update (no-op otherwise).
  void fp8_step_end();
  // --log-fp8-scaling (parallel/fp8_log.h): the step's casts per linear kind and role, folded
  // over this stage's layers (`on` false without the flag); reset_fp8_log starts a step.
  Fp8StepLog fp8_step_log() const;
  void reset_fp8_log();
  // Delayed scaling's state of global layer `layer` (its 4 linears; Fp8Scaling::linears_state's
  // layout), host floats, for the checkpoint, which stores it per layer so that another
  // pipeline layout finds each layer's; empty when this stage has no such state or not that
  // layer. set_fp8_layer_state puts one back.
  std::vector<float> fp8_layer_state(int layer) const;
  void set_fp8_layer_state(int layer, const std::vector<float>& values);
  // The same for global expert `expert` of MoE layer `layer` (its fc1 and fc2), when this rank
  // holds that expert; else empty.
  std::vector<float> fp8_expert_state(int layer, int expert) const;
  void set_fp8_expert_state(int layer, int expert, const std::vector<float>& values);

  DataParallel& data_parallel() { return *dp_; }
  // The expert parameters' data parallelism (ep > 1 and an MoE layer here), else nullptr.
  DataParallel* expert_data_parallel() { return expert_dp_; }
  const ExpertParallel& expert_parallel() const { return ep_; }
  const ContextParallel& context_parallel() const { return cp_; }
  size_t num_params() const { return num_params_; }  // the dense flat vector's
  // Both data parallelisms: a microbatch starts (DataParallel::begin_microbatch); a step.
  void begin_microbatch(bool last);
  void zero_grads();

  // Every parameter (grads = false) or the last step's summed gradient (grads = true) at
  // full shape, in param_table order: gathered over dp, tp and pp (collective over all).
  std::vector<float> gather_full(bool grads);

  // Host copies of this rank's (local) tensor by name (tests, golden files); collective
  // over dp. The vocabulary's padding rows are left out: on one tp rank these are the full
  // tensors, (V, h) as the golden files and Hugging Face hold them.
  std::vector<float> get_param(const std::string& name);
  void set_param(const std::string& name, const std::vector<float>& values);
  std::vector<float> get_grad(const std::string& name);
  // Logits (B*S, V) of the last forward, this rank's real vocabulary columns (the padding
  // left out); only kept when keep_logits(true) was set (tests).
  void keep_logits(bool keep) { keep_logits_ = keep; }
  std::vector<float> last_logits() const;

 private:
  size_t unpadded_numel(const TensorView& v) const;  // without the vocabulary's padding
  // The (microbatch, chunk) pairs in flight and the scratch, per storage type (float,
  // kernels::bf16 or kernels::fp16); model/transformer_state.h.
  template <typename T>
  struct InFlight;
  template <typename T>
  struct State;
  template <typename T>
  float forward_as(State<T>& s, int microbatch, int chunk, const Microbatch& data);
  template <typename T>
  void backward_as(State<T>& s, int microbatch, int chunk, bool split);
  template <typename T>
  void backward_weight_as(State<T>& s, int microbatch, int chunk);
  // forward_as's and backward_as's steps (model/transformer.cpp)
  LayerContext layer_context(const ModelConfig& m, int layer, int B, uint64_t dropout_seed,
                             float grad_scale);
  template <typename T>
  int forward_inputs(InFlight<T>& f, const Microbatch& data, bool first, bool last,
                     Buffer<int>& tokens, Buffer<int>& targets);
  template <typename T>
  void embedding_forward(State<T>& s, InFlight<T>& f, const int* tokens);
  template <typename T>
  const T* layers_forward(State<T>& s, InFlight<T>& f, int microbatch, int chunk,
                          const Microbatch& data);
  template <typename T>
  void layers_backward(State<T>& s, InFlight<T>& f, int chunk, bool split);
  template <typename T>
  void recompute_forward(State<T>& s, InFlight<T>& f, UnitParams& dp, int first_layer, int i0,
                         int i);
  template <typename T>
  void embedding_backward(State<T>& s, InFlight<T>& f, bool split);
  // model/head.cpp: final norm, output layer and vocabulary-parallel loss (the head unit).
  template <typename T>
  float head_forward(State<T>& s, InFlight<T>& f, const T* x, int valid_targets);
  template <typename T>
  void head_backward(State<T>& s, InFlight<T>& f);
  // head_forward's steps: the final norm, then the fused (chunked) or the unfused loss.
  template <typename T>
  const T* head_final_norm(State<T>& s, InFlight<T>& f, const T* H, const T* x);
  template <typename T>
  void head_fused_loss(State<T>& s, InFlight<T>& f, const T* xf_full, const T* W, T* dW,
                       float ce_scale, int cols, bool keep);
  template <typename T>
  void head_unfused_loss(State<T>& s, InFlight<T>& f, const T* xf_full, const T* W,
                         float ce_scale, int cols, bool keep);
  template <typename T>
  InFlight<T>& in_flight(State<T>& s, int microbatch, int chunk, bool create);

  ModelConfig config_;
  ModelConfig local_;
  kernels::Device device_;
  TensorParallel tp_;
  StageSlice slice_;
  Communicator* pp_ = nullptr;
  Communicator* embedding_ = nullptr;
  int embedding_unit_ = -1, head_unit_ = -1;  // local units (-1: not on this stage)
  int gradient_buffers_ = 1;                  // output-gradient receive buffers (pipelines)
  std::vector<int> layer_unit_;               // per global layer (-1: not on this stage)
  std::vector<ParamSpec> full_table_;  // full shapes: initialisation and gather_full
  std::vector<ParamSpec> table_;       // this rank's shapes: the flat vector
  std::vector<ParamSpec> expert_table_;  // ep > 1: this rank's experts, the expert vector
  std::vector<TensorView> views_;
  std::map<std::string, size_t> index_;
  std::unique_ptr<DataParallel> own_dp_;
  DataParallel* dp_;
  ExpertParallel ep_;
  ContextParallel cp_;
  kernels::TokenPositions positions_;  // this rank's tokens in the sequence (cp_positions)
  std::unique_ptr<DataParallel> own_expert_dp_;
  DataParallel* expert_dp_ = nullptr;
  size_t num_params_ = 0;
  bool keep_logits_ = false;
  std::vector<float> last_logits_;          // (B*S, V local) as the head made them
  int last_logits_columns_ = 0, last_logits_valid_ = 0;
  // Per global layer held here, the unit-relative offset of each of its tensors (-1:
  // absent, e.g. llama biases).
  std::vector<LayerTensorOffsets> layer_offsets_;
  // per global layer; mutable: collect_moe_stats, which reading them calls, fills the stats
  mutable std::vector<MoeLayerState> moe_;
  // (2, MoE layers here, E) int32, category comm_buffers: each layer's kept pairs per expert
  // (the expert bias's counts, all-reduced in place over dp), then its routed pairs; the
  // MoeLayerStates' kept_counts and routed_counts point into it
  Buffer<int> routing_counts_;
  // Per unit: elements at its start replicated over tp (their gradients are all-reduced
  // over tp under sequence parallelism: param_table puts them first).
  std::vector<int64_t> replicated_;
  // The one State this stage keeps, its storage type's; with_state(f) calls f on it
  // (model/transformer_state.h).
  std::unique_ptr<State<float>> fp32_;
  std::unique_ptr<State<kernels::bf16>> bf16_;
  std::unique_ptr<State<kernels::fp16>> fp16_;
  template <typename F>
  decltype(auto) with_state(F&& f) const;
  // FP8: the stage's scaling (see fp8_scaling()), and a layer's context pointed at it.
  std::unique_ptr<Fp8Scaling> fp8_, fp8_experts_;
  std::vector<int> fp8_moe_ordinal_;  // per global layer: its place among the MoE layers here
  void make_fp8();
  void make_fp8_param_gather();  // --fp8-param-gather: the layers' weights to dp_
  void fp8_context(LayerContext& c) const;
  int fp8_ordinal(int layer) const;  // a global layer's place among this stage's layers
};

}  // namespace paralab
