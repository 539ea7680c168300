// parallel/fp8_scaling.h: FP8 training's scaling recipes, as plain state and the casts they make
// (the formats and their arithmetic: kernels/fp8.h; the casts and the GEMM: kernels/ops/fp8.h).
//
// Every linear layer quantises three tensors (Transformer Engine's Linear, DeepSeek-V3 3.3):
//   Input       X (N, in), forward format: fprop reads X, wgrad reads X^T
//   Weight      W (out, in), forward format: fprop reads W, dgrad reads W^T
//   OutputGrad  dY (N, out), backward format (E5M2 with --fp8-format hybrid): dgrad reads dY,
//               wgrad reads dY^T
// Hopper's FP8 GEMM takes K-contiguous operands only (kernels/ops/fp8.h), hence the transposed
// copies. What a recipe decides is each copy's scaling factors:
//
//   delayed     (Transformer Engine's DelayedScaling; Megatron's default recipe) one scale per
//               tensor, from a history of amaxes: the cast uses the scale the history gave and
//               records this tensor's amax into row 0 of its history (the cast's fused amax);
//               at the end of the step the recorded amaxes are max-reduced over the amax
//               group, and each history rolls and yields the next scale, (max / amax) / 2^margin
//               from the window's max (--fp8-amax-compute-algo max) or from this step's amax
//               (most_recent): fp8_history_update (kernels/fp8.h, TE's kernel_bulk). State:
//               the forward history (len, 2 linears) and scales, the backward ones (len,
//               linears): saved in the checkpoint.
//   tensorwise  (TE's Float8CurrentScaling) one scale per tensor from its own amax, computed
//               just before the cast (a second read of the tensor); no state.
//   blockwise   (TE's Float8BlockScaling, DeepSeek-V3's fine-grained quantisation) one factor
//               per 1 x 128 tile of X and dY (and of their transposes: tiles along the tokens)
//               and per 128 x 128 block of W, from each block's own amax, fp32; no state.
//
// Where paralab reduces amaxes, and when (docs/megatron.md): the amaxes of one tensor held in
// pieces by several ranks are max-reduced over the ranks that hold the pieces (tensor and
// context parallel: `pieces`), and delayed scaling's recorded amaxes once per step over the
// tensor x data x context group (Megatron's amax reduction group, get_amax_reduction_group
// with_context_parallel=True: `amax_group`). Transformer Engine updates at every autocast exit,
// i.e. after each microbatch's forward and each one's backward; paralab records over all of a
// step's microbatches and updates once, so that every parallel layout (and gradient
// accumulation) sees the same amaxes as the single-rank run. With one microbatch per step the
// two agree.
//
// defines: Fp8Recipe, Fp8Config, fp8_recipe_name, Fp8Role, Fp8Scaling
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops/fp8.h"  // Fp8Format, Fp8Blocks, Fp8AmaxAlgo, the casts
#include "parallel/fp8_log.h"  // Fp8TensorLog
#include "measure/ledger.h"   // Buffer, Category

namespace paralab {

enum class Fp8Recipe { Delayed, Tensorwise, Blockwise };
// "delayed", "tensorwise", "blockwise"; inline: the checkpoint manifest (and its fuzzer, which
// links no kernels) names the recipe with it.
inline const char* fp8_recipe_name(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::Delayed: return "delayed";
    case Fp8Recipe::Tensorwise: return "tensorwise";
    case Fp8Recipe::Blockwise: return "blockwise";
  }
  return "?";
}

// The --fp8-* flags, with Megatron-Core's names and defaults (transformer_config.py), which are
// not all Transformer Engine's (docs/megatron.md).
struct Fp8Config {
  bool enabled = false;                    // --fp8-format given
  bool hybrid = false;                     // --fp8-format hybrid: E5M2 gradients (else e4m3)
  Fp8Recipe recipe = Fp8Recipe::Delayed;   // --fp8-recipe (Megatron: delayed)
  int margin = 0;                          // --fp8-margin
  int amax_history_len = 1;                // --fp8-amax-history-len (Megatron 1, TE 1024)
  kernels::Fp8AmaxAlgo amax_compute_algo = kernels::Fp8AmaxAlgo::MostRecent;  // (TE: max)
  bool param_gather = false;               // --fp8-param-gather
  bool log_scaling = false;                // --log-fp8-scaling (parallel/fp8_log.h)
  kernels::Fp8Format forward_format() const { return kernels::Fp8Format::E4M3; }
  kernels::Fp8Format backward_format() const {
    return hybrid ? kernels::Fp8Format::E5M2 : kernels::Fp8Format::E4M3;
  }
};

