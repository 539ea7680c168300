// report/report_kernels.h: the step's non-GEMM kernels, measured beside predicted, for the
// step JSON (--metrics-jsonl): kernels::kernel_counts() since the step's reset against
// plan/kernel_traffic.h's prediction for the rank.
//
//   "kernels": {"launches": {"measured": m, "predicted": p},
//               "bytes": {"measured": m, "predicted": p},
//               "attention_launches": {"measured": m, "predicted": p},
//               "routing_host_copies": {"measured": m, "predicted": p},
//               "routing_host_bytes": {"measured": m, "predicted": p},
//               "exact": true}
// routing_host_*: the MoE routing's device-to-host copies (kernels/counters.h
// count_routing_copy; 0 for a dense model).
// exact: whether the prediction is exact (false where an MoE layer's rows are the
// uniform-routing expectation: plan/kernel_traffic.h).
//
// defines: kernel_traffic_json
#pragma once
#include "kernels/ops.h"         // KernelCount
#include "plan/kernel_traffic.h"  // KernelTrafficPlan
#include "checkpoint/json.h"         // JsonWriter

namespace paralab {

// Writes the "kernels" key and its object (as a field of the enclosing object).
void kernel_traffic_json(JsonWriter& j, const KernelTrafficPlan& predicted,
                         const kernels::KernelCount& measured);

}  // namespace paralab
