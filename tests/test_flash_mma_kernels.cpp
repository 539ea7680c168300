// tests/test_flash_mma_kernels.cpp: the tensor-core flash attention kernels
// (kernels/cuda/flash_mma_forward.cu, flash_mma_backward.cu) emulated on the CPU, warp by warp,
// against attention in double.
//
// The emulation (tests/flash_mma_emulation.h) follows each kernel step for step; what it cannot
// see is listed in tests/test_flash_mma_layout.cpp.
//
// The reference is the formula in double (tests/test_kernels_attention.cpp's style): for each
// row i, the keys j < visible(i) with the dropout keep bits of kernels/math.h. Bounds (the
// op_check ones): o, dq, dk, dv 1e-2 of the tensor's largest value (P and dS are rounded to
// bf16 before their second product: 2^-9 relative per term; outputs round to bf16), lse 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/flash_mma_tiles.h"
#include "kernels/cuda/mma_layout.h"
#include "kernels/math.h"
#include "tests/flash_mma_emulation.h"  // emulate_forward, emulate_dq, emulate_dkdv, ...
#include "tests/flash_mma_warp.h"

namespace {

using namespace flash_mma_test;
using kernels::AttentionBlock;
using kernels::AttentionRows;
using kernels::TokenPositions;
namespace fm = kernels::cuda::flash_mma;

// ---- the reference, in double -----------------------------------------------------------------

// One pass over local tensors of q_local (k_local) rows per head whose views start at rows
// q_first (k_first): the head stride is the local rows times D.
struct Pass {
  std::string name;
  AttentionBlock blk;
  int q_first = 0, k_first = 0, q_local = 0, k_local = 0;
};

Pass whole(int S, int A, int D, bool causal) {
  Pass p;
  p.name = causal ? "causal" : "non-causal";
  p.blk = kernels::whole_sequence(S, A, D);
  p.blk.causal = causal;
  p.q_local = p.k_local = S;
  return p;
}
// Context parallelism cp = 2 over 4 chunks of c rows (tests/gpu/op_check_attention.cpp's
// passes): rank r holds chunks r and 3 - r.
TokenPositions zigzag(int c, int r) {
  TokenPositions t;
  t.chunk = c;
  t.start[0] = r * c;
  t.start[1] = (3 - r) * c;
  t.local = 2 * c;
  t.length = 4 * c;
  return t;
}
TokenPositions chunk_of(int c, int r, int half) {
  TokenPositions t;
  t.chunk = c;
  t.start[0] = zigzag(c, r).start[half];
  t.start[1] = t.start[0] + c;
  return t;
}
Pass cp_pass(const std::string& name, int c, int A, int D) {
  Pass p;
  p.name = name;
  p.q_local = p.k_local = 2 * c;
  const long long stride = 2LL * c * D;
  p.blk.dropout_heads = A;
  p.blk.dropout_length = 4 * c;
  if (name == "cp diagonal") {  // rank 0 against itself: positions [0, c) and [3c, 4c)
    p.blk.q = AttentionRows{2 * c, stride, zigzag(c, 0)};
    p.blk.k = AttentionRows{2 * c, stride, zigzag(c, 0)};
  } else if (name == "cp q half") {  // rank 0's second chunk against rank 1's rows: all seen
    p.blk.q = AttentionRows{c, stride, chunk_of(c, 0, 1)};
    p.blk.k = AttentionRows{2 * c, stride, zigzag(c, 1)};
    p.q_first = c;
  } else {  // "cp no key": rank 0's rows against rank 1's first chunk: chunk 0 sees nothing
    p.blk.q = AttentionRows{2 * c, stride, zigzag(c, 0)};
    p.blk.k = AttentionRows{c, stride, chunk_of(c, 1, 0)};
  }
  return p;
}

// Queries at positions start .. start + q_rows - 1 against keys at 0 .. k_rows - 1, causal: the
// query tiles' boundaries fall off the key tiles' (dkdv's first_query_seeing matters).
Pass offset_pass(int start, int q_rows, int k_rows, int A, int D) {
  Pass p;
  p.name = "offset " + std::to_string(start);
  p.q_local = q_rows;
  p.k_local = k_rows;
  TokenPositions qp;
  qp.start[0] = start;
  p.blk.q = AttentionRows{q_rows, (long long)q_rows * D, qp};
  p.blk.k = AttentionRows{k_rows, (long long)k_rows * D, TokenPositions()};
  p.blk.dropout_heads = A;
  p.blk.dropout_length = std::max(start + q_rows, k_rows);
  return p;
}

struct Tensors {  // widened inputs of one case, full local tensors
  std::vector<double> q, k, v, dout;
};
size_t q_row(const Call& a, const Pass& p, size_t bh, int i) {
  return (bh * p.q_local + p.q_first + i) * (size_t)a.D;
}
size_t k_row(const Call& a, const Pass& p, size_t bg, int j) {
  return (bg * p.k_local + p.k_first + j) * (size_t)a.D;
}
double dot(const double* x, const double* y, int n) {
  double s = 0.0;
  for (int c = 0; c < n; c++) s += x[c] * y[c];
  return s;
}
bool keeps(const Call& a, int b, int h, int i, int j) {
  return a.p <= 0.0f ||
         kernels::dropout_keep(a.seed, a.stream, a.blk.dropout_index(b, h, i, j), a.p);
}

// o (the q view's rows) and lse: s_ij = scale q_i . k_j for j < visible(i), lse = log sum e^s,
// o_i = sum_j e^(s_ij - lse_i) keep_ij / (1-p) v_j; a row that sees no key: o 0, lse -inf.
void reference_forward(std::vector<double>& o, std::vector<double>& lse, const Tensors& x,
                       const Call& a, const Pass& p) {
  for (int b = 0; b < a.B; b++)
    for (int h = 0; h < a.A; h++) {
      const size_t bh = (size_t)b * a.A + h, bg = (size_t)b * a.G + h / (a.A / a.G);
      for (int i = 0; i < a.blk.q.rows; i++) {
        const int n = a.blk.visible(i);
        double* o_i = &o[q_row(a, p, bh, i)];
        double& l_i = lse[bh * p.q_local + p.q_first + i];
        std::fill(o_i, o_i + a.D, 0.0);
        if (n == 0) {
          l_i = -INFINITY;
          continue;
        }
        std::vector<double> s(n);
        double m = -INFINITY, sum = 0.0;
        for (int j = 0; j < n; j++) {
          s[j] = a.scale * dot(&x.q[q_row(a, p, bh, i)], &x.k[k_row(a, p, bg, j)], a.D);
          m = std::max(m, s[j]);
        }
        for (int j = 0; j < n; j++) sum += std::exp(s[j] - m);
        l_i = m + std::log(sum);
        for (int j = 0; j < n; j++) {
          if (!keeps(a, b, h, i, j)) continue;
          const double w = std::exp(s[j] - l_i) / (1.0 - a.p);
          for (int c = 0; c < a.D; c++) o_i[c] += w * x.v[k_row(a, p, bg, j) + c];
        }
      }
    }
}

// The backward's increments of dq, dk, dv from o, lse (what the kernels read):
// P = e^(scale s - lse), z = keep/(1-p), dS = P (z dO.v - dO.o), dV += P z dO, dK += scale dS q,
// dQ += scale dS k.
void reference_backward(std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv,
                        const Tensors& x, const std::vector<double>& o,
                        const std::vector<double>& lse, const Call& a, const Pass& p) {
  for (int b = 0; b < a.B; b++)
    for (int h = 0; h < a.A; h++) {
      const size_t bh = (size_t)b * a.A + h, bg = (size_t)b * a.G + h / (a.A / a.G);
      for (int i = 0; i < a.blk.q.rows; i++) {
        const size_t qi = q_row(a, p, bh, i);
        const double delta = dot(&x.dout[qi], &o[qi], a.D);
        const double l_i = lse[bh * p.q_local + p.q_first + i];
        for (int j = 0; j < a.blk.visible(i); j++) {
          const size_t kj = k_row(a, p, bg, j);
          const double P = std::exp(a.scale * dot(&x.q[qi], &x.k[kj], a.D) - l_i);
          const double z = keeps(a, b, h, i, j) ? 1.0 / (1.0 - a.p) : 0.0;
          const double dS = P * (z * dot(&x.dout[qi], &x.v[kj], a.D) - delta);
          for (int c = 0; c < a.D; c++) {
            dv[kj + c] += P * z * x.dout[qi + c];
            dk[kj + c] += a.scale * dS * x.q[qi + c];
            dq[qi + c] += a.scale * dS * x.k[kj + c];
          }
        }
      }
    }
}

// ---- the cases -------------------------------------------------------------------------------

std::vector<double> widen(const Bits& x) {
  std::vector<double> out(x.size());
  for (size_t e = 0; e < x.size(); e++) out[e] = fl(x[e]);
  return out;
}
Bits random_bits(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Bits x(n);
  for (uint16_t& e : x) e = bf(d(rng));
  return x;
}
// max |got - want| / max |want| over the elements `in` selects; inf on a NaN; and whether the
// elements it does not select kept their bits (`before`).
template <typename Got, typename Sel>
double rel_err(const Got& got, const std::vector<double>& want, Sel in) {
  double diff = 0.0, scale = 0.0;
  for (size_t e = 0; e < want.size(); e++) {
    if (!in(e)) continue;
    const double g = got(e);
    if (std::isnan(g)) return INFINITY;
    diff = std::max(diff, std::fabs(g - want[e]));
    scale = std::max(scale, std::fabs(want[e]));
  }
  return scale > 0.0 ? diff / scale : diff;
}

struct Case {
  int B, A, G, D;
  float p;
  Pass pass;
};

void run_case(const Case& cs) {
  const Pass& pass = cs.pass;
  const Call a{cs.B, cs.A, cs.G, cs.D, 1.0f / std::sqrt((float)cs.D), cs.p, 7, 11, pass.blk};
  const int D = cs.D;
  const size_t nq = (size_t)cs.B * cs.A * pass.q_local * D;
  const size_t nk = (size_t)cs.B * cs.G * pass.k_local * D;
  const size_t nl = (size_t)cs.B * cs.A * pass.q_local;
  const size_t qo = (size_t)pass.q_first * D, ko = (size_t)pass.k_first * D, lo = pass.q_first;
  auto in_q = [&](size_t e) {  // element e of a q-view tensor of D per row lies in the view
    const size_t i = (e / D) % pass.q_local;
    return i >= (size_t)pass.q_first && i < (size_t)(pass.q_first + pass.blk.q.rows);
  };
  auto in_l = [&](size_t r) { return in_q(r * D); };
  auto in_k = [&](size_t e) {
    const size_t j = (e / D) % pass.k_local;
    return j >= (size_t)pass.k_first && j < (size_t)(pass.k_first + pass.blk.k.rows);
  };
  const Bits q = random_bits(nq, -2.0f, 2.0f), k = random_bits(nk, -2.0f, 2.0f);
  const Bits v = random_bits(nk, -1.0f, 1.0f), dout = random_bits(nq, -1.0f, 1.0f);
  const Tensors x{widen(q), widen(k), widen(v), widen(dout)};
  const std::string name = pass.name + " B" + std::to_string(cs.B) + " A" + std::to_string(cs.A) +
                           " G" + std::to_string(cs.G) + " S" + std::to_string(pass.q_local) +
                           " D" + std::to_string(D) + " p" + std::to_string(cs.p).substr(0, 3);

  // Forward: outputs poisoned (NaN); rows outside the view must keep the poison.
  Bits o(nq, 0x7FC0);
  std::vector<float> lse(nl, NAN);
  emulate_forward(o.data() + qo, lse.data() + lo, q.data() + qo, k.data() + ko, v.data() + ko, a);
  std::vector<double> o_ref(nq, 0.0), lse_ref(nl, 0.0);
  reference_forward(o_ref, lse_ref, x, a, pass);
  const double err_o = rel_err([&](size_t e) { return (double)fl(o[e]); }, o_ref, in_q);
  bool lse_inf_agree = true, outside_kept = true;
  std::vector<double> lse_cmp(nl, 0.0), lse_got(nl, 0.0);
  for (size_t r = 0; r < nl; r++) {
    if (!in_l(r)) {
      outside_kept = outside_kept && std::isnan(lse[r]);
      continue;
    }
    lse_inf_agree = lse_inf_agree && ((lse[r] == -INFINITY) == (lse_ref[r] == -INFINITY));
    if (lse_ref[r] != -INFINITY) lse_cmp[r] = lse_ref[r], lse_got[r] = lse[r];
  }
  for (size_t e = 0; e < nq; e++) outside_kept = outside_kept && (in_q(e) || o[e] == 0x7FC0);
  const double err_lse = rel_err([&](size_t r) { return lse_got[r]; }, lse_cmp, in_l);

  // Backward on the reference's o (rounded to bf16) and lse (fp32), onto initial values of the
  // increments' own size, so that the "+=" is checked and the increments are not drowned.
  Bits o_in(nq, 0);
  std::vector<float> lse_in(nl, 0.0f);
  for (size_t e = 0; e < nq; e++) o_in[e] = bf((float)o_ref[e]);
  for (size_t r = 0; r < nl; r++) lse_in[r] = (float)lse_ref[r];
  std::vector<double> o_used = widen(o_in);
  std::vector<double> ddq(nq, 0.0), ddk(nk, 0.0), ddv(nk, 0.0);
  reference_backward(ddq, ddk, ddv, x, o_used, lse_ref, a, pass);
  auto biggest = [](const std::vector<double>& t) {
    double m = 0.0;
    for (double e : t) m = std::max(m, std::fabs(e));
    return (float)std::max(m, 1e-3);
  };
  std::vector<float> dq(nq);
  {
    std::uniform_real_distribution<float> d(-biggest(ddq), biggest(ddq));
    for (float& e : dq) e = d(rng);
  }
  Bits dk = random_bits(nk, -biggest(ddk), biggest(ddk));
  Bits dv = random_bits(nk, -biggest(ddv), biggest(ddv));
  std::vector<double> dq_ref(nq), dk_ref(nk), dv_ref(nk);
  for (size_t e = 0; e < nq; e++) dq_ref[e] = dq[e] + ddq[e];
  for (size_t e = 0; e < nk; e++) dk_ref[e] = fl(dk[e]) + ddk[e], dv_ref[e] = fl(dv[e]) + ddv[e];
  const std::vector<float> delta = emulate_delta(dout.data() + qo, o_in.data() + qo, a);
  emulate_dq(dq.data() + qo, dout.data() + qo, q.data() + qo, k.data() + ko, v.data() + ko,
             lse_in.data() + lo, delta.data(), a);
  const int parts = D == 128 ? 2 : 1;
  Bits dk2 = dk, dv2 = dv;  // the sm_80 variant (quarters at D 128)
  emulate_dkdv(dk.data() + ko, dv.data() + ko, dout.data() + qo, q.data() + qo, k.data() + ko,
               v.data() + ko, lse_in.data() + lo, delta.data(), a, parts);
  if (D == 128) {
    emulate_dkdv(dk2.data() + ko, dv2.data() + ko, dout.data() + qo, q.data() + qo,
                 k.data() + ko, v.data() + ko, lse_in.data() + lo, delta.data(), a, 4);
  } else {
    dk2 = dk, dv2 = dv;  // D 64 is one part on both
  }
  auto all = [](size_t) { return true; };
  const double err_dq = rel_err([&](size_t e) { return (double)dq[e]; }, dq_ref, all);
  const double err_dk = rel_err([&](size_t e) { return (double)fl(dk[e]); }, dk_ref, all);
  const double err_dv = rel_err([&](size_t e) { return (double)fl(dv[e]); }, dv_ref, all);
  const double err_dk2 = rel_err([&](size_t e) { return (double)fl(dk2[e]); }, dk_ref, all);
  const double err_dv2 = rel_err([&](size_t e) { return (double)fl(dv2[e]); }, dv_ref, all);
  // Outside the views the backward leaves the initial values: dq's rows exactly (fp32), and
  // dk, dv's ones too (the reference adds 0 there), so `all` covers them.
  (void)in_k;
  std::printf("  %-44s o %.2e lse %.2e dq %.2e dk %.2e dv %.2e (quarters: dk %.2e dv %.2e)\n",
              name.c_str(), err_o, err_lse, err_dq, err_dk, err_dv, err_dk2, err_dv2);
  EXPECT_TRUE(lse_inf_agree) << name;
  EXPECT_TRUE(outside_kept) << name;
  EXPECT_LE(err_o, 1e-2) << name;
  EXPECT_LE(err_lse, 1e-5) << name;
  EXPECT_LE(err_dq, 1e-2) << name;
  EXPECT_LE(err_dk, 1e-2) << name;
  EXPECT_LE(err_dv, 1e-2) << name;
  EXPECT_LE(err_dk2, 1e-2) << name;
  EXPECT_LE(err_dv2, 1e-2) << name;
}

// The tile bookkeeping against brute force: first_query_seeing is the first row whose prefix
// passes key j, and a tile without the mask has every row present and seeing every column.
TEST(FlashMmaTiles, BookkeepingIsBruteForce) {
  std::vector<Pass> passes = {whole(150, 2, 64, true), whole(150, 2, 64, false),
                              cp_pass("cp diagonal", 37, 2, 64), cp_pass("cp q half", 37, 2, 64),
                              cp_pass("cp no key", 37, 2, 64), offset_pass(65, 100, 200, 2, 64)};
  for (const Pass& p : passes) {
    const AttentionBlock& blk = p.blk;
    for (int j = 0; j <= blk.k.rows; j++) {
      int want = blk.q.rows;
      for (int i = blk.q.rows - 1; i >= 0; i--)
        if (blk.visible(i) > j) want = i;
      EXPECT_EQ(fm::first_query_seeing(blk, j), want) << p.name << " key " << j;
    }
    for (int r0 = 0; r0 < blk.q.rows; r0 += 16)
      for (int c0 = 0; c0 < blk.k.rows; c0 += 16) {
        if (fm::tile_needs_mask(c0, 16, blk.visible(r0), r0, 16, blk.q.rows)) continue;
        for (int i = r0; i < r0 + 16; i++) {
          ASSERT_LT(i, blk.q.rows) << p.name;
          EXPECT_GE(blk.visible(i), c0 + 16) << p.name << " row " << i;
        }
      }
  }
}

TEST(FlashMmaKernels, WholeSequence) {
  run_case({1, 4, 2, 64, 0.0f, whole(200, 4, 64, true)});   // GQA, 2 query tiles, 4 key tiles
  run_case({2, 4, 2, 64, 0.1f, whole(77, 4, 64, true)});    // dropout, odd length, B 2
  run_case({1, 2, 1, 128, 0.0f, whole(77, 2, 128, false)});  // non-causal, D 128
  run_case({1, 2, 2, 128, 0.1f, whole(130, 2, 128, true)});  // dropout, D 128
}

TEST(FlashMmaKernels, ContextParallelPasses) {
  for (const char* name : {"cp diagonal", "cp q half", "cp no key"}) {
    run_case({1, 4, 2, 64, 0.0f, cp_pass(name, 48, 4, 64)});
    run_case({1, 2, 1, 128, 0.1f, cp_pass(name, 37, 2, 128)});  // odd chunks
  }
  run_case({1, 4, 2, 64, 0.1f, offset_pass(65, 100, 200, 4, 64)});
  run_case({1, 2, 1, 128, 0.0f, offset_pass(191, 70, 300, 2, 128)});
}

}  // namespace
