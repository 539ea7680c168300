// cli/flags.cpp: every flag and its help text (the manual: what it changes, its constraint), and
// the parse that reads them (design in cli/flags.h). The checks that turn a bad combination into
// one line are in cli/flags_check.cpp; the mixture-of-experts flags and checks in cli/flags_moe.cpp.
#include "cli/flags.h"

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "cli/flags_impl.h"  // defines: RawFlags, resolve_and_check (cli/flags_check.cpp)

namespace paralab {

namespace {

constexpr size_t kHelpColumn = 46, kHelpWidth = 100;  // where help text starts and ends

// Help text wrapped to `width` columns; CLI11 indents the lines after a newline.
std::string wrap(const std::string& text, size_t width) {
  std::istringstream words(text);
  std::string out, line, word;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

// CLI11's messages, made one line that names the flag.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void add_flags(CLI::App& app, Options& o, RawFlags& raw) {
  ModelConfig& m = o.model;
  TrainConfig& t = o.train;
  ParallelConfig& p = o.parallel;
  const char* kModel = "Model";
  const char* kTrain = "Training";
  const char* kParallel = "Parallelism";
  const char* kRun = "Run, data and backends";
  const char* kReport = "Report and plan";

  // ---- model ----
  app.add_option("--arch", raw.arch,
                 "gpt: LayerNorm, learned positions, GeLU MLP, biases, tied embeddings; "
                 "llama: RMSNorm, RoPE, SwiGLU MLP, no biases, untied output layer")
      ->check(one_of({"gpt", "llama"}))->capture_default_str()->group(kModel);
  app.add_option("--num-layers,--layers", m.num_layers,
                 "transformer layers L; --pp must divide it")
      ->capture_default_str()->group(kModel);
  app.add_option("--hidden-size,--hidden", m.hidden_size,
                 "model width h; --num-attention-heads must divide it (unless --kv-channels "
                 "gives the head dim)")
      ->capture_default_str()->group(kModel);
  app.add_option("--ffn-hidden-size,--ffn", m.ffn_hidden_size,
                 "MLP inner width f (llama: width of each of gate and up); 0 means 4h; "
                 "--tp must divide it")
      ->capture_default_str()->group(kModel);
  app.add_option("--num-attention-heads,--heads", m.num_attention_heads,
                 "query heads a; must divide h unless --kv-channels gives the head dim (default "
                 "h/a; even for llama's RoPE); --tp must divide it")
      ->capture_default_str()->group(kModel);
  app.add_option("--num-query-groups,--query-groups", m.num_query_groups,
                 "key/value heads g for grouped-query attention; 0 means a (multi-head); "
                 "must divide a; --tp must divide it")
      ->capture_default_str()->group(kModel);
  app.add_option("--kv-channels", m.kv_channels,
                 "head dim d of every query, key and value head; >= 1, even for llama's RoPE; "
                 "default h/a (then a must divide h); given, a x d need not equal h: the QKV "
                 "projection is h -> (a + 2g) d and the output projection a d -> h")
      ->group(kModel);
  add_switch(app, "--qk-layernorm", m.qk_layernorm,
             "normalise each head's query and key before RoPE and the scores (RMSNorm for llama, "
             "LayerNorm for gpt; one weight of d entries shared by the heads), as Qwen3 and OLMo 2 "
             "do; with --tp > 1 it needs --sequence-parallel")
      ->group(kModel);
  app.add_option("--rotary-base", m.rope_theta,
                 "llama only: RoPE's base theta (dimension pair i of a head turns by position x "
                 "theta^(-2i/d)); > 0; gpt's learned positions ignore it")
      ->capture_default_str()->group(kModel);
  app.add_option("--norm-epsilon", m.norm_epsilon,
                 "epsilon of every LayerNorm / RMSNorm, 1/sqrt(var + eps) or 1/sqrt(mean(x^2) + "
                 "eps); > 0")
      ->capture_default_str()->group(kModel);
  app.add_option("--seq-length,--seq", m.seq_length,
                 "tokens per sample s (also the learned-position table size for gpt)")
      ->capture_default_str()->group(kModel);
  app.add_option("--vocab-size,--vocab", m.vocab_size,
                 "vocabulary V: embedding rows and logits per token; every token id of "
                 "--data-path must be below it (plain text needs >= 256)")
      ->capture_default_str()->group(kModel);
  app.add_option("--make-vocab-size-divisible-by", m.vocab_divisible_by,
                 "pad the embedding and output layer to a multiple of this x tp rows "
                 "(Megatron's; 128: GPT-2's 50257 -> 50304) so the output layer's GEMMs take "
                 "the fast kernels; the padding is masked out of the loss; >= 1")
      ->capture_default_str()->group(kModel);
  app.add_option("--hidden-dropout", m.hidden_dropout,
                 "dropout probability after the attention projection and after the MLP, "
                 "in [0, 1); saves a 1-byte mask per element for backward")
      ->capture_default_str()->group(kModel);
  app.add_option("--attention-dropout", m.attention_dropout,
                 "dropout probability on the attention probabilities, in [0, 1)")
      ->capture_default_str()->group(kModel);
  app.add_option("--attention", raw.attention,
                 "flash: tiled online softmax, saves only the log-sum-exp (B a s floats); "
                 "naive: materialises and saves the B a s s probabilities")
      ->check(one_of({"flash", "naive"}))->capture_default_str()->group(kModel);
  add_switch(app, "--fused-ce,!--no-fused-ce", m.fused_cross_entropy,
             "materialise the full (B s, V) logits for the loss (ledger category logits) "
             "instead of the default fused, chunked softmax cross-entropy that never holds "
             "them; in a --config file no-fused-ce = true (or fused-ce = false)")
      ->group(kModel);
  add_moe_flags(app, o, raw);  // cli/flags_moe.cpp: --num-experts, --moe-*

  // ---- training ----
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
  add_switch(app, "--bf16", t.bf16,
             "bf16 parameters, gradients and activations with fp32 master weights and "
             "Adam moments (on CPU bf16 is storage only); default fp32")
      ->group(kTrain);

  // ---- activation recompute (Megatron's names; model/config.h Recompute) ----
  app.add_option("--recompute-granularity", raw.recompute_granularity,
                 "recompute activations in backward instead of keeping them: full (a layer "
                 "keeps only its input; needs --recompute-method and --recompute-num-layers) or "
                 "selective (every layer drops the internals of --recompute-modules; takes "
                 "neither); default none")
      ->check(one_of({"full", "selective"}))->group(kTrain);
  app.add_option("--recompute-method", raw.recompute_method,
                 "full only: uniform (the layers of each pipeline stage in groups of "
                 "--recompute-num-layers, each keeping its input; the last group may be "
                 "partial) or block (the first --recompute-num-layers layers of each stage are "
                 "recomputed, the others keep their activations)")
      ->check(one_of({"uniform", "block"}))->group(kTrain);
  app.add_option("--recompute-num-layers", raw.recompute_num_layers,
                 "full only: the group size (uniform) or the recomputed layers per stage "
                 "(block); between 1 and the layers of a pipeline rank")
      ->group(kTrain);
  app.add_option("--recompute-modules", raw.recompute_modules,
                 "selective only: modules whose internals are recomputed, any of core_attn "
                 "(attention probabilities, dropout mask: the 5as/h term; with flash attention "
                 "only its log-sum-exp), mlp (fc1 and activation outputs), norm (the norms' "
                 "outputs and statistics; Megatron's name layernorm also works); space- or "
                 "comma-separated; default core_attn")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->delimiter(',')
      ->type_name("MODULE")->group(kTrain);

  // ---- parallelism ----
  app.add_option("--tensor-model-parallel-size,--tp", p.tensor_parallel,
                 "tensor parallel ranks: split every layer's matmuls; must divide the heads, "
                 "the query groups and the ffn size")
      ->capture_default_str()->group(kParallel);
  add_switch(app, "--sequence-parallel", p.sequence_parallel,
             "with --tp > 1: split the tokens of the norm, dropout and residual regions over "
             "the tp ranks (all-gather / reduce-scatter instead of all-reduce); needs --tp "
             "to divide --seq-length; ignored with a warning at --tp 1")
      ->group(kParallel);
  add_pipeline_flags(app, o, raw, kParallel);  // cli/flags_pipeline.cpp: --pp, --pipeline-*
  app.add_option("--context-parallel-size,--cp", p.context_parallel,
                 "context parallel ranks cp: each sequence split over them (s/cp tokens per "
                 "rank), attention exchanging keys and values by --cp-comm-type; --seq-length "
                 "must divide by 2 cp (the zigzag layout's chunks)")
      ->capture_default_str()->group(kParallel);
  app.add_option("--cp-comm-type", raw.cp_comm_type,
                 "how context-parallel attention meets the other ranks' tokens: p2p (a ring of "
                 "key/value blocks, overlapped with the attention), all_gather (gather every "
                 "key and value; Megatron also spells it allgather) or a2a (Ulysses: "
                 "all-to-all to head-split whole sequences; heads and query groups per tp rank "
                 "must divide by cp)")
      ->check(one_of({"p2p", "all_gather", "allgather", "a2a"}))->capture_default_str()
      ->group(kParallel);
  app.add_option("--cp-layout", raw.cp_layout,
                 "which tokens each context-parallel rank holds: zigzag (chunks r and 2cp-1-r "
                 "of 2cp, Megatron's: equal causal attention work) or contiguous (the r-th "
                 "s/cp tokens, picotron's: rank cp-1 does about 2cp-1 times rank 0's attention)")
      ->check(one_of({"zigzag", "contiguous"}))->capture_default_str()->group(kParallel);
  app.add_option("--expert-model-parallel-size,--ep", p.expert_parallel,
                 "expert parallel ranks ep (mixture of experts): each MoE layer's E experts "
                 "split over them, E / ep per rank; needs --num-experts, must divide it; "
                 "etp x ep must divide the ranks of a pipeline stage, world / pp, the rest "
                 "world / (etp x ep x pp) being the expert-data-parallel ranks")
      ->capture_default_str()->group(kParallel);
  app.add_option("--expert-tensor-parallel-size,--etp", raw.expert_tensor_parallel,
                 "tensor parallel ranks etp of each expert (its width, --moe-ffn-hidden-size, "
                 "split over them: fc1's rows, fc2's columns); >= 1, must divide it; default "
                 "--tp (Megatron's), 1 folds whole experts over the tp ranks; needs "
                 "--num-experts")
      ->group(kParallel);
  app.add_option("--moe-token-dispatcher-type", raw.moe_token_dispatcher,
                 "how tokens reach the experts of the other ep ranks: allgather (each rank "
                 "gathers every token of its ep group and keeps those routed to its experts; "
                 "Megatron's default) or alltoall (each token sent only to the ranks of its "
                 "experts, and back); needs --num-experts")
      ->check(one_of({"allgather", "alltoall"}))->capture_default_str()->group(kParallel);
  app.add_option("--zero-stage,--zero", p.zero_stage,
                 "ZeRO stage over the data-parallel group: 0 replicate everything, 1 shard "
                 "optimizer states and master weights, 2 also gradients, 3 also parameters")
      ->capture_default_str()->group(kParallel);
  add_switch(app, "--use-distributed-optimizer", raw.use_distributed_optimizer,
             "Megatron's name for ZeRO stage 1 (raises --zero-stage to at least 1)")
      ->group(kParallel);
  add_switch(app, "--overlap-grad-reduce", o.overlap_grad_reduce,
             "start each gradient bucket's reduction as soon as backward has produced it, "
             "overlapping communication with the rest of backward")
      ->group(kParallel);
  add_switch(app, "--overlap-param-gather", o.overlap_param_gather,
             "all-gather the updated parameter shards during the next forward; needs the "
             "distributed optimizer (--zero-stage >= 1)")
      ->group(kParallel);
  app.add_option("--ddp-bucket-size", o.ddp_bucket_size,
                 "gradient elements per communication bucket; smaller buckets start "
                 "reducing earlier but make more calls; >= 1")
      ->capture_default_str()->group(kParallel);
  app.add_option("--zero3-prefetch-layers", o.zero3_prefetch_layers,
                 "ZeRO-3: layers whose parameters are all-gathered ahead of use; >= 0")
      ->capture_default_str()->group(kParallel);
  add_offload_flags(app, o);  // cli/flags_offload.cpp: --optimizer-cpu-offload, ...

  // ---- run, data, backends ----
  app.add_option("--device", raw.device,
                 "compute backend; default cuda when a GPU is visible, else cpu; cuda-emulated: "
                 "the CUDA code run on the CPU by the emulated device (build/emulated/trainer, "
                 "make emulated), for testing and reading, not speed")
      ->check(one_of({"cuda", "cpu", "cuda-emulated"}))->group(kRun);
  app.add_option("--comm", raw.comm,
                 "communication backend; default nccl with --device cuda, mpi with cpu; "
                 "nccl needs --device cuda")
      ->check(one_of({"nccl", "mpi"}))->group(kRun);
  app.add_option("--collective-timeout", o.collective_timeout,
                 "seconds a rank waits for one collective or pipeline message before it ends "
                 "the job, naming the group, the operation and the step (a rank died or "
                 "hangs); 0: wait forever")
      ->capture_default_str()->group(kRun);
  app.add_option("--timing-log-level", o.timing_log_level,
                 "kernel timing (Megatron-LM's levels): 0 none, so the step carries no timer "
                 "events; 1 each phase's kernels (GEMMs, attention, memory-bound, optimizer) "
                 "timed and printed beside their projection; 2 also each op's; Megatron's "
                 "default is 0")
      ->capture_default_str()->group(kRun);
  app.add_option("--data-path", o.data_path,
                 "training tokens: an llm.c token file (.bin, uint16 tokens) or plain text "
                 "(one token per byte); without it, a synthetic corpus made from --seed")
      ->type_name("FILE")->group(kRun);

  // ---- report, plan ----
  add_switch(app, "--plan", o.plan,
             "print the predicted memory, FLOPs, communication and pipeline bubble of "
             "this configuration and exit, allocating nothing; --world-size N plans for N "
             "ranks")
      ->group(kReport);
  add_switch(app, "--json", o.json, "with --plan: print the plan as JSON")->group(kReport);
  app.add_option("--world-size", raw.world_size,
                 "with --plan: plan for this many ranks (>= 1) without launching them (a run's "
                 "world size is the number of ranks mpirun starts)")
      ->group(kReport);
  add_switch(app, "--print-schedule", o.print_schedule,
             "each pipeline rank's timeline, to scale, idle as dots: simulated with --plan "
             "(on stderr with --json), else the last step's as measured")
      ->group(kReport);
  app.add_option("--trace", o.trace,
                 "write the pipeline timeline as Chrome trace JSON, one process per rank "
                 "(ui.perfetto.dev): simulated with --plan, else the last step's as measured")
      ->type_name("FILE")->group(kReport);
  app.add_option("--hardware", o.hardware,
                 "hardware profile for the time model and the fit check: a name in "
                 "configs/hardware/ (h100-sxm, a100-80gb, cpu, ...) or a .toml file (from "
                 "--benchmark-save); default: the profile matching the GPU, on CPU "
                 "configs/hardware/cpu.toml")
      ->type_name("NAME|FILE")->group(kReport);
  app.add_option("--plan-tokens", o.plan_tokens,
                 "with --plan: project the wall-clock time to train this many tokens (e.g. "
                 "300e9), by the time model and by Narayanan et al. eq. 4")
      ->group(kReport);
  add_switch(app, "--allow-oom", o.allow_oom,
             "train even when the plan's peak memory per rank exceeds what the device (GPU: "
             "its free memory; CPU: the host's available memory over the ranks on the node) "
             "has")
      ->group(kReport);
  add_switch(app, "--benchmark", o.benchmark,
             "measure the machine and exit: GEMM TFLOP/s by size, memory bandwidth, kernel "
             "launch overhead, and per group size the bus bandwidth and latency of "
             "all-reduce, all-gather, reduce-scatter, all-to-all and send/recv (nccl-tests' "
             "convention); names a rank far slower than its peers")
      ->group(kReport);
  app.add_option("--benchmark-max-mib", o.benchmark_max_mib,
                 "with --benchmark: the largest GEMM operand and message, MiB; 0: 64 on CPU, "
                 "1024 on GPU")
      ->capture_default_str()->group(kReport);
  app.add_option("--benchmark-save", o.benchmark_save,
                 "with --benchmark: write the measured hardware profile to this .toml file "
                 "(use it with --hardware FILE)")
      ->type_name("FILE")->group(kReport);
  app.add_option("--metrics-jsonl", o.metrics_jsonl,
                 "write one JSON object per step, with every reported field, to this file "
                 "(replacing it)")
      ->type_name("FILE")->group(kReport);
  app.add_option("--save-tensors", o.save_tensors,
                 "tests: at the end, write every parameter and, as grad.<name>, the last "
                 "step's summed gradient, at full shape (gathered over dp and tp), to this "
                 "tensor file (checkpoint/tensor_file.h)")
      ->type_name("FILE")->group(kReport);
  add_checkpoint_flags(app, o);  // cli/flags_checkpoint.cpp: --save, --load, --export-hf, ...
  add_megatron_flags(app, o, raw);  // cli/flags_megatron.cpp: a pasted Megatron script's flags
  app.add_option("--report-interval", o.report_interval,
                 "print the full ledger tables every N steps (always at step 1 and at the "
                 "end); 0: only then")
      ->capture_default_str()->group(kReport);
  app.add_option("--log-interval", o.log_interval,
                 "print the step line every N steps (and at step 1 and the last); its loss "
                 "is the mean over the steps since the previous line")
      ->capture_default_str()->group(kReport);
  app.add_option("--eval-interval", o.eval_interval,
                 "validation loss every N steps and after the last one, forward only, on a "
                 "held-out split (synthetic: a continuation of the corpus; --data-path: the "
                 "file's last 10%); 0: no evaluation")
      ->capture_default_str()->group(kTrain);
  app.add_option("--eval-iters", o.eval_iters,
                 "validation batches per evaluation, each of --global-batch-size samples; "
                 "the same batches every time; >= 1")
      ->capture_default_str()->group(kTrain);
  app.add_option("--peak-tflops", o.peak_tflops,
                 "peak TFLOP/s of one rank for MFU/HFU; 0: the GPU's entry in "
                 "configs/hardware/, or on CPU the best of 5 timed GEMMs at start-up, which "
                 "varies between runs: give it to compare MFU across runs")
      ->capture_default_str()->group(kReport);
  app.add_option("--attention-flops", raw.attention_flops,
                 "count attention FLOPs as full (s x s, Korthikanti/PaLM; compare with "
                 "papers) or causal (half); model FLOPs and MFU use it")
      ->check(one_of({"full", "causal"}))->capture_default_str()->group(kReport);
  add_switch(app, "--verbose,-v", o.verbose,
             "print every flag's final value and where it came from (default, a --config "
             "file's line, the command line) before the run or the plan, and the rank grid "
             "when training; rank 0 only")
      ->group(kReport);
}

// CLI11 says "INI was not able to parse KEY" for a config key that is no flag.
std::string config_error_message(const std::string& what) {
  const std::string prefix = "INI was not able to parse ";
  if (what.rfind(prefix, 0) == 0)
    return "--config: unknown key '" + what.substr(prefix.size()) +
           "' (keys are long flag names without the dashes, e.g. num-layers = 4)";
  return "--config: " + what;
}

}  // namespace

Options parse_flags(int argc, const char* const* argv, int launched_world_size,
                    int visible_gpus) {
  Options o;
  RawFlags raw;
  o.launched_world_size = launched_world_size;

  CLI::App app{wrap("paralab trainer: trains a GPT- or Llama-style transformer with every "
                    "parallel dimension behind a flag, and prints where memory, bytes and time "
                    "went.", kHelpWidth) +
                   "\nLaunch N ranks with `mpirun -np N ./trainer ...`; world = tp x cp x pp x dp.",
               "trainer"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto manual = std::make_shared<ManualFormatter>();
  manual->column_width(kHelpColumn);
  app.formatter(manual);
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.config_formatter(toml_config_for_cli11());  // cli/flags_toml.cpp
  add_flags(app, o, raw);
  // Several --config files are all read; a later file overrides an earlier one.
  app.set_config("--config", "", "TOML file of flags: key = value lines, the keys the long "
                 "flag names without dashes (num-layers = 4); command-line flags override it, "
                 "a later --config overrides an earlier one")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("FILE")->group("Run, data and backends");
  // Made again last, so that it is listed in a group of the manual rather than alone atop it.
  app.set_help_flag("-h,--help", "print this manual and exit")->group("Run, data and backends");
  for (CLI::Option* opt : app.get_options())
    opt->description(wrap(opt->get_description(), kHelpWidth - kHelpColumn));

  // The --config files are read as TOML here, after CLI11 has read them its lenient way:
  // their syntax and type errors (file, line) come before CLI11's (a mangled value), and
  // CLI11's errors about a value from a file name its line.
  std::vector<ConfigEntry> config;
  auto config_files = [&]() {
    std::vector<std::string> files;
    for (const std::string& f : app.get_config_ptr()->results())
      if (!f.empty()) files.push_back(f);
    return files;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested(app.help());
  } catch (const CLI::CallForAllHelp&) {
    throw HelpRequested(app.help("", CLI::AppFormatMode::All));
  } catch (const CLI::ParseError& e) {
    config = check_config_files(app, config_files());
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
      std::string extras, hint;
      for (const std::string& s : app.remaining()) {
        extras += (extras.empty() ? "" : " ") + s;
        if (hint.empty() && s.rfind("-", 0) == 0) {
          const std::string meant = closest_flag(app, s);
          if (!meant.empty()) hint = "did you mean " + meant + "?";
        }
      }
      throw FlagError("unknown flag or argument: " + extras +
                      (hint.empty() ? " (--help lists the flags)" : " (" + hint + ")"));
    }
    if (dynamic_cast<const CLI::ConfigError*>(&e))
      throw FlagError(one_line(config_error_message(e.what())));
    if (dynamic_cast<const CLI::FileError*>(&e))
      throw FlagError(one_line(std::string("--config: ") + e.what()));
    throw FlagError(cli11_error_message(app, e, argc, argv, config));
  }
  o.config_files = config_files();
  config = check_config_files(app, o.config_files);
  raw.recompute_num_layers_given = app.count("--recompute-num-layers") > 0;
  raw.world_size_given = app.count("--world-size") > 0;
  raw.kv_channels_given = app.count("--kv-channels") > 0;
  raw.expert_tensor_parallel_given = app.count("--expert-tensor-parallel-size") > 0;
  raw.rotary_base_given = app.count("--rotary-base") > 0;
  record_moe_flags_given(app, raw);
  resolve_megatron_flags(app, o, raw);  // may choose --arch llama from Megatron's parts
  auto typed = [&](const char* flag) {
    return typed_on_command_line(*app.get_option(flag), argc, argv);
  };
  raw.warmup_on_command_line = typed("--lr-warmup-iters");
  raw.train_iters_on_command_line = typed("--train-iters");
  raw.decay_iters_on_command_line = typed("--lr-decay-iters");
  // --verbose compares each value as parsed with the one resolve_and_check leaves.
  std::vector<std::string> given;
  if (o.verbose)
    for (CLI::Option* opt : app.get_options())
      given.push_back(opt->capture_default_str()->get_default_str());
  resolve_and_check(o, raw, visible_gpus);
  const std::string no_effect = megatron_no_effect_warning(raw);
  if (!no_effect.empty()) o.warnings.push_back(no_effect);
  if (o.verbose) {
    // The defaults resolve_and_check derived into Options, shown under their flags.
    raw.device = kernels::device_name(o.device);
    raw.comm = comm_name(o.comm);
    raw.pipeline_schedule = schedule_name(o.parallel.pipeline_schedule);
    raw.virtual_pipeline = o.parallel.virtual_pipeline;
    raw.world_size = o.parallel.world_size;
    raw.expert_tensor_parallel = o.parallel.expert_tensor_parallel;
    const Recompute& r = o.model.recompute;
    if (r.selective() && raw.recompute_modules.empty()) raw.recompute_modules = {"core_attn"};
    o.resolved_options =
        resolved_options_text(app, argc, argv, config, given, o.model.moe.enabled());
  }
  return o;
}

void exit_on_input_error(const InputError& e, int rank,
                         const std::function<void(int)>& before_exit) {
  if (rank == 0) std::fprintf(stderr, "paralab: error: %s\n", e.what());
  if (before_exit) before_exit(2);
  std::exit(2);
}

void exit_with_help(const HelpRequested& h, int rank,
                    const std::function<void(int)>& before_exit) {
  if (rank == 0) std::fputs(h.text.c_str(), stdout);
  std::fflush(stdout);
  if (before_exit) before_exit(0);
  std::exit(0);
}

}  // namespace paralab
