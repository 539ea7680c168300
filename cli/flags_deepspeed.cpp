// cli/flags_deepspeed.cpp: a DeepSpeed config as a Megatron-DeepSpeed launch line passes it
// (--deepspeed --deepspeed_config ds_config.json), read with DeepSpeed's meanings and its code's
// defaults (deepspeedai/DeepSpeed@088be892 deepspeed/runtime/constants.py, @1b88ac36
// runtime/zero/config.py, @1978617c runtime/zero/offload_config.py), into paralab's flags:
//   batch triad  train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps
//                x dp (runtime/config.py _batch_assertion); any two fix the third; "auto" takes
//                --global-batch-size / --micro-batch-size (Hugging Face's convention);
//   fp16         enabled -> --fp16; loss_scale (0: dynamic) -> --loss-scale;
//                initial_scale_power (16) -> --initial-loss-scale 2^power; loss_scale_window
//                (1000), hysteresis (2), min_loss_scale (1) -> Megatron's flags of those names;
//                consecutive_hysteresis (false) -> --consecutive-hysteresis (paralab's scaler
//                is Megatron's, model/loss_scaler.h; docs/megatron.md says where DeepSpeed's
//                differs); auto_cast, fused_mode, fp16_master_weights_and_grads: no effect;
//   bf16         enabled -> --bf16 (with fp16.enabled: refused, as DeepSpeed refuses it);
//   zero_optimization  stage -> --zero-stage; reduce_bucket_size (5e8 elements) -> the DDP
//                buckets (--ddp-bucket-size: the calls per step follow); overlap_comm (None:
//                true iff stage 3) -> --overlap-grad-reduce; offload_optimizer {device cpu,
//                pin_memory (false), ratio (1)} -> --optimizer-cpu-offload,
//                --offload-pin-memory, --optimizer-offload-fraction; offload_param {device cpu}
//                -> --offload-params; the rest (allgather_bucket_size when it differs,
//                contiguous_gradients, stage3_* limits, sub_group_size, round_robin_gradients)
//                accepted and named on the warning line where paralab does not model them;
//   gradient_clipping (0.0) -> --clip-grad;
//   optimizer, scheduler: checked (Adam/AdamW and their params, WarmupLR, WarmupDecayLR,
//                WarmupCosineLR) and, as Megatron-DeepSpeed hands DeepSpeed Megatron's optimizer
//                and scheduler (DeepSpeed then uses its client's: runtime/engine.py
//                _configure_optimizer), named as having no effect: the flags decide;
//   activation_checkpointing, steps_per_print, wall_clock_breakdown: accepted, no effect here.
// Where the JSON and a flag disagree, DeepSpeed's rule decides (the engine runs the JSON), and
// the warning line says which won. An unknown key inside a block is refused as DeepSpeed's
// pydantic models refuse it (extra="forbid"); an unknown top-level key is ignored as DeepSpeed
// ignores it, named on the warning line. `--plan` prints every effective value and its source.
#include <CLI/CLI.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: RawFlags, add_switch, fail; cli/flags.h Options
#include "checkpoint/json_document.h"
#include "cli/flags_deepspeed_keys.h"  // defines: the keys of each block
// defines: Reader, Effective, num, ConfigRead, read_precision (cli/flags_deepspeed_precision.cpp)
#include "cli/flags_deepspeed_read.h"

