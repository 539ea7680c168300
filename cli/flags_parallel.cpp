// cli/flags_parallel.cpp: the parallel layout's flags (Megatron's names: --tensor-model-parallel-size,
// --sequence-parallel, --context-parallel-size, --expert-model-parallel-size, ...; DeepSpeed's
// --zero-stage; DDP's buckets and overlap) and their checks: world = tp x cp x pp x dp, what
// tp and cp ask of the model's sizes, ZeRO's stage. The pipeline's flags and check_pipeline
// are in cli/flags.cpp and cli/flags_check.cpp; the MoE layout in cli/flags_moe.cpp; CPU
// offload in cli/flags_offload.cpp.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/flags_impl.h"  // defines: RawFlags, add_switch, one_of, check_at_least; cli/flags.h Options

namespace paralab {

namespace {

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

}  // namespace

void add_parallel_flags(CLI::App& app, Options& o, RawFlags& raw) {
  ParallelConfig& p = o.parallel;
  const char* kParallel = "Parallelism";
  app.add_option("--tensor-model-parallel-size,--tp", p.tensor_parallel,
                 "tensor parallel ranks: split every layer's matmuls; must divide the heads, "
                 "the query groups and the ffn size")
      ->capture_default_str()->group(kParallel);
  add_switch(app, "--sequence-parallel", p.sequence_parallel,
             "with --tp > 1: split the tokens of the norm, dropout and residual regions over "
             "the tp ranks (all-gather / reduce-scatter instead of all-reduce); needs --tp "
             "to divide --seq-length; ignored with a warning at --tp 1")
      ->group(kParallel);
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
}

void check_parallel_layout(Options& o, const RawFlags& raw) {
  const ModelConfig& m = o.model;
  ParallelConfig& p = o.parallel;
  p.world_size = raw.world_size_given ? raw.world_size : o.launched_world_size;
  const char* world_from = raw.world_size_given ? "--world-size" : "launched world size";
  check_at_least("--tensor-model-parallel-size", p.tensor_parallel, 1);
  check_at_least("--pipeline-model-parallel-size", p.pipeline_parallel, 1);
  check_at_least("--context-parallel-size", p.context_parallel, 1);
  check_at_least("--expert-model-parallel-size", p.expert_parallel, 1);
  check_at_least("--ddp-bucket-size", static_cast<double>(o.ddp_bucket_size), 1);
  check_at_least("--zero3-prefetch-layers", o.zero3_prefetch_layers, 0);
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

  // Parallel layout: world = tp x cp x pp x dp.
  const int tp = p.tensor_parallel, cp = p.context_parallel, pp = p.pipeline_parallel;
  if (p.world_size % (tp * cp * pp) != 0)
    fail(world_from, " (", p.world_size, ") must be divisible by --tp (", tp, ") x --cp (", cp,
         ") x --pp (", pp, ") = ", tp * cp * pp,
         o.plan && !raw.world_size_given
             ? "; to plan for more ranks than were launched, add --world-size N (a multiple of " +
                   std::to_string(tp * cp * pp) + ")"
             : "");
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
}

void check_sequence_parallel(Options& o) {
  const ModelConfig& m = o.model;
  ParallelConfig& p = o.parallel;
  const int tp = p.tensor_parallel, cp = p.context_parallel;
  if (p.sequence_parallel && tp == 1) {
    // Megatron turns it off the same way: there is nothing to split over.
    o.warnings.push_back("--sequence-parallel has no effect with --tp 1: turned off");
    p.sequence_parallel = false;
  }
  if (p.sequence_parallel && (m.seq_length / cp) % tp != 0)
    fail("--sequence-parallel needs --tp (", tp, ") to divide the tokens per context-parallel "
         "rank, --seq-length / --cp (", m.seq_length, " / ", cp, " = ", m.seq_length / cp, ")");
}

void check_zero(Options& o, const RawFlags& raw) {
  ParallelConfig& p = o.parallel;
  // Megatron's distributed optimizer is ZeRO-1; an explicit stage 0 asks for the opposite
  if (raw.use_distributed_optimizer && raw.zero_stage_given && p.zero_stage == 0 &&
      o.deepspeed.path.empty())
    fail("--use-distributed-optimizer (ZeRO-1) conflicts with --zero-stage 0: give one");
  if (raw.use_distributed_optimizer && p.zero_stage < 1) p.zero_stage = 1;
  if (p.zero_stage < 0 || p.zero_stage > 3)
    fail("--zero-stage must be 0, 1, 2 or 3, got ", p.zero_stage);
  if (o.overlap_param_gather && p.zero_stage < 1)
    fail("--overlap-param-gather needs the distributed optimizer (--zero-stage >= 1 or "
         "--use-distributed-optimizer), got --zero-stage ", p.zero_stage);
  check_offload_flags(o);  // cli/flags_offload.cpp: after the ZeRO stage is resolved
}

}  // namespace paralab
