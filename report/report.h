// report/report.h: what the student reads. Every number printed twice where it can be:
// predicted (from the Plan) beside measured (a StepMetrics the trainer fills).
//
// Outputs (DESIGN.md, "Output"):
//   run_header         one line: model, world, zero stage, precision, peak and its source
//   step_header/row    the per-step line, aligned columns
//   memory_table       category, predicted MiB, measured MiB, diff (MiB and %), then the
//                      Korthikanti line (korthikanti_line) and, with selective recompute,
//                      what a layer no longer keeps (recompute_line)
//   flops_table        per matmul: model FLOPs and hardware FLOPs, recompute as its own row
//                      (hardware only); measured vs predicted total
//   comm_table         per group and operation: calls, payload, bus bytes, predicted beside
//                      measured (a step's CommStats)
//   step_json          one object per step for --metrics-jsonl
//   plan_text / plan_json   `trainer --plan` and `trainer --plan --json`
// Formulas behind the rates:
//   tokens/s = global batch x S / step time
//   MFU = model FLOPs per step / (step time x peak x world)        (Korthikanti §6)
//   HFU = hardware FLOPs per step, recompute included / (step time x peak x world); from
//         the kernels' FLOP counters summed over the ranks when the trainer gathered them
//         (pipeline stages differ), else one rank's x world (dp ranks run the same
//         kernels), else the plan's prediction.
// Plain structs only: no model or kernel includes.
//
// defines: StepMetrics, fill_rates, format_mib, format_si, and the writers above
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include "measure/comm_stats.h"
#include "measure/peak.h"
#include "plan/plan.h"
#include "report/rank_report.h"  // RankMetrics

namespace paralab {

// The measured numbers of one step on one rank. Negative = not measured / column absent.
struct StepMetrics {
  int step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double step_seconds = 0;
  // Ledger peaks this step (Ledger::reset_peaks at step start), in ledger Category order.
  std::array<int64_t, kNumMemoryCategories> memory_bytes{};
  int64_t peak_memory_bytes = 0;  // Ledger::peak_total(): at most the sum of the above
  double hardware_flops = -1;     // this rank's kernel FLOP counter over the step
  double hardware_flops_all = -1; // summed over every rank (pipeline stages differ)
  double gemm_seconds = -1;       // wall time inside the GEMMs (CPU backend; -1: unknown)
  double comm_bytes = -1;         // later issues: bytes this rank communicated this step
  double bubble = -1, bubble_predicted = -1;  // later issues: pipeline idle fraction
  // Derived by fill_rates.
  double tokens_per_second = 0;
  double mfu = NAN, hfu = NAN;  // fractions; NaN when the peak is unknown
};

void fill_rates(StepMetrics& s, const Plan& plan, const Peak& peak);

std::string format_mib(double bytes);                   // "118.40"
std::string format_si(double value, int decimals = 2);  // "12.40k", "3.15P"

std::string run_header(const Plan& plan, const std::string& device, const Peak* peak);
// The header's columns follow what `s` carries (comm, bubble), so print the header from
// the first step's metrics and every row from its own.
std::string step_header(const StepMetrics& s);
std::string step_row(const StepMetrics& s);

// measured == nullptr: the predicted column only (`--plan`).
std::string memory_table(const Plan& plan, int rank, const StepMetrics* measured);
// "activations per layer: plan X MiB, Korthikanti sbh(...) Y MiB (+ norm statistics Z MiB)",
// then ": equal" when the run makes the paper's assumptions, else the difference in bytes
// and one line per assumption that differs (korthikanti_check_recompute,
// plan_recompute.h: Table 2's selective row under selective core_attn).
std::string korthikanti_line(const Plan& plan);
// With selective recompute: the bytes a layer keeps and saves; with flash attention, that
// core_attn saves only the log-sum-exp (little). "" otherwise.
std::string recompute_line(const Plan& plan);
std::string flops_table(const Plan& plan, int rank, const StepMetrics* measured);

// measured: one step's record (e.g. CommStats::instance() before its reset), or nullptr.
// Rows: the plan's entries, then whatever else ran; a row whose calls or payload differ
// from the prediction says by how many bytes.
std::string comm_table(const Plan& plan, const CommStats* measured);

// One line; with measured_comm, a "comm" list of predicted and measured per group and op;
// with ranks (rank 0 of a multi-rank run), "ranks": every rank's (rank_report.h).
std::string step_json(const StepMetrics& s, const Plan& plan, int rank,
                      const CommStats* measured_comm = nullptr,
                      const std::vector<RankMetrics>* ranks = nullptr);
std::string plan_text(const Plan& plan, const Peak* peak);
// Keys: model, parallel (sizes, sequence_parallel), batch,
// params {total, per_rank, per_rank_stored, zero_shard, vocab_size, padded_vocab},
// memory [per rank: rank, tp_rank, dp_rank, param_count(_stored), every category, total],
// activations {per layer and microbatch, tensor lists, korthikanti {formula,
// closed_form_bytes, plan_bytes, norm_statistics_bytes, applicable, differences}},
// flops {convention, model_per_step, hardware_per_step, ...},
// data_parallel {buckets, padded_total, shard_numel, state_numel, params/grads_transient_peak},
// comm [per step: {group, op, calls, payload_bytes, bus_bytes}], peak (when given).
std::string plan_json(const Plan& plan, const Peak* peak, bool pretty = true);

}  // namespace paralab
