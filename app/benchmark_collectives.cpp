// app/benchmark_collectives.cpp: `trainer --benchmark`, the collectives, measured as nccl-tests
// measure them (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md), through parallel/comm.h:
// NCCL on device buffers with --comm nccl, MPI otherwise.
//
// Groups: for each group size n = 2, 4, 8, ... below the world size, and the world size
// itself, the world splits into groups of n consecutive ranks (the last one smaller when n
// does not divide the world), which all run at once, as a run's tp or dp groups do; rank 0
// reports its own group. Consecutive ranks are how a tensor-parallel group is laid out
// (parallel/topology.h); with mpirun's block placement they share a node while
// n <= ranks per node. The tables say which, from the members' hostnames.
//
// Per operation and message size S = 1 KiB x 4^k up to the largest (nccl-tests' -b 1K -f 4):
//   time     two warm-up calls (the first sets up connections), then 5 trials of k calls
//            (k: enough for ~10 ms, the same on every member; 1 trial when one call takes
//            over 0.1 s, 3 over 10 ms), a barrier before each. A trial's time per call is its
//            slowest member's (the collective is done when its last rank is; nccl-tests
//            average the ranks instead), and the best trial counts: a shared machine only
//            adds time.
//            NCCL posts the k calls back to back and waits once (nccl-tests' loop); MPI waits
//            for each, since MPI forbids two operations in flight on one buffer.
//   algbw    S / time, S the payload of measure/comm_stats.h (all-reduce: the buffer;
//            reduce-scatter: its input; all-gather: its output; all-to-all and send/recv: the
//            bytes sent), so that these bytes mean what the communication tables' bytes mean
//   busbw    algbw x bus_factor(op, n): 2(n-1)/n all-reduce; (n-1)/n reduce-scatter,
//            all-gather, all-to-all; 1 send/recv. PERFORMANCE.md: the factor that makes the
//            figure comparable with the link's bandwidth, whatever n.
//   latency  the time of the smallest message.
// send/recv is a ring step: every rank sends S to the next rank of its group and receives S
// from the previous one in one batched call (context parallelism's ring, a pipeline hop).
//
// defines: benchmark_group_sizes, measure_collectives, collective_tables
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include "app/benchmark.h"
// defines: kernels::device_malloc, device_free, synchronize
#include "kernels/ops.h"
#include "measure/clock.h"  // now_seconds

