// model/grad_underflow.h: what fp16 would do to this step's gradients without a loss scale
// (--log-fp16-underflow): the lesson's measurement of why fp16 training scales its loss.
//
// fp16 keeps 5 exponent bits: a value below 2^-14 (6.1e-5) is subnormal (fewer significant
// bits, down to one), and one at or below 2^-25 rounds to zero (kernels/float16.h). The
// gradients of a language model are mostly tiny (Micikevicius et al. 2018, "Mixed Precision
// Training", figure 3: most of an SSD model's activation gradients lie below 2^-24), so
// without a scale many flush. Counted on the reduced gradients this rank owns, as stored
// (the step's gradients carry the loss scale S: fp16, bf16 or fp32 alike), each g taken as
// g / S, the true gradient, rounded to fp16:
//   zero       g != 0 and fp16(g / S) == 0: lost entirely without the scale
//   subnormal  fp16(g / S) is subnormal: kept with fewer than 11 significant bits
// and, beside them, the nonzero gradients as the run stored them (at scale S) that lie below
// fp16's smallest normal (subnormal in an fp16 run): what the scale saved is the difference. Exact zeros (an embedding row no token of the batch used)
// are neither: the fractions are of the nonzero values. Run on any precision: an fp32 run
// measures what fp16 would lose.
//
// Rank 0's share is the reported one (all of its tensors' elements under DDP; its slice of
// each bucket under ZeRO, of the tp/pp shard it holds): no collective, so the step's
// communication stays the plan's. A device's gradients are copied to the host to be counted
// (a diagnostic's cost, off by default).
//
// defines: GradUnderflow, count_grad_underflow
#pragma once
#include <cstdint>
#include "parallel/data_parallel.h"

namespace paralab {

struct GradUnderflow {
  int64_t elements = 0;                    // gradient elements counted
  int64_t nonzero = 0;                     // of them, not exactly zero as stored
  int64_t unscaled_zero = 0, unscaled_subnormal = 0;  // g / S in fp16
  int64_t stored_below_normal = 0;  // nonzero as stored, below fp16's smallest normal
  // n as a fraction of the nonzero gradient values
  double fraction(int64_t n) const { return nonzero > 0 ? (double)n / nonzero : 0.0; }
};

// The owned segments of dp (and of the experts' data parallelism, when not null), their
// gradients divided by loss_scale. Adds into `out`.
void count_grad_underflow(const DataParallel& dp, kernels::Device device, float loss_scale,
                          GradUnderflow& out);

}  // namespace paralab
