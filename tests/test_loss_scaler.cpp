// tests/test_loss_scaler.cpp: model/loss_scaler.cpp, megatron-core's grad scalers.
// The dynamic scaler replays tests/data/loss_scaler_megatron.txt: megatron-core's own
// DynamicGradScaler run on scripted sequences of overflows and clean steps
// (tests/scripts/loss_scaler.py wrote it, and checks in `make test` that megatron-core still
// writes exactly that), step by step: the scale (the exact fp32 value), the growth tracker and
// the hysteresis tracker after each update.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "model/loss_scaler.h"

namespace {

using paralab::LossScaleConfig;
using paralab::LossScaler;

std::string reference_path() {
  const char* dir = std::getenv("PARALAB_GOLDEN_DIR");
  return std::string(dir ? dir : "tests/data") + "/loss_scaler_megatron.txt";
}

TEST(LossScaler, ReproducesMegatronCoresDynamicGradScaler) {
  std::ifstream in(reference_path());
  ASSERT_TRUE(in) << "cannot read " << reference_path();
  std::string line, name;
  LossScaler scaler;
  int cases = 0, steps = 0;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    if (line.rfind("case ", 0) == 0) {
      std::string word;
      LossScaleConfig c;
      words >> word >> name >> c.initial_loss_scale >> c.min_loss_scale >> c.loss_scale_window >>
          c.hysteresis;
      ASSERT_TRUE(words) << line;
      scaler = LossScaler(c);
      ASSERT_TRUE(scaler.dynamic());
      ++cases;
      continue;
    }
    int found_inf = 0, growth = 0, hysteresis = 0;
    std::string scale_text;
    words >> found_inf >> scale_text >> growth >> hysteresis;
    ASSERT_TRUE(words) << line;
    scaler.update(found_inf != 0);
    ++steps;
    // %.9g reads back as the same fp32 value
    const float scale = std::strtof(scale_text.c_str(), nullptr);
    ASSERT_EQ(scaler.state().scale, scale) << name << ", line: " << line;
    ASSERT_EQ(scaler.state().growth_tracker, growth) << name << ", line: " << line;
    ASSERT_EQ(scaler.state().hysteresis_tracker, hysteresis) << name << ", line: " << line;
  }
  EXPECT_EQ(cases, 7);
  EXPECT_GT(steps, 2000);
}

// The reading, spelled out: the clean step between two overflows does not refill the
// hysteresis (megatron-core refills it only on growth).
TEST(LossScaler, HysteresisRefillsOnlyOnGrowth) {
  LossScaleConfig c;  // Megatron's defaults: 2^32, hysteresis 2, window 1000
  LossScaler s(c);
  const float two32 = 4294967296.0f;
  s.update(true);
  EXPECT_EQ(s.scale(), two32);
  s.update(false);
  EXPECT_EQ(s.scale(), two32);
  s.update(true);
  EXPECT_EQ(s.scale(), two32 / 2);
  s.update(true);
  EXPECT_EQ(s.scale(), two32 / 4);
}

// DeepSpeed's consecutive_hysteresis: a clean step refills it, so the same sequence backs off
// once only (the second overflow of a pair).
TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScaleConfig c;
  c.consecutive_hysteresis = true;
  LossScaler s(c);
  const float two32 = 4294967296.0f;
  for (bool f : {true, false, true, false, true, true}) s.update(f);
  EXPECT_EQ(s.scale(), two32 / 2);
  EXPECT_EQ(s.state().hysteresis_tracker, 0);
}

// --loss-scale S: Megatron's ConstantGradScaler, S whatever happens.
TEST(LossScaler, StaticScaleNeverMoves) {
  LossScaleConfig c;
  c.loss_scale = 1024;
  LossScaler s(c);
  EXPECT_FALSE(s.dynamic());
  for (int i = 0; i < 50; ++i) s.update(i % 3 == 0);
  EXPECT_EQ(s.scale(), 1024.0f);
  LossScaler none;  // no scaler: 1
  none.update(true);
  EXPECT_EQ(none.scale(), 1.0f);
}

}  // namespace
