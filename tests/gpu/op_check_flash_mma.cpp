// tests/gpu/op_check_flash_mma.cpp: op_check's rows for the tensor-core flash attention
// (kernels/cuda/flash_mma.h: flash_mma_forward, flash_mma_backward, bf16 storage) against the
// CPU twin on the widened bf16 inputs (flash_attention_forward<Device::CPU> / _backward, the
// bf16 dispatcher's CPU path: widen, compute in fp32, round the bf16 outputs once).
//
// Cases: causal and non-causal whole sequences, GQA (A 8, G 2), dropout 0.1, lengths that are
// no multiple of any tile (77, 200, 513, 1000: the kernels' tiles are 64 and 128 rows), D 64 and
// 128, and context parallelism's passes of cp = 2 (zig-zag positions, a half-block q view, a
// half-block k view without the causal mask, a pass whose first chunk sees no key: lse -inf,
// o 0). The "=" outputs (o, lse) start as NaN on the GPU side in the view's rows (rows outside
// a view hold the same values on both sides and must keep them); dq, dk, dv are "+=" and start
// from the same random values on both sides, of the size of the increments (a first CPU pass
// from zero measures it), so that neither a "=" nor a lost increment can pass.
//
// Bounds: o, dq, dk, dv 1e-2 of the tensor's largest value. The kernels round P (and dS) to
// bf16 before the second product (2^-9 relative per term; the terms' errors are independent and
// mostly cancel), and each side rounds its bf16 outputs once (up to 2^-9 of the element each):
// at most ~6e-3 apart. lse is fp32 on both sides from the same scores: the fp32 bound 1e-3.
// Each row prints the error it measured (on the emulated device too: scripts/gpu_check.sh
// --emulated). Plus: the backward twice
// from the same values gives the same bits (no atomics), and the entry points decline (return
// false, launch nothing) what they do not handle.
//
// defines: op_check::check_flash_mma_whole, check_flash_mma_cp (the rows; op_check's main
//          runs them as two families after check_flash_cases<bf16>, --attention-check alone)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ops.h"              // the CPU twins: flash_attention_forward<Device::CPU>, ...
#include "kernels/cuda/flash_mma.h"  // the kernels under test
#include "tests/gpu/op_check.h"      // Twin, check, err, err_lse, cp_positions, ...

