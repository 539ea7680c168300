// report/report_impl.h: what report.cpp (the text writers) and report_json.cpp (the JSON
// writers) share: the rows of the communication comparison, predicted beside measured. Not
// for other files: report.h is the interface.
//
// defines: CommRow, comm_rows
#pragma once
#include <vector>
#include "measure/comm_stats.h"  // CommGroup, CommOp, CommStats
#include "plan/plan.h"        // CommPlanEntry

namespace paralab {

// One row per (group, operation) predicted, plus any that ran without a prediction.
struct CommRow {
  CommGroup g;
  CommOp op;
  const CommPlanEntry* pred;
};
// The plan's entries in order, then every (group, operation) that `measured` (when given)
// recorded calls of without a prediction (report.cpp).
std::vector<CommRow> comm_rows(const std::vector<CommPlanEntry>& comm,
                               const CommStats* measured);

}  // namespace paralab
