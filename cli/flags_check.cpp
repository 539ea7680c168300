// cli/flags_check.cpp: the checks that turn a bad combination of flags into one line naming
// the flags, the constraint and the values (FlagError, cli/flags.h), and the defaults derived
// once parsing is done (ffn size, query groups, global batch, decay iterations, device, comm).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: RawFlags, resolve_and_check, and through cli/flags.h Options

namespace paralab {

namespace {


// Written as !(value >= min) so that a NaN fails too.
void check_at_least(const char* flag, double value, double min) {
  if (!(value >= min)) fail(flag, " must be >= ", min, ", got ", value);
}
void check_finite(const char* flag, double value) {
  if (!std::isfinite(value)) fail(flag, " must be a finite number, got ", value);
}

void check_unit_interval(const char* flag, double value) {  // [0, 1)
  if (!(value >= 0.0 && value < 1.0)) fail(flag, " must be in [0, 1), got ", value);
}

// Context parallelism: the layout's chunks must cut the sequence evenly, and a2a splits
// this tensor-parallel rank's heads and query groups over the cp ranks.
void check_context_parallel(Options& o, const RawFlags& raw) {
  const ModelConfig& m = o.model;
  const ParallelConfig& p = o.parallel;
  const int cp = p.context_parallel, tp = p.tensor_parallel;
  if (cp == 1) {
    if (raw.cp_comm_type != "p2p" || raw.cp_layout != "zigzag")
      o.warnings.push_back("--cp-comm-type and --cp-layout have no effect with --cp 1");
    return;
  }
  const int chunks = p.cp_layout == CpLayout::ZIGZAG ? 2 * cp : cp;
  if (m.seq_length % chunks != 0)
    fail("--seq-length (", m.seq_length, ") must be divisible by ",
         p.cp_layout == CpLayout::ZIGZAG ? "2 x --cp (" : "--cp (", chunks,
         p.cp_layout == CpLayout::ZIGZAG ? "): the zigzag layout's chunks" : ")");
  if (p.cp_comm_type == CpCommType::A2A) {
    if ((m.num_attention_heads / tp) % cp != 0)
      fail("--cp-comm-type a2a needs --cp (", cp, ") to divide the attention heads per tp rank, "
           "--num-attention-heads / --tp (", m.num_attention_heads, " / ", tp, " = ",
           m.num_attention_heads / tp, ")");
    if ((m.num_query_groups / tp) % cp != 0)
      fail("--cp-comm-type a2a needs --cp (", cp, ") to divide the query groups per tp rank, "
           "--num-query-groups / --tp (", m.num_query_groups, " / ", tp, " = ",
           m.num_query_groups / tp, ")");
  }
}

// Activation recompute (model/config.h Recompute), with Megatron's constraints: full needs a
// method and a layer count, selective takes neither, and each needs its granularity. After
// check_pipeline: the layer count is bounded by the layers of a pipeline rank.
void check_recompute(Options& o, const RawFlags& raw) {
  Recompute& r = o.model.recompute;
  const std::string& g = raw.recompute_granularity;
  const bool method = !raw.recompute_method.empty(), layers = raw.recompute_num_layers_given;
  const bool modules = !raw.recompute_modules.empty();
  std::string listed;  // the modules as typed, for the messages
  for (const std::string& s : raw.recompute_modules) listed += (listed.empty() ? "" : " ") + s;
  if (g != "full" && method)
    fail("--recompute-method (", raw.recompute_method, ") needs --recompute-granularity full",
         g.empty() ? "" : ", got " + g);
  if (g != "full" && layers)
    fail("--recompute-num-layers (", raw.recompute_num_layers,
         ") needs --recompute-granularity full", g.empty() ? "" : ", got " + g);
  if (g != "selective" && modules)
    fail("--recompute-modules (", listed, ") needs --recompute-granularity selective",
         g.empty() ? "" : ", got " + g);
  if (g.empty()) return;
  if (g == "full") {
    if (!method) fail("--recompute-granularity full needs --recompute-method uniform or block");
    const ParallelConfig& p = o.parallel;
    const PipelineShape shape = p.pipeline_shape(1);
    const std::vector<int> stages =
        pipeline_stage_layers(o.model.num_layers, shape, p.stage_split());
    int rank_layers = 0;  // the most layers a pipeline rank holds (all its chunks)
    for (int rank = 0; rank < shape.p; ++rank) {
      int n = 0;
      for (int c = 0; c < shape.v; ++c) n += stages[shape.stage_of(rank, c)];
      rank_layers = std::max(rank_layers, n);
    }
    if (!layers)
      fail("--recompute-granularity full needs --recompute-num-layers (1 to the layers of a "
           "pipeline rank, ", rank_layers, ")");
    if (raw.recompute_num_layers < 1 || raw.recompute_num_layers > rank_layers)
      fail("--recompute-num-layers (", raw.recompute_num_layers,
           ") must be between 1 and the layers of a pipeline rank (", rank_layers, ")");
    r.granularity = Recompute::Granularity::FULL;
    r.method = raw.recompute_method == "block" ? Recompute::Method::BLOCK
                                               : Recompute::Method::UNIFORM;
    r.num_layers = raw.recompute_num_layers;
    return;
  }
  r.granularity = Recompute::Granularity::SELECTIVE;
  for (const std::string& s : raw.recompute_modules) {
    if (s == "core_attn") r.core_attn = true;
    else if (s == "mlp") r.mlp = true;
    else if (s == "norm" || s == "layernorm") r.norm = true;
    else fail("--recompute-modules: unknown module '", s, "' (choices: core_attn, mlp, norm)");
  }
  if (!modules) r.core_attn = true;  // Megatron's default
}

Arch to_arch(const std::string& s) { return s == "llama" ? Arch::LLAMA : Arch::GPT; }
AttentionImpl to_attention(const std::string& s) {
  return s == "naive" ? AttentionImpl::NAIVE : AttentionImpl::FLASH;
}
LrDecay to_decay(const std::string& s) {
  if (s == "constant") return LrDecay::CONSTANT;
  if (s == "linear") return LrDecay::LINEAR;
  return LrDecay::COSINE;
}

}  // namespace

// Can a file be made in `folder`? Tried, not asked (access() says yes to root in /proc and
// /sys): a uniquely named empty file is created and removed at once, so that ranks probing the
// same folder never meet and a refused command line leaves nothing behind. "" or the reason.
static std::string probe_folder(const std::string& folder) {
  const std::string probe = folder + "/.paralab-probe." + std::to_string(getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return std::strerror(errno);
  close(fd);
  unlink(probe.c_str());
  return "";
}

static std::string parent_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
}

// An output file written during or after the run (--trace, --metrics-jsonl, ...): its folder
// must exist and take a new file; an existing file must be a writable file.
void check_output_file(const char* flag, const std::string& path) {
  if (path.empty()) return;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail(flag, ": cannot write ", path, ": it is a directory");
    const int fd = open(path.c_str(), O_WRONLY | O_APPEND);  // changes nothing
    if (fd < 0) fail(flag, ": cannot write ", path, " (", std::strerror(errno), ")");
    close(fd);
    return;
  }
  const std::string dir = parent_of(path);
  if (stat(dir.c_str(), &st) != 0) fail(flag, ": cannot write ", path, ": no such directory ", dir);
  if (!S_ISDIR(st.st_mode)) fail(flag, ": cannot write ", path, ": ", dir, " is not a directory");
  const std::string why = probe_folder(dir);
  if (!why.empty()) fail(flag, ": cannot write ", path, " (", why, " in ", dir, ")");
}

