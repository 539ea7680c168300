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
// bf16 storage (rows tagged "bf16"): the checks are templated on the storage type T, and the
// bf16 rows run the ops of ops.h's bf16 section on bf16 inputs (kernels::NAME(Device::CPU,
// bf16...) against kernels::NAME(Device::CUDA, bf16...)). Both twins compute in fp32 from the
// same exactly-widened inputs and round once, so an fp32 difference of an ulp can at most flip
// the last bf16 bit (2^-8 relative): the bound is 1e-2 for every computing op. Ops that only
// move values (conversion, layout without RoPE, masks) must agree bit for bit; fp32 outputs
// of bf16 ops (norm statistics, lse, the logits GEMM, AdamW's master and moments) keep
// their fp32 bounds.
//
// Exit status: 0 when every row passes, 1 otherwise, 2 when no GPU is visible.
// Built and run by scripts/gpu_check.sh.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/math.h"  // to_float, to_bf16
#include "kernels/ops.h"

using kernels::bf16;
using kernels::Device;
using Floats = std::vector<float>;
using Bf16s = std::vector<bf16>;

namespace {

std::mt19937 rng(20240611);

Floats random_floats(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

Bf16s round_all(const Floats& x) {
  Bf16s out(x.size());
  for (size_t i = 0; i < x.size(); i++) out[i] = kernels::to_bf16(x[i]);
  return out;
}

// Random values of storage type T: bf16 ones are rounded floats.
template <typename T>
std::vector<T> random_values(size_t n, float lo = -1.0f, float hi = 1.0f) {
  if constexpr (std::is_same<T, float>::value)
    return random_floats(n, lo, hi);
  else
    return round_all(random_floats(n, lo, hi));
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
template <typename T = float>
std::unique_ptr<Twin<T>> written(size_t n) {
  return std::make_unique<Twin<T>>(random_values<T>(n), random_values<T>(n));
}

// Bounds and row-name tag per storage type (see the header comment).
template <typename T>
struct Precision {
  static constexpr double elementwise = 1e-4, reduction = 1e-3, layout = 1e-4;
  static constexpr const char* tag = "";
};
template <>
struct Precision<bf16> {
  static constexpr double elementwise = 1e-2, reduction = 1e-2, layout = 0.0;
  static constexpr const char* tag = " bf16";
};

double rel_err(const Floats& gpu, const Floats& cpu) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < cpu.size(); i++) {
    if (!std::isfinite(gpu[i]) || !std::isfinite(cpu[i])) return INFINITY;
    diff = std::max(diff, (double)std::fabs(gpu[i] - cpu[i]));
    scale = std::max(scale, (double)std::fabs(cpu[i]));
  }
  return scale > 0.0 ? diff / scale : diff;
}
const Floats& widen(const Floats& x) { return x; }
Floats widen(const Bf16s& x) {
  Floats out(x.size());
  for (size_t i = 0; i < x.size(); i++) out[i] = kernels::to_float(x[i]);
  return out;
}
template <typename T>
double err(const Twin<T>& t) {
  return rel_err(widen(t.fetch()), widen(t.cpu));
}
// The worst of several outputs' errors (they may differ in type).
double worst(std::initializer_list<double> errs) { return std::max(errs); }
// Elements whose bytes differ: masks, and the outputs that must match bit for bit.
template <typename T>
double mismatches(const Twin<T>& t) {
  std::vector<T> g = t.fetch();
  double n = 0;
  for (size_t i = 0; i < g.size(); i++) n += std::memcmp(&g[i], &t.cpu[i], sizeof(T)) != 0;
  return n;
}

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
// Each check_X<T> runs the fp32 rows (T = float) or the bf16 rows (T = bf16) of its ops.

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

// float <-> bf16, bit for bit, on values that exercise the rounding: ties to even (both
// directions), carries into the exponent, overflow to inf, subnormals, signed zeros, NaN.
void check_convert() {
  Floats x = random_floats(4099, -1e3f, 1e3f);
  const float inf = std::numeric_limits<float>::infinity();
  const uint32_t special_bits[] = {0x3F808000u, 0x3F818000u, 0x3F80FFFFu, 0x3F7FFFFFu,
                                   0x7F7FFFFFu, 0x00000001u, 0x00408000u, 0x80000000u,
                                   0x7FC00001u, 0xFF800001u};
  for (uint32_t bits : special_bits) x.push_back(kernels::bits_to_float(bits));
  for (float v : {0.0f, inf, -inf, 1e-40f, -3.0e38f}) x.push_back(v);
  check("convert fp32 -> bf16", 0.0, [&] {
    Twin<float> in(x);
    std::unique_ptr<Twin<bf16>> out(written<bf16>(x.size()));
    kernels::convert(Device::CPU, out->c(), in.c(), x.size());
    kernels::convert(Device::CUDA, out->g(), in.g(), x.size());
    return mismatches(*out);
  });
  check("convert bf16 -> fp32", 0.0, [&] {
    Twin<bf16> in(round_all(x));
    std::unique_ptr<Twin<float>> out(written(x.size()));
    kernels::convert(Device::CPU, out->c(), in.c(), x.size());
    kernels::convert(Device::CUDA, out->g(), in.g(), x.size());
    return mismatches(*out);
  });
}

template <typename T>
void check_gemm() {
  using P = Precision<T>;
  const int m = 67, n = 45, k = 93, pad = 3;
  for (int t = 0; t < 4; t++) {
    const bool ta = t & 1, tb = t & 2;
    // Stored shapes: A is (m,k), or (k,m) when transposed; rows padded by `pad` elements.
    const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    Twin<T> A(random_values<T>((size_t)(ta ? k : m) * lda));
    Twin<T> B(random_values<T>((size_t)(tb ? n : k) * ldb));
    Twin<T> C(random_values<T>((size_t)m * ldc));
    std::string name = std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N");
    check(name + P::tag, P::reduction, [&] {
      kernels::gemm(Device::CPU, ta, tb, m, n, k, 1.3f, A.c(), lda, B.c(), ldb, 0.5f, C.c(), ldc);
      kernels::gemm(Device::CUDA, ta, tb, m, n, k, 1.3f, A.g(), lda, B.g(), ldb, 0.5f, C.g(), ldc);
      return err(C);
    });
    // bf16 A, B into an fp32 C (the logits): fp32 output, so the fp32 bound.
    if constexpr (std::is_same<T, bf16>::value) {
      Twin<float> C32(random_floats((size_t)m * ldc));
      check(name + " bf16 -> fp32", Precision<float>::reduction, [&] {
        kernels::gemm(Device::CPU, ta, tb, m, n, k, 0.9f, A.c(), lda, B.c(), ldb, 0.5f, C32.c(),
                      ldc);
        kernels::gemm(Device::CUDA, ta, tb, m, n, k, 0.9f, A.g(), lda, B.g(), ldb, 0.5f, C32.g(),
                      ldc);
        return err(C32);
      });
    }
  }
  for (int t = 1; t <= 2; t++) {
    const bool ta = t == 1, tb = t == 2;
    const int batch = 3, lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    const long long sa = (long long)m * k + 7, sb = (long long)k * n + 5, sc = (long long)m * n + 2;
    Twin<T> A(random_values<T>(sa * batch)), B(random_values<T>(sb * batch));
    Twin<T> C(random_values<T>(sc * batch));
    check(std::string("gemm_strided_batched ") + (ta ? "TN" : "NT") + P::tag, P::reduction, [&] {
      kernels::gemm_strided_batched(Device::CPU, ta, tb, m, n, k, 0.7f, A.c(), lda, sa, B.c(), ldb,
                                    sb, 0.0f, C.c(), ldc, sc, batch);
      kernels::gemm_strided_batched(Device::CUDA, ta, tb, m, n, k, 0.7f, A.g(), lda, sa, B.g(), ldb,
                                    sb, 0.0f, C.g(), ldc, sc, batch);
      return err(C);
    });
  }
}

template <typename T>
void check_elementwise() {
  using P = Precision<T>;
  const std::string tag = P::tag;
  const int N = 53, C = 301;
  const size_t n = (size_t)N * C;
  Twin<T> a(random_values<T>(n)), b(random_values<T>(n)), bias(random_values<T>(C));
  check("add" + tag, P::elementwise, [&] {
    std::unique_ptr<Twin<T>> out(written<T>(n));
    kernels::add(Device::CPU, out->c(), a.c(), b.c(), n);
    kernels::add(Device::CUDA, out->g(), a.g(), b.g(), n);
    return err(*out);
  });
  check("accumulate" + tag, P::elementwise, [&] {
    Twin<T> out(random_values<T>(n));
    kernels::accumulate(Device::CPU, out.c(), a.c(), n);
    kernels::accumulate(Device::CUDA, out.g(), a.g(), n);
    return err(out);
  });
  if constexpr (std::is_same<T, float>::value) {  // no bf16 scale in ops.h
    check("scale", P::elementwise, [&] {
      Twin<float> x(random_floats(n));
      kernels::scale(Device::CPU, x.c(), -0.37f, n);
      kernels::scale(Device::CUDA, x.g(), -0.37f, n);
      return err(x);
    });
  }
  check("add_bias" + tag, P::elementwise, [&] {
    Twin<T> y(random_values<T>(n));
    kernels::add_bias(Device::CPU, y.c(), bias.c(), N, C);
    kernels::add_bias(Device::CUDA, y.g(), bias.g(), N, C);
    return err(y);
  });
  check("bias_backward" + tag, P::reduction, [&] {
    Twin<T> db(random_values<T>(C));
    kernels::bias_backward(Device::CPU, db.c(), a.c(), N, C);
    kernels::bias_backward(Device::CUDA, db.g(), a.g(), N, C);
    return err(db);
  });
  check("gelu_forward" + tag, P::elementwise, [&] {
    Twin<T> x(random_values<T>(n, -5.0f, 5.0f));
    std::unique_ptr<Twin<T>> out(written<T>(n));
    kernels::gelu_forward(Device::CPU, out->c(), x.c(), n);
    kernels::gelu_forward(Device::CUDA, out->g(), x.g(), n);
    return err(*out);
  });
  check("gelu_backward" + tag, P::elementwise, [&] {
    Twin<T> x(random_values<T>(n, -5.0f, 5.0f));
    std::unique_ptr<Twin<T>> din(written<T>(n));
    kernels::gelu_backward(Device::CPU, din->c(), b.c(), x.c(), n);
    kernels::gelu_backward(Device::CUDA, din->g(), b.g(), x.g(), n);
    return err(*din);
  });
  const int F = 150;  // swiglu: in (N, 2F) = [gate | up]
  Twin<T> in(random_values<T>((size_t)N * 2 * F, -4.0f, 4.0f));
  Twin<T> dout(random_values<T>((size_t)N * F));
  check("swiglu_forward" + tag, P::elementwise, [&] {
    std::unique_ptr<Twin<T>> out(written<T>((size_t)N * F));
    kernels::swiglu_forward(Device::CPU, out->c(), in.c(), N, F);
    kernels::swiglu_forward(Device::CUDA, out->g(), in.g(), N, F);
    return err(*out);
  });
  check("swiglu_backward" + tag, P::elementwise, [&] {
    std::unique_ptr<Twin<T>> din(written<T>((size_t)N * 2 * F));
    kernels::swiglu_backward(Device::CPU, din->c(), dout.c(), in.c(), N, F);
    kernels::swiglu_backward(Device::CUDA, din->g(), dout.g(), in.g(), N, F);
    return err(*din);
  });
  for (float p : {0.0f, 0.3f}) {
    std::string p_tag = " p=" + std::string(p > 0 ? "0.3" : "0") + tag;
    check("dropout_forward (out, mask)" + p_tag, P::elementwise, [&] {
      std::unique_ptr<Twin<T>> out(written<T>(n));
      Twin<uint8_t> mask(std::vector<uint8_t>(n, 7));
      kernels::dropout_forward(Device::CPU, out->c(), mask.c(), a.c(), n, p, 99, 5);
      kernels::dropout_forward(Device::CUDA, out->g(), mask.g(), a.g(), n, p, 99, 5);
      return mismatches(mask) > 0 ? INFINITY : err(*out);
    });
    check("dropout_backward" + p_tag, P::elementwise, [&] {
      std::vector<uint8_t> bits(n);
      for (auto& bit : bits) bit = rng() % 3 != 0;
      Twin<uint8_t> mask(bits);
      std::unique_ptr<Twin<T>> din(written<T>(n));
      kernels::dropout_backward(Device::CPU, din->c(), b.c(), mask.c(), n, p);
      kernels::dropout_backward(Device::CUDA, din->g(), b.g(), mask.g(), n, p);
      return err(*din);
    });
  }
}

// V < N: tokens repeat. The bf16 token gradient sums a token's rows in chunks of 256 rows and
// 256 channels per block (elementwise.cu), so the larger shape exercises both loops.
template <typename T>
void check_embedding(int B, int S, int C, int V) {
  using P = Precision<T>;
  const int N = B * S;
  const std::string tag = (C > 256 ? " N" + std::to_string(N) + " C" + std::to_string(C) : "") +
                          std::string(P::tag);
  Twin<int> tokens(random_ints(N, 0, V - 1));
  Twin<T> wte(random_values<T>((size_t)V * C)), wpe(random_values<T>((size_t)S * C));
  Twin<T> dout(random_values<T>((size_t)N * C));
  for (bool pos : {true, false}) {
    check(std::string("embedding_forward") + (pos ? " +wpe" : "") + tag, P::elementwise, [&] {
      std::unique_ptr<Twin<T>> out(written<T>((size_t)N * C));
      kernels::embedding_forward(Device::CPU, out->c(), tokens.c(), wte.c(),
                                 pos ? wpe.c() : nullptr, N, S, C);
      kernels::embedding_forward(Device::CUDA, out->g(), tokens.g(), wte.g(),
                                 pos ? wpe.g() : nullptr, N, S, C);
      return err(*out);
    });
    check(std::string("embedding_backward") + (pos ? " +wpe" : "") + tag, P::reduction, [&] {
      Twin<T> dwte(random_values<T>((size_t)V * C)), dwpe(random_values<T>((size_t)S * C));
      kernels::embedding_backward(Device::CPU, dwte.c(), pos ? dwpe.c() : nullptr, dout.c(),
                                  tokens.c(), N, S, C);
      kernels::embedding_backward(Device::CUDA, dwte.g(), pos ? dwpe.g() : nullptr, dout.g(),
                                  tokens.g(), N, S, C);
      return worst({err(dwte), err(dwpe)});
    });
  }
  // The vocab-range table of a middle tensor-parallel rank: ids [V/3, V/3 + V/2), so some
  // tokens fall below and some above it. Positions start mid-sequence (sequence parallelism).
  const int start = V / 3, rows = V / 2, first = S / 2 + 1;
  Twin<T> wte_local(random_values<T>((size_t)rows * C));
  check("embedding_forward (vocab range)" + tag, P::layout, [&] {
    std::unique_ptr<Twin<T>> out(written<T>((size_t)N * C));
    kernels::embedding_forward(Device::CPU, out->c(), tokens.c(), wte_local.c(), start, rows, N, C);
    kernels::embedding_forward(Device::CUDA, out->g(), tokens.g(), wte_local.g(), start, rows, N,
                               C);
    return err(*out);
  });
  check("embedding_backward (vocab range)" + tag, P::reduction, [&] {
    Twin<T> dwte(random_values<T>((size_t)rows * C));
    kernels::embedding_backward(Device::CPU, dwte.c(), dout.c(), tokens.c(), start, rows, N, C);
    kernels::embedding_backward(Device::CUDA, dwte.g(), dout.g(), tokens.g(), start, rows, N, C);
    return err(dwte);
  });
  check("position_embedding_forward" + tag, P::elementwise, [&] {
    Twin<T> out(random_values<T>((size_t)N * C));
    kernels::position_embedding_forward(Device::CPU, out.c(), wpe.c(), N, S, first, C);
    kernels::position_embedding_forward(Device::CUDA, out.g(), wpe.g(), N, S, first, C);
    return err(out);
  });
  check("position_embedding_backward" + tag, P::reduction, [&] {
    Twin<T> dwpe(random_values<T>((size_t)S * C));
    kernels::position_embedding_backward(Device::CPU, dwpe.c(), dout.c(), N, S, first, C);
    kernels::position_embedding_backward(Device::CUDA, dwpe.g(), dout.g(), N, S, first, C);
    return err(dwpe);
  });
}

// The statistics mean and rstd are fp32 in both storage types.
template <typename T>
void check_norms() {
  using P = Precision<T>;
  const int N = 37;
  for (int C : {96, 1000}) {
    const size_t n = (size_t)N * C;
    const std::string tag = " C=" + std::to_string(C) + P::tag;
    // An offset mean checks the two-pass variance.
    Twin<T> x(random_values<T>(n, 2.0f, 4.0f)), w(random_values<T>(C, 0.5f, 1.5f));
    Twin<T> b(random_values<T>(C)), dout(random_values<T>(n));
    Twin<float> mean(random_floats(N), random_floats(N)), rstd(random_floats(N), random_floats(N));
    // The backward checks feed both twins the CPU forward's statistics.
    auto share_stats = [&] {
      kernels::memcpy_from_host(Device::CUDA, mean.g(), mean.c(), N * sizeof(float));
      kernels::memcpy_from_host(Device::CUDA, rstd.g(), rstd.c(), N * sizeof(float));
    };
    check("layernorm_forward" + tag, P::reduction, [&] {
      std::unique_ptr<Twin<T>> out(written<T>(n));
      kernels::layernorm_forward(Device::CPU, out->c(), mean.c(), rstd.c(), x.c(), w.c(), b.c(), N,
                                 C, 1e-5f);
      kernels::layernorm_forward(Device::CUDA, out->g(), mean.g(), rstd.g(), x.g(), w.g(), b.g(), N,
                                 C, 1e-5f);
      return worst({err(*out), err(mean), err(rstd)});
    });
    check("layernorm_backward" + tag, P::reduction, [&] {
      Twin<T> dx(random_values<T>(n)), dw(random_values<T>(C)), db(random_values<T>(C));
      share_stats();
      kernels::layernorm_backward(Device::CPU, dx.c(), dw.c(), db.c(), dout.c(), x.c(), w.c(),
                                  mean.c(), rstd.c(), N, C);
      kernels::layernorm_backward(Device::CUDA, dx.g(), dw.g(), db.g(), dout.g(), x.g(), w.g(),
                                  mean.g(), rstd.g(), N, C);
      return worst({err(dx), err(dw), err(db)});
    });
    check("rmsnorm_forward" + tag, P::reduction, [&] {
      std::unique_ptr<Twin<T>> out(written<T>(n));
      kernels::rmsnorm_forward(Device::CPU, out->c(), rstd.c(), x.c(), w.c(), N, C, 1e-5f);
      kernels::rmsnorm_forward(Device::CUDA, out->g(), rstd.g(), x.g(), w.g(), N, C, 1e-5f);
      return worst({err(*out), err(rstd)});
    });
    check("rmsnorm_backward" + tag, P::reduction, [&] {
      Twin<T> dx(random_values<T>(n)), dw(random_values<T>(C));
      share_stats();
      kernels::rmsnorm_backward(Device::CPU, dx.c(), dw.c(), dout.c(), x.c(), w.c(), rstd.c(), N,
                                C);
      kernels::rmsnorm_backward(Device::CUDA, dx.g(), dw.g(), dout.g(), x.g(), w.g(), rstd.g(), N,
                                C);
      return worst({err(dx), err(dw)});
    });
  }
}

// Layout ops without RoPE only move values (P::layout: exact in bf16); RoPE computes.
template <typename T>
void check_attention_layout() {
  using P = Precision<T>;
  const int B = 2, S = 37, A = 6, G = 2, D = 16, W = (A + 2 * G) * D;
  const size_t nq = (size_t)B * A * S * D, nkv = (size_t)B * G * S * D;
  Twin<T> qkv(random_values<T>((size_t)B * S * W));
  Twin<T> dq(random_values<T>(nq)), dk(random_values<T>(nkv)), dv(random_values<T>(nkv));
  for (float theta : {0.0f, 10000.0f}) {
    const std::string tag = std::string(theta > 0 ? " rope" : "") + P::tag;
    const double bound = theta > 0 ? P::elementwise : P::layout;
    check("qkv_split_forward" + tag, bound, [&] {
      std::unique_ptr<Twin<T>> q(written<T>(nq)), k(written<T>(nkv)), v(written<T>(nkv));
      kernels::qkv_split_forward(Device::CPU, q->c(), k->c(), v->c(), qkv.c(), B, S, A, G, D,
                                 theta);
      kernels::qkv_split_forward(Device::CUDA, q->g(), k->g(), v->g(), qkv.g(), B, S, A, G, D,
                                 theta);
      return worst({err(*q), err(*k), err(*v)});
    });
    check("qkv_split_backward" + tag, bound, [&] {
      std::unique_ptr<Twin<T>> dqkv(written<T>((size_t)B * S * W));
      kernels::qkv_split_backward(Device::CPU, dqkv->c(), dq.c(), dk.c(), dv.c(), B, S, A, G, D,
                                  theta);
      kernels::qkv_split_backward(Device::CUDA, dqkv->g(), dq.g(), dk.g(), dv.g(), B, S, A, G, D,
                                  theta);
      return err(*dqkv);
    });
  }
  check(std::string("heads_merge_forward") + P::tag, P::layout, [&] {
    std::unique_ptr<Twin<T>> out(written<T>(nq));
    kernels::heads_merge_forward(Device::CPU, out->c(), dq.c(), B, S, A, D);
    kernels::heads_merge_forward(Device::CUDA, out->g(), dq.g(), B, S, A, D);
    return err(*out);
  });
  check(std::string("heads_merge_backward") + P::tag, P::layout, [&] {
    std::unique_ptr<Twin<T>> d_o(written<T>(nq));
    kernels::heads_merge_backward(Device::CPU, d_o->c(), dq.c(), B, S, A, D);
    kernels::heads_merge_backward(Device::CUDA, d_o->g(), dq.g(), B, S, A, D);
    return err(*d_o);
  });

  const int rows = B * A, L = 300;  // L > the block size: threads loop over columns
  const size_t nss = (size_t)rows * L * L;
  Twin<T> probs(random_values<T>(nss, -4.0f, 4.0f));
  check(std::string("causal_softmax_forward (in place)") + P::tag, P::reduction, [&] {
    kernels::causal_softmax_forward(Device::CPU, probs.c(), probs.c(), rows, L, 0.7f);
    kernels::causal_softmax_forward(Device::CUDA, probs.g(), probs.g(), rows, L, 0.7f);
    return err(probs);
  });
  check(std::string("causal_softmax_backward") + P::tag, P::reduction, [&] {
    Twin<T> dprobs(random_values<T>(nss));
    std::unique_ptr<Twin<T>> dscores(written<T>(nss));
    // Both twins differentiate the same P (the CPU one's), so only the backward is compared.
    kernels::memcpy_from_host(Device::CUDA, probs.g(), probs.c(), nss * sizeof(T));
    kernels::causal_softmax_backward(Device::CPU, dscores->c(), dprobs.c(), probs.c(), rows, L,
                                     0.7f);
    kernels::causal_softmax_backward(Device::CUDA, dscores->g(), dprobs.g(), probs.g(), rows, L,
                                     0.7f);
    return err(*dscores);
  });
}

// Flash attention: tiles of 32 on the GPU, 64 on the CPU, so S not a multiple of either
// exercises partial tiles; GQA (A/G = 2) exercises the group sums of dk, dv. lse is fp32 in
// both storage types.
template <typename T>
void check_flash(int B, int A, int G, int S, int D, float p) {
  using P = Precision<T>;
  char tag[96];
  std::snprintf(tag, sizeof(tag), " B%d A%d G%d S%d D%d p=%g%s", B, A, G, S, D, p, P::tag);
  const size_t nq = (size_t)B * A * S * D, nkv = (size_t)B * G * S * D;
  const float scale = 1.0f / std::sqrt((float)D);
  Twin<T> q(random_values<T>(nq, -2.0f, 2.0f)), k(random_values<T>(nkv, -2.0f, 2.0f));
  Twin<T> v(random_values<T>(nkv)), dout(random_values<T>(nq));
  Twin<T> o(random_values<T>(nq), random_values<T>(nq));
  Twin<float> lse(random_floats((size_t)B * A * S), random_floats((size_t)B * A * S));
  check(std::string("flash_attention_forward") + tag, P::reduction, [&] {
    kernels::flash_attention_forward(Device::CPU, o.c(), lse.c(), q.c(), k.c(), v.c(), B, A, G, S,
                                     D, scale, p, 7, 11);
    kernels::flash_attention_forward(Device::CUDA, o.g(), lse.g(), q.g(), k.g(), v.g(), B, A, G, S,
                                     D, scale, p, 7, 11);
    return worst({err(o), err(lse)});
  });
  check(std::string("flash_attention_backward") + tag, P::reduction, [&] {
    // Both twins differentiate the CPU forward's o and lse.
    kernels::memcpy_from_host(Device::CUDA, o.g(), o.c(), nq * sizeof(T));
    kernels::memcpy_from_host(Device::CUDA, lse.g(), lse.c(), lse.cpu.size() * sizeof(float));
    std::unique_ptr<Twin<T>> dq(written<T>(nq)), dk(written<T>(nkv)), dv(written<T>(nkv));
    kernels::flash_attention_backward(Device::CPU, dq->c(), dk->c(), dv->c(), dout.c(), q.c(),
                                      k.c(), v.c(), o.c(), lse.c(), B, A, G, S, D, scale, p, 7, 11);
    kernels::flash_attention_backward(Device::CUDA, dq->g(), dk->g(), dv->g(), dout.g(), q.g(),
                                      k.g(), v.g(), o.g(), lse.g(), B, A, G, S, D, scale, p, 7, 11);
    return worst({err(*dq), err(*dk), err(*dv)});
  });
}

template <typename T>
void check_flash_cases() {
  check_flash<T>(2, 4, 2, 77, 40, 0.0f);
  check_flash<T>(2, 4, 2, 77, 40, 0.2f);
  check_flash<T>(1, 3, 3, 130, 64, 0.0f);
  check_flash<T>(1, 2, 1, 33, 128, 0.1f);
}

void check_loss_optimizer() {
  using P = Precision<float>;
  const int N = 24, V = 1003;
  std::vector<int> targets = random_ints(N, 0, V - 1);
  targets[3] = targets[17] = -1;  // ignored rows
  Twin<int> t(targets);
  check("cross_entropy_forward_backward", P::reduction, [&] {
    Twin<float> logits(random_floats((size_t)N * V, -6.0f, 6.0f));
    std::unique_ptr<Twin<float>> losses(written(N));
    kernels::cross_entropy_forward_backward(Device::CPU, losses->c(), logits.c(), t.c(), N, V,
                                            1.0f / N);
    kernels::cross_entropy_forward_backward(Device::CUDA, losses->g(), logits.g(), t.g(), N, V,
                                            1.0f / N);
    return worst({err(*losses), err(logits)});
  });

  // The three passes on the last rank of a 3-way vocabulary split: columns [2V, 3V), the last
  // 7 of them padding; targets on other ranks and on this one. Each pass is compared on the
  // CPU pass's inputs, copied to the GPU (as the backward checks above do).
  const int valid = V - 7, start = 2 * V;
  std::vector<int> split_targets = random_ints(N, 0, start + valid - 1);
  for (int i = 0; i < N; i += 4) split_targets[i] = start + (i * 37) % valid;  // held here
  split_targets[3] = -1;
  Twin<int> st(split_targets);
  Twin<float> logits(random_floats((size_t)N * V, -6.0f, 6.0f));
  std::unique_ptr<Twin<float>> row_max(written(N)), sum_exp(written(N)), target_logit(written(N));
  auto share = [&](Twin<float>& x) {
    kernels::memcpy_from_host(Device::CUDA, x.g(), x.c(), x.cpu.size() * sizeof(float));
  };
  check("cross_entropy_row_max", P::reduction, [&] {
    kernels::cross_entropy_row_max(Device::CPU, row_max->c(), logits.c(), N, V, valid);
    kernels::cross_entropy_row_max(Device::CUDA, row_max->g(), logits.g(), N, V, valid);
    return err(*row_max);
  });
  check("cross_entropy_sum_exp", P::reduction, [&] {
    share(*row_max);
    kernels::cross_entropy_sum_exp(Device::CPU, sum_exp->c(), target_logit->c(), logits.c(),
                                   row_max->c(), st.c(), N, V, valid, start);
    kernels::cross_entropy_sum_exp(Device::CUDA, sum_exp->g(), target_logit->g(), logits.g(),
                                   row_max->g(), st.g(), N, V, valid, start);
    return worst({err(*sum_exp), err(*target_logit)});
  });
  check("cross_entropy_finish", P::reduction, [&] {
    share(*sum_exp);
    share(*target_logit);
    std::unique_ptr<Twin<float>> losses(written(N));
    kernels::cross_entropy_finish(Device::CPU, losses->c(), logits.c(), st.c(), row_max->c(),
                                  sum_exp->c(), target_logit->c(), N, V, valid, start, 1.0f / N);
    kernels::cross_entropy_finish(Device::CUDA, losses->g(), logits.g(), st.g(), row_max->g(),
                                  sum_exp->g(), target_logit->g(), N, V, valid, start, 1.0f / N);
    return worst({err(*losses), err(logits)});
  });

  const size_t n = 100003;
  check("adamw_update", P::elementwise, [&] {
    Twin<float> params(random_floats(n)), grads(random_floats(n));
    Twin<float> m(random_floats(n, -0.1f, 0.1f)), v(random_floats(n, 0.0f, 0.01f));
    const float b1 = 0.9f, b2 = 0.95f, t3 = 3.0f;  // step 3
    const float bias1 = 1.0f - std::pow(b1, t3), bias2 = 1.0f - std::pow(b2, t3);
    kernels::adamw_update(Device::CPU, params.c(), grads.c(), m.c(), v.c(), n, 1e-3f, b1, b2, 1e-8f,
                          0.1f, bias1, bias2, 0.7f);
    kernels::adamw_update(Device::CUDA, params.g(), grads.g(), m.g(), v.g(), n, 1e-3f, b1, b2,
                          1e-8f, 0.1f, bias1, bias2, 0.7f);
    return worst({err(params), err(m), err(v)});
  });
  check("sum_squares", 1e-9, [&] {
    Twin<float> x(random_floats(3000017));
    double c = kernels::sum_squares(Device::CPU, x.c(), x.cpu.size());
    double g = kernels::sum_squares(Device::CUDA, x.g(), x.cpu.size());
    return std::isfinite(g) ? std::fabs(g - c) / std::fabs(c) : INFINITY;
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
    const float b1 = 0.9f, b2 = 0.95f, t3 = 3.0f;
    const float bias1 = 1.0f - std::pow(b1, t3), bias2 = 1.0f - std::pow(b2, t3);
    kernels::adamw_update(Device::CPU, master.c(), params->c(), grads.c(), m.c(), v.c(), n, 1e-3f,
                          b1, b2, 1e-8f, 0.1f, bias1, bias2, 0.7f);
    kernels::adamw_update(Device::CUDA, master.g(), params->g(), grads.g(), m.g(), v.g(), n, 1e-3f,
                          b1, b2, 1e-8f, 0.1f, bias1, bias2, 0.7f);
    return worst({err(master), err(m), err(v)});
  });
  check("adamw_update bf16 (params = round(master))", Precision<bf16>::elementwise,
        [&] { return err(*params); });
  check("sum_squares bf16", 1e-9, [&] {
    Twin<bf16> x(random_values<bf16>(3000017));
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
  check_gemm<float>();
  check_elementwise<float>();
  check_embedding<float>(3, 41, 96, 50);
  check_norms<float>();
  check_attention_layout<float>();
  check_flash_cases<float>();
  check_loss_optimizer();

  std::printf("---- bf16 storage ----\n");
  check_convert();
  check_gemm<bf16>();
  check_elementwise<bf16>();
  check_embedding<bf16>(3, 41, 96, 50);
  check_embedding<bf16>(4, 150, 300, 50);
  check_norms<bf16>();
  check_attention_layout<bf16>();
  check_flash_cases<bf16>();
  check_optimizer_bf16();
  if (failures > 0) {
    std::printf("op_check: %d FAILED\n", failures);
    return 1;
  }
  std::printf("op_check: all PASS\n");
  return 0;
}
