// app/training_step.cpp: one step of a run (app/training.h): run_step, gather, evaluate,
// save_or_stop. Every function here is called by every rank, in this order.
#include <algorithm>
#include <cmath>
#include <csignal>
#include "app/training.h"
#include "kernels/ops.h"
#include "measure/clock.h"
#include "model/pipeline_stage.h"
#include "report/rank_metrics.h"
#include "report/text.h"

namespace paralab {
namespace {

// SIGINT / SIGTERM (Slurm's preemption signal): finish the step, save, stop. The handler only
// raises the flag; a second signal ends the process at once (the default action restored).
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int signal) {
  g_stop_signal = signal;
  std::signal(signal, SIG_DFL);
}

// Total payload bytes this rank moved in the step (every group and operation).
double step_comm_bytes(const CommStats& step) {
  double total = 0;
  for (int g = 0; g < kNumCommGroups; ++g)
    for (int op = 0; op < kNumCommOps; ++op)
      total += step.get(CommGroup(g), CommOp(op)).payload_bytes;
  return total;
}

}  // namespace

void listen_for_stop_signals() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

// The step: every counter reset, the microbatches through the schedule, the loss over the
// world, the update; then this rank's measurements (before any of the report's collectives).
void Training::run_step(int step, StepRecord& r) {
  const kernels::Device dev = o_.device;
  const int k = micro_;
  r.step = step;
  r.last = step == o_.train.train_iters;
  r.report = step == 1 || r.last || (o_.report_interval > 0 && step % o_.report_interval == 0);
  reset_step_counters(step);
  const double t0 = now_seconds();

  // the step's own kernels (gradient zeroing here, the loss and the optimizer after the
  // schedule) are the time table's "optimizer and step kernels", plan/kernel_traffic.h's
  // step_other
  {
    kernels::PhaseScope step_kernels(kernels::Phase::optimizer);
    model_->zero_grads();
  }
  for (int micro = 0; micro < k; ++micro)
    data_->microbatch(step, micro, dp_rank_, tokens_[micro].data(), targets_[micro].data());
  // every stage derives microbatch i's dropout seed alike, from the global microbatch whose
  // samples it holds (micro x dp + dp rank: the data loader's order, model/data.h), so its
  // masks are the single-rank run's
  const float loss_scale = optimizer_->loss_scale();  // this step's, before its update
  ModelStage stage(*model_, plan_.pipeline.schedule, pp_rank_, B_, [&](int micro) {
    const uint64_t global_micro = (uint64_t)micro * dp_ + dp_rank_;
    const uint64_t seed = kernels::mix64(
        o_.train.seed ^ kernels::mix64(((uint64_t)step << 20) + global_micro));
    // the mean over the global batch's microbatches, times the loss scale (1 without one)
    return Transformer::Microbatch{tokens_[micro].data(), targets_[micro].data(), B_,
                                   loss_scale / (k * dp_), seed, false};
  });
  r.timing = executor_->run(stage);
  model_->collect_moe_stats();  // the routers' counts of the step: one copy
  model_->fp8_step_end();       // delayed scaling: the step's amaxes reduced, the scales next
  kernels::PhaseScope step_kernels(kernels::Phase::optimizer);
  model_->sync_tied_embedding();
  // the schedule's position: the updates made, this one included (Megatron steps its
  // scheduler only after a successful update: a skipped step leaves the schedule where it is);
  // the steps so far less the skipped ones, which a resume restores even without the optimizer
  const float lr = learning_rate(o_.train, step - skipped_steps_);
  // the reported loss: mean over the global batch (every microbatch of every dp rank);
  // taken before the update, so that a step whose loss is not finite updates nothing
  // --exit-duration-in-mins: rank 0's clock decides, and its vote rides the stop flag
  r.out_of_time = rank0_ && o_.exit_duration_in_mins > 0 &&
                  now_seconds() - run_start_ > 60 * o_.exit_duration_in_mins;
  r.signalled = g_stop_signal != 0 || r.out_of_time;
  const ParallelConfig& par = o_.parallel;
  const float loss = world_mean_loss(topo_->world(), loss_scalar_, (float)(stage.loss_sum() / k),
                                     pp_, par.context_parallel, &r.signalled);
  const float grad_norm = optimizer_->step(lr, !std::isfinite(loss));
  const bool skipped = optimizer_->skipped();  // alike on every rank: loss and norm are global
  model_->update_expert_bias(par.context_parallel > 1 ? &topo_->dp_cp() : &topo_->dp(),
                             !skipped);
  count_skipped(step, loss, loss_scale, skipped, r);
  kernels::synchronize(dev);
  const double seconds = now_seconds() - t0;
  r.comm = CommStats::instance();  // before the report's own gathers

  record_step_metrics(step, loss, lr, grad_norm, loss_scale, seconds, r);
}

