// app/training_build.cpp: Training's constructor, the world a run trains in (app/training.h).
// In the order it is built: the rank grid, the plan, the hardware profile and the fit check
// (before anything is allocated), the peak, the parallel dimensions, the model and its
// optimizer (--load resumes them), the data, the executor of the plan's schedule.
#include "app/training.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>
#include "kernels/ops.h"
#include "measure/clock.h"
#include "model/pipeline_stage.h"

namespace paralab {
namespace {

// The peak per rank: --peak-tflops, the GPU's configs/hardware profile, or a timed GEMM.
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
  return resolve_peak(o.peak_tflops, gpu, o.train.precision(), "configs/hardware", measure);
}

}  // namespace

Training::Training(const Options& o, const World& w)
    : o_(o), w_(w), rank0_(w.rank == 0), run_start_(now_seconds()) {
  const ParallelConfig& par = o.parallel;
  const kernels::Device dev = o.device;
  if (dev == kernels::Device::CUDA) {
    kernels::cuda_select_device(w.local_rank);
    // --bf16 or --fp8-format on a GPU without them (cli/flags_gpu.cpp): exit 2 now. Each rank
    // asks of its own GPU (a job may mix them); the first that refuses prints its line.
    const std::string why = gpu_precision_refusal(o, kernels::cuda_device_name(),
                                                  kernels::cuda_compute_capability());
    const int refusing = first_rank_where(!why.empty());
    if (refusing >= 0) {
      if (w.rank == refusing) std::fprintf(stderr, "paralab: error: %s\n", why.c_str());
      finalize_world();
      std::exit(2);
    }
  }
  kernels::set_timing_level(o.timing_log_level);
  set_collective_timeout(o.collective_timeout);  // the comm layer's watchdog (parallel/comm.h)
  topo_.reset(new Topology(GridSpec{w.size, par.tensor_parallel, par.context_parallel,
                                    par.pipeline_parallel, par.expert_parallel,
                                    par.expert_tensor_parallel},
                           o.comm == Comm::NCCL ? CommBackend::NCCL : CommBackend::MPI, dev));
  Topology& topo = *topo_;
  if (o.verbose && rank0_) std::printf("%s\n", describe_grid(topo.layout()).c_str());

  // this rank's plan (the cp ranks of a contiguous layout differ: their attention work)
  PlanOptions my_options = plan_options(o);
  my_options.cp_rank = topo.coord().cp;
  plan_ = make_plan(o.model, o.train, par, my_options);
  for (int c = 0; par.cp_layout == CpLayout::CONTIGUOUS && c < par.context_parallel &&
                  par.context_parallel > 1; ++c) {
    PlanOptions options = plan_options(o);
    options.cp_rank = c;
    cp_plans_.push_back(make_plan(o.model, o.train, par, options));
  }
  // The projected step (plan/time_model.h) on the profile, printed beside the measured one
  try {
    hardware_ = choose_hardware(o, true);
    if (hardware_.found) projected_ = project_step_time(plan_, hardware_.profile, false);
  } catch (const InputError& e) {
    exit_on_input_error(e, w.rank, [](int) { finalize_world(); });
  } catch (const std::invalid_argument& e) {
    exit_on_input_error(FlagError(std::string("--hardware: ") + e.what()), w.rank,
                        [](int) { finalize_world(); });
  }
  // Before anything is allocated: does every rank's plan fit its memory? (exit 2 if not)
  check_run_fits(o, plan_, w, topo);
  peak_ = find_peak(o);
  dp_ = par.data_parallel();
  dp_rank_ = topo.coord().dp;

  DataParallelOptions dp_options;
  dp_options.storage = storage_type(o.train);
  dp_options.zero_stage = par.zero_stage;
  dp_options.overlap_grad_reduce = o.overlap_grad_reduce;
  dp_options.overlap_param_gather = o.overlap_param_gather;
  dp_options.bucket_size = o.ddp_bucket_size;
  dp_options.prefetch_units = o.zero3_prefetch_layers;
  dp_options.offload_fraction = par.offload.host_fraction();  // CPU offload (parallel/offload.h)
  dp_options.offload_params = par.offload.params;
  dp_options.pin_memory = par.offload.pin_memory;
  // This rank's pipeline stage (the whole model without pipelining): its units are what
  // data parallelism holds, each in its chunk; gpt's tied embedding defers its buckets.
  pp_ = par.pipeline_parallel;
  pp_rank_ = topo.coord().pp;
  const PipelineShape& shape = plan_.pipeline.shape;
  const StageSlice slice = pp_ > 1 ? pipeline_stage_slice(o.model, shape, pp_rank_,
                                                          par.stage_split())
                                   : whole_model(o.model);
  dp_options.unit_chunk = stage_unit_chunk(slice);
  dp_options.deferred_units = stage_deferred_units(o.model, slice);
  // DualPipe: the rank holding the same stages; the pair's second rank leaves the norm to
  // the first
  if (shape.placement() == StagePlacement::MIRRORED) {
    dp_options.mirror = &topo.mirror();
    dp_options.mirror_copy = pp_rank_ > shape.mirror_of(pp_rank_);
  }
  data_parallel_.reset(new DataParallel(
      stage_units(o.model, par.tensor_parallel, slice, expert_split(par)),
      par.context_parallel > 1 ? &topo.dp_cp() : &topo.dp(), dp_options, dev));
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
  const std::vector<int64_t> expert_units = stage_expert_units(o.model, slice, expert_split(par));
  if (!expert_units.empty()) {
    DataParallelOptions expert_options = dp_options;
    expert_options.deferred_units.clear();  // the experts are never tied
    expert_data_parallel_.reset(new DataParallel(expert_units, &topo.edp(), expert_options, dev));
  }
  // Context parallelism: each sequence over the cp group; the gradients of every
  // parameter sum over dp x cp (the data parallelism above, one group)
  const ContextParallel context_parallel{par.context_parallel > 1 ? &topo.cp() : nullptr,
                                         par.cp_comm_type, par.cp_layout, dev};
  model_.reset(new Transformer(o.model, dev, data_parallel_.get(), tensor_parallel, slice,
                               &topo.pp(), &topo.embedding(), expert_parallel,
                               expert_data_parallel_.get(), context_parallel));
  model_->set_gradient_buffers(pp_ > 1 ? gradient_buffers(plan_.pipeline.schedule, pp_rank_) : 1);
  // FP8's amax reductions (model/transformer_fp8.cpp): the dense linears' over dp (x cp), each
  // expert's over its copies, edp (the same ranks as dp x cp when the experts are not apart)
  model_->set_fp8_amax_group(par.context_parallel > 1 ? &topo.dp_cp() : &topo.dp(), &topo.edp());
  model_->init_parameters(o.train.seed);
  // --load / --load-hf (app/checkpoint_run.h): the parameters, then the optimizer built on
  // them (bf16: its master starts as them) takes the checkpoint's moments and master.
  ResumePoint resume = load_parameters_to_resume(o, *model_, topo.world(), w.rank);
  // CPU offload: the host update's threads, the node's cores shared by its ranks
  const int host_threads =
      std::max(1, (int)std::thread::hardware_concurrency() / std::max(1, w.local_size));
  optimizer_.reset(new AdamW(*model_, o.train, host_threads));
  load_optimizer_to_resume(resume, o, *model_, *optimizer_, rank0_);
  // --fp8-param-gather at ZeRO-1/2: step 1's weights gathered in FP8 too, as every later
  // step's are, now that the parameters and the FP8 scales are loaded (parallel/data_parallel.h)
  model_->data_parallel().gather_fp8_weights();
  if (DataParallel* experts = model_->expert_data_parallel()) experts->gather_fp8_weights();
  start_ = resume.position;
  skipped_steps_ = start_.skipped_steps;
  skipped_in_a_row_ = start_.skipped_in_a_row;
  place_ = CheckpointPlace{par.zero_stage,
                           (par.context_parallel > 1 ? topo.dp_cp() : topo.dp()).rank(),
                           topo.edp().rank(), dp_options.mirror_copy};
  listen_for_stop_signals();

  data_.reset(new DataLoader(o.data, o.model, o.train, dp_));
  B_ = o.train.micro_batch_size;
  micro_ = data_->grad_accum_steps();
  const int N = B_ * o.model.seq_length;
  tokens_.assign(micro_, std::vector<int>(N));
  targets_ = tokens_;
  // what a stage sends on: this rank's tokens (S/cp of each sequence; N/t of them with sp)
  const size_t message = (size_t)tensor_parallel.local_tokens(N / par.context_parallel) *
                         o.model.hidden_size;
  const DType activations = storage_type(o.train);
  // The schedule the plan simulated (1F1B over one stage without pipelining), run here.
  executor_.reset(new PipelineExecutor(plan_.pipeline.schedule, pp_rank_, &topo.pp(), message,
                                       activations));
  // --eval-interval: the forward-only pass over the held-out split, through the same stages
  if (o.eval_interval > 0)
    evaluator_.reset(new Evaluator(*model_, *data_, plan_.pipeline.schedule, pp_rank_,
                                   &topo.pp(), &topo.world(), message, activations, B_,
                                   dp_rank_));
  pp_rank_of_.resize(w.size);
  pipeline_of_.resize(w.size);
  for (int r = 0; r < w.size; ++r) {
    const RankCoord c = topo.layout().coord_of(r);
    pp_rank_of_[r] = c.pp;
    pipeline_of_[r] = c.tp + par.tensor_parallel * (c.cp + par.context_parallel * c.dp);
    if (c.tp == 0 && c.cp == 0 && c.dp == 0) pipeline_ranks_.push_back(r);
  }
  costs_ = plan_.pipeline.costs;
  // the loss's all-reduce over the world happens on the device, like every collective (with
  // the stop flag beside it: a signal on any rank stops every rank after the same step)
  if (w.size > 1) loss_scalar_.allocate(dev, 2, Category::COMM_BUFFERS);
  // A resumed run appends to --metrics-jsonl (its records carry their step: a requeued job of
  // the same name keeps one file); a run from step 1 replaces it.
  if (rank0_ && !o.metrics_jsonl.empty()) {
    const bool resumed = start_.iteration > 0;
    jsonl_.reset(new std::ofstream(o.metrics_jsonl, resumed ? std::ios::app : std::ios::trunc));
    if (!*jsonl_) throw FatalError("--metrics-jsonl: cannot write " + o.metrics_jsonl, 2);
  }
  if (rank0_ && !o.tensorboard_dir.empty()) {
    try {
      tensorboard_.reset(new TensorBoardWriter(o.tensorboard_dir));
    } catch (const std::runtime_error& e) {
      throw FatalError(e.what(), 2);
    }
  }
}

Training::~Training() = default;

}  // namespace paralab
