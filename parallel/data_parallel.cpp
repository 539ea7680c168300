// parallel/data_parallel.cpp: DDP and ZeRO 1-3 (see data_parallel.h for the idea and the
// bytes per step, buckets.h for the cut, zero_schedule.h for the order of the model's calls).
//
// The policies below are exactly what instrument/plan predicts, byte for byte: change one
// and the plan's simulation (plan.cpp, simulate_zero_step) must change with it.
//
// Buffers (Ψ parameters, P = layout.padded_total, S = layout.shard_numel; elements of the
// storage type, fp32 or with --bf16 bf16, so bytes = elements x 4 or x 2):
//   stage  params                        grads
//   0      Ψ, flat order (PARAMS)        Ψ, flat order (GRADS)
//   1      P, padded layout (PARAMS)     P, padded layout (GRADS)
//   2      P, padded layout (PARAMS)     S shard + a padded buffer per bucket while its
//                                        gradients are being produced (GRADS)
//   3      S shard + a padded buffer     as stage 2, bucket = unit
//          per gathered unit (PARAMS)
// The padded layout puts the buckets in ascending flat order, bucket j at pb_j (the sum of
// the padded sizes of the buckets before it), its padding (zero) after its elements, so a
// reduce-scatter or all-gather of bucket j works in place on [pb_j, pb_j + padded_j).
// Rank r owns [r * slice, (r+1) * slice) of every padded bucket; the shard holds those
// slices at each bucket's shard_offset. With dp 1 the same buffers exist (memory equals
// the plan at dp 1); reductions are no-ops and gathers device copies, never recorded.
//
// bf16: the buffers are bytes from the Ledger addressed by element (Impl::at), the
// collectives run on DType::BF16 (sums rounded to bf16 per addition, parallel/comm.h), and
// the only typed work here, accumulate and sum_squares, dispatches on the storage type.
// The host views (load_params, gather_*) stay fp32: rounded on the host before the copy
// in, widened on the host after the copy out, so no fp32 device buffer is ever needed.
#include "parallel/data_parallel.h"
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include "kernels/math.h"              // to_bf16, to_float: the host views' conversions
#include "kernels/ops.h"               // memcpy_*, memset_zero, accumulate, sum_squares
#include "parallel/zero_schedule.h"    // prefetch_window

namespace paralab {

using kernels::Device;

namespace {
[[noreturn]] void misuse(const std::string& what) {
  throw std::runtime_error("DataParallel: " + what);
}
}  // namespace

struct DataParallel::Impl {
  std::vector<int64_t> unit_begin;
  Communicator* dp = nullptr;  // nullptr when the group has one rank: nothing to talk to
  DataParallelOptions opt;
  Device device;
  int rank = 0, size = 1, U = 0, stage = 0;
  int es = 4;                // bytes per stored element: 4 (fp32) or 2 (bf16)
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
  std::vector<BucketState> bk;
  struct UnitState {
    Buffer<char> gathered;   // stage 3: the unit's full (padded) parameters
    CommHandle gather;
    bool resident = false;   // stage 3: gathered or in flight
    int refs = 0;
  };
  std::vector<UnitState> units;
  int held = 0;          // sum of refs: > 0 means the model holds some unit
  int in_flight = -1;    // stages 2-3 with overlap_grad_reduce: the bucket being reduced
  bool last = false;     // the current microbatch is the step's last
  std::vector<OwnedSegment> segments;
  std::vector<std::pair<int64_t, int64_t>> norm_exclusions;  // flat [begin, end), sorted

  bool sharded_grads() const { return stage >= 2; }

  // Sum of squares of the gradient elements [flat_begin, flat_begin + n) stored from `g`,
  // leaving out the excluded ranges (tensor-parallel replicas counted on another rank).
  double counted_sum_squares(const void* g, int64_t flat_begin, int64_t n) {
    const char* base = static_cast<const char*>(g);
    double sum = 0;
    int64_t pos = flat_begin;
    const int64_t end = flat_begin + n;
    for (const auto& [lo, hi] : norm_exclusions) {
      if (hi <= pos || lo >= end) continue;
      if (lo > pos) sum += sum_squares(base + (pos - flat_begin) * es, lo - pos);
      pos = std::max(pos, hi);
    }
    if (pos < end) sum += sum_squares(base + (pos - flat_begin) * es, end - pos);
    return sum;
  }

