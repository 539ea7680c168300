// parallel/data_parallel.cpp: DDP and ZeRO 1-3 (see data_parallel.h for the idea and the
// bytes per step, buckets.h for the cut, zero_schedule.h for the order of the model's calls).
//
// The policies below are exactly what plan/ predicts, byte for byte: change one
// and the plan's simulation (plan.cpp, simulate_zero_step) must change with it.
//
// This file: construction (the buffers, the owned segments), the model's side and the
// trainer's side. The buffers of each stage and Impl, the state every call works on, are in
// data_parallel_impl.h; the whole-model views (load_params, gather_*) are in
// data_parallel_views.cpp.
#include "parallel/data_parallel.h"
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>
#include "kernels/ops.h"                  // memset_zero, memcpy_*
#include "parallel/data_parallel_impl.h"  // DataParallel::Impl, misuse
#include "parallel/zero_schedule.h"       // prefetch_window

namespace paralab {

DataParallel::DataParallel(const std::vector<int64_t>& unit_begin, Communicator* dp,
                           const DataParallelOptions& options, kernels::Device device)
    : impl_(new Impl) {
  Impl& m = *impl_;
  if (unit_begin.size() < 2) misuse("need at least one unit (unit_begin of size >= 2)");
  if (options.zero_stage < 0 || options.zero_stage > 3)
    misuse("zero stage must be 0..3, got " + std::to_string(options.zero_stage));
  m.unit_begin = unit_begin;
  m.dp = dp && dp->size() > 1 ? dp : nullptr;
  m.opt = options;
  m.device = device;
  m.rank = m.dp ? dp->rank() : 0;
  m.size = m.dp ? dp->size() : 1;
  m.U = (int)unit_begin.size() - 1;
  m.stage = options.zero_stage;
  m.es = (int)dtype_size(options.storage);
  m.dtype = options.storage;
  if (!options.unit_chunk.empty() && (int)options.unit_chunk.size() != m.U)
    misuse("unit_chunk must name the chunk of every unit");
  if (options.offload_params && (m.stage != 3 || options.offload_fraction != 1.0))
    misuse("offload_params needs zero stage 3 and the whole optimizer on the host");
  m.layout = make_bucket_layout(unit_begin, options.bucket_size, m.size, m.stage == 3,
                                options.unit_chunk);
  const BucketLayout& l = m.layout;
  m.deferred.assign(l.buckets.size(), false);
  for (int u : options.deferred_units) {
    m.check_unit(u, "deferred_units");
    m.deferred[l.bucket_of[u]] = true;
  }

  // pb_j: buckets in ascending flat order, each after the padded sizes of those before it.
  m.padded_pos.assign(l.buckets.size(), 0);
  int64_t pos = 0;
  for (int j = (int)l.buckets.size() - 1; j >= 0; --j) {  // reduction order is descending
    m.padded_pos[j] = pos;
    pos += l.buckets[j].padded;
  }

  const int64_t full = m.stage == 0 ? l.total : l.padded_total;
  // CPU offload (parallel/offload.h): the host buckets' H state elements on the host
  m.H = host_buckets_elements(l, m.stage, options.offload_fraction);
  m.copies = offload_copies(l, m.stage, m.H);
  m.copy_index.assign(l.buckets.size(), -1);
  int64_t largest = 0;  // host slice
  for (size_t i = 0; i < m.copies.size(); ++i) {
    m.copy_index[m.copies[i].bucket] = (int)i;
    largest = std::max(largest, m.copies[i].count);
  }
  const bool pin = options.pin_memory;
  m.host_params.allocate_host(device, m.H * m.es, Category::PARAMS, pin);
  m.host_grads.allocate_host(device, m.H * m.es, Category::GRADS, pin);
  if (m.sharded_grads()) m.host_landing.allocate_host(device, largest * m.es, Category::GRADS, pin);
  const int64_t params = m.stage == 3 ? (options.offload_params ? 0 : l.shard_numel) : full;
  m.allocate(m.params, params, Category::PARAMS);
  m.allocate(m.grads, m.sharded_grads() ? l.shard_numel - m.H : full, Category::GRADS);
  // One float for the gradient norm's all-reduce (Category::COMM_BUFFERS, 4 bytes, fp32
  // in both precisions): collectives take device buffers.
  if (m.stage >= 1 && m.dp) m.norm_scalar.allocate(device, 1, Category::COMM_BUFFERS);
  m.bk.resize(l.buckets.size());
  m.units.resize(m.U);

  // What this rank updates, bucket by bucket in reduction order.
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    OwnedSegment s;
    if (m.stage == 0) {
      s.flat_begin = b.begin;
      s.count = b.numel();
      s.state_offset = b.begin;
    } else {
      s.flat_begin = m.owned_lo(b);
      s.count = m.owned_hi(b) - s.flat_begin;
      if (s.count <= 0) continue;  // a tiny bucket: the last ranks' slices are all padding
      s.state_offset = b.shard_offset;
    }
    if (!m.on_host((int)j)) {
      s.param = m.at(m.params, m.device_param_pos((int)j));
      s.grad = m.at(m.grads, m.device_grad_pos((int)j));
      m.norm_segments.push_back(s);
    } else {  // updated on the host, from its copies (the norm: from the gradient's home)
      OwnedSegment n = s;
      n.grad = m.sharded_grads() ? m.at(m.host_grads, s.state_offset)
                                 : m.at(m.grads, m.device_grad_pos((int)j));
      n.host = m.sharded_grads();
      m.norm_segments.push_back(n);
      s.param = m.at(m.host_params, s.state_offset);
      s.grad = m.at(m.host_grads, s.state_offset);
      s.host = true;
    }
    m.segments.push_back(s);
  }
}

