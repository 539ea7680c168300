// parallel/data_parallel.h: data parallelism, DDP and ZeRO stages 1-3, as the owner of the
// model's parameters and gradients.
//
// The idea: dp ranks hold the same model and see different slices of the global batch;
// summing their gradients makes one big batch. ZeRO (Rajbhandari et al. SC20) then stops
// every rank from holding what only one needs:
//   stage 0 (DDP)  params, grads, optimizer replicated; gradients all-reduced per bucket,
//                  each bucket as soon as backward has finished it (--overlap-grad-reduce),
//                  only after the last microbatch of the step.
//   stage 1        optimizer states (and fp32 master) sharded: per bucket a reduce-scatter
//                  hands each rank the summed slice it owns; it updates that slice; an
//                  all-gather per bucket rebuilds the parameters (--overlap-param-gather
//                  defers each bucket's wait to its first use in the next forward;
//                  --fp8-param-gather carries its dense weights in FP8, below).
//   stage 2        gradients sharded too: a bucket's gradient buffer exists only from its
//                  first write to its reduce-scatter, every microbatch; the rank keeps the
//                  accumulated sum of its slice only.
//   stage 3        parameters sharded too: each unit (embedding, layer, head) is
//                  all-gathered before use in forward and again in backward, released after,
//                  and the next --zero3-prefetch-layers units are gathered ahead.
// Bytes per step on the dp group (Ψ parameters of 4 bytes, 2 with --bf16 or --fp16, padding
// aside):
//   stage 0: all-reduce 4Ψ;  stage 1: reduce-scatter 4Ψ + all-gather 4Ψ;
//   stage 2: reduce-scatter 4Ψ per microbatch + all-gather 4Ψ;
//   stage 3: per microbatch all-gather ~4Ψ forward + ~4Ψ backward + reduce-scatter 4Ψ
//   (ZeRO §7: 1.5x DDP). Stages >= 1 add one 4-byte all-reduce for the gradient norm.
// The cut into units, buckets and slices is parallel/buckets.h; the model's calls in one
// microbatch, as data, and the ZeRO-3 prefetch rule are parallel/zero_schedule.h
// (plan/ replays them to predict the bytes this class allocates and sends).
// CPU offload (parallel/offload.h: which elements, what moves, when): the host buckets (the
// first H of the rank's optimizer-state elements) have their summed gradient on the host
// (stages 0-1: copied down as each bucket's reduction completes; 2-3: every reduce-scatter's
// slice copied down and added there, the device keeping none) and a host copy of their
// parameter (copied up after the update, before the bucket's all-gather); their owned
// segments point there (OwnedSegment::host) so the optimizer updates them on the host. With
// offload_params (ZeRO-3) the parameter shard itself lives on the host: each gather copies
// the rank's slice up into the gathered buffer and completes it in place.
//
// How the model uses it (units: 0 embedding, 1..L layers, L+1 head):
//   begin_microbatch(last) once per microbatch (a pipeline: before each action), then in
//   forward
//   acquire_params(u) ... release_params(u) around each unit's use, and in backward also
//   grads(u) for where to accumulate, and backward_done(u) once u's gradients are final;
//   before_grad_reduce, once, for a reduction of its own before dp's.
// How the trainer uses it: finish_gradients() after the last microbatch, the optimizer
// updates owned_segments(), then after_optimizer_step().
//
// defines: DataParallelOptions, OwnedSegment, DataParallel
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>
#include "measure/ledger.h"
#include "parallel/buckets.h"
#include "parallel/comm.h"
#include "parallel/fp8_linear.h"  // Fp8GatheredUnit, Fp8Scaling (--fp8-param-gather)

