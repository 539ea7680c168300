// model/grad_underflow.cpp: see grad_underflow.h.
#include "model/grad_underflow.h"
#include <cmath>
#include <vector>
#include "kernels/float16.h"  // to_fp16, to_float
#include "kernels/ops.h"      // memcpy_to_host

namespace paralab {

namespace {
// fp16's smallest normal, 2^-14: below it (and above 0) a value is subnormal
constexpr float kFp16MinNormal = 6.103515625e-05f;

template <class T>
void count(const T* g, int64_t n, float inv_scale, GradUnderflow& out) {
  for (int64_t i = 0; i < n; ++i) {
    const float stored = kernels::to_float(g[i]);
    if (stored == 0.0f) continue;  // an exact zero: nothing to lose
    ++out.nonzero;
    if (std::fabs(stored) < kFp16MinNormal) ++out.stored_below_normal;
    const float unscaled = kernels::to_float(kernels::to_fp16(stored * inv_scale));
    if (unscaled == 0.0f) ++out.unscaled_zero;
    else if (std::fabs(unscaled) < kFp16MinNormal) ++out.unscaled_subnormal;
  }
}
}  // namespace

void count_grad_underflow(const DataParallel& dp, kernels::Device device, float loss_scale,
                          GradUnderflow& out) {
  const float inv_scale = (float)(1.0 / (double)loss_scale);  // as the optimizer unscales
  const size_t element = dtype_size(dp.storage());
  std::vector<char> host;
  for (const OwnedSegment& seg : dp.owned_segments()) {
    host.resize((size_t)seg.count * element);
    kernels::memcpy_to_host(seg.host ? kernels::Device::CPU : device, host.data(), seg.grad,
                            host.size());
    with_storage(dp.storage(), [&](auto type) {
      count(reinterpret_cast<const decltype(type)*>(host.data()), seg.count, inv_scale, out);
    });
    out.elements += seg.count;
  }
}

}  // namespace paralab
