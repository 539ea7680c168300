// checkpoint/reshard.h: full tensors into this rank's slices. The one place that knows how any
// layout holds a model, used by a checkpoint saved at another layout (checkpoint/checkpoint.h) and
// by a Hugging Face import (checkpoint/hugging_face.h).
//
// A rank's tensors live in one or two flat vectors (the dense parameters, and with the experts
// apart the experts'), each owned by a data parallelism (parallel/data_parallel.h). Each local
// tensor is a slice of a full one (model/param_table.h TensorSlice: tp's rows, columns or
// halves; ep's experts and etp's share of each): its elements are shard_tensor /
// shard_experts of the full tensor. So loading needs only the full tensor per name: every
// rank takes its slice, whatever tp, ep, etp, pp (which tensors a stage holds), vpp, dp or
// ZeRO stage (which elements of the slice it owns) it runs. Optimizer states (Adam's m and v,
// the fp32 master) are sliced the same way, then cut to the owned segments.
//
// defines: FullTensor, rank_slice, load_parameters, load_optimizer_state
#pragma once
#include <functional>
#include <string>
#include <vector>
#include "model/optimizer.h"
#include "model/param_table.h"
#include "model/transformer.h"

namespace paralab {

// The full tensor `full` (param_table's spec) of one kind: "param", "exp_avg", "exp_avg_sq"
// or "master"; numel values, fp32.
using FullTensor = std::function<std::vector<float>(const ParamSpec& full, const std::string& kind)>;

// Which slice of the full tensor this rank's view holds.
TensorSlice rank_slice(const Transformer& model, const TensorView& view);
// The full spec of a view (param_table's entry of the same name).
const ParamSpec& full_spec(const std::vector<ParamSpec>& table, const std::string& name);

// Every local tensor from full(spec, "param") (the storage type rounds: bf16 to nearest even).
// Collective over each data-parallel group (DataParallel::load_params).
void load_parameters(Transformer& model, const FullTensor& full);
// Adam's moments, and with bf16 the master weights, of the elements this rank owns.
void load_optimizer_state(Transformer& model, AdamW& optimizer, const FullTensor& full);

}  // namespace paralab
