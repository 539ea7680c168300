// model/evaluate.h: the validation loss (--eval-interval, --eval-iters), as Megatron's
// evaluate(): forward only, in eval mode (no dropout), no gradient, no optimizer step, over
// K batches of the global batch size from the held-out split (model/data.h).
//
// Every parallel layout runs it as it runs a training step: each dp rank its slice of each
// batch (valid_microbatch), tensor parallelism inside the forward, and the pipeline through
// its stages with the forward-only schedule (parallel/pipeline_schedule.h,
// forward_only_schedule: the training schedule's F actions, their sends and receives, one
// a slot; check_exchanges proves it cannot deadlock). The loss is reduced like the
// training loss: the last stage's per-microbatch means, summed over the world, counted tp
// times per dp rank:
//   validation loss = (1 / (K G / B)) sum over the K batches and their G / B microbatches
//                     of the microbatch's mean token loss          (= the single-rank value)
//   perplexity      = exp(validation loss)
// It allocates only while it runs (the pairs in flight, one layer's activations at a time):
// run it after a step's measurements were read; it resets the ledger's peaks and reports
// its own.
//
// defines: EvalResult, Evaluator, world_mean_loss
#pragma once
#include <cstdint>
#include <vector>
#include "measure/ledger.h"
#include "model/data.h"
#include "model/transformer.h"
#include "parallel/comm.h"
#include "parallel/pipeline_parallel.h"

namespace paralab {

// The loss of a step or an evaluation over the whole batch, from this rank's mean over its
// microbatches (0 off the last pipeline stage): only the last stage computes it and its tp
// ranks hold the same value, so the sum over the world counts each dp rank's mean tp times;
// the cp ranks of a sequence hold shares that add up to its mean (model/transformer.cpp),
// so the mean is sum / (world / (pp cp)). `scalar` is one float on the device for the
// all-reduce (the trainer's lives all run: the plan counts it in comm_buffers).
// stop (the trainer's step): a second float rides along, 1 where this rank caught SIGINT or
// SIGTERM; *stop comes back true when any rank did, so that every rank stops after the same
// step (scalar holds two floats then: 8 bytes, the plan's world all-reduce).
float world_mean_loss(Communicator& world, Buffer<float>& scalar, float rank_loss, int pp,
                      int cp, bool* stop = nullptr);

struct EvalResult {
  double loss = 0;                // mean token cross-entropy over the K batches
  double seconds = 0;             // wall time of the evaluation
  int64_t peak_memory_bytes = 0;  // this rank's ledger peak during it
};

class Evaluator {
 public:
  // train_schedule: the plan's (its F actions are run); pp: the pipeline group; world: the
  // loss's all-reduce; message_elements and type as the training executor's.
  Evaluator(Transformer& model, const DataLoader& data, const Schedule& train_schedule,
            int pp_rank, Communicator* pp, Communicator* world, size_t message_elements,
            DType type, int micro_batch_size, int dp_rank);
  // Collective over the world: every rank calls it at the same step.
  EvalResult run(int eval_iters);

 private:
  Transformer& model_;
  const DataLoader& data_;
  PipelineExecutor executor_;
  Communicator* world_;
  int B_, dp_rank_, k_;
  std::vector<std::vector<int>> tokens_, targets_;
};

}  // namespace paralab
