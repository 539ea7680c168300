// model/transformer_fp8.cpp: the Transformer's FP8 scaling (model/transformer.h, docs/fp8.md):
// one Fp8Scaling for the stage's dense linears, its reductions wired to the groups that share
// its tensors, and each layer's context pointed at it.
//
// Which ranks share what (parallel/fp8_scaling.h):
//   pieces      a per-tensor amax of a tensor held in pieces is the max over the pieces: tensor
//               parallelism splits the weights (and the row-parallel inputs and column-parallel
//               output gradients), context parallelism the tokens of every activation and
//               gradient. Reduced over tp, then cp: the max over tp x cp. A tensor that is
//               replicated over a group (a column-parallel input over tp) gives its own amax
//               back, so one rule serves every tensor.
//   amax_group  delayed scaling's per-step reduction over tp x dp x cp (Megatron's amax
//               reduction group): tp, then the data-parallel group (dp x cp with cp).
// The experts' scaling (an MoE layer's fc1 and fc2 of each local expert: Transformer Engine's
// GroupedLinear, one scaling state per GEMM, `_num_fp8_tensors_per_gemm`) has its own:
//   pieces      none: GroupedLinear's current scaling reduces nothing (and refuses tp > 1,
//               as the CLI refuses tensorwise with --expert-tensor-parallel-size > 1); each
//               expert GEMM's tensors are the rows that expert ran
//   amax_group  over the ranks that hold the expert: its etp slices, then its copies (edp).
//               Megatron passes every module the same amax reduction group, tp x dp x cp, and
//               TE max-reduces its global amax buffer over it position by position
//               (reduce_and_update_fp8_tensors): without ep the same ranks as etp x edp, with
//               ep > 1 it also maxes local expert j of every ep rank, different experts.
//               paralab keeps each expert's own (notes/decisions.md), so every layout
//               reproduces the single-rank run.
// Each is a MAX all-reduce of fp32 amaxes in place, recorded on its group like every collective.
#include <stdexcept>
#include <string>
#include <utility>

#include "model/layer.h"
#include "model/transformer.h"

