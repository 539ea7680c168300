// parallel/data_parallel_fp8.cpp: --fp8-param-gather (parallel/data_parallel.h Fp8ParamGather,
// docs/fp8.md): a gather with the dense linears' and the MoE experts' weights as FP8 codes,
// each weight (each expert's fc1 and fc2) at its own scale. ZeRO-3 gathers a unit
// before its use; ZeRO-1/2 gather a bucket after the optimizer's step (the distributed
// optimizer's all-gather of updated parameters).
//
// The steps of one gather of bucket j (every rank; at ZeRO-3 bucket = unit):
//   1. the scales of its FP8 units: delayed, the history's; tensorwise, each weight's amax over
//      this rank's slice, a MAX all-reduce of the unit's amaxes over dp (Megatron's current
//      scaling reduces the shards' amaxes the same way: fp8_utils.py,
//      _quantize_param_shard_impl), then each weight's scaling's own reduction over the pieces
//      (the dense linears': tp, cp; the experts': none) and scale = max / amax; blockwise, the
//      same per 128 x 128 block of each weight (the slice's part of each block it cuts through),
//      with no pieces' reduction (a block lies within a tp piece, as the casts' blocks do)
//   2. the message: this rank's slice of the bucket, run by run, an FP8 weight's elements cast
//      at their block's scale (1 byte each; delayed: the slice's amax recorded), the others
//      copied (es bytes each)
//   3. an all-gather of M_j bytes per rank (M_j: the bucket's largest message; plan/fp8.h)
//   4. ZeRO-3: every rank's runs copied to their places in the gathered unit, a weight's codes
//      at the start of its place, the others where they always are. ZeRO-1/2: the other ranks'
//      runs into the full parameter buffer, a weight's codes decoded into the storage type
//      (decode(c) / scale, rounded once), the others copied; the rank's own slice stays as the
//      optimizer left it, exact.
#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/ops.h"
#include "parallel/data_parallel_impl.h"

