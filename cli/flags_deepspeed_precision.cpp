// cli/flags_deepspeed_precision.cpp: a DeepSpeed config's fp16 and bf16 blocks
// (cli/flags_deepspeed.cpp reads the rest): fp16.enabled -> --fp16, its loss-scale keys ->
// Megatron's flags with DeepSpeed's defaults (runtime/constants.py), bf16.enabled -> --bf16.
#include <cmath>
#include <string>
#include <utility>

#include "cli/flags_deepspeed_keys.h"  // defines: the keys of each block
#include "cli/flags_deepspeed_read.h"  // defines: ConfigRead, num

namespace paralab {
namespace deepspeed_read {

namespace {

using namespace deepspeed_keys;  // cli/flags_deepspeed_keys.h

// fp16.enabled into --fp16 and the block's loss-scale keys into Megatron's flags (the JSON
// wins where a flag disagrees); the keys paralab has no use for on the warning line when set.
void apply_fp16(ConfigRead& c, const DeepSpeedFp16& fp, const Json& block) {
  TrainConfig& t = c.o.train;
  if (c.given("--fp16") && t.fp16 != fp.enabled)
    c.won("fp16.enabled", "--fp16", "true", fp.enabled ? "true" : "false");
  t.fp16 = fp.enabled;
  c.eff.add("fp16.enabled", fp.enabled ? "true" : "false", "JSON");
  if (!fp.enabled) return;
  if (t.bf16 && c.given("--bf16")) {
    c.won("fp16.enabled", "--bf16", "true", "true (bf16 off)");
    t.bf16 = false;
  }
  LossScaleConfig& l = t.loss_scaling;
  auto set = [&](const char* key, const char* flag, double& to, double value) {
    if (c.given(flag) && to != value) c.won(key, flag, num(to), num(value));
    to = value;
    c.eff.add(key, num(value), json_find(block, key + 5) ? "JSON" : "DeepSpeed's default");
  };
  auto set_int = [&](const char* key, const char* flag, int& to, int value) {
    double d = to;
    set(key, flag, d, value);
    to = value;
  };
  set("fp16.loss_scale", "--loss-scale", l.loss_scale, fp.loss_scale);
  if (fp.loss_scale == 0) {  // dynamic: the scaler's keys
    set("fp16.initial_scale_power", "--initial-loss-scale", l.initial_loss_scale,
        std::ldexp(1.0, fp.initial_scale_power));
    set("fp16.min_loss_scale", "--min-loss-scale", l.min_loss_scale, fp.min_loss_scale);
    set_int("fp16.loss_scale_window", "--loss-scale-window", l.loss_scale_window,
            fp.loss_scale_window);
    set_int("fp16.hysteresis", "--hysteresis", l.hysteresis, fp.hysteresis);
    l.consecutive_hysteresis = fp.consecutive_hysteresis;
    c.eff.add("fp16.consecutive_hysteresis", fp.consecutive_hysteresis ? "true" : "false",
              json_find(block, "consecutive_hysteresis") ? "JSON" : "DeepSpeed's default");
  }
  const std::pair<const char*, const char*> unused[] = {
      {"auto_cast", "fp16.auto_cast (the inputs are fp16 storage already)"},
      {"fused_mode", "fp16.fused_mode (one optimizer kernel already)"},
      {"fp16_master_weights_and_grads",
       "fp16.fp16_master_weights_and_grads (paralab keeps fp32 master weights)"}};
  for (const auto& [k, why] : unused)
    if (const Json* v = json_find(block, k))
      if (v->is_boolean() && v->get<bool>()) c.no_effect.push_back(why);
}

}  // namespace

void read_precision(ConfigRead& c) {
  TrainConfig& t = c.o.train;
  if (const Json* f = c.r.block("fp16", kFp16Keys)) {
    DeepSpeedFp16& fp = c.o.deepspeed.fp16;
    auto at = [&](const char* k) { return std::string("/fp16/") + k; };
    for (const auto& item : f->items()) {
      const std::string& k = item.key();
      const Json& v = item.value();
      if (k == "enabled") fp.enabled = c.r.boolean(v, at("enabled"), "fp16.enabled");
      else if (k == "loss_scale") {
        fp.loss_scale = c.r.number(v, at("loss_scale"), "fp16.loss_scale");
        if (!(fp.loss_scale >= 0)) c.r.refuse(at("loss_scale"), "fp16.loss_scale must be >= 0 (0: dynamic)");
      } else if (k == "initial_scale_power")
        fp.initial_scale_power = static_cast<int>(*c.r.whole(v, at(k.c_str()), "fp16." + k, 0));
      else if (k == "loss_scale_window")
        fp.loss_scale_window = static_cast<int>(*c.r.whole(v, at(k.c_str()), "fp16." + k, 1));
      else if (k == "hysteresis")
        fp.hysteresis = static_cast<int>(*c.r.whole(v, at(k.c_str()), "fp16." + k, 1));
      else if (k == "consecutive_hysteresis")
        fp.consecutive_hysteresis = c.r.boolean(v, at(k.c_str()), "fp16." + k);
      else if (k == "min_loss_scale") {
        fp.min_loss_scale = c.r.number(v, at(k.c_str()), "fp16." + k);
        if (!(fp.min_loss_scale > 0)) c.r.refuse(at(k.c_str()), "fp16.min_loss_scale must be > 0");
      } else {
        c.r.boolean(v, at(k.c_str()), "fp16." + k);  // auto_cast, fused_mode, master weights
      }
    }
    apply_fp16(c, fp, *f);
  } else {
    c.eff.add("fp16.enabled", t.fp16 ? "true" : "false", c.given("--fp16") ? "--fp16" : "default");
  }
  const Json* bf = c.r.block("bf16", kBf16Keys);
  if (!bf) bf = c.r.block("bfloat16", kBf16Keys);  // DeepSpeed's older name
  if (bf) {
    bool enabled = false;
    for (const auto& item : bf->items()) {
      const bool b = c.r.boolean(item.value(), "/bf16/" + item.key(), "bf16." + item.key());
      if (item.key() == "enabled") enabled = b;
    }
    if (enabled && c.o.deepspeed.fp16.enabled)  // runtime/config.py's assertion
      c.r.refuse("/bf16/enabled", "bf16.enabled and fp16.enabled: DeepSpeed refuses both (give "
                                  "one)");
    if (c.given("--bf16") && t.bf16 != enabled)
      c.won("bf16.enabled", "--bf16", t.bf16 ? "true" : "false", enabled ? "true" : "false");
    t.bf16 = enabled;
    c.eff.add("bf16.enabled", enabled ? "true" : "false", "JSON");
    // bf16 master weights and gradients, and bf16 optimizer states on top of them (DeepSpeed's
    // runtime/config.py: "bf16_optimizer_states requires bf16_master_weights_and_grads"): not
    // paralab's fp32 masters, so no mapping; bf16 moments over fp32 masters are Megatron's
    // precision-aware optimizer
    const std::pair<const char*, const char*> unused[] = {
        {"bf16_master_weights_and_grads",
         "bf16.bf16_master_weights_and_grads (paralab keeps fp32 master weights and gradients)"},
        {"bf16_optimizer_states",
         "bf16.bf16_optimizer_states (DeepSpeed's needs bf16 master weights; bf16 moments over "
         "fp32 masters: --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype "
         "bf16)"}};
    for (const auto& [k, why] : unused)
      if (const Json* v = json_find(*bf, k))
        if (v->is_boolean() && v->get<bool>()) c.no_effect.push_back(why);
  } else {
    c.eff.add("bf16.enabled", t.bf16 ? "true" : "false", c.given("--bf16") ? "--bf16" : "default");
  }
}

}  // namespace deepspeed_read
}  // namespace paralab
