// report/rank_metrics.cpp: see rank_metrics.h.
#include "report/rank_metrics.h"
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include "kernels/ops.h"
#include "measure/clock.h"  // now_seconds

namespace paralab {

namespace {
// Doubles per rank: memory, peak, resident (4), flops, run seconds, start seconds, event count, events
// dropped, kernel launches and bytes, flash launches, host (4), the actions' and exchanges'
// start and end, the communication record.
size_t record_size(size_t actions, size_t exchanges) {
  return kNumMemoryCategories + 19 + 2 * (actions + exchanges) + CommStats::kVectorSize;
}

// On rank 0: every rank's steady clock minus rank 0's (rank_metrics.h). Rank 0 sends to
// rank r, which answers with its clock as it got the message; the answer's midpoint is
// the instant rank r read it, to half the round trip.
std::vector<double> clock_offsets(Communicator& world) {
  const int n = world.size(), me = world.rank();
  std::vector<double> offset(n, 0.0);
  const char* force = std::getenv("PARALAB_CLOCK_PINGPONG");
  if (paralab::world().local_size >= n && !(force && *force == '1')) return offset;
  constexpr int kRounds = 5;
  const kernels::Device dev = world.device();
  Buffer<char> buf(dev, sizeof(double), Category::COMM_BUFFERS);
  for (int r = 1; r < n; ++r) {
    double best = std::numeric_limits<double>::infinity();
    for (int k = 0; k < kRounds && (me == 0 || me == r); ++k) {
      if (me == 0) {
        const double sent = now_seconds();
        world.send_recv({P2POp::send(buf.data(), sizeof(double), r, DType::U8)});
        world.send_recv({P2POp::recv(buf.data(), sizeof(double), r, DType::U8)});
        const double back = now_seconds();
        double remote = 0;
        kernels::memcpy_to_host(dev, &remote, buf.data(), sizeof remote);
        if (back - sent < best) best = back - sent, offset[r] = remote - (sent + back) / 2;
      } else {
        world.send_recv({P2POp::recv(buf.data(), sizeof(double), 0, DType::U8)});
        const double now = now_seconds();
        kernels::memcpy_from_host(dev, buf.data(), &now, sizeof now);
        world.send_recv({P2POp::send(buf.data(), sizeof(double), 0, DType::U8)});
      }
    }
  }
  return offset;
}
}  // namespace

RankMetrics rank_metrics_of(int rank, const StepMetrics& s, const CommStats& comm,
                            const PipelineTiming& timing) {
  RankMetrics m;
  m.rank = rank;
  m.memory_bytes = s.memory_bytes;
  m.peak_memory_bytes = s.peak_memory_bytes;
  for (size_t c = 0; c < m.resident_bytes.size(); ++c) m.resident_bytes[c] = s.resident_bytes[c];
  m.host_bytes = s.host_memory_bytes;
  m.hardware_flops = s.hardware_flops;
  m.kernel_launches = s.kernel_launches;
  m.kernel_bytes = s.kernel_bytes;
  m.attention_launches = s.attention_launches;
  m.routing_copies = s.routing_copies;
  m.routing_copy_bytes = s.routing_copy_bytes;
  m.comm = comm;
  m.comm_events = comm.events();  // --trace's comm lane
  m.actions = timing.actions;
  m.exchanges = timing.exchanges;
  m.run_seconds = timing.run_seconds;
  m.start_seconds = timing.start_seconds;
  return m;
}

std::vector<double> all_gather_doubles(Communicator& world, const std::vector<double>& mine) {
  const kernels::Device dev = world.device();
  const size_t bytes = mine.size() * sizeof(double);
  Buffer<char> all(dev, bytes * world.size(), Category::COMM_BUFFERS);
  kernels::memcpy_from_host(dev, all.data() + bytes * world.rank(), mine.data(), bytes);
  world.all_gather(all.data() + bytes * world.rank(), all.data(), bytes, DType::U8);
  std::vector<double> host(mine.size() * world.size());
  kernels::memcpy_to_host(dev, host.data(), all.data(), bytes * world.size());
  return host;
}

std::vector<RankMetrics> gather_rank_metrics(Communicator& world, const RankMetrics& mine,
                                             const Schedule& schedule,
                                             const std::vector<int>& pp_rank_of,
                                             bool with_trace) {
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
  for (int64_t b : mine.resident_bytes) v[at++] = (double)b;
  v[at++] = mine.hardware_flops;
  v[at++] = mine.run_seconds;
  v[at++] = mine.start_seconds;
  v[at++] = (double)mine.comm.events().size();
  v[at++] = (double)mine.comm.events_dropped();
  v[at++] = (double)mine.kernel_launches;
  v[at++] = mine.kernel_bytes;
  v[at++] = (double)mine.attention_launches;
  v[at++] = (double)mine.routing_copies;
  v[at++] = mine.routing_copy_bytes;
  for (int64_t b : mine.host_bytes) v[at++] = (double)b;
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

  const int size = world.size();
  const std::vector<double> host = all_gather_doubles(world, v);
  // The trace's extra: the events, padded to the longest list (every rank read the counts).
  constexpr size_t kEventDoubles = 4;  // group, op, start, end
  size_t most_events = 0;
  std::vector<double> events, offsets;
  if (with_trace) {
    const size_t count_at = kNumMemoryCategories + 8;  // after memory, peak, resident, ...
    for (int r = 0; r < size; ++r) most_events = std::max(most_events, (size_t)host[n * r + count_at]);
    std::vector<double> e(std::max<size_t>(1, most_events * kEventDoubles), 0.0);
    for (size_t k = 0; k < mine.comm.events().size(); ++k) {
      const CommEvent& c = mine.comm.events()[k];
      e[k * 4] = (double)(int)c.group, e[k * 4 + 1] = (double)(int)c.op;
      e[k * 4 + 2] = c.start_s, e[k * 4 + 3] = c.end_s;
    }
    events = all_gather_doubles(world, e);
    offsets = clock_offsets(world);
  }
  if (world.rank() != 0) return {};

  std::vector<RankMetrics> out(size);
  for (int r = 0; r < size; ++r) {
    const double* x = host.data() + n * r;
    RankMetrics& m = out[r];
    m.rank = r;
    size_t i = 0;
    for (int c = 0; c < kNumMemoryCategories; ++c) m.memory_bytes[c] = (int64_t)x[i++];
    m.peak_memory_bytes = (int64_t)x[i++];
    for (int64_t& b : m.resident_bytes) b = (int64_t)x[i++];
    m.hardware_flops = x[i++];
    m.run_seconds = x[i++];
    m.start_seconds = x[i++];
    const size_t n_events = (size_t)x[i++];
    m.comm_events_dropped = (uint64_t)x[i++];
    m.kernel_launches = (long long)x[i++];
    m.kernel_bytes = x[i++];
    m.attention_launches = (long long)x[i++];
    m.routing_copies = (long long)x[i++];
    m.routing_copy_bytes = x[i++];
    for (int64_t& b : m.host_bytes) b = (int64_t)x[i++];
    if (with_trace) {
      const size_t stride = events.size() / size;
      for (size_t k = 0; k < n_events; ++k) {
        const double* e = events.data() + stride * r + k * kEventDoubles;
        m.comm_events.push_back({CommGroup((int)e[0]), CommOp((int)e[1]), e[2], e[3]});
      }
      m.clock_offset_seconds = offsets[r];
    }
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
