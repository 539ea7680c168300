// cli/flags_fp8.cpp: FP8 training's flags (parallel/fp8_scaling.h Fp8Config), with Megatron-Core's
// names, choices and defaults (megatron/training/arguments.py, _add_transformer_engine_args):
//   --fp8-format e4m3|hybrid          default none: FP8 off (Megatron's dest is `fp8`)
//   --fp8-recipe delayed|tensorwise|blockwise   default delayed (Megatron also has mxfp8,
//                                      Blackwell's, which paralab does not build)
//   --fp8-margin N                    default 0 (delayed scaling's 2^-margin)
//   --fp8-amax-history-len N          default 1 (Transformer Engine's DelayedScaling: 1024)
//   --fp8-amax-compute-algo most_recent|max     default most_recent (TE's: max)
//   --fp8-param-gather                default off: the parameter all-gathers carry the dense
//                                      linears' and the MoE experts' weights as FP8 codes
//                                      (parallel/data_parallel.h Fp8ParamGather): ZeRO-3's
//                                      (FSDP's) before each use, ZeRO-1/2's (the distributed
//                                      optimizer's) of the updated slices after the step. Megatron asserts the distributed
//                                      optimizer, torch FSDP2 or Megatron-FSDP
//                                      (arguments.py); refused at --zero-stage 0 (DDP gathers
//                                      nothing). Blockwise gathers each 128 x 128 block at
//                                      its own scale (docs/fp8.md). The MoE
//                                      experts' weights travel in FP8 too, each expert's at
//                                      its own scale; with pipelining each stage gathers its
//                                      own layers' weights; with --offload-params the slice
//                                      comes up from the host and is cast on the device.
//   --log-fp8-scaling                 paralab's: the scaling state per step (parallel/fp8_log.h)
// Where Megatron's defaults differ from TE's: docs/megatron.md. --fp8-format runs the dense
// linear layers' GEMMs in FP8 (parallel/fp8_linear.h, docs/fp8.md); check_fp8 refuses, one line
// each, before any work: --fp16 with it (kernels::gemm_fp8 stores fp32 or bf16; megatron-core
// 0.16.1's TransformerConfig has no such constraint: fp32 and bf16 storage both run here); with
// --num-experts (the experts' GEMMs run in FP8 too, each expert with its own scaling state:
// docs/fp8.md) a shared expert (paralab's runs in the storage type, Megatron's SharedExpertMLP
// is a Transformer Engine MLP in FP8: refused rather than half done) and tensorwise with the
// experts' width split over etp > 1 (Transformer Engine's GroupedLinear asserts "doesn't
// support TP > 1 with Float8 current scaling", grouped_linear.py set_meta_tensor).
#include <CLI/CLI.hpp>
#include <string>

#include "cli/flags_impl.h"  // defines: RawFlags, one_of, fail; cli/flags.h Options