// An output folder the run makes as mkdir -p does (--save, --export-hf, --tensorboard-dir):
// the deepest part of it that exists must be a folder that takes new entries.
void check_output_folder(const char* flag, const std::string& path) {
  if (path.empty()) return;
  std::string existing = path;
  struct stat st;
  while (stat(existing.c_str(), &st) != 0) {
    const std::string up = parent_of(existing);
    if (up == existing) break;
    existing = up;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (existing == path) fail(flag, ": ", path, " is a file, not a folder");
    fail(flag, ": cannot make ", path, ": ", existing, " is not a directory");
  }
  const std::string why = probe_folder(existing);
  if (!why.empty())
    fail(flag, ": cannot ", existing == path ? "write into " : "make ", path, " (", why,
         existing == path ? "" : " in " + existing, ")");
}

// Two outputs naming one file would overwrite each other, and an output naming an input
// (--data-path, a --config file) would destroy it when the run opens it: refused, naming both.
static void check_outputs_distinct(const Options& o) {
  std::vector<std::pair<std::string, std::string>> files = {
      {"--trace", o.trace}, {"--metrics-jsonl", o.metrics_jsonl},
      {"--save-tensors", o.save_tensors}, {"--benchmark-save", o.benchmark_save}};
  const size_t outputs = files.size();
  files.push_back({"--data-path", o.data_path});
  for (const std::string& c : o.config_files) files.push_back({"--config", c});
  auto same = [](const std::string& a, const std::string& b) {
    struct stat sa, sb;
    if (stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0)
      return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return a == b;
  };
  for (size_t i = 0; i < outputs; ++i)
    for (size_t j = i + 1; j < files.size() && !files[i].second.empty(); ++j)
      if (!files[j].second.empty() && same(files[i].second, files[j].second))
        fail(files[i].first, " ", files[i].second, " is also ", files[j].first, j < outputs ?
             ": two outputs would overwrite each other" : ": the output would overwrite the input");
}

