// plan/fit.h: does the plan fit the device? Each rank's predicted peak (MemoryPlan::total,
// the ledger's peak to the byte) against the memory it may use: the profile's capacity
// with --plan, the device's free memory (or the host's share) before a run allocates.
// What the ledger does not hold comes on top and is not checked: the CUDA context, cuBLAS
// and NCCL workspaces (about 1-2 GiB on a GPU), the process itself on the CPU.
//
// When it does not fit, what would: the plan made again with one knob changed, the others
// as given (each a full make_plan, so every constraint of the configuration holds):
//   the largest micro batch below the given one that fits (the global batch kept: it must
//   still divide into micro batch x dp), the smallest ZeRO stage that fits, the smallest
//   tensor-parallel size (a power of two dividing the heads, the query groups and the
//   world / (cp pp)) that fits. -1 / 0 where none does.
//
// CPU offload (parallel/offload.h) adds the host's side: each node's RAM against the host
// bytes of its ranks (MemoryPlan::host, summed over the node's ranks_per_node consecutive
// ranks: the ledger's host column of each, to the byte), the fullest node's.
//
// defines: FitCheck, check_fit, node_host_bytes, check_host_fit
#pragma once
#include <string>
#include "plan/plan.h"

namespace paralab {

struct FitCheck {
  double capacity_bytes = 0;  // per rank; 0: unknown, nothing checked
  std::string capacity_source;
  int64_t peak_bytes = 0;     // the largest rank's predicted peak
  int peak_rank = 0;
  bool checked() const { return capacity_bytes > 0; }
  bool fits() const { return !checked() || (double)peak_bytes <= capacity_bytes; }
  // Filled when suggest and it does not fit.
  int largest_micro_batch = 0;  // 0: none
  int smallest_zero_stage = -1; // -1: none
  int smallest_tp = 0;          // 0: none
  // CPU offload: the node's host memory (check_host_fit); 0 bytes: nothing offloaded.
  double host_capacity_bytes = 0;  // the node's RAM; 0: unknown, not checked
  std::string host_capacity_source;
  int64_t host_node_bytes = 0;     // the fullest node's ranks' host bytes, summed
  int host_node = 0, ranks_per_node = 1;
  bool host_checked() const { return host_capacity_bytes > 0 && host_node_bytes > 0; }
  bool host_fits() const {
    return !host_checked() || (double)host_node_bytes <= host_capacity_bytes;
  }
};

FitCheck check_fit(const Plan& plan, double capacity_bytes, const std::string& source,
                   bool suggest);
// The host bytes of node n: ranks [n r, (n + 1) r) of the plan (r = ranks_per_node, the last
// node may hold fewer), MemoryPlan::host summed.
int64_t node_host_bytes(const Plan& plan, int ranks_per_node, int node);
// Fills f's host fields: the fullest node's host bytes against capacity_bytes (the node's RAM).
void check_host_fit(FitCheck& f, const Plan& plan, int ranks_per_node, double capacity_bytes,
                    const std::string& source);

}  // namespace paralab