namespace paralab {

void add_fp8_flags(CLI::App& app, Options& o, RawFlags& raw) {
  const char* kPrecision = "Precision";
  Fp8Config& f = o.model.fp8;
  app.add_option("--fp8-format", raw.fp8_format,
                 "FP8 training (Megatron's flag): e4m3 everywhere, or hybrid (E4M3 forward, "
                 "E5M2 gradients); default off. The dense linear layers' GEMMs (qkv, proj, fc1, "
                 "fc2) and the MoE experts' fc1 and fc2; with fp32 or --bf16 storage, not --fp16 "
                 "(docs/fp8.md)")
      ->check(one_of({"e4m3", "hybrid"}))->group(kPrecision);
  app.add_option("--fp8-recipe", raw.fp8_recipe,
                 "FP8 scaling: delayed (Transformer Engine's amax history), tensorwise (each "
                 "tensor's own amax), blockwise (DeepSeek-V3's 1 x 128 tiles and 128 x 128 "
                 "weight blocks)")
      ->check(one_of({"delayed", "tensorwise", "blockwise"}))->capture_default_str()
      ->group(kPrecision);
  app.add_option("--fp8-margin", f.margin,
                 "delayed scaling: scale = (max / amax) / 2^margin, margin >= 0")
      ->capture_default_str()->group(kPrecision);
  app.add_option("--fp8-amax-history-len", f.amax_history_len,
                 "delayed scaling: the steps of amax history kept per tensor (Megatron's "
                 "default 1; Transformer Engine's 1024)")
      ->capture_default_str()->group(kPrecision);
  app.add_option("--fp8-amax-compute-algo", raw.fp8_amax_compute_algo,
                 "delayed scaling: the amax a scale comes from, the history's max or the most "
                 "recent (Megatron's default; Transformer Engine's is max)")
      ->check(one_of({"most_recent", "max"}))->capture_default_str()->group(kPrecision);
  app.add_flag("--fp8-param-gather", f.param_gather,
               "the parameter all-gathers (ZeRO-3's before each use, ZeRO-1/2's after the "
               "optimizer step) carry the dense linears' and the MoE experts' weights as FP8 "
               "codes (1 byte per element) and the GEMMs use them as gathered (Megatron's "
               "flag); needs --fp8-format and --zero-stage 1, 2 or 3; any recipe (blockwise: "
               "each 128 x 128 block at its own scale) "
               "(docs/fp8.md)")
      ->group(kPrecision);
  add_switch(app, "--log-fp8-scaling", f.log_scaling,
             "per step, each linear kind's (qkv, proj, fc1, fc2) input, weight and output "
             "gradient: the amax, the scale the casts used, and the values they saturated or "
             "flushed (--metrics-jsonl fp8_scaling, TensorBoard); delayed or tensorwise; a "
             "second pass over each cast tensor")
      ->group(kPrecision);
}

namespace {
// --fp8-param-gather's constraints (the header): each refusal one line.
void check_fp8_param_gather(const Options& o) {
  const Fp8Config& f = o.model.fp8;
  if (!f.param_gather) return;
  const int z = o.parallel.zero_stage;
  if (z == 0)
    fail("--fp8-param-gather needs --zero-stage 1, 2 or 3 (the parameter all-gathers it "
         "carries in FP8; Megatron's needs the distributed optimizer or FSDP; DDP gathers "
         "nothing), got --zero-stage ", z);
}
}  // namespace

void check_fp8(Options& o, const RawFlags& raw) {
  Fp8Config& f = o.model.fp8;
  f.enabled = !raw.fp8_format.empty();
  f.hybrid = raw.fp8_format == "hybrid";
  f.recipe = raw.fp8_recipe == "tensorwise"   ? Fp8Recipe::Tensorwise
             : raw.fp8_recipe == "blockwise" ? Fp8Recipe::Blockwise
                                             : Fp8Recipe::Delayed;
  f.amax_compute_algo = raw.fp8_amax_compute_algo == "max" ? kernels::Fp8AmaxAlgo::Max
                                                           : kernels::Fp8AmaxAlgo::MostRecent;
  if (f.margin < 0) fail("--fp8-margin must be >= 0, got ", f.margin);
  if (f.amax_history_len < 1)
    fail("--fp8-amax-history-len must be >= 1, got ", f.amax_history_len);
  if (f.log_scaling && !f.enabled) fail("--log-fp8-scaling needs --fp8-format");
  if (f.log_scaling && f.recipe == Fp8Recipe::Blockwise)
    fail("--log-fp8-scaling logs per-tensor scales (--fp8-recipe delayed or tensorwise), got "
         "--fp8-recipe blockwise (a scale per block, each from its own amax: nothing saturates)");
  if (!f.enabled) {
    if (f.param_gather)
      fail("--fp8-param-gather gathers FP8 weights, so it needs --fp8-format e4m3|hybrid, got "
           "none (Megatron: fp8_param must be used together with fp8 mode)");
    return;
  }
  check_fp8_param_gather(o);
  if (o.train.fp16)
    fail("--fp8-format ", raw.fp8_format, " needs fp32 or --bf16 storage, got --fp16 (the FP8 "
         "GEMM stores fp32 or bf16: docs/fp8.md)");
  const Moe& moe = o.model.moe;
  if (moe.num_experts > 0 && moe.shared_expert_size > 0)
    fail("--fp8-format ", raw.fp8_format, " runs the routed experts in FP8, not a shared "
         "expert, got --moe-shared-expert-intermediate-size ", moe.shared_expert_size,
         " (docs/fp8.md)");
  const int etp = o.parallel.expert_tensor_parallel;
  if (moe.num_experts > 0 && f.recipe == Fp8Recipe::Tensorwise && etp > 1)
    fail("--fp8-recipe tensorwise takes each expert GEMM's own amax and needs the experts "
         "whole, got --expert-tensor-parallel-size ", etp, " (it defaults to --tp: give "
         "--etp 1; Transformer Engine's GroupedLinear refuses it too, docs/fp8.md)");
}

}  // namespace paralab