namespace paralab {

namespace {

// A run of a slice: elements [lo, hi) of the unit, inside FP8 weight `weight` or (-1) not.
struct Run {
  int64_t lo, hi;
  int weight;
};

std::vector<Run> slice_runs(const std::vector<Fp8GatherWeight>& w, int64_t lo, int64_t hi) {
  std::vector<Run> out;
  int64_t pos = lo;
  for (size_t k = 0; k < w.size(); ++k) {
    const int64_t a = std::max(w[k].begin, pos), e = std::min(w[k].begin + w[k].count, hi);
    if (a >= e) continue;
    if (a > pos) out.push_back({pos, a, -1});
    out.push_back({a, e, (int)k});
    pos = e;
  }
  if (pos < hi) out.push_back({pos, hi, -1});
  return out;
}

int64_t run_bytes(const Run& r, int es) { return (r.hi - r.lo) * (r.weight >= 0 ? 1 : es); }

}  // namespace

int Fp8GatherWeight::scale_values() const {
  return (int)kernels::fp8_scale_count(scaling->blocks(Fp8Role::Weight), (int)(count / cols),
                                       cols);
}

int fp8_staging_pairs(int zero_stage, bool overlap_param_gather, int prefetch_units,
                      int fp8_buckets) {
  const int in_flight = zero_stage == 3       ? prefetch_units + 1
                        : overlap_param_gather ? 2
                                               : 1;
  return std::max(1, std::min(in_flight, fp8_buckets));
}

int64_t fp8_gather_slice_bytes(const std::vector<Fp8GatherWeight>& weights, int64_t lo,
                               int64_t hi, int es) {
  int64_t bytes = 0;
  for (const Run& r : slice_runs(weights, lo, hi)) bytes += run_bytes(r, es);
  return bytes;
}

void DataParallel::set_fp8_param_gather(Fp8ParamGather g) {
  Impl& m = *impl_;
  if (m.stage == 0) misuse("fp8 param gather needs zero stage 1, 2 or 3");
  if ((int)g.weights.size() != m.U) misuse("fp8 param gather: weights of every unit");
  // each unit's 3 V_u floats (scales, factors, amaxes) in fp8_state
  m.fp8_unit_state.assign(m.U, 0);
  m.fp8_unit_values.assign(m.U, 0);
  m.fp8_weight_offset.assign(m.U, {});
  int64_t state = 0;
  for (int u = 0; u < m.U; ++u) {
    m.fp8_unit_state[u] = state;
    for (const Fp8GatherWeight& w : g.weights[u]) {
      if (w.scaling == nullptr || w.cols <= 0 || w.count % w.cols != 0)
        misuse("fp8 param gather: a weight without its scaling or its shape");
      m.fp8_weight_offset[u].push_back(m.fp8_unit_values[u]);
      m.fp8_unit_values[u] += w.scale_values();
    }
    state += 3 * (int64_t)m.fp8_unit_values[u];
  }
  const BucketLayout& l = m.layout;
  m.fp8_bucket.assign(l.buckets.size(), {});
  m.fp8_place.assign(l.buckets.size(), {});
  m.fp8_message.assign(l.buckets.size(), 0);
  int64_t largest = 0;
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    std::vector<std::pair<Fp8GatherWeight, Impl::Fp8Place>> in_bucket;
    for (int u = b.unit_lo; u <= b.unit_hi; ++u)
      for (size_t k = 0; k < g.weights[u].size(); ++k) {
        Fp8GatherWeight x = g.weights[u][k];
        x.begin += m.unit_begin[u] - b.begin;  // elements of the bucket
        in_bucket.push_back({x, {u, (int)k}});
      }
    // in the order of their elements, as the slices' runs take them
    std::sort(in_bucket.begin(), in_bucket.end(),
              [](const auto& a, const auto& c) { return a.first.begin < c.first.begin; });
    for (size_t i = 0; i < in_bucket.size(); ++i) {
      const Fp8GatherWeight* before = i > 0 ? &in_bucket[i - 1].first : nullptr;
      if (before && in_bucket[i].first.begin < before->begin + before->count)
        misuse("fp8 param gather: overlapping weights");
      m.fp8_bucket[j].push_back(in_bucket[i].first);
      m.fp8_place[j].push_back(in_bucket[i].second);
    }
    for (int r = 0; r < m.size && !m.fp8_bucket[j].empty(); ++r)
      m.fp8_message[j] = std::max(m.fp8_message[j],
                                  fp8_gather_slice_bytes(m.fp8_bucket[j], r * b.slice,
                                                         (r + 1) * b.slice, m.es));
    largest = std::max(largest, m.fp8_message[j]);
  }
  m.fp8 = std::move(g);
  m.fp8_gathered.assign(m.U, false);
  m.fp8_state.allocate(m.device, state, Category::FP8_STATE);
  m.fp8_order.clear();
  for (int j = (int)l.buckets.size() - 1; j >= 0; --j)
    if (m.fp8_message[j] > 0) m.fp8_order.push_back(j);
  m.fp8_done.assign(l.buckets.size(), true);
  // the staging pairs, each sized for the largest message (plan/fp8.h fp8_staging_pairs)
  const int pairs = fp8_staging_pairs(m.stage, m.opt.overlap_param_gather, m.opt.prefetch_units,
                                      (int)m.fp8_order.size());
  m.fp8_send.resize(pairs);
  m.fp8_recv.resize(pairs);
  for (int p = 0; p < pairs; ++p) {
    m.fp8_send[p].allocate(m.device, largest, Category::COMM_BUFFERS);
    if (m.dp) m.fp8_recv[p].allocate(m.device, largest * m.size, Category::COMM_BUFFERS);
  }
  m.fp8_pair_unit.assign(pairs, -1);
  m.fp8_pair_of.assign(m.U, -1);
}

Fp8GatheredUnit DataParallel::fp8_weights(int u) const {
  const Impl& m = *impl_;
  if (!m.fp8_unit(u) || (m.stage < 3 && !m.fp8_gathered[u])) return {};
  return {m.fp8_state.data() + m.fp8_unit_state[u], m.fp8_weight_offset[u].data(),
          m.fp8_unit_values[u], 0};
}

bool DataParallel::fp8_weights_stored() const { return impl_->stage < 3; }

void DataParallel::gather_fp8_weights() {
  Impl& m = *impl_;
  if (m.stage == 3 || m.fp8.weights.empty()) return;
  if (m.fp8_overlapped()) return m.fp8_gathers_due();  // gathered at step 1's first uses
  for (size_t j = 0; j < m.bk.size(); ++j)
    if (m.fp8_bucket_has((int)j)) m.gather_fp8_bucket((int)j);
}

void DataParallel::after_evaluation() {
  Impl& m = *impl_;
  if (m.stage == 1 || m.stage == 2) m.fp8_gathers_due();
}

