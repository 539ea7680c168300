// app/projection.h: the trainer's side of the time model (plan/time_model.h) and the fit check
// (plan/fit.h): which hardware profile a command means, what `--plan` adds (the projected
// step, the training time for --plan-tokens, the fit against the profile's memory), and
// the check a training run makes before it allocates anything.
//
// The profile: --hardware NAME|FILE; else, on a GPU, the configs/hardware profile matching
// its name; else, training on the CPU backend, configs/hardware/cpu.toml (the benchmark's
// measurement of the machine it was made on: `trainer --benchmark --benchmark-save`).
// Without one there is no projection, and the output says how to get one.
//
// defines: plan_options, HardwareChoice, choose_hardware, PlanExtras, plan_extras,
//          check_run_fits, run_plan
#pragma once
#include <string>
#include "cli/flags.h"
#include "measure/hardware.h"
#include "parallel/comm.h"  // World
#include "parallel/topology.h"
#include "plan/fit.h"
#include "plan/time_model.h"
#include "report/report_time.h"

namespace paralab {

// The plan's view of the run flags that are not in the configuration structs.
PlanOptions plan_options(const Options& o);

struct HardwareChoice {
  bool found = false;
  HardwareProfile profile;
  std::string reason;  // why none was found
  // Training on the CPU with configs/hardware/cpu.toml, measured on another machine or at
  // another rank count than this run's: says so (its ratios are that machine's), "" else.
  std::string note;
};
// Throws FlagError for a --hardware that names no profile or a file that does not parse.
HardwareChoice choose_hardware(const Options& o, bool training);

// What `--plan` prints beyond the plan (view points into the other members).
struct PlanExtras {
  StepTime time;
  Fp8StepTime fp8;  // --fp8-format
  FitCheck fit;
  TrainingTime training;
  PlanProjection view;
  PlanExtras() = default;
  PlanExtras(const PlanExtras&) = delete;
};
// Throws FlagError when the profile has no peak for the run's precision.
void plan_extras(PlanExtras& out, const Options& o, const Plan& plan, const HardwareChoice& hw);

// Before a run allocates: every rank's predicted peak against what it may use (its GPU's
// free memory; on CPU the host's available memory over the node's ranks), gathered over
// the world; when a rank does not fit (and no --allow-oom), every rank exits with status 2
// and rank 0 prints one line naming the bytes. Collective.
void check_run_fits(const Options& o, const Plan& plan, const World& w, Topology& topo);

// `trainer --plan`: the plan, its projection on the hardware profile and the checkpoint's
// bytes (--json: one object), the simulated schedule (--print-schedule, --trace); rank 0
// prints. Exit status.
int run_plan(const Options& o, const World& w);

}  // namespace paralab
