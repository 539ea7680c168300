// report/report_memory.cpp: the memory table of report.h (memory_table) and the lines under
// it: every category predicted beside measured with why it holds what it holds, the total
// (peak) with how it was found and whether it is exact, what the rank holds between steps
// (the ZeRO paper's model states), the per-layer activations beside Korthikanti's closed
// form, and what selective recompute saves. Split from report.cpp (the other writers).
#include <algorithm>
#include <utility>
#include "parallel/data_parallel.h"  // fp8_staging_pairs
#include "plan/moe_memory.h"  // moe_layer_count
#include "plan/recompute.h"  // korthikanti_check_recompute, selective_saved_bytes_per_layer
#include "report/report.h"
#include "report/report_impl.h"  // total_is_exact, vocab_padding_note, memory_category_shown
#include "report/text.h"         // strprintf

namespace paralab {

// ---- memory ledger -----------------------------------------------------------------------
// Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by x tp; each
// rank's table holds its share of the padding rows (drawn like the rest, masked in the loss).
std::string vocab_padding_note(const Plan& plan) {
  if (plan.padded_vocab == plan.model.vocab_size) return "";
  const int multiple = plan.model.vocab_divisible_by;
  return strprintf("vocab %d padded to %lld for tp %d%s", plan.model.vocab_size,
                   (long long)plan.padded_vocab, plan.tp,
                   multiple > 1 ? strprintf(" (a multiple of %d x tp)", multiple).c_str() : "");
}

// One layer's activations as the notes print them: a dense layer's, an MoE layer's, or both
// when the model has both kinds (an MoE layer keeps its router's and experts' tensors instead
// of the dense MLP's, plan.cpp).
static std::string per_layer_mib(const Plan& plan) {
  const int moe = moe_layer_count(plan.model);
  const std::string dense = format_mib((double)plan.activation_bytes_per_layer) + " MiB";
  const std::string expert = format_mib((double)plan.moe_activation_bytes_per_layer) + " MiB";
  if (moe == 0) return dense;
  if (moe == plan.model.num_layers) return expert + " (MoE)";
  return dense + " dense, " + expert + " MoE";
}

// Why a category holds what it holds, in a few words beside its row.
static std::string category_note(const Plan& plan, const RankPlan& rp, int c);
static std::string memory_note(const Plan& plan, const RankPlan& rp, int c) {
  std::string note = category_note(plan, rp, c);
  if (c == 0 && !vocab_padding_note(plan).empty())
    note += (note.empty() ? "" : "; ") + vocab_padding_note(plan);
  return note;
}

// The FP8 categories (plan/fp8.h): fp8_operands (c 9), fp8_state (c 10).
static std::string fp8_note(const Plan& plan, const RankPlan& rp, int c) {
  const Fp8Config& f = plan.model.fp8;
  if (c == 9 && rp.memory.fp8_operands)
    return "one FP8 GEMM's codes and fp32 factors, shared by the linears: X or dY, and W, "
           "W^T or X^T (recast per GEMM)";
  if (c != 10 || !rp.memory.fp8_state) return "";
  std::string s = f.recipe == Fp8Recipe::Delayed
                      ? strprintf("delayed: amax history of %d and scale, 3 per linear",
                                  f.amax_history_len)
                  : f.recipe == Fp8Recipe::Tensorwise ? "tensorwise: one amax and its scale"
                                                      : "blockwise: no state";
  if (f.recipe == Fp8Recipe::Delayed && plan.model.moe.enabled()) s += ", the experts' per expert";
  if (!plan.data_parallel.fp8_message.empty())  // --fp8-param-gather: 3 floats per scale
    s = f.recipe == Fp8Recipe::Blockwise
            ? "blockwise: the FP8 gathers' scale, factor and amax per 128 x 128 block"
            : s + "; the FP8 gathers' scale, factor and amax per weight";
  if (f.log_scaling) s += "; the cast counters";
  return s;
}

// The activations' row: what a microbatch in flight keeps, and how many are held.
static std::string activations_note(const Plan& plan, const RankPlan& rp) {
  const ModelConfig& m = plan.model;
  const bool piped = !plan.pipeline.stages.empty();
  if (m.recompute.full())
    return strprintf("%sfull recompute (%s %d): each microbatch in flight keeps its input and its "
                     "groups' outputs; backward makes one group again (%s a layer)",
                     piped ? strprintf("%s stage %d holds %d (microbatch, chunk); ",
                                       schedule_name(plan.pipeline.shape.kind), rp.pp_rank,
                                       rp.microbatches_held).c_str()
                           : "",
                     m.recompute.method == Recompute::Method::BLOCK ? "block" : "uniform",
                     m.recompute.num_layers, per_layer_mib(plan).c_str());
  if (piped) {
    const PipelineStagePlan& st = plan.pipeline.stages.at(rp.pp_rank);
    const char* head = !st.head ? "" : st.chunk_layers.size() > 1 ? " + head on the last chunk"
                                                                    : " + head";
    return strprintf("%s stage %d holds %d (microbatch, chunk) x (input + %d layer(s) x %s%s)%s",
               schedule_name(plan.pipeline.shape.kind), st.pp_rank, st.held,
               st.chunk_layers[0], per_layer_mib(plan).c_str(), head,
               has_split_backward(plan.pipeline.schedule)
                   ? "; from B to W a layer keeps its linears' inputs and output gradients"
                   : "");
  }
  return strprintf("%d microbatch x (%d layers x %s + embedding, head)%s",
                   rp.microbatches_held, m.num_layers, per_layer_mib(plan).c_str(),
                   plan.sequence_parallel ? "; sp: N/t tokens between blocks" : "");
}

// The logits' row: the fused loss's chunk or the whole N x V, and in which types.
static std::string logits_note(const Plan& plan, const RankPlan& rp) {
  const ModelConfig& m = plan.model;
  if (!plan.pipeline.stages.empty() && rp.memory.logits == 0) return "no head on this stage";
  const char* what = plan.train.bf16   ? "fp32 + bf16 gradient"
                     : plan.train.fp16 ? "fp32 + fp16 gradient"
                                       : "fp32";
  const std::string cols =
      plan.tp > 1 ? strprintf(" x V_l = %lld", (long long)(plan.padded_vocab / plan.tp)) : "";
  return m.fused_cross_entropy
             ? strprintf("fused CE: one chunk of %d tokens%s, %s", m.cross_entropy_chunk,
                   cols.c_str(), what)
             : strprintf("--no-fused-ce: full N x V%s, %s", plan.tp > 1 ? "_l" : "", what);
}

static std::string category_note(const Plan& plan, const RankPlan& rp, int c) {
  const int z = plan.parallel.zero_stage;
  const bool piped = !plan.pipeline.stages.empty();
  const DataParallelPlan& d =
      piped ? plan.pipeline.stages.at(rp.pp_rank).data_parallel : plan.data_parallel;
  const DataParallelPlan& experts = piped ? plan.pipeline.stages.at(rp.pp_rank).expert_data_parallel
                                          : plan.expert_data_parallel;
  const int nb = (int)d.layout.buckets.size();
  if (c == 0 && z >= 3)
    return strprintf("zero 3: shard of %s + gathered units, at most %s elements",
               format_si((double)d.params_resident).c_str(),
               format_si((double)d.sim.params_transient_peak).c_str());
  if (c == 1 && z >= 2)
    return strprintf("zero %d: shard of %s + bucket buffers, at most %s elements", z,
               format_si((double)d.grads_resident).c_str(),
               format_si((double)d.sim.grads_transient_peak).c_str());
  if ((c == 0 || c == 1) && z >= 1 && d.layout.padded_total > d.layout.total)
    return strprintf("%d bucket(s) padded to multiples of %s %d: +%lld elements", nb,
               plan.cp > 1 ? "dp x cp" : "dp", plan.dp_cp,
               (long long)(d.layout.padded_total - d.layout.total));
  if (c == 2 && !plan.train.half()) return "fp32 params are the master copy";
  if ((c == 2 || c == 3) && z >= 1 && experts.layout.total > 0)  // expert parallelism
    return strprintf("zero %d: dense shard %s elements, 1/%d; experts' %s, 1/%d (edp)", z,
                     format_si((double)d.state_numel).c_str(), plan.dp_cp,
                     format_si((double)experts.state_numel).c_str(),
                     plan.parallel.expert_data_parallel());
  if ((c == 2 || c == 3) && z >= 1)
    return strprintf("zero %d: shard of %s elements, 1/%d%s", z,
               format_si((double)d.state_numel).c_str(), plan.dp_cp,
               plan.cp > 1 ? " (dp x cp: the cp ranks hold the same weights)" : "");
  switch (c) {
    case 4: return activations_note(plan, rp);
    case 5:
      if (rp.memory.recompute)
        return "selective: one layer's recomputed internals, alive inside its block only";
      break;
    case 6:
      if (!plan.data_parallel.fp8_message.empty()) {  // plan/fp8.h fp8_gather_comm_buffers
        const std::vector<int64_t>& m = plan.data_parallel.fp8_message;
        const int pairs = fp8_staging_pairs(
            plan.parallel.zero_stage, plan.options.overlap_param_gather,
            plan.options.zero3_prefetch_layers,
            (int)std::count_if(m.begin(), m.end(), [](int64_t x) { return x > 0; }));
        return strprintf("--fp8-param-gather: the largest FP8 bucket's message sent, dp "
                         "received, %d x (the gathers in flight); the scalars", pairs);
      }
      if (rp.memory.comm_buffers) return "the gradient norm's all-reduce scalar";
      break;
    case 7: return logits_note(plan, rp);
    case 9:
    case 10: return fp8_note(plan, rp, c);
    default: break;
  }
  return "";
}

// Selective recompute: what a layer no longer keeps, and why core_attn buys little with
// flash attention (its only S-sized tensor is the log-sum-exp).
std::string recompute_line(const Plan& plan) {
  const ModelConfig& m = plan.model;
  const Recompute& r = m.recompute;
  if (!r.selective()) return "";
  const int B = plan.train.micro_batch_size, act = storage_bytes(plan.train);
  const int64_t saved = selective_saved_bytes_per_layer(m, B, act, plan.options.mask_bytes,
                                                        plan.tp, plan.sequence_parallel);
  std::string modules;
  for (auto [on, name] : {std::pair<bool, const char*>{r.core_attn, "core_attn"},
                          {r.mlp, "mlp"}, {r.norm, "norm"}})
    if (on) modules += (modules.empty() ? "" : ", ") + std::string(name);
  std::string t = strprintf("  selective recompute (%s): a layer keeps %s, %lld B less; "
                            "recompute holds one layer's internals, max(norm1, core, norm2 + "
                            "mlp)\n", modules.c_str(), per_layer_mib(plan).c_str(),
                            (long long)saved);
  if (r.core_attn && m.attention == AttentionImpl::FLASH) {
    ModelConfig core_only = m;
    core_only.recompute.mlp = core_only.recompute.norm = false;
    t += strprintf("  flash attention keeps no S x S tensor: core_attn saves only its fp32 "
                   "log-sum-exp, 4 B (a/t) S = %lld B per layer, for a rerun of the flash "
                   "forward: little\n",
                   (long long)selective_saved_bytes_per_layer(core_only, B, act,
                                                              plan.options.mask_bytes, plan.tp,
                                                              plan.sequence_parallel));
  }
  return t;
}

// One figure per layer everywhere (the memory table's notes, --plan's tensor list, the
// recompute line): every saved tensor, the fp32 norm statistics included. Korthikanti's
// Table 2 counts no norm statistics, so the comparison takes them out explicitly:
// plan - statistics vs the closed form.
std::string korthikanti_line(const Plan& plan) {
  const KorthikantiCheck k = korthikanti_check_recompute(plan);
  const int64_t layer = k.plan_bytes + k.norm_statistics_bytes;
  const int moe = moe_layer_count(plan.model);
  if (moe == plan.model.num_layers)  // no dense layer: the paper's Table 2 has nothing to check
    return strprintf("  activations per layer: %s (norm statistics %s MiB included); "
                     "Korthikanti's formulas count a dense MLP, which no layer here has\n",
                     per_layer_mib(plan).c_str(),
                     format_mib((double)k.norm_statistics_bytes).c_str());
  const std::string per_layer = moe ? per_layer_mib(plan) : format_mib((double)layer) + " MiB";
  std::string t = strprintf("  activations per layer: %s (norm statistics %s MiB included)\n",
                            per_layer.c_str(), format_mib((double)k.norm_statistics_bytes).c_str());
  t += strprintf("  Korthikanti %s = %s MiB counts no norm statistics: plan%s - statistics = %s MiB",
                 k.formula.c_str(), format_mib(k.closed_form_bytes).c_str(),
                 moe ? " (dense layer)" : "", format_mib((double)k.plan_bytes).c_str());
  if (k.applicable())
    return t + ((double)k.plan_bytes == k.closed_form_bytes ? ": equal\n"
                                                            : ": DIFFER (a plan bug)\n");
  t += strprintf("; plan - statistics - closed form = %+lld B; assumptions differ:\n",
                 (long long)((double)k.plan_bytes - k.closed_form_bytes));
  for (const std::string& d : k.differences) t += "    " + d + "\n";
  return t;
}

// How the predicted total (peak) was found, and whether it is exact. The categories do not
// all peak at once: the total is a replay of when each is alive (MemoryPlan::total). Exact
// but where a replay holds a transient at its peak beside the rest, an upper bound: ZeRO-2/3's
// bucket and gather buffers under pipelining or full recompute, and selective recompute's
// buffers under pipelining (tests/mpi/compare_runs.py holds both: == or <=).
bool total_is_exact(const Plan& plan, const MemoryPlan& m) {
  const bool transients_at_peak = plan.parallel.zero_stage >= 2 && m.total_replayed == 0 &&
                                  (m.total_stage > 0 || m.total_full_recompute > 0);
  // a stage's replay adds selective recompute's buffers at their peak to each action's phase
  const bool recompute_at_peak = m.total_stage > 0 && m.recompute > 0;
  return !transients_at_peak && !recompute_at_peak && !layer_transients_at_peak(plan, m);
}

bool layer_transients_at_peak(const Plan& plan, const MemoryPlan& m) {
  // full recompute's phase replay (plan.cpp), and a pipeline stage's replay with recompute
  // (plan/pipeline_replay.cpp stage_total_peak), put the layers' own workspace transients
  // (MoE layers', --qk-layernorm's) beside the layers' peak
  return m.total_replayed == 0 && (m.total_full_recompute > 0 || m.total_stage > 0) &&
         (plan.model.moe.enabled() || plan.model.qk_layernorm);
}

static std::string total_note(const Plan& plan, const RankPlan& rp) {
  const MemoryPlan& m = rp.memory;
  const int z = plan.parallel.zero_stage;
  const bool transients =
      z >= 2 && m.total_replayed == 0 && (m.total_stage > 0 || m.total_full_recompute > 0);
  const std::string bound =
      total_is_exact(plan, m) ? std::string("; exact")
      : transients ? strprintf("; ZeRO-%d's transient buffers held at their peak: an upper bound", z)
      : layer_transients_at_peak(plan, m)
          ? std::string("; the layers' workspace transients beside their peak: an upper bound")
                   : std::string("; selective recompute's buffers at their peak in every "
                                 "action: an upper bound");
  if (m.total_replayed > 0 && m.total_stage > 0 && z >= 2)
    return strprintf("predicted: this stage's actions replayed call by call, each compute "
                     "beside the ZeRO-%d buffers alive then; exact", z);
  if (m.total_stage > 0)
    return "predicted: the largest total over this stage's actions, replayed" + bound;
  if (m.total_full_recompute > 0)
    return "predicted: the largest total of the microbatch's phases (the loss, the layers' "
           "forward, their backward with a group made again)" + bound;
  if (m.total_replayed > 0)
    return strprintf("predicted: each compute of the step beside the ZeRO-%d buffers alive then, "
                     "replayed call by call; exact", z);
  if (m.recompute > 0)
    return "predicted: the larger of the category peaks but recompute (they coincide as "
           "backward starts) and the total inside the last layer, when recompute peaks; exact";
  return plan.model.fused_cross_entropy
             ? "predicted: the sum of the category peaks, which coincide in the loss; exact"
             : "predicted: the sum of the category peaks, which coincide in the head's "
               "backward; exact";
}

// What the rank holds between steps (after the optimizer step): the model states without
// ZeRO-2/3's transient buffers, the ZeRO paper's per-rank bytes (MemoryPlan::resident_*),
// measured as the ledger's current bytes then. The total's note: the closed form at Ψ (the
// rank's local vector) and what bucket padding adds (P - Ψ elements, plan.h).
template <typename Row>
static std::string resident_rows(const Plan& plan, const RankPlan& rp,
                                 const StepMetrics* measured, const Row& row) {
  const MemoryPlan& m = rp.memory;
  const bool meas = measured && measured->resident_measured;
  auto got = [&](int c) { return meas ? (double)measured->resident_bytes[c] : 0.0; };
  std::string t = "  held between steps (after the optimizer step): model states\n";
  const int64_t pred[4] = {m.resident_params, m.resident_grads, m.master_params,
                           m.optimizer_states};
  double total_meas = 0;
  for (int c = 0; c < 4; ++c) {
    t += row((std::string("  ") + kMemoryCategoryNames[c]).c_str(), (double)pred[c], got(c),
             "");
    total_meas += got(c);
  }
  const int z = plan.parallel.zero_stage, pb = storage_bytes(plan.train);
  const int mb = plan.train.half() ? 4 : 0;
  const int ob = plan.train.exp_avg_bytes() + plan.train.exp_avg_sq_bytes();
  const bool piped = !plan.pipeline.stages.empty();
  const DataParallelPlan& d =
      piped ? plan.pipeline.stages.at(rp.pp_rank).data_parallel : plan.data_parallel;
  // with expert parallelism two vectors: the dense one over dp, the experts' over edp
  const DataParallelPlan& experts = piped ? plan.pipeline.stages.at(rp.pp_rank).expert_data_parallel
                                          : plan.expert_data_parallel;
  const int64_t psi_e = experts.layout.total, psi = rp.params - psi_e;
  const int64_t padded = (z == 0 ? psi : d.layout.padded_total) +
                         (z == 0 ? psi_e : experts.layout.padded_total);
  const int edp = plan.parallel.expert_data_parallel();
  const double closed = zero_resident_bytes(z, (double)psi, plan.dp, pb, pb, mb, ob) +
                        (psi_e > 0 ? zero_resident_bytes(z, (double)psi_e, edp, pb, pb, mb, ob) : 0);
  // the convention's name: the paper's 2 + 2 + 12, fp32's, or with bf16 moments (DeepSeek-V3's
  // 2 + 2 + 8 in bf16) the bytes spelled out
  const std::string convention =
      ob != 8 ? strprintf(" (%d + %d + %d: %s moments)", pb, pb, mb + ob,
                          ob == 4 ? "bf16" : "one bf16")
      : plan.train.half() ? " (2 + 2 + 12, the paper's)" : " (fp32 4 + 4 + 8)";
  std::string note = strprintf("ZeRO %d%s: %s = %s MiB at Ψ %lld, N %d", z, convention.c_str(),
                               zero_resident_formula(z, pb, pb, mb, ob).c_str(),
                               format_mib(closed).c_str(), (long long)psi, plan.dp);
  if (psi_e > 0)
    note = strprintf("ZeRO %d%s: %s twice, dense Ψ %lld over N %d + experts Ψ %lld over edp %d "
                     "= %s MiB", z,
                     convention.c_str(), zero_resident_formula(z, pb, pb, mb, ob).c_str(), (long long)psi, plan.dp,
                     (long long)psi_e, edp, format_mib(closed).c_str());
  const int64_t psi_all = psi + psi_e;
  if (padded > psi_all)
    note += strprintf("; bucket padding P - Ψ = %lld elements adds %+.0f B",
                      (long long)(padded - psi_all), (double)m.resident_total() - closed);
  t += row("  total", (double)m.resident_total(), total_meas, note);
  return t;
}

// CPU offload (parallel/offload.h): the host column, each offloaded state element's copies of
// its gradient and parameter, its fp32 master (bf16) and Adam moments, 16 bytes in both
// precisions (12 with bf16 moments); the rows above are then the device's.
template <typename Row>
static std::string host_rows(const Plan& plan, const RankPlan& rp, const StepMetrics* measured,
                             const Row& row) {
  const HostMemoryPlan& h = rp.memory.host;
  double meas_total = 0;
  for (int c = 0; measured && c < 4; ++c) meas_total += (double)measured->host_memory_bytes[c];
  if (h.total() == 0 && meas_total == 0) return "";
  const OffloadConfig& f = plan.parallel.offload;
  const bool piped = !plan.pipeline.stages.empty();
  const DataParallelPlan& d =
      piped ? plan.pipeline.stages.at(rp.pp_rank).data_parallel : plan.data_parallel;
  const DataParallelPlan& e = piped ? plan.pipeline.stages.at(rp.pp_rank).expert_data_parallel
                                    : plan.expert_data_parallel;
  const int64_t H = d.host_numel + e.host_numel, N = d.state_numel + e.state_numel;
  std::string t = strprintf("  host memory (%s on CUDA), CPU offload: %lld of the %lld "
                            "optimizer-state elements (fraction %g)%s\n",
                            f.pin_memory ? "pinned" : "pageable", (long long)H, (long long)N,
                            f.host_fraction(),
                            d.params_on_host ? "; the ZeRO-3 parameter shard lives here" : "");
  const char* why[4] = {plan.train.half() ? "16-bit: AdamW's rounding, copied up" :
                                          "fp32: the master copy, copied up",
                        "the summed gradient, copied down", "fp32 master (16-bit only)",
                        "Adam m and v"};
  for (int c = 0; c < 4; ++c)
    t += row((std::string("  ") + kMemoryCategoryNames[c]).c_str(), (double)h.at(c),
             measured ? (double)measured->host_memory_bytes[c] : 0, why[c]);
  t += row("  total (host)", (double)h.total(), meas_total,
           strprintf("16 B x %lld elements", (long long)H));
  return t;
}

std::string memory_table(const Plan& plan, int rank, const StepMetrics* measured) {
  const RankPlan& rp = plan.ranks.at(rank);
  std::string t = strprintf("memory, rank %d (MiB)      predicted", rank);
  if (measured) t += strprintf(" %10s %10s %8s", "measured", "diff", "diff%");
  t += "\n";
  auto row = [&](const char* name, double pred, double meas, const std::string& note) {
    std::string r = strprintf("  %-22s %10s", name, format_mib(pred).c_str());
    if (measured) {
      const double diff = meas - pred;
      const std::string pct = pred > 0 ? strprintf("%+.1f%%", 100 * diff / pred)
                                       : (meas == 0 ? std::string("0") : std::string("n/a"));
      r += strprintf(" %10s %10s %8s", format_mib(meas).c_str(), format_mib(diff).c_str(),
               pct.c_str());
    }
    if (!note.empty()) r += "   " + note;
    return r + "\n";
  };
  for (int c = 0; c < kNumMemoryCategories; ++c)
    if (memory_category_shown(plan, c))
      t += row(kMemoryCategoryNames[c], (double)rp.memory.at(c),
               measured ? (double)measured->memory_bytes[c] : 0, memory_note(plan, rp, c));
  t += row("total (peak)", (double)rp.memory.total(),
           measured ? (double)measured->peak_memory_bytes : 0, total_note(plan, rp));
  t += resident_rows(plan, rp, measured, row);
  t += host_rows(plan, rp, measured, row);
  if (measured && measured->allocations.fresh >= 0) {
    const kernels::AllocationCount& a = measured->allocations;
    t += strprintf("  allocator this step: %lld fresh blocks (%s MiB; none after the first step: "
                   "kernels/block_cache.h), %lld reused, %s MiB zero-filled\n",
                   a.fresh, format_mib(a.fresh_bytes).c_str(), a.reused,
                   format_mib(a.zeroed_bytes).c_str());
  }
  return t + korthikanti_line(plan) + recompute_line(plan);
}

}  // namespace paralab