namespace paralab {

struct DataParallelOptions {
  // parameters' and gradients' storage type: F32, BF16 (--bf16) or F16 (--fp16)
  DType storage = DType::F32;
  int zero_stage = 0;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  int64_t bucket_size = 40000000;  // elements (--ddp-bucket-size)
  int prefetch_units = 1;          // ZeRO-3 (--zero3-prefetch-layers)
  // Pipeline parallelism (parallel/pipeline_parallel.h). unit_chunk: the model chunk of
  // each unit (empty: one chunk); buckets stay inside a chunk, ZeRO-3 prefetches inside it.
  std::vector<int> unit_chunk;
  // Units whose buckets are reduced once, at finish_gradients, whatever the stage: gpt's
  // tied word embedding lives on the first and the last stage, and its two gradients are
  // summed over the embedding group before any dp reduction (Transformer::
  // sync_tied_embedding), which needs the unreduced sum of the whole step.
  std::vector<int> deferred_units;
  // DualPipe's mirrored stages (parallel/pipeline_schedule.h): the group of the two ranks
  // holding the same stages, whose gradients are summed once the dp reduction is done (one
  // all-reduce of the rank's gradient buffer: the full one at ZeRO 0-1, the shard at 2-3,
  // each element in the same place on both); mirror_copy: the pair's second rank, whose
  // gradients the norm does not count (the first's are the same). No CPU offload with it.
  Communicator* mirror = nullptr;
  bool mirror_copy = false;
  // CPU offload (parallel/offload.h): the share of the rank's optimizer-state elements on
  // the host (--optimizer-offload-fraction; 0: none); the ZeRO-3 parameter shard on the host
  // (--offload-params: needs zero_stage 3 and offload_fraction 1); host buffers page-locked
  // on CUDA (--offload-pin-memory).
  double offload_fraction = 0;
  bool offload_params = false;
  bool pin_memory = true;
};

// A run of parameters this rank updates: flat elements [flat_begin, flat_begin + count),
// with where their value and summed gradient live (float, kernels::bf16 or kernels::fp16
// elements, as DataParallelOptions::storage says), and their offset in the rank's optimizer
// state (Adam m and v, and with 16-bit storage the fp32 master weights). host: CPU offload, param and grad are the
// host copies (and the states live on the host); a segment is never on both sides.
struct OwnedSegment {
  int64_t flat_begin = 0, count = 0;
  void* param = nullptr;
  const void* grad = nullptr;
  int64_t state_offset = 0;
  bool host = false;
};

// --fp8-param-gather (Megatron-Core's flag; docs/fp8.md): the parameter all-gathers carry the
// FP8 weights (the dense linears' and the MoE experts', each expert's its own) as FP8 codes,
// 1 byte per element, the rest in the storage type: ZeRO-3's gather of a unit before its use,
// ZeRO-1/2's gather of a bucket's updated slices after the optimizer's step (Megatron's
// distributed optimizer). Each rank casts its slice of each weight at the weight's scales of
// the step (delayed: the history's; tensorwise: from the whole weight's amax, the max over the
// slices' amaxes, one MAX all-reduce of the unit's amaxes over the group first, as Megatron's
// current scaling does; blockwise: the same per 128 x 128 block, a slice's boundaries cutting
// through blocks, one amax per block in the all-reduce). At ZeRO-3 the
// gathered unit holds each weight's codes at the start of its place (its pointer is the
// codes'); at ZeRO-1/2 the receivers decode the codes into their storage-type copy of the
// weight (the owner keeps its own slice exact) and the GEMMs cast the weight at the gathered
// scale, which gives back the owner's codes. The message of rank r is its slice with those
// elements at 1 byte: the all-gather's count is the largest over the ranks and the buckets,
// M = max_j max_r (slice_j es - (es - 1) f_jr), f_jr the FP8 elements of bucket j's slice r
// (plan/fp8.h); sent from and received into a staging pair (category comm_buffers, M and dp
// M) per gather in flight (fp8_staging_pairs), and copied (ZeRO-3, at the unit's acquire: its
// prefetch flies) or decoded (ZeRO-1/2: in the step, or with --overlap-param-gather in the
// next step's forward, two in flight, each posted at a bucket's first use) to their places.
struct Fp8GatherWeight {
  int64_t begin = 0, count = 0;    // the weight's elements of its unit
  Fp8Scaling* scaling = nullptr;   // the scaling it is cast in (parallel/fp8_scaling.h): the
  int linear = 0;                  // dense linears' or the experts', and its linear there
  int cols = 0;                    // its columns (in): the (count / cols, cols) matrix's blocks
  // its scales: one, or (blockwise) one per 128 x 128 block (kernels::fp8_scale_count)
  int scale_values() const;
};
struct Fp8ParamGather {
  // per unit: none, or its FP8 weights in the order fp8_weights numbers them (a dense
  // layer's qkv, proj, fc1, fc2; an MoE layer's qkv, proj, then each local expert's fc1, then
  // each one's fc2, where they are in this vector), whatever the order of their elements
  std::vector<std::vector<Fp8GatherWeight>> weights;
};
// The staging pairs (a pair: the largest message sent, dp of them received): as many as gathers
// fly at once, at most the FP8 buckets (ZeRO-3: units), at least one: ZeRO-3 the unit acquired
// and its prefetch window (--zero3-prefetch-layers), ZeRO-1/2 with --overlap-param-gather two
// (data_parallel_impl.h), else one.
int fp8_staging_pairs(int zero_stage, bool overlap_param_gather, int prefetch_units,
                      int fp8_buckets);
// The bytes of the message of the slice [lo, hi) of a unit (elements of the unit): its FP8
// elements at 1 byte, the others at es.
int64_t fp8_gather_slice_bytes(const std::vector<Fp8GatherWeight>& weights, int64_t lo,
                               int64_t hi, int es);

class DataParallel {
 public:
  // unit_begin: size U+1 (model/param_table.h param_units). dp == nullptr: a single rank.
  DataParallel(const std::vector<int64_t>& unit_begin, Communicator* dp,
               const DataParallelOptions& options, kernels::Device device);
  ~DataParallel();

  int num_units() const;
  int dp_size() const;
  bool mirror_copy() const;  // DataParallelOptions::mirror_copy
  DType storage() const;  // storage type of parameters and gradients (DataParallelOptions)
  const BucketLayout& layout() const;

