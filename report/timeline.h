// report/timeline.h: where a pipeline's time goes, for the eye. A schedule's timeline in
// the terminal (--print-schedule), the same as Chrome trace JSON (--trace; chrome://tracing
// or ui.perfetto.dev), and the pipeline section of the plan (text and JSON).
//
// The trace writer takes plain spans per rank, so the same code writes the simulated
// timeline under --plan and what the run measured (report/rank_report.h, measured_trace):
// one process per rank, a lane "compute" (actions, and idle gaps between them) and
// communication lanes, with flow arrows from each send to its receive. Times are
// microseconds; the simulation's cost units are drawn at `us_per_unit`. Empty spans
// (dur <= 0) are not written: a zero-length slice only clutters the view.
//
// Terminal timeline, one line per rank, to scale (every action spans its cost, each unit
// as many columns as the longest label needs, fewer when the step would not fit):
//   rank 0: F0 F1 F2 F3 ......B0    F4 B1    ...
// '.' is idle; labels are action_label (F3, B3, W3; with chunks F3a, F3b, ...).
//
// defines: TraceSpan, TraceFlow, chrome_trace_json, write_chrome_trace, schedule_trace,
//          render_timeline, pipeline_text, pipeline_json
#pragma once
#include <string>
#include <vector>
#include "checkpoint/json.h"
#include "plan/plan.h"
#include "parallel/pipeline_schedule.h"

namespace paralab {

struct TraceSpan {
  int rank = 0;
  int lane = 0;          // 0: compute and idle, 1 on: communication (TraceProcess names them)
  std::string name;      // "F3b", "idle", "send activation mb 3 -> rank 1"
  std::string category;  // "compute", "idle", "send", "recv"
  double start_us = 0, dur_us = 0;
};

// An arrow from inside a sending span to inside the receiving one (each bound to the
// slice of its lane that encloses its time).
struct TraceFlow {
  std::string name;
  int from_rank = 0;
  double from_us = 0;
  int to_rank = 0;
  double to_us = 0;
  int from_lane = 0, to_lane = 0;
};

// A process of the trace: its name and its lanes' names, by lane. Without a list, every
// rank with a span is one, named "rank R", lanes "compute" and "send/recv".
struct TraceProcess {
  int rank = 0;
  std::string name;
  std::vector<std::string> lanes;
};

// The trace document: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
std::string chrome_trace_json(const std::vector<TraceSpan>& spans,
                              const std::vector<TraceFlow>& flows, const std::string& title,
                              const std::vector<TraceProcess>& processes = {});
// Throws std::runtime_error when the file cannot be written.
void write_chrome_trace(const std::string& path, const std::vector<TraceSpan>& spans,
                        const std::vector<TraceFlow>& flows, const std::string& title,
                        const std::vector<TraceProcess>& processes = {});

// The simulated timeline as spans: every action, the idle gaps of every rank up to the
// step's end, a send and a receive span per message (costs.comm long) and their flows.
void schedule_trace(const Schedule& s, const Simulation& sim, const ActionCosts& costs,
                    double us_per_unit, std::vector<TraceSpan>* spans,
                    std::vector<TraceFlow>* flows);

// The terminal timeline (header comment); max_columns bounds the drawn width of the step.
// measured: sim holds the executor's timings in ms (rank_report.h, measured_timeline).
// rank_labels: the rank printed for each stage (default: the stage's index; measured, the
// world ranks of one pipeline).
std::string render_timeline(const Schedule& s, const Simulation& sim, const ActionCosts& costs,
                            int max_columns = 160, bool measured = false,
                            const std::vector<int>& rank_labels = {});

// `--plan`'s pipeline section: schedule, bubble simulated and closed form, each stage's
// layers, units, held microbatches, idle time and messages. Empty without pipelining.
std::string pipeline_text(const Plan& plan);
// `--plan --json`'s "pipeline" key: {schedule, p, m, v, bubble_simulated,
// bubble_closed_form, bubble_vs_ideal_simulated, bubble_vs_ideal_closed_form,
// bubble_formula, step_time_units, costs {F, B, W}, layers_per_model_stage, message_bytes,
// per_rank: [{pp_rank, layers, embedding, head, tied_embedding_copy, busy, idle, held,
// held_until_w, activation_bytes, params, activations_sent, gradients_sent,
// exchanges}]}. Nothing without pipelining.
void pipeline_json(JsonWriter& j, const Plan& plan);

}  // namespace paralab
