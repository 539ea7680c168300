// app/training.h: a training run as named steps. trainer.cu's loop calls them in this order,
// once per step; each is a collective over the world unless it says "rank 0".
//
//   Training(o, w)   build the world: the rank grid and its groups, this rank's plan, the
//                    hardware profile and the fit check (exit 2 before any allocation),
//                    the parallel dimensions (data, tensor, expert, context, pipeline), the
//                    model (its stage), the optimizer (--load resumes both), the data and
//                    the schedule's executor
//   run_step         one optimizer step: the microbatches through the schedule (forward,
//                    backward, the stages' messages), the tied embedding's gradients, the
//                    loss's world all-reduce (with the stop flag), gradient norm, clipping
//                    and AdamW on the owned parameters; then what the step measured
//   gather           what rank 0 reports from every rank: the routers' step, the plans at
//                    the measured routing, every rank's RankMetrics (only when read)
//   evaluate         --eval-interval's validation loss, outside the step's measurements
//   save_or_stop     --exit-interval, a signal on any rank, too many skipped steps; --save
//   report           rank 0: the step line, the ledgers beside the plan, --metrics-jsonl,
//                    the measured timeline and --trace, the checkpoint's line
//   finish           drain the overlapped collectives, the summary, --save-tensors,
//                    --export-hf; the exit status
//
// The exit status is for a scheduler (scripts/slurm.sbatch requeues on 16):
//   0   finished: the last step ran (and --save saved it)
//   16  stopped early and saved (a signal, --exit-interval, --exit-duration-in-mins, with
//       --save): run the same command again, it resumes (Megatron's rerun state machine
//       exits 16 for "checkpoint saved, resume me" too)
//   4   stopped early, nothing saved (no --save): resuming would start again from step 1
//   3   too many steps in a row skipped (--max-skipped-steps): the weights are not finite
//   2   bad input, before anything ran (cli/flags.h); 1 an internal error
//
// defines: StepRecord, Training, listen_for_stop_signals, kExitFinished, kExitResume,
//          kExitStoppedUnsaved, kExitSkipped
#pragma once
#include <fstream>
#include <memory>
#include <string>
#include <vector>
#include "app/checkpoint_run.h"
#include "app/projection.h"
#include "checkpoint/checkpoint.h"
#include "cli/flags.h"
#include "measure/comm_stats.h"
#include "measure/ledger.h"
#include "measure/peak.h"
#include "model/data.h"
#include "model/evaluate.h"
#include "model/optimizer.h"
#include "model/transformer.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/tensor_parallel.h"
#include "parallel/topology.h"
#include "plan/plan.h"
#include "report/moe_routing.h"
#include "report/rank_report.h"
#include "report/report.h"
#include "report/summary.h"
#include "report/tensorboard.h"

namespace paralab {

constexpr int kExitFinished = 0, kExitResume = 16, kExitStoppedUnsaved = 4, kExitSkipped = 3;

// One step as every rank saw it, filled by the steps above in order. Not copied: `metrics`
// points into `moe` and `projected`.
struct StepRecord {
  int step = 0;
  bool last = false;       // the run's last step
  bool report = false;     // the ledgers are printed (step 1, --report-interval, the last)
  bool signalled = false;  // SIGINT or SIGTERM on some rank, or rank 0 out of time (the
                           // loss's all-reduce said so)
  bool out_of_time = false;  // rank 0: --exit-duration-in-mins passed
  StepMetrics metrics;     // this rank's
  PipelineTiming timing;   // the executor's actions and exchanges
  CommStats comm;          // the step's collectives, before the report's own
  // gather: the routers' step, the plan of each pipeline at its measured routing (with a
  // capacity or expert parallelism), each rank's plan, the plan rank 0 compares with
  MoeStepReport moe;
  std::vector<Plan> routed_plans;
  std::vector<const Plan*> rank_plans;
  const Plan* step_plan = nullptr;
  bool gathered = false;          // ranks holds every rank's measurements
  std::vector<RankMetrics> ranks;  // rank 0: every rank's (or its own alone)
  // evaluate
  bool evaluated = false;
  EvalResult eval;
  // save_or_stop: why the loop ends early and badly (exit 3) or well; the save
  std::string stopped, exited;
  bool saved = false;
  SaveStats save;
  StepRecord() = default;
  StepRecord(const StepRecord&) = delete;
  StepRecord& operator=(const StepRecord&) = delete;
  bool ends_run() const { return !stopped.empty() || !exited.empty(); }
};

// SIGINT and SIGTERM (Slurm's preemption signal) raise a flag that run_step reads: the step
// finishes, every rank learns it from the loss's all-reduce, saves and stops.
void listen_for_stop_signals();

class Training {
 public:
  Training(const Options& o, const World& w);  // app/training_build.cpp
  Training(const Training&) = delete;
  Training& operator=(const Training&) = delete;
  ~Training();

