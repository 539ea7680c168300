// parallel/pipeline_parallel.cpp: the executor (pipeline_parallel.h).
#include "parallel/pipeline_parallel.h"
#include "measure/clock.h"  // now_seconds
#include "parallel/pipeline_schedule_impl.h"  // slot_indices

namespace paralab {

double PipelineTiming::busy() const {
  double sum = 0;
  for (const ActionTiming& a : actions) sum += a.end - a.start;
  return sum;
}

PipelineExecutor::PipelineExecutor(const Schedule& schedule, int pp_rank, Communicator* pp,
                                   size_t message_elements, DType type)
    : schedule_(schedule),
      rank_(pp_rank),
      pp_(pp),
      elements_(message_elements),
      type_(type),
      exchanges_(exchanges(schedule, pp_rank)) {}

PipelineTiming PipelineExecutor::run(PipelineStage& stage) {
  const PipelineShape& sh = schedule_.shape;
  const std::vector<Action>& acts = actions();
  PipelineTiming t;
  t.actions.resize(acts.size());
  t.exchanges.resize(exchanges_.size());
  const double t0 = now_seconds();
  t.start_seconds = t0;

  // Exchange j as one batched call; matching is by posting order (check_exchanges proves
  // every pair of ranks posts its transfers in the same order). The sends' buffers are still
  // the stage's (an activation until its pair's B, an input gradient until the next B).
  auto post = [&](size_t j) {
    const Exchange& e = exchanges_[j];
    if (e.empty()) return;
    std::vector<P2POp> ops;
    for (const Message& m : e.sends) {
      const void* buf = m.kind == Message::ACTIVATION
                            ? stage.activation_out(m.microbatch, sh.chunk_of(m.from_stage))
                            : stage.gradient_out();
      ops.push_back(P2POp::send(buf, elements_, m.to_rank, type_));
    }
    for (const Message& m : e.recvs) {
      const int chunk = sh.chunk_of(m.to_stage);
      void* buf = m.kind == Message::ACTIVATION ? stage.activation_in(m.microbatch, chunk)
                                                : stage.gradient_in(m.microbatch, chunk);
      ops.push_back(P2POp::recv(buf, elements_, m.from_rank, type_));
    }
    const double start = now_seconds();
    pp_->send_recv(ops);
    t.exchanges[j] = {start - t0, now_seconds() - t0};
    for (const Message& m : e.sends) stage.sent(m);
  };

  size_t next_exchange = 0;
  const std::vector<int> slot = slot_indices(acts);
  for (size_t k = 0; k < acts.size(); ++k) {
    while (next_exchange < exchanges_.size() && exchanges_[next_exchange].before_slot <= slot[k])
      post(next_exchange++);
    for (const Message& m : acts[k].recvs)
      if (m.local()) stage.hand_over(m);
    const double start = now_seconds();
    stage.run(acts[k]);
    t.actions[k] = {start - t0, now_seconds() - t0};
  }
  while (next_exchange < exchanges_.size()) post(next_exchange++);
  t.run_seconds = now_seconds() - t0;
  return t;
}

}  // namespace paralab