// The step's counters and the ledger's peaks start from zero, and the device is idle: the
// step's time and counts are its own.
void Training::reset_step_counters(int step) {
  set_comm_step(step);
  Ledger::instance().reset_peaks();
  kernels::reset_flop_counter();
  kernels::reset_phase_seconds();
  kernels::reset_gemm_counts();
  kernels::reset_kernel_counts();
  kernels::reset_allocation_counts();
  model_->reset_moe_stats();
  model_->reset_fp8_log();
  CommStats::instance().reset();
  kernels::synchronize(o_.device);
}

// The skipped steps, in all and in a row; --max-skipped-steps stops the run after this step.
void Training::count_skipped(int step, float loss, float loss_scale, bool skipped,
                             StepRecord& r) {
  // A dynamic scale's overflow is how the scale learns its size (from 2^32, a run's first
  // dozen or so steps overflow): it counts towards --max-skipped-steps only once the scale
  // cannot back off any more (at --min-loss-scale), as does any other skip.
  const LossScaler& scaler = optimizer_->loss_scaler();
  const bool backed_off = scaler.dynamic() && std::isfinite(loss) &&
                          loss_scale > (float)o_.train.loss_scaling.min_loss_scale;
  skipped_in_a_row_ = !skipped ? 0 : backed_off ? skipped_in_a_row_ : skipped_in_a_row_ + 1;
  skipped_steps_ += skipped;
  // Every rank stops alike (the loss and the norm are global), after this step's report;
  // what was written is whole: the step lines and --metrics-jsonl records so far, no
  // summary, no --save.
  if (skipped_in_a_row_ >= o_.train.max_skipped_steps)
    r.stopped = strprintf("stopped at step %d: %d steps in a row skipped (%d-%d), their loss "
                          "or gradient norm not finite; --max-skipped-steps %d",
                          step, skipped_in_a_row_, step - skipped_in_a_row_ + 1, step,
                          o_.train.max_skipped_steps);
}

// What the step measured, for the report, --metrics-jsonl and the tests.
void Training::record_step_metrics(int step, float loss, float lr, float grad_norm,
                                   float loss_scale, double seconds, StepRecord& r) {
  const LossScaler& scaler = optimizer_->loss_scaler();
  StepMetrics& s = r.metrics;
  s.step = step;
  s.loss = loss;
  s.lr = lr;
  s.grad_norm = grad_norm;
  s.skipped = optimizer_->skipped();
  s.skipped_steps = skipped_steps_;
  s.grad_underflow = optimizer_->grad_underflow();
  s.fp8 = model_->fp8_step_log();  // --log-fp8-scaling
  if (o_.train.loss_scaled()) {  // the scale this step used, and the scaler after it
    s.loss_scale = loss_scale;
    s.loss_scaler = scaler.state();
    s.dynamic_loss_scale = scaler.dynamic();
  }
  s.step_seconds = seconds;
  // the step's peaks, and what is held between steps (after the optimizer step): the ledger
  // now, beside MemoryPlan's resident model states (the memory table's "held between steps")
  static_assert(kNumCategories == kNumMemoryCategories, "the ledger's and the plan's categories");
  for (int c = 0; c < kNumCategories; ++c) {
    s.memory_bytes[c] = (int64_t)Ledger::instance().peak(Category(c));
    s.resident_bytes[c] = (int64_t)Ledger::instance().current(Category(c));
  }
  s.peak_memory_bytes = (int64_t)Ledger::instance().peak_total();
  s.resident_measured = true;
  for (int c = 0; c < 4; ++c)  // CPU offload's host column
    s.host_memory_bytes[c] = (int64_t)Ledger::instance().host_peak(Category(c));
  s.hardware_flops = kernels::flop_counter();
  const kernels::KernelCount kernel_count = kernels::kernel_counts();
  s.kernel_launches = kernel_count.launches;
  s.kernel_bytes = kernel_count.bytes;
  s.attention_launches = kernel_count.attention_launches;
  s.routing_copies = kernel_count.routing_copies;
  s.routing_copy_bytes = kernel_count.routing_copy_bytes;
  for (int l = 0; l < o_.model.num_layers && o_.model.moe.enabled(); ++l)
    s.moe_nonempty.push_back(model_->moe_layers()[l].stats.nonempty_experts);
  s.allocations = kernels::allocation_counts();
  s.kernel_seconds = kernels::phase_seconds();  // before gemm_counts: it adds their seconds
  s.op_times = kernels::op_times();              // level 2 only: empty below it
  if (w_.size > 1) s.comm_bytes = step_comm_bytes(r.comm);
  for (const auto& [label, count] : kernels::gemm_counts())
    s.gemm_calls.push_back({label, count.calls, count.flops});
  my_peak_ = std::max(my_peak_, s.peak_memory_bytes);
}

