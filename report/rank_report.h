// report/rank_report.h: the report's view of every rank (a pipeline's stages differ:
// their layers, memory, messages and idle time), each measured beside its own prediction.
//
//   rank_memory_table  rank, pp stage, predicted and measured peak bytes per category
//                      that differs between stages (params, grads, activations, total)
//   ranks_json         --metrics-jsonl's "ranks": per rank its memory and communication,
//                      measured and predicted, its measured bubble
//   measured_timeline  the executor's action timings as a Simulation, so report/
//                      timeline draws (--print-schedule) and traces (--trace) the measured
//                      step like the simulated one
//   measured_costs     mean F, B, W milliseconds per model stage: the simulation with
//                      these costs predicts the next step's bubble
//   measured_trace     the same as Chrome trace spans (--trace while training)
// Measured bubble of a rank = its idle time (run time minus time inside its actions) over
// the run time of the pipeline; overall = sum of idle / (p x the longest run), as the
// simulation defines it (parallel/pipeline_schedule.h).
//
// defines: RankMetrics, rank_memory_table, ranks_json, measured_timeline, fill_bubbles,
//          measured_costs, measured_trace
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>
#include "measure/comm_stats.h"
#include "report/json.h"
#include "measure/ledger.h"
#include "plan/plan.h"
#include "report/timeline.h"  // TraceSpan, TraceFlow
#include "parallel/pipeline_schedule.h"

namespace paralab {

// One rank's measurements of a step.
struct RankMetrics {
  int rank = 0;
  std::array<int64_t, kNumMemoryCategories> memory_bytes{};  // ledger peaks of the step
  int64_t peak_memory_bytes = 0;
  double hardware_flops = 0;  // the kernels' FLOP counter
  CommStats comm;             // the step's record
  // The pipeline executor's (parallel/pipeline_parallel.h), seconds from the rank's start.
  std::vector<ActionTiming> actions, exchanges;
  double run_seconds = 0;
  double busy_seconds() const;  // inside its actions
  // Set on rank 0 by fill_bubbles (-1: none): its idle over its pipeline's step (the longest
  // run of the ranks it exchanges with), and its stage's idle over the step in the schedule
  // simulated with the measured costs.
  double bubble = -1, bubble_predicted = -1;
};

std::string rank_memory_table(const Plan& plan, const std::vector<RankMetrics>& ranks);
void ranks_json(JsonWriter& j, const Plan& plan, const std::vector<RankMetrics>& ranks);

// stages: the ranks of one pipeline (one tp, dp position), in pp order.
Simulation measured_timeline(const std::vector<const RankMetrics*>& stages);
// Every rank's bubble, measured and predicted: pipeline_of[r] names world rank r's pipeline
// (its tp, cp, dp position), pp_rank_of[r] its stage; predicted: the simulated schedule.
void fill_bubbles(std::vector<RankMetrics>& ranks, const std::vector<int>& pipeline_of,
                  const std::vector<int>& pp_rank_of, const Simulation& predicted);
ActionCosts measured_costs(const Schedule& schedule,
                           const std::vector<const RankMetrics*>& stages);
// The measured step as Chrome trace spans (report/timeline.h's writer): every action
// and idle gap on the compute lane, every exchange (one batched send/recv) on the
// send/recv lane, flows from each send to its receiving action; microseconds.
void measured_trace(const Schedule& schedule, const Simulation& measured,
                    const std::vector<const RankMetrics*>& stages, std::vector<TraceSpan>* spans,
                    std::vector<TraceFlow>* flows);

}  // namespace paralab
