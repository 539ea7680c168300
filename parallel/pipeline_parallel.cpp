// parallel/pipeline_parallel.cpp: the executor (pipeline_parallel.h).
#include "parallel/pipeline_parallel.h"
#include "measure/clock.h"  // now_seconds

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
  const int p = schedule_.shape.p;
  const std::vector<Action>& acts = actions();
  PipelineTiming t;
  t.actions.resize(acts.size());
  t.exchanges.resize(exchanges_.size());
  const double t0 = now_seconds();
  t.start_seconds = t0;

  // Exchange j: the sends of the slot before it (their buffers are still the stage's) and
  // the receives of the slot after it, as one batched call; matching is by posting order
  // (check_exchanges proves every pair of ranks posts its transfers in the same order).
  auto post = [&](size_t j) {
    const Exchange& e = exchanges_[j];
    if (e.empty()) return;
    std::vector<P2POp> ops;
    for (const Message& m : e.sends) {
      const void* buf = m.kind == Message::ACTIVATION
                            ? stage.activation_out(m.microbatch, m.from_stage / p)
                            : stage.gradient_out();
      ops.push_back(P2POp::send(buf, elements_, m.to_rank, type_));
    }
    for (const Message& m : e.recvs) {
      void* buf = m.kind == Message::ACTIVATION
                      ? stage.activation_in(m.microbatch, m.to_stage / p)
                      : stage.gradient_in();
      ops.push_back(P2POp::recv(buf, elements_, m.from_rank, type_));
    }
    const double start = now_seconds();
    pp_->send_recv(ops);
    t.exchanges[j] = {start - t0, now_seconds() - t0};
  };

  size_t next_exchange = 0;
  for (size_t k = 0; k < acts.size(); ++k) {
    if (k == 0 || acts[k].slot != acts[k - 1].slot) post(next_exchange++);
    const double start = now_seconds();
    stage.run(acts[k]);
    t.actions[k] = {start - t0, now_seconds() - t0};
  }
  while (next_exchange < exchanges_.size()) post(next_exchange++);
  t.run_seconds = now_seconds() - t0;
  return t;
}

}  // namespace paralab
