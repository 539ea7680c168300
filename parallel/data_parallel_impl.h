// parallel/data_parallel_impl.h: DataParallel's state (the Impl behind data_parallel.h),
// shared by data_parallel.cpp (construction, the model's and the trainer's sides) and
// data_parallel_views.cpp (the whole-model views). Not for other files: data_parallel.h is
// the contract.
//
// Buffers (Ψ parameters, P = layout.padded_total, S = layout.shard_numel; elements of the
// storage type, fp32, or bf16 (--bf16) or fp16 (--fp16), so bytes = elements x 4 or x 2):
//   stage  params                        grads
//   0      Ψ, flat order (PARAMS)        Ψ, flat order (GRADS)
//   1      P, padded layout (PARAMS)     P, padded layout (GRADS)
//   2      P, padded layout (PARAMS)     S shard + a padded buffer per bucket while its
//                                        gradients are being produced (GRADS)
//   3      S shard + a padded buffer     as stage 2, bucket = unit
//          per gathered unit (PARAMS)
// CPU offload (parallel/offload.h), the host buckets' H state elements on the host:
// host_grads and host_params hold H elements each (host_params IS the shard with
// offload_params, and then params is empty: the gathered units come from the host); at
// stages 2-3 the device's gradient shard holds the device buckets only (S - H elements, a
// bucket's slice at shard_offset - H) and host_landing one host slice as it comes down.
// The padded layout puts the buckets in ascending flat order, bucket j at pb_j (the sum of
// the padded sizes of the buckets before it), its padding (zero) after its elements, so a
// reduce-scatter or all-gather of bucket j works in place on [pb_j, pb_j + padded_j).
// Rank r owns [r * slice, (r+1) * slice) of every padded bucket; the shard holds those
// slices at each bucket's shard_offset. An empty bucket (the expert vector's units of dense
// layers, parallel/expert_parallel.h) takes part in every call but never communicates. With dp 1 the same buffers exist (memory equals
// the plan at dp 1); reductions are no-ops and gathers device copies, never recorded.
//
// 16-bit: the buffers are bytes from the Ledger addressed by element (Impl::at), the
// collectives run on DType::BF16 or F16 (sums rounded per addition, parallel/comm.h), and
// the only typed work here, accumulate and sum_squares, dispatches on the storage type.
// The host views (load_params, gather_*) stay fp32: rounded on the host before the copy
// in, widened on the host after the copy out, so no fp32 device buffer is ever needed.
//
// Impl's methods are the steps the public calls are made of: storage addressing and the
// typed work (accumulate, sum_squares, the host conversions), then per stage the posting
// and completion of a bucket's reduction and of a unit's gather. Like data_parallel.cpp's
// policies they are what plan/ predicts (simulate_zero_step): change one, change both.
//
// defines: misuse, DataParallel::Impl
#pragma once
#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include "kernels/math.h"            // round_to, to_float: the host views' conversions
#include "kernels/ops.h"             // memcpy_device, accumulate, sum_squares
#include "parallel/data_parallel.h"  // DataParallel, DataParallelOptions, OwnedSegment
#include "parallel/offload.h"        // OffloadCopy, offload_copies, copy_to_host, copy_to_device

namespace paralab {

using kernels::Device;

// Misuse of the class (a call out of order, a bad argument) as one runtime_error.
[[noreturn]] inline void misuse(const std::string& what) {
  throw std::runtime_error("DataParallel: " + what);
}

struct DataParallel::Impl {
  std::vector<int64_t> unit_begin;
  Communicator* dp = nullptr;  // nullptr when the group has one rank: nothing to talk to
  DataParallelOptions opt;
  Device device;
  int rank = 0, size = 1, U = 0, stage = 0;
  int es = 4;                // bytes per stored element: 4 (fp32) or 2 (bf16, fp16)
  DType dtype = DType::F32;  // the collectives' element type, the same storage type
  BucketLayout layout;
  std::vector<int64_t> padded_pos;  // per bucket: pb_j in the padded full buffers

