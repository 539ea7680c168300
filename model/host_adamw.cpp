// model/host_adamw.cpp: see host_adamw.h.
#include "model/host_adamw.h"
#include <algorithm>
#include <thread>
#include "kernels/math.h"   // adamw_step, to_bf16, to_float
#include "measure/clock.h"  // now_seconds

namespace paralab {

namespace {
// Elements [lo, hi) of one run.
void update(const HostAdamRun& r, int64_t lo, int64_t hi, const HostAdamStep& s) {
  if (r.bf16_param) {
    const kernels::bf16* g = static_cast<const kernels::bf16*>(r.grad);
    kernels::bf16* p = static_cast<kernels::bf16*>(r.bf16_param);
    for (int64_t i = lo; i < hi; ++i) {
      kernels::adamw_step(r.master[i], r.m[i], r.v[i], kernels::to_float(g[i]) * s.grad_scale,
                          s.lr, s.beta1, s.beta2, s.eps, r.weight_decay, s.bias1, s.bias2);
      p[i] = kernels::to_bf16(r.master[i]);
    }
    return;
  }
  const float* g = static_cast<const float*>(r.grad);
  for (int64_t i = lo; i < hi; ++i)
    kernels::adamw_step(r.master[i], r.m[i], r.v[i], g[i] * s.grad_scale, s.lr, s.beta1,
                        s.beta2, s.eps, r.weight_decay, s.bias1, s.bias2);
}

// The elements [first, last) of the runs' concatenation.
void update_share(const std::vector<HostAdamRun>& runs, int64_t first, int64_t last,
                  const HostAdamStep& s) {
  int64_t start = 0;  // of the current run in the concatenation
  for (const HostAdamRun& r : runs) {
    const int64_t lo = std::max(first, start), hi = std::min(last, start + r.n);
    if (lo < hi) update(r, lo - start, hi - start, s);
    start += r.n;
    if (start >= last) break;
  }
}
}  // namespace

void host_adamw(const std::vector<HostAdamRun>& runs, const HostAdamStep& step, int threads) {
  int64_t total = 0;
  for (const HostAdamRun& r : runs) total += r.n;
  const int t = (int)std::max<int64_t>(1, std::min<int64_t>(threads, total / 4096 + 1));
  if (t <= 1) return update_share(runs, 0, total, step);
  std::vector<std::thread> pool;
  for (int i = 0; i < t; ++i)
    pool.emplace_back(update_share, std::cref(runs), total * i / t, total * (i + 1) / t,
                      std::cref(step));
  for (std::thread& th : pool) th.join();
}

double host_adamw_rate(int64_t n, bool bf16) {
  std::vector<float> master(n, 0.5f), m(n, 0.0f), v(n, 0.0f), g(n, 1e-3f);
  std::vector<kernels::bf16> gb(n, kernels::to_bf16(1e-3f)), pb(n);
  HostAdamRun r;
  r.master = master.data(), r.m = m.data(), r.v = v.data(), r.n = n, r.weight_decay = 0.1f;
  r.grad = bf16 ? static_cast<const void*>(gb.data()) : g.data();
  r.bf16_param = bf16 ? pb.data() : nullptr;
  HostAdamStep s;
  s.lr = 1e-4f, s.beta1 = 0.9f, s.beta2 = 0.95f, s.eps = 1e-8f, s.bias1 = 0.1f, s.bias2 = 0.05f;
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const double t0 = now_seconds();
    host_adamw({r}, s, 1);
    const double dt = now_seconds() - t0;
    if (dt > 0) best = std::max(best, (double)n / dt);
  }
  return best;
}

}  // namespace paralab
