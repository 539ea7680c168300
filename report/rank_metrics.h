// report/rank_metrics.h: every rank's measurements of a step (report/rank_report.h,
// RankMetrics), gathered to rank 0 for the report.
//
// One all-gather of raw bytes over the world, made after the step's communication record
// was copied into RankMetrics::comm: it is the report's traffic, not the training's, and
// is not counted in the step's communication.
//
// With with_trace (the step --trace draws), two more collectives: every rank's communication
// events (measure/comm_stats.h, CommEvent) and rank 0's estimate of each rank's clock offset.
// The ranks of one node read one CLOCK_MONOTONIC: offset 0. Across nodes: ping-pongs with
// rank 0, offset = t_remote - (t_sent + t_back) / 2 of the fastest of a few round trips
// (error under half its round trip); PARALAB_CLOCK_PINGPONG=1 forces them on one node.
//
// defines: rank_metrics_of, gather_rank_metrics, all_gather_doubles
#pragma once
#include <vector>
#include "parallel/pipeline_parallel.h"  // PipelineTiming
#include "report/rank_report.h"
#include "report/report.h"  // StepMetrics
#include "parallel/comm.h"
#include "parallel/pipeline_schedule.h"

namespace paralab {

// This rank's measurements of a step as the gather carries them: the step's ledger, FLOP and
// kernel counters (StepMetrics), its communication record and its executor's timings.
RankMetrics rank_metrics_of(int rank, const StepMetrics& s, const CommStats& comm,
                            const PipelineTiming& timing);

// Every rank's block of doubles (all the same length), in rank order, on every rank: one
// all-gather of raw bytes. Byte counts below 2^53 pass exactly.
std::vector<double> all_gather_doubles(Communicator& world, const std::vector<double>& mine);

// Collective over `world`; every rank passes its own, rank 0 gets everyone's in rank order
// (the others an empty vector). `schedule` sizes the timing records; pp_rank_of[r]: world
// rank r's pipeline stage.
std::vector<RankMetrics> gather_rank_metrics(Communicator& world, const RankMetrics& mine,
                                             const Schedule& schedule,
                                             const std::vector<int>& pp_rank_of,
                                             bool with_trace = false);

}  // namespace paralab
