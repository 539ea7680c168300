// plan/expert_parallel.cpp: see expert_parallel.h.
#include "plan/expert_parallel.h"

namespace paralab {

void expert_parallel_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m,
                          const ParallelConfig& p, int B, int e, const MoeRouting& routing,
                          const std::vector<int>& layers, const std::vector<bool>& recomputed,
                          int64_t microbatches, const std::vector<int>& first_microbatch) {
  const int ep = p.expert_parallel, T = p.expert_tensor_parallel, P = ep * T;
  const int64_t h = m.hidden_size, k = m.moe.topk, E = m.moe.num_experts;
  // The aux loss's expert counts summed over cp (model/moe.cpp balancing_counts), at every forward
  // of an MoE layer, as tensor_parallel_comm counts their sum over tp: groups E int32 (groups:
  // the B sequences with seq_aux_loss, else 1), whatever ep.
  const int cp = m.context_parallel.size;
  const Moe& x = m.moe;
  if (cp > 1 && x.enabled() && x.balancing != Moe::Balancing::NONE && x.aux_loss_coeff > 0) {
    const int64_t groups = x.balancing == Moe::Balancing::SEQ_AUX_LOSS ? B : 1;
    for (int l : layers) {
      const int64_t forwards = (recomputed.empty() || !recomputed[l] ? 1 : 2) * microbatches;
      add_comm(comm, CommGroup::CP, CommOp::ALL_REDUCE, cp, forwards, forwards * groups * E * 4);
    }
  }
  if (P <= 1 || layers.empty()) return;
  const CommGroup EP = CommGroup::EP, ETP = CommGroup::ETP, ETP_EP = CommGroup::ETP_EP;
  const CommOp AG = CommOp::ALL_GATHER, RS = CommOp::REDUCE_SCATTER, A2A = CommOp::ALL_TO_ALL_V;
  for (size_t j = 0; j < layers.size(); ++j) {
    const int l = layers[j];
    const int forwards = recomputed.empty() || !recomputed[l] ? 1 : 2;
    const int64_t first = j < first_microbatch.size() ? first_microbatch[j] : 0;
    for (int64_t i = first; i < first + microbatches; ++i) {
      const MoeRows r = moe_layer_rows(m, p, B, routing, l, (int)i);
      const int64_t N = r.N;  // the rank's tokens (B S/cp, over tp under sequence parallelism)
      if (p.token_dispatcher == TokenDispatcher::ALLTOALL) {
        const int64_t M = r.M, R = r.R, Re = r.R_ep;
        // the counts' all-gather, but padded to capacity, where every rank's are known
        if (!(x.pad_to_capacity && x.capacity_factor > 0))
          add_comm(comm, ETP_EP, AG, P, forwards, forwards * P * E * 4);
        if (ep > 1) {  // dispatch rows and gates, combine; backward: dy, then dx and dgates
          add_comm(comm, EP, A2A, ep, 3 * forwards, forwards * (M * h * e + M * 4 + Re * h * e));
          add_comm(comm, EP, A2A, ep, 3, M * h * e + Re * h * e + Re * 4);
        }
        if (T > 1) {  // the blocks' gathers (etp copies) and the partial sums' scatters
          add_comm(comm, ETP, A2A, T, 3 * forwards,
              forwards * (T * Re * h * e + T * Re * 4 + R * h * e));
          add_comm(comm, ETP, A2A, T, 3, T * Re * h * e + R * h * e + R * 4);
        }
      } else {
        add_comm(comm, ETP_EP, AG, P, 3 * forwards,
            forwards * (P * N * h * e + P * N * k * 4 + P * (E + N * k) * 4));
        add_comm(comm, ETP_EP, RS, P, forwards, forwards * P * N * h * e);
        add_comm(comm, ETP_EP, AG, P, 1, P * N * h * e);
        add_comm(comm, ETP_EP, RS, P, 2, P * N * h * e + P * N * k * 4);
      }
    }
  }
  // the gradient norm's expert share: over ep, or etp x ep with the widths split
  add_comm(comm, T > 1 ? ETP_EP : EP, CommOp::ALL_REDUCE, T > 1 ? P : ep, 1, 4);
}

}  // namespace paralab
