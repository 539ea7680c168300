// app/training_report.cpp: what a run prints (app/training.h): begin (the header), report
// (rank 0, each step: the step line, the ledgers beside the plan, --metrics-jsonl, the
// measured timeline and --trace, the checkpoint's line) and finish (the summary and the
// end-of-run files).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include "app/training.h"
#include "checkpoint/tensor_file.h"
#include "kernels/ops.h"
#include "plan/gemm_calls.h"  // unaligned_gemm_dims
#include "measure/clock.h"
#include "report/checkpoint_report.h"
#include "report/moe_plan.h"
#include "report/rank_metrics.h"
#include "report/report_cp.h"
#include "report/report_time.h"
#include "report/text.h"
#include "report/timeline.h"

namespace paralab {
namespace {

// --save-tensors: every parameter, and as grad.<name> the last step's summed gradient, at full
// shape by table name (collective: gathered over dp and tp).
void save_parameters(Transformer& model, const std::string& path, bool rank0) {
  const std::vector<float> params = model.gather_full(false);
  const std::vector<float> grads = model.gather_full(true);
  if (!rank0) return;
  std::vector<NamedTensor> tensors;
  size_t offset = 0;
  for (const ParamSpec& p : param_table(model.config())) {
    const size_t n = p.numel();
    tensors.push_back(NamedTensor::floats(
        p.name, p.shape, std::vector<float>(params.begin() + offset, params.begin() + offset + n)));
    tensors.push_back(NamedTensor::floats(
        "grad." + p.name, p.shape,
        std::vector<float>(grads.begin() + offset, grads.begin() + offset + n)));
    offset += n;
  }
  write_tensor_file(path, tensors);
}

}  // namespace

void Training::begin() {
  if (rank0_) {
    for (const std::string& warning : o_.warnings)
      std::fprintf(stderr, "paralab: warning: %s\n", warning.c_str());
    if (o_.device == kernels::Device::CUDA && !unaligned_gemm_dims(plan_).empty())
      std::fprintf(stderr, "paralab: warning: GEMM leading dimensions %s\n",
                   gemm_alignment_text(plan_).c_str());
    std::printf("%s\n", run_header(plan_, kernels::device_name(o_.device), &peak_).c_str());
    const ModelConfig& m = o_.model;
    if (o_.device == kernels::Device::CUDA && m.attention == AttentionImpl::FLASH)
      std::printf("attention kernels: %s\n",
                  kernels::flash_attention_kernel(o_.device, o_.train.half(), m.seq_length,
                                                  m.num_attention_heads, m.groups(),
                                                  m.head_dim(), m.attention_dropout)
                      .c_str());
    std::printf("data: %s\n", data_->describe().c_str());
  }
  kernels::synchronize(o_.device);
  train_start_ = now_seconds();
}

void Training::report(StepRecord& r) {
  if (!rank0_) return;
  StepMetrics& s = r.metrics;
  if (r.gathered) {
    s.hardware_flops_all = 0;
    for (const RankMetrics& m : r.ranks) s.hardware_flops_all += m.hardware_flops;
  }
  std::vector<RankMetrics> report_ranks = r.ranks;  // with their predicted bubble, below
  compare_pipeline(r, report_ranks);
  fill_rates(s, *r.step_plan, peak_);
  const MeasuredTime measured_time = step_measured_time(r, report_ranks);
  if (hardware_.found) s.projected_time = &projected_, s.measured_time = measured_time;
  const bool line = add_to_run_totals(r);
  print_step(r, line, report_ranks);
  if (r.report) print_ledgers(r, measured_time);
  print_last_step(r);
  print_saved_or_stopped(r);
}

// The pipeline of rank 0's (tp, dp) position, measured, and its simulation with the previous
// step's measured costs (the plan's unit costs at step 1): the bubble, measured beside
// predicted, and each rank's predicted bubble in report_ranks; the next step simulates with
// this step's costs.
void Training::compare_pipeline(StepRecord& r, std::vector<RankMetrics>& report_ranks) {
  std::vector<const RankMetrics*> pipeline;
  for (int q : pipeline_ranks_) pipeline.push_back(&r.ranks[q]);
  const Simulation measured = measured_timeline(pipeline);
  if (pp_ > 1) {
    const Simulation predicted = simulate(plan_.pipeline.schedule, costs_);
    r.metrics.bubble = measured.bubble;
    r.metrics.bubble_predicted = predicted.bubble;
    fill_bubbles(report_ranks, pipeline_of_, pp_rank_of_, predicted);
  }
  costs_ = measured_costs(plan_.pipeline.schedule, pipeline);
}

// The step's measured time per phase, the column the time table puts beside the projection.
MeasuredTime Training::step_measured_time(const StepRecord& r,
                                          const std::vector<RankMetrics>& report_ranks) const {
  const StepMetrics& s = r.metrics;
  MeasuredTime measured_time;
  measured_time.step = s.step_seconds;
  measured_time.gemm = s.kernel_seconds.gemm;
  measured_time.attention = s.kernel_seconds.attention;
  measured_time.memory = s.kernel_seconds.memory;
  measured_time.optimizer = s.kernel_seconds.optimizer;
  measured_time.ops = s.op_times;
  measured_time.comm = &r.comm;
  if (o_.parallel.offload.enabled()) measured_time.host_optimizer = optimizer_->host_seconds();
  if (pp_ > 1 && !report_ranks.empty() && report_ranks[0].bubble >= 0)
    measured_time.bubble = report_ranks[0].bubble * s.step_seconds;
  return measured_time;
}

// The step line's loss, averaged since the previous line (Megatron's logged loss), elapsed
// wall time and ETA = elapsed / steps done x steps left, and the summary's totals. Returns
// whether this step prints its line.
bool Training::add_to_run_totals(StepRecord& r) {
  StepMetrics& s = r.metrics;
  const int step = r.step;
  const bool line = step == 1 || r.last || step % o_.log_interval == 0 || s.skipped;
  if (!s.skipped) logged_loss_.add(s.loss);  // Megatron's logged loss leaves skipped steps out
  s.log_interval = o_.log_interval;
  s.train_iters = o_.train.train_iters;
  s.elapsed_seconds = now_seconds() - train_start_;
  s.eta_seconds = s.elapsed_seconds / (step - start_.iteration) * (o_.train.train_iters - step);
  if (line) {
    s.loss_mean = logged_loss_.mean();
    s.loss_steps = logged_loss_.count();
    run_.final_train_loss = s.loss_mean;
    run_.final_train_first = step - s.loss_steps + 1;
    logged_loss_.reset();
  }
  run_.add_step(step, (double)plan_.tokens_per_step, s.step_seconds, s.mfu, s.hfu);
  run_.skipped_steps = skipped_steps_;
  if (r.evaluated) {
    s.valid_loss = r.eval.loss;
    run_.add_eval(step, r.eval.loss, r.eval.seconds, o_.eval_iters);
  }
  return line;
}

// Every step's output: the step line (its header at step 1), the validation line,
// --tensorboard-dir and --metrics-jsonl (every rank's metrics when they were gathered).
void Training::print_step(const StepRecord& r, bool line,
                          const std::vector<RankMetrics>& report_ranks) {
  const StepMetrics& s = r.metrics;
  if (r.step == 1) std::printf("%s\n", step_header(s).c_str());
  if (line) std::printf("%s\n", step_row(s).c_str());
  if (r.evaluated)
    std::printf("%s\n", validation_line(r.step, r.last, r.eval.loss, o_.eval_iters,
                                        (int)plan_.global_batch, r.eval.seconds).c_str());
  if (tensorboard_) write_tensorboard(r);
  if (jsonl_)
    *jsonl_ << step_json(s, *r.step_plan, w_.rank, &r.comm, r.gathered ? &report_ranks : nullptr,
                         r.rank_plans.empty() ? nullptr : &r.rank_plans)
            << "\n"
            << std::flush;
}

// A reported step's ledgers beside the plan: memory, FLOPs, MoE, time, context parallelism,
// every rank's memory and the communication (measured beside predicted).
void Training::print_ledgers(const StepRecord& r, const MeasuredTime& measured_time) {
  const StepMetrics& s = r.metrics;
  const Plan& step_plan = *r.step_plan;
  const int step = r.step;
  std::printf("\n%s\n%s\n", memory_table(step_plan, w_.rank, &s).c_str(),
              flops_table(step_plan, w_.rank, &s).c_str());
  if (!r.moe.empty())
    std::printf("%s\n%s\n", moe_table(r.moe, plan_).c_str(),
                gemm_calls_table(step_plan, s, w_.rank, &s.moe_nonempty).c_str());
  if (hardware_.found)
    std::printf("%s%s\n", time_measured_text(projected_, measured_time).c_str(),
                step == 1 && !hardware_.note.empty() ? ("  " + hardware_.note + "\n").c_str()
                                                     : "");
  else if (step == 1)
    std::printf("time per step: no projection (%s)\n\n", hardware_.reason.c_str());
  if (step == 1 && o_.parallel.context_parallel > 1)
    std::printf("%s\n", cp_plan_text(step_plan, &peak_).c_str());
  if (w_.size > 1) std::printf("%s\n", rank_memory_table(step_plan, r.ranks).c_str());
  if (w_.size > 1 || o_.parallel.offload.enabled())  // CPU offload: the pcie rows
    std::printf("%s\n%s\n", comm_table(plan_, &r.comm).c_str(),
                r.comm.table("communication time (measured only), rank 0").c_str());
  if (!r.last) std::printf("%s\n", step_header(s).c_str());
}

// The last step's pipeline as measured: the terminal timeline and the Chrome trace.
void Training::print_last_step(const StepRecord& r) {
  if (!r.last) return;
  if (o_.print_schedule)
    std::printf("%s", measured_timelines(plan_, r.ranks, pipeline_of_).c_str());
  if (o_.trace.empty()) return;
  std::vector<TraceSpan> spans;
  std::vector<TraceFlow> flows;
  std::vector<TraceProcess> processes;
  measured_trace(plan_, r.ranks, pipeline_of_, &processes, &spans, &flows);
  write_chrome_trace(o_.trace, spans, flows,
                     strprintf("paralab: measured %s schedule, step %d, every rank",
                               schedule_name(plan_.pipeline.shape.kind), r.step),
                     processes);
  std::printf("trace: wrote %s (measured; open in ui.perfetto.dev)\n", o_.trace.c_str());
}

// The checkpoint's line when the step saved, and why the run stopped when it did, with the
// exit status a scheduler reads (app/training.h).
void Training::print_saved_or_stopped(const StepRecord& r) {
  if (r.saved) {
    const HardwareProfile* profile = hardware_.found ? &hardware_.profile : nullptr;
    std::printf("%s", checkpoint_text(r.save, plan_, profile).c_str());
    if (jsonl_) *jsonl_ << checkpoint_json(r.save, plan_, profile, r.step) << "\n" << std::flush;
  }
  std::fflush(stdout);
  if (!r.exited.empty())
    std::printf("stopped after step %d (%s)%s\n", r.step, r.exited.c_str(),
                r.saved ? strprintf(": resume with --load %s (exit status %d)", o_.save.c_str(),
                                    kExitResume).c_str()
                        : strprintf(": no --save, nothing saved (exit status %d)",
                                    kExitStoppedUnsaved).c_str());
}

// --tensorboard-dir: the step's scalars every --tensorboard-log-interval steps (and the last),
// the validation loss whenever there is one; Megatron's tag names where it has the scalar.
void Training::write_tensorboard(const StepRecord& r) {
  const StepMetrics& s = r.metrics;
  std::vector<std::pair<std::string, float>> v;
  if (r.step % o_.tensorboard_log_interval == 0 || r.last || !r.exited.empty()) {
    v = {{"lm loss", (float)s.loss},
         {"learning-rate", (float)s.lr},
         {"grad-norm", (float)s.grad_norm},
         {"iteration-time", (float)s.step_seconds},
         {"tokens-per-second", (float)s.tokens_per_second},
         {"mem-max-allocated-bytes", (float)s.peak_memory_bytes},
         {"skipped-iterations", (float)s.skipped_steps}};
    if (s.grad_underflow.elements > 0) {  // --log-fp16-underflow
      const GradUnderflow& u = s.grad_underflow;
      v.push_back({"fp16-underflow-unscaled-zero", (float)u.fraction(u.unscaled_zero)});
      v.push_back({"fp16-underflow-unscaled-subnormal", (float)u.fraction(u.unscaled_subnormal)});
      v.push_back({"fp16-underflow-stored-below-normal",
                   (float)u.fraction(u.stored_below_normal)});
    }
    for (int k = 0; s.fp8.on && k < kFp8LinearKinds; ++k)  // --log-fp8-scaling
      for (int role = 0; s.fp8.holds(k) && role < kFp8Roles; ++role) {
        const Fp8TensorLog& t = s.fp8.at(k, role);
        const std::string tag = std::string("fp8-") + fp8_linear_kind_name(k) + "-" +
                                fp8_role_name(role) + "-";
        const double n = t.elements > 0 ? (double)t.elements : 1.0;
        v.push_back({tag + "amax", t.amax});
        v.push_back({tag + "scale", t.scale});
        v.push_back({tag + "saturated", (float)(t.saturated / n)});
        v.push_back({tag + "flushed", (float)(t.flushed / n)});
      }
    if (s.loss_scale >= 0) {  // Megatron's tag; the trackers paralab's
      v.push_back({"loss-scale", (float)s.loss_scale});
      if (s.dynamic_loss_scale) {
        v.push_back({"loss-scale-growth-tracker", (float)s.loss_scaler.growth_tracker});
        v.push_back({"loss-scale-hysteresis-tracker", (float)s.loss_scaler.hysteresis_tracker});
      }
    }
    if (std::isfinite(s.mfu)) v.push_back({"mfu", (float)s.mfu});
    if (std::isfinite(s.hfu)) v.push_back({"hfu", (float)s.hfu});
  }
  if (r.evaluated) {
    v.push_back({"lm loss validation", (float)r.eval.loss});
    if (o_.tensorboard_validation_ppl)
      v.push_back({"lm loss validation ppl", (float)perplexity(r.eval.loss)});
  }
  if (!v.empty()) tensorboard_->scalars(r.step, v);
}

// The end: the overlapped collectives drained; after bad numbers exit 3 with the one line;
// else the summary (every rank's largest step and evaluation totals, to rank 0: one gather),
// --save-tensors and --export-hf.
int Training::finish(const StepRecord& last) {
  data_parallel_->drain();
  if (expert_data_parallel_) expert_data_parallel_->drain();
  if (!last.stopped.empty()) {
    if (rank0_) std::fprintf(stderr, "paralab: %s\n", last.stopped.c_str());
    return kExitSkipped;
  }
  const std::vector<double> peaks =
      all_gather_doubles(topo_->world(), {(double)my_peak_, (double)my_eval_peak_});
  if (rank0_) {
    run_.wall_seconds = now_seconds() - train_start_;
    for (int q = 0; q < (int)peaks.size() / 2; ++q) {
      if (peaks[2 * q] > run_.peak_memory_bytes)
        run_.peak_memory_bytes = (int64_t)peaks[2 * q], run_.peak_memory_rank = q;
      if (peaks[2 * q + 1] > run_.eval_peak_memory_bytes)
        run_.eval_peak_memory_bytes = (int64_t)peaks[2 * q + 1], run_.eval_peak_memory_rank = q;
    }
    std::printf("\n%s", summary_text(run_).c_str());
    if (jsonl_) *jsonl_ << summary_json(run_) << "\n" << std::flush;
    std::fflush(stdout);
  }
  if (!o_.save_tensors.empty()) save_parameters(*model_, o_.save_tensors, rank0_);
  if (!o_.export_hf.empty()) export_weights(*model_, o_, rank0_);
  if (!last.exited.empty()) return last.saved ? kExitResume : kExitStoppedUnsaved;
  return kExitFinished;
}

}  // namespace paralab
