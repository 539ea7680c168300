// tests/gpu/op_check_attention.cpp: op_check's rows for attention: the layout ops (qkv split
// with and without RoPE, heads merge), the materialised causal softmax, and flash attention
// forward and backward on shapes that exercise partial tiles and GQA, each on both storage
// types (see op_check.cpp for the metric and the bounds).
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/gpu/op_check.h"  // defines: Twin, written, Precision, err, worst, check, ...

namespace op_check {

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

// The two storage types main runs.
template void check_attention_layout<float>();
template void check_attention_layout<bf16>();
template void check_flash_cases<float>();
template void check_flash_cases<bf16>();

}  // namespace op_check
