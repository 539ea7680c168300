// plan/context_parallel.cpp: see context_parallel.h.
#include "plan/context_parallel.h"

namespace paralab {

namespace {
void add(std::vector<CommPlanEntry>& comm, CommOp op, int n, int64_t calls, int64_t payload) {
  if (calls == 0) return;
  for (CommPlanEntry& e : comm)
    if (e.group == CommGroup::CP && e.op == op) {
      e.calls += calls;
      e.payload_bytes += payload;
      e.bus_bytes += bus_factor(op, n) * (double)payload;
      return;
    }
  comm.push_back({CommGroup::CP, op, calls, payload, bus_factor(op, n) * (double)payload});
}
}  // namespace

void context_parallel_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m, int B,
                           int e, int tp, const std::vector<int>& layers,
                           const std::vector<bool>& recomputed, int64_t microbatches) {
  const CpSpec& cp = m.context_parallel;
  const int c = cp.size;
  if (c == 1) return;
  const int64_t S = m.seq_length / c, d = m.head_dim();
  const int64_t a = m.num_attention_heads / tp, g = m.groups() / tp;
  const int64_t K = (int64_t)B * g * S * d * e, Q = (int64_t)B * a * S * d * e;
  const bool core_again = m.recompute.recompute_core_attn();
  for (int l : layers) {
    const bool full_again = !recomputed.empty() && recomputed[l];
    // forwards of the core: the step's, and a recompute's (full: the whole layer's;
    // selective core_attn: the core's, without a2a's output exchange)
    const int64_t forwards = 1 + (full_again || core_again ? 1 : 0);
    const int64_t outputs = 1 + (full_again ? 1 : 0);
    const int64_t k = microbatches;
    switch (cp.type) {
      case CpCommType::P2P:
        add(comm, CommOp::SEND_RECV, c, k * (forwards + 2) * (c - 1),
            k * (forwards + 2) * (c - 1) * 2 * K);
        break;
      case CpCommType::ALL_GATHER:
        add(comm, CommOp::ALL_GATHER, c, k * 2 * (forwards + 1), k * 2 * (forwards + 1) * c * K);
        add(comm, CommOp::REDUCE_SCATTER, c, k * 2, k * 2 * c * K);
        break;
      case CpCommType::A2A:
        add(comm, CommOp::ALL_TO_ALL, c, k * (3 * forwards + outputs + 4),
            k * (forwards * (Q + 2 * K) + outputs * Q + 2 * Q + 2 * K));
        break;
    }
  }
}

AttentionPairs cp_attention_pairs(const ModelConfig& m, int tp) {
  const CoreShape s = plan_core_shape(m, 1, tp);
  const CpSpec& cp = m.context_parallel;
  AttentionPairs p;
  const double per_head = cp.type == CpCommType::A2A && cp.size > 1 ? 1.0 / cp.size : 1.0;
  for (const CorePass& pass : core_passes(s, cp)) {
    double causal = 0;
    for (int i = 0; i < pass.blk.q.rows; ++i) causal += pass.blk.visible(i);
    p.causal += causal * per_head;
    p.scored += (double)pass.blk.q.rows * pass.blk.k.rows * per_head;
  }
  return p;
}

}  // namespace paralab
