// plan/time_model_comm.cpp: see time_model_comm.h and time_model.h.
#include "plan/time_model_comm.h"
#include <algorithm>

namespace paralab {

namespace {

// A group's members at rank stride `stride`, `size` of them (parallel/topology.h's grids:
// dense rank = tp + t (cp + c (dp + d pp)), expert rank = etp + e (ep + p_e (edp + ...))).
struct GroupShape {
  int stride = 1, size = 1;
};

GroupShape group_shape(const Plan& plan, CommGroup g) {
  const int tp = plan.tp, cp = plan.cp, dp = plan.dp, world = plan.parallel.world_size;
  const int pp = plan.pipeline.shape.p;
  const int ep = plan.parallel.expert_parallel, etp = plan.parallel.expert_tensor_parallel;
  switch (g) {
    case CommGroup::TP: return {1, tp};
    case CommGroup::CP: return {tp, cp};
    case CommGroup::DP: return {tp * cp, dp};
    case CommGroup::DP_CP: return {tp, cp * dp};
    case CommGroup::PP: return {world / pp, pp};
    case CommGroup::EP: return {etp, ep};
    case CommGroup::ETP: return {1, etp};
    case CommGroup::ETP_EP: return {1, etp * ep};
    case CommGroup::EDP: return {etp * ep, world / (pp * etp * ep)};
    case CommGroup::EMBEDDING:  // first and last stage
    case CommGroup::MIRROR:     // pp ranks r and pp - 1 - r: the widest, 0 and pp - 1
      return {world / pp * std::max(1, pp - 1), 2};
    default: return {1, world};
  }
}

bool in_layers(CommGroup g) {  // called inside the layers' forward and backward
  return g == CommGroup::TP || g == CommGroup::CP || g == CommGroup::EP ||
         g == CommGroup::ETP || g == CommGroup::ETP_EP;
}
bool data_parallel(CommGroup g) {
  return g == CommGroup::DP || g == CommGroup::DP_CP || g == CommGroup::EDP;
}

// calls x latency + bus bytes / bandwidth on the group's link; CPU offload's copies on the
// GPU's link to host memory.
GroupTime cost(const Plan& plan, const HardwareProfile& hw, const CommPlanEntry& e) {
  GroupTime t;
  t.group = e.group, t.op = e.op, t.calls = e.calls, t.bus_bytes = e.bus_bytes;
  if (e.group == CommGroup::PCIE) {
    t.bandwidth_gbs = hw.pcie_gbs, t.latency_us = hw.pcie_latency_us;
    t.seconds = (double)e.calls * t.latency_us * 1e-6 +
                (t.bandwidth_gbs > 0 ? e.bus_bytes / (t.bandwidth_gbs * 1e9) : 0);
    return t;
  }
  const GroupShape shape = group_shape(plan, e.group);
  t.intra_node = group_fits_node(shape.stride, shape.size, hw.gpus_per_node);
  t.bandwidth_gbs = t.intra_node ? hw.intra_node_gbs : hw.inter_node_gbs;
  t.latency_us = t.intra_node ? hw.collective_latency_us : hw.inter_node_latency_us;
  t.seconds = (double)e.calls * t.latency_us * 1e-6 +
              (t.bandwidth_gbs > 0 ? e.bus_bytes / (t.bandwidth_gbs * 1e9) : 0);
  return t;
}

// What of t hides behind `budget` seconds of compute: at least one call (the last bucket,
// the first gather) is exposed, the rest as far as the compute lasts.
void overlap(GroupTime& t, double budget, const char* how) {
  const double one = t.calls > 0 ? t.seconds / (double)t.calls : 0;
  t.exposed = std::max(one, t.seconds - budget);
  t.overlap = how;
}

}  // namespace

CommTime project_comm_time(const Plan& plan, const HardwareProfile& hw,
                           const std::vector<StageTime>& stages,
                           const std::vector<RankCompute>& ranks) {
  CommTime out;
  const int p = plan.pipeline.shape.p;
  const double k = (double)plan.microbatches_per_rank;
  const int zero = plan.parallel.zero_stage;
  const PlanOptions& o = plan.options;
  out.per_action_forward.assign(stages.size(), 0);
  out.per_action_backward.assign(stages.size(), 0);
  // one pp message: the activation (or its gradient) of one microbatch
  {
    CommPlanEntry message;
    message.group = CommGroup::PP, message.op = CommOp::SEND_RECV, message.calls = 1;
    message.bus_bytes = (double)plan.pipeline.message_bytes;
    out.message_seconds = p > 1 ? cost(plan, hw, message).seconds : 0;
  }
  for (int s = 0; s < p; ++s) {
    const std::vector<CommPlanEntry>& entries =
        plan.pipeline.stages.empty() ? plan.comm : plan.pipeline.stages.at(s).comm;
    const RankCompute& rc = ranks.at(s);
    double in_layer = 0, after = 0;
    // CPU offload's copies hide behind the dp reductions and gathers (the rows before them)
    GroupTime reductions, gathers;
    for (const CommPlanEntry& e : entries) {
      if (!data_parallel(e.group)) continue;
      const GroupTime t = cost(plan, hw, e);
      GroupTime& sum = e.op == CommOp::ALL_GATHER ? gathers : reductions;
      if (e.op == CommOp::ALL_GATHER || e.op == CommOp::REDUCE_SCATTER ||
          (e.op == CommOp::ALL_REDUCE && zero == 0))
        sum.seconds += t.seconds, sum.calls += t.calls;
    }
    auto beside = [](const GroupTime& other) {  // all of it but one call
      return other.calls > 0 ? other.seconds - other.seconds / (double)other.calls : 0.0;
    };
    for (const CommPlanEntry& e : entries) {
      GroupTime t = cost(plan, hw, e);
      t.exposed = t.seconds, t.overlap = "blocking";
      if (e.group == CommGroup::CP && e.op == CommOp::SEND_RECV) {
        // the ring: each hop's transfer runs during a block's attention (cp - 1 of cp)
        overlap(t, rc.attention * (plan.cp - 1) / plan.cp, "ring overlaps the attention");
      } else if (e.group == CommGroup::PP && e.op == CommOp::SEND_RECV) {
        t.exposed = 0, t.overlap = "in the schedule simulation (bubble)";
      } else if (data_parallel(e.group) && e.op == CommOp::ALL_REDUCE && zero == 0 &&
                 o.overlap_grad_reduce) {
        overlap(t, rc.last_backward, "--overlap-grad-reduce");
      } else if (data_parallel(e.group) && e.op == CommOp::REDUCE_SCATTER &&
                 o.overlap_grad_reduce) {
        // stage 1: once, during the last backward; 2-3: every microbatch, during its own
        overlap(t, zero >= 2 ? k * rc.last_backward : rc.last_backward,
                "--overlap-grad-reduce");
      } else if (data_parallel(e.group) && e.op == CommOp::ALL_GATHER && zero == 3 &&
                 o.zero3_prefetch_layers >= 1) {
        overlap(t, rc.total, "ZeRO-3 prefetch");
      } else if (data_parallel(e.group) && e.op == CommOp::ALL_GATHER && zero < 3 &&
                 o.overlap_param_gather) {
        overlap(t, rc.first_forward, "--overlap-param-gather");
      } else if (e.group == CommGroup::PCIE && e.op == CommOp::DEVICE_TO_HOST) {
        overlap(t, beside(reductions), "beside the next bucket's reduction");
      } else if (e.group == CommGroup::PCIE && !plan.data_parallel.params_on_host &&
                 (zero == 1 || zero == 2)) {
        overlap(t, beside(gathers), "beside the previous bucket's all-gather");
      } else if (e.group == CommGroup::PCIE) {
        t.overlap = plan.data_parallel.params_on_host ? "before each gather, on the compute stream"
                                                      : "blocking (no gather to hide behind)";
      }
      if (in_layers(e.group)) in_layer += t.exposed;
      else after += t.exposed;
      if (s == 0) out.groups.push_back(t);
    }
    // The layers' collectives: spread over the rank's actions, a third in each forward and
    // two thirds in each backward (a backward makes about twice a forward's calls). The
    // rank's chunks each run k microbatches (DualPipe's k/2).
    const PipelineShape& sh = plan.pipeline.shape;
    const double runs = sh.placement() == StagePlacement::MIRRORED ? k / 2 : k;
    const double per_action = runs > 0 ? in_layer / (runs * rc.chunks) : 0;
    for (int c = 0; c < rc.chunks; ++c) {
      const size_t stage = (size_t)sh.stage_of(s, c);
      if (stage >= stages.size()) continue;
      out.per_action_forward[stage] += per_action / 3;
      out.per_action_backward[stage] += per_action * 2 / 3;
    }
    out.after_pipeline_seconds = std::max(out.after_pipeline_seconds, after);
  }
  out.assumptions.push_back(
      "collective = calls x latency + bus bytes / link bandwidth (nccl-tests bus bandwidth); "
      "in a node when stride x size <= " + std::to_string(hw.gpus_per_node) + " ranks");
  out.assumptions.push_back(
      "tp, cp, ep collectives: a third of a layer's in its forward, two thirds in its backward");
  out.assumptions.push_back(
      "an overlapped collective exposes at least one call (the last bucket, the first gather)");
  return out;
}

}  // namespace paralab
