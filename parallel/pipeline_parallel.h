// parallel/pipeline_parallel.h: the pipeline executor. It runs this rank's list of a schedule
// (parallel/pipeline_schedule.h: gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipev, dualpipe) on
// the model chunks the rank holds, and measures where the time went.
//
// The idea: the layers are cut into model stages, one or more per pp rank (its chunks), and
// the step's batch into m microbatches. A stage's forward F(i, c) needs the activation of
// microbatch i from the previous model stage; its backward B(i, c) needs the gradient of
// its output from the next one. The schedule fixes, per rank, the order of the actions and
// so which microbatches are in flight (1F1B: rank r holds min(p - r, m)); the executor only
// follows it:
//   for each slot j of the rank's list:
//     post the batched send/recvs on the pp group that come before slot j (exchanges():
//     Megatron's slot rule, one holding the sends of slot j - 1 and the receives of slot j;
//     or, for the V and mirrored schedules, one per step of their timeline), each waited for;
//     run the slot's actions: F, B (for a split B the input gradient only), W; a message
//     between two chunks of this rank (the V's turn) is handed over in memory just before the
//     action that reads it;
//   post the exchanges after the last slot.
// Each message is one (N_l, h) tensor: N = b s tokens (N/t under sequence parallelism).
//
// The executor never sees the model: it drives a PipelineStage (model/pipeline_stage.h
// implements it on the Transformer), so parallel/ does not include model/ (notes/design.md).
//
// Measured: every action's and every exchange's start and end, in seconds from the run's
// start (itself kept on the steady clock, so the trace can line the ranks up); a rank's
// idle time is its run time minus the time inside its actions (waiting in exchanges, the
// pipeline's bubble, and the transfers themselves); its bubble = idle / run time, which
// the simulation predicts (plan/) from per-action costs.
//
// defines: PipelineStage, PipelineTiming, PipelineExecutor
#pragma once
#include <cstddef>
#include <vector>
#include "parallel/comm.h"
#include "parallel/pipeline_schedule.h"

namespace paralab {

// What the executor needs from the model chunks of one rank.
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  // Where microbatch i's input activation for chunk c arrives (kept by the stage until
  // B(i, c): it is the chunk's first layer's input).
  virtual void* activation_in(int microbatch, int chunk) = 0;
  // The chunk's output activation after F(i, c), for the next model stage.
  virtual const void* activation_out(int microbatch, int chunk) = 0;
  // Where the gradient of microbatch i's output on chunk c arrives before its B (one of the
  // rank's gradient_buffers(), kept until that B).
  virtual void* gradient_in(int microbatch, int chunk) = 0;
  // The gradient of the chunk's input after a B, for the previous model stage (valid until
  // the next B: check_exchanges proves it is sent before).
  virtual const void* gradient_out() = 0;
  // A message between two chunks of this rank: copy the sender's output (activation_out,
  // gradient_out) to where the receiver reads it (activation_in, gradient_in); called just
  // before the receiving action.
  virtual void hand_over(const Message& m) = 0;
  // A send of an exchange has completed (the stage may free what it read).
  virtual void sent(const Message&) {}
  virtual void run(const Action& a) = 0;  // F, B or W
};

struct PipelineTiming {
  std::vector<ActionTiming> actions;    // per action of the rank's list (seconds)
  std::vector<ActionTiming> exchanges;  // per exchange of exchanges() (empty ones: 0, 0)
  double run_seconds = 0;               // from the first exchange to the last one's end
  double start_seconds = 0;             // the run's start on the steady clock (CommEvent's)
  double busy() const;                  // sum of the actions' durations
  double idle() const { return run_seconds - busy(); }
  double bubble() const { return run_seconds > 0 ? idle() / run_seconds : 0; }
};

class PipelineExecutor {
 public:
  // pp: the pipeline group (nullptr with one stage: nothing to exchange). message_elements:
  // N_l h, of `type` (the activations' storage type).
  PipelineExecutor(const Schedule& schedule, int pp_rank, Communicator* pp,
                   size_t message_elements, DType type);
  // One step: every action of the rank's list, in order, with its exchanges.
  PipelineTiming run(PipelineStage& stage);
  const std::vector<Action>& actions() const { return schedule_.ranks[rank_]; }
  const Schedule& schedule() const { return schedule_; }

 private:
  Schedule schedule_;
  int rank_;
  Communicator* pp_;
  size_t elements_;
  DType type_;
  std::vector<Exchange> exchanges_;
};

}  // namespace paralab
