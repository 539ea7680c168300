// parallel/topology.h: the rank grids and every process group, created once.
//
// The idea (as picotron's process-group manager and Megatron-Core's RankGenerator): the
// world is a grid of ranks and every group is a slice of it. As in Megatron-Core
// (parallel_state.initialize_model_parallel) the same ranks are laid out on two grids: the
// dense grid, for attention and every layer that is not an expert, and the expert grid,
// for the experts of the MoE layers. In both the first coordinate varies fastest:
//
//   dense grid   world = tp x cp x dp x pp
//                rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
//   expert grid  world = etp x ep x edp x pp
//                rank = etp_rank + etp * (ep_rank + ep * (edp_rank + edp * pp_rank))
//
// (Megatron's order 'tp-cp-ep-dp-pp': the dense grid with ep = 1, the expert grid with
// tp = etp and cp = 1.) So a tensor-parallel group is consecutive ranks (the fastest links:
// one node's GPUs), and the pipeline stages are the outermost, slowest-linked, blocks of
// world / pp ranks. pp is outermost in both grids, so they have the same stages and the
// same pp groups; inside a stage the dense grid splits the world/pp ranks as tp x cp x dp,
// the expert grid as etp x ep x edp. Experts never use context parallelism (a cp rank's
// tokens are just more tokens), so the cp ranks serve as further ep or edp ranks, and etp
// is independent of tp (Megatron's default etp = tp).
//
// The groups (each a partition of the world, members ordered by their grid coordinate):
//   dense grid:
//   tp         vary tp_rank               column/row-parallel all-reduces (or SP AG/RS)
//   cp         vary cp_rank               ring-attention K/V exchange
//   pp         vary pp_rank               activations forward, gradients backward; the
//                                         previous/next stage wrap around (a ring) so an
//                                         interleaved schedule's last stage reaches stage 0
//   dp         vary dp_rank               data-parallel (replicas at the same cp position)
//   dp_cp      vary dp_rank and cp_rank   the dense-gradient reduction (cp ranks hold the
//                                         same weights, so their gradients sum too)
//   expert grid:
//   ep         vary ep_rank               the all-to-all of tokens: dispatch to the ranks
//                                         holding their experts, combine back
//   etp        vary etp_rank              splits each expert's width (its FFN hidden
//                                         size), as tp splits a dense MLP's
//   etp_ep     vary etp_rank and ep_rank  the all-gather of the per-expert token counts,
//              (group rank etp_rank +     and the allgather dispatcher's gathers of the
//               etp * ep_rank)            tokens (reduce-scatters on the way back)
//   edp        vary edp_rank              ranks holding the same expert shard: the expert
//                                         gradients' reduction, the ZeRO shards of the
//                                         expert weights and optimiser states
//   either grid:
//   embedding  first and last pipeline stage at the same (tp, cp, dp) position: the tied
//              word-embedding gradient all-reduce. Middle stages form singleton groups,
//              so every rank has one; `in_embedding_group()` says who takes part.
//   mirror     pp ranks r and pp - 1 - r at the same (tp, cp, dp) position: DualPipe's two
//              ranks holding the same two stages sum their gradients (the middle rank of
//              an odd pp alone)
//   world      everyone
//   pcie       the rank alone: CPU offload's copies to and from its own host memory
//              (parallel/offload.h) are recorded under this name; no collective runs on it
// Sizes: |tp| = tp, |cp| = cp, |pp| = pp, |dp| = dp = world/(tp*cp*pp), |dp_cp| = dp*cp,
// |ep| = ep, |etp| = etp, |etp_ep| = etp*ep, |edp| = edp = world/(etp*ep*pp),
// |embedding| = min(pp, 2) (1 in middle stages), |mirror| = 2 (1 for pp's middle rank).
//
// RankLayout is pure (no MPI): tests/test_topology.cpp checks it on many grids, against a
// re-implementation of Megatron's RankGenerator, and describe_grid prints it for --verbose.
// Topology is the per-rank object with one Communicator per group (creating them is
// collective over the world).
//
// defines: GridSpec, RankCoord, ExpertCoord, RankLayout, describe_grid, Topology
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>
#include "measure/comm_stats.h"  // CommGroup
#include "parallel/comm.h"          // Communicator, CommBackend

namespace paralab {

// The sizes of the grids; dp and edp are derived: dp = world / (tp * cp * pp),
// edp = world / (etp * ep * pp).
struct GridSpec {
  int world = 1;
  int tp = 1;
  int cp = 1;
  int pp = 1;
  int ep = 1;   // expert model parallel
  int etp = 0;  // expert tensor parallel; 0: = tp (Megatron's default)
};

// A rank's place in the dense grid, and in the expert grid (its pp is the same in both).
struct RankCoord {
  int tp = 0, cp = 0, dp = 0, pp = 0;
};
struct ExpertCoord {
  int etp = 0, ep = 0, edp = 0, pp = 0;
};

class RankLayout {
 public:
  // Throws std::invalid_argument, naming the flags, when the sizes do not fit.
  explicit RankLayout(const GridSpec& spec);