DataParallel::~DataParallel() = default;

int DataParallel::num_units() const { return impl_->U; }
int DataParallel::dp_size() const { return impl_->size; }
bool DataParallel::mirror_copy() const { return impl_->opt.mirror_copy; }
DType DataParallel::storage() const { return impl_->opt.storage; }
void DataParallel::before_grad_reduce(std::function<void(int, void*)> reduce) {
  impl_->before_reduce = std::move(reduce);
}
const BucketLayout& DataParallel::layout() const { return impl_->layout; }

// ---- the model's side --------------------------------------------------------------------

void DataParallel::begin_microbatch(bool last) {
  Impl& m = *impl_;
  if (m.held) misuse("begin_microbatch while the model still holds parameters");
  // A bucket written but not yet reduced (a pipeline's forwards write the fused head's
  // weight gradient before the backward that finishes it) keeps accumulating.
  for (auto& b : m.bk) b.reduced = false;
  m.last = last;
}

const void* DataParallel::acquire_params(int u, bool forward) {
  Impl& m = *impl_;
  m.check_unit(u, "acquire_params");
  comm_progress();
  if (m.stage < 3) {
    m.wait_param_gather(m.layout.bucket_of[u]);
    ++m.units[u].refs;
    ++m.held;
    return m.at(m.params, m.full_pos(u));
  }
  // ZeRO-3 (zero_schedule.h): gather on demand, reference-count, prefetch on sweep steps.
  const bool sweep_step = m.held == 0;
  Impl::UnitState& s = m.units[u];
  if (!s.resident) m.post_gather(u);
  m.complete_unit_gather(u);
  ++s.refs;
  ++m.held;
  if (sweep_step)
    for (int v : prefetch_window(u, forward, m.U, m.opt.prefetch_units, m.opt.unit_chunk))
      if (!m.units[v].resident) m.post_gather(v);
  return s.gathered.data();
}

void DataParallel::release_params(int u) {
  Impl& m = *impl_;
  m.check_unit(u, "release_params");
  Impl::UnitState& s = m.units[u];
  if (s.refs == 0) misuse("release_params(" + std::to_string(u) + ") without acquire_params");
  --s.refs;
  --m.held;
  if (m.stage == 3 && s.refs == 0) {
    m.complete_unit_gather(u);
    s.gathered.reset();
    s.resident = false;
  }
}

