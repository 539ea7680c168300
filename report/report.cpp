// report/report.cpp: see report.h. The text writers: the run header, the per-step line,
// the memory, FLOPs and communication tables, and `--plan`'s text; the JSON writers
// (step_json, plan_json) are in report_json.cpp.
#include "report/report.h"
#include "report/text.h"  // strprintf
#include <cstdio>
#include <utility>
#include "plan/recompute.h"  // korthikanti_check_recompute, selective_saved_bytes_per_layer
#include "report/report_impl.h"  // CommRow, comm_rows
#include "report/timeline.h"     // pipeline_text

namespace paralab {

static constexpr double kMiB = 1024.0 * 1024.0;


std::string format_mib(double bytes) { return strprintf("%.2f", bytes / kMiB); }

std::string format_si(double v, int decimals) {
  static const char* const suffix[] = {"", "k", "M", "G", "T", "P", "E", "Z", "Y"};
  if (!std::isfinite(v)) return "n/a";
  int i = 0;
  while (std::fabs(v) >= 1000 && i < 8) { v /= 1000; ++i; }
  return strprintf("%.*f%s", decimals, v, suffix[i]);
}

static std::string percent(double fraction) {
  return std::isfinite(fraction) ? strprintf("%.1f%%", 100 * fraction) : "n/a";
}

void fill_rates(StepMetrics& s, const Plan& plan, const Peak& peak) {
  if (s.step_seconds <= 0) return;
  s.tokens_per_second = plan.tokens_per_step / s.step_seconds;
  if (peak.tflops <= 0) { s.mfu = s.hfu = NAN; return; }
  const double capacity = s.step_seconds * peak.tflops * 1e12 * plan.parallel.world_size;
  // measured: every rank's counter summed, or (one rank known) it times the world
  const double hw = s.hardware_flops_all >= 0 ? s.hardware_flops_all
                    : s.hardware_flops >= 0   ? s.hardware_flops * plan.parallel.world_size
                                              : plan.flops.hardware_per_step;
  s.mfu = plan.flops.model_per_step / capacity;
  s.hfu = hw / capacity;
}

std::string run_header(const Plan& plan, const std::string& device, const Peak* peak) {
  const ModelConfig& m = plan.model;
  const ParallelConfig& p = plan.parallel;
  std::string s = strprintf("paralab | %s %dL h%d a%d", m.is_gpt() ? "gpt" : "llama", m.num_layers,
                      m.hidden_size, m.num_attention_heads);
  if (m.groups() != m.num_attention_heads) s += strprintf(" g%d", m.groups());
  s += strprintf(" s%d V%d | world %d = tp%d%s x cp%d x pp%d x dp%d | zero %d | %s%s%s | %s attention",
           m.seq_length, m.vocab_size, p.world_size, p.tensor_parallel,
           plan.sequence_parallel ? "+sp" : "", p.context_parallel, p.pipeline_parallel,
           plan.dp, p.zero_stage, device.c_str(), device.empty() ? "" : " ",
           plan.train.bf16 ? "bf16" : "fp32",
           m.attention == AttentionImpl::NAIVE ? "naive" : "flash");
  if (peak) s += " | peak " + describe_peak(*peak);
  return s;
}

// ---- per-step line -----------------------------------------------------------------------
std::string step_header(const StepMetrics& s) {
  std::string h = strprintf("%6s %9s %9s %8s %9s %8s %7s %7s %9s", "step", "loss", "lr", "gnorm",
                      "ms", "tok/s", "MFU", "HFU", "mem(MiB)");
  if (s.comm_bytes >= 0) h += strprintf(" %10s", "comm(MiB)");
  if (s.bubble >= 0) h += strprintf("  %s", "bubble");
  return h;
}

std::string step_row(const StepMetrics& s) {
  std::string r = strprintf("%6d %9.4f %9.2e %8.3f %9.1f %8s %7s %7s %9s", s.step, s.loss, s.lr,
                      s.grad_norm, s.step_seconds * 1e3,
                      format_si(s.tokens_per_second, 1).c_str(), percent(s.mfu).c_str(),
                      percent(s.hfu).c_str(), format_mib(s.peak_memory_bytes).c_str());
  if (s.comm_bytes >= 0) r += strprintf(" %10s", format_mib(s.comm_bytes).c_str());
  if (s.bubble >= 0) {
    r += "  " + percent(s.bubble);
    if (s.bubble_predicted >= 0) r += " (pred " + percent(s.bubble_predicted) + ")";
  }
  return r;
}

// ---- memory ledger -----------------------------------------------------------------------
// Megatron pads the vocabulary to a multiple of tp; the rank's table holds the zero rows.
static std::string vocab_padding_note(const Plan& plan) {
  if (plan.padded_vocab == plan.model.vocab_size) return "";
  return strprintf("vocab %d padded to %lld for tp %d", plan.model.vocab_size,
             (long long)plan.padded_vocab, plan.tp);
}

// Why a category holds what it holds, in a few words beside its row.
static std::string category_note(const Plan& plan, const RankPlan& rp, int c);
static std::string memory_note(const Plan& plan, const RankPlan& rp, int c) {
  std::string note = category_note(plan, rp, c);
  if (c == 0 && !vocab_padding_note(plan).empty())
    note += (note.empty() ? "" : "; ") + vocab_padding_note(plan);
  return note;
}

static std::string category_note(const Plan& plan, const RankPlan& rp, int c) {
  const int z = plan.parallel.zero_stage;
  const bool piped = !plan.pipeline.stages.empty();
  const DataParallelPlan& d =
      piped ? plan.pipeline.stages.at(rp.pp_rank).data_parallel : plan.data_parallel;
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
    return strprintf("%d bucket(s) padded to multiples of dp %d: +%lld elements", nb, plan.dp,
               (long long)(d.layout.padded_total - d.layout.total));
  if (c == 2 && !plan.train.bf16) return "fp32 params are the master copy";
  if ((c == 2 || c == 3) && z >= 1)
    return strprintf("zero %d: shard of %s elements, 1/%d", z,
               format_si((double)d.state_numel).c_str(), plan.dp);
  const ModelConfig& m = plan.model;
  if (c == 4 && m.recompute.full())
    return strprintf("%sfull recompute (%s %d): each microbatch in flight keeps its input and its "
                     "groups' outputs; backward makes one group again (%s MiB a layer)",
                     piped ? strprintf("%s stage %d holds %d (microbatch, chunk); ",
                                       schedule_name(plan.pipeline.shape.kind), rp.pp_rank,
                                       rp.microbatches_held).c_str()
                           : "",
                     m.recompute.method == Recompute::Method::BLOCK ? "block" : "uniform",
                     m.recompute.num_layers, format_mib(plan.activation_bytes_per_layer).c_str());
  if (piped && c == 4) {
    const PipelineStagePlan& st = plan.pipeline.stages.at(rp.pp_rank);
    const char* head = !st.head ? "" : st.chunk_layers.size() > 1 ? " + head on the last chunk"
                                                                    : " + head";
    return strprintf("%s stage %d holds %d (microbatch, chunk) x (input + %d layer(s) x %s MiB%s)%s",
               schedule_name(plan.pipeline.shape.kind), st.pp_rank, st.held,
               st.chunk_layers[0], format_mib(plan.activation_bytes_per_layer).c_str(), head,
               splits_backward(plan.pipeline.shape.kind)
                   ? "; from B to W a layer keeps its linears' inputs and output gradients"
                   : "");
  }
  if (piped && c == 7 && rp.memory.logits == 0) return "no head on this stage";
  switch (c) {
    case 4: return strprintf("%d microbatch x (%d layers x %s MiB + embedding, head)%s",
                       rp.microbatches_held, m.num_layers,
                       format_mib(plan.activation_bytes_per_layer).c_str(),
                       plan.sequence_parallel ? "; sp: N/t tokens between blocks" : "");
    case 5:
      if (rp.memory.recompute)
        return "selective: one layer's recomputed internals, alive inside its block only";
      break;
    case 6: if (rp.memory.comm_buffers) return "the gradient norm's all-reduce scalar"; break;
    case 7: {
      const char* what = plan.train.bf16 ? "fp32 + bf16 gradient" : "fp32";
      const std::string cols =
          plan.tp > 1 ? strprintf(" x V_l = %lld", (long long)(plan.padded_vocab / plan.tp)) : "";
      return m.fused_cross_entropy
                 ? strprintf("fused CE: one chunk of %d tokens%s, %s", m.cross_entropy_chunk,
                       cols.c_str(), what)
                 : strprintf("--no-fused-ce: full N x V%s, %s", plan.tp > 1 ? "_l" : "", what);
    }
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
  std::string t = strprintf("  selective recompute (%s): a layer keeps %s MiB, %lld B less; "
                            "recompute holds one layer's internals, max(norm1, core, norm2 + "
                            "mlp)\n", modules.c_str(),
                            format_mib((double)plan.activation_bytes_per_layer).c_str(),
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

std::string korthikanti_line(const Plan& plan) {
  const KorthikantiCheck k = korthikanti_check_recompute(plan);
  std::string t = strprintf("  activations per layer: plan %s MiB, Korthikanti %s %s MiB (+ norm "
                      "statistics %s MiB)",
                      format_mib((double)k.plan_bytes).c_str(), k.formula.c_str(),
                      format_mib(k.closed_form_bytes).c_str(),
                      format_mib((double)k.norm_statistics_bytes).c_str());
  if (k.applicable())
    return t + ((double)k.plan_bytes == k.closed_form_bytes ? ": equal\n"
                                                            : ": DIFFER (a plan bug)\n");
  t += strprintf(": plan - closed form = %+lld B; assumptions differ:\n",
           (long long)((double)k.plan_bytes - k.closed_form_bytes));
  for (const std::string& d : k.differences) t += "    " + d + "\n";
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
    t += row(kMemoryCategoryNames[c], (double)rp.memory.at(c),
             measured ? (double)measured->memory_bytes[c] : 0, memory_note(plan, rp, c));
  t += row("total (peak)", (double)rp.memory.total(),
           measured ? (double)measured->peak_memory_bytes : 0,
           rp.memory.total_stage > 0
               ? "predicted: the largest total over this stage's actions, replayed (the "
                 "categories do not peak together; ZeRO-3's gathers at their peak)"
           : rp.memory.total_full_recompute > 0
               ? "predicted: the largest total of the microbatch's phases (the head's loss, "
                 "the layers' forward, the layers' backward with a group made again)"
           : rp.memory.recompute > 0
               ? "predicted: the larger of the category peaks but recompute (they coincide as "
                 "backward starts) and the total inside the last layer, when recompute peaks"
               : "predicted: sum of the category peaks, an upper bound (they coincide as "
                 "backward starts, except ZeRO-3 gathers and --no-fused-ce's backward "
                 "transients)");
  return t + korthikanti_line(plan) + recompute_line(plan);
}

// ---- FLOPs breakdown -----------------------------------------------------------------------
std::string flops_table(const Plan& plan, int rank, const StepMetrics* measured) {
  const FlopsPlan& f = plan.flops;
  const double k = (double)f.microbatches_per_rank;
  std::string t = strprintf("FLOPs per step, rank %d: %lld microbatch(es); model counts %s attention, "
                      "hardware counts %s attention as run\n",
                      rank, (long long)f.microbatches_per_rank, attention_flops_name(f.convention),
                      f.attention == AttentionImpl::NAIVE ? "naive (full S x S)"
                                                          : "flash (causal S(S+1)/2)");
  if (f.tensor_parallel > 1)
    t += strprintf("  tp %d: this rank's 1/t of every matmul (head over V_l = %lld vocabulary rows, "
             "padding included); the step's model FLOPs count the whole model\n",
             f.tensor_parallel, (long long)(plan.padded_vocab / f.tensor_parallel));
  t += strprintf("  %-7s %-9s %-20s %12s %12s\n", "matmul", "reduces", "forward, 1 microbatch",
           "model", "hardware");
  for (const auto& mm : f.matmuls)
    t += strprintf("  %-7s %-9s %-20s %12s %12s\n", mm.name.c_str(), mm.reduces_over.c_str(),
             (mm.formula + (mm.per_layer ? " x L" : "")).c_str(),
             format_si(mm.model * k).c_str(), format_si(mm.hardware * k).c_str());
  // Recompute: hardware only (MFU never counts it); its per-layer formula after the numbers.
  std::string rc = strprintf("  %-7s %-9s %-20s %12s %12s", "recompute", "", "",
                             format_si(0).c_str(), format_si(f.recompute_per_microbatch * k).c_str());
  if (!f.recompute_formula.empty())
    rc += strprintf("   %s x %lld layers", f.recompute_formula.c_str(), (long long)f.recomputed_layers);
  t += rc + "\n";
  t += strprintf("  %-38s %12s %12s\n", "total (backward = 2 x forward)",
           format_si(f.model_per_rank_step).c_str(), format_si(f.hardware_per_rank_step).c_str());
  if (measured && measured->hardware_flops >= 0) {
    const double pred = f.hardware_per_rank_step, meas = measured->hardware_flops;
    t += strprintf("  hardware measured %s vs predicted %s (%+.2f%%)\n", format_si(meas).c_str(),
             format_si(pred).c_str(), pred > 0 ? 100 * (meas - pred) / pred : 0.0);
  }
  return t;
}

// ---- communication: predicted beside measured -------------------------------------------------
// CommRow is declared in report_impl.h: step_json (report_json.cpp) lists the same rows.
std::vector<CommRow> comm_rows(const std::vector<CommPlanEntry>& comm,
                               const CommStats* measured) {
  std::vector<CommRow> rows;
  for (const CommPlanEntry& e : comm) rows.push_back({e.group, e.op, &e});
  if (measured)
    for (int g = 0; g < kNumCommGroups; ++g)
      for (int op = 0; op < kNumCommOps; ++op) {
        bool known = false;
        for (const CommRow& r : rows) known = known || (r.g == CommGroup(g) && r.op == CommOp(op));
        if (!known && measured->get(CommGroup(g), CommOp(op)).calls)
          rows.push_back({CommGroup(g), CommOp(op), nullptr});
      }
  return rows;
}

// who: "per rank", or with pipelining "each rank of stage s".
static std::string comm_table_of(const std::vector<CommPlanEntry>& comm, const std::string& who,
                                 const CommStats* measured) {
  const std::vector<CommRow> rows = comm_rows(comm, measured);
  std::string t;
  if (!measured) {
    t = "communication per step, " + who + " (predicted)\n";
    t += strprintf("  %-9s %-15s %8s %12s %12s\n", "group", "operation", "calls", "payload MiB",
             "bus MiB");
  } else {
    t = "communication per step, per rank       calls          payload MiB            bus MiB\n";
    t += strprintf("  %-9s %-15s %7s %7s %10s %10s %10s %10s\n", "group", "operation", "pred",
             "meas", "pred", "meas", "pred", "meas");
  }
  for (const CommRow& r : rows) {
    const double pc = r.pred ? (double)r.pred->calls : 0;
    const double pp = r.pred ? (double)r.pred->payload_bytes : 0;
    const double pb = r.pred ? r.pred->bus_bytes : 0;
    std::string line = strprintf("  %-9s %-15s", group_name(r.g), op_name(r.op));
    if (!measured) {
      line += strprintf(" %8.0f %12s %12s", pc, format_mib(pp).c_str(), format_mib(pb).c_str());
    } else {
      const CommRecord& m = measured->get(r.g, r.op);
      line += strprintf(" %7.0f %7.0f %10s %10s %10s %10s", pc, (double)m.calls,
                  format_mib(pp).c_str(), format_mib((double)m.payload_bytes).c_str(),
                  format_mib(pb).c_str(), format_mib(m.bus_bytes).c_str());
      const bool same = pc == (double)m.calls && pp == (double)m.payload_bytes;
      line += same ? "" : strprintf("   payload diff %+lld B",
                              (long long)m.payload_bytes - (long long)pp);
    }
    t += line + "\n";
  }
  if (rows.empty()) t += "  (none)\n";
  return t;
}

std::string comm_table(const Plan& plan, const CommStats* measured) {
  const bool piped = !plan.pipeline.stages.empty();
  return comm_table_of(plan.comm, piped ? "each rank of stage 0" : "per rank", measured);
}

// ---- --plan, human -------------------------------------------------------------------------
std::string plan_text(const Plan& plan, const Peak* peak) {
  const ModelConfig& m = plan.model;
  std::string t = run_header(plan, "", peak) + "\n\n";
  t += strprintf("params   %s total (%lld); per rank %s, stored per rank %s\n",
           format_si((double)plan.params_total).c_str(), (long long)plan.params_total,
           format_si((double)plan.ranks[0].params).c_str(),
           format_si((double)plan.ranks[0].params_stored).c_str());
  if (plan.tp > 1)
    t += strprintf("tp       %d ranks split heads, ffn and vocabulary%s%s%s\n", plan.tp,
             plan.sequence_parallel ? "; sequence parallel: N/t tokens between blocks" : "",
             vocab_padding_note(plan).empty() ? "" : "; ",
             vocab_padding_note(plan).c_str());
  t += strprintf("batch    global %lld x %d tokens = %lld tokens/step; micro %d; %lld microbatch(es) "
           "per rank\n\n", (long long)plan.global_batch, m.seq_length,
           (long long)plan.tokens_per_step, plan.train.micro_batch_size,
           (long long)plan.microbatches_per_rank);
  // Ranks are listed when they differ; with data parallelism alone they never do, with
  // pipelining the ranks of one stage never do: its first rank stands for them.
  const std::string pipeline = pipeline_text(plan);
  if (!pipeline.empty()) t += pipeline + "\n";
  const int per_stage = (int)plan.ranks.size() / plan.parallel.pipeline_parallel;
  bool alike = true;
  for (const RankPlan& rp : plan.ranks)
    for (int c = 0; c < kNumMemoryCategories; ++c)
      alike = alike && rp.memory.at(c) == plan.ranks[rp.pp_rank * per_stage].memory.at(c);
  const int step = alike ? per_stage : 1;
  for (int r = 0; r < (int)plan.ranks.size(); r += step) {
    std::string table = memory_table(plan, r, nullptr);
    const size_t korthikanti = table.find("  activations per layer: plan");
    if (r > 0 && korthikanti != std::string::npos) table.erase(korthikanti);  // said once
    t += table;
    if (alike && per_stage > 1 && per_stage == (int)plan.ranks.size())
      t += strprintf("  (all %d ranks hold the same)\n", per_stage);
    else if (alike && per_stage > 1)
      t += strprintf("  (ranks %d-%d hold the same)\n", r, r + per_stage - 1);
  }
  t += strprintf("\nactivations saved per layer, one microbatch (%s MiB)\n",
           format_mib(plan.activation_bytes_per_layer).c_str());
  for (const auto& a : plan.layer_activations)
    t += strprintf("  %-24s %14lld x %d B %12s MiB\n", a.name.c_str(), (long long)a.elements,
             a.bytes_per_element, format_mib(a.bytes()).c_str());
  t += "\n" + comm_table(plan, nullptr);
  for (size_t st = 1; st < plan.pipeline.stages.size(); ++st)
    t += comm_table_of(plan.pipeline.stages[st].comm, strprintf("each rank of stage %zu", st), nullptr);
  t += "\n" + flops_table(plan, 0, nullptr);
  if (!plan.pipeline.stages.empty())
    t += "  pp: the table counts every layer and the head; a stage runs its own layers' share\n";
  t += strprintf("  per step, all ranks: model %s, hardware %s\n",
           format_si(plan.flops.model_per_step).c_str(),
           format_si(plan.flops.hardware_per_step).c_str());
  return t;
}

}  // namespace paralab
