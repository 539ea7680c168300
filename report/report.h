// report/report.h: what the student reads. Every number printed twice where it can be:
// predicted (from the Plan) beside measured (a StepMetrics the trainer fills).
//
// Outputs (notes/design.md, "Outputs"):
//   run_header         one line: model, world, zero stage, precision, peak and its source
//   step_header/row    the per-step line, aligned columns
//   memory_table       category, predicted MiB, measured MiB, diff (MiB and %), the total
//                      (peak) and whether it is exact, what is held between steps (resident
//                      model states), then the Korthikanti line (korthikanti_line) and, with
//                      selective recompute, what a layer no longer keeps (recompute_line)
//                      (report_memory.cpp)
//   flops_table        per matmul: model FLOPs and hardware FLOPs, recompute as its own row
//                      (hardware only), the whole model's total, with pp each stage's row
//                      (one scope per row); measured vs predicted for the rank
//   flops_conventions_text  training FLOPs per token: paralab's, torchtitan's, Megatron's
//   comm_table         per group and operation: calls, payload, bus bytes, predicted beside
//                      measured (a step's CommStats); times are measured only (no time model
//                      yet): CommStats::table prints them, in the same row order
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
#include <vector>
#include "kernels/counters.h"  // PhaseSeconds
#include "measure/comm_stats.h"
#include "measure/peak.h"
#include "model/grad_underflow.h"  // GradUnderflow
#include "model/loss_scaler.h"  // LossScalerState
#include "parallel/fp8_log.h"  // Fp8StepLog
#include "plan/plan.h"
#include "report/rank_report.h"  // RankMetrics
#include "report/report_time.h"  // MeasuredTime, StepTime