enum class Fp8Role { Input, Weight, OutputGrad };

// The scaling state of one model chunk's linear layers, numbered 0 .. linears-1.
class Fp8Scaling {
 public:
  // A max all-reduce of n device floats in place over some ranks (a no-op on one rank).
  using Reduce = std::function<void(float* amax, int n)>;

  // Delayed scaling's histories and scales are allocated here (category fp8_state, as all of
  // this class's buffers), the scales 1, as Transformer Engine starts them. Tensorwise's amax
  // and scale (2 floats) and --log-fp8-scaling's two counters too, unless `share` lends its own (the
  // casts run one at a time: the MoE experts' scaling borrows the dense one's, so a stage
  // holds one set, plan/fp8.h).
  Fp8Scaling(const Fp8Config& config, kernels::Device device, int linears,
             Fp8Scaling* share = nullptr);
  Fp8Scaling(const Fp8Scaling&) = delete;
  Fp8Scaling& operator=(const Fp8Scaling&) = delete;

  // The reductions (see the header): `pieces` over the ranks holding pieces of one tensor,
  // `amax_group` delayed scaling's per-step reduction. Unset: one rank.
  void set_reductions(Reduce pieces, Reduce amax_group);

  const Fp8Config& config() const { return config_; }
  int linears() const { return linears_; }
  kernels::Fp8Format format(Fp8Role r) const;
  // The factors' blocks of a role's copies (its transposed copy has blocks of the same kind).
  kernels::Fp8Blocks blocks(Fp8Role r) const { return blocks(config_, r); }
  static kernels::Fp8Blocks blocks(const Fp8Config& config, Fp8Role r);
  // Bytes of the factors of a quantised (rows, cols) copy of role r.
  size_t scale_bytes(Fp8Role r, int rows, int cols) const {
    return scale_bytes(config_, r, rows, cols);
  }
  static size_t scale_bytes(const Fp8Config& config, Fp8Role r, int rows, int cols);

  // Casts x (rows, cols) of linear `linear`'s tensor `role` as the recipe says: into q (rows,
  // cols) with factors q_scale_inv when q is not null, and into qt = x^T (cols, rows) with
  // factors qt_scale_inv when qt is not null. T: float or bf16.
  template <class T>
  void quantize(int linear, Fp8Role role, const T* x, int rows, int cols, uint8_t* q,
                float* q_scale_inv, uint8_t* qt, float* qt_scale_inv);

  // --fp8-param-gather (parallel/data_parallel.h Fp8ParamGather): the weights gathered as FP8
  // codes. A weight's scales are `values` floats: one (delayed, tensorwise) or one per 128 x 128
  // block (blockwise, the grid of the whole weight, row-major). gather_scales puts this step's
  // scales of linears' weights, one after the other, into scale[0, values): delayed: the
  // history's (replicated, fixed for the step); tensorwise and blockwise: from amax, the max
  // over the ZeRO shards of each weight's (block's) amax (the caller reduced them over the
  // data-parallel group), tensorwise's reduced here over the pieces (tp, cp) as every
  // tensorwise cast is (blockwise's blocks lie within a rank's piece, as its casts' do), then
  // scale = max / amax; and factor[i] = 1 / scale[i], as every cast writes it.
  // quantize_shard casts n elements of a weight's shard, from its element `first` (the weight
  // has `cols` columns), each at its block's scale, into q (delayed: the shard's amax recorded
  // into the weight's history, which the step's amax group reduces over dp: the whole weight's
  // amax, as the unsharded cast records it).
  // quantize_at casts the (rows, cols) x, or its transpose x^T, at given scales (x's blocks),
  // recording nothing: a gathered weight's casts (ZeRO-3: dgrad's W^T from the gathered codes,
  // dequantised; ZeRO-1/2: W and W^T as stored, the gathered codes decoded into them), which
  // give back the gathered codes (docs/fp8.md).
  void gather_scales(const std::vector<int>& linears, int values, float* amax, float* scale,
                     float* factor);
  template <class T>
  void quantize_shard(int linear, const T* x, int64_t first, int64_t n, int cols,
                      const float* scale, uint8_t* q);
  template <class T>
  void quantize_at(Fp8Role role, const T* x, int rows, int cols, const float* scale, uint8_t* q,
                   float* factor, bool transpose);