void* DataParallel::grads(int u) {
  Impl& m = *impl_;
  m.check_unit(u, "grads");
  const int j = m.layout.bucket_of[u];
  Impl::BucketState& s = m.bk[j];
  if (!m.sharded_grads()) {
    if (s.posted) misuse("grads(" + std::to_string(u) + ") after its bucket's reduction began");
    return m.at(m.grads, m.full_pos(u));
  }
  if (s.reduced)
    misuse("grads(" + std::to_string(u) + ") after its bucket was reduced this microbatch");
  // Its reduce-scatter from an earlier microbatch still in flight (a zero-bubble B declared
  // the head done, and this forward writes the fused loss's output-weight gradient): it reads
  // the buffer, so it completes first, and the writes go to a fresh one.
  if (m.in_flight == j) m.complete_grad_reduce(j);
  const Bucket& b = m.layout.buckets[j];
  if (s.grad_buf.empty()) m.allocate(s.grad_buf, b.padded, Category::GRADS);
  return m.at(s.grad_buf, m.unit_begin[u] - b.begin);
}

void DataParallel::backward_done(int u) {
  Impl& m = *impl_;
  m.check_unit(u, "backward_done");
  comm_progress();
  const int j = m.layout.bucket_of[u];
  if (m.layout.buckets[j].unit_lo != u) return;  // the bucket's lowest unit finishes last
  if (m.deferred[j]) {  // finish_gradients reduces it; the chunk's sweep still ends here
    if (m.sharded_grads() && m.in_flight >= 0 && u == m.chunk_first(u))
      m.complete_grad_reduce(m.in_flight);
    return;
  }
  if (!m.sharded_grads()) {
    // Stages 0-1: only the last microbatch's gradients are reduced; without overlap they
    // wait for finish_gradients.
    if (m.last && m.opt.overlap_grad_reduce && !m.bk[j].posted) m.post_step_reduce(j);
    return;
  }
  if (m.bk[j].reduced) misuse("backward_done(" + std::to_string(u) + ") twice in a microbatch");
  if (!m.opt.overlap_grad_reduce) {
    m.post_grad_reduce(j);
    m.complete_grad_reduce(j);
    return;
  }
  // One reduce-scatter in flight at a time: its bucket buffer is freed before the next
  // bucket's is handed over, which bounds the transient gradient memory.
  if (m.in_flight >= 0) m.complete_grad_reduce(m.in_flight);
  m.post_grad_reduce(j);
  m.in_flight = j;
  // the chunk's lowest unit is the last backward of the action (unit 0 without pipelining)
  if (u == m.chunk_first(u)) m.complete_grad_reduce(j);
}

// ---- the trainer's side ------------------------------------------------------------------

void DataParallel::zero_grads() {
  Impl& m = *impl_;
  kernels::memset_zero(m.device, m.grads.data(), m.grads.bytes());
  // CPU offload, stages 2-3: the host buckets' sums start at 0 too (a host loop, no kernel)
  if (m.sharded_grads() && !m.host_grads.empty())
    std::memset(m.host_grads.data(), 0, m.host_grads.bytes());
  for (auto& s : m.bk) s.posted = false;
}

void DataParallel::finish_gradients() {
  Impl& m = *impl_;
  if (!m.sharded_grads()) {
    // Bucket by bucket: post its reduction (unless backward did), copy the previous
    // bucket's host part down meanwhile (offload), then wait for it.
    int previous = -1;
    for (size_t j = 0; j < m.bk.size(); ++j) {
      if (!m.bk[j].posted) m.post_step_reduce((int)j);
      m.offload_grad(previous);
      m.bk[j].reduce.wait();
      previous = (int)j;
    }
    m.offload_grad(previous);
  } else {
    if (m.in_flight >= 0) m.complete_grad_reduce(m.in_flight);
    // A bucket the model wrote but never declared done still has to be summed.
    for (size_t j = 0; j < m.bk.size(); ++j)
      if (!m.bk[j].grad_buf.empty()) {
        m.post_grad_reduce((int)j);
        m.complete_grad_reduce((int)j);
      }
  }
  // DualPipe: the copy of these stages on the mirror rank saw the other half of the
  // microbatches; every element sits at the same place in its gradient buffer
  if (m.opt.mirror && m.opt.mirror->size() > 1 && m.grads.bytes() > 0)
    m.opt.mirror->all_reduce(m.grads.data(), m.grads.bytes() / m.es, ReduceOp::SUM, m.dtype);
  // The optimizer is about to write the owned slices that a pending gather still reads.
  m.wait_param_gathers();
}

