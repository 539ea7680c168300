// tests/gpu/op_check.cpp: the GPU self-check. Runs every op of kernels/ops.h on both twins
// (kernels::NAME(Device::CPU, ...) and kernels::NAME(Device::CUDA, ...), through the
// dispatcher) on the same random inputs, and prints one row per op:
//
//   op   max rel err   bound   PASS/FAIL
//
// Error metric, per output tensor: max_i |gpu_i - cpu_i| / max_i |cpu_i| (the largest
// deviation relative to the tensor's scale, so near-zero elements do not blow it up); an op
// with several outputs reports the worst. NaN or Inf on either side is an error of inf.
// Bounds: 1e-4 for elementwise and layout ops (same math.h function, at most a few ulp apart),
// 1e-3 for reductions, GEMM and attention (different summation orders), 0 for bytes and
// masks, 1e-9 for the double-precision sum of squares. Outputs documented as "+=" are seeded
// with the same random values on both sides, and "=" outputs with different ones, so a
// twin that accumulates where it should write (or the reverse) fails.
//
// Exit status: 0 when every row passes, 1 otherwise, 2 when no GPU is visible.
// Built and run by scripts/gpu_check.sh.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

using kernels::Device;
using Floats = std::vector<float>;

namespace {

std::mt19937 rng(20240611);

Floats random_floats(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<int> random_ints(size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> x(n);
  for (int& v : x) v = dist(rng);
  return x;
}

// One tensor on both twins: `cpu` is the CPU twin's buffer (host memory is the CPU device),
// `gpu` a device copy of the same initial values (or of `gpu_init` when given).
template <typename T>
struct Twin {
  std::vector<T> cpu;
  T* gpu = nullptr;
  explicit Twin(const std::vector<T>& init) : Twin(init, init) {}
  Twin(const std::vector<T>& init, const std::vector<T>& gpu_init) : cpu(init) {
    gpu = (T*)kernels::device_malloc(Device::CUDA, gpu_init.size() * sizeof(T));
    kernels::memcpy_from_host(Device::CUDA, gpu, gpu_init.data(), gpu_init.size() * sizeof(T));
  }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;
  ~Twin() { kernels::device_free(Device::CUDA, gpu); }
  T* c() { return cpu.data(); }
  T* g() { return gpu; }
  std::vector<T> fetch() const {
    std::vector<T> out(cpu.size());
    kernels::memcpy_to_host(Device::CUDA, out.data(), gpu, out.size() * sizeof(T));
    return out;
  }
};

// An "=" output: the two sides start from different garbage.
std::unique_ptr<Twin<float>> written(size_t n) {
  return std::make_unique<Twin<float>>(random_floats(n), random_floats(n));
}

double rel_err(const Floats& gpu, const Floats& cpu) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < cpu.size(); i++) {
    if (!std::isfinite(gpu[i]) || !std::isfinite(cpu[i])) return INFINITY;
    diff = std::max(diff, (double)std::fabs(gpu[i] - cpu[i]));
    scale = std::max(scale, (double)std::fabs(cpu[i]));
  }
  return scale > 0.0 ? diff / scale : diff;
}
double err(const Twin<float>& t) { return rel_err(t.fetch(), t.cpu); }
double err_all(std::initializer_list<const Twin<float>*> ts) {
  double e = 0.0;
  for (const Twin<float>* t : ts) e = std::max(e, err(*t));
  return e;
}
double mismatches(const Twin<uint8_t>& t) {
  std::vector<uint8_t> g = t.fetch();
  double n = 0;
  for (size_t i = 0; i < g.size(); i++) n += g[i] != t.cpu[i];
  return n;
}

constexpr double kElementwise = 1e-4, kReduction = 1e-3;

int failures = 0;

// Runs one check; an exception (e.g. a CUDA error) is a failure with its message.
void check(const std::string& op, double bound, const std::function<double()>& run) {
  double e = INFINITY;
  std::string note;
  try {
    e = run();
  } catch (const std::exception& ex) {
    note = std::string("  (") + ex.what() + ")";
  }
  bool pass = e <= bound;
  if (!pass) failures++;
  std::printf("%-52s %12.3e %10.1e   %s%s\n", op.c_str(), e, bound, pass ? "PASS" : "FAIL",
              note.c_str());
  std::fflush(stdout);
}

// ---- the checks ----------------------------------------------------------------------------

