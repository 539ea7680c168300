// cli/flags_recompute.cpp: activation recompute's flags (Megatron's names: --recompute-granularity,
// --recompute-method, --recompute-num-layers, --recompute-modules; model/config.h Recompute)
// and their check, with Megatron's constraints.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: RawFlags, one_of, fail; cli/flags.h Options

namespace paralab {

void add_recompute_flags(CLI::App& app, RawFlags& raw) {
  const char* kTrain = "Training";
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

}  // namespace paralab