namespace paralab {

namespace {

using namespace deepspeed_keys;  // cli/flags_deepspeed_keys.h
using namespace deepspeed_read;  // cli/flags_deepspeed_read.h

// train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps ("auto":
// the flags'); the third is derived once dp is known (check_deepspeed_batch).
void read_batch(ConfigRead& c) {
  TrainConfig& t = c.o.train;
  auto triad = [&](const char* key) -> std::optional<int64_t> {
    const Json* v = json_find(c.r.root(), key);
    return v ? c.r.whole(*v, std::string("/") + key, key, 1, true) : std::nullopt;
  };
  std::optional<int64_t> tbs = triad("train_batch_size"),
                         mbs = triad("train_micro_batch_size_per_gpu"),
                         gas = triad("gradient_accumulation_steps");
  c.raw.deepspeed_batch = {tbs.value_or(0), mbs.value_or(0), gas.value_or(0)};
  for (const auto& [key, v, flag, have] :
       {std::make_tuple("train_batch_size", tbs, "--global-batch-size", t.global_batch_size),
        std::make_tuple("train_micro_batch_size_per_gpu", mbs, "--micro-batch-size",
                        t.micro_batch_size)})
    if (v && c.given(flag) && have != *v) c.won(key, flag, std::to_string(have), std::to_string(*v));
  if (mbs) t.micro_batch_size = static_cast<int>(*mbs);
  if (tbs) t.global_batch_size = static_cast<int>(*tbs);
  // the triad's rows come first in the table, once dp fixes them (check_deepspeed_batch)
  auto source = [&](const char* key, bool set, const char* flag) {
    return std::string(set ? "JSON" : json_find(c.r.root(), key) ? "\"auto\": " : "absent: ") +
           (set ? "" : flag);
  };
  c.raw.deepspeed_batch_sources = {source("train_batch_size", tbs.has_value(), "--global-batch-size"),
                                 source("train_micro_batch_size_per_gpu", mbs.has_value(),
                                        "--micro-batch-size"),
                                 gas ? "JSON" : "train_batch_size / (micro x dp)"};

}

// offload_optimizer {device cpu, pin_memory, ratio} and offload_param {device cpu} onto the CPU
// offload flags (parallel/offload.h); nvme is not built.
void read_offload(ConfigRead& c, const std::string& k, const Json& v) {
  ParallelConfig& p = c.o.parallel;
  const std::string at = "/zero_optimization/" + k, key = "zero_optimization." + k;
  c.r.check_block(&v, at, key, k == "offload_optimizer" ? kOffloadOptimizerKeys
                                                       : kOffloadParamKeys);
  const Json* device = json_find(v, "device");
  const std::string dev = device ? c.r.text(*device, at + "/device", key + ".device") : "none";
  if (dev != "none" && dev != "cpu")
    c.r.refuse(at + "/device", key + ".device " + dev + ": only cpu offload is built (" +
                                  "nvme is not)");
  if (dev == "cpu") {
    OffloadConfig& f = p.offload;
    if (k == "offload_optimizer") f.optimizer = true;
    else f.params = true;
    if (const Json* pin = json_find(v, "pin_memory"))
      f.pin_memory = c.r.boolean(*pin, at + "/pin_memory", key + ".pin_memory");
    else
      f.pin_memory = false;  // DeepSpeed's default (offload_config.py)
    if (const Json* ratio = json_find(v, "ratio")) {
      f.fraction = c.r.number(*ratio, at + "/ratio", key + ".ratio");
      if (!(f.fraction >= 0 && f.fraction <= 1))
        c.r.refuse(at + "/ratio", key + ".ratio must be in [0, 1], got " + ratio->dump());
    }
    c.eff.add(key, "cpu, pin_memory " + std::string(f.pin_memory ? "true" : "false") +
                     (k == "offload_optimizer" ? ", ratio " + num(f.fraction) : ""), "JSON");
  }
}

// zero_optimization into --zero-stage, the buckets, overlap and the CPU offload flags.
void read_zero(ConfigRead& c) {
  ParallelConfig& p = c.o.parallel;
  int stage = 0;  // DeepSpeed's default: no ZeRO
  int64_t reduce_bucket = 500000000, allgather_bucket = 500000000;  // pp_int(5e8)
  std::optional<bool> overlap;  // None: true iff stage 3
  const Json* z = c.r.block("zero_optimization", kZeroKeys);
  if (z) {
    for (const auto& item : z->items()) {
      const std::string& k = item.key();
      const Json& v = item.value();
      const std::string at = "/zero_optimization/" + k, key = "zero_optimization." + k;
      if (k == "stage") {
        stage = static_cast<int>(*c.r.whole(v, at, key, 0));
        if (stage > 3) c.r.refuse(at, key + " must be 0, 1, 2 or 3, got " + v.dump());
      } else if (k == "reduce_bucket_size") {
        reduce_bucket = *c.r.whole(v, at, key, 1);
      } else if (k == "allgather_bucket_size") {
        allgather_bucket = *c.r.whole(v, at, key, 1);
      } else if (k == "overlap_comm") {
        overlap = c.r.boolean(v, at, key);
      } else if (k == "reduce_scatter") {
        if (!c.r.boolean(v, at, key))
          c.r.refuse(at, key + " false (all-reduce the gradients instead): not built; ZeRO here "
                            "reduce-scatters");
      } else if (k == "offload_optimizer" || k == "offload_param") {
        read_offload(c, k, v);
      } else if (k == "contiguous_gradients" || k == "round_robin_gradients" ||
                 k == "allgather_partitions" || k == "load_from_fp32_weights" ||
                 k == "ignore_unused_parameters") {
        c.r.boolean(v, at, key);
        if (k == "round_robin_gradients" && v.get<bool>())
          c.no_effect.push_back("zero_optimization.round_robin_gradients (no copy to parallelise)");
      } else if (k == "sub_group_size" || k.find("prefetch_bucket_size") != std::string::npos ||
                 k.find("persistence_threshold") != std::string::npos ||
                 k.find("max_live_parameters") != std::string::npos ||
                 k.find("max_reuse_distance") != std::string::npos) {
        c.r.whole(v, at, key, 0);
        c.no_effect.push_back(key + " (paralab's ZeRO-3 gathers whole layers, " +
                            "--zero3-prefetch-layers ahead)");
      } else {
        c.no_effect.push_back(key + " (not modelled)");
      }
    }
  }
  if (c.given("--zero-stage") && p.zero_stage != stage)
    c.won("zero_optimization.stage", "--zero-stage", std::to_string(p.zero_stage),
        std::to_string(stage));
  if (c.raw.use_distributed_optimizer && stage == 0)
    fail("--use-distributed-optimizer conflicts with --deepspeed_config's zero_optimization.stage "
         "0 (DeepSpeed runs the config's stage)");
  p.zero_stage = stage;
  c.eff.add("zero_optimization.stage", std::to_string(stage), z && z->contains("stage") ? "JSON" : "DeepSpeed's default");
  if (c.given("--ddp-bucket-size") && c.o.ddp_bucket_size != reduce_bucket)
    c.won("zero_optimization.reduce_bucket_size", "--ddp-bucket-size",
        std::to_string(c.o.ddp_bucket_size), std::to_string(reduce_bucket));
  c.o.ddp_bucket_size = reduce_bucket;
  c.eff.add("zero_optimization.reduce_bucket_size", std::to_string(reduce_bucket),
          z && z->contains("reduce_bucket_size") ? "JSON" : "DeepSpeed's default 5e8");
  if (allgather_bucket != reduce_bucket)
    c.no_effect.push_back("zero_optimization.allgather_bucket_size " + std::to_string(allgather_bucket) +
                        " (paralab gathers in the reduce buckets, " + std::to_string(reduce_bucket) +
                        " elements)");
  const bool overlap_on = overlap ? *overlap : stage == 3;
  c.o.overlap_grad_reduce = overlap_on;
  c.eff.add("zero_optimization.overlap_comm", overlap_on ? "true" : "false",
          overlap ? "JSON" : "DeepSpeed's default (true iff stage 3)");

}

// gradient_clipping into --clip-grad.
void read_clipping(ConfigRead& c) {
  TrainConfig& t = c.o.train;
  if (const Json* clip_value = json_find(c.r.root(), "gradient_clipping")) {
    const double clip = c.r.number(*clip_value, "/gradient_clipping", "gradient_clipping");
    if (!(clip >= 0)) c.r.refuse("/gradient_clipping", "gradient_clipping must be >= 0");
    if (c.given("--clip-grad") && t.clip_grad != clip)
      c.won("gradient_clipping", "--clip-grad", num(t.clip_grad), num(clip));
    t.clip_grad = static_cast<float>(clip);
    c.eff.add("gradient_clipping", num(clip), "JSON");
  } else {
    c.eff.add("gradient_clipping", num(t.clip_grad), "--clip-grad (the config leaves it out)");
  }

}

// optimizer and scheduler: checked, then Megatron's (the client's) run.
void read_optimizer_and_scheduler(ConfigRead& c) {
  if (const Json* opt = json_find(c.r.root(), "optimizer")) {
    c.r.check_block(opt, "/optimizer", "optimizer", {"type", "params", "legacy_fusion"});
    const Json* type = json_find(*opt, "type");
    const std::string name = type ? c.r.text(*type, "/optimizer/type", "optimizer.type") : "";
    std::string lower;
    for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower != "adam" && lower != "adamw")
      c.r.refuse("/optimizer/type", "optimizer.type " + name + ": paralab trains with AdamW "
                                   "(Adam, AdamW)");
    if (const Json* params = json_find(*opt, "params")) {
      c.r.check_block(params, "/optimizer/params", "optimizer.params", kAdamParams);
      if (const Json* w = json_find(*params, "adam_w_mode"))
        if (!c.r.boolean(*w, "/optimizer/params/adam_w_mode", "adam_w_mode"))
          c.r.refuse("/optimizer/params/adam_w_mode", "adam_w_mode false (Adam with L2 weight "
                                                     "decay): not built, paralab's is AdamW");
    }
    c.no_effect.push_back("optimizer (Megatron-DeepSpeed hands DeepSpeed Megatron's optimizer: "
                        "--lr, --adam-beta1/2, --adam-eps, --weight-decay decide)");
  }
  if (const Json* sched = json_find(c.r.root(), "scheduler")) {
    c.r.check_block(sched, "/scheduler", "scheduler", {"type", "params"});
    const Json* type = json_find(*sched, "type");
    const std::string name = type ? c.r.text(*type, "/scheduler/type", "scheduler.type") : "";
    const auto known = kSchedulers.find(name);
    if (known == kSchedulers.end())
      c.r.refuse("/scheduler/type", "scheduler.type " + name + ": WarmupLR, WarmupDecayLR or "
                                   "WarmupCosineLR");
    if (const Json* params = json_find(*sched, "params")) {
      c.r.check_block(params, "/scheduler/params", "scheduler.params", known->second);
      if (const Json* w = json_find(*params, "warmup_type")) {
        const std::string wt = c.r.text(*w, "/scheduler/params/warmup_type", "warmup_type");
        if (wt != "log" && wt != "linear")
          c.r.refuse("/scheduler/params/warmup_type", "warmup_type must be log or linear, got " + wt);
      }
    }
    c.no_effect.push_back("scheduler (Megatron-DeepSpeed hands DeepSpeed Megatron's scheduler: "
                        "--lr-warmup-*, --lr-decay-* decide)");
  }
}

// The keys accepted with no effect here, and the top-level keys DeepSpeed would ignore.
void read_the_rest(ConfigRead& c) {
  if (const Json* ac = c.r.block("activation_checkpointing", kCheckpointingKeys)) {
    (void)ac;
    c.no_effect.push_back("activation_checkpointing (paralab's recompute is --recompute-*)");
  }
  if (c.raw.deepspeed_checkpointing)
    c.raw.megatron.no_effect.push_back("--deepspeed-activation-checkpointing (paralab's recompute "
                                     "is --recompute-granularity)");
  if (const Json* s = json_find(c.r.root(), "steps_per_print")) {
    c.r.whole(*s, "/steps_per_print", "steps_per_print", 1);
    c.no_effect.push_back("steps_per_print (the step line follows --log-interval)");
  }
  if (const Json* w = json_find(c.r.root(), "wall_clock_breakdown")) {
    c.r.boolean(*w, "/wall_clock_breakdown", "wall_clock_breakdown");
    c.no_effect.push_back("wall_clock_breakdown (the time table is always printed)");
  }
  static const std::set<std::string> kRead = {
      "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
      "fp16", "bf16", "bfloat16", "zero_optimization", "gradient_clipping", "optimizer",
      "scheduler", "activation_checkpointing", "steps_per_print", "wall_clock_breakdown"};
  for (const auto& item : c.r.root().items())
    if (!kRead.count(item.key()))
      c.no_effect.push_back(item.key() + " (--deepspeed_config: not read; DeepSpeed ignores an "
                          "unknown top-level key too)");

}

// --plan's table: each effective value and where it came from.
void render(ConfigRead& c, const std::string& path) {
  std::ostringstream table;
  table << "deepspeed config " << path << " (the effective values and where they came from)\n";
  for (const auto& row : c.eff.rows) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-40s %-22s %s\n", row[0].c_str(), row[1].c_str(),
                  row[2].c_str());
    table << line;
  }
  c.o.deepspeed.path = path;
  c.o.deepspeed.effective = table.str();
}

}  // namespace