void check_memory() {
  check("memory (malloc/copy/memset)", 0.0, [] {
    const size_t n = 1003;
    float* a = (float*)kernels::device_malloc(Device::CUDA, n * sizeof(float));
    float* b = (float*)kernels::device_malloc(Device::CUDA, n * sizeof(float));
    Floats host(n), x = random_floats(n);
    double bad = 0;
    kernels::memcpy_to_host(Device::CUDA, host.data(), a, n * sizeof(float));
    for (float v : host) bad += v != 0.0f;  // device_malloc zero-fills
    kernels::memcpy_from_host(Device::CUDA, a, x.data(), n * sizeof(float));
    kernels::memcpy_device(Device::CUDA, b, a, n * sizeof(float));
    kernels::memcpy_to_host(Device::CUDA, host.data(), b, n * sizeof(float));
    for (size_t i = 0; i < n; i++) bad += host[i] != x[i];
    kernels::memset_zero(Device::CUDA, b, 10 * sizeof(float));
    kernels::synchronize(Device::CUDA);
    kernels::memcpy_to_host(Device::CUDA, host.data(), b, n * sizeof(float));
    for (size_t i = 0; i < n; i++) bad += host[i] != (i < 10 ? 0.0f : x[i]);
    kernels::device_free(Device::CUDA, a);
    kernels::device_free(Device::CUDA, b);
    return bad;
  });
}

void check_gemm() {
  const int m = 67, n = 45, k = 93, pad = 3;
  for (int t = 0; t < 4; t++) {
    const bool ta = t & 1, tb = t & 2;
    // Stored shapes: A is (m,k), or (k,m) when transposed; rows padded by `pad` floats.
    const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    Twin<float> A(random_floats((size_t)(ta ? k : m) * lda));
    Twin<float> B(random_floats((size_t)(tb ? n : k) * ldb));
    Twin<float> C(random_floats((size_t)m * ldc));
    std::string name = std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N");
    check(name, kReduction, [&] {
      kernels::gemm(Device::CPU, ta, tb, m, n, k, 1.3f, A.c(), lda, B.c(), ldb, 0.5f, C.c(), ldc);
      kernels::gemm(Device::CUDA, ta, tb, m, n, k, 1.3f, A.g(), lda, B.g(), ldb, 0.5f, C.g(), ldc);
      return err(C);
    });
  }
  for (int t = 1; t <= 2; t++) {
    const bool ta = t == 1, tb = t == 2;
    const int batch = 3, lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    const long long sa = (long long)m * k + 7, sb = (long long)k * n + 5, sc = (long long)m * n + 2;
    Twin<float> A(random_floats(sa * batch)), B(random_floats(sb * batch));
    Twin<float> C(random_floats(sc * batch));
    check(std::string("gemm_strided_batched ") + (ta ? "TN" : "NT"), kReduction, [&] {
      kernels::gemm_strided_batched(Device::CPU, ta, tb, m, n, k, 0.7f, A.c(), lda, sa, B.c(), ldb,
                                    sb, 0.0f, C.c(), ldc, sc, batch);
      kernels::gemm_strided_batched(Device::CUDA, ta, tb, m, n, k, 0.7f, A.g(), lda, sa, B.g(), ldb,
                                    sb, 0.0f, C.g(), ldc, sc, batch);
      return err(C);
    });
  }
}