namespace op_check {

using kernels::AttentionBlock;
using kernels::AttentionRows;
using kernels::TokenPositions;

namespace {

constexpr double kBound = 1e-2, kBoundLse = 1e-3;
const uint16_t kNaN = 0x7FC0;  // a bf16 quiet NaN

// One pass over local tensors of q_local (k_local) rows per head, views from rows q_first
// (k_first) (op_check_attention.cpp's Pass).
// A whole sequence, causal or not (op_check.h's whole_pass is causal).
Pass whole(int S, int A, int D, bool causal) {
  Pass p = whole_pass(S, A, D);
  p.name = causal ? " causal" : " non-causal";
  p.blk.causal = causal;
  return p;
}

// Element e of a (heads, local, D) tensor lies in the view's rows [first, first + rows).
bool in_view(size_t e, int D, int local, int first, int rows) {
  const int i = (int)((e / D) % local);
  return i >= first && i < first + rows;
}

float largest(const Floats& x) {
  float m = 0.0f;
  for (float v : x) m = std::max(m, std::fabs(v));
  return std::max(m, 1e-3f);
}

void require(bool handled, const char* what) {
  if (!handled) throw std::runtime_error(std::string(what) + " declined the shape");
}

void check_case(int B, int A, int G, int D, float p, const Pass& pass, bool twice) {
  const AttentionBlock& blk = pass.blk;
  char tag[128];
  std::snprintf(tag, sizeof(tag), " B%d A%d G%d S%d D%d p=%g%s bf16", B, A, G, pass.q_local, D, p,
                pass.name.c_str());
  const size_t nq = (size_t)B * A * pass.q_local * D, nkv = (size_t)B * G * pass.k_local * D;
  const size_t nl = (size_t)B * A * pass.q_local;
  const size_t qo = (size_t)pass.q_first * D, ko = (size_t)pass.k_first * D, lo = pass.q_first;
  const float scale = 1.0f / std::sqrt((float)D);
  const uint64_t seed = 7, stream = 11;
  auto q_row = [&](size_t e) { return in_view(e, D, pass.q_local, pass.q_first, blk.q.rows); };

  Twin<bf16> q(random_values<bf16>(nq, -2.0f, 2.0f)), k(random_values<bf16>(nkv, -2.0f, 2.0f));
  Twin<bf16> v(random_values<bf16>(nkv)), dout(random_values<bf16>(nq));
  const Floats qf = widen(q.cpu), kf = widen(k.cpu), vf = widen(v.cpu), df = widen(dout.cpu);

  // ---- forward: NaN in the GPU's view rows
  Bf16s o0 = random_values<bf16>(nq), o0_gpu = o0;
  Floats l0 = random_floats(nl), l0_gpu = l0;
  for (size_t e = 0; e < nq; e++)
    if (q_row(e)) o0_gpu[e].bits = kNaN;
  for (size_t r = 0; r < nl; r++)
    if (q_row(r * D)) l0_gpu[r] = NAN;
  Twin<bf16> o(o0, o0_gpu);
  Twin<float> lse(l0, l0_gpu);
  check("flash_mma_forward (o)" + std::string(tag), kBound, [&] {
    Floats o32 = widen(o.cpu);
    kernels::flash_attention_forward<Device::CPU>(o32.data() + qo, lse.c() + lo, qf.data() + qo,
                                          kf.data() + ko, vf.data() + ko, B, A, G, D, scale, p,
                                          seed, stream, blk);
    o.cpu = round_all(o32);
    require(kernels::cuda::flash_mma_forward(o.g() + qo, lse.g() + lo, q.g() + qo, k.g() + ko,
                                             v.g() + ko, B, A, G, D, scale, p, seed, stream, blk),
            "flash_mma_forward");
    return err(o);
  });
  check("flash_mma_forward (lse)" + std::string(tag), kBoundLse, [&] { return err_lse(lse); });

  // ---- backward: both take the CPU forward's o and lse
  kernels::memcpy_from_host(Device::CUDA, o.g(), o.cpu.data(), nq * sizeof(bf16));
  kernels::memcpy_from_host(Device::CUDA, lse.g(), lse.c(), nl * sizeof(float));
  const Floats of = widen(o.cpu);
  auto cpu_backward = [&](Floats& dq, Floats& dk, Floats& dv) {
    kernels::flash_attention_backward<Device::CPU>(dq.data() + qo, dk.data() + ko, dv.data() + ko,
                                           df.data() + qo, qf.data() + qo, kf.data() + ko,
                                           vf.data() + ko, of.data() + qo, lse.c() + lo, B, A, G,
                                           D, scale, p, seed, stream, blk);
  };
  Floats inc_q(nq, 0.0f), inc_k(nkv, 0.0f), inc_v(nkv, 0.0f);  // the increments' size
  cpu_backward(inc_q, inc_k, inc_v);
  Twin<float> dq(random_floats(nq, -largest(inc_q), largest(inc_q)));
  Twin<bf16> dk(random_values<bf16>(nkv, -largest(inc_k), largest(inc_k)));
  Twin<bf16> dv(random_values<bf16>(nkv, -largest(inc_v), largest(inc_v)));
  const Floats dq0 = dq.cpu;
  const Bf16s dk0 = dk.cpu, dv0 = dv.cpu;
  auto gpu_backward = [&](float* dq_g, bf16* dk_g, bf16* dv_g) {
    require(kernels::cuda::flash_mma_backward(dq_g + qo, dk_g + ko, dv_g + ko, dout.g() + qo,
                                              q.g() + qo, k.g() + ko, v.g() + ko, o.g() + qo,
                                              lse.g() + lo, B, A, G, D, scale, p, seed, stream,
                                              blk),
            "flash_mma_backward");
  };
  check("flash_mma_backward (+=: dq, dk, dv)" + std::string(tag), kBound, [&] {
    Floats dk32 = widen(dk.cpu), dv32 = widen(dv.cpu);
    cpu_backward(dq.cpu, dk32, dv32);
    dk.cpu = round_all(dk32);
    dv.cpu = round_all(dv32);
    gpu_backward(dq.g(), dk.g(), dv.g());
    return worst({err(dq), err(dk), err(dv)});
  });
  if (!twice) return;
  check("flash_mma_backward twice: bits that differ" + std::string(tag), 0.0, [&] {
    Twin<float> dq2(dq0);
    Twin<bf16> dk2(dk0), dv2(dv0);
    gpu_backward(dq2.g(), dk2.g(), dv2.g());
    const Floats a = dq.fetch(), b = dq2.fetch();
    const Bf16s ka = dk.fetch(), kb = dk2.fetch(), va = dv.fetch(), vb = dv2.fetch();
    double n = std::memcmp(a.data(), b.data(), nq * sizeof(float)) != 0;
    n += std::memcmp(ka.data(), kb.data(), nkv * sizeof(bf16)) != 0;
    n += std::memcmp(va.data(), vb.data(), nkv * sizeof(bf16)) != 0;
    return n;
  });
}

// The entry points decline (false, nothing launched) D other than 64 and 128, A % G != 0,
// p >= 1 and pointers off 16 bytes; they take D 64 and 128.
void check_declines() {
  check("flash_mma declines what it does not handle bf16", 0.0, [] {
    const int S = 40;
    const size_t n = (size_t)2 * S * 128 + 8;
    Twin<bf16> x(random_values<bf16>(n));
    Twin<float> l(random_floats(2 * S)), g(random_floats(n));
    double wrong = 0;
    auto fwd = [&](int D, int A, int G, float p, size_t off) {
      return kernels::cuda::flash_mma_forward(x.g() + off, l.g(), x.g(), x.g(), x.g(), 1, A, G, D,
                                              0.1f, p, 1, 2, kernels::whole_sequence(S, A, D));
    };
    auto bwd = [&](int D, size_t off) {
      return kernels::cuda::flash_mma_backward(g.g(), x.g(), x.g(), x.g(), x.g() + off, x.g(),
                                               x.g(), x.g(), l.g(), 1, 2, 2, D, 0.1f, 0.0f, 1, 2,
                                               kernels::whole_sequence(S, 2, D));
    };
    wrong += fwd(40, 2, 2, 0.0f, 0);    // D 40
    wrong += fwd(64, 3, 2, 0.0f, 0);    // A % G
    wrong += fwd(64, 2, 2, 1.0f, 0);    // p = 1
    wrong += fwd(64, 2, 2, 0.0f, 1);    // o 2 bytes off
    wrong += bwd(96, 0);                // D 96
    wrong += bwd(128, 4);               // q 8 bytes off
    wrong += !kernels::cuda::flash_mma_handles(2, 2, 128, 0.1f, 0.0f,
                                               kernels::whole_sequence(S, 2, 128));
    kernels::synchronize(Device::CUDA);
    return wrong;
  });
}

}  // namespace

// Two families (op_check.cpp runs them side by side: on the emulated device they are its
// costliest rows): whole sequences, then context parallelism's passes and the declined shapes.
void check_flash_mma_whole() {
  std::printf("---- flash-mma (tensor cores, bf16): %s vs the CPU twin ----\n",
              kernels::cuda::flash_mma_name());
  struct Shape {
    int B, A, G, S, D;
    float p;
    bool causal, twice;
  };
  for (const Shape& s : {Shape{2, 8, 2, 200, 64, 0.0f, true, false},
                         Shape{2, 8, 2, 200, 128, 0.1f, true, true},
                         Shape{1, 8, 2, 77, 128, 0.0f, true, false},
                         Shape{1, 8, 2, 77, 64, 0.1f, true, false},
                         Shape{1, 4, 4, 77, 128, 0.0f, false, false},
                         Shape{2, 8, 2, 200, 64, 0.1f, false, false},
                         Shape{1, 4, 2, 513, 64, 0.1f, true, false},
                         Shape{1, 2, 1, 1000, 128, 0.0f, true, true}})
    check_case(s.B, s.A, s.G, s.D, s.p, whole(s.S, s.A, s.D, s.causal), s.twice);
}

void check_flash_mma_cp() {
  // cp = 2 with chunks of 75 rows (views of 75 and 150 rows: partial tiles everywhere)
  for (int D : {64, 128})
    for (const Pass& pass : cp_passes(75, 8, D))
      check_case(2, 8, 2, D, D == 64 ? 0.0f : 0.1f, pass, false);
  check_declines();
}

}  // namespace op_check