  // The end of a step: delayed scaling reduces the recorded amaxes over the amax group and
  // updates both histories and their scales; the other recipes have nothing to do.
  void step_end();

  // --log-fp8-scaling (config().log_scaling; parallel/fp8_log.h): each cast of a plain copy
  // also runs fp8_cast_count at its scale and reads the counts (and tensorwise's amax and
  // scale) back to the host; step_end reads delayed scaling's reduced amaxes and the scales the
  // step used. log(linear, role): this step's so far; clear_log starts a step.
  const Fp8TensorLog& log(int linear, Fp8Role role) const {
    return log_.at(log_slot(linear, role));
  }
  void clear_log() { log_.assign(log_.size(), Fp8TensorLog{}); }

  // Delayed scaling's state (empty for the other recipes), by name, for the checkpoint and the
  // lesson: fp8_amax_history_fwd (len, 2 linears), fp8_scale_fwd (2 linears),
  // fp8_amax_history_bwd (len, linears), fp8_scale_bwd (linears); slot 2 l is linear l's input,
  // 2 l + 1 its weight, l (backward) its output gradient.
  struct State {
    std::string name;
    Buffer<float>* buffer;
  };
  std::vector<State> state();
  // Bytes of that state: 4 (len + 1) 3 linears for delayed scaling, else 0.
  static size_t state_bytes(const Fp8Config& config, int linears);
  // The state of linears [first, first + count), host floats, as the checkpoint stores one
  // layer's (checkpoint/checkpoint.h): the forward history's 2 count columns (len rows, row
  // major), their scales, the backward history's count columns, their scales; state_bytes(
  // config, count) / 4 floats. set_linears_state puts such a vector back (a resumed run).
  std::vector<float> linears_state(int first, int count) const;
  void set_linears_state(int first, int count, const std::vector<float>& values);

 private:
  // The slot of (linear, role) in its pass's history.
  int slot(int linear, Fp8Role role) const;
  int log_slot(int linear, Fp8Role role) const { return 3 * linear + (int)role; }
  // --log-fp8-scaling: the cast of x (n values) at scale, counted into linear's role
  template <class T>
  void count_cast(int linear, Fp8Role role, const T* x, size_t n, const float* scale);
  void log_delayed_state();  // step_end: the reduced amaxes and the step's scales
  bool forward(Fp8Role role) const { return role != Fp8Role::OutputGrad; }
  template <class T>
  void quantize_tensor(const T* x, int rows, int cols, kernels::Fp8Format f, const float* scale,
                       float* amax, uint8_t* q, float* q_scale_inv, uint8_t* qt,
                       float* qt_scale_inv);

  Fp8Config config_;
  kernels::Device device_;
  int linears_;
  Reduce pieces_, amax_group_;
  Buffer<float> history_fwd_, scale_fwd_, history_bwd_, scale_bwd_;
  Buffer<float> scratch_;  // tensorwise: one amax and its scale (when not shared)
  float* tensorwise_ = nullptr;  // tensorwise: the amax and scale used, this or the lender's
  Buffer<unsigned long long> cast_counts_;  // --log-fp8-scaling: fp8_cast_count's output
  unsigned long long* counts_ = nullptr;    // this one's, or the lender's
  std::vector<Fp8TensorLog> log_;           // 3 per linear (log_slot)
};

}  // namespace paralab
