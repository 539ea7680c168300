// plan/context_parallel.cpp: see context_parallel.h.
#include "plan/context_parallel.h"

namespace paralab {

std::vector<CpExchange> cp_layer_exchanges(const ModelConfig& m, int B, int e, int tp) {
  const CpSpec& cp = m.context_parallel;
  const int c = cp.size;
  if (c == 1) return {};
  const int64_t S = m.seq_length / c, d = m.head_dim();
  const int64_t a = m.num_attention_heads / tp, g = m.groups() / tp;
  // one of K, V (B g S d e bytes), and q or o (B a S d e)
  const int64_t K = (int64_t)B * g * S * d * e, Q = (int64_t)B * a * S * d * e;
  using X = CpExchange;
  switch (cp.type) {
    case CpCommType::P2P:
      return {{X::FORWARD, CommOp::SEND_RECV, "K, V blocks", c - 1, (c - 1) * 2 * K},
              {X::BACKWARD, CommOp::SEND_RECV, "K, V blocks", c - 1, (c - 1) * 2 * K},
              {X::BACKWARD, CommOp::SEND_RECV, "dK, dV accumulators", c - 1, (c - 1) * 2 * K}};
    case CpCommType::ALL_GATHER:
      return {{X::FORWARD, CommOp::ALL_GATHER, "K, V", 2, 2 * c * K},
              {X::BACKWARD, CommOp::ALL_GATHER, "K, V", 2, 2 * c * K},
              {X::BACKWARD, CommOp::REDUCE_SCATTER, "dK, dV", 2, 2 * c * K}};
    case CpCommType::A2A:
      return {{X::FORWARD, CommOp::ALL_TO_ALL, "q, k, v", 3, Q + 2 * K},
              {X::OUTPUT, CommOp::ALL_TO_ALL, "o", 1, Q},
              {X::BACKWARD, CommOp::ALL_TO_ALL, "dO in; dq, dk, dv out", 4, 2 * Q + 2 * K}};
  }
  return {};
}

void context_parallel_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m, int B,
                           int e, int tp, const std::vector<int>& layers,
                           const std::vector<bool>& recomputed, int64_t microbatches) {
  const std::vector<CpExchange> exchanges = cp_layer_exchanges(m, B, e, tp);
  const int c = m.context_parallel.size;
  const bool core_again = m.recompute.recompute_core_attn();
  for (int l : layers) {
    const bool full_again = !recomputed.empty() && recomputed[l];
    // forwards of the core: the step's, and a recompute's (full: the whole layer's;
    // selective core_attn: the core's, without a2a's output exchange)
    const int64_t forwards = 1 + (full_again || core_again ? 1 : 0);
    const int64_t outputs = 1 + (full_again ? 1 : 0);
    for (const CpExchange& x : exchanges) {
      const int64_t times = microbatches * (x.phase == CpExchange::FORWARD  ? forwards
                                            : x.phase == CpExchange::OUTPUT ? outputs
                                                                            : 1);
      add_comm(comm, CommGroup::CP, x.op, c, times * x.calls, times * x.payload_bytes);
    }
  }
}

AttentionPairs cp_attention_pairs(const ModelConfig& m, int tp) {
  const CoreShape s = plan_core_shape(m, 1, tp);
  const CpSpec& cp = m.context_parallel;
  AttentionPairs p;
  const double per_head = cp.type == CpCommType::A2A && cp.size > 1 ? 1.0 / cp.size : 1.0;
  for (const CorePass& pass : core_passes(s, cp)) {
    p.causal += (double)kernels::visible_pairs(pass.blk) * per_head;
    p.scored += (double)pass.blk.q.rows * pass.blk.k.rows * per_head;
  }
  return p;
}

}  // namespace paralab
