// parallel/topology.h: the rank grid and every process group, created once.
//
// The idea (as picotron's process-group manager): the world is one 4-d grid of ranks,
// world = tp x cp x dp x pp, and every group is a slice of it. Rank order is Megatron's
// default, tp fastest, then cp, then dp, then pp:
//
//     rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
//
// so a tensor-parallel group is tp consecutive ranks (the fastest links: one node's GPUs),
// and the pipeline stages are the outermost, slowest-linked, blocks.
//
// The groups (each a partition of the world, members ordered by their grid coordinate):
//   tp         vary tp_rank               column/row-parallel all-reduces (or SP AG/RS)
//   cp         vary cp_rank               ring-attention K/V exchange
//   pp         vary pp_rank               activations forward, gradients backward; the
//                                         previous/next stage wrap around (a ring) so an
//                                         interleaved schedule's last stage reaches stage 0
//   dp         vary dp_rank               data-parallel (replicas at the same cp position)
//   dp_cp      vary dp_rank and cp_rank   the dense-gradient reduction (cp ranks hold the
//                                         same weights, so their gradients sum too)
//   ep         consecutive blocks of ep ranks of the dp_cp group (Megatron's layout):
//              expert-parallel all-to-all (dispatch and combine of tokens)
//   edp        the complement inside dp_cp: ranks with the same ep_rank in different
//              blocks; they hold the same experts and reduce the expert gradients
//   embedding  first and last pipeline stage at the same (tp, cp, dp) position: the tied
//              word-embedding gradient all-reduce. Middle stages form singleton groups,
//              so every rank has one; `in_embedding_group()` says who takes part.
//   world      everyone
// Sizes: |tp| = tp, |cp| = cp, |pp| = pp, |dp| = dp, |dp_cp| = dp*cp, |ep| = ep,
// |edp| = dp*cp/ep, |embedding| = min(pp, 2) (1 in middle stages).
//
// RankLayout is pure (no MPI): tests/test_topology.cpp checks it on many grids, and
// describe_grid prints it for --verbose. Topology is the per-rank object with one
// Communicator per group (creating them is collective over the world).
//
// defines: GridSpec, RankCoord, RankLayout, describe_grid, Topology
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>
#include "measure/comm_stats.h"  // CommGroup
#include "parallel/comm.h"          // Communicator, CommBackend

namespace paralab {

// The sizes of the grid; dp is derived: dp = world / (tp * cp * pp).
struct GridSpec {
  int world = 1;
  int tp = 1;
  int cp = 1;
  int pp = 1;
  int ep = 1;  // carved out of dp x cp: must divide dp * cp
};

struct RankCoord {
  int tp = 0, cp = 0, dp = 0, pp = 0;
};

class RankLayout {
 public:
  // Throws std::invalid_argument, naming the flags, when the sizes do not fit.
  explicit RankLayout(const GridSpec& spec);

  const GridSpec& spec() const { return spec_; }
  int world() const { return spec_.world; }
  int tp() const { return spec_.tp; }
  int cp() const { return spec_.cp; }
  int pp() const { return spec_.pp; }
  int ep() const { return spec_.ep; }
  int dp() const { return dp_; }
  int edp() const { return dp_ * spec_.cp / spec_.ep; }

  int rank_of(const RankCoord& c) const;
  RankCoord coord_of(int rank) const;

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
  int dp_ = 1;
  std::array<std::vector<std::vector<int>>, kNumCommGroups> groups_;
  // which_[g][rank] = index of rank's group in groups_[g]; pos_[g][rank] = its group rank
  std::array<std::vector<int>, kNumCommGroups> which_, pos_;
};

// A readable table of every rank's coordinates and group ranks, e.g. for world 8 =
// tp2 x pp2 x dp2:
//   rank  tp cp dp pp  ep edp   tp group   dp_cp group  ...
std::string describe_grid(const RankLayout& layout);

// This rank's view: its coordinates and one Communicator per group. Groups whose
// membership is identical everywhere (dp and dp_cp when cp == 1, ...) share one
// underlying communicator, so their operations must be posted in the same order on all
// members (SPMD code does) — each still records its stats under its own name.
class Topology {
 public:
  // Collective over the world (after init_world): every rank constructs it with the
  // same arguments; spec.world must be the number of ranks launched. `cuda_stream` (a
  // cudaStream_t; nullptr = kernels::cuda::current_stream()) is the compute stream NCCL
  // operations wait for before they start; set the CUDA device before. A bad grid throws
  // FatalError with code 2.
  Topology(const GridSpec& spec, CommBackend backend, kernels::Device device,
           void* cuda_stream = nullptr);

  const RankLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  const RankCoord& coord() const { return coord_; }

  Communicator& group(CommGroup g) { return *comms_[static_cast<int>(g)]; }
  Communicator& tp() { return group(CommGroup::TP); }
  Communicator& cp() { return group(CommGroup::CP); }
  Communicator& pp() { return group(CommGroup::PP); }
  Communicator& dp() { return group(CommGroup::DP); }
  Communicator& dp_cp() { return group(CommGroup::DP_CP); }
  Communicator& ep() { return group(CommGroup::EP); }
  Communicator& edp() { return group(CommGroup::EDP); }
  Communicator& embedding() { return group(CommGroup::EMBEDDING); }
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
  std::array<std::unique_ptr<Communicator>, kNumCommGroups> comms_;
};

}  // namespace paralab
