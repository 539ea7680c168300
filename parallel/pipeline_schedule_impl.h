// parallel/pipeline_schedule_impl.h: what the schedule's files share (pipeline_schedule.cpp:
// the shapes, checks and exchanges; pipeline_generators.cpp: one list per rank for each
// schedule; pipeline_simulation.cpp: the simulation and the closed forms). Internal to
// parallel/: pipeline_schedule.h is the interface.
//
// defines: make_action, rank_actions, post_by_timeline, slot_indices, type_name
#pragma once
#include <vector>
#include "parallel/pipeline_schedule.h"

namespace paralab {

// Action `type` of microbatch i on chunk c of rank r, with the messages it implies (its
// model stage from the placement; the previous and next stage's ranks for this microbatch).
Action make_action(ActionType type, int microbatch, int chunk, int rank,
                   const PipelineShape& sh);
// Rank r's list for the shape's schedule, slots numbered (pipeline_generators.cpp).
std::vector<Action> rank_actions(const PipelineShape& sh, int rank);
const char* type_name(ActionType t);  // "F", "B", "W"
// Sets every remote message's exchange and order from the simulated timeline (exchanges()'
// comment in pipeline_schedule.h): the V and mirrored schedules.
void post_by_timeline(Schedule& s);
// The running index of each action's slot in a rank's list (a new slot where Action::slot
// changes from the action before): exchanges' and Exchange::before_slot's numbering.
std::vector<int> slot_indices(const std::vector<Action>& acts);

}  // namespace paralab