// Fills the derived values and checks every constraint, the cheap ones first.
void resolve_and_check(Options& o, const RawFlags& raw, int visible_gpus) {
  ModelConfig& m = o.model;
  TrainConfig& t = o.train;
  ParallelConfig& p = o.parallel;

  // Planning may describe a machine this one is not; a run may not.
  if (raw.world_size_given && !o.plan)
    fail("--world-size (", raw.world_size,
         ") is only for --plan; a run's world size is the number of ranks mpirun starts");
  if (o.json && !o.plan && !o.benchmark) fail("--json only applies to --plan and --benchmark");
  // --benchmark measures the machine and exits: it neither plans nor trains.
  if (o.benchmark && o.plan)
    fail("--benchmark measures this machine and --plan predicts without running: give one");
  if (!o.benchmark_save.empty() && !o.benchmark)
    fail("--benchmark-save (", o.benchmark_save,
         ") writes what --benchmark measures: add --benchmark");
  p.world_size = raw.world_size_given ? raw.world_size : o.launched_world_size;
  const char* world_from = raw.world_size_given ? "--world-size" : "launched world size";

  m.arch = to_arch(raw.arch);
  m.attention = to_attention(raw.attention);
  t.lr_decay_style = to_decay(raw.lr_decay_style);
  o.attention_flops = raw.attention_flops == "causal" ? AttentionFlops::CAUSAL
                                                      : AttentionFlops::FULL;

  // Sizes.
  check_at_least("--num-layers", m.num_layers, 1);
  check_at_least("--hidden-size", m.hidden_size, 1);
  check_at_least("--ffn-hidden-size", m.ffn_hidden_size, 0);
  check_at_least("--num-attention-heads", m.num_attention_heads, 1);
  check_at_least("--num-query-groups", m.num_query_groups, 0);
  check_at_least("--seq-length", m.seq_length, 1);
  check_at_least("--vocab-size", m.vocab_size, 1);
  check_at_least("--make-vocab-size-divisible-by", m.vocab_divisible_by, 1);
  check_at_least("--micro-batch-size", t.micro_batch_size, 1);
  check_at_least("--global-batch-size", t.global_batch_size, 0);
  check_at_least("--train-iters", t.train_iters, 1);
  check_at_least("--tensor-model-parallel-size", p.tensor_parallel, 1);
  check_at_least("--pipeline-model-parallel-size", p.pipeline_parallel, 1);
  check_at_least("--context-parallel-size", p.context_parallel, 1);
  check_at_least("--expert-model-parallel-size", p.expert_parallel, 1);
  check_at_least("--ddp-bucket-size", static_cast<double>(o.ddp_bucket_size), 1);
  check_at_least("--zero3-prefetch-layers", o.zero3_prefetch_layers, 0);
  check_at_least("--report-interval", o.report_interval, 0);
  check_at_least("--log-interval", o.log_interval, 1);
  check_at_least("--eval-interval", o.eval_interval, 0);
  check_at_least("--eval-iters", o.eval_iters, 1);
  check_at_least("--peak-tflops", o.peak_tflops, 0);
  check_finite("--peak-tflops", o.peak_tflops);
  check_at_least("--plan-tokens", o.plan_tokens, 0);
  check_finite("--plan-tokens", o.plan_tokens);
  check_at_least("--benchmark-max-mib", o.benchmark_max_mib, 0);
  check_finite("--benchmark-max-mib", o.benchmark_max_mib);
  check_at_least(world_from, p.world_size, 1);
  // Expert tensor parallelism defaults to --tp (Megatron's); check_moe checks the layout.
  if (raw.expert_tensor_parallel_given)
    check_at_least("--expert-tensor-parallel-size", raw.expert_tensor_parallel, 1);
  p.expert_tensor_parallel =
      raw.expert_tensor_parallel_given ? raw.expert_tensor_parallel : p.tensor_parallel;
  p.token_dispatcher = raw.moe_token_dispatcher == "alltoall" ? TokenDispatcher::ALLTOALL
                                                              : TokenDispatcher::ALLGATHER;
  p.cp_comm_type = raw.cp_comm_type == "a2a" ? CpCommType::A2A
                  : raw.cp_comm_type == "p2p" ? CpCommType::P2P
                                              : CpCommType::ALL_GATHER;
  p.cp_layout = raw.cp_layout == "contiguous" ? CpLayout::CONTIGUOUS : CpLayout::ZIGZAG;

  // Attention shapes. The head dim is --kv-channels, or h/a when it is not given.
  if (raw.kv_channels_given)
    check_at_least("--kv-channels", m.kv_channels, 1);
  else if (m.hidden_size % m.num_attention_heads != 0)
    fail("--num-attention-heads (", m.num_attention_heads, ") must divide --hidden-size (",
         m.hidden_size, ")");
  if (m.ffn_hidden_size == 0) m.ffn_hidden_size = 4 * m.hidden_size;
  if (m.num_query_groups == 0) m.num_query_groups = m.num_attention_heads;
  if (m.num_attention_heads % m.num_query_groups != 0)
    fail("--num-query-groups (", m.num_query_groups, ") must divide --num-attention-heads (",
         m.num_attention_heads, ")");
  if (m.arch == Arch::LLAMA && m.head_dim() % 2 != 0) {
    if (raw.kv_channels_given)
      fail("--arch llama needs an even head dim for RoPE, got --kv-channels ", m.kv_channels);
    fail("--arch llama needs an even head dim for RoPE, got --hidden-size (", m.hidden_size,
         ") / --num-attention-heads (", m.num_attention_heads, ") = ", m.head_dim());
  }
  m.kv_channels = m.head_dim();
  if (!(m.norm_epsilon > 0)) fail("--norm-epsilon must be > 0, got ", m.norm_epsilon);
  check_finite("--norm-epsilon", m.norm_epsilon);
  if (!(m.rope_theta > 0)) fail("--rotary-base must be > 0, got ", m.rope_theta);
  check_finite("--rotary-base", m.rope_theta);
  if (m.is_gpt() && raw.rotary_base_given)
    o.warnings.push_back("--rotary-base has no effect with --arch gpt (learned positions)");
  check_unit_interval("--hidden-dropout", m.hidden_dropout);
  check_unit_interval("--attention-dropout", m.attention_dropout);

  // Parallel layout: world = tp x cp x pp x dp.
  const int tp = p.tensor_parallel, cp = p.context_parallel, pp = p.pipeline_parallel;
  if (p.world_size % (tp * cp * pp) != 0)
    fail(world_from, " (", p.world_size, ") must be divisible by --tp (", tp, ") x --cp (", cp,
         ") x --pp (", pp, ") = ", tp * cp * pp,
         o.plan && !raw.world_size_given
             ? "; to plan for more ranks than were launched, add --world-size N (a multiple of " +
                   std::to_string(tp * cp * pp) + ")"
             : "");
  const int dp = p.data_parallel();
  if (m.num_attention_heads % tp != 0)
    fail("--tp (", tp, ") must divide --num-attention-heads (", m.num_attention_heads, ")");
  check_context_parallel(o, raw);
  if (m.num_query_groups % tp != 0)
    fail("--tp (", tp, ") must divide --num-query-groups (", m.num_query_groups, ")");
  if (m.ffn_hidden_size % tp != 0)
    fail("--tp (", tp, ") must divide --ffn-hidden-size (", m.ffn_hidden_size, ")");
  // The per-head query/key norm weights are shared by every head, and tp splits the heads:
  // their partial gradients are summed over tp with the layer's other replicated tensors,
  // which happens under sequence parallelism only (without it they would differ).
  if (m.qk_layernorm && tp > 1 && !p.sequence_parallel)
    fail("--qk-layernorm with --tensor-model-parallel-size ", tp, " needs --sequence-parallel "
         "(its norm weights' gradients are partial over the heads' ranks)");
  check_pipeline(o, raw);  // cli/flags_pipeline.cpp
  check_recompute(o, raw);
  check_moe(o, raw);  // cli/flags_moe.cpp: after the layout and recompute, which it reads
  if (p.sequence_parallel && tp == 1) {
    // Megatron turns it off the same way: there is nothing to split over.
    o.warnings.push_back("--sequence-parallel has no effect with --tp 1: turned off");
    p.sequence_parallel = false;
  }
  if (p.sequence_parallel && (m.seq_length / cp) % tp != 0)
    fail("--sequence-parallel needs --tp (", tp, ") to divide the tokens per context-parallel "
         "rank, --seq-length / --cp (", m.seq_length, " / ", cp, " = ", m.seq_length / cp, ")");
  if (raw.use_distributed_optimizer && p.zero_stage < 1) p.zero_stage = 1;
  if (p.zero_stage < 0 || p.zero_stage > 3)
    fail("--zero-stage must be 0, 1, 2 or 3, got ", p.zero_stage);
  if (o.overlap_param_gather && p.zero_stage < 1)
    fail("--overlap-param-gather needs the distributed optimizer (--zero-stage >= 1 or "
         "--use-distributed-optimizer), got --zero-stage ", p.zero_stage);
  check_offload_flags(o);  // cli/flags_offload.cpp: after the ZeRO stage is resolved

  // Batch.
  if (t.global_batch_size == 0) t.global_batch_size = t.micro_batch_size * dp;
  if (t.global_batch_size % (t.micro_batch_size * dp) != 0)
    fail("--global-batch-size (", t.global_batch_size, ") must be divisible by --micro-batch-size (",
         t.micro_batch_size, ") x data-parallel size (", dp, ") = ", t.micro_batch_size * dp);
  apply_megatron_schedule(o, raw);  // cli/flags_megatron.cpp: --train-samples, samples, fraction
  const int microbatches = t.global_batch_size / (t.micro_batch_size * dp);
  check_pipeline_run(o, microbatches);  // cli/flags_pipeline.cpp: the schedule's microbatches

  // Optimizer and schedule.
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

  // Backends. A plan may describe GPUs this machine does not have.
  // The emulated build's CUDA device is the emulator (kernels/common.h device_name): it answers
  // to its own word, and the main build's to "cuda", so a run cannot take one for the other.
  const std::string cuda_word = kernels::device_name(kernels::Device::CUDA);
  if (!raw.device.empty() && raw.device != "cpu" && raw.device != cuda_word)
    fail("--device ", raw.device, ": this binary's CUDA device is --device ", cuda_word,
         cuda_word == "cuda" ? " (the emulated device is build/emulated/trainer: make emulated)"
                             : " (a GPU runs the main build's ./trainer)");
  if (raw.device.empty())
    o.device = visible_gpus > 0 ? kernels::Device::CUDA : kernels::Device::CPU;
  else
    o.device = raw.device == cuda_word ? kernels::Device::CUDA : kernels::Device::CPU;
  if (o.device == kernels::Device::CUDA && visible_gpus <= 0 && !o.plan)
    fail("--device cuda, but no GPU is visible (use --device cpu)");
  if (raw.comm.empty())
    o.comm = o.device == kernels::Device::CUDA ? Comm::NCCL : Comm::MPI;
  else
    o.comm = raw.comm == "nccl" ? Comm::NCCL : Comm::MPI;
  if (o.comm == Comm::NCCL && o.device != kernels::Device::CUDA)
    fail("--comm nccl needs --device ", cuda_word, " (use --comm mpi on the CPU backend)");
  check_at_least("--collective-timeout", o.collective_timeout, 0);
  if (o.timing_log_level < 0 || o.timing_log_level > 2)
    fail("--timing-log-level must be 0, 1 or 2, got ", o.timing_log_level);
  check_finite("--collective-timeout", o.collective_timeout);

  check_checkpoint_flags(o);  // cli/flags_checkpoint.cpp: --load resolved, --save's latest

  // Last, as it reads the file: the data must fit the model it feeds.
  if (!o.data_path.empty()) check_data_file(o.data_path, m.vocab_size, m.seq_length);
  // Here rather than in the trainer, so that --plan refuses it as the run does.
  if ((o.eval_interval > 0 || t.split_train > 0) && !o.data_path.empty())
    check_validation_split(o.data_path, m.vocab_size, m.seq_length, t.split_train,
                           t.split_valid, o.eval_interval > 0);
  if (o.eval_interval > 0 && t.split_train > 0 && t.split_valid == 0)
    fail("--eval-interval ", o.eval_interval, " with --split's validation share 0: nothing to "
         "validate on");

  // Every output, written during the run or after it, is tried before the first step (a run
  // that fails at its end has trained for nothing), for a run and for --plan alike.
  check_output_file("--trace", o.trace);
  check_output_file("--metrics-jsonl", o.metrics_jsonl);
  check_output_file("--save-tensors", o.save_tensors);
  check_output_file("--benchmark-save", o.benchmark_save);
  check_output_folder("--save", o.save);
  check_output_folder("--export-hf", o.export_hf);
  check_output_folder("--tensorboard-dir", o.tensorboard_dir);
  check_outputs_distinct(o);
}

}  // namespace paralab
