// plan/time_model.h: the plan as a performance model. From the plan (what each rank
// computes and communicates, exactly) and a hardware profile (measure/hardware.h: what
// the machine does per second), the projected time of one training step, and from it
// tokens/s, MFU, HFU and the time to train N tokens. A projection, not a measurement: its
// assumptions are listed with it, and the trainer prints it beside the measured step.
//
// Costs, per rank and microbatch, summed over the layers the rank runs:
//   GEMM        each call of the plan (plan/gemm_calls.h's count, plan/flops.h's FLOPs, the
//               shapes of notes/model.md) costs max(F / (peak x eff(F)), bytes / HBM) +
//               launch, eff(F) = gemm_efficiency x F / (F + gemm_half_gflop): a small GEMM
//               (one expert's rows, a small microbatch) reaches less of the peak. A grouped
//               GEMM is one launch and is costed as one GEMM of its summed FLOPs (the
//               assumption: the grouped kernel fills the device as one large GEMM would).
//               Backward: dX and dW, each the forward's FLOPs.
//   attention   flash kernels: their FLOPs (plan/flops.h, causal pairs) / (peak x
//               attention_efficiency) + launch; naive attention's products are GEMMs.
//   memory      the non-GEMM kernels (plan/kernel_traffic.h: launches and bytes as the
//               kernels count them): bytes / (HBM x memory_efficiency) + launch each.
//   recompute   what backward runs again (full: one more forward of the layer; selective:
//               the attention core's forward or fc1), on the backward's side.
// Communication: per (group, operation) of the plan, calls x α + bus bytes / bandwidth
// (nccl-tests: bus bandwidth is comparable to the link speed whatever the group size).
// The link is the node's (intra_node_gbs, collective_latency_us) when the group's ranks
// share a node under the rank order (tp fastest, then cp, dp, pp: a group of n ranks at
// stride s spans s n consecutive ranks, inside a node when s n <= gpus_per_node), else the
// network's (inter_node_gbs, inter_node_latency_us). What is exposed, per mechanism as the
// trainer implements it:
//   tp, ep, etp, cp all_gather / a2a, embedding, world   blocking calls: all exposed
//   cp p2p ring   each hop's K/V transfer runs during a block's attention, (cp - 1)/cp of
//                 the rank's attention compute A in all: exposed max(one hop, ring - A (cp -
//                 1)/cp), summed over the step (not hop by hop)
//   dp reductions  after the last backward; --overlap-grad-reduce: during it, exposed
//                 max(one bucket, reductions - last microbatch's backward compute)
//   dp gathers    ZeRO-1/2 after the optimizer; --overlap-param-gather: during the next
//                 forward, exposed max(one bucket, gathers - first forward's compute)
//   ZeRO-3        gathers and reductions each microbatch; with prefetch (>= 1 layer) the
//                 gathers overlap compute, exposed max(one gather, gathers - compute)
//   pp            each activation and gradient message in the schedule's simulation
//                 (costs.comm, the message's send/recv time): its share of the bubble
//   pcie (CPU offload, parallel/offload.h)  a copy costs pcie_latency_us + bytes / pcie_gbs;
//                 the gradients down run beside the dp reductions of the buckets after them,
//                 exposed max(one copy, copies - (reductions - one bucket's)); the parameters
//                 up beside ZeRO-1/2's all-gathers the same way, all exposed at ZeRO 0 and 3;
//                 with offload_params the copies up before each gather are on the compute
//                 stream: all exposed
// The host AdamW (CPU offload): the rank's offloaded elements / (host_adam_params_per_s x
// host_cores / gpus_per_node), after the gradients are down and before the parameters go up:
// all of it on the step (DeepSpeed's one-step delayed update, which hides it behind the next
// step's compute, changes the math and is not built).
// Pipeline: parallel/pipeline_schedule's simulation with each model stage's projected F,
// B and W (zb-h1 splits the weight-gradient GEMMs into W); the step is its makespan plus
// the exposed dp communication and the optimizer. Without pipelining, F + B per microbatch.
// Rates: tokens/s = tokens per step / step; MFU = model FLOPs / (step x peak x world),
// HFU = hardware FLOPs (recompute included) / (step x peak x world) (plan/flops.h names
// both conventions).
// Training time for T tokens (--plan-tokens): steps x step time, beside Narayanan et al.
// 2021 eq. 4, 8 T P / (n X) with full recompute and 6 T P / (n X) without (P parameters,
// n GPUs, X the achieved FLOP/s per GPU: the projection's hardware FLOPs per second).
//
// defines: GroupTime, StageTime, StepTime, TrainingTime, project_step_time,
//          project_training_time, group_fits_node
#pragma once
#include <string>
#include <vector>
#include "measure/hardware.h"
#include "plan/plan.h"