namespace paralab {

namespace {

// MAX all-reduce of n device floats over each of the groups that has more than one rank.
Fp8Scaling::Reduce max_over(std::vector<Communicator*> groups) {
  std::vector<Communicator*> active;
  for (Communicator* g : groups)
    if (g != nullptr && g->size() > 1) active.push_back(g);
  if (active.empty()) return nullptr;
  return [active](float* amax, int n) {
    for (Communicator* g : active) g->all_reduce(amax, (size_t)n, ReduceOp::MAX, DType::F32);
  };
}

}  // namespace

void Transformer::make_fp8() {
  if (!config_.fp8.enabled) return;
  int layers = 0;  // this stage's layers, over its chunks
  for (int u : layer_unit_) layers += u >= 0;
  // Delayed scaling's histories and scales, category fp8_state: each rank holds its linears'
  // whole state, not a ZeRO shard as of the optimizer's states (plan/fp8.h).
  fp8_.reset(new Fp8Scaling(config_.fp8, device_, 4 * layers));
  // The experts': 2 linears per local expert of each MoE layer here, category fp8_state too:
  // per-expert model state (TE keeps it in the module's extra_state, saved with the
  // weights), whole on every rank holding the expert (plan/fp8.h).
  fp8_moe_ordinal_.assign(config_.num_layers, -1);
  int moe_layers = 0;
  for (int l = 0; l < config_.num_layers; ++l)
    if (layer_unit_[l] >= 0 && config_.moe.is_moe_layer(l)) fp8_moe_ordinal_[l] = moe_layers++;
  if (moe_layers > 0)
    fp8_experts_.reset(new Fp8Scaling(config_.fp8, device_,
                                      2 * ep_.local_experts(config_.moe.num_experts) * moe_layers,
                                      fp8_.get()));
  set_fp8_amax_group(nullptr, nullptr);
}

// --fp8-param-gather: each layer's FP8 weights, numbered as the layer reads them
// (Fp8GatheredUnit): qkv, proj, and a dense MLP's fc1, fc2 (the dense scaling's linears
// 4 i + k, layer.cpp); an MoE layer's fc1 of each local expert, then their fc2 (the experts'
// scaling's linears, model/moe.cpp), in the dense unit after qkv and proj or, with the
// experts apart, in the expert vector's (its own DataParallel, over edp).
void Transformer::make_fp8_param_gather() {
  if (!fp8_ || !config_.fp8.param_gather) return;
  Fp8ParamGather dense, experts;
  dense.weights.assign(dp_->num_units(), {});
  if (expert_dp_) experts.weights.assign(expert_dp_->num_units(), {});
  const char* const names[4] = {"attn.qkv.weight", "attn.proj.weight", "mlp.fc1.weight",
                                "mlp.fc2.weight"};
  const int E = ep_.local_experts(config_.moe.num_experts);
  for (int l = 0; l < (int)layer_unit_.size(); ++l) {
    const int u = layer_unit_[l];
    if (u < 0) continue;
    const std::string layer = "layers." + std::to_string(l) + ".";
    const bool moe = config_.moe.is_moe_layer(l);
    for (int k = 0; k < (moe ? 2 : 4); ++k) {
      const TensorView& v = views_.at(index_.at(layer + names[k]));
      dense.weights[u].push_back({(int64_t)v.unit_offset, (int64_t)v.numel, fp8_.get(),
                                  4 * fp8_ordinal(l) + k, (int)v.spec->shape.back()});
    }
    if (!moe) continue;
    const int first = 2 * E * fp8_moe_ordinal_.at(l);  // fc1 of local expert e: first + 2 e
    const char* const stacked[2] = {"mlp.experts.fc1.weight", "mlp.experts.fc2.weight"};
    for (int fc = 0; fc < 2; ++fc) {
      const TensorView& v = views_.at(index_.at(layer + stacked[fc]));
      const int64_t each = (int64_t)v.numel / E;  // one expert's (out, in) of the stacked tensor
      for (int e = 0; e < E; ++e)
        (v.expert ? experts : dense)
            .weights[u]
            .push_back({(int64_t)v.unit_offset + e * each, each, fp8_experts_.get(),
                        first + 2 * e + fc, (int)v.spec->shape.back()});
    }
  }
  dp_->set_fp8_param_gather(std::move(dense));
  if (expert_dp_) expert_dp_->set_fp8_param_gather(std::move(experts));
}

void Transformer::set_fp8_amax_group(Communicator* data_parallel_group,
                                     Communicator* expert_group) {
  if (!fp8_) return;
  fp8_->set_reductions(max_over({tp_.tp, cp_.cp}), max_over({tp_.tp, data_parallel_group}));
  if (fp8_experts_) fp8_experts_->set_reductions(nullptr, max_over({ep_.etp, expert_group}));
}

void Transformer::fp8_step_end() {
  if (fp8_) fp8_->step_end();
  if (fp8_experts_) fp8_experts_->step_end();
}

Fp8StepLog Transformer::fp8_step_log() const {
  Fp8StepLog out;
  if (!fp8_ || !fp8_->config().log_scaling) return out;
  out.on = true;
  for (int l = 0; l < fp8_->linears(); ++l)  // linear 4 i + kind of the stage's layer i
    for (int role = 0; role < kFp8Roles; ++role)
      out.at(l % kFp8DenseKinds, role).fold(fp8_->log(l, Fp8Role(role)));
  for (int l = 0; fp8_experts_ && l < fp8_experts_->linears(); ++l)  // 2 j + fc1 0, fc2 1
    for (int role = 0; role < kFp8Roles; ++role)
      out.at(kFp8DenseKinds + l % 2, role).fold(fp8_experts_->log(l, Fp8Role(role)));
  return out;
}

void Transformer::reset_fp8_log() {
  if (!fp8_ || !fp8_->config().log_scaling) return;
  fp8_->clear_log();
  if (fp8_experts_) fp8_experts_->clear_log();
}

int Transformer::fp8_ordinal(int layer) const {
  // the layer's place among this stage's layers: its unit less the embedding's
  return layer_unit_.at(layer) - (slice_.embedding ? 1 : 0);
}

void Transformer::fp8_context(LayerContext& c) const {
  if (!fp8_) return;
  c.fp8 = fp8_.get();
  c.fp8_first = 4 * fp8_ordinal(c.layer);
  c.fp8_weights_stored = dp_->fp8_weights_stored();  // --fp8-param-gather at ZeRO-1/2
  if (fp8_experts_ && fp8_moe_ordinal_.at(c.layer) >= 0) {
    c.fp8_experts = fp8_experts_.get();
    c.fp8_experts_first =
        2 * ep_.local_experts(config_.moe.num_experts) * fp8_moe_ordinal_[c.layer];
  }
}

std::vector<float> Transformer::fp8_layer_state(int layer) const {
  if (!fp8_ || layer_unit_.at(layer) < 0) return {};
  return fp8_->linears_state(4 * fp8_ordinal(layer), 4);
}

void Transformer::set_fp8_layer_state(int layer, const std::vector<float>& values) {
  if (!fp8_ || layer_unit_.at(layer) < 0) return;
  fp8_->set_linears_state(4 * fp8_ordinal(layer), 4, values);
}

// Global expert `expert` of MoE layer `layer`: its first linear in the experts' scaling, or -1
// when this rank does not hold it.
namespace {
int expert_linear(const Fp8Scaling* experts, const std::vector<int>& ordinal,
                         const ExpertParallel& ep, int E, int layer, int expert) {
  if (!experts || ordinal.at(layer) < 0) return -1;
  const int local = expert - ep.first_expert(E);
  if (local < 0 || local >= ep.local_experts(E)) return -1;
  return 2 * (ep.local_experts(E) * ordinal[layer] + local);
}
}  // namespace

std::vector<float> Transformer::fp8_expert_state(int layer, int expert) const {
  const int first = expert_linear(fp8_experts_.get(), fp8_moe_ordinal_, ep_,
                                  config_.moe.num_experts, layer, expert);
  if (first < 0) return {};
  return fp8_experts_->linears_state(first, 2);
}

void Transformer::set_fp8_expert_state(int layer, int expert, const std::vector<float>& values) {
  const int first = expert_linear(fp8_experts_.get(), fp8_moe_ordinal_, ep_,
                                  config_.moe.num_experts, layer, expert);
  if (first >= 0) fp8_experts_->set_linears_state(first, 2, values);
}

}  // namespace paralab
