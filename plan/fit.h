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
// defines: FitCheck, check_fit
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
};

FitCheck check_fit(const Plan& plan, double capacity_bytes, const std::string& source,
                   bool suggest);

}  // namespace paralab
