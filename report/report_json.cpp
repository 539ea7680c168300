// report/report_json.cpp: the JSON writers of report.h: step_json (one line per step for
// --metrics-jsonl, every measured number beside its prediction) and plan_json (`trainer
// --plan --json`). Keys are listed in report.h.
#include <cmath>
#include <string>
#include <vector>
#include "plan/gemm_calls.h"     // unaligned_gemm_dims
#include "plan/moe_params.h"     // flops_conventions
#include "checkpoint/json.h"         // JsonWriter
#include "plan/recompute.h"  // korthikanti_check_recompute, selective_saved_bytes_per_layer
#include "report/report.h"       // StepMetrics, step_json, plan_json
#include "report/moe_routing.h"
#include "report/report_cp.h"    // cp_plan_json
#include "report/moe_plan.h"   // moe_plan_json
#include "report/report_kernels.h"  // kernel_traffic_json
#include "report/report_time.h"  // time_plan_json, time_step_json
#include "report/report_impl.h"  // CommRow, comm_rows
#include "report/summary.h"      // perplexity
#include "report/timeline.h"     // pipeline_json

namespace paralab {

static void memory_object(JsonWriter& j, const MemoryPlan& m) {
  for (int c = 0; c < kNumMemoryCategories; ++c) j.field(kMemoryCategoryNames[c], m.at(c));
  j.field("total", m.total());
}

// Held between steps (MemoryPlan::resident_*): the model states without ZeRO-2/3's
// transient buffers, what the ZeRO paper tabulates per rank.
void resident_json(JsonWriter& j, const MemoryPlan& m, const int64_t* measured) {
  const int64_t pred[4] = {m.resident_params, m.resident_grads, m.master_params,
                           m.optimizer_states};
  int64_t meas_total = 0;
  j.key("resident").begin_object();
  for (int c = 0; c < 4; ++c) {
    j.key(kMemoryCategoryNames[c]).begin_object();
    j.field("measured", measured[c]).field("predicted", pred[c]).end_object();
    meas_total += measured[c];
  }
  j.key("total").begin_object().field("measured", meas_total);
  j.field("predicted", m.resident_total()).end_object().end_object();
}

void host_memory_json(JsonWriter& j, const MemoryPlan& m, const int64_t* measured) {
  int64_t meas_total = 0;
  for (int c = 0; c < 4; ++c) meas_total += measured[c];
  if (meas_total == 0 && m.host.total() == 0) return;
  j.key("host_memory").begin_object();
  for (int c = 0; c < 4; ++c) {
    j.key(kMemoryCategoryNames[c]).begin_object();
    j.field("measured", measured[c]).field("predicted", m.host.at(c)).end_object();
  }
  j.key("total").begin_object().field("measured", meas_total);
  j.field("predicted", m.host.total()).end_object().end_object();
}

// "fp8_scaling": {kind: {role: {amax, scale, saturated, flushed, elements}}}, the kinds the rank
// holds (parallel/fp8_log.h)
static void fp8_scaling_json(JsonWriter& j, const Fp8StepLog& log) {
  j.key("fp8_scaling").begin_object();
  for (int k = 0; k < kFp8LinearKinds; ++k) {
    if (!log.holds(k)) continue;
    j.key(fp8_linear_kind_name(k)).begin_object();
    for (int r = 0; r < kFp8Roles; ++r) {
      const Fp8TensorLog& t = log.at(k, r);
      j.key(fp8_role_name(r)).begin_object();
      j.field("amax", (double)t.amax).field("scale", (double)t.scale);
      j.field("saturated", t.saturated).field("flushed", t.flushed);
      j.field("elements", t.elements).end_object();
    }
    j.end_object();
  }
  j.end_object();
}

static void resident_object(JsonWriter& j, const MemoryPlan& m) {
  j.key("resident").begin_object();
  j.field("params", m.resident_params).field("grads", m.resident_grads);
  j.field("master_params", m.master_params).field("optimizer_states", m.optimizer_states);
  j.field("total", m.resident_total()).end_object();
}

std::string step_json(const StepMetrics& s, const Plan& plan, int rank,
                      const CommStats* measured_comm, const std::vector<RankMetrics>* ranks,
                      const std::vector<const Plan*>* rank_plans) {
  const RankPlan& rp = plan.ranks.at(rank);
  JsonWriter j;
  j.begin_object();
  // "type": step records; the run's last line is {"type": "summary"} (report/summary.h)
  j.field("type", "step").field("step", s.step).field("rank", rank).field("loss", s.loss);
  j.field("lr", s.lr);
  if (s.loss_steps > 0) j.field("loss_mean", s.loss_mean).field("loss_mean_steps", s.loss_steps);
  if (std::isfinite(s.valid_loss))
    j.field("validation_loss", s.valid_loss).field("validation_ppl", perplexity(s.valid_loss));
  if (s.elapsed_seconds >= 0) j.field("elapsed_s", s.elapsed_seconds);
  j.field("grad_norm", s.grad_norm).field("step_ms", s.step_seconds * 1e3);
  j.field("skipped", s.skipped).field("skipped_steps", s.skipped_steps);
  if (s.loss_scale >= 0) {  // Megatron's state_dict names, the state after the step's update
    j.field("loss_scale", s.loss_scale).key("loss_scaler").begin_object();
    j.field("scale", (double)s.loss_scaler.scale);
    j.field("growth_tracker", s.loss_scaler.growth_tracker);
    j.field("hysteresis_tracker", s.loss_scaler.hysteresis_tracker).end_object();
  }
  if (s.grad_underflow.elements > 0) {  // --log-fp16-underflow, rank 0's gradients
    const GradUnderflow& u = s.grad_underflow;
    j.key("fp16_underflow").begin_object();
    j.field("elements", u.elements).field("nonzero", u.nonzero);
    j.field("unscaled_zero", u.fraction(u.unscaled_zero));
    j.field("unscaled_subnormal", u.fraction(u.unscaled_subnormal));
    j.field("stored_below_normal", u.fraction(u.stored_below_normal)).end_object();
  }
  if (s.fp8.on) fp8_scaling_json(j, s.fp8);  // --log-fp8-scaling
  if (s.kernel_seconds.gemm >= 0) j.field("gemm_ms", s.kernel_seconds.gemm * 1e3);
  j.field("tokens_per_s", s.tokens_per_second).field("mfu", s.mfu).field("hfu", s.hfu);
  j.field("peak_memory_bytes", s.peak_memory_bytes);
  if (s.allocations.fresh >= 0)  // the caching allocator: no fresh block after the first step
    j.field("fresh_allocations", (int64_t)s.allocations.fresh)
        .field("fresh_allocation_bytes", s.allocations.fresh_bytes)
        .field("reused_allocations", (int64_t)s.allocations.reused)
        .field("zeroed_bytes", s.allocations.zeroed_bytes);
  if (s.comm_bytes >= 0) j.field("comm_bytes", s.comm_bytes);
  if (s.bubble >= 0) j.field("bubble", s.bubble);
  if (s.bubble_predicted >= 0) j.field("bubble_predicted", s.bubble_predicted);
  if (std::isfinite(s.aux_loss)) j.field("aux_loss", s.aux_loss).field("z_loss", s.z_loss);
  if (s.dropped_pairs >= 0) j.field("dropped_pairs", s.dropped_pairs);
  if (s.moe) moe_json(j, *s.moe, plan);
  if (s.projected_time) time_step_json(j, *s.projected_time, s.measured_time);
  if (s.kernel_launches >= 0)  // this rank's non-GEMM kernels beside plan/kernel_traffic.h
    kernel_traffic_json(j, kernel_traffic_plan(plan, rank),
                        kernels::KernelCount{s.kernel_launches, s.kernel_bytes,
                                             s.attention_launches, s.routing_copies,
                                             s.routing_copy_bytes});
  if (!s.gemm_calls.empty())  // this rank's GEMM calls by label beside the plan's
    gemm_calls_json(j, plan, s, rank, s.moe_nonempty.empty() ? nullptr : &s.moe_nonempty);
  j.key("memory").begin_object();
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    j.key(kMemoryCategoryNames[c]).begin_object();
    j.field("measured", s.memory_bytes[c]).field("predicted", rp.memory.at(c));
    j.end_object();
  }
  j.key("total").begin_object();
  j.field("measured", s.peak_memory_bytes).field("predicted", rp.memory.total());
  j.field("exact", total_is_exact(plan, rp.memory));  // else an upper bound (report_impl.h)
  j.end_object().end_object();
  if (s.resident_measured) resident_json(j, rp.memory, s.resident_bytes.data());
  host_memory_json(j, rp.memory, s.host_memory_bytes.data());  // CPU offload
  j.key("flops").begin_object();
  j.field("convention", attention_flops_name(plan.flops.convention));
  j.field("model_per_step", plan.flops.model_per_step);
  j.field("hardware_per_step", plan.flops.hardware_per_step);
  j.field("hardware_per_rank_predicted", plan.flops.hardware_per_rank_step);
  if (s.hardware_flops >= 0) j.field("hardware_per_rank_measured", s.hardware_flops);
  j.field("recompute_per_rank_predicted",
          plan.flops.recompute_per_microbatch * plan.flops.microbatches_per_rank);
  j.end_object();
  if (measured_comm) {
    j.key("comm").begin_array();
    for (const CommRow& r : comm_rows(plan.comm, measured_comm)) {
      const CommRecord& m = measured_comm->get(r.g, r.op);
      j.begin_object().field("group", group_name(r.g)).field("op", op_name(r.op));
      j.key("calls").begin_object().field("predicted", r.pred ? (double)r.pred->calls : 0.0);
      j.field("measured", (double)m.calls).end_object();
      j.key("payload_bytes").begin_object();
      j.field("predicted", r.pred ? (double)r.pred->payload_bytes : 0.0);
      j.field("measured", (double)m.payload_bytes).end_object();
      j.key("bus_bytes").begin_object().field("predicted", r.pred ? r.pred->bus_bytes : 0.0);
      j.field("measured", m.bus_bytes).end_object();
      j.field("time_ms", m.time_s * 1e3).field("exposed_ms", m.exposed_s * 1e3);
      j.end_object();
    }
    j.end_array();
  }
  if (ranks) ranks_json(j, plan, *ranks, rank_plans);
  j.end_object();
  return j.str();
}

