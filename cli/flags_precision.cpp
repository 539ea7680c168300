// cli/flags_precision.cpp: the numeric precision of the run: fp32 (the default), --bf16 or
// --fp16 (16-bit parameters, gradients and activations, fp32 master weights and Adam moments),
// and --fp16's loss scale (model/loss_scaler.h), with Megatron's flags, defaults and meanings.
#include <CLI/CLI.hpp>
#include <cfloat>

#include "cli/flags_impl.h"  // defines: add_switch, check_at_least, fail; cli/flags.h Options

namespace paralab {

namespace {
// The dynamic scaler's flags: they mean nothing without --fp16 (Megatron builds the
// DynamicGradScaler for fp16 alone).
const char* const kDynamicFlags[] = {"--initial-loss-scale", "--min-loss-scale",
                                     "--loss-scale-window", "--hysteresis",
                                     "--consecutive-hysteresis"};
}  // namespace

void add_precision_flags(CLI::App& app, Options& o) {
  TrainConfig& t = o.train;
  LossScaleConfig& l = t.loss_scaling;
  const char* kPrecision = "Precision";
  add_switch(app, "--bf16", t.bf16,
             "bf16 parameters, gradients and activations with fp32 master weights and "
             "Adam moments (on CPU bf16 is storage only); default fp32")
      ->group(kPrecision);
  add_switch(app, "--fp16", t.fp16,
             "fp16 parameters, gradients and activations with fp32 master weights and Adam "
             "moments, and a loss scale (dynamic unless --loss-scale); not with --bf16")
      ->group(kPrecision);
  app.add_option("--loss-scale", l.loss_scale,
                 "a static loss scale S > 0 (Megatron's ConstantGradScaler; with --fp16 or "
                 "--bf16); unset: --fp16 scales dynamically")
      ->group(kPrecision);
  app.add_option("--initial-loss-scale", l.initial_loss_scale,
                 "--fp16's dynamic loss scale to start from (Megatron's default 2^32)")
      ->capture_default_str()->group(kPrecision);
  app.add_option("--min-loss-scale", l.min_loss_scale,
                 "the dynamic loss scale never backs off below this")
      ->capture_default_str()->group(kPrecision);
  app.add_option("--loss-scale-window", l.loss_scale_window,
                 "clean steps (no inf or NaN in any gradient) before the dynamic loss scale "
                 "doubles")
      ->capture_default_str()->group(kPrecision);
  app.add_option("--hysteresis", l.hysteresis,
                 "overflows since the last growth before the dynamic loss scale halves "
                 "(Megatron's: a clean step does not refill it, a growth does)")
      ->capture_default_str()->group(kPrecision);
  add_switch(app, "--log-fp16-underflow", t.log_fp16_underflow,
             "per step, the fraction of rank 0's gradients that fp16 would flush to zero or "
             "hold subnormal without the loss scale, beside the stored ones (--metrics-jsonl "
             "fp16_underflow, TensorBoard); any precision; copies the gradients to the host")
      ->group(kPrecision);
  add_switch(app, "--consecutive-hysteresis", l.consecutive_hysteresis,
             "DeepSpeed's fp16.consecutive_hysteresis: every clean step refills the hysteresis, "
             "so only consecutive overflows halve the scale")
      ->group(kPrecision);
}

void record_precision_flags_given(const CLI::App& app, RawFlags& raw) {
  for (const char* f : kDynamicFlags)
    if (app.count(f) > 0) raw.dynamic_loss_scale_flags_given.push_back(f);
  raw.loss_scale_given = app.count("--loss-scale") > 0;
}

void resolve_precision(Options& o, const RawFlags& raw) {
  // The command line overrides a --config file: `--config llama-70b.toml --fp16` plans the
  // preset in fp16 (the file's bf16 = true off), as a typed value overrides any other key.
  TrainConfig& t = o.train;
  if (t.bf16 && t.fp16 && raw.bf16_on_command_line != raw.fp16_on_command_line)
    (raw.fp16_on_command_line ? t.bf16 : t.fp16) = false;
}

void check_precision(Options& o, const RawFlags& raw) {
  const TrainConfig& t = o.train;
  const LossScaleConfig& l = t.loss_scaling;
  // megatron/training/arguments.py: "cannot have both bf16 and fp16 enabled"
  if (t.bf16 && t.fp16) fail("--bf16 and --fp16 are exclusive: give one");
  if (raw.loss_scale_given && !(l.loss_scale > 0 && l.loss_scale <= FLT_MAX))
    fail("--loss-scale must be > 0 and at most 3.4e38 (an fp32 number), got ", l.loss_scale);
  // the scale is an fp32 number (Megatron's tensor is torch.float)
  if (!(l.initial_loss_scale > 0 && l.initial_loss_scale <= FLT_MAX))
    fail("--initial-loss-scale must be > 0 and at most 3.4e38 (an fp32 number), got ",
         l.initial_loss_scale);
  if (!(l.min_loss_scale > 0 && l.min_loss_scale <= l.initial_loss_scale))
    fail("--min-loss-scale must be > 0 and at most --initial-loss-scale (", l.initial_loss_scale,
         "), got ", l.min_loss_scale);
  check_at_least("--loss-scale-window", l.loss_scale_window, 1);
  check_at_least("--hysteresis", l.hysteresis, 1);
  // Megatron ignores them where it builds no dynamic scaler: said on one warning line
  std::vector<std::string> unused;
  if (!t.fp16 || raw.loss_scale_given)
    for (const std::string& f : raw.dynamic_loss_scale_flags_given) unused.push_back(f);
  if (raw.loss_scale_given && !t.half()) unused.push_back("--loss-scale");
  if (!unused.empty()) {
    std::string list;
    for (const std::string& f : unused) list += (list.empty() ? "" : ", ") + f;
    o.warnings.push_back("loss-scaling flags with no effect: " + list +
                         (t.fp16 ? " (--loss-scale makes the scale static)"
                                 : " (the dynamic scale is --fp16's; --loss-scale needs --fp16 "
                                   "or --bf16)"));
  }
}

}  // namespace paralab
