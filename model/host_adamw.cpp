// model/host_adamw.cpp: see host_adamw.h.
#include "model/host_adamw.h"
#include <algorithm>
#include <thread>
#include "measure/clock.h"  // now_seconds

namespace paralab {

namespace {
// Elements [first, last) of the runs' concatenation, through the CPU twin.
void update_share(const std::vector<kernels::AdamRun>& runs, int64_t first, int64_t last,
                  const kernels::AdamStep& s, DType storage) {
  std::vector<kernels::AdamRun> share;
  int64_t start = 0;  // of the current run in the concatenation
  for (const kernels::AdamRun& r : runs) {
    const int64_t lo = std::max(first, start), hi = std::min(last, start + r.n);
    if (lo < hi) {
      const int64_t at = lo - start, es = (int64_t)dtype_size(storage);
      kernels::AdamRun part = r;
      part.master += at, part.n = hi - lo;
      part.m = static_cast<char*>(r.m) + at * (s.exp_avg_bf16 ? 2 : 4);
      part.v = static_cast<char*>(r.v) + at * (s.exp_avg_sq_bf16 ? 2 : 4);
      part.grads = static_cast<const char*>(r.grads) + at * es;
      if (r.params) part.params = static_cast<char*>(r.params) + at * es;
      share.push_back(part);
    }
    start += r.n;
    if (start >= last) break;
  }
  with_storage(storage, [&](auto type) {
    kernels::adamw_update<kernels::Device::CPU, decltype(type)>(share.data(), (int)share.size(), s);
  });
}
}  // namespace

void host_adamw(const std::vector<kernels::AdamRun>& runs, const kernels::AdamStep& step,
                DType storage, int threads) {
  int64_t total = 0;
  for (const kernels::AdamRun& r : runs) total += r.n;
  const int t = (int)std::max<int64_t>(1, std::min<int64_t>(threads, total / 4096 + 1));
  if (t <= 1) return update_share(runs, 0, total, step, storage);
  std::vector<std::thread> pool;
  for (int i = 0; i < t; ++i)
    pool.emplace_back(update_share, std::cref(runs), total * i / t, total * (i + 1) / t,
                      std::cref(step), storage);
  for (std::thread& th : pool) th.join();
}

double host_adamw_rate(int64_t n) {
  std::vector<float> master(n, 0.5f), m(n, 0.0f), v(n, 0.0f), g(n, 1e-3f);
  kernels::AdamRun r;
  r.master = master.data(), r.m = m.data(), r.v = v.data(), r.n = n, r.weight_decay = 0.1f;
  r.grads = g.data();
  kernels::AdamStep s;
  s.lr = 1e-4f, s.beta1 = 0.9f, s.beta2 = 0.95f, s.eps = 1e-8f, s.bias1 = 0.1f, s.bias2 = 0.05f;
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const double t0 = now_seconds();
    host_adamw({r}, s, DType::F32, 1);
    const double dt = now_seconds() - t0;
    if (dt > 0) best = std::max(best, (double)n / dt);
  }
  return best;
}

}  // namespace paralab
