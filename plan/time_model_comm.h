// plan/time_model_comm.h: the communication half of the time model (plan/time_model.h
// states the link choice and the overlap of each mechanism): each (group, operation) of
// every pipeline stage's plan costed on its link, and what of it is exposed.
//
// defines: RankCompute, CommTime, project_comm_time
#pragma once
#include <string>
#include <vector>
#include "measure/hardware.h"
#include "plan/plan.h"
#include "plan/time_model.h"

namespace paralab {

// What one pp rank's step computes, seconds: the budgets the overlaps hide behind.
struct RankCompute {
  double total = 0;            // every microbatch, every chunk
  double attention = 0;        // of it, the attention core (the cp ring hides behind it)
  double first_forward = 0;    // one microbatch's forward over its chunks
  double last_backward = 0;    // one microbatch's backward (B + W) over its chunks
  int chunks = 1;
};

struct CommTime {
  std::vector<GroupTime> groups;  // rank 0's (pp rank 0)
  // Per model stage, per microbatch action: the exposed in-layer communication (tp, cp,
  // ep, etp) added to its F and B.
  std::vector<double> per_action_forward, per_action_backward;
  double message_seconds = 0;          // one pp activation or gradient message
  double after_pipeline_seconds = 0;   // dp, embedding, world exposed after the pipeline:
                                       // the slowest pp rank's
  std::vector<std::string> assumptions;
};

// stages: per model stage (c p + s) the compute StageTime; ranks: per pp rank.
CommTime project_comm_time(const Plan& plan, const HardwareProfile& hw,
                           const std::vector<StageTime>& stages,
                           const std::vector<RankCompute>& ranks);

}  // namespace paralab