  // ---- the model's side
  // last: the step's last backward of the units used next (ZeRO 0-1 reduce after it). A
  // pipeline calls it before each of its actions (a forward: last = false).
  void begin_microbatch(bool last);
  // Unit u's parameters, contiguous from the returned pointer (elements of storage());
  // valid until release_params. forward = true while the model goes up the units (decides
  // which units ZeRO-3 prefetches).
  const void* acquire_params(int u, bool forward);
  void release_params(int u);
  // Where backward accumulates (+=) unit u's gradients this microbatch.
  void* grads(int u);
  // Unit u's gradients of this microbatch are final: reduce its bucket when due.
  void backward_done(int u);
  // The model's own reduction of a unit's gradients, run on them just before their bucket's
  // dp reduction begins (tensor parallelism's sum of the replicated parameters' partial
  // gradients under sp): grads is the unit's gradients in the buffer about to be reduced.
  // Here, and only here, it runs once per sum the bucket hands over: every microbatch at
  // ZeRO 2-3, once a step at ZeRO 0-1 (their buffer accumulates the microbatches in place)
  // and for a deferred unit, and for a zero-bubble B that declares a unit done before the W
  // that reduces its bucket, at that W. Run anywhere else, a sum kept across microbatches
  // would be summed again with each (the defects notes/decisions.md names).
  void before_grad_reduce(std::function<void(int unit, void* grads)> reduce);

  // ---- the trainer's side
  void zero_grads();  // start of a step
  // After the last microbatch's backward: every reduction posted and complete (and with a
  // mirror its sum). Then each OwnedSegment's grad holds the gradient summed over dp (the
  // model scaled by 1/(k dp)).
  void finish_gradients();
  // The segments this rank updates (stage 0: all parameters; else its slices).
  const std::vector<OwnedSegment>& owned_segments() const;
  int64_t state_numel() const;  // elements of each optimizer state on this rank
  // CPU offload: H, the first state elements (the host buckets'), on the host (0 without).
  int64_t host_state_numel() const;
  bool pin_memory() const;  // host buffers page-locked (on CUDA)
  // Sum of squares of the summed gradient, each element counted once over dp, leaving out
  // the flat ranges given to exclude_from_norm (tensor parallelism: a parameter replicated
  // over tp is counted on tp rank 0 only; the caller sums over tp).
  double grad_sum_squares();
  void exclude_from_norm(std::vector<std::pair<int64_t, int64_t>> flat_ranges);
  // After the update: with offload the updated host parameters are copied up, then
  // stages 1-2 all-gather the updated parameters (asynchronous with
  // --overlap-param-gather, waited at each bucket's first use).
  void after_optimizer_step();
  // Waits for everything in flight (end of training).
  void drain();

  // --fp8-param-gather (above): ZeRO 1-3. Unit u's weights' scales and factors while it is
  // acquired, state nullptr for a unit without FP8 weights (ZeRO-1/2: or whose weights were
  // written since its last FP8 gather: params_written). fp8_weights_stored: the weights are
  // the stored values (ZeRO-1/2), not the codes (ZeRO-3).
  void set_fp8_param_gather(Fp8ParamGather g);
  Fp8GatheredUnit fp8_weights(int u) const;
  bool fp8_weights_stored() const;
  // ZeRO-1/2 with --fp8-param-gather: every FP8 bucket's gather from the stored slices, as
  // after_optimizer_step makes it (else nothing; with --overlap-param-gather made due, for
  // step 1's first uses). The trainer calls it once before the first step, the parameters and
  // the FP8 scales loaded, so that every step's GEMMs read weights gathered in FP8 and reduce
  // the same amaxes (plan/fp8.h): a step's bytes are the plan's.
  void gather_fp8_weights();
  // After an evaluation (ZeRO-1/2, --fp8-param-gather, --overlap-param-gather): its forward
  // was the first use of the step's FP8 gathers and made them; they are made due again, so
  // the next step's forward makes them as its plan says (the evaluation's one more round is
  // its own communication, not a step's; Megatron finishes the gathers before evaluating and
  // the next step reuses them). Else nothing.
  void after_evaluation();

  // ---- whole-model views (initialisation, tests, checkpoints); collective over dp.
  // Always fp32 on the host: 16-bit values are rounded on load and widened on gather.
  void load_params(const std::vector<float>& full);  // every rank passes the same values
  // Where this rank stores the parameters, to write them in place (the initialisation draws
  // into them: kernels/ops/init.h): ZeRO 0-2 every element, ZeRO-3 its slice of each bucket,
  // on `device` (the host, kernels::Device::CPU, for an --offload-params shard); flat_begin
  // counts elements of the flat vector. Call params_written() after writing them.
  struct StoredSegment {
    int64_t flat_begin = 0, count = 0;
    void* param = nullptr;
    kernels::Device device = kernels::Device::CPU;
  };
  std::vector<StoredSegment> stored_params();
  void params_written();  // CPU offload: the host copies of the written parameters
  std::vector<float> gather_params();                // full, unpadded, on the host
  std::vector<float> gather_grads();                 // after finish_gradients

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace paralab
