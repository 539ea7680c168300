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
// Each is a MAX all-reduce of fp32 amaxes in place, recorded on its group like every collective.
#include <stdexcept>

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
  // Delayed scaling's histories and scales, category workspace like the GEMMs' scratch: each
  // rank holds its linears' whole state, not a ZeRO shard as of the optimizer's states
  // (plan/fp8.h).
  fp8_.reset(new Fp8Scaling(config_.fp8, device_, 4 * layers, Category::WORKSPACE));
  set_fp8_amax_group(nullptr);
}

void Transformer::set_fp8_amax_group(Communicator* data_parallel_group) {
  if (!fp8_) return;
  fp8_->set_reductions(max_over({tp_.tp, cp_.cp}), max_over({tp_.tp, data_parallel_group}));
}

void Transformer::fp8_step_end() {
  if (fp8_) fp8_->step_end();
}

Fp8StepLog Transformer::fp8_step_log() const {
  Fp8StepLog out;
  if (!fp8_ || !fp8_->config().log_scaling) return out;
  out.on = true;
  for (int l = 0; l < fp8_->linears(); ++l)  // linear 4 i + kind of the stage's layer i
    for (int role = 0; role < kFp8Roles; ++role)
      out.at(l % kFp8LinearKinds, role).fold(fp8_->log(l, Fp8Role(role)));
  return out;
}

void Transformer::reset_fp8_log() {
  if (fp8_ && fp8_->config().log_scaling) fp8_->clear_log();
}

int Transformer::fp8_ordinal(int layer) const {
  // the layer's place among this stage's layers: its unit less the embedding's
  return layer_unit_.at(layer) - (slice_.embedding ? 1 : 0);
}

void Transformer::fp8_context(LayerContext& c) const {
  if (!fp8_) return;
  c.fp8 = fp8_.get();
  c.fp8_first = 4 * fp8_ordinal(c.layer);
}

std::vector<float> Transformer::fp8_layer_state(int layer) const {
  if (!fp8_ || layer_unit_.at(layer) < 0) return {};
  return fp8_->linears_state(4 * fp8_ordinal(layer), 4);
}

void Transformer::set_fp8_layer_state(int layer, const std::vector<float>& values) {
  if (!fp8_ || layer_unit_.at(layer) < 0) return;
  fp8_->set_linears_state(4 * fp8_ordinal(layer), 4, values);
}

}  // namespace paralab