  // Buffers first: members are destroyed in reverse order, so every CommHandle below is
  // waited for before the memory it writes into goes away.
  Buffer<char> params, grads;   // see the table above; bytes, addressed with at()
  Buffer<float> norm_scalar;    // stages >= 1 at dp > 1: the gradient norm's all-reduce
  struct BucketState {
    Buffer<char> grad_buf;   // stages 2-3: this microbatch's gradients of the bucket
    CommHandle reduce;       // all-reduce (0), reduce-scatter (1-3)
    CommHandle gather;       // stages 1-2: the updated parameters' all-gather
    bool posted = false;     // stages 0-1: reduction posted this step
    bool reduced = false;    // stages 2-3: reduce-scatter posted this microbatch
  };
  int chunk_first(int u) const { return chunk_first_unit(opt.unit_chunk, u); }
  std::vector<BucketState> bk;
  std::vector<bool> deferred;  // per bucket: reduced at finish_gradients only
  struct UnitState {
    Buffer<char> gathered;   // stage 3: the unit's full (padded) parameters
    CommHandle gather;
    bool resident = false;   // stage 3: gathered or in flight
    int refs = 0;
  };
  std::vector<UnitState> units;
  // --fp8-param-gather (data_parallel.h; data_parallel_fp8.cpp): the weights; unit u's V_u
  // scale values (fp8_unit_values: one per weight, blockwise one per 128 x 128 block) as
  // scales, factors and amaxes, 3 V_u floats from fp8_unit_state[u] of fp8_state, weight k's
  // from fp8_weight_offset[u][k] of each; the staging pairs. Per
  // bucket its FP8 weights (elements of the bucket, ascending), each one's place (weight k of
  // unit u) and its message M_j (0: none); ZeRO-1/2: per unit, whether its weights
  // were last set by an FP8 gather (cleared by params_written).
  struct Fp8Place {
    int unit, k;
  };
  Fp8ParamGather fp8;
  std::vector<int64_t> fp8_unit_state;
  std::vector<int> fp8_unit_values;
  std::vector<std::vector<int>> fp8_weight_offset;
  // weight k of unit u: its scales (what 0), factors (1) or amaxes (2)
  float* fp8_values(int u, int k, int what) {
    return fp8_state.data() + fp8_unit_state[u] + (int64_t)what * fp8_unit_values[u] +
           fp8_weight_offset[u][k];
  }
  std::vector<std::vector<Fp8GatherWeight>> fp8_bucket;
  std::vector<std::vector<Fp8Place>> fp8_place;
  // The staging pairs (M sent, dp M received; fp8_staging_pairs of them): one where each
  // gather completes where it is posted; ZeRO-3 with prefetch, one per unit in flight (its
  // prefetch window and the unit acquired), fp8_pair_of the pair a unit's gather flies in;
  // ZeRO-1/2 with --overlap-param-gather two, so that two FP8 buckets'
  // gathers are in flight at once, in the order of their first use (fp8_order: the buckets
  // with FP8 weights, last first, as the forward reads the units): after the step every one is
  // due; the first one's first wait posts the first two, and each bucket's first wait decodes
  // the oldest in flight and posts the next into the pair it freed (Megatron's
  // --overlap-param-gather dispatches the next bucket's all-gather at each bucket's first use
  // the same way), so a step's FP8 gathers are its own. fp8_posted: of fp8_order,
  // how many are posted this step; fp8_flight: those in flight, oldest first, with their pair;
  // fp8_done: per bucket, decoded this step.
  std::vector<Buffer<char>> fp8_send, fp8_recv;
  std::vector<int> fp8_pair_unit, fp8_pair_of;  // per pair its unit (-1: free); per unit its pair
  std::vector<int> fp8_order;
  size_t fp8_posted = 0;
  std::deque<std::pair<int, int>> fp8_flight;
  std::vector<bool> fp8_done;
  std::vector<bool> fp8_gathered;
  Buffer<float> fp8_state;
  std::vector<int64_t> fp8_message;
  bool fp8_unit(int u) const { return !fp8.weights.empty() && !fp8.weights[u].empty(); }
  bool fp8_bucket_has(int j) const { return !fp8_bucket.empty() && !fp8_bucket[j].empty(); }
  bool fp8_overlapped() const { return stage < 3 && opt.overlap_param_gather; }
  void fp8_encode(int j, const char* slice, char* out);  // the scales, and this rank's message
  const char* fp8_exchange(int j);            // the all-gather: every rank's message
  void post_fp8_gather(int u);                // ZeRO-3: unit u's gather posted (steps 1-3)
  void place_fp8_unit(int u, const char* all);  // ZeRO-3: step 4, its codes to their places
  void complete_unit_gather(int u);           // ZeRO-3: unit u's gather done (and placed)
  void gather_fp8_bucket(int j);              // ZeRO-1/2: bucket j decoded in place
  void fp8_decode(int j, const char* all);    // ZeRO-1/2: the other ranks' codes decoded
  // ZeRO-1/2 overlapped (above): every FP8 bucket's gather due again (after the step); the
  // next of fp8_order posted into `pair`; bucket j's first wait, the round's first posting the
  // first two, completing the oldest in flight until j is decoded
  void fp8_gathers_due();
  void post_next_fp8_bucket(int pair);
  void complete_fp8_bucket(int j);
  int held = 0;          // sum of refs: > 0 means the model holds some unit
  int in_flight = -1;    // stages 2-3 with overlap_grad_reduce: the bucket being reduced
  bool last = false;     // the current microbatch is the step's last
  std::function<void(int, void*)> before_reduce;  // the model's (before_grad_reduce)
  std::vector<OwnedSegment> segments;       // for the optimizer: a host bucket's on its copies
  std::vector<OwnedSegment> norm_segments;  // the same, on each summed gradient's home
  std::vector<std::pair<int64_t, int64_t>> norm_exclusions;  // flat [begin, end), sorted
  // CPU offload: H state elements on the host, the host buckets (copy_index[j]: bucket j's
  // entry in copies, -1 on the device).
  int64_t H = 0;
  Buffer<char> host_params, host_grads, host_landing;
  std::vector<OffloadCopy> copies;
  std::vector<int> copy_index;
  bool on_host(int j) const { return copy_index[j] >= 0; }

