// cli/flags_moe.cpp: the mixture-of-experts flags (Megatron-Core's --num-experts and --moe-*,
// model/config.h Moe), their checks, and the reader of --moe-layer-freq.
//
// --moe-layer-freq takes Megatron's two forms: an integer N (layer i is MoE iff i % N == 0)
// or a list with one 0/1 per layer, which Megatron evaluates as Python. Here a small
// recursive-descent reader takes the subset presets use, with one-line errors:
//   expr   := term ('+' term)*              + adds integers, concatenates lists
//   term   := factor ('*' factor)*          * multiplies integers, repeats a list (either side)
//   factor := ['-'] INT | '[' [expr (',' expr)* [',']] ']' | '(' expr ')'
// so "([1]*3+[0])*2" is [1,1,1,0,1,1,1,0].
#include <CLI/CLI.hpp>
#include <cctype>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: RawFlags, add_switch, kIntOrList; cli/flags.h Options, FlagError

namespace paralab {

namespace {

// An int or a list of ints: the values of --moe-layer-freq's expressions.
struct FreqValue {
  bool is_list = false;
  long long n = 0;
  std::vector<int> items;
};

class FreqReader {
 public:
  explicit FreqReader(const std::string& text) : s_(text) {}

  FreqValue read() {
    FreqValue v = expr();
    skip();
    if (i_ < s_.size()) error(std::string("unexpected '") + s_[i_] + "'");
    return v;
  }

 private:
  static constexpr long long kMaxInt = 1000000000, kMaxList = 1000000;

  [[noreturn]] void error(const std::string& what) const { error_at(i_, what); }
  [[noreturn]] void error_at(size_t at, const std::string& what) const {
    fail("--moe-layer-freq: cannot read '", s_, "': ", what, " at character ", at + 1,
         " (an integer N, or a list such as \"[1,0,1,0]\" or \"([1]*3+[0])*2\")");
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }

  FreqValue expr() {
    FreqValue v = term();
    for (;;) {
      skip();
      const size_t at = i_;
      if (!eat('+')) return v;
      FreqValue w = term();
      if (v.is_list != w.is_list) error_at(at, "cannot add a list and an integer");
      if (v.is_list) {
        v.items.insert(v.items.end(), w.items.begin(), w.items.end());
        if (static_cast<long long>(v.items.size()) > kMaxList) error_at(at, "the list is too long");
      } else {
        v.n += w.n;
        if (v.n > kMaxInt || v.n < -kMaxInt) error_at(at, "the integer is too large");
      }
    }
  }

  FreqValue term() {
    FreqValue v = factor();
    for (;;) {
      skip();
      const size_t at = i_;
      if (!eat('*')) return v;
      FreqValue w = factor();
      if (v.is_list && w.is_list) error_at(at, "cannot multiply two lists");
      if (!v.is_list && !w.is_list) {
        v.n *= w.n;
        if (v.n > kMaxInt || v.n < -kMaxInt) error_at(at, "the integer is too large");
        continue;
      }
      const FreqValue& list = v.is_list ? v : w;
      const long long times = v.is_list ? w.n : v.n;
      if (times > 0 && static_cast<long long>(list.items.size()) * times > kMaxList)
        error_at(at, "the list is too long");
      FreqValue r;
      r.is_list = true;
      for (long long k = 0; k < times; ++k)  // Python: a list times n <= 0 is empty
        r.items.insert(r.items.end(), list.items.begin(), list.items.end());
      v = r;
    }
  }

  FreqValue factor() {
    skip();
    const size_t at = i_;
    if (eat('(')) {
      FreqValue v = expr();
      if (!eat(')')) error("expected )");
      return v;
    }
    if (eat('[')) {
      FreqValue v;
      v.is_list = true;
      if (eat(']')) return v;
      for (;;) {
        skip();
        const size_t item_at = i_;
        const FreqValue item = expr();
        if (item.is_list) error_at(item_at, "a list entry must be an integer, not a list");
        v.items.push_back(static_cast<int>(item.n));
        if (eat(']')) return v;
        if (!eat(',')) error("expected , or ]");
        if (eat(']')) return v;  // a trailing comma
      }
    }
    const bool negative = eat('-');
    skip();
    const size_t digits = i_;
    FreqValue v;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      v.n = v.n * 10 + (s_[i_++] - '0');
      if (v.n > kMaxInt) error_at(digits, "the integer is too large");
    }
    if (i_ == digits) error_at(negative ? i_ : at, "expected an integer, [ or (");
    if (negative) v.n = -v.n;
    return v;
  }

