// plan/pipeline_impl.h: what plan/pipeline.cpp (plan_pipeline, its named steps) and
// plan/pipeline_replay.cpp (each stage's calls and peak, replayed over its actions) share.
// Internal to plan/: plan.h is the interface.
//
// defines: StageChunks, stage_step_calls, stage_total_peak
#pragma once
#include <vector>
#include "plan/plan.h"
#include "plan/recompute.h"  // ChunkActivations

namespace paralab {

// One pp rank's chunks as the replays read them.
struct StageChunks {
  std::vector<std::vector<int>> units;   // per chunk: its units, ascending
  std::vector<std::vector<int>> groups;  // per chunk: each layer's full-recompute group
  // per microbatch set (Plan::layer_footprints), per chunk: one (microbatch, chunk)'s bytes
  // when its B is whole, and when its B is split (the schedule's W later; empty when the
  // schedule splits none)
  std::vector<std::vector<ChunkActivations>> whole, split;
  int embedding_unit = -1, head_unit = -1;  // local units (-1: not on this rank)
  bool tied_here = false;  // gpt with both ends here: the head reads the embedding's table
  const ChunkActivations& of(const Action& a) const {
    const bool w = a.type == ActionType::W || (a.type == ActionType::B && a.split);
    const auto& sets = w ? split : whole;
    return sets.at(a.microbatch % sets.size()).at(a.chunk);
  }
};

// A stage's calls over the whole step, as model/transformer.cpp makes them while the
// executor runs the rank's list (plan/pipeline_replay.cpp).
std::vector<DpCall> stage_step_calls(const std::vector<Action>& actions, const StageChunks& sc,
                                     bool fused);
// The peak of a stage's total, replayed over its actions (plan/pipeline_replay.cpp).
int64_t stage_total_peak(const std::vector<Action>& actions, const StageChunks& sc,
                         const MemoryPlan& mem, int S, const ModelConfig& m, int B, bool half,
                         int tp, bool sp, int act, int64_t grad_recv,
                         const WorkspacePhases& transients);

}  // namespace paralab