  // ---- storage elements ---------------------------------------------------------------
  void allocate(Buffer<char>& b, int64_t elements, Category c) {
    b.allocate(device, elements * es, c);
  }
  char* at(Buffer<char>& b, int64_t e) { return b.data() + e * es; }
  // out += in over n elements (bf16: widened, added in fp32, rounded).
  void accumulate(void* out, const void* in, int64_t n) {
    if (opt.bf16)
      kernels::accumulate(device, static_cast<kernels::bf16*>(out),
                          static_cast<const kernels::bf16*>(in), n);
    else
      kernels::accumulate(device, static_cast<float*>(out), static_cast<const float*>(in), n);
  }
  double sum_squares(const void* x, int64_t n) {
    if (opt.bf16) return kernels::sum_squares(device, static_cast<const kernels::bf16*>(x), n);
    return kernels::sum_squares(device, static_cast<const float*>(x), n);
  }
  // Host views: fp32 values <-> stored bytes, rounded or widened on the host.
  std::vector<char> to_storage(const std::vector<float>& v) const {
    std::vector<char> out(v.size() * es);
    if (!opt.bf16) {
      std::memcpy(out.data(), v.data(), out.size());
      return out;
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const kernels::bf16 x = kernels::to_bf16(v[i]);
      std::memcpy(&out[i * 2], &x, 2);
    }
    return out;
  }
  std::vector<float> from_storage(const std::vector<char>& raw) const {
    std::vector<float> out(raw.size() / es);
    if (!opt.bf16) {
      std::memcpy(out.data(), raw.data(), raw.size());
      return out;
    }
    for (size_t i = 0; i < out.size(); ++i) {
      kernels::bf16 x;
      std::memcpy(&x, &raw[i * 2], 2);
      out[i] = kernels::to_float(x);
    }
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

  // ---- stages 2-3: one bucket's gradients of this microbatch --------------------------
  void post_grad_reduce(int j) {
    BucketState& s = bk[j];
    const Bucket& b = layout.buckets[j];
    if (s.grad_buf.empty()) allocate(s.grad_buf, b.padded, Category::GRADS);
    s.reduced = true;
    if (dp)
      s.reduce = dp->reduce_scatter_async(s.grad_buf.data(), at(s.grad_buf, rank * b.slice),
                                          b.slice, dtype);
  }
  // Wait, add the rank's summed slice into the shard, free the bucket.
  void complete_grad_reduce(int j) {
    BucketState& s = bk[j];
    const Bucket& b = layout.buckets[j];
    s.reduce.wait();
    accumulate(at(grads, b.shard_offset), at(s.grad_buf, rank * b.slice), b.slice);
    s.grad_buf.reset();
    if (in_flight == j) in_flight = -1;
  }

  // ---- stages 0-1: the step's reduction of one bucket, posted once --------------------
  void post_step_reduce(int j) {
    BucketState& s = bk[j];
    const Bucket& b = layout.buckets[j];
    s.posted = true;
    if (!dp) return;
    if (stage == 0) {
      s.reduce = dp->all_reduce_async(at(grads, b.begin), b.numel(), ReduceOp::SUM, dtype);
    } else {
      const int64_t pos = padded_pos[j];
      s.reduce = dp->reduce_scatter_async(at(grads, pos), at(grads, pos + rank * b.slice),
                                          b.slice, dtype);
    }
  }

  // ---- stage 3: gather unit u's parameters into a new buffer ---------------------------
  void post_gather(int u) {
    UnitState& s = units[u];
    const Bucket& b = bucket_of(u);
    allocate(s.gathered, b.padded, Category::PARAMS);
    s.resident = true;
    const char* slice = at(params, b.shard_offset);
    if (dp)
      s.gather = dp->all_gather_async(slice, s.gathered.data(), b.slice, dtype);
    else
      kernels::memcpy_device(device, s.gathered.data(), slice, b.slice * es);
  }

  // Stages 1-2: bucket j's parameters may be read once its all-gather has landed.
  void wait_param_gather(int j) { bk[j].gather.wait(); }
  void wait_param_gathers() {
    for (size_t j = 0; j < bk.size(); ++j) wait_param_gather((int)j);
  }
};

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
  m.es = options.bf16 ? 2 : 4;
  m.dtype = options.bf16 ? DType::BF16 : DType::F32;
  m.layout = make_bucket_layout(unit_begin, options.bucket_size, m.size, m.stage == 3);
  const BucketLayout& l = m.layout;

