// model/transformer_views.cpp: the Transformer's whole-model views on the host, for
// initialisation checks, tests, golden files and --save: every parameter or gradient at full
// shape (gathered over dp, tp and pp), and one local tensor by name.
#include <algorithm>
#include <stdexcept>
#include "kernels/ops.h"
#include "model/transformer.h"

namespace paralab {

std::vector<float> Transformer::gather_full(bool grads) {
  const std::vector<float> local = grads ? dp_->gather_grads() : dp_->gather_params();
  // experts apart: every etp_ep rank's slice of its experts (the same size on each), gathered
  // over etp_ep (group rank etp_rank + etp ep_rank); parts[ep rank][etp rank]
  std::vector<std::vector<std::vector<float>>> expert_parts;
  if (expert_dp_) {
    const std::vector<float> mine = grads ? expert_dp_->gather_grads() : expert_dp_->gather_params();
    const int P = ep_.size(), T = ep_.etp_size();
    expert_parts.assign(P, std::vector<std::vector<float>>(T, mine));
    if (P * T > 1) {
      Communicator& g = *ep_.etp_ep;
      Buffer<float> all(device_, mine.size() * P * T, Category::COMM_BUFFERS);
      kernels::memcpy_from_host(device_, all.data() + mine.size() * g.rank(), mine.data(),
                                mine.size() * sizeof(float));
      g.all_gather(all.data() + mine.size() * g.rank(), all.data(), mine.size());
      for (int j = 0; j < P; ++j)
        for (int t = 0; t < T; ++t)
          kernels::memcpy_to_host(device_, expert_parts[j][t].data(),
                                  all.data() + mine.size() * (t + T * j),
                                  mine.size() * sizeof(float));
    }
  }
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
  // Each stage writes its own tensors into the full vector (zeros elsewhere) and a sum over
  // pp assembles it: x + 0 is exact. The tied copy is the first stage's to write, DualPipe's
  // mirrored stages the pair's first rank's.
  std::vector<size_t> full_offset(full_table_.size() + 1, 0);
  for (size_t i = 0; i < full_table_.size(); ++i)
    full_offset[i + 1] = full_offset[i] + full_table_[i].numel();
  std::vector<float> out(full_offset.back(), 0.0f);
  for (const TensorView& v : views_) {
    if (slice_.tied_copy && v.spec->name == "embedding.word") continue;
    if (dp_->mirror_copy()) break;
    size_t i = 0;
    while (full_table_[i].name != v.spec->name) ++i;
    if (v.expert) {  // global expert ids: ep rank r's block of experts is the r-th
      std::vector<std::vector<std::vector<float>>> pieces(expert_parts.size());
      for (size_t j = 0; j < expert_parts.size(); ++j)
        for (const std::vector<float>& part : expert_parts[j])
          pieces[j].emplace_back(part.begin() + v.offset, part.begin() + v.offset + v.numel);
      const std::vector<float> full = unshard_experts(full_table_[i], pieces);
      std::copy(full.begin(), full.end(), out.begin() + full_offset[i]);
      continue;
    }
    std::vector<std::vector<float>> pieces(t);
    for (int r = 0; r < t; ++r)
      pieces[r].assign(parts[r].begin() + v.offset, parts[r].begin() + v.offset + v.numel);
    const std::vector<float> full = unshard_tensor(full_table_[i], pieces);
    std::copy(full.begin(), full.end(), out.begin() + full_offset[i]);
  }
  if (pp_ && pp_->size() > 1) {
    Buffer<float> all(device_, out.size(), Category::COMM_BUFFERS);
    kernels::memcpy_from_host(device_, all.data(), out.data(), out.size() * sizeof(float));
    pp_->all_reduce(all.data(), out.size());
    kernels::memcpy_to_host(device_, out.data(), all.data(), out.size() * sizeof(float));
  }
  return out;
}

// Elements of a local tensor without the vocabulary's padding rows: its real rows come first
// (padded_rows), so they are a prefix.
size_t Transformer::unpadded_numel(const TensorView& v) const {
  if (v.spec->split != TpSplit::VOCAB) return v.numel;
  const int64_t rows = v.spec->shape[0], row = (int64_t)v.numel / rows;
  const int64_t real = std::max<int64_t>(0, std::min<int64_t>(
                                                rows, config_.vocab_size - tp_.rank() * rows));
  return (size_t)(real * row);
}

std::vector<float> Transformer::get_param(const std::string& name) {
  const TensorView& v = view(name);
  const std::vector<float> all = (v.expert ? expert_dp_ : dp_)->gather_params();
  return std::vector<float>(all.begin() + v.offset, all.begin() + v.offset + unpadded_numel(v));
}

void Transformer::set_param(const std::string& name, const std::vector<float>& values) {
  const TensorView& v = view(name);
  if (values.size() != unpadded_numel(v))
    throw std::runtime_error(name + ": expected " + std::to_string(unpadded_numel(v)) +
                             " values, got " + std::to_string(values.size()));
  DataParallel* owner = v.expert ? expert_dp_ : dp_;
  std::vector<float> all = owner->gather_params();
  std::copy(values.begin(), values.end(), all.begin() + v.offset);
  owner->load_params(all);
}

std::vector<float> Transformer::last_logits() const {
  const size_t V = (size_t)last_logits_columns_, rows = V > 0 ? last_logits_.size() / V : 0;
  std::vector<float> out;
  out.reserve(rows * last_logits_valid_);
  for (size_t i = 0; i < rows; ++i)
    out.insert(out.end(), last_logits_.begin() + i * V, last_logits_.begin() + i * V + last_logits_valid_);
  return out;
}

std::vector<float> Transformer::get_grad(const std::string& name) {
  const TensorView& v = view(name);
  const std::vector<float> all = (v.expert ? expert_dp_ : dp_)->gather_grads();
  return std::vector<float>(all.begin() + v.offset, all.begin() + v.offset + unpadded_numel(v));
}

}  // namespace paralab