namespace paralab {

struct MoeStepReport;  // report/moe_routing.h
struct PlanProjection;  // report/report_time.h

// The measured numbers of one step on one rank. Negative = not measured / column absent.
struct StepMetrics {
  int step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  bool skipped = false;   // loss or gradient norm not finite: no update (--max-skipped-steps)
  int skipped_steps = 0;  // skipped so far in the run, this step included
  // A loss-scaled run's (--fp16, --bf16 --loss-scale): the scale the step's gradients carried,
  // and the scaler's state after the step (model/loss_scaler.h); loss_scale < 0: none.
  double loss_scale = -1;
  LossScalerState loss_scaler;
  bool dynamic_loss_scale = false;
  // --log-fp16-underflow: rank 0's gradients as fp16 would hold them unscaled
  // (model/grad_underflow.h); elements 0: not measured.
  GradUnderflow grad_underflow;
  // --log-fp8-scaling: the step's FP8 scaling per linear kind and role (parallel/fp8_log.h)
  Fp8StepLog fp8;
  double step_seconds = 0;
  // Ledger peaks this step (Ledger::reset_peaks at step start), in ledger Category order.
  std::array<int64_t, kNumMemoryCategories> memory_bytes{};
  int64_t peak_memory_bytes = 0;  // Ledger::peak_total(): at most the sum of the above
  // The ledger's current bytes after the optimizer step (what is held between steps), in
  // Category order; resident_measured says the trainer filled them.
  std::array<int64_t, kNumMemoryCategories> resident_bytes{};
  bool resident_measured = false;
  // CPU offload: the ledger's host bytes of params, grads, master_params, optimizer_states
  // (allocated once: peak and current alike), beside MemoryPlan::host.
  std::array<int64_t, 4> host_memory_bytes{};
  double hardware_flops = -1;     // this rank's kernel FLOP counter over the step
  double hardware_flops_all = -1; // summed over every rank (pipeline stages differ)
  // time inside the kernels per phase (kernels::phase_seconds: the CPU's clock, CUDA events;
  // -1: nothing timed)
  kernels::PhaseSeconds kernel_seconds;
  // --timing-log-level 2: each op's calls and time (kernels::op_times), empty below it
  std::vector<std::pair<std::string, kernels::OpTime>> op_times;
  // what the allocator did this step (kernels::allocation_counts; fresh -1: not measured)
  kernels::AllocationCount allocations{-1, 0, 0, 0};
  double comm_bytes = -1;         // later issues: bytes this rank communicated this step
  double bubble = -1, bubble_predicted = -1;  // later issues: pipeline idle fraction
  // Derived by fill_rates.
  double tokens_per_second = 0;
  double mfu = NAN, hfu = NAN;  // fractions; NaN when the peak is unknown
  // The step line (the trainer fills them). Its loss column is Megatron's logged loss: the
  // mean of `loss` over the loss_steps steps since the previous line (this one included);
  // --metrics-jsonl keeps each step's own loss. log_interval labels the column.
  double loss_mean = NAN;
  int loss_steps = 0, log_interval = 1;
  int train_iters = 0;          // the run's last step: the line's "iteration N/total" (0: N)
  double elapsed_seconds = -1;  // since training started: steps, evaluations, printing
  double eta_seconds = -1;      // elapsed / step x (train_iters - step)
  double valid_loss = NAN;      // --eval-interval: the validation loss after this step
  // GEMM calls and FLOPs this step on this rank, per label (kernels/ops.h gemm_counts).
  struct GemmCalls {
    std::string label;
    long long calls = 0;
    double flops = 0;
  };
  std::vector<GemmCalls> gemm_calls;
  // MoE: per layer of the model the experts with rows this step, summed over microbatches
  // (model/moe.h MoeLayerStats::nonempty_experts): the per-expert GEMM count's measure.
  std::vector<long long> moe_nonempty;
  // MoE (report/moe_routing.h): the step's auxiliary losses (NaN: dense), dropped pairs (-1:
  // dropless), and the routers' per-layer report.
  double aux_loss = NAN, z_loss = NAN;
  double dropped_pairs = -1;
  const MoeStepReport* moe = nullptr;
  // The time model's projected step beside the measured one (report_time.h), when the run
  // has a hardware profile; --metrics-jsonl's "time".
  const StepTime* projected_time = nullptr;
  MeasuredTime measured_time;
  // Non-GEMM kernel launches and bytes this step (kernels::kernel_counts), beside
  // plan/kernel_traffic.h's prediction in --metrics-jsonl's "kernels"; -1: not measured.
  long long kernel_launches = -1, attention_launches = -1;
  double kernel_bytes = -1;
  // The MoE routing's device-to-host copies this step and their bytes (kernels::kernel_counts
  // routing_copies), beside plan/kernel_traffic.h's step_routing in the same "kernels".
  long long routing_copies = -1;
  double routing_copy_bytes = -1;
};

void fill_rates(StepMetrics& s, const Plan& plan, const Peak& peak);

std::string format_mib(double bytes);                   // "118.40"
std::string format_si(double value, int decimals = 2);  // "12.40k", "3.15P"
std::string format_duration(double seconds);           // "42.3s", "7:05", "1:02:09"

std::string run_header(const Plan& plan, const std::string& device, const Peak* peak);
// The GEMMs' leading dimensions (plan/gemm_calls.h unaligned_gemm_dims): "every leading
// dimension a multiple of 8 elements ..." or the ones that are not.
std::string gemm_alignment_text(const Plan& plan);
// The header's columns follow what `s` carries (comm, bubble), so print the header from
// the first step's metrics and every row from its own. Columns: iteration (N/total, as
// Megatron prints it), loss (mean since the last line), lr, gnorm, ms, tok/s, MFU, HFU,
// mem(MiB), elapsed, ETA[, comm(MiB)][, bubble][, loss scale (growth, hysteresis)].
std::string step_header(const StepMetrics& s);
std::string step_row(const StepMetrics& s);
// A loss scale as the step line prints it: "2^32" for a power of two, else %g.
std::string loss_scale_text(double scale);

// measured == nullptr: the predicted column only (`--plan`).
std::string memory_table(const Plan& plan, int rank, const StepMetrics* measured);
// "activations per layer: X MiB (norm statistics Z MiB included)" (X:
// Plan::activation_bytes_per_layer, the one per-layer figure everywhere), then "Korthikanti
// sbh(...) = Y MiB counts no norm statistics: plan - statistics = X - Z MiB", ": equal" when the run makes the paper's assumptions, else the difference in bytes
// and one line per assumption that differs (korthikanti_check_recompute,
// plan/recompute.h: Table 2's selective row under selective core_attn).
std::string korthikanti_line(const Plan& plan);
// With selective recompute: the bytes a layer keeps and saves; with flash attention, that
// core_attn saves only the log-sum-exp (little). "" otherwise.
std::string recompute_line(const Plan& plan);
std::string flops_table(const Plan& plan, int rank, const StepMetrics* measured);
std::string flops_conventions_text(const Plan& plan);  // --plan, after the FLOPs table

// measured: one step's record (e.g. CommStats::instance() before its reset), or nullptr.
// Rows: the plan's entries, then whatever else ran; a row whose calls or payload differ
// from the prediction says by how many bytes.
std::string comm_table(const Plan& plan, const CommStats* measured);

// One line; memory.total {measured, predicted, exact} (exact false: the prediction is an
// upper bound, report_impl.h total_is_exact); "resident" {category: {measured, predicted},
// total} when the trainer filled resident_bytes; with measured_comm, a "comm" list of predicted and measured per group and op;
// with ranks (rank 0 of a multi-rank run), "ranks": every rank's (rank_report.h), each
// beside rank_plans[r] when given (MoE with a capacity: the plan at the routing rank r's
// pipeline measured), else `plan`; "gemm_calls" (moe_plan.h) when gemm_calls is filled.
std::string step_json(const StepMetrics& s, const Plan& plan, int rank,
                      const CommStats* measured_comm = nullptr,
                      const std::vector<RankMetrics>* ranks = nullptr,
                      const std::vector<const Plan*>* rank_plans = nullptr);
std::string plan_text(const Plan& plan, const Peak* peak);
// Keys: model, parallel (sizes, sequence_parallel), batch,
// params {total, per_rank, per_rank_stored, zero_shard, vocab_size, padded_vocab},
// memory [per rank: rank, tp_rank, dp_rank, param_count(_stored), every category's peak,
//         total (peak), resident {params, grads, master_params, optimizer_states, total}
//         (held between steps)],
// activations {per layer and microbatch, tensor lists, korthikanti {formula,
// closed_form_bytes, layer_bytes (= per_layer_bytes, norm statistics included), plan_bytes
// (layer_bytes - norm_statistics_bytes: what the closed form counts), norm_statistics_bytes,
// applicable, differences}},
// flops {convention, model_per_step, hardware_per_step, ...},
// data_parallel {buckets, padded_total, shard_numel, state_numel, params/grads_transient_peak},
// comm [per step: {group, op, calls, payload_bytes, bus_bytes}, in the tables' order: group,
// then operation], peak (when given).
// projection (report/report_time.h): the time model's "time", "training" and "fit" keys.
std::string plan_json(const Plan& plan, const Peak* peak, bool pretty = true,
                      const PlanProjection* projection = nullptr);

}  // namespace paralab