  // pb_j: buckets in ascending flat order, each after the padded sizes of those before it.
  m.padded_pos.assign(l.buckets.size(), 0);
  int64_t pos = 0;
  for (int j = (int)l.buckets.size() - 1; j >= 0; --j) {  // reduction order is descending
    m.padded_pos[j] = pos;
    pos += l.buckets[j].padded;
  }

  const int64_t full = m.stage == 0 ? l.total : l.padded_total;
  m.allocate(m.params, m.stage == 3 ? l.shard_numel : full, Category::PARAMS);
  m.allocate(m.grads, m.sharded_grads() ? l.shard_numel : full, Category::GRADS);
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
      s.param = m.at(m.params, b.begin);
      s.grad = m.at(m.grads, b.begin);
      s.state_offset = b.begin;
    } else {
      s.flat_begin = m.owned_lo(b);
      s.count = m.owned_hi(b) - s.flat_begin;
      if (s.count <= 0) continue;  // a tiny bucket: the last ranks' slices are all padding
      const int64_t in_full = m.padded_pos[j] + m.rank * b.slice;
      s.param = m.at(m.params, m.stage == 3 ? b.shard_offset : in_full);
      s.grad = m.at(m.grads, m.sharded_grads() ? b.shard_offset : in_full);
      s.state_offset = b.shard_offset;
    }
    m.segments.push_back(s);
  }
}

DataParallel::~DataParallel() = default;

int DataParallel::num_units() const { return impl_->U; }
int DataParallel::dp_size() const { return impl_->size; }
bool DataParallel::bf16() const { return impl_->opt.bf16; }
bool DataParallel::hands_over_grads() const { return impl_->stage >= 2 || impl_->last; }
const BucketLayout& DataParallel::layout() const { return impl_->layout; }

// ---- the model's side --------------------------------------------------------------------

void DataParallel::begin_microbatch(bool last) {
  Impl& m = *impl_;
  if (m.held) misuse("begin_microbatch while the model still holds parameters");
  for (size_t j = 0; j < m.bk.size(); ++j) {
    if (!m.bk[j].grad_buf.empty())
      misuse("begin_microbatch: bucket of units " + std::to_string(m.layout.buckets[j].unit_lo) +
             ".." + std::to_string(m.layout.buckets[j].unit_hi) +
             " was never reduced (backward_done of its lowest unit missing)");
    m.bk[j].reduced = false;
  }
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
  s.gather.wait();
  ++s.refs;
  ++m.held;
  if (sweep_step)
    for (int v : prefetch_window(u, forward, m.U, m.opt.prefetch_units))
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
    s.gather.wait();
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
  if (u == 0) m.complete_grad_reduce(j);  // unit 0 is the microbatch's last backward
}

// ---- the trainer's side ------------------------------------------------------------------

void DataParallel::zero_grads() {
  Impl& m = *impl_;
  kernels::memset_zero(m.device, m.grads.data(), m.grads.bytes());
  for (auto& s : m.bk) s.posted = false;
}

void DataParallel::finish_gradients() {
  Impl& m = *impl_;
  if (!m.sharded_grads()) {
    for (size_t j = 0; j < m.bk.size(); ++j)
      if (!m.bk[j].posted) {
        m.post_step_reduce((int)j);
        m.bk[j].reduce.wait();
      }
    for (auto& s : m.bk) s.reduce.wait();
  } else {
    if (m.in_flight >= 0) m.complete_grad_reduce(m.in_flight);
    // A bucket the model wrote but never declared done still has to be summed.
    for (size_t j = 0; j < m.bk.size(); ++j)
      if (!m.bk[j].grad_buf.empty()) {
        m.post_grad_reduce((int)j);
        m.complete_grad_reduce((int)j);
      }
  }
  // The optimizer is about to write the owned slices that a pending gather still reads.
  m.wait_param_gathers();
}

const std::vector<OwnedSegment>& DataParallel::owned_segments() const {
  return impl_->segments;
}

int64_t DataParallel::state_numel() const {
  return impl_->stage == 0 ? impl_->layout.total : impl_->layout.shard_numel;
}

void DataParallel::exclude_from_norm(std::vector<std::pair<int64_t, int64_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  impl_->norm_exclusions = std::move(ranges);
}

