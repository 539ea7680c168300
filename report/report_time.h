// report/report_time.h: the time model's output (plan/time_model.h) and the fit check
// (plan/fit.h): with --plan, the projected step, its parts and assumptions, tokens/s, MFU,
// HFU, the training time for --plan-tokens, and whether each rank fits; while training,
// the projected step beside the measured one, per phase where the run measures it.
//
//   time_plan_text / time_plan_json   `--plan` (JSON keys "time", "fit", "training", and
//                                     "fp8" with --fp8-format: what FP8 buys, projected)
//   time_measured_text                the step report: projected vs measured ms and ratio
//                                     for the step, the kernels per phase (GEMMs, flash
//                                     attention, memory-bound, optimizer: timed by the
//                                     kernels, kernels/counters.h), the exposed communication
//                                     per group (CommStats exposed time), the bubble, and the
//                                     rest
//   time_step_json                    --metrics-jsonl's "time" object, the same numbers
//   fit_line                          one line: fits / does not fit by how much, what would
//
// defines: PlanProjection, time_plan_text, time_plan_json, fit_line, host_fit_line, fit_error,
//          MeasuredTime, time_measured_text, time_step_json
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "kernels/counters.h"  // OpTime
#include "measure/comm_stats.h"
#include "plan/fit.h"
#include "plan/time_model.h"
#include "plan/time_model_fp8.h"
#include "checkpoint/json.h"

namespace paralab {

// What `--plan` prints beyond the plan; null members are left out.
struct PlanProjection {
  const StepTime* time = nullptr;
  const FitCheck* fit = nullptr;
  const TrainingTime* training = nullptr;
  double checkpoint_seconds = -1;  // report/checkpoint_report.h; -1: no storage_write_gbs
  std::string no_time;  // why there is no projection (no profile), when time is null
  // --fp8-format: the step with FP8 linears (plan/time_model_fp8.h), or why there is none
  const Fp8StepTime* fp8 = nullptr;
  std::string no_fp8;
};

std::string time_plan_text(const Plan& plan, const PlanProjection& p);
void time_plan_json(JsonWriter& j, const Plan& plan, const PlanProjection& p);

// "memory: fits: peak 61.20 GiB on rank 0 of 80.00 GiB (H100 SXM), 18.80 GiB to spare" or
// "memory: does NOT fit: ... short by 38.40 GiB; would fit: --micro-batch-size 1, ...".
std::string fit_line(const FitCheck& f);
// CPU offload: the fullest node's host memory against its RAM ("" when nothing is offloaded).
std::string host_fit_line(const FitCheck& f);
// The run's refusal: one line naming the bytes needed and available and --allow-oom.
std::string fit_error(const FitCheck& f);

// One step as the run measured it (rank 0), seconds; negative = not measured.
struct MeasuredTime {
  double step = -1;
  // the kernels' time per phase (kernels::phase_seconds: the CPU's clock, CUDA events)
  double gemm = -1, attention = -1, memory = -1, optimizer = -1;
  double bubble = -1;   // the executor's idle time, pipelines only
  double host_optimizer = -1;  // CPU offload: the host AdamW's wall time
  const CommStats* comm = nullptr;  // exposed time per group
  // --timing-log-level 2: each op's calls and time, listed under the phases
  std::vector<std::pair<std::string, kernels::OpTime>> ops;
};
std::string time_measured_text(const StepTime& t, const MeasuredTime& m);
void time_step_json(JsonWriter& j, const StepTime& t, const MeasuredTime& m);

}  // namespace paralab
