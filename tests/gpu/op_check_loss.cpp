// tests/gpu/op_check_loss.cpp: op_check's rows for the loss and the optimizer: the three
// passes of the cross-entropy (on one rank and on a rank of a vocabulary split), AdamW and the
// gradient norm's sum of squares, fp32 then bf16 (see op_check.cpp for the metric and the
// bounds).
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/gpu/op_check.h"  // defines: Twin, written, Precision, err, worst, check, ...

namespace op_check {

// The sum of squares of x over three spans in one launch (one of them empty), CUDA against
// the CPU twin: the relative error.
template <class T>
double sum_squares_error(Twin<T>& x) {
  const int64_t n = (int64_t)x.cpu.size(), third = n / 3;
  const std::vector<kernels::Span> cpu = {{x.c(), third}, {x.c() + third, 0},
                                          {x.c() + third, n - third}};
  const std::vector<kernels::Span> gpu = {{x.g(), third}, {x.g() + third, 0},
                                          {x.g() + third, n - third}};
  const double c = kernels::sum_squares<T>(Device::CPU, cpu.data(), 3);
  const double g = kernels::sum_squares<T>(Device::CUDA, gpu.data(), 3);
  return std::isfinite(g) ? std::fabs(g - c) / std::fabs(c) : INFINITY;
}

void check_loss_optimizer() {
  using P = Precision<float>;
  const int N = 24, V = 1003;
  // The three passes on one rank (the whole vocabulary), then on the last rank of a 3-way
  // vocabulary split: columns [2V, 3V), the last 7 of them padding, targets on other ranks and
  // on this one. Ignored rows in both. Each pass is compared on the CPU pass's inputs, copied
  // to the GPU (as the backward checks do).
  struct Split {
    const char* name;
    int start, valid;
  };
  for (const Split& sp : {Split{" (one rank)", 0, V}, Split{" (vocab split)", 2 * V, V - 7}}) {
    const int start = sp.start, valid = sp.valid;
    std::vector<int> targets = random_ints(N, 0, start + valid - 1);
    for (int i = 0; i < N; i += 4) targets[i] = start + (i * 37) % valid;  // held here
    targets[3] = targets[17] = -1;  // ignored rows
    Twin<int> t(targets);
    Twin<float> logits(random_floats((size_t)N * V, -6.0f, 6.0f));
    std::unique_ptr<Twin<float>> row_max(written(N)), sum_exp(written(N)),
        target_logit(written(N));
    auto share = [&](Twin<float>& x) {
      kernels::memcpy_from_host(Device::CUDA, x.g(), x.c(), x.cpu.size() * sizeof(float));
    };
    check(std::string("cross_entropy_row_max") + sp.name, P::reduction, [&] {
      kernels::cross_entropy_row_max(Device::CPU, row_max->c(), logits.c(), N, V, valid);
      kernels::cross_entropy_row_max(Device::CUDA, row_max->g(), logits.g(), N, V, valid);
      return err(*row_max);
    });
    check(std::string("cross_entropy_sum_exp") + sp.name, P::reduction, [&] {
      share(*row_max);
      kernels::cross_entropy_sum_exp(Device::CPU, sum_exp->c(), target_logit->c(), logits.c(),
                                     row_max->c(), t.c(), N, V, valid, start);
      kernels::cross_entropy_sum_exp(Device::CUDA, sum_exp->g(), target_logit->g(), logits.g(),
                                     row_max->g(), t.g(), N, V, valid, start);
      return worst({err(*sum_exp), err(*target_logit)});
    });
    check(std::string("cross_entropy_finish") + sp.name, P::reduction, [&] {
      share(*sum_exp);
      share(*target_logit);
      std::unique_ptr<Twin<float>> losses(written(N));
      kernels::cross_entropy_finish(Device::CPU, losses->c(), logits.c(), t.c(), row_max->c(),
                                    sum_exp->c(), target_logit->c(), N, V, valid, start,
                                    1.0f / N);
      kernels::cross_entropy_finish(Device::CUDA, losses->g(), logits.g(), t.g(), row_max->g(),
                                    sum_exp->g(), target_logit->g(), N, V, valid, start,
                                    1.0f / N);
      return worst({err(*losses), err(logits)});
    });
  }

  check("adamw_update (runs of 100003, 0, 1, 4097 in one launch)", P::elementwise, [&] {
    const int64_t lengths[4] = {100003, 0, 1, 4097};
    const int64_t n = 100003 + 1 + 4097;
    Twin<float> params(random_floats(n)), grads(random_floats(n));
    Twin<float> m(random_floats(n, -0.1f, 0.1f)), v(random_floats(n, 0.0f, 0.01f));
    kernels::AdamStep step;
    step.lr = 1e-3f, step.beta1 = 0.9f, step.beta2 = 0.95f, step.eps = 1e-8f;
    step.bias1 = 1.0f - std::pow(0.9f, 3.0f), step.bias2 = 1.0f - std::pow(0.95f, 3.0f);  // step 3
    step.grad_scale = 0.7f;
    auto runs_on = [&](bool gpu) {
      std::vector<kernels::AdamRun> runs;
      int64_t at = 0;
      for (int r = 0; r < 4; at += lengths[r], ++r) {
        kernels::AdamRun run;
        run.master = (gpu ? params.g() : params.c()) + at;
        run.grads = (gpu ? grads.g() : grads.c()) + at;
        run.m = (gpu ? m.g() : m.c()) + at, run.v = (gpu ? v.g() : v.c()) + at;
        run.n = lengths[r], run.weight_decay = r % 2 ? 0.0f : 0.1f;
        runs.push_back(run);
      }
      return runs;
    };
    const std::vector<kernels::AdamRun> cpu = runs_on(false), gpu = runs_on(true);
    kernels::adamw_update<float>(Device::CPU, cpu.data(), 4, step);
    kernels::adamw_update<float>(Device::CUDA, gpu.data(), 4, step);
    return worst({err(params), err(m), err(v)});
  });
  check("sum_squares", 1e-9, [&] {
    Twin<float> x(random_floats(3000017));
    return sum_squares_error(x);
  });
}

// bf16 AdamW: fp32 master and moments (the fp32 arithmetic on exactly widened gradients, so
// the fp32 bound), then the bf16 parameters = round(master). One call, two rows.
void check_optimizer_bf16() {
  const size_t n = 100003;
  Twin<float> master(random_floats(n)), m(random_floats(n, -0.1f, 0.1f));
  Twin<float> v(random_floats(n, 0.0f, 0.01f));
  Twin<bf16> grads(random_values<bf16>(n));
  std::unique_ptr<Twin<bf16>> params(written<bf16>(n));
  check("adamw_update bf16 (master, m, v)", Precision<float>::elementwise, [&] {
    kernels::AdamStep step;
    step.lr = 1e-3f, step.beta1 = 0.9f, step.beta2 = 0.95f, step.eps = 1e-8f;
    step.bias1 = 1.0f - std::pow(0.9f, 3.0f), step.bias2 = 1.0f - std::pow(0.95f, 3.0f);
    step.grad_scale = 0.7f;
    auto run_on = [&](bool gpu) {  // two runs: weight decay on the first only
      kernels::AdamRun a;
      a.master = gpu ? master.g() : master.c(), a.params = gpu ? params->g() : params->c();
      a.grads = gpu ? grads.g() : grads.c(), a.m = gpu ? m.g() : m.c();
      a.v = gpu ? v.g() : v.c(), a.n = 60001, a.weight_decay = 0.1f;
      kernels::AdamRun b = a;
      b.master += a.n, b.params = static_cast<bf16*>(a.params) + a.n;
      b.grads = static_cast<const bf16*>(a.grads) + a.n;
      b.m = static_cast<float*>(a.m) + a.n, b.v = static_cast<float*>(a.v) + a.n;
      b.n = (int64_t)n - a.n, b.weight_decay = 0.0f;
      return std::vector<kernels::AdamRun>{a, b};
    };
    const std::vector<kernels::AdamRun> cpu = run_on(false), gpu = run_on(true);
    kernels::adamw_update<bf16>(Device::CPU, cpu.data(), 2, step);
    kernels::adamw_update<bf16>(Device::CUDA, gpu.data(), 2, step);
    return worst({err(master), err(m), err(v)});
  });
  check("adamw_update bf16 (params = round(master))", Precision<bf16>::elementwise,
        [&] { return err(*params); });
  check("sum_squares bf16", 1e-9, [&] {
    Twin<bf16> x(random_values<bf16>(3000017));
    return sum_squares_error(x);
  });
}

// Megatron's precision-aware optimizer: the moments stored in bf16 (--exp-avg-dtype,
// --exp-avg-sq-dtype bf16), loaded widened, updated in fp32, stored rounded to nearest even
// (kernels/math.h adamw_step_stored), with fp32 and with bf16 parameters, and with one moment
// in bf16 only. The master and the parameters take the fp32 / bf16 bounds as above; the moments,
// rounded to bf16, the bf16 bound (a 1-ulp fp32 difference may round across a bf16 tie).
void check_optimizer_bf16_moments() {
  const size_t n = 100003;
  for (int kind = 0; kind < 3; ++kind) {
    const bool half = kind == 0, m16 = kind != 2, v16 = true;  // kind 2: only v in bf16
    Twin<float> master(random_floats(n)), fgrads(random_floats(n));
    Twin<bf16> grads(random_values<bf16>(n)), m(random_values<bf16>(n, -0.1f, 0.1f));
    Twin<bf16> v(random_values<bf16>(n, 0.0f, 0.01f));
    Twin<float> mf(random_floats(n, -0.1f, 0.1f));
    std::unique_ptr<Twin<bf16>> params(written<bf16>(n));
    const char* names[3] = {"adamw_update bf16 m, v (bf16 params, fp32 master)",
                            "adamw_update bf16 m, v (fp32 params)",
                            "adamw_update fp32 m, bf16 v (fp32 params)"};
    check(names[kind], Precision<bf16>::elementwise, [&] {
      kernels::AdamStep step;
      step.lr = 1e-3f, step.beta1 = 0.9f, step.beta2 = 0.95f, step.eps = 1e-8f;
      step.bias1 = 1.0f - std::pow(0.9f, 3.0f), step.bias2 = 1.0f - std::pow(0.95f, 3.0f);
      step.grad_scale = 0.7f, step.exp_avg_bf16 = m16, step.exp_avg_sq_bf16 = v16;
      auto run_on = [&](bool gpu) {  // two runs: weight decay on the first only
        kernels::AdamRun a;
        a.master = gpu ? master.g() : master.c();
        a.params = half ? (gpu ? params->g() : params->c()) : nullptr;
        a.grads = half ? (const void*)(gpu ? grads.g() : grads.c())
                       : (const void*)(gpu ? fgrads.g() : fgrads.c());
        a.m = m16 ? (void*)(gpu ? m.g() : m.c()) : (void*)(gpu ? mf.g() : mf.c());
        a.v = gpu ? v.g() : v.c(), a.n = 60001, a.weight_decay = 0.1f;
        kernels::AdamRun b = a;
        const int64_t es = half ? 2 : 4;
        b.master += a.n;
        if (half) b.params = static_cast<bf16*>(a.params) + a.n;
        b.grads = static_cast<const char*>(a.grads) + a.n * es;
        b.m = static_cast<char*>(a.m) + a.n * (m16 ? 2 : 4);
        b.v = static_cast<bf16*>(a.v) + a.n;
        b.n = (int64_t)n - a.n, b.weight_decay = 0.0f;
        return std::vector<kernels::AdamRun>{a, b};
      };
      const std::vector<kernels::AdamRun> cpu = run_on(false), gpu = run_on(true);
      if (half) {
        kernels::adamw_update<bf16>(Device::CPU, cpu.data(), 2, step);
        kernels::adamw_update<bf16>(Device::CUDA, gpu.data(), 2, step);
        return worst({err(master), err(m), err(v), err(*params)});
      }
      kernels::adamw_update<float>(Device::CPU, cpu.data(), 2, step);
      kernels::adamw_update<float>(Device::CUDA, gpu.data(), 2, step);
      return m16 ? worst({err(master), err(m), err(v)}) : worst({err(master), err(mf), err(v)});
    });
  }
}

}  // namespace op_check
