// trainer.cu: main(). flags -> topology -> model -> optimizer -> steps -> report.
//
// One binary for every configuration: `./trainer` is a world of one rank; `mpirun -np N
// ./trainer ...` launches N ranks (world = tp x cp x pp x dp, notes/design.md). Each rank holds
// one pipeline stage (the whole model without pipelining). Each step:
//   the executor (parallel/pipeline_parallel) runs this rank's list of the schedule over
//   the k = global batch / (micro batch x dp) microbatches: F and B of each (1F1B on one
//   stage: forward with the fused head backward, then backward), activations and
//   gradients sent between stages; gradients accumulate;
//   (tensor parallelism splits every layer inside forward and backward:
//    parallel/tensor_parallel)
//   gpt's tied embedding: its two stages' gradients summed over the embedding group;
//   data parallel: gradients summed over dp (parallel/data_parallel: DDP or ZeRO 1-3);
//   global gradient norm, clipping, AdamW at the scheduled learning rate on the parameters
//   this rank owns, then (ZeRO 1-2) the updated parameters all-gathered;
//   every rank's measurements gathered to rank 0 (rank_metrics); every --eval-interval
//   steps and after the last, the validation loss (model/evaluate.h), outside the step's
//   measurements; the step line: measured numbers, and at step 1 / every
//   --report-interval / the end the ledgers, measured beside plan/'s prediction.
// At the end: the run's summary (report/summary.h).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>
#include "app/benchmark.h"  // run_benchmark: --benchmark
#include "app/checkpoint_run.h"  // --load checks, --export-hf, --convert
#include "cli/flags.h"
#include "kernels/math.h"
#include "kernels/ops.h"
#include "measure/clock.h"  // now_seconds
#include "measure/comm_stats.h"
#include "measure/ledger.h"
#include "measure/peak.h"
#include "parallel/comm.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/tensor_parallel.h"
#include "parallel/topology.h"
#include "checkpoint/checkpoint.h"
#include "model/data.h"
#include "model/evaluate.h"
#include "model/optimizer.h"
#include "model/pipeline_stage.h"
#include "checkpoint/tensor_file.h"
#include "model/transformer.h"
#include "plan/plan.h"
#include "report/checkpoint_report.h"
#include "report/moe_routing.h"
#include "app/projection.h"
#include "report/report_cp.h"
#include "report/report_time.h"
#include "report/moe_plan.h"
#include "report/rank_metrics.h"
#include "report/report.h"
#include "report/summary.h"
#include "report/text.h"
#include "report/timeline.h"

using namespace paralab;

namespace {

// The peak per rank: --peak-tflops, the GPU's configs/hardware profile, or a timed sgemm.
Peak find_peak(const Options& o) {
  std::string gpu = o.device == kernels::Device::CUDA ? kernels::cuda_device_name() : "";
  auto measure = [&]() -> double {
    const int n = 512;
    Buffer<float> a(o.device, (size_t)n * n, Category::WORKSPACE);
    Buffer<float> b(o.device, (size_t)n * n, Category::WORKSPACE);
    Buffer<float> c(o.device, (size_t)n * n, Category::WORKSPACE);
    auto gemm = [&]() {
      kernels::gemm(o.device, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                    c.data(), n);
      kernels::synchronize(o.device);
    };
    return measure_peak_tflops(gemm, 2.0 * n * n * n);  // best of kPeakTrials
  };
  return resolve_peak(o.peak_tflops, gpu, o.train.bf16, "configs/hardware", measure);
}

// Total payload bytes this rank moved in the step (every group and operation).
double step_comm_bytes(const CommStats& step) {
  double total = 0;
  for (int g = 0; g < kNumCommGroups; ++g)
    for (int op = 0; op < kNumCommOps; ++op)
      total += step.get(CommGroup(g), CommOp(op)).payload_bytes;
  return total;
}

// The plan's view of the run flags that are not in the configuration structs.
PlanOptions plan_options(const Options& o) {
  PlanOptions p;
  p.attention_flops = o.attention_flops;
  p.overlap_grad_reduce = o.overlap_grad_reduce;
  p.overlap_param_gather = o.overlap_param_gather;
  p.ddp_bucket_size = o.ddp_bucket_size;
  p.zero3_prefetch_layers = o.zero3_prefetch_layers;
  p.flash_ring_by_group = o.comm == Comm::MPI;
  return p;
}

// SIGINT / SIGTERM (Slurm's preemption signal): finish the step, save, stop. The handler only
// raises the flag; a second signal ends the process at once (the default action restored).
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int signal) {
  g_stop_signal = signal;
  std::signal(signal, SIG_DFL);
}

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