  int first_step() const { return start_.iteration + 1; }
  void begin();  // rank 0 prints the warnings, the run's header and the data; the clock starts

  void run_step(int step, StepRecord& r);  // app/training_step.cpp, in the steps below
  void reset_step_counters(int step);
  void count_skipped(int step, float loss, float loss_scale, bool skipped, StepRecord& r);
  void record_step_metrics(int step, float loss, float lr, float grad_norm, float loss_scale,
                           double seconds, StepRecord& r);
  void gather(StepRecord& r);
  void evaluate(StepRecord& r);
  void save_or_stop(StepRecord& r);
  void report(StepRecord& r);  // app/training_report.cpp
  int finish(const StepRecord& last);

 private:
  // rank 0, report's steps (app/training_report.cpp)
  void compare_pipeline(StepRecord& r, std::vector<RankMetrics>& report_ranks);
  MeasuredTime step_measured_time(const StepRecord& r,
                                  const std::vector<RankMetrics>& report_ranks) const;
  bool add_to_run_totals(StepRecord& r);
  void print_step(const StepRecord& r, bool line, const std::vector<RankMetrics>& report_ranks);
  void print_ledgers(const StepRecord& r, const MeasuredTime& measured_time);
  void print_last_step(const StepRecord& r);
  void print_saved_or_stopped(const StepRecord& r);
  void write_tensorboard(const StepRecord& r);

  const Options& o_;
  const World& w_;
  const bool rank0_;
  std::unique_ptr<Topology> topo_;
  Plan plan_;                   // this rank's (a contiguous cp layout's ranks differ)
  std::vector<Plan> cp_plans_;  // --cp-layout contiguous: every cp rank's
  HardwareChoice hardware_;
  StepTime projected_;
  Peak peak_;
  int dp_ = 1, dp_rank_ = 0, pp_ = 1, pp_rank_ = 0, micro_ = 1, B_ = 1;
  std::unique_ptr<DataParallel> data_parallel_, expert_data_parallel_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<AdamW> optimizer_;
  TrainingPosition start_;
  CheckpointPlace place_;
  std::unique_ptr<DataLoader> data_;
  std::vector<std::vector<int>> tokens_, targets_;  // a step's microbatches
  std::unique_ptr<PipelineExecutor> executor_;
  std::unique_ptr<Evaluator> evaluator_;
  // Each world rank's pipeline stage and pipeline (its tp, cp, dp position), and the ranks of
  // rank 0's pipeline in stage order.
  std::vector<int> pp_rank_of_, pipeline_of_, pipeline_ranks_;
  ActionCosts costs_;        // the plan's units until a step was measured
  Buffer<float> loss_scalar_;  // the loss's all-reduce and the stop flag (world > 1)
  std::unique_ptr<std::ofstream> jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0, --tensorboard-dir
  // The run so far: the step line's mean loss since the previous line, the summary's totals
  // (rank 0), this rank's largest ledger totals of a step and of an evaluation, the skipped
  // steps (a resumed run continues the counts)
  LogAverage logged_loss_;
  RunSummary run_;
  int64_t my_peak_ = 0, my_eval_peak_ = -1;
  int skipped_steps_ = 0, skipped_in_a_row_ = 0;
  double train_start_ = 0;
  double run_start_ = 0;  // when the Training was built: --exit-duration-in-mins counts from it
};

}  // namespace paralab