  bool sharded_grads() const { return stage >= 2; }
  // Whether bucket b's reductions and gathers go over the group: not on one rank, and never
  // for an empty bucket (the expert vector's units of dense layers), which still takes part
  // in every call.
  bool communicates(const Bucket& b) const { return dp && b.numel() > 0; }

  // The spans of the gradient elements [flat_begin, flat_begin + n) stored from `g` that this
  // rank counts in the norm: all but the excluded ranges (tensor-parallel replicas counted on
  // another rank), appended to `spans`.
  void counted_spans(std::vector<kernels::Span>& spans, const void* g, int64_t flat_begin,
                     int64_t n) const {
    const char* base = static_cast<const char*>(g);
    int64_t pos = flat_begin;
    const int64_t end = flat_begin + n;
    for (const auto& [lo, hi] : norm_exclusions) {
      if (hi <= pos || lo >= end) continue;
      if (lo > pos) spans.push_back({base + (pos - flat_begin) * es, lo - pos});
      pos = std::max(pos, hi);
    }
    if (pos < end) spans.push_back({base + (pos - flat_begin) * es, end - pos});
  }

  // ---- storage elements ---------------------------------------------------------------
  void allocate(Buffer<char>& b, int64_t elements, Category c) {
    b.allocate(device, elements * es, c);
  }
  char* at(Buffer<char>& b, int64_t e) { return b.data() + e * es; }
  // out += in over n elements (16-bit: widened, added in fp32, rounded).
  void accumulate(void* out, const void* in, int64_t n) {
    with_storage(opt.storage, [&](auto type) {
      using T = decltype(type);
      kernels::accumulate(device, static_cast<T*>(out), static_cast<const T*>(in), n);
    });
  }
  // The sum of squares of the spans, one launch (kernels::sum_squares); host: host memory (CPU
  // offload at stages 2-3), summed by the CPU twin.
  double sum_squares(const std::vector<kernels::Span>& spans, bool host) {
    const Device d = host ? Device::CPU : device;
    if (spans.empty()) return 0.0;
    return with_storage(opt.storage, [&](auto type) {
      return kernels::sum_squares<decltype(type)>(d, spans.data(), (int)spans.size());
    });
  }
  // Host views: fp32 values <-> stored bytes, rounded or widened on the host.
  std::vector<char> to_storage(const std::vector<float>& v) const {
    std::vector<char> out(v.size() * es);
    with_storage(opt.storage, [&](auto type) {
      using T = decltype(type);
      for (size_t i = 0; i < v.size(); ++i) {
        const T x = kernels::round_to<T>(v[i]);
        std::memcpy(&out[i * sizeof(T)], &x, sizeof(T));
      }
    });
    return out;
  }
  std::vector<float> from_storage(const std::vector<char>& raw) const {
    std::vector<float> out(raw.size() / es);
    with_storage(opt.storage, [&](auto type) {
      using T = decltype(type);
      for (size_t i = 0; i < out.size(); ++i) {
        T x;
        std::memcpy(&x, &raw[i * sizeof(T)], sizeof(T));
        out[i] = kernels::to_float(x);
      }
    });
    return out;
  }

