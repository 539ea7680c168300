// plan/checkpoint.cpp: the bytes of each rank's checkpoint shard, from the configuration alone
// (checkpoint/checkpoint.h writes them; tests/mpi/checkpoint.sh holds the two equal).
//
// A rank saves the elements it owns, once over its data-parallel replicas: under DDP the dense
// parameters' dp (x cp) rank 0 and the experts' edp rank 0 save everything they hold, under
// ZeRO >= 1 every rank its slices (owned_elements: the padding is not saved). Per element:
// the parameter in its storage type (2 or 4 bytes), Adam's m and v (fp32, 8 bytes; 2 for each
// one the precision-aware optimizer keeps in bf16) and with
// bf16 the fp32 master (4 bytes); with --no-save-optim the parameter alone. What tp ranks or stages hold alike (norms, biases, gpt's
// tied copy of the word embedding) each saves, as in Megatron; DualPipe's second copy of two
// stages nothing. The expert bias (aux-loss-free
// balancing) adds E fp32 per MoE layer of the stage, saved by dense replica 0 on tp rank 0, and
// so does FP8 delayed scaling's state: its amax histories and scales, per layer of the stage;
// the experts' FP8 state is saved by each expert's edp rank 0 on etp rank 0.
#include "plan/plan.h"
#include "parallel/fp8_scaling.h"  // Fp8Scaling::state_bytes

namespace paralab {

void plan_checkpoint(Plan& plan) {
  const ModelConfig& m = plan.model;
  const ParallelConfig& par = plan.parallel;
  // (--no-save-optim: the parameter alone)
  // (bf16 moments, --exp-avg-dtype / --exp-avg-sq-dtype bf16: saved at their dtype, 2 each)
  const TrainConfig& t = plan.train;
  const int64_t per_element =
      (t.half() ? 2 : 4) + (plan.options.checkpoint_optimizer
                                ? t.exp_avg_bytes() + t.exp_avg_sq_bytes() + (t.half() ? 4 : 0)
                                : 0);
  const int pp = par.pipeline_parallel;
  const int etp = par.expert_tensor_parallel, ep = par.expert_parallel;
  const int stage_world = par.world_size / pp;
  for (RankPlan& rp : plan.ranks) {
    const bool staged = pp > 1 && !plan.pipeline.stages.empty();
    const PipelineStagePlan* st = staged ? &plan.pipeline.stages.at(rp.pp_rank) : nullptr;
    const DataParallelPlan& dense = st ? st->data_parallel : plan.data_parallel;
    const DataParallelPlan& experts = st ? st->expert_data_parallel : plan.expert_data_parallel;
    const bool has_experts = st ? !st->expert_unit_begin.empty() : experts.layout.total > 0;
    // the rank in the dense group (dp x cp: cp_rank + cp dp_rank) and in the experts' edp
    // (parallel/topology.h: rank = etp_rank + etp (ep_rank + ep (edp_rank + edp pp_rank)))
    const int dense_replica = rp.cp_rank + par.context_parallel * rp.dp_rank;
    const int expert_replica = (rp.rank % stage_world) / (etp * ep);
    int64_t elements = 0;
    if (par.zero_stage >= 1) {
      elements += owned_elements(dense.layout, dense_replica);
      if (has_experts) elements += owned_elements(experts.layout, expert_replica);
    } else {
      if (dense_replica == 0) elements += dense.layout.total;
      if (has_experts && expert_replica == 0) elements += experts.layout.total;
    }
    // DualPipe: the second copy of two stages saves nothing (checkpoint/checkpoint.h)
    const PipelineShape& sh = plan.pipeline.shape;
    const bool mirror_copy =
        sh.placement() == StagePlacement::MIRRORED && rp.pp_rank > sh.mirror_of(rp.pp_rank);
    if (mirror_copy) {
      rp.checkpoint_bytes = 0;
      continue;
    }
    rp.checkpoint_bytes = elements * per_element;
    int layers = 0, moe_layers = 0;  // the stage's
    for (int l = 0; l < m.num_layers; ++l) {
      bool here = !st;
      for (size_t c = 0; st && c < st->chunk_first_layer.size(); ++c)
        here |= l >= st->chunk_first_layer[c] && l < st->chunk_first_layer[c] + st->chunk_layers[c];
      layers += here;
      moe_layers += here && m.moe.is_moe_layer(l);
    }
    // FP8 delayed scaling's per-expert state (2 linears per local expert, E/ep of them per MoE
    // layer): each expert's saved by its edp rank 0 on etp rank 0 (checkpoint/checkpoint.h)
    if (m.fp8.enabled && expert_replica == 0 && rp.rank % etp == 0)
      rp.checkpoint_bytes +=
          (int64_t)Fp8Scaling::state_bytes(m.fp8, 2 * (m.moe.num_experts / ep) * moe_layers);
    if (dense_replica != 0 || rp.tp_rank != 0) continue;
    if (m.moe.enabled() && m.moe.expert_bias)
      rp.checkpoint_bytes += 4 * (int64_t)m.moe.num_experts * moe_layers;
    // FP8 delayed scaling: 4 (len + 1) 3 bytes per linear, 4 linears per layer
    // (Fp8Scaling::state_bytes); 0 for the other recipes and without --fp8-format
    if (m.fp8.enabled) rp.checkpoint_bytes += (int64_t)Fp8Scaling::state_bytes(m.fp8, 4 * layers);
  }
}

}  // namespace paralab