void Training::gather(StepRecord& r) {
  const ParallelConfig& par = o_.parallel;
  StepMetrics& s = r.metrics;
  // the routers' step over every rank: a collective (every rank, every step), after the
  // step's ledger was read (its buffers are the report's, not the training's)
  if (o_.model.moe.enabled())
    r.moe = gather_moe_report(topo_->world(), *model_, (double)micro_ * dp_);
  // With a capacity the experts' rows (and the kept pairs) depend on the routing, and with
  // expert parallelism the rows each rank's experts receive: the plan evaluated at the
  // routing each pipeline measured this step, on rank 0 (plan/moe_memory.h)
  if (o_.model.moe.enabled() &&
      (o_.model.moe.capacity_factor > 0 || par.expert_parallel * par.expert_tensor_parallel > 1)) {
    const std::vector<MoeRouting> routing =
        gather_moe_routing(topo_->world(), *model_, micro_, pipeline_of_);
    // pipeline i = tp_rank + tp (cp_rank + cp dp_rank): its cp rank's plan
    for (int i = 0; rank0_ && i < (int)routing.size(); ++i) {
      PlanOptions options = plan_options(o_);
      options.cp_rank = (i / par.tensor_parallel) % par.context_parallel;
      r.routed_plans.push_back(make_plan(o_.model, o_.train, par, options, routing[i]));
    }
  }
  for (int q = 0; q < w_.size && !r.routed_plans.empty(); ++q)
    r.rank_plans.push_back(&r.routed_plans.at(pipeline_of_[q]));
  for (int q = 0; q < w_.size && r.routed_plans.empty() && !cp_plans_.empty(); ++q)
    r.rank_plans.push_back(&cp_plans_.at(topo_->layout().coord_of(q).cp));
  r.step_plan = r.routed_plans.empty() ? &plan_ : &r.routed_plans.at(pipeline_of_[0]);
  if (!r.moe.empty()) {
    s.moe = &r.moe;
    s.aux_loss = r.moe.aux_loss;
    s.z_loss = r.moe.z_loss;
    s.dropped_pairs = o_.model.moe.capacity_factor > 0 ? r.moe.dropped : -1;
  }
  // Every rank's measurements to rank 0 when something reads them (the stages of a
  // pipeline differ; --metrics-jsonl's ranks; a report step's FLOPs): one collective.
  r.gathered = w_.size > 1 && (pp_ > 1 || !o_.metrics_jsonl.empty() || r.report);
  const RankMetrics mine = rank_metrics_of(w_.rank, s, r.comm, r.timing);
  r.ranks = r.gathered ? gather_rank_metrics(topo_->world(), mine, plan_.pipeline.schedule,
                                             pp_rank_of_, r.last && !o_.trace.empty())
                       : std::vector<RankMetrics>{mine};  // (then pp is 1: rank 0 its pipeline)
}

// Validation (every rank): after the step's measurements were read, so its memory, FLOPs and
// communication are not the step's (the next step resets them all).
void Training::evaluate(StepRecord& r) {
  r.evaluated = evaluator_ && (r.step % o_.eval_interval == 0 || r.last);
  if (!r.evaluated) return;
  r.eval = evaluator_->run(o_.eval_iters);
  my_eval_peak_ = std::max(my_eval_peak_, r.eval.peak_memory_bytes);
  model_->data_parallel().after_evaluation();  // overlapped FP8 gathers: the next step's again
  if (DataParallel* experts = model_->expert_data_parallel()) experts->after_evaluation();
}

// Early and well: --exit-interval, or SIGINT / SIGTERM on any rank, or --exit-duration-in-mins
// on rank 0's clock (every rank learnt the last two from the loss's all-reduce). A checkpoint (--save) at --save-interval, at the last step and
// before such an exit; never after bad numbers (stopped).
void Training::save_or_stop(StepRecord& r) {
  if (r.stopped.empty() && o_.exit_interval > 0 && r.step % o_.exit_interval == 0 && !r.last)
    r.exited = strprintf("--exit-interval %d", o_.exit_interval);
  if (r.stopped.empty() && r.signalled && !r.last)
    r.exited = r.out_of_time ? strprintf("--exit-duration-in-mins %g: %.1f minutes since the "
                                         "run started", o_.exit_duration_in_mins,
                                         (now_seconds() - run_start_) / 60)
                             : "SIGINT or SIGTERM";
  r.saved = !o_.save.empty() && r.stopped.empty() &&
            (r.last || !r.exited.empty() ||
             (o_.save_interval > 0 && r.step % o_.save_interval == 0));
  if (!r.saved) return;
  const TrainingPosition position{r.step, optimizer_->steps_taken(), skipped_steps_,
                                  skipped_in_a_row_, optimizer_->loss_scaler().dynamic(),
                                  optimizer_->loss_scaler().state()};
  r.save = save_checkpoint(o_.save, position, *model_, *optimizer_, place_, topo_->world(),
                           o_.train, o_.parallel, !o_.no_save_optim, o_.data_record);
}

}  // namespace paralab