void check_elementwise() {
  const int N = 53, C = 301;
  const size_t n = (size_t)N * C;
  Twin<float> a(random_floats(n)), b(random_floats(n)), bias(random_floats(C));
  check("add", kElementwise, [&] {
    std::unique_ptr<Twin<float>> out(written(n));
    kernels::add(Device::CPU, out->c(), a.c(), b.c(), n);
    kernels::add(Device::CUDA, out->g(), a.g(), b.g(), n);
    return err(*out);
  });
  check("accumulate", kElementwise, [&] {
    Twin<float> out(random_floats(n));
    kernels::accumulate(Device::CPU, out.c(), a.c(), n);
    kernels::accumulate(Device::CUDA, out.g(), a.g(), n);
    return err(out);
  });
  check("scale", kElementwise, [&] {
    Twin<float> x(random_floats(n));
    kernels::scale(Device::CPU, x.c(), -0.37f, n);
    kernels::scale(Device::CUDA, x.g(), -0.37f, n);
    return err(x);
  });
  check("add_bias", kElementwise, [&] {
    Twin<float> y(random_floats(n));
    kernels::add_bias(Device::CPU, y.c(), bias.c(), N, C);
    kernels::add_bias(Device::CUDA, y.g(), bias.g(), N, C);
    return err(y);
  });
  check("bias_backward", kReduction, [&] {
    Twin<float> db(random_floats(C));
    kernels::bias_backward(Device::CPU, db.c(), a.c(), N, C);
    kernels::bias_backward(Device::CUDA, db.g(), a.g(), N, C);
    return err(db);
  });
  check("gelu_forward", kElementwise, [&] {
    Twin<float> x(random_floats(n, -5.0f, 5.0f));
    std::unique_ptr<Twin<float>> out(written(n));
    kernels::gelu_forward(Device::CPU, out->c(), x.c(), n);
    kernels::gelu_forward(Device::CUDA, out->g(), x.g(), n);
    return err(*out);
  });
  check("gelu_backward", kElementwise, [&] {
    Twin<float> x(random_floats(n, -5.0f, 5.0f));
    std::unique_ptr<Twin<float>> din(written(n));
    kernels::gelu_backward(Device::CPU, din->c(), b.c(), x.c(), n);
    kernels::gelu_backward(Device::CUDA, din->g(), b.g(), x.g(), n);
    return err(*din);
  });
  const int F = 150;  // swiglu: in (N, 2F) = [gate | up]
  Twin<float> in(random_floats((size_t)N * 2 * F, -4.0f, 4.0f)), dout(random_floats((size_t)N * F));
  check("swiglu_forward", kElementwise, [&] {
    std::unique_ptr<Twin<float>> out(written((size_t)N * F));
    kernels::swiglu_forward(Device::CPU, out->c(), in.c(), N, F);
    kernels::swiglu_forward(Device::CUDA, out->g(), in.g(), N, F);
    return err(*out);
  });
  check("swiglu_backward", kElementwise, [&] {
    std::unique_ptr<Twin<float>> din(written((size_t)N * 2 * F));
    kernels::swiglu_backward(Device::CPU, din->c(), dout.c(), in.c(), N, F);
    kernels::swiglu_backward(Device::CUDA, din->g(), dout.g(), in.g(), N, F);
    return err(*din);
  });
  for (float p : {0.0f, 0.3f}) {
    std::string tag = " p=" + std::string(p > 0 ? "0.3" : "0");
    check("dropout_forward (out, mask)" + tag, kElementwise, [&] {
      std::unique_ptr<Twin<float>> out(written(n));
      Twin<uint8_t> mask(std::vector<uint8_t>(n, 7));
      kernels::dropout_forward(Device::CPU, out->c(), mask.c(), a.c(), n, p, 99, 5);
      kernels::dropout_forward(Device::CUDA, out->g(), mask.g(), a.g(), n, p, 99, 5);
      return mismatches(mask) > 0 ? INFINITY : err(*out);
    });
    check("dropout_backward" + tag, kElementwise, [&] {
      std::vector<uint8_t> bits(n);
      for (auto& bit : bits) bit = rng() % 3 != 0;
      Twin<uint8_t> mask(bits);
      std::unique_ptr<Twin<float>> din(written(n));
      kernels::dropout_backward(Device::CPU, din->c(), b.c(), mask.c(), n, p);
      kernels::dropout_backward(Device::CUDA, din->g(), b.g(), mask.g(), n, p);
      return err(*din);
    });
  }
}

void check_embedding() {
  const int B = 3, S = 41, N = B * S, C = 96, V = 50;  // V < N: tokens repeat
  Twin<int> tokens(random_ints(N, 0, V - 1));
  Twin<float> wte(random_floats((size_t)V * C)), wpe(random_floats((size_t)S * C));
  Twin<float> dout(random_floats((size_t)N * C));
  for (bool pos : {true, false}) {
    check(std::string("embedding_forward") + (pos ? " +wpe" : ""), kElementwise, [&] {
      std::unique_ptr<Twin<float>> out(written((size_t)N * C));
      kernels::embedding_forward(Device::CPU, out->c(), tokens.c(), wte.c(),
                                 pos ? wpe.c() : nullptr, N, S, C);
      kernels::embedding_forward(Device::CUDA, out->g(), tokens.g(), wte.g(),
                                 pos ? wpe.g() : nullptr, N, S, C);
      return err(*out);
    });
    check(std::string("embedding_backward") + (pos ? " +wpe" : ""), kReduction, [&] {
      Twin<float> dwte(random_floats((size_t)V * C)), dwpe(random_floats((size_t)S * C));
      kernels::embedding_backward(Device::CPU, dwte.c(), pos ? dwpe.c() : nullptr, dout.c(),
                                  tokens.c(), N, S, C);
      kernels::embedding_backward(Device::CUDA, dwte.g(), pos ? dwpe.g() : nullptr, dout.g(),
                                  tokens.g(), N, S, C);
      return err_all({&dwte, &dwpe});
    });
  }
}

