// tests/gpu/op_check_dense.cpp: op_check's rows for the dense ops: gemm (plain and strided
// batched), the elementwise ops (add, bias, GeLU, SwiGLU, dropout, also at a context-parallel
// rank's positions), the embeddings (positions also at a cp rank's) and the norms, each on
// both storage types (see op_check.cpp for the metric and the bounds).
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/gpu/op_check.h"  // defines: Twin, written, Precision, err, worst, check, ...

namespace op_check {

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
  // Rank 1 of cp 2 on sequences of 4 * 13 tokens: (B * 26, C) rows of its positions [13, 39)
  // draw the single-rank bits of those positions (index pos.element(i, C)).
  const kernels::TokenPositions pos = cp_positions(13, 1, 2);
  const size_t n_cp = (size_t)2 * pos.local * C;
  Twin<T> x_cp(random_values<T>(n_cp));
  check("dropout_forward (out, mask) p=0.3 cp" + tag, P::elementwise, [&] {
    std::unique_ptr<Twin<T>> out(written<T>(n_cp));
    Twin<uint8_t> mask(std::vector<uint8_t>(n_cp, 7));
    kernels::dropout_forward(Device::CPU, out->c(), mask.c(), x_cp.c(), n_cp, 0.3f, 99, 5, pos, C);
    kernels::dropout_forward(Device::CUDA, out->g(), mask.g(), x_cp.g(), n_cp, 0.3f, 99, 5, pos,
                             C);
    return mismatches(mask) > 0 ? INFINITY : err(*out);
  });
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
  Twin<T> wpe(random_values<T>((size_t)S * C)), dout(random_values<T>((size_t)N * C));
  // The whole vocabulary (one rank), then the vocab-range table of a middle tensor-parallel
  // rank: ids [V/3, V/3 + V/2), so some tokens fall below and some above it.
  struct Range {
    const char* name;
    int start, rows;
  };
  for (const Range& r : {Range{" (whole vocab)", 0, V}, Range{" (vocab range)", V / 3, V / 2}}) {
    Twin<T> table(random_values<T>((size_t)r.rows * C));
    check("embedding_forward" + (r.name + tag), P::layout, [&] {
      std::unique_ptr<Twin<T>> out(written<T>((size_t)N * C));
      kernels::embedding_forward(Device::CPU, out->c(), tokens.c(), table.c(), r.start, r.rows, N,
                                 C);
      kernels::embedding_forward(Device::CUDA, out->g(), tokens.g(), table.g(), r.start, r.rows,
                                 N, C);
      return err(*out);
    });
    check("embedding_backward" + (r.name + tag), P::reduction, [&] {
      Twin<T> dwte(random_values<T>((size_t)r.rows * C));
      kernels::embedding_backward(Device::CPU, dwte.c(), dout.c(), tokens.c(), r.start, r.rows, N,
                                  C);
      kernels::embedding_backward(Device::CUDA, dwte.g(), dout.g(), tokens.g(), r.start, r.rows,
                                  N, C);
      return err(dwte);
    });
  }
  // Positions from the first row, and from mid-sequence (sequence parallelism).
  for (int first : {0, S / 2 + 1}) {
    const std::string at = " first=" + std::to_string(first) + tag;
    check("position_embedding_forward" + at, P::elementwise, [&] {
      Twin<T> out(random_values<T>((size_t)N * C));
      kernels::position_embedding_forward(Device::CPU, out.c(), wpe.c(), N, S, first, C);
      kernels::position_embedding_forward(Device::CUDA, out.g(), wpe.g(), N, S, first, C);
      return err(out);
    });
    check("position_embedding_backward" + at, P::reduction, [&] {
      Twin<T> dwpe(random_values<T>((size_t)S * C));
      kernels::position_embedding_backward(Device::CPU, dwpe.c(), dout.c(), N, S, first, C);
      kernels::position_embedding_backward(Device::CUDA, dwpe.g(), dout.g(), N, S, first, C);
      return err(dwpe);
    });
  }
  // Rank 0 of cp 2: local sequences of 2 * chunk rows at positions [0, chunk) and
  // [3 chunk, 4 chunk) of a table of 4 chunk rows, from the first row and from mid-sequence.
  const int chunk = S / 4 + 1, S_cp = 2 * chunk, N_cp = B * S_cp;
  const kernels::TokenPositions pos = cp_positions(chunk, 0, 2);
  Twin<T> wpe_cp(random_values<T>((size_t)pos.length * C));
  Twin<T> dout_cp(random_values<T>((size_t)N_cp * C));
  for (int first : {0, chunk + 1}) {
    const std::string at = " cp first=" + std::to_string(first) + tag;
    check("position_embedding_forward" + at, P::elementwise, [&] {
      Twin<T> out(random_values<T>((size_t)N_cp * C));
      kernels::position_embedding_forward(Device::CPU, out.c(), wpe_cp.c(), N_cp, S_cp, first, C,
                                          pos);
      kernels::position_embedding_forward(Device::CUDA, out.g(), wpe_cp.g(), N_cp, S_cp, first, C,
                                          pos);
      return err(out);
    });
    check("position_embedding_backward" + at, P::reduction, [&] {
      Twin<T> dwpe(random_values<T>((size_t)pos.length * C));
      kernels::position_embedding_backward(Device::CPU, dwpe.c(), dout_cp.c(), N_cp, S_cp, first,
                                           C, pos);
      kernels::position_embedding_backward(Device::CUDA, dwpe.g(), dout_cp.g(), N_cp, S_cp, first,
                                           C, pos);
      return err(dwpe);
    });
  }
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

// The two storage types main runs.
template void check_gemm<float>();
template void check_gemm<bf16>();
template void check_gemm<kernels::fp16>();
template void check_elementwise<float>();
template void check_elementwise<bf16>();
template void check_elementwise<kernels::fp16>();
template void check_embedding<float>(int, int, int, int);
template void check_embedding<bf16>(int, int, int, int);
template void check_norms<float>();
template void check_norms<bf16>();
template void check_norms<kernels::fp16>();

}  // namespace op_check
