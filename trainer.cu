// trainer.cu: main(). flags -> topology -> model -> optimizer -> steps -> report.
//
// One binary for every configuration: `./trainer` is a world of one rank; `mpirun -np N
// ./trainer ...` launches N ranks (world = tp x cp x pp x dp, notes/design.md). Each rank holds
// one pipeline stage (the whole model without pipelining). Each step (app/training.h):
//   run_step     the executor (parallel/pipeline_parallel) runs this rank's list of the
//                schedule over the k = global batch / (micro batch x dp) microbatches: F and
//                B of each (1F1B on one stage: forward with the fused head backward, then
//                backward), activations and gradients sent between stages; gradients
//                accumulate;
//                (tensor parallelism splits every layer inside forward and backward:
//                 parallel/tensor_parallel; context parallelism each sequence:
//                 parallel/context_parallel; expert parallelism the MoE layers' experts:
//                 parallel/expert_parallel)
//                gpt's tied embedding: its two stages' gradients summed over the embedding
//                group; data parallel: gradients summed over dp (parallel/data_parallel:
//                DDP or ZeRO 1-3); global gradient norm, clipping, AdamW at the scheduled
//                learning rate on the parameters this rank owns, then (ZeRO 1-2) the updated
//                parameters all-gathered
//   gather       every rank's measurements to rank 0 (report/rank_metrics)
//   evaluate     every --eval-interval steps and after the last, the validation loss
//                (model/evaluate.h), outside the step's measurements
//   save_or_stop --save at --save-interval and at the end; --exit-interval, SIGINT or
//                SIGTERM: save and stop after this step; too many skipped steps: stop (exit 3)
//   report       the step line: measured numbers, and at step 1 / every --report-interval /
//                the end the ledgers, measured beside plan/'s prediction
// At the end: the run's summary (report/summary.h).
//
// The file keeps its .cu name though it holds no device code: nvcc compiles it in the CUDA
// build (g++ in the CPU-only one), and the GPU machine's packing script finds the project's
// root by it.
#include "app/benchmark.h"       // run_benchmark: --benchmark
#include "app/checkpoint_run.h"  // run_convert: --convert
#include "app/projection.h"      // run_plan: --plan
#include "app/training.h"
#include "cli/flags.h"
#include "report/number_formats.h"  // --number-formats

using namespace paralab;

namespace {

int train(const Options& o, const World& w) {
  Training run(o, w);
  run.begin();
  StepRecord last;
  for (int step = run.first_step(); step <= o.train.train_iters; ++step) {
    StepRecord r;
    run.run_step(step, r);
    run.gather(r);
    run.evaluate(r);
    run.save_or_stop(r);
    run.report(r);
    if (r.ends_run()) return run.finish(r);
  }
  return run.finish(last);
}

}  // namespace

int main(int argc, char** argv) {
  World w = init_world(argc, argv);
  int code = run_main([&]() -> int {
    const Options o = parse_flags_or_exit(argc, argv, w.size, w.rank,
                                          [](int) { finalize_world(); });
    print_resolved_options(o, w.rank);  // --verbose, before the plan or the run
    if (o.benchmark) return run_benchmark(o, w);
    if (o.number_formats) {  // report/number_formats.h: a table, and exit
      const std::vector<NumberFormat> formats = number_formats();
      if (w.rank == 0)
        std::fputs((o.json ? number_formats_json(formats) : number_formats_text(formats)).c_str(),
                   stdout);
      return 0;
    }
    if (o.convert) {
      try {
        return run_convert(o, w);
      } catch (const InputError& e) {
        exit_on_input_error(e, w.rank, [](int) { finalize_world(); });
      }
    }
    if (o.plan) return run_plan(o, w);
    return train(o, w);
  });
  finalize_world();
  return code;
}