static void tensor_list(JsonWriter& j, const char* key, const std::vector<ActivationTensor>& ts) {
  j.key(key).begin_array();
  for (const auto& t : ts) {
    j.begin_object().field("name", t.name).field("elements", t.elements);
    j.field("bytes_per_element", t.bytes_per_element).field("bytes", t.bytes());
    j.field("norm_statistic", t.norm_statistic).end_object();
  }
  j.end_array();
}

std::string plan_json(const Plan& plan, const Peak* peak, bool pretty,
                      const PlanProjection* projection) {
  const ModelConfig& m = plan.model;
  const ParallelConfig& p = plan.parallel;
  const FlopsPlan& f = plan.flops;
  JsonWriter j(pretty);
  j.begin_object();
  j.key("model").begin_object();
  j.field("arch", m.is_gpt() ? "gpt" : "llama").field("num_layers", m.num_layers);
  j.field("hidden_size", m.hidden_size).field("ffn_hidden_size", m.ffn());
  j.field("num_attention_heads", m.num_attention_heads).field("num_query_groups", m.groups());
  j.field("seq_length", m.seq_length).field("vocab_size", m.vocab_size);
  j.field("attention", m.attention == AttentionImpl::NAIVE ? "naive" : "flash");
  j.field("fused_cross_entropy", m.fused_cross_entropy);
  j.field("precision", precision_name(plan.train.precision()));
  const Recompute& rc = m.recompute;
  j.key("recompute").begin_object();
  j.field("granularity", rc.full() ? "full" : rc.selective() ? "selective" : "none");
  if (rc.full())
    j.field("method", rc.method == Recompute::Method::BLOCK ? "block" : "uniform")
        .field("num_layers", rc.num_layers);
  if (rc.selective()) {
    j.key("modules").begin_array();
    if (rc.core_attn) j.value("core_attn");
    if (rc.mlp) j.value("mlp");
    if (rc.norm) j.value("norm");
    j.end_array();
  }
  j.end_object().end_object();
  j.key("parallel").begin_object();
  j.field("world_size", p.world_size).field("tensor_parallel", p.tensor_parallel);
  j.field("context_parallel", p.context_parallel).field("pipeline_parallel", p.pipeline_parallel);
  j.field("data_parallel", plan.dp).field("zero_stage", p.zero_stage);
  j.field("sequence_parallel", plan.sequence_parallel).end_object();
  j.key("batch").begin_object();
  j.field("micro_batch_size", plan.train.micro_batch_size);
  j.field("global_batch_size", plan.global_batch);
  j.field("microbatches_per_rank", plan.microbatches_per_rank);
  j.field("tokens_per_step", plan.tokens_per_step).end_object();
  j.key("params").begin_object();
  j.field("total", plan.params_total).field("per_rank", plan.ranks.at(0).params);
  j.field("per_rank_stored", plan.ranks.at(0).params_stored);
  j.field("zero_shard", plan.zero_shard);
  j.field("vocab_size", m.vocab_size).field("padded_vocab", plan.padded_vocab).end_object();
  // the GEMMs' leading dimensions that are not multiples of 8 elements (plan/gemm_calls.h)
  j.key("unaligned_gemm_dims").begin_array();
  for (const std::string& d : unaligned_gemm_dims(plan)) j.value(d);
  j.end_array();
  // a checkpoint's tensor data per rank (plan/checkpoint.cpp)
  j.key("checkpoint").begin_object().key("bytes_per_rank").begin_array();
  int64_t checkpoint_total = 0;
  for (const RankPlan& rp : plan.ranks) j.value(rp.checkpoint_bytes), checkpoint_total += rp.checkpoint_bytes;
  j.end_array().field("total_bytes", checkpoint_total);
  if (projection && projection->checkpoint_seconds >= 0)
    j.field("write_seconds", projection->checkpoint_seconds);
  j.end_object();
  j.key("memory").begin_array();
  for (const RankPlan& rp : plan.ranks) {
    j.begin_object().field("rank", rp.rank).field("tp_rank", rp.tp_rank);
    j.field("dp_rank", rp.dp_rank).field("pp_rank", rp.pp_rank);
    j.field("param_count", rp.params).field("param_count_stored", rp.params_stored);
    j.field("microbatches_held", rp.microbatches_held);
    memory_object(j, rp.memory);
    resident_object(j, rp.memory);
    if (rp.memory.host.total() > 0) {  // CPU offload: the host column
      const HostMemoryPlan& h = rp.memory.host;
      j.key("host").begin_object().field("params", h.params).field("grads", h.grads);
      j.field("master_params", h.master_params).field("optimizer_states", h.optimizer_states);
      j.field("total", h.total()).end_object();
    }
    j.end_object();
  }
  j.end_array();
  j.key("activations").begin_object();
  j.field("per_layer_bytes", plan.activation_bytes_per_layer);  // a dense layer's
  if (plan.model.moe.enabled())  // an MoE layer's, at the plan's M permuted rows
    j.field("moe_per_layer_bytes", plan.moe_activation_bytes_per_layer);
  j.field("per_microbatch_bytes", plan.activation_bytes_per_microbatch);
  j.field("selective_saved_per_layer_bytes",
          selective_saved_bytes_per_layer(m, plan.train.micro_batch_size, storage_bytes(plan.train),
                                          plan.options.mask_bytes, plan.tp,
                                          plan.sequence_parallel));
  tensor_list(j, "embedding", plan.embedding_activations);
  tensor_list(j, "layer", plan.layer_activations);
  if (plan.model.moe.enabled()) tensor_list(j, "moe_layer", plan.moe_layer_activations);
  tensor_list(j, "head", plan.head_activations);
  const KorthikantiCheck k = korthikanti_check_recompute(plan);
  j.key("korthikanti").begin_object();
  j.field("formula", k.formula).field("closed_form_bytes", k.closed_form_bytes);
  // layer_bytes = per_layer_bytes (statistics included); plan_bytes = layer_bytes -
  // norm_statistics_bytes, the figure Table 2's closed form counts
  j.field("layer_bytes", k.plan_bytes + k.norm_statistics_bytes);
  j.field("plan_bytes", k.plan_bytes).field("norm_statistics_bytes", k.norm_statistics_bytes);
  j.field("applicable", k.applicable()).key("differences").begin_array();
  for (const std::string& d : k.differences) j.value(d);
  j.end_array().end_object();
  j.end_object();
  j.key("flops").begin_object();
  j.field("convention", attention_flops_name(f.convention));
  j.field("attention", f.attention == AttentionImpl::NAIVE ? "naive" : "flash");
  j.field("model_per_step", f.model_per_step).field("hardware_per_step", f.hardware_per_step);
  j.field("model_per_rank_step", f.model_per_rank_step);
  j.field("hardware_per_rank_step", f.hardware_per_rank_step);
  // hardware only, like hardware_per_step: every tp rank of a microbatch's group runs it
  j.field("recompute_per_step", f.recompute_per_microbatch * f.tensor_parallel *
                                    f.microbatches_per_step);
  j.field("recomputed_layers", f.recomputed_layers);
  j.field("recompute_formula", f.recompute_formula);
  j.field("microbatches_per_step", f.microbatches_per_step);
  const FlopsConventions conventions = flops_conventions(plan);  // plan/moe_params.h
  j.key("per_token").begin_object();
  j.field("paralab", conventions.paralab).field("torchtitan", conventions.torchtitan);
  j.field("megatron", conventions.megatron);
  j.field("torchtitan_attention", conventions.torchtitan_attention);
  j.field("megatron_attention", conventions.megatron_attention).end_object();
  j.key("matmuls").begin_array();
  for (const auto& mm : f.matmuls) {
    j.begin_object().field("name", mm.name).field("reduces_over", mm.reduces_over);
    j.field("formula", mm.formula).field("per_layer", mm.per_layer);
    j.field("model_per_step", mm.model * f.microbatches_per_step);
    j.field("hardware_per_step", mm.hardware * f.microbatches_per_step).end_object();
  }
  j.end_array().end_object();
  j.key("data_parallel").begin_object();
  const DataParallelPlan& d = plan.data_parallel;
  j.field("buckets", (int64_t)d.layout.buckets.size()).field("padded_total", d.layout.padded_total);
  j.field("shard_numel", d.layout.shard_numel).field("state_numel", d.state_numel);
  j.field("params_transient_peak", d.sim.params_transient_peak);
  j.field("grads_transient_peak", d.sim.grads_transient_peak).end_object();
  j.key("comm").begin_array();
  for (const CommRow& r : comm_rows(plan.comm, nullptr)) {  // the tables' order
    const CommPlanEntry& e = *r.pred;
    j.begin_object().field("group", group_name(e.group)).field("op", op_name(e.op));
    j.field("calls", e.calls).field("payload_bytes", e.payload_bytes);
    j.field("bus_bytes", e.bus_bytes).end_object();
  }
  j.end_array();
  pipeline_json(j, plan);
  moe_plan_json(j, plan);  // "moe", with --num-experts only (report/moe_plan.h)
  cp_plan_json(j, plan, peak);  // "context_parallel", with --cp > 1 only (report/report_cp.h)
  if (peak) {
    j.key("peak").begin_object();
    j.field("tflops", peak->tflops).field("source", peak->source).end_object();
  }
  if (projection) time_plan_json(j, plan, *projection);
  j.end_object();
  return j.str() + "\n";
}

}  // namespace paralab