// Steps 1 and 2 from this rank's slice of bucket j (`slice`: its element lo = rank slice),
// the message into `out` (M_j bytes).
void DataParallel::Impl::fp8_encode(int j, const char* slice, char* out) {
  const Bucket& b = layout.buckets[j];
  const std::vector<Fp8GatherWeight>& w = fp8_bucket[j];
  const int64_t lo = rank * b.slice;
  const std::vector<Run> mine = slice_runs(w, lo, lo + b.slice);
  // weight i of the bucket: its scales (0), factors (1), amaxes (2)
  auto at = [&](int i, int what) {
    return fp8_values(fp8_place[j][i].unit, fp8_place[j][i].k, what);
  };
  std::vector<int> units;  // the bucket's units with FP8 weights
  for (const Fp8Place& p : fp8_place[j]) units.push_back(p.unit);  // a unit's weights together
  units.erase(std::unique(units.begin(), units.end()), units.end());
  const Fp8Recipe recipe = w.front().scaling->config().recipe;
  with_storage(opt.storage, [&](auto type) {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, kernels::fp16>) {
      misuse("fp8 param gather with fp16 storage");
    } else {
      // 1. the scales (and factors), unit by unit, each run of weights of one scaling together
      const bool current = recipe != Fp8Recipe::Delayed;  // the amaxes of this gather's values
      if (current) {
        for (int u : units)
          kernels::memset_zero(device, fp8_values(u, 0, 2), fp8_unit_values[u] * sizeof(float));
        for (const Run& r : mine)
          if (r.weight >= 0)
            kernels::fp8_shard_amax(device, at(r.weight, 2),
                                    reinterpret_cast<const T*>(slice + (r.lo - lo) * es),
                                    r.lo - w[r.weight].begin, r.hi - r.lo, w[r.weight].cols,
                                    w[r.weight].scaling->blocks(Fp8Role::Weight));
      }
      for (int u : units) {
        const std::vector<Fp8GatherWeight>& unit_weights = fp8.weights[u];
        const int n = (int)unit_weights.size();
        if (current && communicates(b))
          dp->all_reduce(fp8_values(u, 0, 2), fp8_unit_values[u], ReduceOp::MAX, DType::F32);
        for (int k0 = 0; k0 < n;) {  // the weights [k0, k1) of one scaling
          std::vector<int> linears;
          int k1 = k0, values = 0;
          for (; k1 < n && unit_weights[k1].scaling == unit_weights[k0].scaling; ++k1) {
            linears.push_back(unit_weights[k1].linear);
            values += unit_weights[k1].scale_values();
          }
          unit_weights[k0].scaling->gather_scales(linears, values, fp8_values(u, k0, 2),
                                                  fp8_values(u, k0, 0), fp8_values(u, k0, 1));
          k0 = k1;
        }
      }
      // 2. the message
      for (const Run& r : mine) {
        const char* src = slice + (r.lo - lo) * es;
        if (r.weight >= 0)
          w[r.weight].scaling->quantize_shard(w[r.weight].linear, reinterpret_cast<const T*>(src),
                                              r.lo - w[r.weight].begin, r.hi - r.lo,
                                              w[r.weight].cols, at(r.weight, 0),
                                              reinterpret_cast<uint8_t*>(out));
        else
          kernels::memcpy_device(device, out, src, (r.hi - r.lo) * es);
        out += run_bytes(r, es);
      }
    }
  });
}

// Step 3 through pair 0: rank r's message at the result + r M_j (one rank: its own).
const char* DataParallel::Impl::fp8_exchange(int j) {
  if (!communicates(layout.buckets[j])) return fp8_send[0].data();
  dp->all_gather(fp8_send[0].data(), fp8_recv[0].data(), fp8_message[j], DType::U8);
  return fp8_recv[0].data();
}

// ZeRO-1/2 with --overlap-param-gather (data_parallel_impl.h): steps 1-3 of the FP8 buckets
// in the order of their first use, two in flight, step 4 at each one's first wait.
void DataParallel::Impl::fp8_gathers_due() {
  if (!fp8_overlapped() || fp8_order.empty()) return;
  complete_fp8_bucket(fp8_order.back());  // any left of the last round: nothing in flight
  fp8_posted = 0;
  for (int j : fp8_order) fp8_done[j] = false;
}

void DataParallel::Impl::post_next_fp8_bucket(int pair) {
  if (fp8_posted == fp8_order.size() || pair >= (int)fp8_send.size()) return;
  const int j = fp8_order[fp8_posted++];
  const Bucket& b = layout.buckets[j];
  char* send = fp8_send[pair].data();
  fp8_encode(j, at(params, padded_pos[j] + rank * b.slice), send);
  if (communicates(b))
    bk[j].gather = dp->all_gather_async(send, fp8_recv[pair].data(), fp8_message[j], DType::U8);
  fp8_flight.push_back({j, pair});
}

void DataParallel::Impl::complete_fp8_bucket(int j) {
  if (fp8_done[j]) return;
  if (fp8_posted == 0) {  // the round's first use: the first two posted
    post_next_fp8_bucket(0);
    post_next_fp8_bucket(1);
  }
  while (!fp8_done[j] && !fp8_flight.empty()) {
    const auto [k, pair] = fp8_flight.front();
    fp8_flight.pop_front();
    bk[k].gather.wait();
    const Bucket& b = layout.buckets[k];
    fp8_decode(k, (communicates(b) ? fp8_recv : fp8_send)[pair].data());
    fp8_done[k] = true;
    post_next_fp8_bucket(pair);
  }
}

