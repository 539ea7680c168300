// tests/test_fp8_recipe.cpp: the scaling recipes of parallel/fp8_scaling.h on the CPU: which scale
// each cast uses, what the delayed recipe records and when it updates, which reductions it
// asks for, and the state it keeps (what the checkpoint saves).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/fp8.h"
#include "parallel/fp8_scaling.h"

namespace {

using kernels::Device;
using kernels::Fp8Blocks;
using kernels::Fp8Format;
using paralab::Fp8Config;
using paralab::Fp8Recipe;
using paralab::Fp8Role;
using paralab::Fp8Scaling;

std::vector<float> matrix(int rows, int cols, float range, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> x((size_t)rows * cols);
  for (float& v : x) v = u(rng);
  return x;
}
float amax_of(const std::vector<float>& x) {
  float a = 0.0f;
  for (float v : x) a = std::max(a, std::fabs(v));
  return a;
}

// Codes and factor of x cast at `scale` (the definition), and its transpose.
void expect_cast(const std::vector<float>& x, int rows, int cols, Fp8Format f, float scale,
                 const std::vector<uint8_t>& q, float q_scale_inv, const std::vector<uint8_t>& qt,
                 float qt_scale_inv) {
  EXPECT_EQ(q_scale_inv, 1.0f / scale);
  EXPECT_EQ(qt_scale_inv, 1.0f / scale);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const uint8_t want = kernels::fp8_encode(x[(size_t)r * cols + c] * scale, f);
      ASSERT_EQ(q[(size_t)r * cols + c], want);
      ASSERT_EQ(qt[(size_t)c * rows + r], want);
    }
}

TEST(Fp8Recipe, DelayedUsesTheHistorysScaleAndUpdatesAtTheStepEnd) {
  Fp8Config c;
  c.enabled = true;
  c.hybrid = true;
  c.amax_history_len = 2;
  c.amax_compute_algo = kernels::Fp8AmaxAlgo::Max;
  c.margin = 1;
  Fp8Scaling s(c, Device::CPU, 3);
  int group_calls = 0;
  s.set_reductions(nullptr, [&](float*, int n) {
    group_calls++;
    EXPECT_TRUE(n == 6 || n == 3);  // row 0 of each history
  });
  const int rows = 5, cols = 7;
  std::vector<uint8_t> q(rows * cols), qt(rows * cols);
  float si = 0, sti = 0;
  const std::vector<float> x1 = matrix(rows, cols, 3.0f, 1), x2 = matrix(rows, cols, 0.5f, 2);
  const std::vector<float> g = matrix(rows, cols, 1e-3f, 3);
  // step 1: scale 1 (TE's initial scale), the amaxes recorded
  s.quantize(1, Fp8Role::Input, x1.data(), rows, cols, q.data(), &si, qt.data(), &sti);
  expect_cast(x1, rows, cols, Fp8Format::E4M3, 1.0f, q, si, qt, sti);
  s.quantize(1, Fp8Role::Input, x2.data(), rows, cols, q.data(), &si, qt.data(), &sti);  // mb 2
  s.quantize(2, Fp8Role::OutputGrad, g.data(), rows, cols, q.data(), &si, qt.data(), &sti);
  expect_cast(g, rows, cols, Fp8Format::E5M2, 1.0f, q, si, qt, sti);
  s.step_end();
  EXPECT_EQ(group_calls, 2);
  // step 2: linear 1's input scale from the max over both microbatches, margin 1
  const float want_in = 448.0f / 2 / std::max(amax_of(x1), amax_of(x2));
  const float want_grad = 57344.0f / 2 / amax_of(g);
  s.quantize(1, Fp8Role::Input, x2.data(), rows, cols, q.data(), &si, qt.data(), &sti);
  expect_cast(x2, rows, cols, Fp8Format::E4M3, want_in, q, si, qt, sti);
  s.quantize(2, Fp8Role::OutputGrad, g.data(), rows, cols, q.data(), &si, qt.data(), &sti);
  expect_cast(g, rows, cols, Fp8Format::E5M2, want_grad, q, si, qt, sti);
  // the state: forward history (2, 6) with linear 1's input column rolled into the last row
  const auto state = s.state();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[0].name, "fp8_amax_history_fwd");
  EXPECT_EQ(state[0].buffer->size(), 2u * 6);
  EXPECT_EQ(state[0].buffer->data()[6 + 2], std::max(amax_of(x1), amax_of(x2)));
  EXPECT_EQ(state[0].buffer->data()[2], amax_of(x2));  // step 2's record so far
  EXPECT_EQ(state[1].buffer->data()[2], want_in);
  EXPECT_EQ(state[1].buffer->data()[0], 1.0f);  // linear 0 recorded nothing: kept
  size_t bytes = 0;
  for (const auto& st : state) bytes += st.buffer->bytes();
  EXPECT_EQ(bytes, Fp8Scaling::state_bytes(c, 3));
}

