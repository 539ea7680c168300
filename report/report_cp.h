// report/report_cp.h: the plan's context-parallel section (`trainer --plan` and the run's
// report, with --cp > 1): where each cp rank's tokens sit, the exchanges of one layer and
// microbatch for the comm type in force (calls, payload, bus) beside the other two types at
// the same size, each cp rank's attention work (equal under the zigzag layout, rising with
// the rank under the contiguous one), and the p2p ring's overlap condition.
//
// defines: cp_plan_text, cp_plan_json
#pragma once
#include <string>
#include "measure/peak.h"
#include "checkpoint/json.h"
#include "report/report.h"  // Plan

namespace paralab {

// "" / nothing written at cp 1. peak (may be nullptr): the rank's FLOP/s for the overlap
// condition's bandwidth.
std::string cp_plan_text(const Plan& plan, const Peak* peak);
void cp_plan_json(JsonWriter& j, const Plan& plan, const Peak* peak);

}  // namespace paralab
