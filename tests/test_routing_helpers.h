// tests/test_routing_helpers.h: an MoE step's routing as the model recorded it, for the tests
// that hold a plan made at the measured routing against the run (test_plan_moe.cpp,
// test_kernel_traffic.cpp).
//
// defines: routing_test::measured_routing
#pragma once
#include "model/transformer.h"  // Transformer, MoeLayerState
#include "plan/moe_memory.h"    // MoeRouting

namespace paralab {
namespace routing_test {

// The step's routing as the run recorded it (model/moe.h MoeLayerStats).
inline MoeRouting measured_routing(const Transformer& model) {
  MoeRouting r;
  for (const MoeLayerState& s : model.moe_layers()) {
    r.rows.push_back(s.stats.permuted_rows);
    long long kept = 0;
    for (long long x : s.stats.kept_per_expert) kept += x;
    r.kept.push_back(s.stats.permuted_rows.empty() ? -1 : kept);
  }
  return r;
}

}  // namespace routing_test
}  // namespace paralab
