// report/report.cpp: see report.h. The text writers: the run header, the per-step line,
// the FLOPs and communication tables, and `--plan`'s text (the memory table:
// report_memory.cpp); the JSON writers
// (step_json, plan_json) are in report_json.cpp.
#include "report/report.h"
#include "report/text.h"  // strprintf
#include <algorithm>
#include <cstdio>
#include <utility>
#include "kernels/ops/fp8.h"     // gemm_fp8_path
#include "plan/gemm_calls.h"     // unaligned_gemm_dims
#include "plan/moe_params.h"     // flops_conventions
#include "report/report_impl.h"  // CommRow, comm_rows
#include "report/report_cp.h"    // cp_plan_text
#include "report/moe_plan.h"   // moe_plan_text
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

std::string format_duration(double t) {
  if (!(t >= 0) || !std::isfinite(t)) return "n/a";
  if (t < 59.95) return strprintf("%.1fs", t);
  const long s = std::lround(t);
  if (s < 3600) return strprintf("%ld:%02ld", s / 60, s % 60);
  return strprintf("%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
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

// FP8's part of the header: the format and recipe, and on a device the path its GEMMs take
// (kernels/ops/fp8.h gemm_fp8_path): the CPU twin dequantises and multiplies in fp32; on CUDA
// per-tensor scales go to cuBLASLt's FP8 GEMM where m, n and k are multiples of 16, block
// scales (which cuBLASLt has not on Hopper) to the emulated path.
static std::string fp8_header(const Fp8Config& f, const std::string& device) {
  const std::string s =
      strprintf(" + FP8 %s %s", f.hybrid ? "hybrid" : "e4m3", fp8_recipe_name(f.recipe));
  if (device == "cpu") return s + " (GEMMs: dequantise to fp32, fp32 GEMM)";
  if (device.empty()) return s;
  using kernels::Fp8Blocks;
  if (f.recipe == Fp8Recipe::Blockwise)
    return s + " (GEMMs: " +
           kernels::gemm_fp8_path(Fp8Blocks::Tiles, Fp8Blocks::Blocks, 16, 16, 16) + ")";
  return s + " (GEMMs: " +
         kernels::gemm_fp8_path(Fp8Blocks::Tensor, Fp8Blocks::Tensor, 16, 16, 16) +
         "; emulated where m, n or k is not a multiple of 16)";
}

std::string run_header(const Plan& plan, const std::string& device, const Peak* peak) {
  const ModelConfig& m = plan.model;
  const ParallelConfig& p = plan.parallel;
  std::string s = strprintf("paralab | %s %dL h%d a%d", m.is_gpt() ? "gpt" : "llama", m.num_layers,
                      m.hidden_size, m.num_attention_heads);
  if (m.groups() != m.num_attention_heads) s += strprintf(" g%d", m.groups());
  s += strprintf(" s%d V%d | world %d = tp%d%s x cp%d x pp%d x dp%d | zero %d | %s%s%s%s | "
                 "%s attention",
           m.seq_length, m.vocab_size, p.world_size, p.tensor_parallel,
           plan.sequence_parallel ? "+sp" : "", p.context_parallel, p.pipeline_parallel,
           plan.dp, p.zero_stage, device.c_str(), device.empty() ? "" : " ",
           precision_name(plan.train.precision()),
           m.fp8.enabled ? fp8_header(m.fp8, device).c_str() : "",
           m.attention == AttentionImpl::NAIVE ? "naive" : "flash");
  if (p.experts_apart() && m.moe.enabled())  // the expert grid (parallel/topology.h)
    s += strprintf(" | experts: etp%d x ep%d x edp%d x pp%d, %s dispatcher",
                   p.expert_tensor_parallel, p.expert_parallel, p.expert_data_parallel(),
                   p.pipeline_parallel, dispatcher_name(p.token_dispatcher));
  if (peak) s += " | peak " + describe_peak(*peak);
  return s;
}

// ---- per-step line -----------------------------------------------------------------------
// The iteration column: "N/total" right-aligned, wide enough for the total twice.
static int iteration_width(const StepMetrics& s) {
  const int digits = (int)std::to_string(std::max(s.train_iters, s.step)).size();
  return std::max(9, 2 * digits + 1);
}

std::string step_header(const StepMetrics& s) {
  std::string h = strprintf("%*s %9s %9s %8s %9s %8s %7s %7s %9s %8s %8s", iteration_width(s),
                            "iteration",
                            s.log_interval > 1 ? "mean loss" : "loss", "lr", "gnorm", "ms",
                            "tok/s", "MFU", "HFU", "mem(MiB)", "elapsed", "ETA");
  if (std::isfinite(s.aux_loss)) h += strprintf(" %10s %10s", "aux loss", "z loss");
  if (s.dropped_pairs >= 0) h += strprintf(" %8s", "dropped");
  if (s.comm_bytes >= 0) h += strprintf(" %10s", "comm(MiB)");
  if (s.bubble >= 0) h += strprintf("  %s", "bubble");
  if (s.loss_scale >= 0) h += s.dynamic_loss_scale ? "  loss scale (growth, hysteresis)"
                                                   : "  loss scale";
  return h;
}

std::string loss_scale_text(double scale) {
  int e = 0;
  if (scale > 0 && std::frexp(scale, &e) == 0.5) return strprintf("2^%d", e - 1);
  return strprintf("%g", scale);
}

std::string step_row(const StepMetrics& s) {
  // the logged loss: the mean since the previous line (the step's own without one)
  const double loss = s.loss_steps > 0 ? s.loss_mean : s.loss;
  const std::string iteration = s.train_iters > 0 ? strprintf("%d/%d", s.step, s.train_iters)
                                                  : std::to_string(s.step);
  std::string r = strprintf("%*s %9.4f %9.2e %8.3f %9.1f %8s %7s %7s %9s %8s %8s",
                            iteration_width(s), iteration.c_str(), loss,
                            s.lr, s.grad_norm, s.step_seconds * 1e3,
                            format_si(s.tokens_per_second, 1).c_str(), percent(s.mfu).c_str(),
                            percent(s.hfu).c_str(), format_mib(s.peak_memory_bytes).c_str(),
                            format_duration(s.elapsed_seconds).c_str(),
                            format_duration(s.eta_seconds).c_str());
  // MoE: the step's own auxiliary losses (not averaged over the log interval)
  if (std::isfinite(s.aux_loss)) r += strprintf(" %10.4e %10.4e", s.aux_loss, s.z_loss);
  if (s.dropped_pairs >= 0) r += strprintf(" %8.0f", s.dropped_pairs);
  if (s.comm_bytes >= 0) r += strprintf(" %10s", format_mib(s.comm_bytes).c_str());
  if (s.bubble >= 0) {
    r += "  " + percent(s.bubble);
    if (s.bubble_predicted >= 0) r += " (pred " + percent(s.bubble_predicted) + ")";
  }
  // the scale the step used; a dynamic scaler's trackers after its update
  if (s.loss_scale >= 0) r += "  " + loss_scale_text(s.loss_scale);
  if (s.loss_scale >= 0 && s.dynamic_loss_scale)
    r += strprintf(" (%d, %d)", s.loss_scaler.growth_tracker, s.loss_scaler.hysteresis_tracker);
  if (s.skipped && s.loss_scale >= 0 && std::isfinite(s.loss))
    r += strprintf("  skipped: gradient overflow (inf or NaN), no update (%d so far)%s",
                   s.skipped_steps, s.loss_scaler.scale != s.loss_scale ? strprintf(
                       "; loss scale now %s", loss_scale_text(s.loss_scaler.scale).c_str()).c_str()
                                                                         : "");
  else if (s.skipped)
    r += strprintf("  skipped: loss or gradient norm not finite, no update (%d so far)",
                   s.skipped_steps);
  return r;
}

// ---- FLOPs per token, three conventions (plan/moe_params.h: the formulas and sources) -------
// MFU depends on which FLOPs count as the model's: the same run reads 1.8x apart at 49K tokens
// between a full S x S attention count (paralab's default, torchtitan) and a causal one
// (Megatron), so the plan prints all three per token and per step.
std::string flops_conventions_text(const Plan& plan) {
  const FlopsConventions f = flops_conventions(plan);
  const double T = (double)plan.tokens_per_step;
  const bool moe = plan.model.moe.enabled();
  std::string t = "\ntraining FLOPs per token (forward + backward), per step x tokens\n";
  t += strprintf("  %-72s %12s %12s\n", "", "per token", "per step");
  t += strprintf("  %-72s %12s %12s\n", ("paralab: " + f.paralab_note).c_str(),
                 format_si(f.paralab).c_str(), format_si(f.paralab * T).c_str());
  t += strprintf("  %-72s %12s %12s\n",
                 moe ? "torchtitan: 6 x active (lookups out) + 12 L a d s (full S x S)"
                     : "torchtitan: 6 x params (lookups out) + 12 L a d s (full S x S)",
                 format_si(f.torchtitan).c_str(), format_si(f.torchtitan * T).c_str());
  t += strprintf("  %-72s %12s %12s\n",
                 moe ? "Megatron: 6 x (attn, k experts, shared, Vp h) + 6 L a d s (causal)"
                     : "Megatron: 6 x (attn, mlp, Vp h) + 6 L a d s (causal)",
                 format_si(f.megatron).c_str(), format_si(f.megatron * T).c_str());
  t += strprintf("  (attention core: torchtitan %s, Megatron %s per token; Megatron counts no "
                 "%snorm)\n", format_si(f.torchtitan_attention).c_str(),
                 format_si(f.megatron_attention).c_str(), moe ? "router, gate or " : "");
  return t;
}

// ---- FLOPs breakdown -----------------------------------------------------------------------
// Every row is one scope in both columns, named in its label: the matmul and recompute rows
// and the "whole model" total are the whole layer stack and head on one tp rank (its 1/t of
// every matmul), k microbatches; with pipelining each stage's row is what each of its ranks
// runs (PipelineStagePlan::model_flops, hardware_flops), and the stages sum to the total.
std::string flops_table(const Plan& plan, int rank, const StepMetrics* measured) {
  const FlopsPlan& f = plan.flops;
  const double k = (double)f.microbatches_per_rank;
  const bool piped = !plan.pipeline.stages.empty();
  std::string t = strprintf("FLOPs per step, rank %d: %lld microbatch(es); model counts %s attention, "
                      "hardware counts %s attention as run\n",
                      rank, (long long)f.microbatches_per_rank, attention_flops_name(f.convention),
                      f.attention == AttentionImpl::NAIVE ? "naive (full S x S)"
                                                          : "flash (causal S(S+1)/2)");
  t += strprintf("  rows: the whole model (%d layers and the head)%s, %lld microbatch(es)%s\n",
                 plan.model.num_layers,
                 f.tensor_parallel > 1
                     ? strprintf(" on one tp rank: its 1/%d of every matmul (head over V_l = "
                                 "%lld vocabulary rows, padding included)",
                                 f.tensor_parallel,
                                 (long long)(plan.padded_vocab / f.tensor_parallel)).c_str()
                     : "",
                 (long long)f.microbatches_per_rank,
                 piped ? "; each pipeline stage runs its own layers' share (rows below)" : "");
  if (plan.cp > 1)
    t += strprintf("  context parallel rank %d of %d: S = s/cp = %d tokens of each sequence; "
                   "attention scores the pairs of its passes (context parallelism below)\n",
                   plan.model.context_parallel.rank, plan.cp, plan.model.seq_length / plan.cp);
  t += strprintf("  %-11s %-9s %-20s %12s %12s\n", "matmul", "reduces", "forward, 1 microbatch",
           "model", "hardware");
  double model_whole = 0, hardware_whole = 0;
  for (const auto& mm : f.matmuls) {
    t += strprintf("  %-11s %-9s %-20s %12s %12s\n", mm.name.c_str(), mm.reduces_over.c_str(),
             (mm.formula + (mm.per_layer ? " x L" : "")).c_str(),
             format_si(mm.model * k).c_str(), format_si(mm.hardware * k).c_str());
    model_whole += mm.model * k;
    hardware_whole += mm.hardware * k;
  }
  // Recompute: hardware only (MFU never counts it); its per-layer formula after the numbers.
  std::string rc = strprintf("  %-11s %-9s %-20s %12s %12s", "recompute", "", "",
                             format_si(0).c_str(), format_si(f.recompute_per_microbatch * k).c_str());
  if (!f.recompute_formula.empty())
    rc += strprintf("   %s x %lld layers", f.recompute_formula.c_str(), (long long)f.recomputed_layers);
  t += rc + "\n";
  hardware_whole += f.recompute_per_microbatch * k;
  t += strprintf("  %-42s %12s %12s\n",
                 piped        ? "total, whole model (the stages' sum)"
                 : plan.cp > 1 ? "total, this rank's tokens (bwd = 2 fwd)"
                               : "total, rank = whole model (bwd = 2 fwd)",
                 format_si(model_whole).c_str(), format_si(hardware_whole).c_str());
  for (const PipelineStagePlan& st : plan.pipeline.stages) {
    int layers = 0;
    for (int n : st.chunk_layers) layers += n;
    const std::string who = strprintf("stage %d: %d layer%s%s%s", st.pp_rank, layers,
                                      layers == 1 ? "" : "s", st.embedding ? " + embedding" : "",
                                      st.head ? " + head" : "");
    t += strprintf("  %-42s %12s %12s%s\n", who.c_str(), format_si(st.model_flops).c_str(),
                   format_si(st.hardware_flops).c_str(),
                   plan.ranks.at(rank).pp_rank == st.pp_rank
                       ? strprintf("   <- rank %d, each rank of its stage", rank).c_str()
                       : "");
  }
  if (measured && measured->hardware_flops >= 0) {
    const double pred = piped ? plan.pipeline.stages.at(plan.ranks.at(rank).pp_rank).hardware_flops
                              : f.hardware_per_rank_step;
    const double meas = measured->hardware_flops;
    t += strprintf("  hardware, rank %d: measured %s vs predicted %s (%+.2f%%)\n", rank,
                   format_si(meas).c_str(), format_si(pred).c_str(),
                   pred > 0 ? 100 * (meas - pred) / pred : 0.0);
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
  // One order for every communication table: CommStats's (group, then operation, in enum
  // order), the order of the measured time table (CommStats::table) too.
  std::stable_sort(rows.begin(), rows.end(), [](const CommRow& a, const CommRow& b) {
    return std::make_pair((int)a.g, (int)a.op) < std::make_pair((int)b.g, (int)b.op);
  });
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
    t = "communication per step, per rank       calls          payload MiB            bus MiB"
        "   (time: the next table)\n";
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
std::string gemm_alignment_text(const Plan& plan) {
  const std::vector<std::string> dims = unaligned_gemm_dims(plan);
  if (dims.empty()) return "every leading dimension a multiple of 8 elements (cuBLAS's fast kernels)";
  std::string t = "not a multiple of 8 elements, so cuBLAS takes slower kernels on a GPU: ";
  for (size_t i = 0; i < dims.size(); ++i) t += (i ? ", " : "") + dims[i];
  return t;
}

std::string plan_text(const Plan& plan, const Peak* peak) {
  const ModelConfig& m = plan.model;
  std::string t = run_header(plan, "", peak) + "\n\n";
  t += strprintf("params   %s total (%lld); per rank %s, stored per rank %s\n",
           format_si((double)plan.params_total).c_str(), (long long)plan.params_total,
           format_si((double)plan.ranks[0].params).c_str(),
           format_si((double)plan.ranks[0].params_stored).c_str());
  if (plan.tp > 1)
    t += strprintf("tp       %d ranks split heads, ffn and vocabulary%s\n", plan.tp,
             plan.sequence_parallel ? "; sequence parallel: N/t tokens between blocks" : "");
  if (!vocab_padding_note(plan).empty()) t += "vocab    " + vocab_padding_note(plan).substr(6) + "\n";
  t += "gemms    " + gemm_alignment_text(plan) + "\n";
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
    const size_t korthikanti = table.find("  activations per layer: ");
    if (r > 0 && korthikanti != std::string::npos) table.erase(korthikanti);  // said once
    t += table;
    if (alike && per_stage > 1 && per_stage == (int)plan.ranks.size())
      t += strprintf("  (all %d ranks hold the same)\n", per_stage);
    else if (alike && per_stage > 1)
      t += strprintf("  (ranks %d-%d hold the same)\n", r, r + per_stage - 1);
  }
  // one list per layer kind the model has: dense, and MoE (at the plan's M rows)
  const int moe_layers = moe_layer_count(plan.model);
  auto tensor_list = [&](const char* kind, int64_t bytes, const std::vector<ActivationTensor>& ts) {
    t += strprintf("\nactivations saved per %slayer, one microbatch (%s MiB)\n", kind,
                   format_mib(bytes).c_str());
    for (const auto& a : ts)
      t += strprintf("  %-24s %14lld x %d B %12s MiB\n", a.name.c_str(), (long long)a.elements,
                     a.bytes_per_element, format_mib(a.bytes()).c_str());
  };
  if (moe_layers < plan.model.num_layers)
    tensor_list(moe_layers > 0 ? "dense " : "", plan.activation_bytes_per_layer,
                plan.layer_activations);
  if (moe_layers > 0) {
    tensor_list("MoE ", plan.moe_activation_bytes_per_layer, plan.moe_layer_activations);
    t += strprintf("  (M = %lld permuted rows: %s)\n", (long long)plan.moe_rows,
                   plan.moe_rows_exact ? "exact" : "the uniform-routing expectation");
  }
  t += "\n" + comm_table(plan, nullptr);
  for (size_t st = 1; st < plan.pipeline.stages.size(); ++st)
    t += comm_table_of(plan.pipeline.stages[st].comm, strprintf("each rank of stage %zu", st), nullptr);
  t += "\n" + flops_table(plan, 0, nullptr);
  t += strprintf("  per step, all ranks (every microbatch, every tp rank): model %s (the whole "
                 "model, true vocabulary), hardware %s\n",
           format_si(plan.flops.model_per_step).c_str(),
           format_si(plan.flops.hardware_per_step).c_str());
  t += flops_conventions_text(plan);
  t += moe_plan_text(plan);  // "" for a dense model (report/moe_plan.h)
  t += cp_plan_text(plan, peak);  // "" without context parallelism (report/report_cp.h)
  return t;
}

}  // namespace paralab
