// cli/flags_training.cpp: the training flags (Megatron's names): the batch (--micro-batch-size,
// --global-batch-size), the steps, AdamW, the learning-rate schedule, the seed, the NaN guard,
// and evaluation (--eval-interval, --eval-iters); their checks: the global batch derived and
// divisible by micro-batch x dp, Megatron's warmup <= decay, every coefficient in its range.
#include <CLI/CLI.hpp>
#include <cmath>
#include <sstream>
#include <string>

#include "cli/flags_impl.h"  // defines: RawFlags, one_of, seed_range, check_at_least; cli/flags.h Options

namespace paralab {

void add_training_flags(CLI::App& app, Options& o, RawFlags& raw) {
  TrainConfig& t = o.train;
  const char* kTrain = "Training";
  app.add_option("--micro-batch-size,--mbs", t.micro_batch_size,
                 "samples per microbatch B: one forward/backward on one rank")
      ->capture_default_str()->group(kTrain);
  app.add_option("--global-batch-size,--gbs", t.global_batch_size,
                 "samples per optimizer step G, over all data-parallel ranks; must be "
                 "divisible by B x dp (gradient accumulation = G / (B dp)); 0 means B x dp")
      ->capture_default_str()->group(kTrain);
  app.add_option("--train-iters,--iters", t.train_iters, "optimizer steps to run")
      ->capture_default_str()->group(kTrain);
  app.add_option("--lr", t.lr, "peak learning rate, reached after the warmup; > 0 and >= --min-lr")
      ->capture_default_str()->group(kTrain);
  app.add_option("--min-lr", t.min_lr,
                 "learning rate at the end of the decay and after it; in [0, --lr]")
      ->capture_default_str()->group(kTrain);
  app.add_option("--lr-warmup-iters,--warmup", t.lr_warmup_iters,
                 "steps of linear warmup from 0 to --lr; <= --lr-decay-iters")
      ->capture_default_str()->group(kTrain);
  app.add_option("--lr-decay-iters", t.lr_decay_iters,
                 "step at which the decay reaches --min-lr; 0 means --train-iters")
      ->capture_default_str()->group(kTrain);
  app.add_option("--lr-decay-style", raw.lr_decay_style,
                 "shape of the decay after the warmup: constant (stay at --lr), linear, "
                 "cosine")
      ->check(one_of({"constant", "linear", "cosine"}))->capture_default_str()
      ->group(kTrain);
  app.add_option("--weight-decay,--wd", t.weight_decay,
                 "AdamW decoupled weight decay, applied to 2-D weights only; >= 0")
      ->capture_default_str()->group(kTrain);
  app.add_option("--clip-grad", t.clip_grad,
                 "clip the global gradient norm to this value; 0 disables clipping")
      ->capture_default_str()->group(kTrain);
  app.add_option("--max-skipped-steps", t.max_skipped_steps,
                 "a step whose loss or gradient norm is NaN or Inf is skipped (no optimizer "
                 "update, counted in the step line and --metrics-jsonl); this many skipped in "
                 "a row stop the run with exit status 3; >= 1")
      ->capture_default_str()->group(kTrain);
  app.add_option("--adam-beta1", t.adam_beta1, "AdamW first-moment decay, in [0, 1)")
      ->capture_default_str()->group(kTrain);
  app.add_option("--adam-beta2", t.adam_beta2, "AdamW second-moment decay, in [0, 1)")
      ->capture_default_str()->group(kTrain);
  app.add_option("--adam-eps", t.adam_eps, "AdamW denominator epsilon; > 0")
      ->capture_default_str()->group(kTrain);
  app.add_option("--seed", t.seed,
                 "seeds the initial weights, the dropout masks, the synthetic corpus and "
                 "the order of the samples; an integer from 0 to 2^64 - 1")
      ->check(seed_range())->capture_default_str()->group(kTrain);
  app.add_option("--eval-interval", o.eval_interval,
                 "validation loss every N steps and after the last one, forward only, on a "
                 "held-out split (synthetic: a continuation of the corpus; --data-path: the "
                 "file's last 10%); 0: no evaluation")
      ->capture_default_str()->group(kTrain);
  app.add_option("--eval-iters", o.eval_iters,
                 "validation batches per evaluation, each of --global-batch-size samples; "
                 "the same batches every time; >= 1")
      ->capture_default_str()->group(kTrain);
}

void check_batch(Options& o, const RawFlags& raw) {
  TrainConfig& t = o.train;
  const int dp = o.parallel.data_parallel();
  check_at_least("--micro-batch-size", t.micro_batch_size, 1);
  check_at_least("--global-batch-size", t.global_batch_size, 0);
  check_at_least("--train-iters", t.train_iters, 1);
  check_at_least("--eval-interval", o.eval_interval, 0);
  check_at_least("--eval-iters", o.eval_iters, 1);
  if (t.global_batch_size == 0) t.global_batch_size = t.micro_batch_size * dp;
  if (t.global_batch_size % (t.micro_batch_size * dp) != 0)
    fail("--global-batch-size (", t.global_batch_size, ") must be divisible by --micro-batch-size (",
         t.micro_batch_size, ") x data-parallel size (", dp, ") = ", t.micro_batch_size * dp);
  apply_megatron_schedule(o, raw);  // cli/flags_megatron.cpp: --train-samples, samples, fraction
}

void check_optimizer(Options& o, const RawFlags& raw) {
  TrainConfig& t = o.train;
  t.lr_decay_style = raw.lr_decay_style == "constant" ? LrDecay::CONSTANT
                     : raw.lr_decay_style == "linear" ? LrDecay::LINEAR
                                                      : LrDecay::COSINE;
  check_at_least("--min-lr", t.min_lr, 0);
  check_finite("--min-lr", t.min_lr);
  if (!(t.lr > 0)) fail("--lr must be > 0, got ", t.lr);
  check_finite("--lr", t.lr);
  if (t.lr < t.min_lr) fail("--lr (", t.lr, ") must be >= --min-lr (", t.min_lr, ")");
  check_at_least("--lr-warmup-iters", t.lr_warmup_iters, 0);
  check_at_least("--lr-decay-iters", t.lr_decay_iters, 0);
  const bool decay_derived = t.lr_decay_iters == 0;
  if (decay_derived) t.lr_decay_iters = t.train_iters;
  // A preset's warm-up longer than a decay the user shortened on the command line (`--config
  // tiny.toml --train-iters 10`): the smallest change that keeps Megatron's warmup <= decay
  // is warmup = decay (the whole run warms up), said on stderr. Flags the user typed keep the
  // constraint below.
  const bool decay_typed =
      decay_derived ? raw.train_iters_on_command_line : raw.decay_iters_on_command_line;
  if (t.lr_warmup_iters > t.lr_decay_iters && !raw.warmup_on_command_line && decay_typed) {
    std::ostringstream w;
    w << "--lr-warmup-iters " << t.lr_warmup_iters << " from --config exceeds "
      << (decay_derived ? "--train-iters " : "--lr-decay-iters ") << t.lr_decay_iters
      << ": warm-up clamped to " << t.lr_decay_iters
      << " (give --lr-warmup-iters to choose another)";
    o.warnings.push_back(w.str());
    t.lr_warmup_iters = t.lr_decay_iters;
  }
  if (t.lr_warmup_iters > t.lr_decay_iters)
    fail("--lr-warmup-iters (", t.lr_warmup_iters, ") must be <= ",
         decay_derived ? "--lr-decay-iters (defaults to --train-iters, " : "--lr-decay-iters (",
         t.lr_decay_iters, ")");
  check_at_least("--weight-decay", t.weight_decay, 0);
  check_finite("--weight-decay", t.weight_decay);
  check_at_least("--max-skipped-steps", t.max_skipped_steps, 1);
  check_at_least("--clip-grad", t.clip_grad, 0);
  check_finite("--clip-grad", t.clip_grad);
  check_unit_interval("--adam-beta1", t.adam_beta1);
  check_unit_interval("--adam-beta2", t.adam_beta2);
  if (!(t.adam_eps > 0)) fail("--adam-eps must be > 0, got ", t.adam_eps);
  check_finite("--adam-eps", t.adam_eps);
}

}  // namespace paralab
