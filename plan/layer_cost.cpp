// plan/layer_cost.cpp: see layer_cost.h.
#include "plan/layer_cost.h"
#include <algorithm>
#include <string>
#include "parallel/attention_pass.h"  // attention_gemm_calls
#include "plan/gemm_calls.h"          // expected_nonempty_experts

namespace paralab {

namespace {

// A matmul row of the FLOPs plan (one rank's share, one microbatch, all its layers).
const MatmulFlops* find_row(const FlopsPlan& f, const std::string& name) {
  for (const MatmulFlops& mm : f.matmuls)
    if (mm.name == name) return &mm;
  return nullptr;
}

class LayerCoster {
 public:
  LayerCoster(const Plan& plan, const DeviceCost& dev, const KernelTrafficPlan& traffic)
      : plan_(plan), dev_(dev), traffic_(traffic) {
    const ModelConfig& m = plan.model;
    e_ = plan.train.half() ? 2 : 4;
    const LocalSizes ls = local_sizes(m, plan.train.micro_batch_size, plan.tp,
                                      plan.sequence_parallel);
    h_ = (double)m.hidden_size;
    naive_ = m.attention == AttentionImpl::NAIVE;
    // naive attention: GEMM calls per product and layer (gemm_calls.cpp's count)
    const CoreShape core = plan_core_shape(m, plan.train.micro_batch_size, plan.tp);
    const std::vector<CorePass> passes = core_passes(core, m.context_parallel);
    passes_ = (double)passes.size();
    for (const CorePass& pass : passes) {
      CoreShape shape = core;
      if (m.context_parallel.type == CpCommType::A2A && m.context_parallel.size > 1)
        shape.A /= m.context_parallel.size, shape.G /= m.context_parallel.size;
      per_product_calls_ += attention_gemm_calls(shape, pass.blk);
    }
    // the per-expert calls of one projection in one layer and microbatch (gemm_calls.h)
    expert_calls_ = m.moe.grouped_gemm ? 1 : expected_nonempty_experts(m.moe, ls.N);
  }

  // A linear's forward of `flops` FLOPs as `calls` GEMMs of width n, reducing over k: the
  // rows follow from the FLOPs (2 rows n k); bytes = e (rows k + k n + rows n) per call.
  // Returns the forward's seconds (0 without the row).
  double linear(LayerCost& c, const MatmulFlops* row, double n, double k, double calls = 1,
                int bytes = 0) const {
    if (!row || row->layers == 0) return 0;
    const double fwd = row->hardware / 3.0 / row->layers;  // forward = a third
    const double e = bytes ? bytes : e_;
    const double rows = fwd / calls / (2 * n * k);
    const double moved = calls * e * (rows * k + k * n + rows * n);
    const double t = dev_.gemm(fwd, moved, calls);
    c.forward += t, c.input_grad += t, c.weight_grad += t;  // dX and dW: the forward's FLOPs
    c.gemm += 3 * t, c.gemm_calls += 3 * calls;
    return t;
  }

  // One layer's seconds per microbatch, in four named steps: its linears' GEMMs, the attention
  // core, the memory-bound kernels, and what recompute runs again on the backward's side.
  LayerCost cost(int l) {
    LayerCost c;
    const LinearSeconds linears = linears_cost(c, l);
    const double core_forward = core_cost(c, l);
    memory_cost(c, l);
    recompute_cost(c, l, linears, core_forward);
    return c;
  }

 private:
  // The linears' forwards (the step's dX and dW come with them), and fc1's alone for
  // selective mlp recompute.
  struct LinearSeconds {
    double forward = 0, fc1 = 0;
  };
  LinearSeconds linears_cost(LayerCost& c, int l) const {
    const ModelConfig& m = plan_.model;
    const FlopsPlan& f = plan_.flops;
    const LocalSizes ls = local_sizes(m, plan_.train.micro_batch_size, plan_.tp,
                                      plan_.sequence_parallel);
    LinearSeconds s;
    linear(c, find_row(f, "qkv"), (double)ls.qkv, h_);
    linear(c, find_row(f, "proj"), h_, (double)(ls.heads * ls.head_dim));
    if (!m.moe.is_moe_layer(l)) {
      s.fc1 = linear(c, find_row(f, "fc1"), (double)ls.fc1, h_);
      linear(c, find_row(f, "fc2"), h_, (double)ls.ffn);
    } else {
      const int etp = plan_.parallel.expert_tensor_parallel;
      linear(c, find_row(f, "router"), (double)m.moe.num_experts, h_, 1, 4);  // fp32
      linear(c, find_row(f, "experts.fc1"), (double)m.moe_fc1_size() / etp, h_,
             expert_calls_);
      linear(c, find_row(f, "experts.fc2"), h_, (double)m.moe_ffn() / etp, expert_calls_);
      linear(c, find_row(f, "shared.fc1"), (double)m.shared_fc1_size(), h_);
      linear(c, find_row(f, "shared.fc2"), h_, (double)m.moe.shared_expert_size);
      linear(c, find_row(f, "shared.gate"), 1, h_);
    }
    s.forward = c.forward;  // the linears' alone: nothing else is in c yet
    return s;
  }