// What the checkpoint stores per layer: linears [first, first + count)'s columns of both
// histories and their scales, in that order; put back into another Fp8Scaling (another pipeline
// layout: the linears at another place), they are the same state.
TEST(Fp8Recipe, LinearsStateIsTheirColumnsAndGoesBack) {
  Fp8Config c;
  c.enabled = true;
  c.amax_history_len = 3;
  Fp8Scaling a(c, Device::CPU, 4);
  auto st = a.state();
  for (size_t b = 0; b < st.size(); ++b)
    for (size_t i = 0; i < st[b].buffer->size(); ++i) st[b].buffer->data()[i] = 1000.0f * b + i;
  const std::vector<float> v = a.linears_state(1, 2);  // linears 1 and 2
  ASSERT_EQ(v.size(), Fp8Scaling::state_bytes(c, 2) / sizeof(float));  // (3 + 1) 3 2
  // forward history rows of 8 columns: linears 1-2 are columns 2..5
  const std::vector<float> want_first = {2, 3, 4, 5, 10, 11, 12, 13, 18, 19, 20, 21};
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 12), want_first);
  EXPECT_EQ(v[12], 1002.0f);  // scale_fwd column 2
  EXPECT_EQ(v[16], 2001.0f);  // backward history row 0, column 1
  EXPECT_EQ(v.back(), 3002.0f);  // scale_bwd of linear 2
  Fp8Scaling b(c, Device::CPU, 2);
  b.set_linears_state(0, 2, v);
  EXPECT_EQ(b.linears_state(0, 2), v);
  EXPECT_THROW(b.set_linears_state(0, 1, v), std::logic_error);
  Fp8Config t = c;
  t.recipe = Fp8Recipe::Tensorwise;  // no state
  EXPECT_TRUE(Fp8Scaling(t, Device::CPU, 4).linears_state(0, 4).empty());
}

TEST(Fp8Recipe, TensorwiseScalesFromThisTensorsReducedAmax) {
  Fp8Config c;
  c.enabled = true;
  c.recipe = Fp8Recipe::Tensorwise;
  Fp8Scaling s(c, Device::CPU, 2);
  // the pieces' reduction: another rank's piece had a larger amax
  s.set_reductions(
      [](float* amax, int n) {
        EXPECT_EQ(n, 1);
        *amax = std::max(*amax, 10.0f);
      },
      nullptr);
  const int rows = 4, cols = 9;
  const std::vector<float> x = matrix(rows, cols, 2.0f, 4);
  std::vector<uint8_t> q(rows * cols), qt(rows * cols);
  float si = 0, sti = 0;
  s.quantize(0, Fp8Role::Weight, x.data(), rows, cols, q.data(), &si, qt.data(), &sti);
  expect_cast(x, rows, cols, Fp8Format::E4M3, 448.0f / 10.0f, q, si, qt, sti);
  EXPECT_TRUE(s.state().empty());
  EXPECT_EQ(Fp8Scaling::state_bytes(c, 2), 0u);
}