  void check_unit(int u, const char* what) const {
    if (u < 0 || u >= U)
      misuse(std::string(what) + ": unit " + std::to_string(u) + " outside 0.." +
             std::to_string(U - 1));
  }
  const Bucket& bucket_of(int u) const { return layout.buckets[layout.bucket_of[u]]; }
  // Where unit u starts in a full buffer: flat at stage 0, padded layout at stages 1-2.
  int64_t full_pos(int u) const {
    if (stage == 0) return unit_begin[u];
    return padded_pos[layout.bucket_of[u]] + unit_begin[u] - bucket_of(u).begin;
  }
  // The clipped flat range rank r updates in bucket b: [begin + r*slice, min(end, ...)).
  int64_t owned_lo(const Bucket& b) const { return std::min(b.end, b.begin + rank * b.slice); }
  int64_t owned_hi(const Bucket& b) const {
    return std::min(b.end, b.begin + (rank + 1) * b.slice);
  }

  // ---- CPU offload: bucket j's host part ----------------------------------------------
  // Where bucket j's state range starts in the device buffers: its flat elements at stage
  // 0, its slice in the padded full buffers (stages 1-2) or the shard (3: params, 2-3: grads).
  int64_t device_param_pos(int j) const {
    const Bucket& b = layout.buckets[j];
    if (stage == 0) return b.begin;
    return stage == 3 ? b.shard_offset : padded_pos[j] + rank * b.slice;
  }
  int64_t device_grad_pos(int j) const {  // (a host bucket's at stages 2-3: none)
    const Bucket& b = layout.buckets[j];
    if (stage == 0) return b.begin;
    return sharded_grads() ? b.shard_offset - H : padded_pos[j] + rank * b.slice;
  }
  // Stages 0-1: the summed gradient of host bucket j down to host_grads, once the step's
  // reduction of bucket j is complete.
  void offload_grad(int j) {
    if (j < 0 || !on_host(j)) return;
    const OffloadCopy& c = copies[copy_index[j]];
    copy_to_host(device, at(host_grads, c.state_begin), at(grads, device_grad_pos(j)),
                 c.count * es);
  }
  // The updated parameter of bucket j's host part up to the device (not with offload_params:
  // the host shard is the parameter).
  void upload_params(int j) {
    if (opt.offload_params || !on_host(j)) return;
    const OffloadCopy& c = copies[copy_index[j]];
    copy_to_device(device, at(params, device_param_pos(j)), at(host_params, c.state_begin),
                   c.count * es);
  }