void add_deepspeed_flags(CLI::App& app, Options& o, RawFlags& raw) {
  (void)o;
  const char* kGroup = "DeepSpeed (a Megatron-DeepSpeed launch line; docs/deepspeed.md)";
  add_switch(app, "--deepspeed,--use-deepspeed", raw.deepspeed,
             "read --deepspeed_config, as Megatron-DeepSpeed does: its keys set the batch, "
             "bf16, ZeRO, offload and clipping flags with DeepSpeed's meanings and defaults")
      ->group(kGroup);
  app.add_option("--deepspeed_config,--deepspeed-config", raw.deepspeed_config,
                 "DeepSpeed's JSON config (ds_config.json); needs --deepspeed")
      ->type_name("FILE")->group(kGroup);
  add_switch(app, "--deepspeed-activation-checkpointing", raw.deepspeed_checkpointing,
             "Megatron-DeepSpeed's: DeepSpeed's activation checkpointing for "
             "--recompute-granularity full; accepted, paralab's recompute is its own")
      ->group(kGroup);
}

void resolve_deepspeed(Options& o, RawFlags& raw, const CLI::App& app) {
  if (raw.deepspeed_config.empty()) {
    if (raw.deepspeed) fail("--deepspeed needs --deepspeed_config FILE (Megatron-DeepSpeed's)");
    if (raw.deepspeed_checkpointing)
      raw.megatron.no_effect.push_back("--deepspeed-activation-checkpointing (paralab's recompute "
                                       "is --recompute-granularity)");
    return;
  }
  const std::string& path = raw.deepspeed_config;
  if (!raw.deepspeed)
    fail("--deepspeed_config ", path, " needs --deepspeed (Megatron-DeepSpeed reads it only then)");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) fail("--deepspeed_config ", path, ": cannot be read");
  std::unique_ptr<Reader> r;
  try {
    r.reset(new Reader(path, text.str()));
  } catch (const JsonError& e) {
    fail("--deepspeed_config ", path, ": ", e.what());
  }
  const Json& root = r->root();
  if (!root.is_object()) fail("--deepspeed_config ", path, ": not a JSON object");
  ConfigRead c{*r, o, raw, app, Effective(), raw.deepspeed_no_effect};
  read_batch(c);
  read_precision(c);
  read_zero(c);
  read_clipping(c);
  read_optimizer_and_scheduler(c);
  read_the_rest(c);
  render(c, path);
}