double DataParallel::grad_sum_squares() {
  Impl& m = *impl_;
  if (m.stage == 0) return m.counted_sum_squares(m.grads.data(), 0, m.layout.total);
  // Stages >= 1: each element lives in exactly one rank's owned segments.
  double local = 0;
  for (const OwnedSegment& s : m.segments)
    local += m.counted_sum_squares(s.grad, s.flat_begin, s.count);
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
  if (m.stage == 0 || m.stage == 3 || !m.dp) return;  // 3 updated its shard in place
  for (size_t j = 0; j < m.bk.size(); ++j) {
    const Bucket& b = m.layout.buckets[j];
    const int64_t pos = m.padded_pos[j];
    m.bk[j].gather = m.dp->all_gather_async(m.at(m.params, pos + m.rank * b.slice),
                                            m.at(m.params, pos), b.slice, m.dtype);
    if (!m.opt.overlap_param_gather) m.bk[j].gather.wait();
  }
}

void DataParallel::drain() {
  Impl& m = *impl_;
  if (m.sharded_grads() && m.in_flight >= 0) m.complete_grad_reduce(m.in_flight);
  for (auto& s : m.bk) s.reduce.wait();
  m.wait_param_gathers();
  for (auto& s : m.units) s.gather.wait();
}

// ---- whole-model views -----------------------------------------------------------------

void DataParallel::load_params(const std::vector<float>& full) {
  Impl& m = *impl_;
  const BucketLayout& l = m.layout;
  if ((int64_t)full.size() != l.total)
    misuse("load_params: got " + std::to_string(full.size()) + " values for " +
           std::to_string(l.total) + " parameters");
  drain();
  const std::vector<char> host = m.to_storage(full);  // rounded once, on the host
  auto copy_in = [&](int64_t dst, int64_t flat, int64_t n) {
    kernels::memcpy_from_host(m.device, m.at(m.params, dst), host.data() + flat * m.es,
                              n * m.es);
  };
  if (m.stage == 0) {
    copy_in(0, 0, l.total);
    return;
  }
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    if (m.stage < 3)
      copy_in(m.padded_pos[j], b.begin, b.numel());
    else if (m.owned_hi(b) > m.owned_lo(b))
      copy_in(b.shard_offset, m.owned_lo(b), m.owned_hi(b) - m.owned_lo(b));
  }
}

std::vector<float> DataParallel::gather_params() {
  Impl& m = *impl_;
  const BucketLayout& l = m.layout;
  std::vector<char> raw(l.total * m.es);
  m.wait_param_gathers();
  if (m.stage == 0) {
    kernels::memcpy_to_host(m.device, raw.data(), m.params.data(), raw.size());
    return m.from_storage(raw);
  }
  Buffer<char> tmp;  // stage 3: one bucket at a time
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    const char* src = m.at(m.params, m.padded_pos[j]);
    if (m.stage == 3) {
      m.allocate(tmp, b.padded, Category::PARAMS);
      const char* slice = m.at(m.params, b.shard_offset);
      if (m.dp)
        m.dp->all_gather(slice, tmp.data(), b.slice, m.dtype);
      else
        kernels::memcpy_device(m.device, tmp.data(), slice, b.slice * m.es);
      src = tmp.data();
    }
    kernels::memcpy_to_host(m.device, raw.data() + b.begin * m.es, src, b.numel() * m.es);
  }
  return m.from_storage(raw);
}

std::vector<float> DataParallel::gather_grads() {
  Impl& m = *impl_;
  const BucketLayout& l = m.layout;
  std::vector<char> raw(l.total * m.es);
  if (m.stage == 0) {
    kernels::memcpy_to_host(m.device, raw.data(), m.grads.data(), raw.size());
    return m.from_storage(raw);
  }
  Buffer<char> tmp;  // stages 2-3: one bucket at a time
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    char* src;
    if (m.stage == 1) {
      // The full buffer holds this rank's summed slice; the rest is its local gradient.
      src = m.at(m.grads, m.padded_pos[j]);
      if (m.dp) m.dp->all_gather(src + m.rank * b.slice * m.es, src, b.slice, m.dtype);
    } else {
      m.allocate(tmp, b.padded, Category::GRADS);
      const char* slice = m.at(m.grads, b.shard_offset);
      if (m.dp)
        m.dp->all_gather(slice, tmp.data(), b.slice, m.dtype);
      else
        kernels::memcpy_device(m.device, tmp.data(), slice, b.slice * m.es);
      src = tmp.data();
    }
    kernels::memcpy_to_host(m.device, raw.data() + b.begin * m.es, src, b.numel() * m.es);
  }
  return m.from_storage(raw);
}

}  // namespace paralab