  // The model's reduction of bucket j's units (before_grad_reduce), on the buffer
  // about to be reduced: the full gradients at stages 0-1, the bucket's at 2-3.
  void reduce_first(int j) {
    if (!before_reduce) return;
    const Bucket& b = layout.buckets[j];
    for (int u = b.unit_lo; u <= b.unit_hi; ++u)
      before_reduce(u, sharded_grads() ? at(bk[j].grad_buf, unit_begin[u] - b.begin)
                                       : at(grads, full_pos(u)));
  }

  // ---- stages 2-3: one bucket's gradients of this microbatch --------------------------
  void post_grad_reduce(int j) {
    BucketState& s = bk[j];
    const Bucket& b = layout.buckets[j];
    if (s.grad_buf.empty()) allocate(s.grad_buf, b.padded, Category::GRADS);
    s.reduced = true;
    reduce_first(j);
    if (communicates(b))
      s.reduce = dp->reduce_scatter_async(s.grad_buf.data(), at(s.grad_buf, rank * b.slice),
                                          b.slice, dtype);
  }
  // Wait, add the rank's summed slice into the shard (a host bucket's: down first, then added
  // on the host), free the bucket.
  void complete_grad_reduce(int j) {
    BucketState& s = bk[j];
    const Bucket& b = layout.buckets[j];
    s.reduce.wait();
    const char* slice = at(s.grad_buf, rank * b.slice);
    if (on_host(j)) {
      copy_to_host(device, host_landing.data(), slice, b.slice * es);
      host_accumulate(opt.storage, at(host_grads, b.shard_offset), host_landing.data(), b.slice);
    } else {
      accumulate(at(grads, device_grad_pos(j)), slice, b.slice);
    }
    s.grad_buf.reset();
    if (in_flight == j) in_flight = -1;
  }

  // ---- stages 0-1: the step's reduction of one bucket, posted once --------------------
  void post_step_reduce(int j) {
    BucketState& s = bk[j];
    const Bucket& b = layout.buckets[j];
    s.posted = true;
    reduce_first(j);
    if (!communicates(b)) return;
    if (stage == 0) {
      s.reduce = dp->all_reduce_async(at(grads, b.begin), b.numel(), ReduceOp::SUM, dtype);
    } else {
      const int64_t pos = padded_pos[j];
      s.reduce = dp->reduce_scatter_async(at(grads, pos), at(grads, pos + rank * b.slice),
                                          b.slice, dtype);
    }
  }

  // ---- stage 3: gather unit u's parameters into a new buffer ---------------------------
  // With offload_params the rank's slice comes up from the host shard into its place in the
  // gathered buffer, and the all-gather completes the buffer in place.
  void post_gather(int u) {
    if (fp8_unit(u)) return post_fp8_gather(u);
    UnitState& s = units[u];
    const Bucket& b = bucket_of(u);
    allocate(s.gathered, b.padded, Category::PARAMS);
    s.resident = true;
    if (opt.offload_params) {
      char* mine = at(s.gathered, rank * b.slice);
      copy_to_device(device, mine, at(host_params, b.shard_offset), b.slice * es);
      if (communicates(b)) s.gather = dp->all_gather_async(mine, s.gathered.data(), b.slice, dtype);
      return;
    }
    const char* slice = at(params, b.shard_offset);
    if (communicates(b))
      s.gather = dp->all_gather_async(slice, s.gathered.data(), b.slice, dtype);
    else
      kernels::memcpy_device(device, s.gathered.data(), slice, b.slice * es);
  }

  // Stages 1-2: bucket j's parameters may be read once its all-gather has landed.
  void wait_param_gather(int j) {
    if (fp8_overlapped() && fp8_bucket_has(j)) return complete_fp8_bucket(j);
    bk[j].gather.wait();
  }
  // Bucket j rebuilt in `tmp` (category c) from every rank's slice, this rank's at `slice`
  // (host memory with CPU offload: copied up first): an all-gather, or a copy on a single
  // rank (data_parallel_views.cpp).
  const char* gather_bucket(const char* slice, bool host, size_t j, Buffer<char>& tmp,
                            Category c);
  void wait_param_gathers() {
    for (size_t j = 0; j < bk.size(); ++j) wait_param_gather((int)j);
  }
};

}  // namespace paralab