const std::vector<OwnedSegment>& DataParallel::owned_segments() const {
  return impl_->segments;
}

int64_t DataParallel::state_numel() const {
  return impl_->stage == 0 ? impl_->layout.total : impl_->layout.shard_numel;
}

int64_t DataParallel::host_state_numel() const { return impl_->H; }
bool DataParallel::pin_memory() const { return impl_->opt.pin_memory; }

void DataParallel::exclude_from_norm(std::vector<std::pair<int64_t, int64_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  impl_->norm_exclusions = std::move(ranges);
}

double DataParallel::grad_sum_squares() {
  Impl& m = *impl_;
  std::vector<kernels::Span> device_spans, host_spans;
  if (m.stage == 0) {
    if (m.opt.mirror_copy) return 0.0;  // counted on the mirror's first rank
    m.counted_spans(device_spans, m.grads.data(), 0, m.layout.total);
    return m.sum_squares(device_spans, false);
  }
  // Stages >= 1: each element lives in exactly one rank's owned segments, on the device or
  // (CPU offload) on the host: one sum for each
  for (const OwnedSegment& s : m.norm_segments)
    m.counted_spans(s.host ? host_spans : device_spans, s.grad, s.flat_begin, s.count);
  // a mirror's second rank holds the same sums as the first: counted there
  const double local = m.opt.mirror_copy ? 0.0
                                         : m.sum_squares(device_spans, false) +
                                               m.sum_squares(host_spans, true);
  if (!m.dp) return local;
  // One fp32 scalar on the wire (the plan's 4 bytes, bf16 or not); the partial sums are
  // doubles.
  float f = (float)local;
  kernels::memcpy_from_host(m.device, m.norm_scalar.data(), &f, sizeof f);
  m.dp->all_reduce(m.norm_scalar.data(), 1);
  kernels::memcpy_to_host(m.device, &f, m.norm_scalar.data(), sizeof f);
  return f;
}

void DataParallel::after_optimizer_step() {
  Impl& m = *impl_;
  for (size_t j = 0; j < m.bk.size(); ++j) {
    m.upload_params((int)j);  // offload: beside the previous bucket's all-gather
    if (m.stage == 0 || m.stage == 3) continue;  // replicated; 3 updated its shard in place
    // --fp8-param-gather (data_parallel_fp8.cpp): completed here, or (overlapped) due, posted
    // at the buckets' first uses
    if (m.fp8_bucket_has((int)j)) {
      if (!m.fp8_overlapped()) m.gather_fp8_bucket((int)j);
      continue;
    }
    const Bucket& b = m.layout.buckets[j];
    if (!m.communicates(b)) continue;
    const int64_t pos = m.padded_pos[j];
    m.bk[j].gather = m.dp->all_gather_async(m.at(m.params, pos + m.rank * b.slice),
                                            m.at(m.params, pos), b.slice, m.dtype);
    if (!m.opt.overlap_param_gather) m.bk[j].gather.wait();
  }
  if (m.stage == 1 || m.stage == 2) m.fp8_gathers_due();
}

void DataParallel::drain() {
  Impl& m = *impl_;
  if (m.sharded_grads() && m.in_flight >= 0) m.complete_grad_reduce(m.in_flight);
  for (auto& s : m.bk) s.reduce.wait();
  m.wait_param_gathers();
  for (int u = 0; u < m.U; ++u) m.complete_unit_gather(u);
}

}  // namespace paralab
