// report/report_impl.h: what report.cpp (the text writers), report_memory.cpp (the memory
// table) and report_json.cpp (the JSON writers) share: the rows of the communication
// comparison, predicted beside measured, whether the predicted total is exact, the
// vocabulary padding note. Not for other files: report.h is the interface.
//
// defines: CommRow, comm_rows, total_is_exact, layer_transients_at_peak, vocab_padding_note,
//          resident_json, host_memory_json, memory_category_shown
#pragma once
#include <string>
#include <vector>
#include "measure/comm_stats.h"  // CommGroup, CommOp, CommStats
#include "plan/plan.h"        // CommPlanEntry
#include "checkpoint/json.h"      // JsonWriter

namespace paralab {

// One row per (group, operation) predicted, plus any that ran without a prediction.
struct CommRow {
  CommGroup g;
  CommOp op;
  const CommPlanEntry* pred;
};
// The plan's entries and every (group, operation) that `measured` (when given) recorded
// calls of without a prediction, in CommStats's order: group, then operation, by enum
// (the measured time table's order, CommStats::table) (report.cpp).
std::vector<CommRow> comm_rows(const std::vector<CommPlanEntry>& comm,
                               const CommStats* measured);

// Whether the text tables show ledger category c: FP8's two (fp8_operands, fp8_state) only in
// a run with --fp8-format (the JSON always has every category).
inline bool memory_category_shown(const Plan& plan, int c) {
  return c < kNumMemoryCategories - 2 || plan.model.fp8.enabled;
}

// Whether MemoryPlan::total() is the ledger's peak to the byte: it is but where a replay
// holds transients at their peak (an upper bound): ZeRO-2/3's buffers under pipelining or
// full recompute, selective recompute's under pipelining (report.cpp; the memory table's
// note says which).
bool total_is_exact(const Plan& plan, const MemoryPlan& m);
// One reason it is not: full recompute on one stage with MoE or --qk-layernorm layers.
bool layer_transients_at_peak(const Plan& plan, const MemoryPlan& m);

// "resident": what a rank holds between steps (after the optimizer step), per model-state
// category (params, grads, master_params, optimizer_states: the ledger's first four) and in
// total, measured[c] beside MemoryPlan's resident bytes (report_json.cpp; the step record
// and every rank's in "ranks").
void resident_json(JsonWriter& j, const MemoryPlan& m, const int64_t* measured);
// "host_memory": CPU offload's host column, per model-state category and in total, measured[c]
// (the ledger's host bytes) beside MemoryPlan::host; written when either is not zero.
void host_memory_json(JsonWriter& j, const MemoryPlan& m, const int64_t* measured);

// "vocab V padded to Vp for tp t", or "" when tp divides V (report_memory.cpp).
std::string vocab_padding_note(const Plan& plan);

}  // namespace paralab
