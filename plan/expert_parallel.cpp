// plan/expert_parallel.cpp: see expert_parallel.h.
#include "plan/expert_parallel.h"

namespace paralab {

namespace {
void add(std::vector<CommPlanEntry>& comm, CommGroup g, CommOp op, int n, int64_t calls,
         int64_t payload) {
  if (calls == 0) return;
  for (CommPlanEntry& e : comm)
    if (e.group == g && e.op == op) {
      e.calls += calls;
      e.payload_bytes += payload;
      e.bus_bytes += bus_factor(op, n) * (double)payload;
      return;
    }
  comm.push_back({g, op, calls, payload, bus_factor(op, n) * (double)payload});
}
}  // namespace

void expert_parallel_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m,
                          const ParallelConfig& p, int B, int e, const MoeRouting& routing,
                          const std::vector<int>& layers, const std::vector<bool>& recomputed,
                          int64_t microbatches) {
  const int ep = p.expert_parallel;
  if (ep <= 1 || layers.empty()) return;
  const int64_t h = m.hidden_size, k = m.moe.topk, E = m.moe.num_experts;
  const CommGroup EP = CommGroup::EP, ETP_EP = CommGroup::ETP_EP;
  const CommOp AG = CommOp::ALL_GATHER, RS = CommOp::REDUCE_SCATTER, A2A = CommOp::ALL_TO_ALL_V;
  for (int l : layers) {
    const int forwards = recomputed.empty() || !recomputed[l] ? 1 : 2;
    for (int64_t i = 0; i < microbatches; ++i) {
      const MoeRows r = moe_layer_rows(m, p, B, routing, l, (int)i);
      const int64_t N = r.N;  // the rank's tokens (B S / tp under sequence parallelism)
      if (p.token_dispatcher == TokenDispatcher::ALLTOALL) {
        add(comm, ETP_EP, AG, ep, forwards, forwards * ep * E * 4);
        add(comm, EP, A2A, ep, 3 * forwards,
            forwards * (r.M * h * e + r.M * 4 + r.R * h * e));
        add(comm, EP, A2A, ep, 3, r.M * h * e + r.R * h * e + r.R * 4);
      } else {
        add(comm, ETP_EP, AG, ep, 3 * forwards,
            forwards * (ep * N * h * e + ep * N * k * 4 + ep * (E + N * k) * 4));
        add(comm, ETP_EP, RS, ep, forwards, forwards * ep * N * h * e);
        add(comm, ETP_EP, AG, ep, 1, ep * N * h * e);
        add(comm, ETP_EP, RS, ep, 2, ep * N * h * e + ep * N * k * 4);
      }
    }
  }
  add(comm, EP, CommOp::ALL_REDUCE, ep, 1, 4);  // the gradient norm's expert share
}

}  // namespace paralab