  const std::string& s_;
  size_t i_ = 0;
};

Moe::Score to_score(const std::string& s) {
  return s == "sigmoid" ? Moe::Score::SIGMOID : Moe::Score::SOFTMAX;
}
Moe::Balancing to_balancing(const std::string& s) {
  if (s == "seq_aux_loss") return Moe::Balancing::SEQ_AUX_LOSS;
  if (s == "none") return Moe::Balancing::NONE;
  return Moe::Balancing::AUX_LOSS;
}

void check_coefficient(const char* flag, double value) {  // >= 0 and finite
  if (!(value >= 0)) fail(flag, " must be >= 0, got ", value);
  if (!std::isfinite(value)) fail(flag, " must be a finite number, got ", value);
}

// --moe-layer-freq -> one 0/1 per layer.
std::vector<int> layer_pattern(const std::string& text, int layers) {
  const FreqValue v = FreqReader(text).read();
  if (!v.is_list) {
    if (v.n < 1) fail("--moe-layer-freq must be >= 1, got ", v.n);
    std::vector<int> pattern(layers);
    for (int i = 0; i < layers; ++i) pattern[i] = i % v.n == 0 ? 1 : 0;
    return pattern;
  }
  if (static_cast<long long>(v.items.size()) != layers)
    fail("--moe-layer-freq (", text, ") has ", v.items.size(),
         " entries, must have one per layer: --num-layers (", layers, ")");
  for (int i = 0; i < layers; ++i)
    if (v.items[i] != 0 && v.items[i] != 1)
      fail("--moe-layer-freq (", text, ") entries must be 0 (dense) or 1 (MoE), got ", v.items[i],
           " for layer ", i);
  return v.items;
}

}  // namespace

void add_moe_flags(CLI::App& app, Options& o, RawFlags& raw) {
  Moe& e = o.model.moe;
  const char* kMoe = "Mixture of experts (Megatron-Core's names; model/moe.h)";
  app.add_option("--num-experts", e.num_experts,
                 "experts E (>= 2) of each MoE layer (--moe-layer-freq): E copies of the family's "
                 "MLP without biases behind a router h -> E (fp32); 0: a dense model. Every "
                 "--moe-* flag needs it")
      ->capture_default_str()->group(kMoe);
  app.add_option("--moe-ffn-hidden-size", e.ffn_hidden_size,
                 "each expert's inner width (llama: of each of gate and up); >= 1; default "
                 "--ffn-hidden-size")
      ->group(kMoe);
  app.add_option("--moe-layer-freq", raw.moe_layer_freq,
                 "which layers are MoE: an integer N >= 1 (layer i when i % N == 0), or one 0/1 "
                 "per layer (1: MoE) written \"[1,0,1,0]\" or as Megatron's Python-like "
                 "expression \"([1]*3+[0])*2\" (integers, [lists], + concatenates, * repeats, "
                 "parentheses); at least one 1; default 1: every layer")
      ->type_name(kIntOrList)->capture_default_str()->group(kMoe);
  app.add_option("--moe-shared-expert-intermediate-size", e.shared_expert_size,
                 "width of a dense shared expert every token also runs, its output added to the "
                 "routed experts' (Qwen2-MoE, DeepSeek); >= 0; 0: none")
      ->capture_default_str()->group(kMoe);
  add_switch(app, "--moe-shared-expert-gate", e.shared_expert_gate,
             "scale the shared expert's output by a learned sigmoid gate sigmoid(x w) per token "
             "(Qwen2-MoE); needs --moe-shared-expert-intermediate-size")
      ->group(kMoe);
  app.add_option("--moe-router-topk", e.topk,
                 "experts k each token is routed to; between 1 and --num-experts")
      ->capture_default_str()->group(kMoe);
  app.add_option("--moe-router-score-function", raw.moe_score_function,
                 "softmax (default: softmax over the top-k logits, i.e. the top-k of the softmax "
                 "over all E renormalised to sum 1) or sigmoid (DeepSeek-V3) of the router logits")
      ->check(one_of({"softmax", "sigmoid"}))->capture_default_str()->group(kMoe);
  add_switch(app, "--moe-router-pre-softmax", e.pre_softmax,
             "softmax over all E logits before the top-k, the k values kept as they are (not "
             "renormalised; Mixtral-style routers renormalise); softmax only")
      ->group(kMoe);
  app.add_option("--moe-router-topk-scaling-factor", e.topk_scaling_factor,
                 "multiply the top-k gate values by this (DeepSeek-V3: 2.5); > 0; unset: none")
      ->group(kMoe);
  app.add_option("--moe-router-load-balancing-type", raw.moe_load_balancing,
                 "aux_loss (Switch Transformer's E sum_e f_e P_e over the micro-batch's tokens, "
                 "per MoE layer, weighted by --moe-aux-loss-coeff), seq_aux_loss (the same per "
                 "sequence, averaged: DeepSeek-V2) or none")
      ->check(one_of({"aux_loss", "seq_aux_loss", "none"}))->capture_default_str()
      ->group(kMoe);
  app.add_option("--moe-aux-loss-coeff", e.aux_loss_coeff,
                 "alpha, the load-balancing loss' weight (Megatron's scale: each MoE layer's "
                 "loss is alpha at perfect balance, and the layers' losses add up); >= 0; 0: none")
      ->capture_default_str()->group(kMoe);
  app.add_option("--moe-z-loss-coeff", e.z_loss_coeff,
                 "beta, the weight of the router z-loss, the mean over tokens of "
                 "logsumexp(logits)^2 (ST-MoE), per MoE layer; >= 0; 0 (unset): none")
      ->capture_default_str()->group(kMoe);
  add_switch(app, "--moe-router-enable-expert-bias", e.expert_bias,
             "aux-loss-free balancing (DeepSeek-V3): a per-expert bias added to the scores for "
             "choosing the top-k only, moved after each step by --moe-router-bias-update-rate "
             "toward the mean load; needs --moe-router-score-function sigmoid")
      ->group(kMoe);
  app.add_option("--moe-router-bias-update-rate", e.bias_update_rate,
                 "the expert bias' step per optimizer step; >= 0")
      ->capture_default_str()->group(kMoe);
  app.add_option("--moe-expert-capacity-factor", e.capacity_factor,
                 "token dropping: each expert takes at most ceil(tokens x k / E x this) tokens, "
                 "the others skip it (--moe-token-drop-policy); > 0; unset: dropless (unlike "
                 "Megatron, a negative value is an error, not \"none\")")
      ->group(kMoe);
  app.add_option("--moe-token-drop-policy", raw.moe_drop_policy,
                 "with a capacity factor, which tokens an expert over capacity keeps: probs (the "
                 "highest gate values) or position (the earliest in the micro-batch)")
      ->check(one_of({"probs", "position"}))->capture_default_str()->group(kMoe);
  add_switch(app, "--moe-pad-expert-input-to-capacity", e.pad_to_capacity,
             "pad every expert's input to exactly its capacity (fixed shapes); needs "
             "--moe-expert-capacity-factor")
      ->group(kMoe);
  add_switch(app, "--moe-grouped-gemm", e.grouped_gemm,
             "run each expert projection as one grouped GEMM call over all experts instead of "
             "one GEMM call per expert")
      ->group(kMoe);
  add_switch(app, "--moe-permute-fusion", e.permute_fusion,
             "CUDA: one fused kernel for the permutation of the tokens by expert and one for "
             "its inverse; on the CPU backend the same single loop runs with or without it")
      ->group(kMoe);
}

