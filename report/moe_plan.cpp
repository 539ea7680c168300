// report/moe_plan.cpp: see moe_plan.h.
#include "report/moe_plan.h"
#include <cmath>
#include "plan/moe_params.h"  // param_counts
#include "report/text.h"      // strprintf

namespace paralab {

std::string routing_text(const Moe& moe) {
  std::string score;
  if (moe.score == Moe::Score::SIGMOID)
    score = "sigmoid scores, the top-k normalised to sum 1 (DeepSeek-V3)";
  else if (moe.pre_softmax)
    score = "softmax over all E logits, then the top-k probabilities, not renormalised "
            "(--moe-router-pre-softmax; HF Qwen3 norm_topk_prob=false)";
  else
    score = "softmax over the top-k logits (Megatron default; HF Qwen3 norm_topk_prob=true)";
  if (moe.topk_scaling_factor > 0) score += strprintf("; gates x %g", moe.topk_scaling_factor);
  if (moe.expert_bias)
    score += strprintf("; expert bias for the selection only, rate %g (aux-loss-free)",
                       moe.bias_update_rate);
  return score;
}

std::string balancing_text(const Moe& moe) {
  std::string t = moe.balancing == Moe::Balancing::NONE ? "none"
                  : moe.balancing == Moe::Balancing::SEQ_AUX_LOSS
                      ? strprintf("seq_aux_loss alpha %g (per sequence)", moe.aux_loss_coeff)
                      : strprintf("aux_loss alpha %g (per microbatch)", moe.aux_loss_coeff);
  if (moe.z_loss_coeff > 0) t += strprintf("; z loss beta %g", moe.z_loss_coeff);
  return t;
}

namespace {

std::string capacity_text(const Plan& plan) {
  const Moe& moe = plan.model.moe;
  if (moe.capacity_factor <= 0) return "dropless (no capacity)";
  const double N = (double)plan.train.micro_batch_size * plan.model.seq_length;
  const int C = (int)std::ceil(N * moe.topk / moe.num_experts * (double)moe.capacity_factor);
  std::string t = strprintf("capacity factor %g: C = ceil(cf N k / E) = %d rows per expert per "
                            "microbatch, drops by %s", moe.capacity_factor, C,
                            moe.drop_policy == Moe::DropPolicy::PROBS ? "probs" : "position");
  if (moe.pad_to_capacity)
    t += strprintf("; padded: every expert runs min(C, N) = %d rows", C < N ? C : (int)N);
  return t;
}

std::string count(double x) { return format_si(x) + strprintf(" (%.0f)", x); }

}  // namespace

std::string moe_plan_text(const Plan& plan) {
  const ModelConfig& m = plan.model;
  const Moe& moe = m.moe;
  if (!moe.enabled()) return "";
  const ParamCounts pc = param_counts(m);
  std::string t = strprintf("\nmixture of experts: %d of %d layers MoE, %d experts of width %d, "
                            "top-%d%s\n", pc.moe_layers, m.num_layers, moe.num_experts,
                            m.moe_ffn(), moe.topk, moe.grouped_gemm ? ", grouped GEMM" : "");
  t += "  router     " + routing_text(moe) + "; fp32\n";
  t += "  balancing  " + balancing_text(moe) + "\n";
  t += "  capacity   " + capacity_text(plan) + "\n";
  if (moe.shared_expert_size > 0)
    t += strprintf("  shared     one expert of width %d on every token%s\n",
                   moe.shared_expert_size, moe.shared_expert_gate ? ", sigmoid-gated" : "");

  // ---- parameters
  t += strprintf("\nparameters (param_table; active: experts x k/E = %d/%d, router and shared "
                 "expert whole)\n", moe.topk, moe.num_experts);
  t += strprintf("  %-44s %22s %22s\n", "", "total", "active per token");
  t += strprintf("  %-44s %22s %22s\n", "with embeddings (Megatron's active)",
                 count((double)pc.total).c_str(), count((double)pc.active).c_str());
  t += strprintf("  %-44s %22s %22s\n", "non-embedding (no lookup, no output layer)",
                 count((double)pc.total_non_embedding()).c_str(),
                 count((double)pc.active_non_embedding()).c_str());
  t += strprintf("  %-44s %22s %22s\n", "torchtitan's non-embedding (output layer in)",
                 count((double)(pc.total - pc.lookups)).c_str(),
                 count((double)pc.active_torchtitan()).c_str());
  t += strprintf("  embedding lookups %s, output layer %s, final norm %lld\n",
                 count((double)pc.lookups).c_str(),
                 pc.output ? count((double)pc.output).c_str() : "tied",
                 (long long)pc.final_norm);
  t += strprintf("  per layer   %8s %12s %8s %12s %8s %12s %14s %10s %12s %12s\n", "layers",
                 "attention", "norms", "dense mlp", "router", "one expert", "all experts",
                 "shared", "total", "active");
  for (bool is_moe : {false, true}) {
    const LayerParamCounts* l = pc.first(is_moe);
    if (!l) continue;
    t += strprintf("  %-11s %8d %12lld %8lld %12lld %8lld %12lld %14lld %10lld %12lld %12lld\n",
                   is_moe ? "MoE" : "dense", is_moe ? pc.moe_layers : pc.dense_layers,
                   (long long)l->attention, (long long)l->norms, (long long)l->mlp,
                   (long long)l->router, (long long)l->expert, (long long)l->experts,
                   (long long)(l->shared_expert + l->shared_gate), (long long)l->total(),
                   (long long)l->active(moe.topk));
  }

  // ---- GEMM calls per step on rank 0, both settings
  const GemmCallPrediction g = predict_gemm_calls(plan, true), e = predict_gemm_calls(plan, false);
  t += strprintf("\nGEMM calls per step, rank 0 (%lld microbatches of %lld tokens), "
                 "--moe-grouped-gemm %s\n", (long long)plan.microbatches_per_rank,
                 (long long)plan.train.micro_batch_size * m.seq_length,
                 moe.grouped_gemm ? "on" : "off");
  t += strprintf("  %-14s %14s %22s\n", "label", "grouped", "per expert");
  for (int i = 0; i < kNumGemmLabels; ++i) {
    if (g.calls[i] == 0 && e.calls[i] == 0) continue;
    const bool expectation = std::string(kGemmLabels[i]) == "experts" && !e.experts_exact;
    t += strprintf("  %-14s %14.0f %22s\n", kGemmLabels[i], g.calls[i],
                   (expectation ? strprintf("%.1f expected", e.calls[i])
                                : strprintf("%.0f", e.calls[i])).c_str());
  }
  t += strprintf("  %-14s %14.0f %22.1f\n", "total", g.total(), e.total());
  if (!e.experts_exact)
    t += strprintf("  per expert: dropless, E (1 - (1 - k/E)^N) = %.2f of %d experts have rows "
                   "per layer and microbatch under uniform routing (an expectation)\n",
                   expected_nonempty_experts(moe, (int64_t)plan.train.micro_batch_size *
                                                      m.seq_length),
                   moe.num_experts);
  t += strprintf("  experts only, per microbatch (forward 1 + backward 2 per projection): per "
                 "expert %d x %d x 2 x 3 = %lld (gate|up fused in fc1, as Megatron; HF's "
                 "unfused gate, up, down: %d x %d x 3 x 3 = %lld), grouped %d x 2 x 3 = %lld\n",
                 pc.moe_layers, moe.num_experts, (long long)paper_per_expert_calls(m, 2, false),
                 pc.moe_layers, moe.num_experts, (long long)paper_per_expert_calls(m, 3, false),
                 pc.moe_layers,
                 (long long)paper_per_expert_calls(m, 2, true));

  return t;
}

void moe_plan_json(JsonWriter& j, const Plan& plan) {
  const ModelConfig& m = plan.model;
  const Moe& moe = m.moe;
  if (!moe.enabled()) return;
  const ParamCounts pc = param_counts(m);
  j.key("moe").begin_object();
  j.field("num_experts", moe.num_experts).field("topk", moe.topk);
  j.field("expert_ffn_hidden_size", m.moe_ffn()).field("moe_layers", pc.moe_layers);
  j.field("dense_layers", pc.dense_layers).field("grouped_gemm", moe.grouped_gemm);
  j.field("routing", routing_text(moe)).field("balancing", balancing_text(moe));
  j.field("capacity", capacity_text(plan));
  j.field("shared_expert_size", moe.shared_expert_size);
  j.field("shared_expert_gate", moe.shared_expert_gate);
  j.key("params").begin_object();
  j.field("total", pc.total).field("active", pc.active);
  j.field("total_non_embedding", pc.total_non_embedding());
  j.field("active_non_embedding", pc.active_non_embedding());
  j.field("active_torchtitan", pc.active_torchtitan());
  j.field("lookups", pc.lookups).field("output", pc.output).field("final_norm", pc.final_norm);
  for (bool is_moe : {false, true}) {
    const LayerParamCounts* l = pc.first(is_moe);
    if (!l) continue;
    j.key(is_moe ? "moe_layer" : "dense_layer").begin_object();
    j.field("attention", l->attention).field("norms", l->norms).field("mlp", l->mlp);
    j.field("router", l->router).field("expert", l->expert).field("experts", l->experts);
    j.field("shared_expert", l->shared_expert).field("shared_gate", l->shared_gate);
    j.field("total", l->total()).field("active", l->active(moe.topk)).end_object();
  }
  j.end_object();
  const GemmCallPrediction g = predict_gemm_calls(plan, true), e = predict_gemm_calls(plan, false);
  j.key("gemm_calls_per_step").begin_object();
  j.field("per_expert_exact", e.experts_exact);
  for (int i = 0; i < kNumGemmLabels; ++i) {
    j.key(kGemmLabels[i]).begin_object();
    j.field("grouped", g.calls[i]).field("per_expert", e.calls[i]).end_object();
  }
  j.field("per_microbatch_experts_per_expert", paper_per_expert_calls(m, 2, false));
  j.field("per_microbatch_experts_per_expert_hf_unfused", paper_per_expert_calls(m, 3, false));
  j.field("per_microbatch_experts_grouped", paper_per_expert_calls(m, 2, true));
  j.end_object();
  j.end_object();
}

namespace {
// Measured calls of a label in a step, 0 if absent.
double measured_calls(const StepMetrics& s, const std::string& label) {
  for (const StepMetrics::GemmCalls& g : s.gemm_calls)
    if (g.label == label) return (double)g.calls;
  return 0;
}
}  // namespace

std::string gemm_calls_table(const Plan& plan, const StepMetrics& s, int rank,
                             const std::vector<long long>* nonempty) {
  const GemmCallPrediction p =
      predict_gemm_calls(plan, experts_grouped(plan.model), rank, nonempty);
  std::string t = strprintf("GEMM calls this step, rank %d (kernels' gemm_counts beside "
                            "plan/gemm_calls.h)\n", rank);
  t += strprintf("  %-14s %12s %14s %10s\n", "label", "measured", "predicted", "diff");
  double mt = 0;
  for (int i = 0; i < kNumGemmLabels; ++i) {
    const double meas = measured_calls(s, kGemmLabels[i]);
    mt += meas;
    if (meas == 0 && p.calls[i] == 0) continue;
    const bool expectation = std::string(kGemmLabels[i]) == "experts" && !p.experts_exact;
    t += strprintf("  %-14s %12.0f %14.*f %10.*f%s\n", kGemmLabels[i], meas, expectation ? 1 : 0,
                   p.calls[i], expectation ? 1 : 0, meas - p.calls[i],
                   expectation ? "  (expected: uniform routing)" : "");
  }
  for (const StepMetrics::GemmCalls& g : s.gemm_calls) {  // a label the plan does not know
    bool known = false;
    for (int i = 0; i < kNumGemmLabels; ++i) known = known || g.label == kGemmLabels[i];
    if (!known) {
      mt += (double)g.calls;
      t += strprintf("  %-14s %12lld %14s\n", g.label.c_str(), g.calls, "-");
    }
  }
  t += strprintf("  %-14s %12.0f %14.1f\n", "total", mt, p.total());
  return t;
}

void gemm_calls_json(JsonWriter& j, const Plan& plan, const StepMetrics& s, int rank,
                     const std::vector<long long>* nonempty) {
  const GemmCallPrediction p =
      predict_gemm_calls(plan, experts_grouped(plan.model), rank, nonempty);
  j.key("gemm_calls").begin_object();
  j.field("grouped", p.grouped).field("experts_exact", p.experts_exact);
  j.key("labels").begin_object();
  for (int i = 0; i < kNumGemmLabels; ++i) {
    const double meas = measured_calls(s, kGemmLabels[i]);
    if (meas == 0 && p.calls[i] == 0) continue;
    double flops = 0;
    for (const StepMetrics::GemmCalls& g : s.gemm_calls)
      if (g.label == kGemmLabels[i]) flops = g.flops;
    j.key(kGemmLabels[i]).begin_object().field("measured", meas).field("predicted", p.calls[i]);
    j.field("flops_measured", flops).end_object();
  }
  j.end_object().end_object();
}

}  // namespace paralab