void check_deepspeed_batch(Options& o, const RawFlags& raw) {
  if (o.deepspeed.path.empty()) return;
  const auto [tbs, mbs, gas] = raw.deepspeed_batch;
  const int64_t dp = o.parallel.data_parallel();
  TrainConfig& t = o.train;
  const std::vector<std::string>& from = raw.deepspeed_batch_sources;
  // any two fix the third (runtime/config.py _set_batch_related_parameters)
  if (tbs > 0 && mbs > 0 && gas > 0 && tbs != mbs * gas * dp)
    fail("--deepspeed_config ", o.deepspeed.path, ": train_batch_size (", tbs, ") must be "
         "train_micro_batch_size_per_gpu (", mbs, ") x gradient_accumulation_steps (", gas,
         ") x data-parallel size (", dp, ") = ", mbs * gas * dp, " (DeepSpeed's assertion)");
  if (tbs == 0 && mbs > 0 && gas > 0) t.global_batch_size = static_cast<int>(mbs * gas * dp);
  if (mbs == 0 && tbs > 0 && gas > 0) {
    if (tbs % (gas * dp) != 0)
      fail("--deepspeed_config ", o.deepspeed.path, ": train_batch_size (", tbs, ") must be "
           "divisible by gradient_accumulation_steps (", gas, ") x data-parallel size (", dp, ")");
    t.micro_batch_size = static_cast<int>(tbs / (gas * dp));
  }
  const int64_t accumulation = t.micro_batch_size > 0 && dp > 0
                                   ? t.global_batch_size / (t.micro_batch_size * dp) : 0;
  std::string rows;
  const std::pair<const char*, int64_t> values[3] = {
      {"train_batch_size", t.global_batch_size},
      {"train_micro_batch_size_per_gpu", t.micro_batch_size},
      {"gradient_accumulation_steps", accumulation}};
  for (int i = 0; i < 3; ++i) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-40s %-22s %s\n", values[i].first,
                  std::to_string(values[i].second).c_str(), from[i].c_str());
    rows += line;
  }
  std::string& table = o.deepspeed.effective;
  const size_t first_row = table.find('\n') + 1;
  table.insert(first_row, rows);
}

}  // namespace paralab
