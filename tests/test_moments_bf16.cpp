// tests/test_moments_bf16.cpp: Adam's moments stored in bf16 (Megatron's precision-aware
// optimizer, --exp-avg-dtype / --exp-avg-sq-dtype bf16; kernels/math.h adamw_step_stored), as
// Transformer Engine's FusedAdam keeps them: loaded and widened exactly, the fp32 update, the
// store rounded to nearest with ties to even (common/multi_tensor/adam.cu: static_cast<bf16>).
// The store's ties; the CPU op against widen / fp32 step / round by hand, element by element,
// for both moments in bf16 and for each one alone; a step that would move a moment by less
// than half a bf16 ulp leaves the stored moment where it was.
#include <gtest/gtest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>
#include "kernels/math.h"
#include "kernels/ops.h"

namespace {
using kernels::bf16;
using kernels::Device;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(MomentsBf16, StoreRoundsToNearestTiesToEven) {
  bf16 b[1];
  // 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7: the even one, 1 (mantissa 0)
  kernels::store_moment(b, 0, from_bits(0x3F808000u), true);
  EXPECT_EQ(b[0].bits, 0x3F80u);
  // 1 + 3 x 2^-8 halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up
  kernels::store_moment(b, 0, from_bits(0x3F818000u), true);
  EXPECT_EQ(b[0].bits, 0x3F82u);
  // just above a tie rounds up, just below down
  kernels::store_moment(b, 0, from_bits(0x3F808001u), true);
  EXPECT_EQ(b[0].bits, 0x3F81u);
  kernels::store_moment(b, 0, from_bits(0x3F817FFFu), true);
  EXPECT_EQ(b[0].bits, 0x3F81u);
  // a second moment's tiny values stay normal-range in bf16 (fp32's exponent): 1e-30 kept
  kernels::store_moment(b, 0, 1e-30f, true);
  EXPECT_NEAR(kernels::load_moment(b, 0, true), 1e-30f, 1e-32f);
  // the load widens exactly
  b[0].bits = 0x3F81u;
  EXPECT_EQ(kernels::load_moment(b, 0, true), 1.0f + 1.0f / 128);
  float f[1];
  kernels::store_moment(f, 0, from_bits(0x3F808001u), false);  // fp32: as is
  EXPECT_EQ(kernels::load_moment(f, 0, false), from_bits(0x3F808001u));
}

// The CPU op (two runs, weight decay on the first) against the formula by hand.
void expect_op_matches_by_hand(bool m16, bool v16) {
  const int n = 4099, split = 1500;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> master(n), grads(n), m32(n), v32(n);
  std::vector<bf16> m(n), v(n);
  for (int i = 0; i < n; ++i) {
    master[i] = u(rng), grads[i] = u(rng);
    m[i] = kernels::to_bf16(0.1f * u(rng)), v[i] = kernels::to_bf16(0.01f * std::fabs(u(rng)));
    m32[i] = kernels::to_float(m[i]) + 1e-6f * u(rng);  // off the bf16 grid
    v32[i] = kernels::to_float(v[i]);
  }
  std::vector<float> want_p = master;
  std::vector<float> want_m(n), want_v(n);
  kernels::AdamStep s;
  s.lr = 1e-3f, s.beta1 = 0.9f, s.beta2 = 0.95f, s.eps = 1e-8f, s.bias1 = 0.271f;
  s.bias2 = 0.142625f, s.grad_scale = 0.7f, s.exp_avg_bf16 = m16, s.exp_avg_sq_bf16 = v16;
  for (int i = 0; i < n; ++i) {
    float mi = m16 ? kernels::to_float(m[i]) : m32[i];
    float vi = v16 ? kernels::to_float(v[i]) : v32[i];
    kernels::adamw_step(want_p[i], mi, vi, grads[i] * 0.7f, s.lr, s.beta1, s.beta2, s.eps,
                        i < split ? 0.1f : 0.0f, s.bias1, s.bias2);
    want_m[i] = m16 ? kernels::to_float(kernels::to_bf16(mi)) : mi;
    want_v[i] = v16 ? kernels::to_float(kernels::to_bf16(vi)) : vi;
  }
  kernels::AdamRun a;
  a.master = master.data(), a.grads = grads.data(), a.n = split, a.weight_decay = 0.1f;
  a.m = m16 ? (void*)m.data() : (void*)m32.data();
  a.v = v16 ? (void*)v.data() : (void*)v32.data();
  kernels::AdamRun b = a;
  b.master += split, b.grads = grads.data() + split, b.n = n - split, b.weight_decay = 0.0f;
  b.m = m16 ? (void*)(m.data() + split) : (void*)(m32.data() + split);
  b.v = v16 ? (void*)(v.data() + split) : (void*)(v32.data() + split);
  const kernels::AdamRun runs[2] = {a, b};
  kernels::adamw_update<float>(Device::CPU, runs, 2, s);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(master[i], want_p[i]) << i;
    ASSERT_EQ(m16 ? kernels::to_float(m[i]) : m32[i], want_m[i]) << i;
    ASSERT_EQ(v16 ? kernels::to_float(v[i]) : v32[i], want_v[i]) << i;
  }
}

TEST(MomentsBf16, OpIsWidenFp32StepRound) {
  expect_op_matches_by_hand(true, true);
  expect_op_matches_by_hand(true, false);
  expect_op_matches_by_hand(false, true);
}

// bf16 holds 8 significant bits: just below 1 its ulp is 2^-8. v = 1, beta2 = 0.999, g = 0
// gives the fp32 v 0.999, 0.001 from 1 and 0.0029 from the next bf16 below (0.99609375): the
// store rounds it back to 1, and the stored second moment does not decay at all (in fp32 it
// would lose 0.1% a step). With beta2 = 0.99 the step, 0.01, is over half an ulp: it moves, to
// 0.98828125 (0.99 rounded to 8 significant bits).
TEST(MomentsBf16, AStepUnderHalfAnUlpLeavesTheStoredMoment) {
  for (int k = 0; k < 3; ++k) {
    bf16 m[1] = {kernels::to_bf16(0.0f)}, v[1] = {kernels::to_bf16(1.0f)};
    float p = 0.5f;
    kernels::adamw_step_stored(p, m, v, 0, true, true, 0.0f, 0.0f, 0.9f, 0.999f, 1e-8f, 0.0f,
                               1.0f, 1.0f);
    EXPECT_EQ(kernels::to_float(v[0]), 1.0f);
    EXPECT_EQ(p, 0.5f);  // lr 0: the weight unchanged
  }
  bf16 m[1] = {kernels::to_bf16(0.0f)}, v[1] = {kernels::to_bf16(1.0f)};
  float p = 0.5f;
  kernels::adamw_step_stored(p, m, v, 0, true, true, 0.0f, 0.0f, 0.9f, 0.99f, 1e-8f, 0.0f, 1.0f,
                             1.0f);
  EXPECT_EQ(kernels::to_float(v[0]), 0.98828125f);
}

}  // namespace
