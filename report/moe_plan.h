// report/moe_plan.h: the plan's mixture-of-experts section (`trainer --plan`, with
// --num-experts) and the GEMM calls of a step, measured beside predicted.
//
//   moe_plan_text / moe_plan_json   the routing convention in force, parameters total and
//       active with the per-layer breakdown (plan/moe_params.h), the GEMM calls per step per
//       label for --moe-grouped-gemm AND per expert side by side (plan/gemm_calls.h); the
//       FLOPs-per-token conventions are the FLOPs section's (report/report.h)
//   gemm_calls_table / gemm_calls_json   a step's StepMetrics::gemm_calls (kernels'
//       gemm_counts) beside predict_gemm_calls for the setting in force, per label. The
//       per-expert experts row is an expectation unless padded to capacity, or unless the
//       caller passes the step's measured nonempty experts per layer (model/moe.h
//       MoeLayerStats::nonempty_experts), which makes it exact.
//
// defines: routing_text, balancing_text, moe_plan_text, moe_plan_json, gemm_calls_table,
//          gemm_calls_json
#pragma once
#include <string>
#include <vector>
#include "plan/gemm_calls.h"
#include "checkpoint/json.h"
#include "report/report.h"  // Plan, StepMetrics

namespace paralab {

// The routing convention in force and the load balancing, one line each (--plan, the run's
// MoE table).
std::string routing_text(const Moe& moe);
std::string balancing_text(const Moe& moe);
// "" / nothing written for a dense model (num_experts == 0).
std::string moe_plan_text(const Plan& plan);
void moe_plan_json(JsonWriter& j, const Plan& plan);  // key "moe"

// rank: which rank's stage (its layers, the head on the last); nonempty: per layer of the
// model (size num_layers), the step's MoeLayerStats::nonempty_experts on this rank.
std::string gemm_calls_table(const Plan& plan, const StepMetrics& s, int rank = 0,
                             const std::vector<long long>* nonempty = nullptr);
// key "gemm_calls": {"grouped", "experts_exact", "labels": {LABEL: {"measured", "predicted",
// "flops_measured"}}}; predicted is an expectation for "experts" unless experts_exact.
void gemm_calls_json(JsonWriter& j, const Plan& plan, const StepMetrics& s, int rank = 0,
                     const std::vector<long long>* nonempty = nullptr);

}  // namespace paralab
