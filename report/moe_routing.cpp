// report/moe_routing.cpp: see moe_routing.h.
#include "report/moe_routing.h"
#include <algorithm>
#include "report/rank_metrics.h"  // all_gather_doubles
#include "report/moe_plan.h"    // routing_text, balancing_text
#include "report/text.h"

namespace paralab {

double MoeLayerReport::min() const {
  return tokens_per_expert.empty()
             ? 0 : *std::min_element(tokens_per_expert.begin(), tokens_per_expert.end());
}
double MoeLayerReport::max() const {
  return tokens_per_expert.empty()
             ? 0 : *std::max_element(tokens_per_expert.begin(), tokens_per_expert.end());
}
double MoeLayerReport::mean() const {
  double sum = 0;
  for (double x : tokens_per_expert) sum += x;
  return tokens_per_expert.empty() ? 0 : sum / tokens_per_expert.size();
}

MoeStepReport gather_moe_report(Communicator& world, const Transformer& model,
                                double microbatches) {
  const ModelConfig& m = model.config();
  const int E = m.moe.num_experts;
  std::vector<int> moe_layers;
  for (int l = 0; l < m.num_layers; ++l)
    if (m.moe.is_moe_layer(l)) moe_layers.push_back(l);
  // per MoE layer: aux, z, dropped, padding, tokens (E), kept (E), the rows this rank's
  // experts ran (-1 where not held)
  const size_t width = 5 + 2 * (size_t)E;
  std::vector<double> mine(moe_layers.size() * width, 0.0);
  for (size_t i = 0; i < moe_layers.size(); ++i) {
    const MoeLayerStats& s = model.moe_layers().at(moe_layers[i]).stats;
    double* row = mine.data() + i * width;
    row[0] = s.aux_loss;
    row[1] = s.z_loss;
    row[2] = (double)s.dropped_pairs;
    row[3] = (double)s.padding_rows;
    for (int e = 0; e < E && e < (int)s.tokens_per_expert.size(); ++e) {
      row[4 + e] = (double)s.tokens_per_expert[e];
      row[4 + E + e] = (double)s.kept_per_expert[e];
    }
    double expert_rows = s.microbatches > 0 ? 0 : -1;
    for (int x : s.expert_rows) expert_rows += x;
    row[4 + 2 * E] = expert_rows;
  }
  const std::vector<double> all =
      world.size() > 1 ? all_gather_doubles(world, mine) : mine;
  MoeStepReport r;
  for (size_t i = 0; i < moe_layers.size(); ++i) {
    MoeLayerReport L;
    L.layer = moe_layers[i];
    L.tokens_per_expert.assign(E, 0.0);
    L.kept_per_expert.assign(E, 0.0);
    for (int rank = 0; rank < world.size(); ++rank) {
      const double* row = all.data() + rank * mine.size() + i * width;
      L.aux_loss += row[0] / microbatches;
      L.z_loss += row[1] / microbatches;
      L.dropped += row[2];
      L.padding += row[3];
      for (int e = 0; e < E; ++e) {
        L.tokens_per_expert[e] += row[4 + e];
        L.kept_per_expert[e] += row[4 + E + e];
      }
      if (model.expert_parallel().distributed() && row[4 + 2 * E] >= 0)
        L.expert_rows_per_rank.push_back(row[4 + 2 * E]);
    }
    r.aux_loss += L.aux_loss;
    r.z_loss += L.z_loss;
    r.dropped += L.dropped;
    r.layers.push_back(L);
  }
  return r;
}

std::vector<MoeRouting> gather_moe_routing(Communicator& world, const Transformer& model,
                                           int microbatches, const std::vector<int>& pipeline_of) {
  const int L = model.config().num_layers, k = microbatches;
  // per layer: the step's kept pairs, then each microbatch's rows M and its experts' rows R;
  // -1 where not held here
  const size_t width = 1 + 3 * (size_t)k;  // kept, then M, R and R_ep per microbatch
  std::vector<double> mine((size_t)L * width, -1.0);
  for (int l = 0; l < L; ++l) {
    const MoeLayerStats& s = model.moe_layers().at(l).stats;
    if (s.microbatches == 0) continue;  // dense, or on another stage
    double kept = 0;
    for (long long x : s.kept_per_expert) kept += (double)x;
    mine[l * width] = kept;
    // by microbatch: a DualPipe rank runs half of them on each copy of a layer
    for (size_t j = 0; j < s.permuted_rows.size(); ++j) {
      const int i = s.microbatch_ids.at(j);
      if (i >= k) continue;
      mine[l * width + 1 + i] = s.permuted_rows[j];
      mine[l * width + 1 + k + i] = s.expert_rows.at(j);
      mine[l * width + 1 + 2 * k + i] = s.ep_rows.at(j);
    }
  }
  const std::vector<double> all = world.size() > 1 ? all_gather_doubles(world, mine) : mine;
  int pipelines = 1;
  for (int p : pipeline_of) pipelines = std::max(pipelines, p + 1);
  std::vector<MoeRouting> out(pipelines);
  for (MoeRouting& r : out) {
    r.rows.assign(L, {});
    r.expert_rows.assign(L, {});
    r.ep_rows.assign(L, {});
    r.kept.assign(L, -1);
  }
  for (int rank = 0; rank < world.size(); ++rank) {
    MoeRouting& r = out.at(pipeline_of.empty() ? 0 : pipeline_of.at(rank));
    const double* row = all.data() + (size_t)rank * mine.size();
    for (int l = 0; l < L; ++l) {
      if (row[l * width] < 0) continue;
      // a layer on two ranks of the pipeline (DualPipe's mirror): each its microbatches
      const bool second = r.kept[l] >= 0;
      r.kept[l] = (second ? r.kept[l] : 0) + (long long)row[l * width];
      r.rows[l].resize(k, 0), r.expert_rows[l].resize(k, 0), r.ep_rows[l].resize(k, 0);
      for (int i = 0; i < k; ++i) {
        if (row[l * width + 1 + i] < 0) continue;
        r.rows[l][i] = (int)row[l * width + 1 + i];
        r.expert_rows[l][i] = (int)row[l * width + 1 + k + i];
        r.ep_rows[l][i] = (int)row[l * width + 1 + 2 * k + i];
      }
    }
  }
  return out;
}

double expected_expert_rows(const Plan& plan, int layer) {
  double rows = 0;
  for (int64_t i = 0; i < plan.microbatches_per_rank; ++i)
    rows += (double)moe_layer_rows(plan.model, plan.parallel, plan.train.micro_batch_size,
                                   MoeRouting(), layer, (int)i).R;
  return rows;
}

std::string moe_table(const MoeStepReport& r, const Plan& plan) {
  const ModelConfig& m = plan.model;
  std::string t = strprintf(
      "MoE routing this step: %d experts, top-%d; tokens per expert = routed (token, expert) "
      "pairs over the global batch; max/mean 1 = balanced\n",
      m.moe.num_experts, m.moe.topk);
  t += "  router     " + routing_text(m.moe) + "\n  balancing  " + balancing_text(m.moe) + "\n";
  t += strprintf("  %5s %10s %10s %10s %8s %9s %11s %11s\n", "layer", "min", "mean", "max",
                 "max/mean", "dropped", "aux loss", "z loss");
  for (const MoeLayerReport& L : r.layers)
    t += strprintf("  %5d %10.0f %10.1f %10.0f %8.3f %9.0f %11.4e %11.4e\n", L.layer, L.min(),
                   L.mean(), L.max(), L.imbalance(), L.dropped, L.aux_loss, L.z_loss);
  if (r.layers.empty() || r.layers[0].expert_rows_per_rank.empty()) return t;
  // expert parallelism: what each rank's experts received, which the all-to-all time follows
  t += strprintf("  rows each rank's experts ran (expert parallelism; the step's, over the ranks "
                 "holding the layer), beside the plan's %s\n",
                 m.moe.pad_to_capacity ? "exact rows (padded to capacity)"
                                       : "uniform-routing expectation");
  t += strprintf("  %5s %10s %10s %10s %8s %10s\n", "layer", "min", "mean", "max", "max/mean",
                 "predicted");
  for (const MoeLayerReport& L : r.layers) {
    const std::vector<double>& x = L.expert_rows_per_rank;
    const double lo = *std::min_element(x.begin(), x.end());
    const double hi = *std::max_element(x.begin(), x.end());
    double mean = 0;
    for (double v : x) mean += v / x.size();
    t += strprintf("  %5d %10.0f %10.1f %10.0f %8.3f %10.0f\n", L.layer, lo, mean, hi,
                   mean > 0 ? hi / mean : 0, expected_expert_rows(plan, L.layer));
  }
  return t;
}

void moe_json(JsonWriter& j, const MoeStepReport& r, const Plan& plan) {
  j.key("moe").begin_object();
  j.field("aux_loss", r.aux_loss).field("z_loss", r.z_loss).field("dropped_pairs", r.dropped);
  j.key("layers").begin_array();
  for (const MoeLayerReport& L : r.layers) {
    j.begin_object().field("layer", L.layer);
    j.key("tokens_per_expert").begin_array();
    for (double x : L.tokens_per_expert) j.value(x);
    j.end_array();
    j.key("kept_per_expert").begin_array();
    for (double x : L.kept_per_expert) j.value(x);
    j.end_array();
    j.field("dropped_pairs", L.dropped).field("padding_rows", L.padding);
    j.field("aux_loss", L.aux_loss).field("z_loss", L.z_loss);
    j.field("min", L.min()).field("mean", L.mean()).field("max", L.max());
    j.field("max_over_mean", L.imbalance());
    if (!L.expert_rows_per_rank.empty()) {
      j.key("expert_rows_per_rank").begin_array();
      for (double x : L.expert_rows_per_rank) j.value(x);
      j.end_array();
      j.field("expert_rows_expected", expected_expert_rows(plan, L.layer));
      j.field("expert_rows_exact", plan.model.moe.pad_to_capacity);  // else an expectation
    }
    j.end_object();
  }
  j.end_array().end_object();
}

}  // namespace paralab
