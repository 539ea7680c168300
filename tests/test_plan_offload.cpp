// tests/test_plan_offload.cpp: CPU offload in the plan (parallel/offload.h): which buckets go
// to the host, the host column of every rank (16 bytes per offloaded element, both
// precisions), what leaves the device, the pcie rows worked by hand, the node's host memory in
// the fit check, and the time model's copies and host AdamW on a profile whose answer is known.
#include <gtest/gtest.h>
#include <algorithm>
#include <vector>
#include "model/param_table.h"  // defines: parameter_count, param_units
#include "plan/fit.h"           // defines: check_host_fit, node_host_bytes
#include "tests/test_plan_helpers.h"

namespace paralab {
namespace {

using plan_test::batch;
using plan_test::find_comm;
using plan_test::gpt;
using plan_test::world;

ParallelConfig offloaded(int n, int zero, double fraction = 1, bool params = false) {
  ParallelConfig p = world(n, zero);
  p.offload.optimizer = true;
  p.offload.fraction = fraction;
  p.offload.params = params;
  return p;
}

PlanOptions buckets_of(int64_t size) {
  PlanOptions o;
  o.ddp_bucket_size = size;
  return o;
}

// One bucket, the whole optimizer on the host: H = S, and the host holds 16 bytes per element
// in fp32 (params 4 = the master, grads 4, Adam 8) and in bf16 (2 + 2 + master 4 + Adam 8),
// while the device keeps no master and no Adam state.
TEST(PlanOffload, HostHoldsSixteenBytesPerOffloadedElement) {
  const ModelConfig m = gpt(2, 64, 4, 32, 256);
  const int64_t psi = parameter_count(m);
  for (bool bf16 : {false, true})
    for (int z : {0, 1}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp32") + " zero " + std::to_string(z));
      const Plan p = make_plan(m, batch(2, 4, bf16), offloaded(2, z));
      const int64_t S = z == 0 ? psi : (psi + 1) / 2;
      const int e = bf16 ? 2 : 4;
      const HostMemoryPlan& h = p.ranks[0].memory.host;
      EXPECT_EQ(p.data_parallel.host_numel, S);
      EXPECT_EQ(h.params, S * e);
      EXPECT_EQ(h.grads, S * e);
      EXPECT_EQ(h.master_params, bf16 ? S * 4 : 0);
      EXPECT_EQ(h.optimizer_states, S * 8);
      EXPECT_EQ(h.total(), 16 * S);
      EXPECT_EQ(p.ranks[0].memory.master_params, 0);
      EXPECT_EQ(p.ranks[0].memory.optimizer_states, 0);
      // the gradients stay on the device at ZeRO 0-1 (the collectives work in place there)
      const Plan without = make_plan(m, batch(2, 4, bf16), world(2, z));
      EXPECT_EQ(p.ranks[0].memory.grads, without.ranks[0].memory.grads);
      EXPECT_EQ(p.ranks[0].memory.params, without.ranks[0].memory.params);
    }
}

// Buckets of one unit each at ZeRO-1 over 2 ranks: the state order is the reduction order
// (head, layers from the last, embedding); a fraction keeps the buckets that end within
// floor(f S) of it, whole.
TEST(PlanOffload, FractionRoundsDownToWholeBuckets) {
  const ModelConfig m = gpt(4, 64, 4, 32, 256);
  const std::vector<int64_t> units = param_units(m);  // begin of each unit, then Ψ
  std::vector<int64_t> slices;  // in reduction order: the last unit first
  for (int u = (int)units.size() - 2; u >= 0; --u) slices.push_back((units[u + 1] - units[u] + 1) / 2);
  int64_t S = 0;
  for (int64_t s : slices) S += s;
  for (double f : {0.0, 0.1, 0.3, 0.5, 0.77, 0.99, 1.0}) {
    SCOPED_TRACE("fraction " + std::to_string(f));
    const Plan p = make_plan(m, batch(2, 4), offloaded(2, 1, f), buckets_of(1));
    int64_t want = 0, end = 0, buckets = 0;
    for (int64_t s : slices) {
      end += s;
      if (end <= (int64_t)(f * (double)S)) want = end, ++buckets;
    }
    EXPECT_EQ(p.data_parallel.state_numel, S);
    EXPECT_EQ(p.data_parallel.host_numel, want);
    EXPECT_EQ((int64_t)p.data_parallel.copies.size(), buckets);
    EXPECT_EQ(p.ranks[0].memory.optimizer_states, (S - want) * 8);
    EXPECT_EQ(p.ranks[0].memory.host.optimizer_states, want * 8);
  }
}

// The pcie rows by hand. ZeRO-1, fp32, the whole optimizer on the host, nb buckets: one copy
// down and one up per bucket, 4 S bytes each way, the dp rows unchanged. ZeRO-2 with k
// microbatches: a copy down after every reduce-scatter, k nb calls and 4 k S bytes (= the
// reduce-scatter's payload / dp), one up per bucket. ZeRO-3 with the shard on the host: down
// as ZeRO-2, up one slice per gather: the all-gather's payload / dp.
TEST(PlanOffload, PcieBytesPerStepByHand) {
  const ModelConfig m = gpt(4, 64, 4, 32, 256);
  const int dp = 2, k = 3;
  for (int z = 1; z <= 3; ++z) {
    SCOPED_TRACE("zero " + std::to_string(z));
    const Plan p = make_plan(m, batch(1, dp * k), offloaded(dp, z, 1, z == 3), buckets_of(1));
    const Plan base = make_plan(m, batch(1, dp * k), world(dp, z), buckets_of(1));
    const DataParallelPlan& d = p.data_parallel;
    const int64_t S = d.state_numel, nb = (int64_t)d.layout.buckets.size();
    ASSERT_EQ(d.host_numel, S);
    const CommPlanEntry* down = find_comm(p, CommGroup::PCIE, CommOp::DEVICE_TO_HOST);
    const CommPlanEntry* up = find_comm(p, CommGroup::PCIE, CommOp::HOST_TO_DEVICE);
    ASSERT_NE(down, nullptr);
    ASSERT_NE(up, nullptr);
    const CommPlanEntry* rs = find_comm(p, CommGroup::DP, CommOp::REDUCE_SCATTER);
    const CommPlanEntry* ag = find_comm(p, CommGroup::DP, CommOp::ALL_GATHER);
    if (z == 1) {
      EXPECT_EQ(down->calls, nb);
      EXPECT_EQ(down->payload_bytes, 4 * S);
    } else {
      EXPECT_EQ(down->calls, nb * k);
      EXPECT_EQ(down->payload_bytes, 4 * S * k);
      EXPECT_EQ(down->payload_bytes * dp, rs->payload_bytes);
    }
    EXPECT_EQ(down->bus_bytes, (double)down->payload_bytes);  // one link, crossed once
    if (z < 3) {
      EXPECT_EQ(up->calls, nb);
      EXPECT_EQ(up->payload_bytes, 4 * S);
    } else {
      EXPECT_EQ(up->calls, ag->calls);
      EXPECT_EQ(up->payload_bytes * dp, ag->payload_bytes);
    }
    // offload adds the pcie rows and changes no other
    for (const CommPlanEntry& e : base.comm) {
      const CommPlanEntry* same = find_comm(p, e.group, e.op);
      ASSERT_NE(same, nullptr);
      EXPECT_EQ(same->payload_bytes, e.payload_bytes);
      EXPECT_EQ(same->calls, e.calls);
    }
    EXPECT_EQ(p.comm.size(), base.comm.size() + 2);
  }
}

// What leaves the device at ZeRO-2/3: the host buckets' gradient shard (a host landing buffer
// of the largest slice takes each reduce-scatter's), and with offload_params the parameter
// shard; the transient bucket and gather buffers stay.
TEST(PlanOffload, ZeroTwoThreeKeepNoShardOfTheHostBuckets) {
  const ModelConfig m = gpt(4, 64, 4, 32, 256);
  for (int z : {2, 3}) {
    SCOPED_TRACE("zero " + std::to_string(z));
    const Plan p = make_plan(m, batch(1, 4, true), offloaded(2, z, 1, z == 3), buckets_of(1));
    const Plan base = make_plan(m, batch(1, 4, true), world(2, z), buckets_of(1));
    const DataParallelPlan& d = p.data_parallel;
    const MemoryPlan& mem = p.ranks[0].memory;
    int64_t largest = 0;
    for (const Bucket& b : d.layout.buckets) largest = std::max(largest, b.slice);
    EXPECT_EQ(d.host_landing, largest);
    EXPECT_EQ(mem.resident_grads, 0);
    EXPECT_EQ(mem.grads, base.ranks[0].memory.grads - base.ranks[0].memory.resident_grads);
    EXPECT_EQ(mem.host.grads, (d.state_numel + largest) * 2);
    EXPECT_EQ(mem.resident_params, z == 3 ? 0 : base.ranks[0].memory.resident_params);
  }
}

// The node's host memory: the ranks of a node (consecutive) summed, the fullest node's.
TEST(PlanOffload, NodeHostMemoryInTheFitCheck) {
  const ModelConfig m = gpt(2, 64, 4, 32, 256);
  const Plan p = make_plan(m, batch(1, 8), offloaded(8, 3, 1, true));
  const int64_t rank = p.ranks[0].memory.host.total();
  ASSERT_GT(rank, 0);
  EXPECT_EQ(node_host_bytes(p, 4, 0), 4 * rank);
  EXPECT_EQ(node_host_bytes(p, 4, 1), 4 * rank);
  EXPECT_EQ(node_host_bytes(p, 3, 2), 2 * rank);  // the last node holds ranks 6 and 7
  FitCheck f;
  check_host_fit(f, p, 8, 8.0 * rank, "test");
  EXPECT_TRUE(f.host_checked() && f.host_fits());
  EXPECT_EQ(f.host_node_bytes, 8 * rank);
  check_host_fit(f, p, 8, 8.0 * rank - 1, "test");
  EXPECT_FALSE(f.host_fits());
  FitCheck none;  // nothing offloaded: nothing to check
  check_host_fit(none, make_plan(m, batch(1, 8), world(8, 3)), 8, 1, "test");
  EXPECT_FALSE(none.host_checked());
}

}  // namespace
}  // namespace paralab