  const GridSpec& spec() const { return spec_; }  // etp resolved (never 0)
  int world() const { return spec_.world; }
  int tp() const { return spec_.tp; }
  int cp() const { return spec_.cp; }
  int pp() const { return spec_.pp; }
  int ep() const { return spec_.ep; }
  int etp() const { return spec_.etp; }
  int dp() const { return dp_; }
  int edp() const { return edp_; }

  // The same world rank in either grid's coordinates.
  int rank_of(const RankCoord& c) const;
  RankCoord coord_of(int rank) const;
  int expert_rank_of(const ExpertCoord& c) const;
  ExpertCoord expert_coord_of(int rank) const;

  // Every group of one kind: a partition of the world, each group in group-rank order.
  const std::vector<std::vector<int>>& groups(CommGroup g) const;
  // The group of `rank`, and rank's index (group rank) in it.
  const std::vector<int>& group_of(CommGroup g, int rank) const;
  int group_index(CommGroup g, int rank) const;  // which group of groups(g)
  int index_in(CommGroup g, int rank) const;
  // Pipeline neighbours of `rank` as world ranks (wrapping around the ring of stages).
  int pp_prev_rank(int rank) const;
  int pp_next_rank(int rank) const;
  bool in_embedding_group(int rank) const;

 private:
  GridSpec spec_;
  int dp_ = 1, edp_ = 1;
  std::array<std::vector<std::vector<int>>, kNumCommGroups> groups_;
  // which_[g][rank] = index of rank's group in groups_[g]; pos_[g][rank] = its group rank
  std::array<std::vector<int>, kNumCommGroups> which_, pos_;
};

// A readable description: both grids and their rank formulas, a table of every rank's
// coordinates in both, e.g. for world 8 = tp2 x pp2 x dp2,
//   rank   tp  cp  dp  pp   etp  ep edp   pp_prev pp_next
// then every group kind's groups.
std::string describe_grid(const RankLayout& layout);

// This rank's view: its coordinates and one Communicator per group. Groups whose
// membership is identical everywhere (dp and dp_cp when cp == 1, etp and tp when
// etp == tp, ...) share one underlying communicator, so their operations must be posted
// in the same order on all members (SPMD code does) — each still records its stats under
// its own name.
class Topology {
 public:
  // Collective over the world (after init_world): every rank constructs it with the
  // same arguments; spec.world must be the number of ranks launched. `cuda_stream` (a
  // cudaStream_t; nullptr = kernels::cuda_current_stream()) is the compute stream NCCL
  // operations wait for before they start; set the CUDA device before. A bad grid throws
  // FatalError with code 2.
  Topology(const GridSpec& spec, CommBackend backend, kernels::Device device,
           void* cuda_stream = nullptr);

  const RankLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  const RankCoord& coord() const { return coord_; }
  const ExpertCoord& expert_coord() const { return expert_coord_; }

  Communicator& group(CommGroup g) { return *comms_[static_cast<int>(g)]; }
  Communicator& tp() { return group(CommGroup::TP); }
  Communicator& cp() { return group(CommGroup::CP); }
  Communicator& pp() { return group(CommGroup::PP); }
  Communicator& dp() { return group(CommGroup::DP); }
  Communicator& dp_cp() { return group(CommGroup::DP_CP); }
  Communicator& ep() { return group(CommGroup::EP); }
  Communicator& etp() { return group(CommGroup::ETP); }
  Communicator& etp_ep() { return group(CommGroup::ETP_EP); }
  Communicator& edp() { return group(CommGroup::EDP); }
  Communicator& embedding() { return group(CommGroup::EMBEDDING); }
  Communicator& mirror() { return group(CommGroup::MIRROR); }
  Communicator& world() { return group(CommGroup::WORLD); }

  // Pipeline neighbours as ranks *in the pp group* (= stage index), for send/recv.
  int pp_prev() const { return (coord_.pp + layout_.pp() - 1) % layout_.pp(); }
  int pp_next() const { return (coord_.pp + 1) % layout_.pp(); }
  bool is_first_stage() const { return coord_.pp == 0; }
  bool is_last_stage() const { return coord_.pp == layout_.pp() - 1; }
  bool in_embedding_group() const { return layout_.in_embedding_group(rank_); }

 private:
  RankLayout layout_;
  int rank_;
  RankCoord coord_;
  ExpertCoord expert_coord_;
  std::array<std::unique_ptr<Communicator>, kNumCommGroups> comms_;
};

}  // namespace paralab
