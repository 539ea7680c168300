// tests/test_training_log.cpp: what a training run prints besides its ledgers: the step
// line's loss averaged over the steps since the previous line, elapsed time and ETA, the
// validation line (report/summary.h), the end-of-run summary as text and JSON; and the
// flags behind them: --eval-interval / --eval-iters, and a preset's warm-up clamped to a
// --train-iters shortened on the command line (cli/flags_check.cpp).
#include <gtest/gtest.h>
#include <cmath>
#include <string>
#include "plan/plan.h"
#include "report/report.h"
#include "report/summary.h"
#include "tests/test_flags_helpers.h"  // defines: parse, error_of, TempFile
#include "tests/test_plan_helpers.h"   // defines: gpt, world, batch

namespace paralab {
namespace {

TEST(TrainingLog, LoggedLossIsTheMeanSinceTheLastLine) {
  // --log-interval 4 over 10 steps: lines at 1, 4, 8, 10 average steps 1, 2-4, 5-8, 9-10
  const double loss[10] = {5.5, 5.0, 4.0, 3.0, 2.9, 2.7, 2.5, 2.3, 2.2, 2.0};
  LogAverage window;
  std::vector<std::pair<int, double>> lines;
  for (int step = 1; step <= 10; ++step) {
    window.add(loss[step - 1]);
    if (step == 1 || step == 10 || step % 4 == 0) {
      lines.push_back({window.count(), window.mean()});
      window.reset();
    }
  }
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], std::make_pair(1, 5.5));
  EXPECT_EQ(lines[1].first, 3);
  EXPECT_DOUBLE_EQ(lines[1].second, (5.0 + 4.0 + 3.0) / 3);
  EXPECT_DOUBLE_EQ(lines[2].second, (2.9 + 2.7 + 2.5 + 2.3) / 4);
  EXPECT_DOUBLE_EQ(lines[3].second, (2.2 + 2.0) / 2);
  EXPECT_TRUE(std::isnan(window.mean()));
}

TEST(TrainingLog, StepLineShowsTheMeanElapsedAndEta) {
  const Plan p = make_plan(plan_test::gpt(2, 64, 4, 32, 256), plan_test::batch(2, 4),
                           plan_test::world(1, 0));
  StepMetrics s;
  s.step = 8; s.loss = 2.0; s.loss_mean = 2.5; s.loss_steps = 4; s.log_interval = 4;
  s.step_seconds = 0.1; s.elapsed_seconds = 83.0; s.eta_seconds = 83.0 / 8 * 92;
  fill_rates(s, p, Peak{1, "flag"});
  const std::string h = step_header(s), r = step_row(s);
  EXPECT_EQ(h.size(), r.size()) << h << "\n" << r;
  EXPECT_NE(h.find("mean loss"), std::string::npos);
  EXPECT_NE(h.find("elapsed"), std::string::npos);
  EXPECT_NE(h.find("ETA"), std::string::npos);
  EXPECT_NE(r.find("2.5000"), std::string::npos) << r;  // the mean, not the step's 2.0
  EXPECT_NE(r.find("1:23"), std::string::npos) << r;
  EXPECT_NE(r.find("15:55"), std::string::npos) << r;   // 83 / 8 x 92 = 954.5 s
  s.log_interval = 1;
  EXPECT_EQ(step_header(s).find("mean loss"), std::string::npos);
  EXPECT_EQ(format_duration(42.25), "42.2s");
  EXPECT_EQ(format_duration(3729), "1:02:09");
  EXPECT_EQ(format_duration(-1), "n/a");
  // --metrics-jsonl keeps the step's own loss beside the mean, and the validation loss
  s.valid_loss = std::log(40.0);
  const std::string j = step_json(s, p, 0);
  for (const char* key : {"\"type\":\"step\"", "\"loss\":2,", "\"loss_mean\":2.5",
                          "\"loss_mean_steps\":4", "\"validation_loss\":", "\"validation_ppl\":",
                          "\"elapsed_s\":83"})
    EXPECT_NE(j.find(key), std::string::npos) << key << " in " << j;
}

TEST(TrainingLog, ValidationLineIsMegatrons) {
  const std::string v = validation_line(50, false, 1.5, 10, 16, 0.25);
  EXPECT_NE(v.find(" validation loss at iteration 50 | lm loss value: 1.500000E+00 | lm loss "
                   "PPL: 4.481689E+00 |"), std::string::npos) << v;
  EXPECT_EQ(v.front(), '-');
  EXPECT_DOUBLE_EQ(perplexity(25.0), std::exp(20.0));  // Megatron's cap
  EXPECT_NE(validation_line(250, true, 1.0, 10, 16, 0.25).find("at the end of training "
                                                                "(iteration 250)"),
            std::string::npos);
}