void record_moe_flags_given(const CLI::App& app, RawFlags& raw) {
  raw.moe_flags_given.clear();
  for (const CLI::Option* opt : app.get_options()) {
    const std::string name = opt->get_name();
    if (name.rfind("--moe-", 0) != 0 || opt->count() == 0) continue;
    // A switch counts when it ends true (`moe-grouped-gemm = false` asks for nothing).
    if (opt->get_expected_max() == 0 && opt->as<bool>() == false) continue;
    raw.moe_flags_given.push_back(name);
  }
  raw.moe_ffn_given = app.count("--moe-ffn-hidden-size") > 0;
  raw.moe_capacity_given = app.count("--moe-expert-capacity-factor") > 0;
  raw.moe_topk_scaling_given = app.count("--moe-router-topk-scaling-factor") > 0;
}

void check_moe(Options& o, const RawFlags& raw) {
  ModelConfig& m = o.model;
  Moe& e = m.moe;
  const int E = e.num_experts;
  if (E != 0 && E < 2) fail("--num-experts must be >= 2, got ", E, " (0 or unset: a dense model)");
  const ParallelConfig& p = o.parallel;
  const int ep = p.expert_parallel, etp = p.expert_tensor_parallel;
  if (E == 0) {
    // Expert parallelism of a dense model: there are no experts to split (the default etp,
    // --tp, is no request; an etp or ep of 1 asks for nothing either).
    if (ep > 1) fail("--expert-model-parallel-size needs --num-experts");
    if (raw.expert_tensor_parallel_given && etp > 1)
      fail("--expert-tensor-parallel-size needs --num-experts");
    if (!raw.moe_flags_given.empty()) fail(raw.moe_flags_given.front(), " needs --num-experts");
    return;
  }
  e.score = to_score(raw.moe_score_function);
  e.balancing = to_balancing(raw.moe_load_balancing);
  e.drop_policy = raw.moe_drop_policy == "position" ? Moe::DropPolicy::POSITION
                                                    : Moe::DropPolicy::PROBS;

  // Sizes.
  if (e.topk < 1 || e.topk > E)
    fail("--moe-router-topk (", e.topk, ") must be between 1 and --num-experts (", E, ")");
  if (raw.moe_ffn_given && e.ffn_hidden_size < 1)
    fail("--moe-ffn-hidden-size must be >= 1, got ", e.ffn_hidden_size);
  if (!raw.moe_ffn_given) e.ffn_hidden_size = m.ffn_hidden_size;
  if (e.shared_expert_size < 0)
    fail("--moe-shared-expert-intermediate-size must be >= 0, got ", e.shared_expert_size);
  if (e.shared_expert_gate && e.shared_expert_size == 0)
    fail("--moe-shared-expert-gate needs a shared expert: --moe-shared-expert-intermediate-size "
         "> 0");

  // The router and its losses.
  if (raw.moe_topk_scaling_given &&
      !(e.topk_scaling_factor > 0 && std::isfinite(e.topk_scaling_factor)))
    fail("--moe-router-topk-scaling-factor must be a finite number > 0, got ",
         e.topk_scaling_factor, " (unset: no scaling)");
  check_coefficient("--moe-aux-loss-coeff", e.aux_loss_coeff);
  check_coefficient("--moe-z-loss-coeff", e.z_loss_coeff);
  check_coefficient("--moe-router-bias-update-rate", e.bias_update_rate);
  if (e.expert_bias && e.score != Moe::Score::SIGMOID)
    fail("--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid, got ",
         raw.moe_score_function);
  if (e.pre_softmax && e.score != Moe::Score::SOFTMAX)
    fail("--moe-router-pre-softmax needs --moe-router-score-function softmax, got ",
         raw.moe_score_function);

  // Capacity.
  if (raw.moe_capacity_given &&
      !(e.capacity_factor > 0 && std::isfinite(e.capacity_factor)))
    fail("--moe-expert-capacity-factor must be a finite number > 0, got ", e.capacity_factor,
         " (leave it unset for dropless experts; a negative value is not read as none here)");
  if (e.pad_to_capacity && !raw.moe_capacity_given)
    fail("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor (dropless "
         "experts have no capacity to pad to)");

  // Which layers.
  e.layer_pattern = layer_pattern(raw.moe_layer_freq, m.num_layers);
  bool any = false;
  for (int x : e.layer_pattern) any = any || x == 1;
  if (!any)
    fail("--moe-layer-freq (", raw.moe_layer_freq, ") has no MoE layer (no 1); for a dense "
         "model leave out --num-experts");

  // Expert parallelism (parallel/expert_parallel.h): each pipeline stage's world / pp ranks
  // are etp x ep x edp, the experts split over ep, each expert's width over etp.
  if (E % ep != 0)
    fail("--num-experts (", E, ") must be divisible by --expert-model-parallel-size (", ep, ")");
  const int pp = p.pipeline_parallel, stage = p.world_size / pp;
  if (stage % (etp * ep) != 0) {
    // A --world-size that fits: tp x cp x pp divides it and etp x ep divides world / pp.
    const long long fits = static_cast<long long>(pp) *
                           std::lcm(p.tensor_parallel * p.context_parallel, etp * ep);
    fail("--expert-tensor-parallel-size x --expert-model-parallel-size (", etp, " x ", ep, " = ",
         etp * ep, ") must divide the ranks of a pipeline stage, ",
         raw.world_size_given ? "--world-size" : "launched world size",
         " / --pipeline-model-parallel-size (", p.world_size, " / ", pp, " = ", stage, ")",
         o.plan && !raw.world_size_given
             ? "; to plan for more ranks than were launched, add --world-size N (a multiple of " +
                   std::to_string(fits) + ")"
             : "");
  }
  if (m.moe_ffn() % etp != 0)
    fail("--moe-ffn-hidden-size (", m.moe_ffn(), ") must be divisible by "
         "--expert-tensor-parallel-size (", etp, ")");

  // Experts under tensor parallelism: each tp rank routes its own tokens, so the tokens must
  // be sequence-split (Megatron's MoELayer raises the same without sequence parallelism).
  const int tp = p.tensor_parallel;
  if (tp > 1 && !p.sequence_parallel)
    fail("--num-experts (", E, ") with --tensor-model-parallel-size ", tp, " needs "
         "--sequence-parallel (as in Megatron, whose MoE layer refuses tensor parallelism "
         "without it)");
  // Not built yet.
  if (tp > 1 && e.balancing == Moe::Balancing::SEQ_AUX_LOSS && e.aux_loss_coeff > 0)
    fail("--moe-router-load-balancing-type seq_aux_loss with --tensor-model-parallel-size ", tp,
         ": not built yet (sequence parallelism splits the sequences over the tp ranks)");
  if (tp > 1 && e.expert_bias)
    fail("--moe-router-enable-expert-bias with --tensor-model-parallel-size ", tp,
         ": not built yet");
  if (m.recompute.recompute_mlp())
    fail("--recompute-modules mlp with --num-experts (", E, "): not built yet (paralab's "
         "selective mlp recompute covers dense MLPs only)");
}

}  // namespace paralab
