// plan/expert_parallel.h: the communication of expert parallelism on one rank, one step
// (the dispatchers' tables of collectives, parallel/expert_parallel_alltoall.cpp and
// parallel/expert_parallel_allgather.cpp, evaluated at the rows of each MoE
// layer and microbatch: the configuration's, or the routing a run measured).
//
// Per MoE layer and microbatch (e the storage bytes, M the rows the rank's tokens send, R the
// rows its experts run, R_ep the rows it received over ep (its block; R = R_ep at etp 1),
// N its tokens (B S/cp, or B S/cp / tp under sequence parallelism), k top-k, E experts,
// P = etp ep), forward (twice when full recompute runs the layer again) and backward:
//   alltoall   etp_ep all-gather    P E 4                       forward (the counts; not
//                                                                padded to capacity)
//              ep all-to-all-v      M h e, M 4, R_ep h e        forward (dispatch, gates,
//                                                                combine), at ep > 1
//                                   M h e, R_ep h e, R_ep 4     backward
//              etp all-to-all-v     etp R_ep h e, etp R_ep 4,   forward, at etp > 1 (the
//                                   R h e                        blocks gathered, the partial
//                                                                outputs summed back)
//                                   etp R_ep h e, R h e, R 4    backward
//   allgather  etp_ep all-gather    P N h e, P N k 4, P (E + N k) 4   forward
//                                   P N h e                     backward
//              etp_ep reduce-scatter P N h e                    forward
//                                   P N h e, P N k 4            backward
// Plus, per step, the gradient norm's expert share summed over ep (etp_ep at etp > 1): one
// fp32 all-reduce. Under context parallelism with the aux loss, whatever ep, a cp all-reduce
// of the expert counts per MoE layer and forward (twice with full recompute): groups E 4
// (groups: B with seq_aux_loss, else 1; tp's sum of them is in tensor_parallel_comm).
// With padding to capacity M = R_ep = E min(C, N), R = etp M exactly; dropless M = N k
// exactly and R, R_ep are the routing's (the plan's value is the uniform expectation R_ep =
// M, labelled as one).
//
// defines: expert_parallel_comm
#pragma once
#include <vector>
#include "plan/plan.h"

namespace paralab {

// Adds to `comm` the step's expert-parallel calls of a rank holding the MoE layers `layers`
// (global indices), `recomputed[l]` true where full recompute runs layer l's forward again;
// microbatches through each layer per step, from first_microbatch[j] for layers[j] (empty: 0;
// DualPipe's copy of a layer runs one direction's half); act_bytes the storage bytes. Nothing
// at ep 1 but cp's counts.
void expert_parallel_comm(std::vector<CommPlanEntry>& comm, const ModelConfig& m,
                          const ParallelConfig& p, int B, int act_bytes,
                          const MoeRouting& routing, const std::vector<int>& layers,
                          const std::vector<bool>& recomputed, int64_t microbatches,
                          const std::vector<int>& first_microbatch = {});

}  // namespace paralab
