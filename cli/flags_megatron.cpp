// cli/flags_megatron.cpp: Megatron-LM's flags as a Megatron launch script writes them, so that a
// pasted script runs (tests/scripts/megatron_llama.sh runs one of Megatron-LM's own Llama
// examples, shrunk). Three kinds, each with Megatron's meaning or a refusal, never a silent
// difference (docs/megatron.md lists where paralab differs):
//  - the model's parts: Megatron composes a model from parts (--swiglu, --normalization,
//    --position-embedding-type, --untie-embeddings-and-output-weights, --disable-bias-linear,
//    --group-query-attention, ...), paralab builds two families, gpt and llama (--arch). The
//    parts restate a family: they agree with --arch or are refused naming the conflict, and
//    without --arch Megatron's Llama parts, all of them, choose llama (one missing is
//    Megatron's default, gpt's part: a model paralab does not build, refused);
//  - the same setting under another name or unit: --train-samples, --lr-warmup-samples,
//    --lr-decay-samples, --lr-warmup-fraction, --recompute-activations,
//    --check-for-nan-in-loss-and-grad, --distributed-timeout-minutes, --init-method-std,
//    and --tensorboard-dir (report/tensorboard.h); --split and --mock-data are the data's
//    (cli/flags_data.cpp);
//  - flags about Megatron's own machinery (kernel fusions, Transformer Engine,
//    Weights & Biases, data-loader workers, RNG state): accepted, and named on one warning
//    line as having no effect here.
#include <CLI/CLI.hpp>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: RawFlags, fail, add_switch, one_of; cli/flags.h Options