  // The attention core: scores and av rows (hardware: naive 3 + 3 products, flash 4 + 3,
  // of which 2 run forward). Per layer. Returns the core's forward seconds.
  double core_cost(LayerCost& c, int l) const {
    const FlopsPlan& f = plan_.flops;
    const MatmulFlops* scores = find_row(f, "scores");
    const MatmulFlops* av = find_row(f, "av");
    const double core = (scores ? scores->hardware : 0) + (av ? av->hardware : 0);
    const double core_layer = scores && scores->layers ? core / scores->layers : 0;
    if (naive_) {  // 6 products as batched GEMMs: 2 forward, 4 backward
      const double product = core_layer / 6;
      const double calls = per_product_calls_;
      const double t = dev_.gemm(product, 0, calls);  // bytes: the softmax's, counted below
      c.core = 6 * t;
      c.forward += 2 * t, c.input_grad += 4 * t;
      c.gemm += 6 * t, c.gemm_calls += 6 * calls;
      return 2 * t;
    }
    // flash: 2 of 7 products forward, 5 backward (QK^T recomputed)
    const double fl = l < (int)traffic_.layer_attention_forward.size()
                          ? (double)traffic_.layer_attention_forward[l].launches : 0;
    const double bl = l < (int)traffic_.layer_attention_backward.size()
                          ? (double)traffic_.layer_attention_backward[l].launches : 0;
    const double forward = dev_.attention(core_layer * 2 / 7, fl);
    const double backward = dev_.attention(core_layer * 5 / 7, bl);
    c.forward += forward, c.input_grad += backward;
    c.attention += forward + backward;
    c.core = forward + backward;
    return forward;
  }

  KernelTraffic traffic_at(const std::vector<KernelTraffic>& v, int l) const {
    return l < (int)v.size() ? v[l] : KernelTraffic{};
  }

  // The memory-bound kernels (the weight-gradient side has none of its own here: they are
  // counted with the input gradient).
  void memory_cost(LayerCost& c, int l) const {
    const KernelTraffic fwd_mem = traffic_at(traffic_.layer_forward, l);
    const KernelTraffic bwd_mem = traffic_at(traffic_.layer_backward, l);
    const double mem_f = dev_.memory(fwd_mem), mem_b = dev_.memory(bwd_mem);
    c.forward += mem_f, c.input_grad += mem_b, c.memory += mem_f + mem_b;
    c.launches += (double)(fwd_mem.launches + bwd_mem.launches);
  }

  // Recompute, on the backward's side: full reruns the forward; selective the core's
  // forward (naive: Q K^T, and P V with a ring's merge) or fc1.
  void recompute_cost(LayerCost& c, int l, const LinearSeconds& linears,
                      double core_forward) const {
    const FlopsPlan& f = plan_.flops;
    const Recompute& rc = plan_.model.recompute;
    const double recomputed =
        l < (int)f.layer_recompute_step.size() ? f.layer_recompute_step[l] : 0;
    if (recomputed <= 0) return;
    const KernelTraffic again = traffic_at(traffic_.layer_recompute, l);
    c.recompute += dev_.memory(again);
    c.launches += (double)again.launches;
    if (rc.full()) {
      c.recompute += linears.forward + core_forward;
    } else {
      if (rc.recompute_core_attn())
        c.recompute += naive_ ? core_forward / 2 * (passes_ > 1 ? 2 : 1) : core_forward;
      if (rc.recompute_mlp()) c.recompute += linears.fc1;
    }
  }

  const Plan& plan_;
  const DeviceCost& dev_;
  const KernelTrafficPlan& traffic_;
  double e_ = 4, h_ = 0, passes_ = 1, per_product_calls_ = 0, expert_calls_ = 1;
  bool naive_ = false;
};

}  // namespace

LayerCost layer_cost(const Plan& plan, const DeviceCost& dev, const KernelTrafficPlan& traffic,
                     int l) {
  return LayerCoster(plan, dev, traffic).cost(l);
}

HeadCost head_cost(const Plan& plan, const DeviceCost& dev,
                   const KernelTrafficPlan& traffic) {
  HeadCost c;
  const ModelConfig& m = plan.model;
  const MatmulFlops* head = find_row(plan.flops, "head");
  if (head) {
    const LocalSizes ls = local_sizes(m, plan.train.micro_batch_size, plan.tp,
                                      plan.sequence_parallel);
    const int64_t chunk = std::min<int64_t>(ls.N, std::max(1, m.cross_entropy_chunk));
    const double chunks = m.fused_cross_entropy ? (double)((ls.N + chunk - 1) / chunk) : 1;
    const double fwd = head->hardware / 3, n = (double)ls.vocab, k = (double)m.hidden_size;
    const double rows = fwd / chunks / (2 * n * k), e = plan.train.half() ? 2 : 4;
    const double t = dev.gemm(fwd, chunks * e * (rows * k + k * n + rows * n), chunks);
    c.forward = t;
    if (m.fused_cross_entropy) c.forward += 2 * t;  // dX and dW inside the forward
    else c.input_grad = t, c.weight_grad = t;
    c.gemm = 3 * t, c.gemm_calls = 3 * chunks;
  }
  const double mf = dev.memory(traffic.head_forward), mb = dev.memory(traffic.head_backward);
  c.forward += mf, c.input_grad += mb, c.memory = mf + mb;
  return c;
}

}  // namespace paralab