// ZeRO-3: steps 1-3 of unit u's gather through a free staging pair (none free: the oldest
// in flight completed first), the all-gather left in flight; complete_unit_gather places it.
void DataParallel::Impl::post_fp8_gather(int u) {
  UnitState& s = units[u];
  const int j = layout.bucket_of[u];
  const Bucket& b = layout.buckets[j];
  allocate(s.gathered, b.padded, Category::PARAMS);
  s.resident = true;
  const char* slice = at(params, b.shard_offset);
  if (opt.offload_params) {  // the slice up from the host shard first, into its place (post_gather)
    char* mine = at(s.gathered, rank * b.slice);
    copy_to_device(device, mine, at(host_params, b.shard_offset), b.slice * es);
    slice = mine;
  }
  int pair = (int)(std::find(fp8_pair_unit.begin(), fp8_pair_unit.end(), -1) -
                   fp8_pair_unit.begin());
  if (pair == (int)fp8_pair_unit.size()) {  // every pair in flight: pair 0's unit placed early
    pair = 0;
    complete_unit_gather(fp8_pair_unit[0]);
  }
  fp8_encode(j, slice, fp8_send[pair].data());  // read before step 4 writes the gathered buffer
  if (!communicates(b)) return place_fp8_unit(u, fp8_send[pair].data());
  s.gather = dp->all_gather_async(fp8_send[pair].data(), fp8_recv[pair].data(), fp8_message[j],
                                  DType::U8);
  fp8_pair_unit[pair] = u;
  fp8_pair_of[u] = pair;
}

void DataParallel::Impl::complete_unit_gather(int u) {
  units[u].gather.wait();
  const int pair = fp8_pair_of.empty() ? -1 : fp8_pair_of[u];
  if (pair < 0) return;
  fp8_pair_of[u] = -1;
  fp8_pair_unit[pair] = -1;
  place_fp8_unit(u, fp8_recv[pair].data());
}

// Step 4 at ZeRO-3 (`all`: rank r's message at all + r M_j): every rank's runs to their
// places in the gathered unit, a weight's codes at the start of its place.
void DataParallel::Impl::place_fp8_unit(int u, const char* all) {
  UnitState& s = units[u];
  const int j = layout.bucket_of[u];
  const Bucket& b = layout.buckets[j];
  const std::vector<Fp8GatherWeight>& w = fp8_bucket[j];
  for (int r = 0; r < (communicates(b) ? size : 1); ++r) {
    const int rr = communicates(b) ? r : rank;
    const char* in = all + r * fp8_message[j];
    for (const Run& x : slice_runs(w, rr * b.slice, (rr + 1) * b.slice)) {
      char* dst = x.weight >= 0 ? s.gathered.data() + w[x.weight].begin * es +
                                      (x.lo - w[x.weight].begin)
                                : at(s.gathered, x.lo);
      kernels::memcpy_device(device, dst, in, run_bytes(x, es));
      in += run_bytes(x, es);
    }
  }
}

void DataParallel::Impl::gather_fp8_bucket(int j) {
  fp8_encode(j, at(params, padded_pos[j] + rank * layout.buckets[j].slice), fp8_send[0].data());
  fp8_decode(j, fp8_exchange(j));
}

// Step 4 at ZeRO-1/2 from every rank's message (`all`, rank r's at all + r M_j): the other
// ranks' runs into the parameter buffer.
void DataParallel::Impl::fp8_decode(int j, const char* all) {
  const Bucket& b = layout.buckets[j];
  const std::vector<Fp8GatherWeight>& w = fp8_bucket[j];
  char* bucket = at(params, padded_pos[j]);
  with_storage(opt.storage, [&](auto type) {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, kernels::fp16>) return;  // fp8_encode refused it
    for (int r = 0; r < (communicates(b) ? size : 0); ++r) {
      if (r == rank) continue;
      const char* in = all + r * fp8_message[j];
      for (const Run& x : slice_runs(w, r * b.slice, (r + 1) * b.slice)) {
        char* dst = bucket + x.lo * es;
        if (x.weight >= 0) {
          const Fp8GatherWeight& g = w[x.weight];
          const Fp8Place& p = fp8_place[j][x.weight];
          kernels::fp8_shard_dequantize(device, reinterpret_cast<T*>(dst),
                                        {reinterpret_cast<const uint8_t*>(in),
                                         fp8_values(p.unit, p.k, 1),
                                         g.scaling->format(Fp8Role::Weight),
                                         g.scaling->blocks(Fp8Role::Weight)},
                                        x.lo - g.begin, x.hi - x.lo, g.cols);
        } else {
          kernels::memcpy_device(device, dst, in, run_bytes(x, es));
        }
        in += run_bytes(x, es);
      }
    }
  });
  for (int u = b.unit_lo; u <= b.unit_hi; ++u) fp8_gathered[u] = fp8_unit(u);
}

}  // namespace paralab
