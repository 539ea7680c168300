// checkpoint/reshard.cpp: full tensors into this rank's slices (the idea is in reshard.h).
#include "checkpoint/reshard.h"

#include <algorithm>
#include <stdexcept>
#include "kernels/ops.h"

namespace paralab {

TensorSlice rank_slice(const Transformer& model, const TensorView& view) {
  TensorSlice s;
  if (view.expert) {
    const ExpertParallel& ep = model.expert_parallel();
    s.expert = true;
    s.ep = ep.size(), s.ep_rank = ep.rank();
    s.etp = ep.etp_size(), s.etp_rank = ep.etp_rank();
  } else {
    s.tp = model.tensor_parallel().size(), s.tp_rank = model.tensor_parallel().rank();
  }
  return s;
}

const ParamSpec& full_spec(const std::vector<ParamSpec>& table, const std::string& name) {
  for (const ParamSpec& p : table)
    if (p.name == name) return p;
  throw std::logic_error("full_spec: no tensor " + name);
}

namespace {

// This rank's local tensor of the view, from the full tensor.
std::vector<float> local_slice(const Transformer& model, const ParamSpec& spec,
                               const TensorView& view, const std::vector<float>& full) {
  const TensorSlice s = rank_slice(model, view);
  std::vector<float> local = s.expert ? shard_experts(spec, full, s.ep, s.ep_rank, s.etp, s.etp_rank)
                                      : shard_tensor(spec, full, s.tp, s.tp_rank);
  if (local.size() != view.numel)
    throw std::logic_error("reshard: " + spec.name + " slice of the wrong size");
  return local;
}

}  // namespace

void load_parameters(Transformer& model, const FullTensor& full) {
  const std::vector<ParamSpec> table = param_table(model.config());
  for (bool expert : {false, true}) {
    DataParallel* owner = expert ? model.expert_data_parallel() : &model.data_parallel();
    if (!owner) continue;
    size_t flat = 0;
    for (const TensorView& v : model.views())
      if (v.expert == expert) flat = std::max(flat, v.offset + v.numel);
    std::vector<float> values(flat, 0.0f);
    for (const TensorView& v : model.views()) {
      if (v.expert != expert) continue;
      const ParamSpec& spec = full_spec(table, v.spec->name);
      const std::vector<float> local = local_slice(model, spec, v, full(spec, "param"));
      std::copy(local.begin(), local.end(), values.begin() + v.offset);
    }
    owner->load_params(values);
  }
}

void load_optimizer_state(Transformer& model, AdamW& optimizer, const FullTensor& full) {
  const std::vector<ParamSpec> table = param_table(model.config());
  std::vector<std::pair<const char*, AdamW::State>> kinds = {
      {"exp_avg", AdamW::State::EXP_AVG}, {"exp_avg_sq", AdamW::State::EXP_AVG_SQ}};
  if (optimizer.has_master()) kinds.push_back({"master", AdamW::State::MASTER});
  for (bool expert : {false, true}) {
    DataParallel* owner = expert ? model.expert_data_parallel() : &model.data_parallel();
    if (!owner) continue;
    for (const TensorView& v : model.views()) {
      if (v.expert != expert) continue;
      const ParamSpec& spec = full_spec(table, v.spec->name);
      for (const auto& [kind, state] : kinds) {
        std::vector<float> local;  // read only when this rank owns part of the view
        for (const OwnedSegment& seg : owner->owned_segments()) {
          const int64_t lo = std::max<int64_t>(seg.flat_begin, v.offset);
          const int64_t hi = std::min<int64_t>(seg.flat_begin + seg.count, v.offset + v.numel);
          if (lo >= hi) continue;
          if (local.empty()) local = local_slice(model, spec, v, full(spec, kind));
          const int64_t at = seg.state_offset + (lo - seg.flat_begin);  // host or device
          const float* from = local.data() + (lo - v.offset);
          std::vector<kernels::bf16> rounded;  // a bf16 moment: rounded to nearest even (exact
          if (optimizer.state_bf16(state)) {   // from a bf16 checkpoint, which widened it)
            rounded.resize(hi - lo);
            for (int64_t k = 0; k < hi - lo; ++k) rounded[k] = kernels::to_bf16(from[k]);
          }
          kernels::memcpy_from_host(optimizer.state_device(expert, at),
                                    optimizer.state(state, expert, at),
                                    rounded.empty() ? (const void*)from : rounded.data(),
                                    (hi - lo) * optimizer.state_bytes(state));
        }
      }
    }
  }
}

}  // namespace paralab