namespace paralab {

struct GroupTime {  // one (group, operation) of one rank's step
  CommGroup group = CommGroup::DP;
  CommOp op = CommOp::ALL_REDUCE;
  int64_t calls = 0;
  double bus_bytes = 0;
  bool intra_node = true;
  double bandwidth_gbs = 0, latency_us = 0;  // the link it runs on
  double seconds = 0;   // calls x latency + bus bytes / bandwidth
  double exposed = 0;   // what no compute hides
  std::string overlap;  // how it overlaps ("blocking", "--overlap-grad-reduce", ...)
};

struct StageTime {  // one model stage (chunk), per microbatch, seconds
  double F = 0, B = 0, W = 0;
};

struct StepTime {
  std::string hardware;          // profile name and file
  double peak_tflops = 0;        // the profile's, for the run's precision
  std::string peak_figure;       // which of its figures (HardwareProfile::peak_figure)
  // One rank's step (rank 0's stage with pipelining), seconds; compute = gemm + attention +
  // memory + recompute, each with its launches' overhead (launch_seconds says how much).
  double gemm = 0, attention = 0, memory = 0, recompute = 0, optimizer = 0;
  double compute = 0, launch_seconds = 0;
  // CPU offload: the host AdamW's seconds (on the step), its elements, the pcie rows' exposed
  double host_optimizer = 0, exposed_pcie = 0;
  int64_t host_elements = 0;
  int64_t gemm_calls = 0, kernel_launches = 0;
  std::vector<GroupTime> comm;   // rank 0's
  double exposed_comm = 0;       // summed over comm's exposed
  double bubble = 0;             // pipeline idle on rank 0's stage, seconds
  double step = 0;               // the step (the slowest stage's view: makespan + rest)
  std::vector<StageTime> stages; // per model stage, for the simulation
  double tokens_per_second = 0, mfu = 0, hfu = 0;
  std::vector<std::string> assumptions;  // printed with the projection
  // Each profile figure the projection rests on made 2x worse (an efficiency or bandwidth
  // halved, a latency or the GEMM half-size doubled), the others kept: the step's relative
  // change, largest first. The first is the assumption that moves the projection most.
  struct Sensitivity {
    std::string key;
    bool assumed = false;  // the profile lists it as an assumption
    double change = 0;     // step(worse) / step - 1
  };
  std::vector<Sensitivity> sensitivity;
};

// The plan's step on `hw`. Throws std::invalid_argument when the profile has no peak for
// the run's precision. sensitivity: also fill StepTime::sensitivity (a dozen more
// projections).
StepTime project_step_time(const Plan& plan, const HardwareProfile& hw,
                           bool sensitivity = true);

struct TrainingTime {
  double tokens = 0, steps = 0;
  double seconds = 0;             // steps x projected step
  double narayanan_seconds = 0;   // eq. 4 with X = projected hardware FLOP/s per GPU
  int narayanan_factor = 6;       // 8 with full recompute, else 6
  double narayanan_params = 0;    // P: the parameters (an MoE's active ones)
};
TrainingTime project_training_time(const Plan& plan, const StepTime& t, double tokens);

// Whether a group of `group_size` ranks at rank stride `stride` lies inside one node.
bool group_fits_node(int stride, int group_size, int gpus_per_node);

}  // namespace paralab