namespace paralab {
namespace {


// The operations, in table order.
const CommOp kOps[] = {CommOp::ALL_REDUCE, CommOp::ALL_GATHER, CommOp::REDUCE_SCATTER,
                       CommOp::ALL_TO_ALL, CommOp::SEND_RECV};

constexpr double kTrialSeconds = 0.01;
constexpr int kTrials = 5;

// One group of consecutive ranks: the communicator measured, and a host MPI one over the
// same ranks for the timing's barriers and max-reductions (device-free: NCCL's own
// communicator takes only device buffers).
struct Group {
  std::unique_ptr<Communicator> comm, host;
  int first = 0, size = 0;  // world ranks first .. first + size - 1
};

Group make_group(const World& w, int n, const Options& o) {
  Group g;
  const int color = w.rank / n;
  g.first = color * n;
  g.size = std::min(w.size, g.first + n) - g.first;
  std::vector<int> members;
  for (int r = g.first; r < g.first + g.size; ++r) members.push_back(r);
  const int key = w.rank - g.first;
  // Every rank makes the same splits in the same order (MPI_Comm_split is collective).
  auto host = detail::make_mpi_backend(color, key, kernels::Device::CPU);
  std::shared_ptr<detail::Backend> measured = host;
  const bool nccl = o.comm == Comm::NCCL;
  if (nccl) {
#ifdef PARALAB_CPU_ONLY
    throw FatalError("--comm nccl needs the CUDA build (this one is CPU_ONLY)", 2);
#else
    measured = detail::make_nccl_backend(host, nullptr);  // on the current compute stream
#endif
  } else if (o.device != kernels::Device::CPU)
    measured = detail::make_mpi_backend(color, key, o.device);  // staged through the host
  g.host = std::make_unique<Communicator>(CommGroup::WORLD, members, host, CommBackend::MPI,
                                          kernels::Device::CPU);
  g.comm = std::make_unique<Communicator>(CommGroup::WORLD, members, measured,
                                          nccl ? CommBackend::NCCL : CommBackend::MPI,
                                          o.device);
  return g;
}

// Seconds per call of `post` on group g (the header's recipe).
double time_collective(Group& g, bool batch, const std::function<CommHandle()>& post) {
  auto slowest = [&](double s) {
    float v = static_cast<float>(s);
    g.host->all_reduce(&v, 1, ReduceOp::MAX);
    return static_cast<double>(v);
  };
  auto run = [&](int calls) {
    std::vector<CommHandle> pending;
    for (int i = 0; i < calls; ++i) {
      if (batch) pending.push_back(post());
      else post().wait();
    }
    for (CommHandle& h : pending) h.wait();
  };
  g.host->barrier();
  run(1);
  g.host->barrier();
  double t0 = now_seconds();
  run(1);
  const double warm = std::max(slowest(now_seconds() - t0), 1e-7);
  const int calls = static_cast<int>(std::clamp(std::ceil(kTrialSeconds / warm), 1.0, 1000.0));
  const int trials = warm > 0.1 ? 1 : warm > kTrialSeconds ? 3 : kTrials;
  double best = std::numeric_limits<double>::infinity();
  for (int t = 0; t < trials; ++t) {
    g.host->barrier();
    t0 = now_seconds();
    run(calls);
    best = std::min(best, slowest((now_seconds() - t0) / calls));
  }
  return best;
}

// The payload of `op` for a message of `bytes` on n ranks, and the elements it moves per
// call argument (count; shard or per-peer block for the sharded ops: bytes / n, rounded down).
struct Message {
  size_t count = 0;     // the count argument of the call
  double payload = 0;   // bytes, comm_stats.h's convention
};
Message message(CommOp op, size_t bytes, int n) {
  const size_t elems = bytes / sizeof(float);
  switch (op) {
    case CommOp::ALL_GATHER:
    case CommOp::REDUCE_SCATTER:
    case CommOp::ALL_TO_ALL: {
      const size_t shard = std::max<size_t>(1, elems / n);
      return {shard, double(shard) * n * sizeof(float)};
    }
    default:
      return {elems, double(elems) * sizeof(float)};
  }
}

std::vector<CollectiveRow> measure_group_size(const World& w, const Options& o, int n,
                                              const std::vector<std::string>& hosts,
                                              size_t max_bytes) {
  Group g = make_group(w, n, o);
  const int me = g.comm->rank(), size = g.size;
  const int next = (me + 1) % size, prev = (me + size - 1) % size;
  const kernels::Device d = o.device;
  const size_t alloc = std::max<size_t>(max_bytes, 1024) + 64 * sizeof(float);
  void* send = kernels::device_malloc(d, alloc);
  void* recv = kernels::device_malloc(d, alloc);
  bool in_node = true;
  for (int r = g.first; r < g.first + g.size; ++r) in_node = in_node && hosts[r] == hosts[g.first];
  const bool batch = o.comm == Comm::NCCL;

  std::vector<CollectiveRow> rows;
  for (CommOp op : kOps) {
    for (size_t bytes = 1024; bytes <= std::max<size_t>(max_bytes, 1024); bytes *= 4) {
      const Message m = message(op, bytes, size);
      Communicator& c = *g.comm;
      std::function<CommHandle()> post;
      switch (op) {
        case CommOp::ALL_REDUCE:
          post = [&] { return c.all_reduce_async(recv, m.count); };
          break;
        case CommOp::ALL_GATHER:
          post = [&] { return c.all_gather_async(send, recv, m.count); };
          break;
        case CommOp::REDUCE_SCATTER:
          post = [&] { return c.reduce_scatter_async(send, recv, m.count); };
          break;
        case CommOp::ALL_TO_ALL:
          post = [&] { return c.all_to_all_async(send, recv, m.count); };
          break;
        default:
          post = [&] {
            return c.send_recv_async({P2POp::send(send, m.count, next),
                                      P2POp::recv(recv, m.count, prev)});
          };
      }
      const double s = time_collective(g, batch, post);
      CollectiveRow row;
      row.op = op;
      row.group_size = size;
      row.in_node = in_node;
      row.bytes = m.payload;
      row.time_us = s * 1e6;
      row.algbw_gbs = m.payload / s / 1e9;
      row.bus_factor = bus_factor(op, size);
      row.busbw_gbs = row.algbw_gbs * row.bus_factor;
      rows.push_back(row);
    }
  }
  kernels::synchronize(d);
  kernels::device_free(d, send);
  kernels::device_free(d, recv);
  return rows;
}

// "1 KiB", "64 MiB"
std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1048576) std::snprintf(buf, sizeof buf, "%.0f MiB", b / 1048576);
  else std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024);
  return buf;
}

}  // namespace

std::vector<int> benchmark_group_sizes(int world) {
  std::vector<int> sizes;
  for (int n = 2; n < world; n *= 2) sizes.push_back(n);
  if (world > 1) sizes.push_back(world);
  return sizes;
}

std::vector<CollectiveRow> measure_collectives(const Options& o, const World& w,
                                               const std::vector<std::string>& hosts,
                                               size_t max_bytes) {
  std::vector<CollectiveRow> rows;
  for (int n : benchmark_group_sizes(w.size)) {
    const std::vector<CollectiveRow> r = measure_group_size(w, o, n, hosts, max_bytes);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return rows;
}

std::string collective_tables(const std::vector<CollectiveRow>& rows) {
  std::string out;
  char line[160];
  for (size_t i = 0; i < rows.size();) {
    const CollectiveRow& head = rows[i];
    std::snprintf(line, sizeof line, "%s, group of %d ranks (0-%d, %s)\n", op_name(head.op),
                  head.group_size, head.group_size - 1,
                  head.in_node ? "one node" : "across nodes");
    out += line;
    std::snprintf(line, sizeof line, "  %10s %8s %11s %11s %11s %12s\n", "size (B)", "size",
                  "count", "time (us)", "algbw GB/s", "busbw GB/s");
    out += line;
    for (; i < rows.size() && rows[i].op == head.op && rows[i].group_size == head.group_size;
         ++i) {
      const CollectiveRow& r = rows[i];
      std::snprintf(line, sizeof line, "  %10.0f %8s %11.0f %11.2f %11.3f %12.3f\n", r.bytes,
                    human_bytes(r.bytes).c_str(), r.bytes / sizeof(float), r.time_us,
                    r.algbw_gbs, r.busbw_gbs);
      out += line;
    }
    std::snprintf(line, sizeof line, "  bus factor %.3f; latency (smallest message) %.2f us\n\n",
                  head.bus_factor, head.time_us);
    out += line;
  }
  return out;
}

}  // namespace paralab
