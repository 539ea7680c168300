// plan/time_model.cpp: see time_model.h for the costs, the links and the overlaps.
//
// The compute side: each model stage's F, B, W from its layers' and the head's costs per
// microbatch (plan/layer_cost.h), then the simulated schedule. The communication side is
// plan/time_model_comm.cpp.
#include "plan/time_model.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include "plan/kernel_traffic.h"
#include "plan/layer_cost.h"           // DeviceCost, layer_cost, head_cost
#include "plan/moe_params.h"           // param_counts: an MoE's active parameters
#include "plan/time_model_comm.h"

namespace paralab {

namespace {

// One pp rank's compute over its chunks, one microbatch: what the step's breakdown and the
// overlaps' budgets take (each model stage's F, B and W go to its StageTime).
struct RankSums {
  double gemm = 0, attention = 0, memory = 0, recompute = 0, gemm_calls = 0, launches = 0;
  double attention_core = 0;  // flash kernels, or naive's products: what a cp ring hides in
  int chunks = 1;
};

// Pp rank s's model stages (chunk c is stage shape.stage_of(s, c)): its layers' costs, the
// embedding's kernels on the first chunk and the head on the last. A stage's F is its forward,
// B its input gradient with the recompute, W its weight gradient. A DualPipe's stage is on two
// ranks, alike: costed once (the mirror's copy is the same again).
RankSums cost_rank_stages(const Plan& plan, const DeviceCost& dev, const KernelTrafficPlan& traffic,
                          int s, std::vector<StageTime>& stages) {
  const PipelinePlan& pipe = plan.pipeline;
  const PipelineShape& shape = pipe.shape;
  std::vector<int> first{0}, count{plan.model.num_layers};
  bool embedding = true, head = true;
  if (!pipe.stages.empty()) {
    first = pipe.stages.at(s).chunk_first_layer;
    count = pipe.stages.at(s).chunk_layers;
    embedding = pipe.stages.at(s).embedding;
    head = pipe.stages.at(s).head;
  }
  RankSums r;
  r.chunks = (int)first.size();
  for (size_t c = 0; c < first.size(); ++c) {
    StageTime& stage = stages.at(shape.stage_of(s, (int)c));
    if (shape.mirror_of(s) < s) stage = StageTime{};  // the mirror's copy: the same again
    for (int i = 0; i < count[c]; ++i) {
      const LayerCost lc = layer_cost(plan, dev, traffic, first[c] + i);
      stage.F += lc.forward;
      stage.B += lc.input_grad + lc.recompute;
      stage.W += lc.weight_grad;
      r.gemm += lc.gemm, r.attention += lc.attention, r.memory += lc.memory;
      r.attention_core += lc.core;
      r.recompute += lc.recompute;
      r.gemm_calls += lc.gemm_calls, r.launches += lc.launches;
    }
    if (embedding && c == 0) {
      const double f = dev.memory(traffic.embedding_forward);
      const double b = dev.memory(traffic.embedding_backward);
      stage.F += f, stage.B += b, r.memory += f + b;
      r.launches += (double)(traffic.embedding_forward.launches +
                             traffic.embedding_backward.launches);
    }
    if (head && c + 1 == first.size()) {
      const HeadCost hc = head_cost(plan, dev, traffic);
      stage.F += hc.forward, stage.B += hc.input_grad, stage.W += hc.weight_grad;
      r.gemm += hc.gemm, r.memory += hc.memory, r.gemm_calls += hc.gemm_calls;
      r.launches += (double)(traffic.head_forward.launches + traffic.head_backward.launches);
    }
  }
  return r;
}

// Pp rank s's budgets for the overlaps (plan/time_model_comm.h): its compute over k
// microbatches, total = k (gemm + attention + memory + recompute), the attention core's part,
// and one microbatch's forward and backward (B + W) over its chunks.
RankCompute overlap_budget(const RankSums& r, double k, const PipelineShape& shape, int s,
                           const std::vector<StageTime>& stages) {
  RankCompute budget;
  budget.total = k * (r.gemm + r.attention + r.memory + r.recompute);
  budget.attention = k * r.attention_core;
  budget.chunks = r.chunks;
  for (int c = 0; c < r.chunks; ++c) {
    const StageTime& stage = stages.at(shape.stage_of(s, c));
    budget.first_forward += stage.F;
    budget.last_backward += stage.B + stage.W;
  }
  return budget;
}

// The step's compute breakdown, rank 0's (pp rank 0): k microbatches of each kind, the
// optimizer's other kernels once, and every launch: one per GEMM call, and the other kernels'
// as they count them, at launch_overhead_us each.
void compute_breakdown(StepTime& st, const RankSums& r, double k, const DeviceCost& dev,
                       const KernelTrafficPlan& traffic) {
  st.gemm = k * r.gemm, st.attention = k * r.attention, st.memory = k * r.memory;
  st.recompute = k * r.recompute;
  st.optimizer = dev.memory(traffic.step_other);
  st.gemm_calls = (int64_t)std::llround(k * r.gemm_calls);
  st.kernel_launches =
      st.gemm_calls + traffic.step_total.launches + traffic.step_attention.launches;
  st.launch_seconds = (double)st.kernel_launches * dev.hw.launch_overhead_us * 1e-6;
  st.compute = st.gemm + st.attention + st.memory + st.recompute + st.optimizer;
}

// Every model stage's F, B and W (st.stages), rank 0's breakdown, and per pp rank the budgets
// the overlaps take, each pp rank costed at its first rank's kernel traffic.
std::vector<RankCompute> cost_stages(const Plan& plan, const DeviceCost& dev, StepTime& st) {
  const PipelineShape& shape = plan.pipeline.shape;
  const int p = shape.p;
  const int world = plan.parallel.world_size;
  // the microbatches through each of a rank's chunks (DualPipe's: one direction's half)
  const double k = (double)plan.microbatches_per_rank /
                   (shape.placement() == StagePlacement::MIRRORED ? 2 : 1);
  st.stages.assign((size_t)shape.model_stages(), StageTime{});
  std::vector<RankCompute> rank_compute(p);
  for (int s = 0; s < p; ++s) {
    const int rank = s * (world / p);  // the stage's first rank (tp, cp, dp rank 0)
    const KernelTrafficPlan traffic = kernel_traffic_plan(plan, rank);
    const RankSums sums = cost_rank_stages(plan, dev, traffic, s, st.stages);
    rank_compute[s] = overlap_budget(sums, k, shape, s, st.stages);
    if (s == 0) compute_breakdown(st, sums, k, dev, traffic);
  }
  return rank_compute;
}

// The schedule's actions' costs: each stage's F and B with the in-layer communication (tp,
// cp, ep) exposed on them, its W, and one pp message. DualPipe's F&B pairs hide each half's
// collectives under the other's compute (GPU): the communication is also given apart.
ActionCosts action_costs(const std::vector<StageTime>& stages, const CommTime& comm) {
  ActionCosts costs;
  costs.F = costs.B = costs.W = 0;
  costs.comm = comm.message_seconds;
  for (size_t i = 0; i < stages.size(); ++i) {
    costs.stage_F.push_back(stages[i].F + comm.per_action_forward[i]);
    costs.stage_B.push_back(stages[i].B + comm.per_action_backward[i]);
    costs.stage_W.push_back(stages[i].W);
    costs.stage_F_comm.push_back(comm.per_action_forward[i]);
    costs.stage_B_comm.push_back(comm.per_action_backward[i]);
  }
  return costs;
}

// The host's cores one rank's AdamW runs on: host_cores / gpus_per_node, at least 1 (1 when
// the profile does not say).
double host_cores_per_rank(const HardwareProfile& hw) {
  return hw.host_cores > 0 ? std::max(1.0, hw.host_cores / hw.gpus_per_node) : 1.0;
}

// CPU offload: the host AdamW over rank 0's offloaded elements (its stage's, dense and
// experts'), seconds = elements / (host_adam_params_per_s x cores per rank).
void cost_host_optimizer(StepTime& st, const Plan& plan, const HardwareProfile& hw) {
  const bool piped = !plan.pipeline.stages.empty();
  const DataParallelPlan& d = piped ? plan.pipeline.stages[0].data_parallel : plan.data_parallel;
  const DataParallelPlan& e =
      piped ? plan.pipeline.stages[0].expert_data_parallel : plan.expert_data_parallel;
  st.host_elements = d.host_numel + e.host_numel;
  if (st.host_elements > 0 && hw.host_adam_params_per_s > 0)
    st.host_optimizer =
        (double)st.host_elements / (hw.host_adam_params_per_s * host_cores_per_rank(hw));
}

// What the projection rests on, printed with it: the cost curves first, then the
// communication's (comm_assumptions), the grouped GEMM's, the profile's assumed or unconfirmed
// figures and CPU offload's rates.
std::vector<std::string> list_assumptions(const Plan& plan, const HardwareProfile& hw,
                                          const std::vector<std::string>& comm_assumptions,
                                          int64_t host_elements) {
  std::vector<std::string> a = comm_assumptions;
  char curve[256];
  std::snprintf(curve, sizeof curve,
                "GEMM efficiency eff(F) = %.3g F / (F + %.3g GFLOP), flash attention at %.3g "
                "of the peak, memory-bound kernels at %.3g of %.0f GB/s, %.3g us per launch",
                hw.gemm_efficiency, hw.gemm_half_gflop, hw.attention_efficiency,
                hw.memory_efficiency, hw.memory_bandwidth_gbs, hw.launch_overhead_us);
  a.insert(a.begin(), curve);
  if (plan.model.moe.enabled() && plan.model.moe.grouped_gemm)
    a.push_back("a grouped GEMM costs as one GEMM of its summed FLOPs");
  if (!hw.assumed.empty()) {
    std::string keys;
    for (const std::string& key : hw.assumed) keys += (keys.empty() ? "" : ", ") + key;
    a.push_back("assumed by the profile, not from a datasheet or a measurement: " + keys);
  }
  if (!hw.confirmed) a.push_back("profile " + hw.name + ": its datasheet figures are unconfirmed");
  if (host_elements > 0) {
    char host[320];
    std::snprintf(host, sizeof host,
                  "CPU offload: copies at %.3g GB/s + %.3g us each; host AdamW at %.3g "
                  "parameters/s per core x %.3g cores per rank (host_cores / gpus_per_node)%s",
                  hw.pcie_gbs, hw.pcie_latency_us, hw.host_adam_params_per_s,
                  host_cores_per_rank(hw),
                  hw.pcie_gbs > 0 && hw.host_adam_params_per_s > 0
                      ? ""
                      : "; the profile lacks pcie_gbs or host_adam_params_per_s: not costed");
    a.push_back(host);
  }
  return a;
}

// Each profile figure made 2x worse, one at a time (an efficiency or bandwidth halved, a
// latency or the GEMM half-size doubled): change = step(worse) / step - 1, largest first. The
// pcie and host figures only when something is offloaded (otherwise they move nothing).
void add_sensitivity(StepTime& st, const Plan& plan, const HardwareProfile& hw) {
  struct Knob {
    const char* key;
    double HardwareProfile::*field;
    double factor;
  };
  const Knob knobs[] = {
      {"gemm_efficiency", &HardwareProfile::gemm_efficiency, 0.5},
      {"gemm_half_gflop", &HardwareProfile::gemm_half_gflop, 2},
      {"attention_efficiency", &HardwareProfile::attention_efficiency, 0.5},
      {"memory_efficiency", &HardwareProfile::memory_efficiency, 0.5},
      {"launch_overhead_us", &HardwareProfile::launch_overhead_us, 2},
      {"intra_node_gbs", &HardwareProfile::intra_node_gbs, 0.5},
      {"collective_latency_us", &HardwareProfile::collective_latency_us, 2},
      {"inter_node_gbs", &HardwareProfile::inter_node_gbs, 0.5},
      {"inter_node_latency_us", &HardwareProfile::inter_node_latency_us, 2},
      {"pcie_gbs", &HardwareProfile::pcie_gbs, 0.5},
      {"pcie_latency_us", &HardwareProfile::pcie_latency_us, 2},
      {"host_adam_params_per_s", &HardwareProfile::host_adam_params_per_s, 0.5},
  };
  for (const Knob& knob : knobs) {
    if (st.host_elements == 0 && (std::string(knob.key).rfind("pcie", 0) == 0 ||
                                  std::string(knob.key).rfind("host", 0) == 0))
      continue;  // nothing offloaded: these move nothing
    HardwareProfile worse = hw;
    worse.*knob.field *= knob.factor;
    const double step = project_step_time(plan, worse, false).step;
    st.sensitivity.push_back({knob.key, hw.is_assumed(knob.key), step / st.step - 1});
  }
  std::stable_sort(st.sensitivity.begin(), st.sensitivity.end(),
                   [](const auto& a, const auto& b) { return a.change > b.change; });
}

}  // namespace

bool group_fits_node(int stride, int group_size, int gpus_per_node) {
  return (int64_t)stride * group_size <= gpus_per_node;
}

StepTime project_step_time(const Plan& plan, const HardwareProfile& hw, bool sensitivity) {
  const Precision precision = plan.train.precision();
  const double peak_tflops = hw.peak_tflops(precision);
  if (peak_tflops <= 0)
    throw std::invalid_argument(hw.file + ": the profile states no " +
                                precision_name(precision) + " peak");
  StepTime st;
  st.hardware = hw.name + (hw.file.empty() ? "" : " (" + hw.file + ")");
  st.peak_tflops = peak_tflops;
  st.peak_figure = hw.peak_figure(precision);
  const DeviceCost dev{hw, precision, peak_tflops * 1e12};
  const std::vector<RankCompute> rank_compute = cost_stages(plan, dev, st);
  // Communication inside the layers is charged to the stages' actions; the rest after.
  const CommTime comm = project_comm_time(plan, hw, st.stages, rank_compute);
  st.comm = comm.groups;
  const Simulation sim = simulate(plan.pipeline.schedule, action_costs(st.stages, comm));
  st.bubble = sim.idle.empty() ? 0 : sim.idle[0];
  st.exposed_comm = 0;
  for (const GroupTime& g : st.comm) {
    st.exposed_comm += g.exposed;
    if (g.group == CommGroup::PCIE) st.exposed_pcie += g.exposed;
  }
  cost_host_optimizer(st, plan, hw);
  // the slowest stage's view: the schedule's makespan, then what runs after the pipeline
  st.step = sim.step_time + comm.after_pipeline_seconds + st.optimizer + st.host_optimizer;
  // MFU = the model's FLOPs / (step x peak x GPUs); HFU the hardware's (recompute included)
  const double tokens = (double)plan.tokens_per_step;
  st.tokens_per_second = st.step > 0 ? tokens / st.step : 0;
  const double denominator = st.step * dev.peak * plan.parallel.world_size;
  st.mfu = denominator > 0 ? plan.flops.model_per_step / denominator : 0;
  st.hfu = denominator > 0 ? plan.flops.hardware_per_step / denominator : 0;
  st.assumptions = list_assumptions(plan, hw, comm.assumptions, st.host_elements);
  if (!sensitivity || st.step <= 0) return st;
  add_sensitivity(st, plan, hw);
  return st;
}

TrainingTime project_training_time(const Plan& plan, const StepTime& t, double tokens) {
  TrainingTime r;
  r.tokens = tokens;
  r.steps = plan.tokens_per_step > 0 ? std::ceil(tokens / (double)plan.tokens_per_step) : 0;
  r.seconds = r.steps * t.step;
  // Narayanan et al. 2021 eq. 4: T tokens, P parameters, n GPUs, X FLOP/s achieved per GPU;
  // 8 = 6 (forward 2 + backward 4 per parameter and token) + 2 (full recompute's forward).
  r.narayanan_factor = plan.model.recompute.full() ? 8 : 6;
  const double n = plan.parallel.world_size;
  const double X = t.step > 0 ? plan.flops.hardware_per_step / t.step / n : 0;
  // P is what each token multiplies with: an MoE's active parameters (k of E experts;
  // plan/moe_params.h), not its total, which would count the E - k experts a token skips.
  r.narayanan_params = plan.model.moe.enabled() ? (double)param_counts(plan.model).active
                                                : (double)plan.params_total;
  r.narayanan_seconds = X > 0 ? r.narayanan_factor * tokens * r.narayanan_params / (n * X) : 0;
  return r;
}

}  // namespace paralab