TEST(TrainingLog, SummaryTextAndJson) {
  RunSummary s;
  s.steps = 10; s.first_step = 1; s.last_step = 10;
  s.tokens = 10240; s.wall_seconds = 2.5; s.step_seconds = 2.0;
  s.eval_seconds = 0.4; s.mfu_seconds = 0.1 * 1.5 + 0.2 * 0.5; s.hfu_seconds = 0.5;
  s.peak_memory_bytes = 3 << 20; s.peak_memory_rank = 1;
  s.final_train_loss = 2.25; s.final_train_first = 9;
  EXPECT_DOUBLE_EQ(s.tokens_per_second(), 5120);
  EXPECT_DOUBLE_EQ(s.mfu(), 0.125);  // time-weighted: (0.1 x 1.5 + 0.2 x 0.5) / 2
  std::string t = summary_text(s);
  for (const char* part : {"10 steps, 10240 tokens", "5.1k tok/s", "MFU 12.50%", "3.00 MiB (rank 1",
                           "2.2500 (mean of steps 9-10)"})
    EXPECT_NE(t.find(part), std::string::npos) << part << " in\n" << t;
  EXPECT_EQ(t.find("final val loss"), std::string::npos);  // no evaluation ran
  s.evaluations = 2; s.final_valid_loss = std::log(8.0); s.valid_step = 10; s.eval_batches = 4;
  t = summary_text(s);
  EXPECT_NE(t.find("PPL 8.000 (after step 10, 4 batches"), std::string::npos) << t;
  const std::string j = summary_json(s);
  EXPECT_EQ(j.find('\n'), std::string::npos);
  for (const char* key : {"{\"type\":\"summary\"", "\"tokens\":10240", "\"tokens_per_s\":5120",
                          "\"mfu\":0.125", "\"peak_memory_bytes\":3145728", "\"peak_memory_rank\":1",
                          "\"final_train_loss\":2.25", "\"final_validation_ppl\":7.99999",
                          "\"first_step\":1", "\"last_step\":10"})
    EXPECT_NE(j.find(key), std::string::npos) << key << " in " << j;
  // A resumed run names its iterations, not its count of steps (issue 30: "step 150" for a
  // run that ended at 250).
  RunSummary resumed;
  for (int step = 151; step <= 250; ++step) resumed.add_step(step, 1024, 0.01, 0.1, 0.1);
  resumed.final_train_loss = 0.95; resumed.final_train_first = 250;
  t = summary_text(resumed);
  for (const char* part : {"100 steps (iterations 151-250, resumed)", "0.9500 (step 250)"})
    EXPECT_NE(t.find(part), std::string::npos) << part << " in\n" << t;
}

using flags_test::error_of;
using flags_test::parse;
using flags_test::TempFile;

TEST(TrainingLog, EvalFlags) {
  const Options off = parse({});
  EXPECT_EQ(off.eval_interval, 0);  // evaluation is off unless asked for
  EXPECT_EQ(off.eval_iters, 10);
  const Options on = parse({"--eval-interval", "50", "--eval-iters", "3"});
  EXPECT_EQ(on.eval_interval, 50);
  EXPECT_EQ(on.eval_iters, 3);
  EXPECT_EQ(error_of({"--eval-interval", "-1"}), "--eval-interval must be >= 0, got -1");
  EXPECT_EQ(error_of({"--eval-iters", "0"}), "--eval-iters must be >= 1, got 0");
}

// A preset's warm-up longer than the run the user shortened it to is clamped, with a
// warning; the constraint stays for what the user typed, and for a preset alone.
TEST(TrainingLog, PresetWarmupClampedToAShortenedRun) {
  TempFile preset("train-iters = 250\nlr-warmup-iters = 20\n");
  Options o = parse({"--config", preset.path(), "--train-iters", "10"});
  EXPECT_EQ(o.train.lr_warmup_iters, 10);
  EXPECT_EQ(o.train.lr_decay_iters, 10);
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_EQ(o.warnings[0], "--lr-warmup-iters 20 from --config exceeds --train-iters 10: "
                           "warm-up clamped to 10 (give --lr-warmup-iters to choose another)");
  EXPECT_EQ(parse({"--config", preset.path(), "--iters=5"}).train.lr_warmup_iters, 5);
  // long enough: untouched, no warning
  o = parse({"--config", preset.path(), "--train-iters", "50"});
  EXPECT_EQ(o.train.lr_warmup_iters, 20);
  EXPECT_TRUE(o.warnings.empty());
  // a shortened --lr-decay-iters clamps alike
  EXPECT_EQ(parse({"--config", preset.path(), "--lr-decay-iters", "8"}).train.lr_warmup_iters, 8);
  // typed by the user: Megatron's constraint, one line, exit 2
  EXPECT_NE(error_of({"--config", preset.path(), "--train-iters", "10", "--lr-warmup-iters", "20"})
                .find("--lr-warmup-iters (20) must be <="),
            std::string::npos);
  EXPECT_NE(error_of({"--train-iters", "10", "--warmup", "20"}).find("--lr-warmup-iters (20)"),
            std::string::npos);
  // the preset contradicting itself is the preset's error
  TempFile broken("train-iters = 10\nlr-warmup-iters = 20\n");
  EXPECT_NE(error_of({"--config", broken.path()}).find("--lr-warmup-iters (20) must be <="),
            std::string::npos);
}

}  // namespace
}  // namespace paralab
