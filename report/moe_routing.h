// report/moe_routing.h: what the MoE routers did in one step, over every rank: the tokens each
// expert received, the pairs dropped over capacity, the auxiliary losses (model/moe.h).
//
// Per MoE layer, summed over the step's microbatches and over every rank (each layer lives
// on one pipeline stage; its tp (with sp) and cp ranks route disjoint tokens, so no token
// counts twice): tokens per expert and its min, mean, max and max/mean (1 = perfect balance, E/k at
// worst: every token on the same k experts), dropped (token, expert) pairs. The losses are
// the step's as the objective sees them: per microbatch, coefficient included, averaged over
// the microbatches of the global batch (like the LM loss) and summed over the layers.
//
// defines: MoeLayerReport, MoeStepReport, gather_moe_report, gather_moe_routing, moe_table,
//          moe_json
#pragma once
#include <string>
#include <vector>
#include "model/transformer.h"
#include "parallel/comm.h"
#include "plan/moe_memory.h"  // MoeRouting, moe_layer_rows
#include "plan/plan.h"        // Plan
#include "checkpoint/json.h"

namespace paralab {

struct MoeLayerReport {
  int layer = 0;
  std::vector<double> tokens_per_expert;  // (E) routed pairs, before drops
  std::vector<double> kept_per_expert;    // (E) pairs the experts ran
  double dropped = 0, padding = 0;        // pairs over capacity; zero rows of padding
  double aux_loss = 0, z_loss = 0;        // mean over the global batch's microbatches
  // ep > 1: the rows each rank holding the layer ran on its experts over the step (world
  // rank order; empty without expert parallelism): the load the all-to-all follows
  std::vector<double> expert_rows_per_rank;
  double min() const, mean() const, max() const;
  double imbalance() const { return mean() > 0 ? max() / mean() : 0; }  // max / mean
};

struct MoeStepReport {
  std::vector<MoeLayerReport> layers;  // the MoE layers, in order
  double aux_loss = 0, z_loss = 0;     // summed over the layers
  double dropped = 0;                  // summed over the layers
  bool empty() const { return layers.empty(); }
};

// Collective over `world` (every rank calls it; one all-gather). microbatches: of the global
// batch (k per rank times the data-parallel size). Every rank gets the report.
MoeStepReport gather_moe_report(Communicator& world, const Transformer& model,
                                double microbatches);
// The routing every pipeline measured this step, for the plan to be evaluated at
// (plan/moe_memory.h MoeRouting: per layer each microbatch's permuted rows and the step's kept
// pairs): entry i is pipeline i's, assembled from its stages (pipeline_of[r]: world rank r's
// pipeline; each layer lives on one stage). Collective over `world` (one all-gather);
// microbatches: per rank per step.
std::vector<MoeRouting> gather_moe_routing(Communicator& world, const Transformer& model,
                                           int microbatches, const std::vector<int>& pipeline_of);
// The rows one rank's experts run in a step of layer `layer` as the configuration predicts
// them (plan/moe_memory.h moe_layer_rows at no routing: exact padded to capacity, else the
// uniform-routing expectation), summed over the rank's microbatches.
double expected_expert_rows(const Plan& plan, int layer);
// One line per MoE layer: tokens per expert (min, mean, max, max/mean), dropped, aux, z;
// with the experts spread then the rows each rank's experts ran (min, mean, max, max/mean
// over ranks) beside expected_expert_rows.
std::string moe_table(const MoeStepReport& r, const Plan& plan);
// "moe": {"aux_loss", "z_loss", "dropped_pairs", "layers": [{"layer", "tokens_per_expert":
// [...], "kept_per_expert": [...], "dropped_pairs", "padding_rows", "aux_loss", "z_loss",
// "min", "mean", "max", "max_over_mean"[, "expert_rows_per_rank": [...],
// "expert_rows_expected", "expert_rows_exact" with the experts spread]}]}
void moe_json(JsonWriter& j, const MoeStepReport& r, const Plan& plan);

}  // namespace paralab
