// report/rank_metrics.cpp: see rank_metrics.h.
#include "report/rank_metrics.h"
#include <algorithm>
#include <cstring>
#include "kernels/ops.h"

namespace paralab {

namespace {
// Doubles per rank: memory, peak, flops, run seconds, the actions' and exchanges' start and
// end, the communication record.
size_t record_size(size_t actions, size_t exchanges) {
  return kNumMemoryCategories + 3 + 2 * (actions + exchanges) + CommStats::kVectorSize;
}
}  // namespace

std::vector<RankMetrics> gather_rank_metrics(Communicator& world, const RankMetrics& mine,
                                             const Schedule& schedule,
                                             const std::vector<int>& pp_rank_of) {
  size_t actions = 0, exchanges_max = 0;
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    actions = std::max(actions, schedule.ranks[r].size());
    exchanges_max = std::max(exchanges_max, exchanges(schedule, (int)r).size());
  }
  const size_t n = record_size(actions, exchanges_max);
  std::vector<double> v(n, 0.0);
  size_t at = 0;
  for (int c = 0; c < kNumMemoryCategories; ++c) v[at++] = (double)mine.memory_bytes[c];
  v[at++] = (double)mine.peak_memory_bytes;
  v[at++] = mine.hardware_flops;
  v[at++] = mine.run_seconds;
  for (size_t k = 0; k < actions; ++k) {
    if (k < mine.actions.size()) {
      v[at] = mine.actions[k].start;
      v[at + 1] = mine.actions[k].end;
    }
    at += 2;
  }
  for (size_t k = 0; k < exchanges_max; ++k) {
    if (k < mine.exchanges.size()) {
      v[at] = mine.exchanges[k].start;
      v[at + 1] = mine.exchanges[k].end;
    }
    at += 2;
  }
  const std::vector<double> comm = mine.comm.to_vector();
  std::copy(comm.begin(), comm.end(), v.begin() + at);

  const kernels::Device dev = world.device();
  const int size = world.size();
  const size_t bytes = n * sizeof(double);
  Buffer<char> all(dev, bytes * size, Category::COMM_BUFFERS);
  kernels::memcpy_from_host(dev, all.data() + bytes * world.rank(), v.data(), bytes);
  world.all_gather(all.data() + bytes * world.rank(), all.data(), bytes, DType::U8);
  if (world.rank() != 0) return {};
  std::vector<double> host(n * size);
  kernels::memcpy_to_host(dev, host.data(), all.data(), bytes * size);

  std::vector<RankMetrics> out(size);
  for (int r = 0; r < size; ++r) {
    const double* x = host.data() + n * r;
    RankMetrics& m = out[r];
    m.rank = r;
    size_t i = 0;
    for (int c = 0; c < kNumMemoryCategories; ++c) m.memory_bytes[c] = (int64_t)x[i++];
    m.peak_memory_bytes = (int64_t)x[i++];
    m.hardware_flops = x[i++];
    m.run_seconds = x[i++];
    const int pp = pp_rank_of.at(r);
    m.actions.resize(schedule.ranks[pp].size());
    for (size_t k = 0; k < actions; ++k, i += 2)
      if (k < m.actions.size()) m.actions[k] = {x[i], x[i + 1]};
    m.exchanges.resize(exchanges(schedule, pp).size());
    for (size_t k = 0; k < exchanges_max; ++k, i += 2)
      if (k < m.exchanges.size()) m.exchanges[k] = {x[i], x[i + 1]};
    m.comm = CommStats::from_vector(std::vector<double>(x + i, x + i + CommStats::kVectorSize));
  }
  return out;
}

}  // namespace paralab
