// plan/fit.cpp: see fit.h.
#include "plan/fit.h"
#include <stdexcept>

namespace paralab {

namespace {

int64_t peak_of(const Plan& plan, int* rank) {
  int64_t peak = 0;
  for (const RankPlan& r : plan.ranks)
    if (r.memory.total() > peak) {
      peak = r.memory.total();
      if (rank) *rank = r.rank;
    }
  return peak;
}

// The plan of a changed configuration fits; false too when the change is not a valid
// configuration (make_plan refuses it).
bool fits_with(const Plan& plan, const TrainConfig& t, const ParallelConfig& p,
               double capacity) {
  try {
    const Plan changed = make_plan(plan.model, t, p, plan.options);
    return (double)peak_of(changed, nullptr) <= capacity;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

int64_t node_host_bytes(const Plan& plan, int ranks_per_node, int node) {
  const int r = ranks_per_node > 0 ? ranks_per_node : 1;
  int64_t sum = 0;
  for (int q = node * r; q < (node + 1) * r && q < (int)plan.ranks.size(); ++q)
    sum += plan.ranks[q].memory.host.total();
  return sum;
}

void check_host_fit(FitCheck& f, const Plan& plan, int ranks_per_node, double capacity_bytes,
                    const std::string& source) {
  f.ranks_per_node = ranks_per_node > 0 ? ranks_per_node : 1;
  f.host_capacity_bytes = capacity_bytes;
  f.host_capacity_source = source;
  const int nodes = ((int)plan.ranks.size() + f.ranks_per_node - 1) / f.ranks_per_node;
  for (int n = 0; n < nodes; ++n) {
    const int64_t bytes = node_host_bytes(plan, f.ranks_per_node, n);
    if (bytes > f.host_node_bytes) f.host_node_bytes = bytes, f.host_node = n;
  }
}

FitCheck check_fit(const Plan& plan, double capacity_bytes, const std::string& source,
                   bool suggest) {
  FitCheck f;
  f.capacity_bytes = capacity_bytes;
  f.capacity_source = source;
  f.peak_bytes = peak_of(plan, &f.peak_rank);
  if (!suggest || f.fits()) return f;
  const ModelConfig& m = plan.model;
  for (int mb = plan.train.micro_batch_size - 1; mb >= 1 && !f.largest_micro_batch; --mb) {
    if (plan.global_batch % ((int64_t)mb * plan.dp) != 0) continue;
    TrainConfig t = plan.train;
    t.micro_batch_size = mb;
    t.global_batch_size = (int)plan.global_batch;
    if (fits_with(plan, t, plan.parallel, capacity_bytes)) f.largest_micro_batch = mb;
  }
  for (int z = 0; z <= 3 && f.smallest_zero_stage < 0; ++z) {
    if (z == plan.parallel.zero_stage) continue;
    ParallelConfig p = plan.parallel;
    p.zero_stage = z;
    if (fits_with(plan, plan.train, p, capacity_bytes)) f.smallest_zero_stage = z;
  }
  const int world = plan.parallel.world_size;
  const int outer = plan.cp * plan.pipeline.shape.p;
  for (int tp = 1; tp * outer <= world && !f.smallest_tp; tp *= 2) {
    if (tp == plan.tp || world % (tp * outer) != 0) continue;
    if (m.num_attention_heads % tp != 0 || m.groups() % tp != 0) continue;
    ParallelConfig p = plan.parallel;
    p.tensor_parallel = tp;
    if (p.expert_tensor_parallel == plan.tp) p.expert_tensor_parallel = tp;  // etp follows tp
    if (tp == 1) p.sequence_parallel = false;
    if (fits_with(plan, plan.train, p, capacity_bytes)) f.smallest_tp = tp;
  }
  return f;
}

}  // namespace paralab