int train(const Options& o, const World& w) {
  const ParallelConfig& par = o.parallel;
  const kernels::Device dev = o.device;
  if (dev == kernels::Device::CUDA) kernels::cuda_select_device(w.local_rank);
  set_collective_timeout(o.collective_timeout);  // the comm layer's watchdog (parallel/comm.h)
  Topology topo(GridSpec{w.size, par.tensor_parallel, par.context_parallel,
                         par.pipeline_parallel, par.expert_parallel,
                         par.expert_tensor_parallel},
                o.comm == Comm::NCCL ? CommBackend::NCCL : CommBackend::MPI, dev);
  const bool rank0 = w.rank == 0;
  if (o.verbose && rank0) std::printf("%s\n", describe_grid(topo.layout()).c_str());

  // this rank's plan (the cp ranks of a contiguous layout differ: their attention work)
  PlanOptions my_options = plan_options(o);
  my_options.cp_rank = topo.coord().cp;
  const Plan plan = make_plan(o.model, o.train, par, my_options);
  // --cp-layout contiguous: every cp rank's plan, for the per-rank comparisons
  std::vector<Plan> cp_plans;
  for (int c = 0; par.cp_layout == CpLayout::CONTIGUOUS && c < par.context_parallel &&
                  par.context_parallel > 1; ++c) {
    PlanOptions options = plan_options(o);
    options.cp_rank = c;
    cp_plans.push_back(make_plan(o.model, o.train, par, options));
  }
  // The projected step (plan/time_model.h) on the profile, printed beside the measured one
  HardwareChoice hardware;
  StepTime projected;
  try {
    hardware = choose_hardware(o, true);
    if (hardware.found) projected = project_step_time(plan, hardware.profile, false);
  } catch (const InputError& e) {
    exit_on_input_error(e, w.rank, [](int) { finalize_world(); });
  } catch (const std::invalid_argument& e) {
    exit_on_input_error(FlagError(std::string("--hardware: ") + e.what()), w.rank,
                        [](int) { finalize_world(); });
  }
  // Before anything is allocated: does every rank's plan fit its memory? (exit 2 if not)
  check_run_fits(o, plan, w, topo);
  const Peak peak = find_peak(o);
  const int dp = par.data_parallel(), dp_rank = topo.coord().dp;

  DataParallelOptions dp_options;
  dp_options.bf16 = o.train.bf16;
  dp_options.zero_stage = par.zero_stage;
  dp_options.overlap_grad_reduce = o.overlap_grad_reduce;
  dp_options.overlap_param_gather = o.overlap_param_gather;
  dp_options.bucket_size = o.ddp_bucket_size;
  dp_options.prefetch_units = o.zero3_prefetch_layers;
  // This rank's pipeline stage (the whole model without pipelining): its units are what
  // data parallelism holds, each in its chunk; gpt's tied embedding defers its buckets.
  const int pp = par.pipeline_parallel, pp_rank = topo.coord().pp;
  const StageSlice slice =
      pp > 1 ? pipeline_stage_slice(o.model, pp, par.virtual_pipeline, pp_rank,
                                    par.first_stage_layers, par.last_stage_layers)
             : whole_model(o.model);
  dp_options.unit_chunk = stage_unit_chunk(slice);
  dp_options.deferred_units = stage_deferred_units(o.model, slice);
  DataParallel data_parallel(stage_units(o.model, par.tensor_parallel, slice, expert_split(par)),
                             par.context_parallel > 1 ? &topo.dp_cp() : &topo.dp(), dp_options,
                             dev);
  const TensorParallel tensor_parallel{&topo.tp(), par.sequence_parallel, dev};
  // Expert parallelism: the experts of this stage over the ep group, their parameters a
  // second data parallelism over the expert-data-parallel group (same options; ZeRO shards
  // them over edp), present when the experts are apart (ep > 1, or etp != tp: folded over
  // the tp ranks) and the stage has an MoE layer.
  const int ep = par.expert_parallel, etp = par.expert_tensor_parallel;
  const ExpertParallel expert_parallel{ep > 1 ? &topo.ep() : nullptr,
                                       ep * etp > 1 ? &topo.etp_ep() : nullptr,
                                       par.token_dispatcher, dev, par.experts_apart(),
                                       etp > 1 ? &topo.etp() : nullptr};
  std::unique_ptr<DataParallel> expert_data_parallel;
  const std::vector<int64_t> expert_units = stage_expert_units(o.model, slice, expert_split(par));
  if (!expert_units.empty()) {
    DataParallelOptions expert_options = dp_options;
    expert_options.deferred_units.clear();  // the experts are never tied
    expert_data_parallel.reset(new DataParallel(expert_units, &topo.edp(), expert_options, dev));
  }
  // Context parallelism: each sequence over the cp group; the gradients of every
  // parameter sum over dp x cp (the data parallelism above, one group)
  const ContextParallel context_parallel{par.context_parallel > 1 ? &topo.cp() : nullptr,
                                         par.cp_comm_type, par.cp_layout, dev};
  Transformer model(o.model, dev, &data_parallel, tensor_parallel, slice, &topo.pp(),
                    &topo.embedding(), expert_parallel, expert_data_parallel.get(),
                    context_parallel);
  model.init_parameters(o.train.seed);
  // --load / --load-hf (app/checkpoint_run.h): the parameters, then the optimizer built on them
  // (bf16: its master starts as them) takes the checkpoint's moments and master.
  ResumePoint resume = load_parameters_to_resume(o, model, topo.world(), w.rank);
  AdamW optimizer(model, o.train);
  load_optimizer_to_resume(resume, o, model, optimizer, rank0);
  const TrainingPosition start = resume.position;
  const CheckpointPlace place{par.zero_stage,
                              (par.context_parallel > 1 ? topo.dp_cp() : topo.dp()).rank(),
                              topo.edp().rank()};
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  DataLoader data(o.data_path, o.model, o.train, dp);
  const int B = o.train.micro_batch_size, N = B * o.model.seq_length;
  const int k = data.grad_accum_steps();
  std::vector<std::vector<int>> tokens(k, std::vector<int>(N)), targets(tokens);
  // what a stage sends on: this rank's tokens (S/cp of each sequence; N/t of them with sp)
  const size_t message = (size_t)tensor_parallel.local_tokens(N / par.context_parallel) *
                         o.model.hidden_size;
  // The schedule the plan simulated (1F1B over one stage without pipelining), run here.
  PipelineExecutor executor(plan.pipeline.schedule, pp_rank, &topo.pp(),
                            message,
                            o.train.bf16 ? DType::BF16 : DType::F32);
  // --eval-interval: the forward-only pass over the held-out split, through the same stages
  std::unique_ptr<Evaluator> evaluator;
  if (o.eval_interval > 0)
    evaluator.reset(new Evaluator(model, data, plan.pipeline.schedule, pp_rank, &topo.pp(),
                                  &topo.world(),
                                  message,
                                  o.train.bf16 ? DType::BF16 : DType::F32, B, dp_rank));
  // Each world rank's pipeline stage and pipeline (its tp, cp, dp position), and the ranks
  // of rank 0's pipeline in stage order.
  std::vector<int> pp_rank_of(w.size), pipeline_of(w.size), pipeline_ranks;
  for (int r = 0; r < w.size; ++r) {
    const RankCoord c = topo.layout().coord_of(r);
    pp_rank_of[r] = c.pp;
    pipeline_of[r] = c.tp + par.tensor_parallel * (c.cp + par.context_parallel * c.dp);
    if (c.tp == 0 && c.cp == 0 && c.dp == 0) pipeline_ranks.push_back(r);
  }
  ActionCosts costs = plan.pipeline.costs;  // the plan's units until a step was measured
  // the loss's all-reduce over the world happens on the device, like every collective
  Buffer<float> loss_scalar;
  // (with the stop flag beside it: a signal on any rank stops every rank after the same step)
  if (w.size > 1) loss_scalar.allocate(dev, 2, Category::COMM_BUFFERS);

  std::unique_ptr<std::ofstream> jsonl;
  if (rank0 && !o.metrics_jsonl.empty()) {
    jsonl.reset(new std::ofstream(o.metrics_jsonl));
    if (!*jsonl) throw FatalError("--metrics-jsonl: cannot write " + o.metrics_jsonl, 2);
  }
  if (rank0) {
    for (const std::string& warning : o.warnings)
      std::fprintf(stderr, "paralab: warning: %s\n", warning.c_str());
    std::printf("%s\n", run_header(plan, kernels::device_name(dev), &peak).c_str());
    std::printf("data: %s\n", data.describe().c_str());
  }

  // The run: the step line's mean loss since the previous line, and the summary's totals
  // (rank 0); this rank's largest ledger totals of a step and of an evaluation.
  LogAverage logged_loss;
  RunSummary run;
  int64_t my_peak = 0, my_eval_peak = -1;
  // steps with a loss or gradient norm not finite (a resumed run continues the counts)
  int skipped_steps = start.skipped_steps, skipped_in_a_row = start.skipped_in_a_row;
  std::string stopped;  // why the loop ended early (exit status 3), else empty
  std::string exited;   // why it ended early and well (--exit-interval, a signal), else empty
  kernels::synchronize(dev);
  const double train_start = now_seconds();
  for (int step = start.iteration + 1; step <= o.train.train_iters; ++step) {
    set_comm_step(step);
    Ledger::instance().reset_peaks();
    kernels::reset_flop_counter();
    kernels::reset_gemm_seconds();
    kernels::reset_gemm_counts();
    kernels::reset_kernel_counts();
    model.reset_moe_stats();
    CommStats::instance().reset();
    kernels::synchronize(dev);
    const double t0 = now_seconds();

    model.zero_grads();
    for (int micro = 0; micro < k; ++micro)
      data.microbatch(step, micro, dp_rank, tokens[micro].data(), targets[micro].data());
    // every stage derives microbatch i's dropout seed alike, so its masks are the
    // single-rank run's
    ModelStage stage(model, k, B, splits_backward(plan.pipeline.shape.kind), [&](int micro) {
      const uint64_t seed = kernels::mix64(
          o.train.seed ^ kernels::mix64(((uint64_t)step << 20) + (uint64_t)dp_rank * k + micro));
      return Transformer::Microbatch{tokens[micro].data(), targets[micro].data(), B,
                                     1.0f / (k * dp), seed, false};
    });
    const PipelineTiming timing = executor.run(stage);
    model.sync_tied_embedding();
    const float lr = learning_rate(o.train, step);
    // the reported loss: mean over the global batch (every microbatch of every dp rank);
    // taken before the update, so that a step whose loss is not finite updates nothing
    bool signalled = g_stop_signal != 0;
    const float loss = world_mean_loss(topo.world(), loss_scalar, (float)(stage.loss_sum() / k),
                                       pp, par.context_parallel, &signalled);
    const float grad_norm = optimizer.step(lr, !std::isfinite(loss));
    const bool skipped = optimizer.skipped();  // alike on every rank: loss and norm are global
    model.update_expert_bias(par.context_parallel > 1 ? &topo.dp_cp() : &topo.dp(), !skipped);
    skipped_in_a_row = skipped ? skipped_in_a_row + 1 : 0;
    skipped_steps += skipped;
    // Every rank stops alike (the loss and the norm are global), after this step's report;
    // what was written is whole: the step lines and --metrics-jsonl records so far, no
    // summary, no --save.
    if (skipped_in_a_row >= o.train.max_skipped_steps)
      stopped = strprintf("stopped at step %d: %d steps in a row skipped (%d-%d), their loss "
                          "or gradient norm not finite; --max-skipped-steps %d",
                          step, skipped_in_a_row, step - skipped_in_a_row + 1, step,
                          o.train.max_skipped_steps);
    kernels::synchronize(dev);
    const double seconds = now_seconds() - t0;
    const CommStats step_comm = CommStats::instance();  // before the report's own gather
    const std::vector<std::pair<std::string, kernels::GemmCount>> gemm_counts =
        kernels::gemm_counts();
    const kernels::KernelCount kernel_count = kernels::kernel_counts();

    StepMetrics s;
    s.step = step;
    s.loss = loss;
    s.lr = lr;
    s.grad_norm = grad_norm;
    s.skipped = skipped;
    s.skipped_steps = skipped_steps;
    s.step_seconds = seconds;
    for (int c = 0; c < kNumCategories; ++c)
      s.memory_bytes[c] = (int64_t)Ledger::instance().peak(Category(c));
    s.peak_memory_bytes = (int64_t)Ledger::instance().peak_total();
    // What is held between steps (after the optimizer step): the ledger now,
    // beside MemoryPlan's resident model states (the memory table's "held between steps")
    for (int c = 0; c < kNumCategories; ++c)
      s.resident_bytes[c] = (int64_t)Ledger::instance().current(Category(c));
    s.resident_measured = true;
    s.hardware_flops = kernels::flop_counter();
    s.kernel_launches = kernel_count.launches;
    s.kernel_bytes = kernel_count.bytes;
    s.attention_launches = kernel_count.attention_launches;
    // the routers' step over every rank: a collective (every rank, every step), after the
    // step's ledger was read (its buffers are the report's, not the training's)
    const MoeStepReport moe = o.model.moe.enabled()
                                  ? gather_moe_report(topo.world(), model, (double)k * dp)
                                  : MoeStepReport();
    // With a capacity the experts' rows (and the kept pairs) depend on the routing, and with
    // expert parallelism the rows each rank's experts receive: the plan evaluated at the
    // routing each pipeline measured this step, on rank 0 (plan/moe_memory.h)
    std::vector<Plan> routed_plans;
    if (o.model.moe.enabled() && (o.model.moe.capacity_factor > 0 || ep * etp > 1)) {
      const std::vector<MoeRouting> routing =
          gather_moe_routing(topo.world(), model, k, pipeline_of);
      // pipeline i = tp_rank + tp (cp_rank + cp dp_rank): its cp rank's plan
      for (int i = 0; rank0 && i < (int)routing.size(); ++i) {
        PlanOptions options = plan_options(o);
        options.cp_rank = (i / par.tensor_parallel) % par.context_parallel;
        routed_plans.push_back(make_plan(o.model, o.train, par, options, routing[i]));
      }
    }
    std::vector<const Plan*> rank_plans;  // each rank's, with routed_plans or cp_plans
    for (int r = 0; r < w.size && !routed_plans.empty(); ++r)
      rank_plans.push_back(&routed_plans.at(pipeline_of[r]));
    for (int r = 0; r < w.size && routed_plans.empty() && !cp_plans.empty(); ++r)
      rank_plans.push_back(&cp_plans.at(topo.layout().coord_of(r).cp));
    const Plan& step_plan = routed_plans.empty() ? plan : routed_plans.at(pipeline_of[0]);
    for (int l = 0; l < o.model.num_layers && o.model.moe.enabled(); ++l)
      s.moe_nonempty.push_back(model.moe_layers()[l].stats.nonempty_experts);
    s.gemm_seconds = kernels::gemm_seconds();
    if (w.size > 1) s.comm_bytes = step_comm_bytes(step_comm);
    for (const auto& [label, count] : gemm_counts)
      s.gemm_calls.push_back({label, count.calls, count.flops});
    if (!moe.empty()) {
      s.moe = &moe;
      s.aux_loss = moe.aux_loss;
      s.z_loss = moe.z_loss;
      s.dropped_pairs = o.model.moe.capacity_factor > 0 ? moe.dropped : -1;
    }

    const bool last = step == o.train.train_iters;
    const bool report = step == 1 || last ||
                        (o.report_interval > 0 && step % o.report_interval == 0);
    // Every rank's measurements to rank 0 when something reads them (the stages of a
    // pipeline differ; --metrics-jsonl's ranks; a report step's FLOPs): one collective.
    const bool gather = w.size > 1 && (pp > 1 || !o.metrics_jsonl.empty() || report);
    RankMetrics mine;
    mine.rank = w.rank;
    mine.memory_bytes = s.memory_bytes;
    mine.peak_memory_bytes = s.peak_memory_bytes;
    mine.hardware_flops = s.hardware_flops;
    mine.kernel_launches = s.kernel_launches;
    mine.kernel_bytes = s.kernel_bytes;
    mine.attention_launches = s.attention_launches;
    mine.comm = step_comm;
    mine.actions = timing.actions;
    mine.exchanges = timing.exchanges;
    mine.run_seconds = timing.run_seconds;
    mine.start_seconds = timing.start_seconds;
    for (int c = 0; c < 4; ++c) mine.resident_bytes[c] = s.resident_bytes[c];
    mine.comm_events = step_comm.events();  // --trace's comm lane (gathered below)
    const std::vector<RankMetrics> ranks =
        gather ? gather_rank_metrics(topo.world(), mine, plan.pipeline.schedule, pp_rank_of,
                                     last && !o.trace.empty())
               : std::vector<RankMetrics>{mine};  // (then pp is 1: rank 0 is its pipeline)
    my_peak = std::max(my_peak, s.peak_memory_bytes);
    // Validation (every rank): after the step's measurements were read, so its memory,
    // FLOPs and communication are not the step's (the next step resets them all).
    const bool evaluate = evaluator && (step % o.eval_interval == 0 || last);
    EvalResult eval;
    if (evaluate) {
      eval = evaluator->run(o.eval_iters);
      my_eval_peak = std::max(my_eval_peak, eval.peak_memory_bytes);
    }
    // Early and well: --exit-interval, or SIGINT / SIGTERM on any rank (every rank learnt it
    // from the loss's all-reduce). A checkpoint (--save) at --save-interval, at the last
    // step and before such an exit; never after bad numbers (stopped).
    if (stopped.empty() && o.exit_interval > 0 && step % o.exit_interval == 0 && !last)
      exited = strprintf("--exit-interval %d", o.exit_interval);
    if (stopped.empty() && signalled && !last) exited = "SIGINT or SIGTERM";
    SaveStats saved;
    const bool save = !o.save.empty() && stopped.empty() &&
                      (last || !exited.empty() ||
                       (o.save_interval > 0 && step % o.save_interval == 0));
    if (save) {
      const TrainingPosition position{step, optimizer.steps_taken(), skipped_steps,
                                      skipped_in_a_row};
      saved = save_checkpoint(o.save, position, model, optimizer, place, topo.world(), o.train,
                              par);
    }
    if (!rank0) {
      if (!stopped.empty() || !exited.empty()) break;
      continue;
    }
    std::vector<RankMetrics> report_ranks = ranks;  // with their predicted bubble, below
    if (gather) {
      s.hardware_flops_all = 0;
      for (const RankMetrics& r : ranks) s.hardware_flops_all += r.hardware_flops;
    }
    // The pipeline of rank 0's (tp, dp) position, measured, and its simulation with the
    // previous step's measured costs (the plan's unit costs at step 1).
    std::vector<const RankMetrics*> pipeline;
    for (int r : pipeline_ranks) pipeline.push_back(&ranks[r]);
    const Simulation measured = measured_timeline(pipeline);
    if (pp > 1) {
      const Simulation predicted = simulate(plan.pipeline.schedule, costs);
      s.bubble = measured.bubble;
      s.bubble_predicted = predicted.bubble;
      fill_bubbles(report_ranks, pipeline_of, pp_rank_of, predicted);
    }
    costs = measured_costs(plan.pipeline.schedule, pipeline);
    fill_rates(s, step_plan, peak);
    MeasuredTime measured_time;
    measured_time.step = seconds;
    measured_time.gemm = s.gemm_seconds;
    measured_time.comm = &step_comm;
    if (pp > 1 && !report_ranks.empty() && report_ranks[0].bubble >= 0)
      measured_time.bubble = report_ranks[0].bubble * seconds;
    if (hardware.found) s.projected_time = &projected, s.measured_time = measured_time;

    // The step line: the loss averaged since the previous line (Megatron's logged loss),
    // elapsed wall time and ETA = elapsed / steps done x steps left.
    const bool line = step == 1 || last || step % o.log_interval == 0 || skipped;
    if (!skipped) logged_loss.add(loss);  // Megatron's logged loss leaves skipped steps out
    s.log_interval = o.log_interval;
    s.elapsed_seconds = now_seconds() - train_start;
    s.eta_seconds = s.elapsed_seconds / (step - start.iteration) * (o.train.train_iters - step);
    if (line) {
      s.loss_mean = logged_loss.mean();
      s.loss_steps = logged_loss.count();
      run.final_train_loss = s.loss_mean;
      run.final_train_first = step - s.loss_steps + 1;
      logged_loss.reset();
    }
    run.add_step((double)plan.tokens_per_step, seconds, s.mfu, s.hfu);
    run.skipped_steps = skipped_steps;
    if (evaluate) {
      s.valid_loss = eval.loss;
      run.add_eval(step, eval.loss, eval.seconds, o.eval_iters);
    }

    if (step == 1) std::printf("%s\n", step_header(s).c_str());
    if (line) std::printf("%s\n", step_row(s).c_str());
    if (evaluate)
      std::printf("%s\n", validation_line(step, last, eval.loss, o.eval_iters,
                                          (int)plan.global_batch, eval.seconds).c_str());
    if (jsonl)
      *jsonl << step_json(s, step_plan, w.rank, &step_comm, gather ? &report_ranks : nullptr,
                          rank_plans.empty() ? nullptr : &rank_plans)
             << "\n"
             << std::flush;
    if (report) {
      std::printf("\n%s\n%s\n", memory_table(step_plan, w.rank, &s).c_str(),
                  flops_table(step_plan, w.rank, &s).c_str());
      if (!moe.empty())
        std::printf("%s\n%s\n", moe_table(moe, plan).c_str(),
                    gemm_calls_table(step_plan, s, w.rank, &s.moe_nonempty).c_str());
      if (hardware.found)
        std::printf("%s\n", time_measured_text(projected, measured_time).c_str());
      else if (step == 1)
        std::printf("time per step: no projection (%s)\n\n", hardware.reason.c_str());
      if (step == 1 && par.context_parallel > 1)
        std::printf("%s\n", cp_plan_text(step_plan, &peak).c_str());
      if (w.size > 1) std::printf("%s\n", rank_memory_table(step_plan, ranks).c_str());
      if (w.size > 1)
        std::printf("%s\n%s\n", comm_table(plan, &step_comm).c_str(),
                    step_comm.table("communication time (measured only), rank 0").c_str());
      if (!last) std::printf("%s\n", step_header(s).c_str());
    }
    // The last step's pipeline as measured: the terminal timeline and the Chrome trace.
    if (last && o.print_schedule)
      std::printf("%s", measured_timelines(plan, ranks, pipeline_of).c_str());
    if (last && !o.trace.empty()) {
      std::vector<TraceSpan> spans;
      std::vector<TraceFlow> flows;
      std::vector<TraceProcess> processes;
      measured_trace(plan, ranks, pipeline_of, &processes, &spans, &flows);
      write_chrome_trace(o.trace, spans, flows,
                         strprintf("paralab: measured %s schedule, step %d, every rank",
                                   schedule_name(plan.pipeline.shape.kind), step),
                         processes);
      std::printf("trace: wrote %s (measured; open in ui.perfetto.dev)\n", o.trace.c_str());
    }
    if (save) {
      const HardwareProfile* profile = hardware.found ? &hardware.profile : nullptr;
      std::printf("%s", checkpoint_text(saved, plan, profile).c_str());
      if (jsonl) *jsonl << checkpoint_json(saved, plan, profile, step) << "\n" << std::flush;
    }
    std::fflush(stdout);
    if (!stopped.empty() || !exited.empty()) {
      if (!exited.empty())
        std::printf("stopped after step %d (%s)%s\n", step, exited.c_str(),
                    o.save.empty() ? ": no --save, nothing saved"
                                   : (": resume with --load " + o.save).c_str());
      break;
    }
  }
  data_parallel.drain();
  if (expert_data_parallel) expert_data_parallel->drain();
  if (!stopped.empty()) {
    if (rank0) std::fprintf(stderr, "paralab: %s\n", stopped.c_str());
    return 3;
  }
  // The summary: every rank's largest step and evaluation totals, to rank 0 (one gather).
  const std::vector<double> peaks =
      all_gather_doubles(topo.world(), {(double)my_peak, (double)my_eval_peak});
  if (rank0) {
    run.wall_seconds = now_seconds() - train_start;
    for (int r = 0; r < (int)peaks.size() / 2; ++r) {
      if (peaks[2 * r] > run.peak_memory_bytes)
        run.peak_memory_bytes = (int64_t)peaks[2 * r], run.peak_memory_rank = r;
      if (peaks[2 * r + 1] > run.eval_peak_memory_bytes)
        run.eval_peak_memory_bytes = (int64_t)peaks[2 * r + 1], run.eval_peak_memory_rank = r;
    }
    std::printf("\n%s", summary_text(run).c_str());
    if (jsonl) *jsonl << summary_json(run) << "\n" << std::flush;
    std::fflush(stdout);
  }
  if (!o.save_tensors.empty()) save_parameters(model, o.save_tensors, rank0);
  if (!o.export_hf.empty()) export_weights(model, o, rank0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  World w = init_world(argc, argv);
  int code = run_main([&]() -> int {
    const Options o = parse_flags_or_exit(argc, argv, w.size, w.rank,
                                          [](int) { finalize_world(); });
    print_resolved_options(o, w.rank);  // --verbose, before the plan or the run
    if (o.benchmark) return run_benchmark(o, w);
    if (o.convert) {
      try {
        return run_convert(o, w);
      } catch (const InputError& e) {
        exit_on_input_error(e, w.rank, [](int) { finalize_world(); });
      }
    }
    if (o.plan) {
      Plan plan;
      try {
        plan = make_plan(o.model, o.train, o.parallel, plan_options(o));
      } catch (const std::invalid_argument& e) {
        exit_on_input_error(FlagError(e.what()), w.rank,
                            [](int) { finalize_world(); });
      }
      // the time model and the fit check on the hardware profile (app/projection.h)
      PlanExtras extras;
      Peak peak{o.peak_tflops,
                o.peak_tflops > 0 ? "flag" : "give --peak-tflops or --hardware for MFU"};
      HardwareChoice hw;
      try {
        hw = choose_hardware(o, false);
        plan_extras(extras, o, plan, hw);
        if (hw.found && o.peak_tflops <= 0) peak = peak_from_profile(hw.profile, o.train.bf16);
      } catch (const InputError& e) {
        exit_on_input_error(e, w.rank, [](int) { finalize_world(); });
      }
      if (w.rank == 0) {
        if (o.json)
          std::printf("%s\n", plan_json(plan, &peak, true, &extras.view).c_str());
        else
          std::printf("%s\n%s\n%s", plan_text(plan, &peak).c_str(),
                      time_plan_text(plan, extras.view).c_str(),
                      checkpoint_plan_text(plan, hw.found ? &hw.profile : nullptr).c_str());
        // The pipeline's simulated timeline: text beside the plan (stderr keeps --json
        // parseable), and as a Chrome trace at 1 ms per cost unit.
        const PipelinePlan& pp = plan.pipeline;
        if (o.print_schedule)
          std::fprintf(o.json ? stderr : stdout, "%s",
                       render_timeline(pp.schedule, pp.sim, pp.costs).c_str());
        if (!o.trace.empty()) {
          std::vector<TraceSpan> spans;
          std::vector<TraceFlow> flows;
          schedule_trace(pp.schedule, pp.sim, pp.costs, 1000.0, &spans, &flows);
          try {
            write_chrome_trace(o.trace, spans, flows,
                               std::string("paralab --plan: simulated ") +
                                   schedule_name(pp.shape.kind) + " schedule, 1 ms per cost unit");
          } catch (const std::runtime_error& e) {
            exit_on_input_error(FlagError(e.what()), w.rank, [](int) { finalize_world(); });
          }
          std::fprintf(o.json ? stderr : stdout,
                       "trace: wrote %s (simulated, 1 ms per cost unit; open in ui.perfetto.dev)\n",
                       o.trace.c_str());
        }
      }
      return 0;
    }
    return train(o, w);
  });
  finalize_world();
  return code;
}