namespace paralab {

namespace {

// Accepted for a pasted script, with what paralab does instead.
struct NoEffect {
  const char* name;
  bool takes_value;
  const char* why;
};
const NoEffect kNoEffect[] = {
    {"--use-mcore-models", false, "one model implementation"},
    {"--transformer-impl", true, "paralab's own layers, no Transformer Engine"},
    {"--attention-backend", true, "--attention flash|naive"},
    {"--no-masked-softmax-fusion", false, "kernel fusion"},
    {"--no-gradient-accumulation-fusion", false, "kernel fusion"},
    {"--cross-entropy-loss-fusion", false, "the fused loss is the default, --no-fused-ce"},
    {"--attention-softmax-in-fp32", false, "the softmax is always fp32"},
    {"--no-async-tensor-model-parallel-allreduce", false, "tp collectives run blocking"},
    {"--num-workers", true, "no data-loader workers"},
    {"--no-create-attention-mask-in-dataloader", false, "causal attention builds no mask"},
    {"--no-mmap-bin-files", false, "data files are memory-mapped"},
    {"--distributed-backend", true, "--comm nccl|mpi"},
    {"--ckpt-format", true, "paralab's own format, resharded at load"},
    {"--no-load-rng", false, "no RNG state is saved: every draw is keyed on seed, step, microbatch"},
    {"--no-save-rng", false, "no RNG state is saved"},
    {"--exit-signal-handler", false, "SIGTERM and SIGINT always save and stop"},
    {"--log-throughput", false, "the step line always has tok/s"},
    {"--log-params-norm", false, "not logged"},
    {"--log-num-zeros-in-grad", false, "not logged"},
    {"--log-timers-to-tensorboard", false, "the time tables, not TensorBoard"},
    {"--manual-gc", false, "no garbage collector"},
    {"--empty-unused-memory-level", true, "no caching allocator"},
    {"--wandb-project", true, "no Weights & Biases"},
    {"--wandb-exp-name", true, "no Weights & Biases"},
    {"--wandb-save-dir", true, "no Weights & Biases"},
    {"--data-impl", true, "indexed datasets are read memory-mapped (Megatron's mmap)"},
    {"--optimizer", true, "paralab trains with AdamW (Megatron's adam, decoupled weight decay)"},
    {"--use-flash-attn", false, "flash attention is the default, --attention flash"},
    {"--use-flash-attn-v2", false, "flash attention is the default, --attention flash"},
    {"--use-flash-attn-triton", false, "flash attention is the default, --attention flash"},
    {"--no-query-key-layer-scaling", false, "no query-key layer scaling (fp16's)"},
    {"--accumulate-allreduce-grads-in-fp32", false, "gradients are reduced in fp32"},
    {"--no-bias-gelu-fusion", false, "kernel fusion"},
    {"--no-bias-dropout-fusion", false, "kernel fusion"},
    {"--no-pipeline-parallel", false, "Megatron-DeepSpeed's pipeline engine off: paralab's is --pp"},
    {"--partition-activations", false, "DeepSpeed's activation partitioning"},
    {"--contigious-checkpointing", false, "DeepSpeed's checkpointing buffers"},
    {"--checkpoint-in-cpu", false, "DeepSpeed's CPU checkpointing"},
    {"--synchronize-each-layer", false, "DeepSpeed's checkpointing"},
    {"--profile-backward", false, "DeepSpeed's checkpointing profile"},
    {"--cpu-optimizer", false, "use --optimizer-cpu-offload (or the config's offload_optimizer)"},
    {"--log-batch-size-to-tensorboard", false, "the batch is in the header"},
    {"--log-memory-to-tensorboard", false, "peak memory is a step scalar already"},
    {"--log-world-size-to-tensorboard", false, "the world is in the header"},
};

// Flags paralab does not take, with what to use instead: names a Megatron-LM or
// Megatron-DeepSpeed script uses where an edit distance would not find paralab's.
const std::pair<const char*, const char*> kAliases[] = {
    {"--num-groups", "--num-query-groups"},
    {"--num-key-value-heads", "--num-query-groups"},
    {"--checkpoint-activations",
     "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"},
    {"--checkpoint-num-layers", "--recompute-num-layers"},
    {"--ffn-dim", "--ffn-hidden-size"},
    {"--seq-len", "--seq-length"},
    {"--max-seq-len", "--seq-length"},
    {"--n-layers", "--num-layers"},
    {"--n-heads", "--num-attention-heads"},
    {"--dim", "--hidden-size"},
    {"--warmup-iters", "--lr-warmup-iters"},
    {"--warmup-steps", "--lr-warmup-iters"},
    {"--zero-stage-3", "--zero-stage 3"},
    {"--sequence-parallel-size", "--context-parallel-size (Megatron-DeepSpeed's Ulysses: "
                                 "--cp-comm-type a2a)"},
    {"--ds-sequence-parallel-size", "--context-parallel-size --cp-comm-type a2a (Ulysses)"},
    {"--use-rotary-position-embedding", "--use-rotary-position-embeddings"},
};

bool given(const CLI::App& app, const char* name) { return app.count(name) > 0; }

}  // namespace

void add_megatron_flags(CLI::App& app, Options& o, RawFlags& raw) {
  RawFlags::Megatron& mg = raw.megatron;
  ModelConfig& m = o.model;
  const char* kGroup = "Megatron-LM's names (a pasted Megatron script; docs/megatron.md)";
  add_switch(app, "--swiglu", mg.swiglu, "llama's SwiGLU MLP (with --arch llama, or all of Megatron's "
             "Llama parts: then it chooses llama)")->group(kGroup);
  app.add_option("--normalization", mg.normalization, "LayerNorm (gpt) or RMSNorm (llama)")
      ->check(one_of({"LayerNorm", "RMSNorm"}))->group(kGroup);
  app.add_option("--position-embedding-type", mg.position_embedding_type,
                 "learned_absolute (gpt) or rope (llama)")
      ->check(one_of({"learned_absolute", "rope"}))->group(kGroup);
  add_switch(app, "--use-rotary-position-embeddings", mg.rotary, "rope (llama), Megatron's older name")
      ->group(kGroup);
  add_switch(app, "--no-position-embedding", mg.no_position_embedding,
             "no learned position table (llama's rope)")->group(kGroup);
  add_switch(app, "--untie-embeddings-and-output-weights", mg.untie,
             "llama's separate output layer (gpt ties it to the embedding)")->group(kGroup);
  add_switch(app, "--disable-bias-linear", mg.no_bias, "llama's linears without biases")
      ->group(kGroup);
  add_switch(app, "--group-query-attention", mg.gqa,
             "grouped-query attention: --num-query-groups (Megatron's default 1 when not given)")
      ->group(kGroup);
  app.add_option("--max-position-embeddings", mg.max_position_embeddings,
                 "gpt: the learned position table's rows, must equal --seq-length; llama: "
                 "accepted (RoPE has no table), >= --seq-length")
      ->group(kGroup);
  app.add_option("--rotary-percent", mg.rotary_percent,
                 "the share of a head's dimensions RoPE turns; paralab's llama turns all: 1.0")
      ->group(kGroup);
  app.add_option("--init-method-std", m.init_method_std,
                 "the standard deviation of the initial weights, N(0, std), the two output "
                 "projections of a layer std / sqrt(2L) (Megatron's); > 0")
      ->capture_default_str()->group(kGroup);
  app.add_option("--train-samples", mg.train_samples,
                 "instead of --train-iters: samples to train on; steps = samples / "
                 "--global-batch-size (rounded down), and the learning-rate schedule counts "
                 "samples (--lr-warmup-samples, --lr-decay-samples)")
      ->group(kGroup);
  app.add_option("--lr-warmup-samples", mg.lr_warmup_samples,
                 "with --train-samples: the linear warm-up's length in samples")->group(kGroup);
  app.add_option("--lr-decay-samples", mg.lr_decay_samples,
                 "with --train-samples: samples until the decay reaches --min-lr (default: "
                 "--train-samples)")->group(kGroup);
  app.add_option("--lr-warmup-fraction", mg.lr_warmup_fraction,
                 "the warm-up as a fraction of the decay (--lr-decay-iters, or samples), "
                 "instead of --lr-warmup-iters; in [0, 1]")->group(kGroup);
  add_switch(app, "--recompute-activations", mg.recompute_activations,
             "= --recompute-granularity selective (Megatron's shorthand)")->group(kGroup);
  add_switch(app, "--check-for-nan-in-loss-and-grad", mg.check_nan,
             "stop at the first step whose loss or gradient norm is NaN or Inf: "
             "= --max-skipped-steps 1 (exit status 3)")->group(kGroup);
  app.add_option("--distributed-timeout-minutes", mg.timeout_minutes,
                 "= --collective-timeout in minutes (x 60)")->group(kGroup);
  app.add_option("--tensorboard-dir", o.tensorboard_dir,
                 "write TensorBoard event files of the scalars (loss, learning rate, gradient "
                 "norm, tokens/s, MFU, HFU, peak memory, skipped steps, validation loss) into DIR")
      ->type_name("DIR")->group(kGroup);
  app.add_option("--tensorboard-log-interval", o.tensorboard_log_interval,
                 "with --tensorboard-dir: the step scalars every N steps (and the last); >= 1")
      ->capture_default_str()->group(kGroup);
  add_switch(app, "--log-validation-ppl-to-tensorboard", mg.validation_ppl,
             "with --tensorboard-dir: also the validation perplexity")->group(kGroup);
  for (const NoEffect& f : kNoEffect) {
    const std::string help = std::string("accepted, no effect here: ") + f.why;
    if (f.takes_value)
      app.add_option(f.name, mg.no_effect_values[f.name], help)->group(kGroup);
    else
      app.add_flag(f.name, help)->group(kGroup);
  }
}

namespace {

// The model's parts, as Megatron composes it (--swiglu, --normalization, ...), against the two
// families paralab builds: a conflict with --arch fails, a complete Llama sets raw.arch.
void resolve_model_family(const CLI::App& app, RawFlags& raw) {
  const RawFlags::Megatron& mg = raw.megatron;
  std::vector<std::string> llama, gpt;  // the parts given, as typed
  if (mg.swiglu) llama.push_back("--swiglu");
  if (mg.normalization == "RMSNorm") llama.push_back("--normalization RMSNorm");
  if (mg.normalization == "LayerNorm") gpt.push_back("--normalization LayerNorm");
  if (mg.position_embedding_type == "rope") llama.push_back("--position-embedding-type rope");
  if (mg.position_embedding_type == "learned_absolute")
    gpt.push_back("--position-embedding-type learned_absolute");
  if (mg.rotary) llama.push_back("--use-rotary-position-embeddings");
  if (mg.no_position_embedding) llama.push_back("--no-position-embedding");
  if (mg.untie) llama.push_back("--untie-embeddings-and-output-weights");
  if (mg.no_bias) llama.push_back("--disable-bias-linear");
  const bool arch_given = given(app, "--arch");
  // Megatron's pretrain_llama.py sets the Llama parts itself, so a Llama script names none but
  // its tokenizer: rather than build a GPT from it, ask for the family by name
  if (!arch_given && llama.empty() && gpt.empty() &&
      raw.tokenizer_type.find("Llama") != std::string::npos)
    fail("--tokenizer-type ", raw.tokenizer_type, " names a Llama model, but no --arch nor "
         "Llama's parts (--swiglu, --normalization RMSNorm, ...) are given (Megatron's "
         "pretrain_llama.py sets them): give --arch llama, or --arch gpt for a GPT");
  if (arch_given && raw.arch == "gpt" && !llama.empty())
    fail(llama[0], " (llama's) conflicts with --arch gpt (LayerNorm, learned positions, GeLU MLP, "
         "biases, tied embeddings)");
  if (arch_given && raw.arch == "llama" && !gpt.empty())
    fail(gpt[0], " (gpt's) conflicts with --arch llama (RMSNorm, RoPE, SwiGLU MLP, no biases, "
         "untied output layer)");
  if (!arch_given && !llama.empty()) {
    if (!gpt.empty())
      fail(llama[0], " (llama's) and ", gpt[0], " (gpt's) describe two families; paralab "
           "builds gpt or llama (--arch)");
    std::vector<std::string> missing;  // Megatron's defaults there are gpt's parts
    if (!mg.swiglu) missing.push_back("--swiglu");
    if (mg.normalization != "RMSNorm") missing.push_back("--normalization RMSNorm");
    if (mg.position_embedding_type != "rope" && !mg.rotary)
      missing.push_back("--position-embedding-type rope");
    if (!mg.untie) missing.push_back("--untie-embeddings-and-output-weights");
    if (!mg.no_bias) missing.push_back("--disable-bias-linear");
    if (!missing.empty()) {
      std::string list;
      for (const std::string& s : missing) list += (list.empty() ? "" : ", ") + s;
      fail(llama[0], " describes Megatron's Llama, but ", list,
           " is missing (Megatron's default there is gpt's part, a mix paralab does not build): "
           "add it, or give --arch llama");
    }
    raw.arch = "llama";
  }
}

// Megatron's shape flags paralab takes only where they mean its own model: the position table,
// RoPE on every pair, --group-query-attention's one group, the init's std.
void check_model_shape_flags(const CLI::App& app, Options& o, const RawFlags& raw) {
  const RawFlags::Megatron& mg = raw.megatron;
  if (given(app, "--max-position-embeddings")) {
    const int table = mg.max_position_embeddings, S = o.model.seq_length;
    if (raw.arch == "gpt" && table != S)
      fail("--max-position-embeddings (", table, ") with --arch gpt: paralab's learned position "
           "table has --seq-length (", S, ") rows; give the same");
    if (raw.arch == "llama" && table < S)
      fail("--max-position-embeddings (", table, ") must be >= --seq-length (", S, ")");
  }
  if (given(app, "--rotary-percent") && mg.rotary_percent != 1.0)
    fail("--rotary-percent must be 1.0 (paralab's RoPE turns every dimension pair of a head), got ",
         mg.rotary_percent);
  if (mg.gqa && !given(app, "--num-query-groups")) o.model.num_query_groups = 1;  // Megatron's
  if (!(o.model.init_method_std > 0) || !std::isfinite(o.model.init_method_std))
    fail("--init-method-std must be a finite number > 0, got ", o.model.init_method_std);
}

// The same settings under Megatron's names (recompute, NaN check, timeout, TensorBoard); both
// spellings must agree.
void resolve_megatron_synonyms(const CLI::App& app, Options& o, RawFlags& raw) {
  const RawFlags::Megatron& mg = raw.megatron;
  if (mg.recompute_activations) {
    if (!raw.recompute_granularity.empty() && raw.recompute_granularity != "selective")
      fail("--recompute-activations (= --recompute-granularity selective) conflicts with "
           "--recompute-granularity ", raw.recompute_granularity);
    raw.recompute_granularity = "selective";
  }
  if (mg.check_nan) {
    if (given(app, "--max-skipped-steps") && o.train.max_skipped_steps != 1)
      fail("--check-for-nan-in-loss-and-grad (= --max-skipped-steps 1) conflicts with "
           "--max-skipped-steps ", o.train.max_skipped_steps);
    o.train.max_skipped_steps = 1;
  }
  if (given(app, "--distributed-timeout-minutes")) {
    if (!(mg.timeout_minutes >= 0) || !std::isfinite(mg.timeout_minutes))
      fail("--distributed-timeout-minutes must be a finite number >= 0, got ", mg.timeout_minutes);
    if (given(app, "--collective-timeout") && o.collective_timeout != 60 * mg.timeout_minutes)
      fail("--distributed-timeout-minutes ", mg.timeout_minutes, " (", 60 * mg.timeout_minutes,
           " s) conflicts with --collective-timeout ", o.collective_timeout);
    o.collective_timeout = 60 * mg.timeout_minutes;
  }
  if (o.tensorboard_log_interval < 1)
    fail("--tensorboard-log-interval must be >= 1, got ", o.tensorboard_log_interval);
  if (mg.validation_ppl && o.tensorboard_dir.empty())
    fail("--log-validation-ppl-to-tensorboard needs --tensorboard-dir DIR");
  o.tensorboard_validation_ppl = mg.validation_ppl;
}

// Samples instead of steps (resolved once the global batch is: apply_megatron_schedule): the
// two ways to give the length and the warm-up must not mix.
void check_sample_schedule(const CLI::App& app, const Options& o, RawFlags& raw) {
  RawFlags::Megatron& mg = raw.megatron;
  const bool samples = given(app, "--train-samples");
  if (samples && given(app, "--train-iters"))
    fail("give --train-iters (", o.train.train_iters, ") or --train-samples (", mg.train_samples,
         "), not both");
  if (!samples && (given(app, "--lr-warmup-samples") || given(app, "--lr-decay-samples")))
    fail(given(app, "--lr-warmup-samples") ? "--lr-warmup-samples" : "--lr-decay-samples",
         " needs --train-samples (with --train-iters the schedule counts steps)");
  if (samples && (given(app, "--lr-warmup-iters") || given(app, "--lr-decay-iters")))
    fail(given(app, "--lr-warmup-iters") ? "--lr-warmup-iters" : "--lr-decay-iters",
         " with --train-samples: give --lr-warmup-samples / --lr-decay-samples (Megatron's rule)");
  const bool fraction = given(app, "--lr-warmup-fraction");
  if (fraction && (given(app, "--lr-warmup-iters") || given(app, "--lr-warmup-samples")))
    fail("--lr-warmup-fraction and ",
         given(app, "--lr-warmup-iters") ? "--lr-warmup-iters" : "--lr-warmup-samples",
         " both give the warm-up: give one");
  if (fraction && !(mg.lr_warmup_fraction >= 0 && mg.lr_warmup_fraction <= 1))
    fail("--lr-warmup-fraction must be in [0, 1], got ", mg.lr_warmup_fraction);
  mg.samples = samples;
  mg.fraction = fraction;
}

}  // namespace

void resolve_megatron_flags(const CLI::App& app, Options& o, RawFlags& raw) {
  RawFlags::Megatron& mg = raw.megatron;
  for (const NoEffect& f : kNoEffect)
    if (given(app, f.name)) mg.no_effect.push_back(std::string(f.name) + " (" + f.why + ")");
  resolve_model_family(app, raw);
  check_model_shape_flags(app, o, raw);
  resolve_megatron_synonyms(app, o, raw);
  check_sample_schedule(app, o, raw);
}

void apply_megatron_schedule(Options& o, const RawFlags& raw) {
  const RawFlags::Megatron& mg = raw.megatron;
  TrainConfig& t = o.train;
  const int64_t G = t.global_batch_size;
  if (mg.samples) {
    if (mg.train_samples < G)
      fail("--train-samples (", mg.train_samples, ") must be at least one step of "
           "--global-batch-size (", G, ")");
    if (mg.train_samples / G > 2000000000) fail("--train-samples (", mg.train_samples, ") is too many steps");
    t.train_iters = (int)(mg.train_samples / G);
    if (mg.lr_warmup_samples < 0) fail("--lr-warmup-samples must be >= 0, got ", mg.lr_warmup_samples);
    if (mg.lr_decay_samples < 0) fail("--lr-decay-samples must be >= 0, got ", mg.lr_decay_samples);
    t.lr_decay_samples = mg.lr_decay_samples > 0 ? mg.lr_decay_samples : mg.train_samples;
    t.lr_warmup_samples = mg.fraction ? (int64_t)std::llround(mg.lr_warmup_fraction * t.lr_decay_samples)
                                      : mg.lr_warmup_samples;
    if (t.lr_warmup_samples > t.lr_decay_samples)
      fail("--lr-warmup-samples (", t.lr_warmup_samples, ") must be <= --lr-decay-samples (",
           t.lr_decay_samples, ")");
    t.lr_warmup_iters = 0;  // the schedule counts samples (model/optimizer.h learning_rate)
    return;
  }
  if (mg.fraction) {
    const int decay = t.lr_decay_iters > 0 ? t.lr_decay_iters : t.train_iters;
    const double steps = mg.lr_warmup_fraction * decay;
    t.lr_warmup_iters = (int)std::llround(steps);
    if (std::fabs(steps - t.lr_warmup_iters) > 1e-6)
      o.warnings.push_back("--lr-warmup-fraction " + std::to_string(mg.lr_warmup_fraction) +
                           " of " + std::to_string(decay) + " decay steps = " +
                           std::to_string(steps) + ": warm-up rounded to " +
                           std::to_string(t.lr_warmup_iters) + " steps");
  }
}

std::string megatron_alias(const std::string& typed) {
  const std::string name = typed.substr(0, typed.find('='));
  for (const auto& [alias, instead] : kAliases)
    if (name == alias) return "use " + std::string(instead);
  return "";
}

std::string megatron_no_effect_warning(const RawFlags& raw) {
  if (raw.megatron.no_effect.empty()) return "";
  std::string s = "Megatron flags with no effect in paralab:";
  for (size_t i = 0; i < raw.megatron.no_effect.size(); ++i)
    s += (i ? ", " : " ") + raw.megatron.no_effect[i];
  return s;
}

}  // namespace paralab
