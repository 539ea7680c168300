// plan/gemm_calls.cpp: see gemm_calls.h for the counts per label and where each comes from.
#include "plan/gemm_calls.h"
#include <algorithm>
#include <cmath>
#include "parallel/attention_pass.h"  // attention_gemm_calls
#include "plan/plan.h"                // plan_core_shape

namespace paralab {

const char* const kGemmLabels[kNumGemmLabels] = {"attention", "experts", "head", "mlp",
                                                 "other", "router", "shared_expert"};
namespace {
enum Label { ATTENTION, EXPERTS, HEAD, MLP, OTHER, ROUTER, SHARED };
}  // namespace

double GemmCallPrediction::at(const std::string& label) const {
  for (int i = 0; i < kNumGemmLabels; ++i)
    if (label == kGemmLabels[i]) return calls[i];
  return 0;
}
double GemmCallPrediction::total() const {
  double t = 0;
  for (double c : calls) t += c;
  return t;
}

double expected_nonempty_experts(const Moe& moe, int64_t tokens) {
  const double E = moe.num_experts, k = moe.topk;
  if (moe.pad_to_capacity) return E;
  return E * (1.0 - std::pow(1.0 - k / E, (double)tokens));
}

int64_t paper_per_expert_calls(const ModelConfig& m, int projections, bool grouped) {
  int64_t moe_layers = 0;
  for (int l = 0; l < m.num_layers; ++l) moe_layers += m.moe.is_moe_layer(l);
  return moe_layers * (grouped ? 1 : m.moe.num_experts) * projections * 3;
}

GemmCallPrediction predict_gemm_calls(const Plan& plan, bool grouped, int rank,
                                      const std::vector<long long>* nonempty) {
  const ModelConfig& m = plan.model;
  const Moe& moe = m.moe;
  const Recompute& rc = m.recompute;
  // microbatches through each of the rank's chunks (DualPipe's: one direction's half)
  const double k = (double)plan.microbatches_per_rank /
                   (plan.pipeline.shape.placement() == StagePlacement::MIRRORED ? 2 : 1);
  const int64_t N = (int64_t)plan.train.micro_batch_size * m.seq_length / m.context_parallel.size;
  const bool naive = m.attention == AttentionImpl::NAIVE;
  // naive attention's GEMM calls per product: one per pass, or one per head of a group for
  // a ring pass on half the queries (parallel/attention_pass.h attention_gemm_calls)
  const CoreShape core = plan_core_shape(m, plan.train.micro_batch_size, plan.tp);
  const std::vector<CorePass> passes = core_passes(core, m.context_parallel);
  double per_product = 0;
  for (const CorePass& pass : passes) {
    CoreShape shape = core;
    if (m.context_parallel.type == CpCommType::A2A && m.context_parallel.size > 1)
      shape.A /= m.context_parallel.size, shape.G /= m.context_parallel.size;
    per_product += attention_gemm_calls(shape, pass.blk);
  }
  const double naive_fwd = naive ? 2 * per_product : 0, naive_bwd = naive ? 4 * per_product : 0;
  // a naive recompute: Q K^T again, and P V too when a ring's passes are merged
  const double naive_again = naive ? (passes.size() > 1 ? 2 : 1) * per_product : 0;
  GemmCallPrediction p;
  p.grouped = grouped;
  std::array<double, kNumGemmLabels>& c = p.calls;

  // the rank's layers, by chunk, and whether it holds the head
  std::vector<int> first{0}, count{m.num_layers};
  bool head = true;
  const int pp_rank = plan.ranks.empty() ? 0 : plan.ranks.at(rank).pp_rank;
  if (!plan.pipeline.stages.empty()) {
    const PipelineStagePlan& st = plan.pipeline.stages.at(pp_rank);
    first = st.chunk_first_layer;
    count = st.chunk_layers;
    head = st.head;
  }

  // one forward of layer l, all k microbatches; experts_fwd: its experts' forward calls
  auto forward = [&](int l, double experts_fwd) {
    c[ATTENTION] += k * (2 + naive_fwd);
    if (!moe.is_moe_layer(l)) {
      c[MLP] += k * 2;
      return;
    }
    c[ROUTER] += k * 1;
    c[EXPERTS] += experts_fwd;
    if (moe.shared_expert_size > 0) c[SHARED] += k * (2 + (moe.shared_expert_gate ? 1 : 0));
  };
  for (size_t ch = 0; ch < first.size(); ++ch) {
    const std::vector<int> group = rc.full_groups(count[ch]);
    for (int i = 0; i < count[ch]; ++i) {
      const int l = first[ch] + i;
      const bool is_moe = moe.is_moe_layer(l);
      // the experts' forward calls of this layer over the step's k microbatches
      double experts_fwd = 0;
      if (is_moe) {
        if (grouped) {
          experts_fwd = k * 2;
        } else if (nonempty && !moe.pad_to_capacity) {
          experts_fwd = 2.0 * (double)nonempty->at(l);
        } else {
          experts_fwd = k * 2 * expected_nonempty_experts(moe, N);
          if (!moe.pad_to_capacity) p.experts_exact = false;
        }
      }
      forward(l, experts_fwd);                      // the forward
      if (group[i] >= 0) forward(l, experts_fwd);   // full recompute: once more in backward
      // backward: every forward GEMM's dX and dW
      c[ATTENTION] += k * (4 + naive_bwd);
      if (rc.recompute_core_attn()) c[ATTENTION] += k * naive_again;
      if (!is_moe) {
        c[MLP] += k * 4;
        if (rc.recompute_mlp()) c[MLP] += k;  // fc1 again
        continue;
      }
      c[ROUTER] += k * 2;
      c[EXPERTS] += 2 * experts_fwd;
      if (moe.shared_expert_size > 0) c[SHARED] += k * (4 + (moe.shared_expert_gate ? 2 : 0));
    }
  }
  if (head) {
    const int64_t chunk = std::min<int64_t>(N, std::max(1, m.cross_entropy_chunk));
    const int64_t chunks = m.fused_cross_entropy ? (N + chunk - 1) / chunk : 1;
    c[HEAD] += k * 3 * (double)chunks;
  }
  return p;
}

std::vector<std::string> unaligned_gemm_dims(const Plan& plan) {
  const ModelConfig& m = plan.model;
  const ParallelConfig& par = plan.parallel;
  const int t = par.tensor_parallel;
  std::vector<std::pair<std::string, int64_t>> dims = {
      {"hidden size", m.hidden_size},
      {"qkv width per rank", m.qkv_size() / t},
      {"attention width per rank", (int64_t)m.num_attention_heads * m.head_dim() / t},
      {"vocabulary rows per rank", plan.padded_vocab / t}};
  if (!m.moe.enabled() || std::find(m.moe.layer_pattern.begin(), m.moe.layer_pattern.end(),
                                     0) != m.moe.layer_pattern.end()) {  // a dense MLP somewhere
    dims.push_back({"fc1 width per rank", m.fc1_size() / t});
    dims.push_back({"ffn width per rank", m.ffn() / t});
  }
  if (m.attention == AttentionImpl::NAIVE) {  // Q K^T and P V per head: ld d and the keys
    dims.push_back({"head dim", m.head_dim()});
    dims.push_back({"keys per rank (naive attention)", m.seq_length / par.context_parallel});
  }
  if (m.moe.num_experts > 0) {
    const int etp = par.experts_apart() ? par.expert_tensor_parallel : t;
    dims.push_back({"experts (router logits)", m.moe.num_experts});
    dims.push_back({"expert fc1 width per rank", m.moe_fc1_size() / etp});
    dims.push_back({"expert width per rank", m.moe_ffn() / etp});
    if (m.moe.shared_expert_size > 0)
      dims.push_back({"shared expert width per rank", m.moe.shared_expert_size / t});
  }
  std::vector<std::string> out;
  for (const auto& [name, value] : dims)
    if (value % 8 != 0) out.push_back(name + " " + std::to_string(value));
  return out;
}

}  // namespace paralab