void check_norms() {
  const int N = 37;
  for (int C : {96, 1000}) {
    const size_t n = (size_t)N * C;
    const std::string tag = " C=" + std::to_string(C);
    // An offset mean checks the two-pass variance.
    Twin<float> x(random_floats(n, 2.0f, 4.0f)), w(random_floats(C, 0.5f, 1.5f));
    Twin<float> b(random_floats(C)), dout(random_floats(n));
    Twin<float> mean(random_floats(N), random_floats(N)), rstd(random_floats(N), random_floats(N));
    // The backward checks feed both twins the CPU forward's statistics.
    auto share_stats = [&] {
      kernels::memcpy_from_host(Device::CUDA, mean.g(), mean.c(), N * sizeof(float));
      kernels::memcpy_from_host(Device::CUDA, rstd.g(), rstd.c(), N * sizeof(float));
    };
    check("layernorm_forward" + tag, kReduction, [&] {
      std::unique_ptr<Twin<float>> out(written(n));
      kernels::layernorm_forward(Device::CPU, out->c(), mean.c(), rstd.c(), x.c(), w.c(), b.c(), N,
                                 C, 1e-5f);
      kernels::layernorm_forward(Device::CUDA, out->g(), mean.g(), rstd.g(), x.g(), w.g(), b.g(), N,
                                 C, 1e-5f);
      return err_all({out.get(), &mean, &rstd});
    });
    check("layernorm_backward" + tag, kReduction, [&] {
      Twin<float> dx(random_floats(n)), dw(random_floats(C)), db(random_floats(C));
      share_stats();
      kernels::layernorm_backward(Device::CPU, dx.c(), dw.c(), db.c(), dout.c(), x.c(), w.c(),
                                  mean.c(), rstd.c(), N, C);
      kernels::layernorm_backward(Device::CUDA, dx.g(), dw.g(), db.g(), dout.g(), x.g(), w.g(),
                                  mean.g(), rstd.g(), N, C);
      return err_all({&dx, &dw, &db});
    });
    check("rmsnorm_forward" + tag, kReduction, [&] {
      std::unique_ptr<Twin<float>> out(written(n));
      kernels::rmsnorm_forward(Device::CPU, out->c(), rstd.c(), x.c(), w.c(), N, C, 1e-5f);
      kernels::rmsnorm_forward(Device::CUDA, out->g(), rstd.g(), x.g(), w.g(), N, C, 1e-5f);
      return err_all({out.get(), &rstd});
    });
    check("rmsnorm_backward" + tag, kReduction, [&] {
      Twin<float> dx(random_floats(n)), dw(random_floats(C));
      share_stats();
      kernels::rmsnorm_backward(Device::CPU, dx.c(), dw.c(), dout.c(), x.c(), w.c(), rstd.c(), N,
                                C);
      kernels::rmsnorm_backward(Device::CUDA, dx.g(), dw.g(), dout.g(), x.g(), w.g(), rstd.g(), N,
                                C);
      return err_all({&dx, &dw});
    });
  }
}

