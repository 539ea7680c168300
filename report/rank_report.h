// report/rank_report.h: the report's view of every rank (a pipeline's stages differ:
// their layers, memory, messages and idle time), each measured beside its own prediction.
//
//   rank_memory_table  per rank (pp, tp, dp), a predicted and a measured row of every
//                      ledger category's peak and of the total's (the peak of the sum)
//   ranks_json         --metrics-jsonl's "ranks": per rank its memory and communication,
//                      measured and predicted, its measured bubble
//   measured_timeline  the executor's action timings as a Simulation, so report/
//                      timeline draws (--print-schedule) and traces (--trace) the measured
//                      step like the simulated one
//   measured_costs     mean F, B, W milliseconds per model stage: the simulation with
//                      these costs predicts the next step's bubble
//   measured_trace     every world rank's step as Chrome trace spans (--trace while
//                      training; rank_trace.cpp): actions, collectives, pp messages
//   measured_timelines every pipeline's measured timeline (--print-schedule)
// Measured bubble of a rank = its idle time (run time minus time inside its actions) over
// the run time of the pipeline; overall = sum of idle / (p x the longest run), as the
// simulation defines it (parallel/pipeline_schedule.h).
//
// defines: RankMetrics, rank_memory_table, ranks_json, measured_timeline, fill_bubbles,
//          measured_costs, measured_trace, measured_timelines
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>
#include "measure/comm_stats.h"
#include "checkpoint/json.h"
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
  // The ledger after the optimizer step: params, grads, master_params, optimizer_states.
  std::array<int64_t, 4> resident_bytes{};
  std::array<int64_t, 4> host_bytes{};  // CPU offload: the ledger's host column, the same four
  double hardware_flops = 0;  // the kernels' FLOP counter
  // The non-GEMM kernels (kernels::kernel_counts): launches, bytes, flash launches; -1: none.
  long long kernel_launches = -1, attention_launches = -1;
  double kernel_bytes = -1;
  long long routing_copies = -1;  // the MoE routing's copies to the host, and their bytes
  double routing_copy_bytes = -1;
  CommStats comm;             // the step's record
  // The pipeline executor's (parallel/pipeline_parallel.h), seconds from the rank's start.
  std::vector<ActionTiming> actions, exchanges;
  double run_seconds = 0;
  double start_seconds = 0;  // the executor's start on the rank's steady clock
  // With --trace (gather_rank_metrics' with_trace): the step's communication calls, and on
  // rank 0 this rank's clock minus rank 0's (0 on one node, else a ping-pong estimate).
  std::vector<CommEvent> comm_events;
  uint64_t comm_events_dropped = 0;
  double clock_offset_seconds = 0;
  double busy_seconds() const;  // inside its actions
  // Set on rank 0 by fill_bubbles (-1: none): its idle over its pipeline's step (the longest
  // run of the ranks it exchanges with), and its stage's idle over the step in the schedule
  // simulated with the measured costs.
  double bubble = -1, bubble_predicted = -1;
};

std::string rank_memory_table(const Plan& plan, const std::vector<RankMetrics>& ranks);
// rank_plans[r] (when given): the plan rank r is compared with, else `plan`.
void ranks_json(JsonWriter& j, const Plan& plan, const std::vector<RankMetrics>& ranks,
                const std::vector<const Plan*>* rank_plans = nullptr);

// stages: the ranks of one pipeline (one tp, dp position), in pp order.
Simulation measured_timeline(const std::vector<const RankMetrics*>& stages);
// Every rank's bubble, measured and predicted: pipeline_of[r] names world rank r's pipeline
// (its tp, cp, dp position), pp_rank_of[r] its stage; predicted: the simulated schedule.
void fill_bubbles(std::vector<RankMetrics>& ranks, const std::vector<int>& pipeline_of,
                  const std::vector<int>& pp_rank_of, const Simulation& predicted);
ActionCosts measured_costs(const Schedule& schedule,
                           const std::vector<const RankMetrics*>& stages);
// The measured step of every world rank as Chrome trace processes (needs the gather's
// with_trace), one per rank, "rank R (pp a, tp b, dp c)":
//   lane 0 "compute": its actions (cat "compute", F3 B3 W3 as the schedule names them) and
//                     the idle gaps between them (cat "idle"; gaps under 1 us, the timer's
//                     own cost, are not drawn);
//   lanes 1.. "comm": its pp exchanges (cat "pp", one batched send/recv, its messages named)
//                     and every other call of the step (cat: its group, "tp all-reduce",
//                     "dp reduce-scatter", ...), spread over as many lanes as overlap;
//   flows: from each message's sending exchange to the one that received it.
// Clocks: each rank's steady clock minus its estimated offset to rank 0's
// (clock_offset_seconds); then, should an estimate leave a receive ending before its send
// started, the receiver's clock is moved later until none does (a receive cannot complete
// before its send was posted: with true clocks no move is made). Times are microseconds
// from the earliest instant any rank recorded. pipeline_of[r]: world rank r's pipeline.
void measured_trace(const Plan& plan, const std::vector<RankMetrics>& ranks,
                    const std::vector<int>& pipeline_of, std::vector<TraceProcess>* processes,
                    std::vector<TraceSpan>* spans, std::vector<TraceFlow>* flows);
// --print-schedule while training: the measured timeline of every pipeline (the first
// max_pipelines; the rest are in --trace), ranks labelled by their world rank.
std::string measured_timelines(const Plan& plan, const std::vector<RankMetrics>& ranks,
                               const std::vector<int>& pipeline_of, int max_pipelines = 8);

}  // namespace paralab
