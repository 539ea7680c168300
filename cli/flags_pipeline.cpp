// cli/flags_pipeline.cpp: the pipeline flags (Megatron-LM's --pipeline-model-parallel-size,
// --virtual-pipeline-model-parallel-size, --num-layers-per-virtual-pipeline-stage, the uneven
// splits --decoder-first/last-pipeline-num-layers and --account-for-embedding/loss-in-
// pipeline-split; paralab's --pipeline-schedule) and their checks, one line each
// (parallel/pipeline_schedule.h: the schedules, their placements and constraints).
#include <CLI/CLI.hpp>
#include <sstream>
#include <string>

#include "cli/flags_impl.h"  // defines: RawFlags, fail, check_at_least, add_switch, one_of

namespace paralab {

void add_pipeline_flags(CLI::App& app, Options& o, RawFlags& raw, const char* group) {
  ParallelConfig& p = o.parallel;
  app.add_option("--pipeline-model-parallel-size,--pp", p.pipeline_parallel,
                 "pipeline stages: split the layers; must divide --num-layers, unless "
                 "--decoder-first/last-pipeline-num-layers give uneven stages")
      ->capture_default_str()->group(group);
  app.add_option("--pipeline-schedule", raw.pipeline_schedule,
                 "pipeline schedule: gpipe (all forwards, then all backwards; holds m "
                 "microbatches), 1f1b (warm-up, one forward one backward, cool-down; stage r "
                 "holds min(p - r, m)), interleaved (Megatron's 1F1B over virtual stages: "
                 "bubble / v; needs the microbatches a multiple of --pp), zb-h1 (zero bubble: "
                 "weight gradients deferred into the cool-down; 1f1b's memory), zb-v (zero "
                 "bubble on a V: rank r holds stages r and 2 pp - 1 - r, the first and last on "
                 "rank 0; 1f1b's memory), dualpipev (DeepSeek's V schedule: overlapped forward "
                 "and backward pairs; needs microbatches >= 2 pp), dualpipe (DeepSeek-V3's: two "
                 "copies of the model, microbatches fed from both ends, ranks r and pp - 1 - r "
                 "sum their gradients; needs --pp even, microbatches even and >= 2 pp). Default "
                 "1f1b, or interleaved when virtual stages are given")
      ->check(one_of({"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev", "dualpipe"}))
      ->group(group);
  app.add_option("--virtual-pipeline-model-parallel-size,--vpp", raw.virtual_pipeline,
                 "model chunks v per pipeline rank (interleaved): chunk c of rank r is stage "
                 "c x pp + r; v must divide each rank's layers (zb-v and the DualPipes hold 2 "
                 "chunks by their placement, without it)")
      ->group(group);
  app.add_option("--num-layers-per-virtual-pipeline-stage", raw.layers_per_virtual_stage,
                 "layers per model chunk, the other way to give v = layers / (pp x this)")
      ->group(group);
  app.add_option("--decoder-first-pipeline-num-layers", p.first_stage_layers,
                 "layers of the first pipeline rank (it also runs the embedding; split over "
                 "its chunks); the ranks not given split the rest evenly; 0: the even split")
      ->capture_default_str()->group(group);
  app.add_option("--decoder-last-pipeline-num-layers", p.last_stage_layers,
                 "layers of the last pipeline rank (it also runs the head and the loss, but on "
                 "a V rank 0 does); 0: the even split")
      ->capture_default_str()->group(group);
  add_switch(app, "--account-for-embedding-in-pipeline-split", p.account_for_embedding,
             "count the embedding as one layer when splitting: (--num-layers + 1) over the "
             "pipeline ranks, the first model stage building one layer fewer (Megatron's); "
             "not with --decoder-first/last-pipeline-num-layers")
      ->group(group);
  add_switch(app, "--account-for-loss-in-pipeline-split", p.account_for_loss,
             "count the loss (the head) as one layer when splitting: the last model stage "
             "builds one layer fewer (Megatron's); not with --decoder-first/last-pipeline-num-"
             "layers")
      ->group(group);
}

namespace {

// The schedule from --pipeline-schedule and the virtual stages: interleaved needs them, the
// others take none; zb-v and the DualPipes hold two chunks by their placement.
PipelineSchedule resolve_schedule(int& v, int pp, const RawFlags& raw) {
  PipelineSchedule kind = v > 1 ? PipelineSchedule::INTERLEAVED : PipelineSchedule::ONE_F_ONE_B;
  if (!raw.pipeline_schedule.empty()) parse_schedule_name(raw.pipeline_schedule, &kind);
  if (kind == PipelineSchedule::INTERLEAVED && v == 1)
    fail("--pipeline-schedule interleaved needs virtual stages: "
         "--virtual-pipeline-model-parallel-size > 1 or --num-layers-per-virtual-pipeline-stage");
  if (kind != PipelineSchedule::INTERLEAVED && v > 1)
    fail("--pipeline-schedule ", schedule_name(kind), " takes no virtual stages, got ", v,
         placement_of(kind) == StagePlacement::LOOPED
             ? " (use --pipeline-schedule interleaved)"
             : " (it holds two chunks per rank by its placement)");
  if (placement_of(kind) != StagePlacement::LOOPED) {
    if (pp < 2) fail("--pipeline-schedule ", schedule_name(kind), " needs --pp >= 2, got ", pp);
    if (kind == PipelineSchedule::DUALPIPE && pp % 2 != 0)
      fail("--pipeline-schedule dualpipe needs --pp even (rank r and pp - 1 - r hold the same "
           "two stages), got ", pp);
    v = 2;
  }
  return kind;
}

// The layers of each stage: the even split, Megatron's first/last sizes, or the embedding and
// the loss counted as layers (not both kinds).
void check_stage_split(const Options& o, int v) {
  const ParallelConfig& p = o.parallel;
  const int pp = p.pipeline_parallel, L = o.model.num_layers;
  const int first = p.first_stage_layers, last = p.last_stage_layers;
  const bool uneven = first > 0 || last > 0;
  const bool accounted = p.account_for_embedding || p.account_for_loss;
  std::ostringstream given;  // the uneven flags as typed, for the messages
  if (first > 0) given << "--decoder-first-pipeline-num-layers (" << first << ")";
  if (first > 0 && last > 0) given << " + ";
  if (last > 0) given << "--decoder-last-pipeline-num-layers (" << last << ")";
  if (uneven && pp == 1) fail(given.str(), " needs --pp > 1");
  const std::string counted = p.account_for_embedding && p.account_for_loss
                                  ? "--account-for-embedding/loss-in-pipeline-split"
                              : p.account_for_embedding ? "--account-for-embedding-in-pipeline-split"
                                                        : "--account-for-loss-in-pipeline-split";
  if (uneven && accounted)  // Megatron's assert in get_num_layers_to_build
    fail(given.str(), " and ", counted, " exclude each other (Megatron: no standalone "
         "embedding or loss stage with uneven pp)");
  // v chunks per rank: DualPipe's two are copies of the stages of p ranks holding one each
  const int chunks = placement_of(p.pipeline_schedule) == StagePlacement::MIRRORED ? 1 : v;
  const char* chunk_name = placement_of(p.pipeline_schedule) == StagePlacement::LOOPED
                               ? "virtual stages"
                               : "the chunks of a rank";
  if (accounted) {
    const int n = L + p.account_for_embedding + p.account_for_loss;
    if (n % pp != 0)
      fail("--num-layers (", L, ") + the ", p.account_for_embedding && p.account_for_loss ? 2 : 1,
           " counted by ", counted, " = ", n, " must be divisible by --pp (", pp, ")");
    if (n / pp % chunks != 0)
      fail("the ", n / pp, " layers per pipeline rank (", counted, ") must split evenly over "
           "its ", chunks, " chunks");
    return;
  }
  if (!uneven) {
    if (L % pp != 0) fail("--pp (", pp, ") must divide --num-layers (", L, ")");
    if (L / pp % chunks != 0)
      fail("--num-layers (", L, ") must be divisible by --pp (", pp, ") x ", chunk_name, " (",
           chunks, ") = ", pp * chunks);
    return;
  }
  const int middle = pp - (first > 0) - (last > 0), rest = L - first - last;
  if (middle == 0 && rest != 0)
    fail(given.str(), " must add up to --num-layers (", L, ") with --pp ", pp);
  if (middle > 0 && (rest <= 0 || rest % middle != 0))
    fail(given.str(), ": the other ", middle, " stage(s) of --pp ", pp,
         " cannot split the remaining ", rest, " of --num-layers (", L, ") evenly");
  const int rest_each = middle > 0 ? rest / middle : 0;
  for (int n : {first, last, rest_each})
    if (n > 0 && n % chunks != 0)
      fail(chunk_name, " (", chunks, ") must divide every stage's layers: ", given.str(),
           ", the others ", rest_each);
}

}  // namespace

void check_pipeline(Options& o, const RawFlags& raw) {
  ParallelConfig& p = o.parallel;
  const int pp = p.pipeline_parallel, L = o.model.num_layers;
  check_at_least("--virtual-pipeline-model-parallel-size", raw.virtual_pipeline, 0);
  check_at_least("--num-layers-per-virtual-pipeline-stage", raw.layers_per_virtual_stage, 0);
  check_at_least("--decoder-first-pipeline-num-layers", p.first_stage_layers, 0);
  check_at_least("--decoder-last-pipeline-num-layers", p.last_stage_layers, 0);
  const bool uneven = p.first_stage_layers > 0 || p.last_stage_layers > 0;
  int v = raw.virtual_pipeline > 0 ? raw.virtual_pipeline : 1;
  if (raw.layers_per_virtual_stage > 0) {
    const int n = raw.layers_per_virtual_stage;
    if (raw.virtual_pipeline > 0)
      fail("give --virtual-pipeline-model-parallel-size (", raw.virtual_pipeline,
           ") or --num-layers-per-virtual-pipeline-stage (", n, "), not both");
    if (uneven)
      fail("--num-layers-per-virtual-pipeline-stage needs the even split; with "
           "--decoder-first/last-pipeline-num-layers give --virtual-pipeline-model-parallel-size");
    if (L % (pp * n) != 0)
      fail("--num-layers (", L, ") must be divisible by --pp (", pp,
           ") x --num-layers-per-virtual-pipeline-stage (", n, ") = ", pp * n);
    v = L / (pp * n);
  }
  if (v > 1 && pp == 1)
    fail(raw.virtual_pipeline > 0 ? "--virtual-pipeline-model-parallel-size ("
                                  : "--num-layers-per-virtual-pipeline-stage (",
         raw.virtual_pipeline > 0 ? raw.virtual_pipeline : raw.layers_per_virtual_stage,
         ") needs --pp > 1");
  p.pipeline_schedule = resolve_schedule(v, pp, raw);
  if (pp == 1 && (p.account_for_embedding || p.account_for_loss)) {
    o.warnings.push_back("--account-for-embedding/loss-in-pipeline-split have no effect with "
                         "--pp 1: turned off");
    p.account_for_embedding = p.account_for_loss = false;
  }
  check_stage_split(o, v);
  p.virtual_pipeline = v;
}

void check_pipeline_run(const Options& o, int microbatches) {
  const ParallelConfig& p = o.parallel;
  const TrainConfig& t = o.train;
  const int pp = p.pipeline_parallel, dp = p.data_parallel();
  if (pp == 1) return;
  const std::string m = "the microbatches per step, --global-batch-size (" +
                        std::to_string(t.global_batch_size) + ") / (--micro-batch-size (" +
                        std::to_string(t.micro_batch_size) + ") x data-parallel size (" +
                        std::to_string(dp) + ")) = " + std::to_string(microbatches);
  const PipelineSchedule kind = p.pipeline_schedule;
  if (kind == PipelineSchedule::INTERLEAVED && microbatches % pp != 0)
    fail("--pipeline-schedule interleaved needs ", m, ", to be a multiple of --pp (", pp, ")");
  if ((kind == PipelineSchedule::DUALPIPE || kind == PipelineSchedule::DUALPIPE_V) &&
      microbatches < 2 * pp)
    fail("--pipeline-schedule ", schedule_name(kind), " needs ", m, ", to be at least 2 x --pp (",
         2 * pp, ") (DualPipe's num_chunks >= 2 num_ranks)");
  if (kind == PipelineSchedule::DUALPIPE && microbatches % 2 != 0)
    fail("--pipeline-schedule dualpipe needs ", m, ", to be even (half go each way)");
  // a split B's W reads the inputs of the weight GEMMs as the layer kept them (model/layer.h,
  // BackwardPart): selective mlp and norm drop fc1's activation and the norms' outputs. The
  // plan refuses it too: it would predict a run that cannot happen.
  const bool splits = kind == PipelineSchedule::ZB_H1 || kind == PipelineSchedule::ZB_V ||
                      kind == PipelineSchedule::DUALPIPE_V || kind == PipelineSchedule::DUALPIPE;
  const Recompute& r = o.model.recompute;
  if (splits && (r.recompute_mlp() || r.recompute_norm()))
    fail("--pipeline-schedule ", schedule_name(kind), " does not train with --recompute-modules "
         "mlp or norm (its W reads the outputs they drop); use core_attn, full recompute, or "
         "1f1b");
  // DualPipe sums the two copies' gradients where they live on the device
  if (kind == PipelineSchedule::DUALPIPE && p.offload.host_fraction() > 0)
    fail("--pipeline-schedule dualpipe does not run with --optimizer-cpu-offload (its mirror "
         "sum reads the gradients on the device)");
}

}  // namespace paralab