void check_attention_layout() {
  const int B = 2, S = 37, A = 6, G = 2, D = 16, W = (A + 2 * G) * D;
  const size_t nq = (size_t)B * A * S * D, nkv = (size_t)B * G * S * D;
  Twin<float> qkv(random_floats((size_t)B * S * W));
  Twin<float> dq(random_floats(nq)), dk(random_floats(nkv)), dv(random_floats(nkv));
  for (float theta : {0.0f, 10000.0f}) {
    const std::string tag = theta > 0 ? " rope" : "";
    check("qkv_split_forward" + tag, kElementwise, [&] {
      std::unique_ptr<Twin<float>> q(written(nq)), k(written(nkv)), v(written(nkv));
      kernels::qkv_split_forward(Device::CPU, q->c(), k->c(), v->c(), qkv.c(), B, S, A, G, D,
                                 theta);
      kernels::qkv_split_forward(Device::CUDA, q->g(), k->g(), v->g(), qkv.g(), B, S, A, G, D,
                                 theta);
      return err_all({q.get(), k.get(), v.get()});
    });
    check("qkv_split_backward" + tag, kElementwise, [&] {
      std::unique_ptr<Twin<float>> dqkv(written((size_t)B * S * W));
      kernels::qkv_split_backward(Device::CPU, dqkv->c(), dq.c(), dk.c(), dv.c(), B, S, A, G, D,
                                  theta);
      kernels::qkv_split_backward(Device::CUDA, dqkv->g(), dq.g(), dk.g(), dv.g(), B, S, A, G, D,
                                  theta);
      return err(*dqkv);
    });
  }
  check("heads_merge_forward", kElementwise, [&] {
    std::unique_ptr<Twin<float>> out(written(nq));
    kernels::heads_merge_forward(Device::CPU, out->c(), dq.c(), B, S, A, D);
    kernels::heads_merge_forward(Device::CUDA, out->g(), dq.g(), B, S, A, D);
    return err(*out);
  });
  check("heads_merge_backward", kElementwise, [&] {
    std::unique_ptr<Twin<float>> d_o(written(nq));
    kernels::heads_merge_backward(Device::CPU, d_o->c(), dq.c(), B, S, A, D);
    kernels::heads_merge_backward(Device::CUDA, d_o->g(), dq.g(), B, S, A, D);
    return err(*d_o);
  });

  const int rows = B * A, T = 300;  // T > the block size: threads loop over columns
  const size_t nss = (size_t)rows * T * T;
  Twin<float> probs(random_floats(nss, -4.0f, 4.0f));
  check("causal_softmax_forward (in place)", kReduction, [&] {
    kernels::causal_softmax_forward(Device::CPU, probs.c(), probs.c(), rows, T, 0.7f);
    kernels::causal_softmax_forward(Device::CUDA, probs.g(), probs.g(), rows, T, 0.7f);
    return err(probs);
  });
  check("causal_softmax_backward", kReduction, [&] {
    Twin<float> dprobs(random_floats(nss));
    std::unique_ptr<Twin<float>> dscores(written(nss));
    // Both twins differentiate the same P (the CPU one's), so only the backward is compared.
    kernels::memcpy_from_host(Device::CUDA, probs.g(), probs.c(), nss * sizeof(float));
    kernels::causal_softmax_backward(Device::CPU, dscores->c(), dprobs.c(), probs.c(), rows, T,
                                     0.7f);
    kernels::causal_softmax_backward(Device::CUDA, dscores->g(), dprobs.g(), probs.g(), rows, T,
                                     0.7f);
    return err(*dscores);
  });
}

// Flash attention: tiles of 32 on the GPU, 64 on the CPU, so S not a multiple of either
// exercises partial tiles; GQA (A/G = 2) exercises the group sums of dk, dv.
void check_flash(int B, int A, int G, int S, int D, float p) {
  char tag[96];
  std::snprintf(tag, sizeof(tag), " B%d A%d G%d S%d D%d p=%g", B, A, G, S, D, p);
  const size_t nq = (size_t)B * A * S * D, nkv = (size_t)B * G * S * D;
  const float scale = 1.0f / std::sqrt((float)D);
  Twin<float> q(random_floats(nq, -2.0f, 2.0f)), k(random_floats(nkv, -2.0f, 2.0f));
  Twin<float> v(random_floats(nkv)), dout(random_floats(nq));
  Twin<float> o(random_floats(nq), random_floats(nq));
  Twin<float> lse(random_floats((size_t)B * A * S), random_floats((size_t)B * A * S));
  check(std::string("flash_attention_forward") + tag, kReduction, [&] {
    kernels::flash_attention_forward(Device::CPU, o.c(), lse.c(), q.c(), k.c(), v.c(), B, A, G, S,
                                     D, scale, p, 7, 11);
    kernels::flash_attention_forward(Device::CUDA, o.g(), lse.g(), q.g(), k.g(), v.g(), B, A, G, S,
                                     D, scale, p, 7, 11);
    return err_all({&o, &lse});
  });
  check(std::string("flash_attention_backward") + tag, kReduction, [&] {
    // Both twins differentiate the CPU forward's o and lse.
    kernels::memcpy_from_host(Device::CUDA, o.g(), o.c(), nq * sizeof(float));
    kernels::memcpy_from_host(Device::CUDA, lse.g(), lse.c(), lse.cpu.size() * sizeof(float));
    std::unique_ptr<Twin<float>> dq(written(nq)), dk(written(nkv)), dv(written(nkv));
    kernels::flash_attention_backward(Device::CPU, dq->c(), dk->c(), dv->c(), dout.c(), q.c(),
                                      k.c(), v.c(), o.c(), lse.c(), B, A, G, S, D, scale, p, 7, 11);
    kernels::flash_attention_backward(Device::CUDA, dq->g(), dk->g(), dv->g(), dout.g(), q.g(),
                                      k.g(), v.g(), o.g(), lse.g(), B, A, G, S, D, scale, p, 7, 11);
    return err_all({dq.get(), dk.get(), dv.get()});
  });
}

