// cli/flags_deepspeed_keys.h: the keys DeepSpeed's config models know, block by block, as
// DeepSpeed defines them (deepspeedai/DeepSpeed@1b88ac36 runtime/zero/config.py,
// @1978617c runtime/zero/offload_config.py, @088be892 runtime/constants.py,
// runtime/precision_config.py, runtime/activation_checkpointing/config.py,
// runtime/lr_schedules.py): an unknown key inside a block is refused as DeepSpeed's pydantic
// models refuse it (extra="forbid"; both a field's name and its stage3_ alias are accepted,
// populate_by_name). Only cli/flags_deepspeed.cpp includes it.
//
// defines: kZeroKeys, kOffloadOptimizerKeys, kOffloadParamKeys, kFp16Keys, kBf16Keys,
//          kCheckpointingKeys, kAdamParams, kSchedulers
#pragma once
#include <map>
#include <set>
#include <string>

namespace paralab {
namespace deepspeed_keys {

// The keys DeepSpeed's models know, per block (an unknown one is refused as pydantic does).
inline const std::set<std::string> kZeroKeys = {
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size",
    "use_multi_rank_bucket_allreduce", "allgather_partitions", "allgather_bucket_size",
    "overlap_comm", "load_from_fp32_weights", "elastic_checkpoint", "offload_param",
    "offload_optimizer", "zenflow", "sub_group_size", "cpu_offload_param",
    "cpu_offload_use_pin_memory", "cpu_offload", "stage3_prefetch_bucket_size",
    "prefetch_bucket_size", "stage3_param_persistence_threshold", "param_persistence_threshold",
    "stage3_model_persistence_threshold", "model_persistence_threshold",
    "stage3_max_live_parameters", "max_live_parameters", "stage3_max_reuse_distance",
    "max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
    "gather_16bit_weights_on_model_save", "stage3_module_granularity_threshold",
    "module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params",
    "use_all_reduce_for_fetch_params", "stage3_allgather_sequential", "allgather_sequential",
    "stage3_partition_stream_chunk_size", "partition_stream_chunk_size",
    "stage3_gather_fp16_weights_on_model_save", "ignore_unused_parameters", "legacy_stage1",
    "round_robin_gradients", "zero_hpz_partition_size", "zero_quantized_weights",
    "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "zeropp_loco_param",
    "mics_shard_size", "mics_hierarchical_params_gather", "memory_efficient_linear",
    "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings",
    "enable_sanity_checks", "save_muon_momentum_buffer_in_memory", "leaf_module"};
inline const std::set<std::string> kOffloadOptimizerKeys = {
    "device", "nvme_path", "buffer_count", "pin_memory", "pipeline_read", "pipeline_write",
    "fast_init", "ratio", "super_offload", "convert_grad_on_cpu", "cpuadam_cores_perc"};
inline const std::set<std::string> kOffloadParamKeys = {"device", "nvme_path", "buffer_count",
                                                 "buffer_size", "max_in_cpu", "pin_memory"};
inline const std::set<std::string> kFp16Keys = {
    "enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window",
    "hysteresis", "consecutive_hysteresis", "min_loss_scale", "fused_mode",
    "fp16_master_weights_and_grads"};
inline const std::set<std::string> kBf16Keys = {"enabled", "immediate_grad_update", "check_grad_overflow",
                                         "bf16_master_weights_and_grads", "bf16_optimizer_states"};
inline const std::set<std::string> kCheckpointingKeys = {
    "partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
    "number_checkpoints", "synchronize_checkpoint_boundary", "profile"};
// The optimizers' and schedulers' constructor arguments (runtime/lr_schedules.py).
inline const std::set<std::string> kAdamParams = {"lr", "betas", "eps", "weight_decay", "amsgrad",
                                           "bias_correction", "adam_w_mode", "torch_adam",
                                           "fused"};
inline const std::map<std::string, std::set<std::string>> kSchedulers = {
    {"WarmupLR", {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
                  "last_batch_iteration"}},
    {"WarmupDecayLR", {"total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                       "warmup_type", "last_batch_iteration"}},
    {"WarmupCosineLR", {"total_num_steps", "warmup_min_ratio", "warmup_num_steps",
                        "cos_min_ratio", "warmup_type", "last_batch_iteration"}}};

}  // namespace deepspeed_keys
}  // namespace paralab
