// parallel/data_parallel_fp8.cpp: --fp8-param-gather at ZeRO-3 (parallel/data_parallel.h
// Fp8ParamGather, docs/fp8.md): a unit's gather with its dense linears' weights as FP8 codes.
//
// The steps of one gather of unit u (every rank):
//   1. the scales: delayed, the history's; tensorwise, each weight's amax over this rank's
//      slice, a MAX all-reduce of the 4 amaxes over dp (Megatron's current scaling reduces
//      the shards' amaxes the same way: fp8_utils.py, _quantize_param_shard_impl), then the
//      scaling's own reduction over the pieces (tp, cp) and scale = max / amax
//   2. the message: this rank's slice of the unit, run by run, an FP8 weight's elements cast
//      at its scale (1 byte each), the others copied (es bytes each)
//   3. an all-gather of M bytes per rank (M: the largest message; plan/data_parallel.cpp)
//   4. every rank's runs copied to their places in the gathered unit: a weight's codes at
//      the start of its place, the others where they always are
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

int64_t fp8_gather_slice_bytes(const std::vector<Fp8GatherWeight>& weights, int64_t lo,
                               int64_t hi, int es) {
  int64_t bytes = 0;
  for (const Run& r : slice_runs(weights, lo, hi)) bytes += run_bytes(r, es);
  return bytes;
}

void DataParallel::set_fp8_param_gather(Fp8ParamGather g) {
  Impl& m = *impl_;
  if (m.stage != 3) misuse("fp8 param gather needs zero stage 3");
  if (m.opt.offload_params) misuse("fp8 param gather with offload_params");
  if ((int)g.weights.size() != m.U) misuse("fp8 param gather: weights of every unit");
  int64_t message = 0;
  for (int u = 0; u < m.U; ++u) {
    const std::vector<Fp8GatherWeight>& w = g.weights[u];
    if (w.empty()) continue;
    if (w.size() != 4) misuse("fp8 param gather: a unit's 4 weights");
    const Bucket& b = m.bucket_of(u);
    for (int r = 0; r < m.size; ++r)
      message = std::max(message,
                         fp8_gather_slice_bytes(w, r * b.slice, (r + 1) * b.slice, m.es));
  }
  m.fp8 = std::move(g);
  m.fp8_message = message;
  m.fp8_state.allocate(m.device, 12 * (size_t)m.U, Category::FP8_STATE);
  m.fp8_send.allocate(m.device, message, Category::COMM_BUFFERS);
  if (m.dp) m.fp8_recv.allocate(m.device, message * m.size, Category::COMM_BUFFERS);
}

const float* DataParallel::fp8_weights(int u) const {
  const Impl& m = *impl_;
  return m.fp8_unit(u) ? m.fp8_state.data() + 12 * u : nullptr;
}

void DataParallel::Impl::post_fp8_gather(int u) {
  UnitState& s = units[u];
  const Bucket& b = bucket_of(u);
  const std::vector<Fp8GatherWeight>& w = fp8.weights[u];
  Fp8Scaling& scaling = *fp8.scaling;
  allocate(s.gathered, b.padded, Category::PARAMS);
  s.resident = true;
  const int64_t lo = rank * b.slice;
  const std::vector<Run> mine = slice_runs(w, lo, lo + b.slice);
  const char* shard = at(params, b.shard_offset);  // element lo of the unit
  float* scale = fp8_state.data() + 12 * u;
  float* factor = scale + 4;
  float* amax = scale + 8;
  std::vector<int> linears;
  for (const Fp8GatherWeight& x : w) linears.push_back(x.linear);
  with_storage(opt.storage, [&](auto type) {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, kernels::fp16>) {
      misuse("fp8 param gather with fp16 storage");
    } else {
      // 1. the scales (and factors)
      if (scaling.config().recipe == Fp8Recipe::Tensorwise) {
        kernels::memset_zero(device, amax, 4 * sizeof(float));
        for (const Run& r : mine)
          if (r.weight >= 0)
            kernels::fp8_amax(device, amax + r.weight,
                              reinterpret_cast<const T*>(shard + (r.lo - lo) * es), r.hi - r.lo);
        if (communicates(b)) dp->all_reduce(amax, 4, ReduceOp::MAX, DType::F32);
      }
      scaling.gather_scales(linears, amax, scale, factor);
      // 2. the message
      char* out = fp8_send.data();
      for (const Run& r : mine) {
        const char* src = shard + (r.lo - lo) * es;
        if (r.weight >= 0)
          scaling.quantize_shard(w[r.weight].linear, reinterpret_cast<const T*>(src), r.hi - r.lo,
                                 scale + r.weight, reinterpret_cast<uint8_t*>(out),
                                 factor + r.weight);
        else
          kernels::memcpy_device(device, out, src, (r.hi - r.lo) * es);
        out += run_bytes(r, es);
      }
    }
  });
  // 3. the all-gather (one rank: its own message)
  const char* all = fp8_send.data();
  if (communicates(b)) {
    dp->all_gather(fp8_send.data(), fp8_recv.data(), fp8_message, DType::U8);
    all = fp8_recv.data();
  }
  // 4. every rank's runs to their places
  for (int r = 0; r < (communicates(b) ? size : 1); ++r) {
    const int rr = communicates(b) ? r : rank;
    const char* in = all + r * fp8_message;
    for (const Run& x : slice_runs(w, rr * b.slice, (rr + 1) * b.slice)) {
      char* dst = x.weight >= 0 ? s.gathered.data() + w[x.weight].begin * es +
                                      (x.lo - w[x.weight].begin)
                                : at(s.gathered, x.lo);
      kernels::memcpy_device(device, dst, in, run_bytes(x, es));
      in += run_bytes(x, es);
    }
  }
}

}  // namespace paralab