TEST(Fp8Recipe, BlockwiseTilesActivationsAndBlocksWeights) {
  Fp8Config c;
  c.enabled = true;
  c.recipe = Fp8Recipe::Blockwise;
  Fp8Scaling s(c, Device::CPU, 1);
  EXPECT_EQ(s.blocks(Fp8Role::Input), Fp8Blocks::Tiles);
  EXPECT_EQ(s.blocks(Fp8Role::OutputGrad), Fp8Blocks::Tiles);
  EXPECT_EQ(s.blocks(Fp8Role::Weight), Fp8Blocks::Blocks);
  EXPECT_EQ(s.format(Fp8Role::OutputGrad), Fp8Format::E4M3);  // e4m3 everywhere unless hybrid
  EXPECT_EQ(s.scale_bytes(Fp8Role::Input, 300, 260), 4u * 300 * 3);
  EXPECT_EQ(s.scale_bytes(Fp8Role::Weight, 300, 260), 4u * 3 * 3);
  const int rows = 130, cols = 200;
  const std::vector<float> x = matrix(rows, cols, 2.0f, 5);
  std::vector<uint8_t> q(rows * cols), qt(rows * cols), want(rows * cols), want_t(rows * cols);
  std::vector<float> s1(2 * 2), s2(2 * 2), w1(4), w2(4);
  s.quantize(0, Fp8Role::Weight, x.data(), rows, cols, q.data(), s1.data(), qt.data(), s2.data());
  kernels::fp8_quantize_blocks<Device::CPU, float>(want.data(), w1.data(), x.data(), rows, cols,
                                                   Fp8Format::E4M3, Fp8Blocks::Blocks, false);
  kernels::fp8_quantize_blocks<Device::CPU, float>(want_t.data(), w2.data(), x.data(), rows, cols,
                                                   Fp8Format::E4M3, Fp8Blocks::Blocks, true);
  EXPECT_EQ(q, want);
  EXPECT_EQ(qt, want_t);
  EXPECT_EQ(s1, w1);
  EXPECT_EQ(s2, w2);
}

}  // namespace

namespace {

// --log-fp8-scaling: what a cast of x as linear 0's input logs, in recipe r, with E4M3 (max 448).
// Delayed's first step casts at scale 1; tensorwise at 448 / amax.
paralab::Fp8TensorLog logged_cast(Fp8Recipe r, const std::vector<float>& x, int rows, int cols) {
  Fp8Config c;
  c.enabled = true;
  c.recipe = r;
  c.log_scaling = true;
  Fp8Scaling s(c, Device::CPU, 1);
  std::vector<uint8_t> q(x.size()), qt(x.size());
  float q_inv = 0.0f, qt_inv = 0.0f;
  s.quantize(0, Fp8Role::Input, x.data(), rows, cols, q.data(), &q_inv, nullptr, nullptr);
  s.quantize(0, Fp8Role::Input, x.data(), rows, cols, nullptr, nullptr, qt.data(), &qt_inv);
  s.step_end();
  return s.log(0, Fp8Role::Input);
}

}  // namespace

// The log counts the plain copy's cast only (the transposed one holds the same values), and
// holds the amax and the scale the cast used; delayed's at its step end, from the history.
TEST(Fp8Recipe, LogRecordsAmaxScaleAndWhatTheCastLost) {
  const int rows = 16, cols = 40;
  std::vector<float> x = matrix(rows, cols, 600.0f, 7);
  x[3] = 1e-4f;  // below E4M3's half smallest subnormal 2^-10 at scale 1: flushed
  int64_t past = 0;
  for (float v : x) past += std::fabs(v) > 464.0f;  // saturate at scale 1 (E4M3)
  ASSERT_GT(past, 0);
  const paralab::Fp8TensorLog d = logged_cast(Fp8Recipe::Delayed, x, rows, cols);
  EXPECT_EQ(d.amax, amax_of(x));
  EXPECT_EQ(d.scale, 1.0f);
  EXPECT_EQ(d.saturated, past);
  EXPECT_EQ(d.flushed, 1);
  EXPECT_EQ(d.elements, rows * cols);
  const paralab::Fp8TensorLog t = logged_cast(Fp8Recipe::Tensorwise, x, rows, cols);
  EXPECT_EQ(t.amax, amax_of(x));
  EXPECT_EQ(t.scale, 448.0f / amax_of(x));
  EXPECT_EQ(t.saturated, 0);
  EXPECT_EQ(t.elements, rows * cols);
}