void check_loss_optimizer() {
  const int N = 24, V = 1003;
  std::vector<int> targets = random_ints(N, 0, V - 1);
  targets[3] = targets[17] = -1;  // ignored rows
  Twin<int> t(targets);
  check("cross_entropy_forward_backward", kReduction, [&] {
    Twin<float> logits(random_floats((size_t)N * V, -6.0f, 6.0f));
    std::unique_ptr<Twin<float>> losses(written(N));
    kernels::cross_entropy_forward_backward(Device::CPU, losses->c(), logits.c(), t.c(), N, V,
                                            1.0f / N);
    kernels::cross_entropy_forward_backward(Device::CUDA, losses->g(), logits.g(), t.g(), N, V,
                                            1.0f / N);
    return err_all({losses.get(), &logits});
  });

  const size_t n = 100003;
  check("adamw_update", kElementwise, [&] {
    Twin<float> params(random_floats(n)), grads(random_floats(n));
    Twin<float> m(random_floats(n, -0.1f, 0.1f)), v(random_floats(n, 0.0f, 0.01f));
    const float b1 = 0.9f, b2 = 0.95f, t3 = 3.0f;  // step 3
    const float bias1 = 1.0f - std::pow(b1, t3), bias2 = 1.0f - std::pow(b2, t3);
    kernels::adamw_update(Device::CPU, params.c(), grads.c(), m.c(), v.c(), n, 1e-3f, b1, b2, 1e-8f,
                          0.1f, bias1, bias2, 0.7f);
    kernels::adamw_update(Device::CUDA, params.g(), grads.g(), m.g(), v.g(), n, 1e-3f, b1, b2,
                          1e-8f, 0.1f, bias1, bias2, 0.7f);
    return err_all({&params, &m, &v});
  });
  check("sum_squares", 1e-9, [&] {
    Twin<float> x(random_floats(3000017));
    double c = kernels::sum_squares(Device::CPU, x.c(), x.cpu.size());
    double g = kernels::sum_squares(Device::CUDA, x.g(), x.cpu.size());
    return std::isfinite(g) ? std::fabs(g - c) / std::fabs(c) : INFINITY;
  });
}

}  // namespace

int main() {
  const int gpus = kernels::cuda_device_count();
  if (!kernels::cuda_compiled() || gpus == 0) {
    std::fprintf(stderr, "op_check: no GPU visible (cuda_compiled=%d, devices=%d)\n",
                 (int)kernels::cuda_compiled(), gpus);
    return 2;
  }
  std::printf("op_check: CUDA twin vs CPU twin, error = max|gpu - cpu| / max|cpu| per output\n");
  std::printf("%-52s %12s %10s   %s\n", "op", "max rel err", "bound", "result");
  check_memory();
  check_gemm();
  check_elementwise();
  check_embedding();
  check_norms();
  check_attention_layout();
  check_flash(2, 4, 2, 77, 40, 0.0f);
  check_flash(2, 4, 2, 77, 40, 0.2f);
  check_flash(1, 3, 3, 130, 64, 0.0f);
  check_flash(1, 2, 1, 33, 128, 0.1f);
  check_loss_optimizer();
  if (failures > 0) {
    std::printf("op_check: %d FAILED\n", failures);
    return 1;
  }
  std::printf("op_check: all PASS\n");
  return 0;
}
