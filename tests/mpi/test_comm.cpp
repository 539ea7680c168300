// tests/mpi/test_comm.cpp: the communication layer under mpirun (tests/mpi/run_mpi_tests.sh).
//
//   mpirun -np N test_comm            every operation on every group of the grids that fit N
//   mpirun -np N test_comm --abort-test   rank 1 throws while the others wait: all must end
//
// Every rank runs every test in the same order (collectives must match), so the checks
// use EXPECT, never ASSERT: a failed check must not make one rank skip a collective.
// Element i of world rank r's data is val(r, i) = 1000 r + i, exact in float for these
// sizes, so every expected result is computed from the layout's member lists.
// Rank 0 prints GoogleTest's report; the other ranks print only their failures; the exit
// status is non-zero on every rank if any rank failed.
//
// With a GPU (CUDA build) the same checks also run on device buffers: MPI staged through
// the host, and NCCL when every local rank has a GPU of its own.
#include <gtest/gtest.h>
#include <cstdio>
#include <cstring>
#include <numeric>
#include "kernels/math.h"  // to_bf16, to_float
#include "kernels/ops.h"
#include "parallel/comm.h"
#include "parallel/topology.h"
#ifndef PARALAB_CPU_ONLY
#include <cuda_runtime.h>
#endif

using namespace paralab;
using kernels::Device;

namespace {

float val(int world_rank, size_t i) { return float(1000 * world_rank + int(i)); }

// A test buffer on `d`, written from and read back into host vectors.
class Buf {
 public:
  Buf(Device d, size_t bytes) : d_(d), bytes_(bytes) {
    if (d == Device::CPU)
      host_.assign(bytes, 0);
    else
      dev_ = kernels::device_malloc(d, bytes ? bytes : 1);
  }
  template <typename T>
  Buf(Device d, const std::vector<T>& v) : Buf(d, v.size() * sizeof(T)) {
    if (d == Device::CPU)
      std::memcpy(host_.data(), v.data(), bytes_);
    else
      kernels::memcpy_from_host(d, dev_, v.data(), bytes_);
  }
  ~Buf() {
    if (dev_) kernels::device_free(d_, dev_);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  char* data() { return d_ == Device::CPU ? host_.data() : static_cast<char*>(dev_); }
  template <typename T = float>
  std::vector<T> read() const {
    std::vector<T> v(bytes_ / sizeof(T));
    if (d_ == Device::CPU)
      std::memcpy(v.data(), host_.data(), bytes_);
    else
      kernels::memcpy_to_host(d_, v.data(), dev_, bytes_);
    return v;
  }

 private:
  Device d_;
  size_t bytes_;
  std::vector<char> host_;
  void* dev_ = nullptr;
};

// The record of (g, op) holds exactly one call of `payload` bytes and `bus` bus bytes.
void expect_recorded(CommGroup g, CommOp op, uint64_t payload, double bus) {
  const CommRecord& r = CommStats::instance().get(g, op);
  EXPECT_EQ(r.calls, 1u) << group_name(g) << " " << op_name(op);
  EXPECT_EQ(r.payload_bytes, payload) << group_name(g) << " " << op_name(op);
  EXPECT_DOUBLE_EQ(r.bus_bytes, bus) << group_name(g) << " " << op_name(op);
  EXPECT_GE(r.exposed_s, 0.0);
  EXPECT_GE(r.time_s, r.exposed_s);
  CommStats::instance().reset();
}

std::vector<float> iota_of(int world_rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = val(world_rank, i);
  return v;
}

// bf16 data: halves in [-5.5, 5.5], so a sum over 8 ranks (at most 88 halves, below bf16's
// 256 exact integers of a unit) is exact in any order and the expected sum needs no model
// of the backend's rounding. A backend that added the raw 16-bit patterns would fail.
float bval(int world_rank, size_t i) { return float(int(7 * world_rank + i) % 23 - 11) * 0.5f; }
std::vector<kernels::bf16> bf16_of(int world_rank, size_t n) {
  std::vector<kernels::bf16> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = kernels::to_bf16(bval(world_rank, i));
  return v;
}
std::vector<float> widen(const std::vector<kernels::bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = kernels::to_float(v[i]);
  return out;
}

// Every operation on one communicator, results and recorded bytes.
void check_group(Topology& topo, CommGroup g, Device d) {
  Communicator& c = topo.group(g);
  const int n = c.size(), me = c.rank(), wr = topo.rank();
  const std::vector<int>& m = c.members();
  SCOPED_TRACE(testing::Message() << "group " << group_name(g) << " size " << n << " rank "
                                  << me << " device " << kernels::device_name(d));
  ASSERT_EQ(m.at(me), wr);
  CommStats::instance().reset();

  {  // all-reduce, sum and max; an odd count
    const size_t cnt = 37;
    Buf b(d, iota_of(wr, cnt));
    c.all_reduce(b.data(), cnt);
    std::vector<float> got = b.read();
    for (size_t i = 0; i < cnt; ++i) {
      float want = 0;
      for (int r : m) want += val(r, i);
      EXPECT_EQ(got[i], want) << "all-reduce sum element " << i;
    }
    expect_recorded(g, CommOp::ALL_REDUCE, cnt * 4, 2.0 * (n - 1) / n * cnt * 4);

    std::vector<float> x(cnt);
    for (size_t i = 0; i < cnt; ++i) x[i] = (i % 2 ? -1.f : 1.f) * val(wr, i);
    Buf bm(d, x);
    c.all_reduce(bm.data(), cnt, ReduceOp::MAX);
    got = bm.read();
    for (size_t i = 0; i < cnt; ++i) {
      float want = -1e30f;
      for (int r : m) want = std::max(want, (i % 2 ? -1.f : 1.f) * val(r, i));
      EXPECT_EQ(got[i], want) << "all-reduce max element " << i;
    }
    expect_recorded(g, CommOp::ALL_REDUCE, cnt * 4, 2.0 * (n - 1) / n * cnt * 4);

    Buf bi(d, std::vector<int32_t>(3, wr + 1));
    c.all_reduce(bi.data(), 3, ReduceOp::SUM, DType::I32);
    int32_t want = 0;
    for (int r : m) want += r + 1;
    for (int32_t v : bi.read<int32_t>()) EXPECT_EQ(v, want) << "int32 all-reduce";
    expect_recorded(g, CommOp::ALL_REDUCE, 12, 2.0 * (n - 1) / n * 12);
  }

  {  // bf16 (DType::BF16, 2-byte elements): all-reduce sum and max, reduce-scatter in place
    const size_t cnt = 19;
    Buf b(d, bf16_of(wr, cnt));
    c.all_reduce(b.data(), cnt, ReduceOp::SUM, DType::BF16);
    std::vector<float> got = widen(b.read<kernels::bf16>());
    for (size_t i = 0; i < cnt; ++i) {
      float want = 0;
      for (int r : m) want += bval(r, i);
      EXPECT_EQ(got[i], want) << "bf16 all-reduce sum element " << i;
    }
    expect_recorded(g, CommOp::ALL_REDUCE, cnt * 2, 2.0 * (n - 1) / n * cnt * 2);

    Buf bm(d, bf16_of(wr, cnt));
    c.all_reduce(bm.data(), cnt, ReduceOp::MAX, DType::BF16);
    got = widen(bm.read<kernels::bf16>());
    for (size_t i = 0; i < cnt; ++i) {
      float want = -1e30f;
      for (int r : m) want = std::max(want, bval(r, i));
      EXPECT_EQ(got[i], want) << "bf16 all-reduce max element " << i;
    }
    CommStats::instance().reset();

    const size_t shard = 3;
    Buf in(d, bf16_of(wr, n * shard));
    c.reduce_scatter(in.data(), in.data() + me * shard * 2, shard, DType::BF16);
    got = widen(in.read<kernels::bf16>());
    for (size_t k = 0; k < shard; ++k) {
      float want = 0;
      for (int r : m) want += bval(r, me * shard + k);
      EXPECT_EQ(got[me * shard + k], want) << "bf16 reduce-scatter element " << k;
    }
    expect_recorded(g, CommOp::REDUCE_SCATTER, n * shard * 2, double(n - 1) / n * n * shard * 2);

    Buf out(d, n * shard * 2);
    c.all_gather(in.data() + me * shard * 2, out.data(), shard, DType::BF16);
    std::vector<float> all = widen(out.read<kernels::bf16>());
    for (size_t k = 0; k < shard; ++k)
      EXPECT_EQ(all[me * shard + k], got[me * shard + k]) << "bf16 all-gather";
    expect_recorded(g, CommOp::ALL_GATHER, n * shard * 2, double(n - 1) / n * n * shard * 2);
  }

  {  // reduce-scatter: separate output, then in place (out = in + me*shard)
    const size_t shard = 5;
    Buf in(d, iota_of(wr, n * shard)), out(d, shard * 4);
    c.reduce_scatter(in.data(), out.data(), shard);
    std::vector<float> got = out.read();
    for (size_t k = 0; k < shard; ++k) {
      float want = 0;
      for (int r : m) want += val(r, me * shard + k);
      EXPECT_EQ(got[k], want) << "reduce-scatter element " << k;
    }
    expect_recorded(g, CommOp::REDUCE_SCATTER, n * shard * 4, double(n - 1) / n * n * shard * 4);

    c.reduce_scatter(in.data(), in.data() + me * shard * 4, shard);
    std::vector<float> all = in.read();
    for (size_t k = 0; k < shard; ++k) EXPECT_EQ(all[me * shard + k], got[k]) << "in place";
    CommStats::instance().reset();
  }

  {  // all-gather: separate output, in place, and raw bytes
    const size_t shard = 3;
    Buf in(d, iota_of(wr, shard)), out(d, n * shard * 4);
    c.all_gather(in.data(), out.data(), shard);
    std::vector<float> got = out.read();
    for (int p = 0; p < n; ++p)
      for (size_t k = 0; k < shard; ++k)
        EXPECT_EQ(got[p * shard + k], val(m[p], k)) << "all-gather from " << p;
    expect_recorded(g, CommOp::ALL_GATHER, n * shard * 4, double(n - 1) / n * n * shard * 4);

    std::vector<float> mine(n * shard, -1.f);
    for (size_t k = 0; k < shard; ++k) mine[me * shard + k] = val(wr, k);
    Buf inplace(d, mine);
    c.all_gather(inplace.data() + me * shard * 4, inplace.data(), shard);
    EXPECT_EQ(inplace.read(), got) << "in-place all-gather";
    CommStats::instance().reset();

    std::vector<uint8_t> bytes = {uint8_t(wr), uint8_t(wr * 7 + 1)};
    Buf bin(d, bytes), bout(d, 2 * n);
    c.all_gather(bin.data(), bout.data(), 2, DType::U8);
    std::vector<uint8_t> gb = bout.read<uint8_t>();
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ(gb[2 * p], uint8_t(m[p]));
      EXPECT_EQ(gb[2 * p + 1], uint8_t(m[p] * 7 + 1));
    }
    expect_recorded(g, CommOp::ALL_GATHER, 2 * n, double(n - 1) / n * 2 * n);
  }

  {  // all-to-all: block p of rank r's input is val(r, 10p + k), meant for rank p
    const size_t per = 4;
    std::vector<float> x(n * per);
    for (int p = 0; p < n; ++p)
      for (size_t k = 0; k < per; ++k) x[p * per + k] = val(wr, 10 * p + k);
    Buf in(d, x), out(d, n * per * 4);
    c.all_to_all(in.data(), out.data(), per);
    std::vector<float> got = out.read();
    for (int p = 0; p < n; ++p)
      for (size_t k = 0; k < per; ++k)
        EXPECT_EQ(got[p * per + k], val(m[p], 10 * me + k)) << "all-to-all from " << p;
    expect_recorded(g, CommOp::ALL_TO_ALL, n * per * 4, double(n - 1) / n * n * per * 4);
  }

  {  // all-to-all-v: rank s sends 1 + (2s + t) % 3 elements to rank t
    auto count = [](int s, int t) { return size_t(1 + (2 * s + t) % 3); };
    std::vector<size_t> sc(n), rc(n);
    std::vector<float> x;
    for (int p = 0; p < n; ++p) {
      sc[p] = count(me, p);
      rc[p] = count(p, me);
      for (size_t k = 0; k < sc[p]; ++k) x.push_back(val(wr, 10 * p + k));
    }
    const size_t recv_total = std::accumulate(rc.begin(), rc.end(), size_t(0));
    Buf in(d, x), out(d, recv_total * 4);
    c.all_to_all_v(in.data(), sc, out.data(), rc);
    std::vector<float> got = out.read();
    size_t at = 0;
    for (int p = 0; p < n; ++p)
      for (size_t k = 0; k < rc[p]; ++k)
        EXPECT_EQ(got[at++], val(m[p], 10 * me + k)) << "all-to-all-v from " << p;
    expect_recorded(g, CommOp::ALL_TO_ALL_V, x.size() * 4, double(n - 1) / n * x.size() * 4);
  }

  {  // broadcast from the last group rank
    const int root = n - 1;
    const size_t cnt = 11;
    Buf b(d, me == root ? iota_of(wr, cnt) : std::vector<float>(cnt, -1.f));
    c.broadcast(b.data(), cnt, root);
    EXPECT_EQ(b.read(), iota_of(m[root], cnt)) << "broadcast";
    expect_recorded(g, CommOp::BROADCAST, cnt * 4, cnt * 4.0);
  }

  {  // send/recv both ways round the ring, posted as one batch
    const size_t cnt = 6;
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    Buf a(d, iota_of(wr, cnt)), fwd(d, cnt * 4), bwd(d, cnt * 4);
    c.send_recv({P2POp::send(a.data(), cnt, next), P2POp::recv(fwd.data(), cnt, prev),
                 P2POp::send(a.data(), cnt, prev), P2POp::recv(bwd.data(), cnt, next)});
    EXPECT_EQ(fwd.read(), iota_of(m[prev], cnt)) << "ring forward";
    EXPECT_EQ(bwd.read(), iota_of(m[next], cnt)) << "ring backward";
    expect_recorded(g, CommOp::SEND_RECV, 2 * cnt * 4, 2 * cnt * 4.0);
  }

  c.barrier();
  expect_recorded(g, CommOp::BARRIER, 0, 0.0);

  {  // asynchronous: three calls in flight, polled, then waited out of order
    const size_t cnt = 9;
    Buf x(d, iota_of(wr, cnt)), y(d, iota_of(wr, cnt)), z(d, n * cnt * 4);
    CommHandle h1 = c.all_reduce_async(x.data(), cnt);
    CommHandle h2 = c.all_gather_async(y.data(), z.data(), cnt);
    CommHandle h3 = c.all_reduce_async(y.data(), cnt, ReduceOp::MAX);
    while (!h1.test()) comm_progress();
    h3.wait();
    h2.wait();
    h2.wait();
    h1.wait();
    std::vector<float> gx = x.read(), gy = y.read(), gz = z.read();
    for (size_t i = 0; i < cnt; ++i) {
      float sum = 0, mx = -1e30f;
      for (int r : m) sum += val(r, i), mx = std::max(mx, val(r, i));
      EXPECT_EQ(gx[i], sum) << "async all-reduce";
      EXPECT_EQ(gy[i], mx) << "async max after gather";
      for (int p = 0; p < n; ++p) EXPECT_EQ(gz[p * cnt + i], val(m[p], i)) << "async gather";
    }
    EXPECT_EQ(CommStats::instance().get(g, CommOp::ALL_REDUCE).calls, 2u);
    EXPECT_EQ(CommStats::instance().get(g, CommOp::ALL_GATHER).calls, 1u);
    // a handle waits when it is replaced or goes out of scope
    {
      CommHandle h = c.barrier_async();
      h = c.all_reduce_async(x.data(), cnt);
    }
    for (size_t i = 0; i < cnt; ++i) EXPECT_EQ(x.read()[i], gx[i] * n) << "scoped wait";
    CommStats::instance().reset();
  }
}

struct Case {
  int tp, cp, pp, ep, etp;  // etp 0: = tp
};

// The grids that fit `world` ranks, chosen so every group kind has size > 1 somewhere
// (etp apart from tp too): the dense grid needs world % (tp*cp*pp) == 0, the expert grid
// (world / pp) % (etp*ep) == 0.
std::vector<GridSpec> grids_for(int world) {
  const Case cases[] = {{1, 1, 1, 1, 0}, {2, 1, 1, 1, 0}, {1, 2, 1, 2, 0}, {1, 1, 2, 1, 0},
                        {2, 1, 2, 1, 0}, {2, 2, 1, 2, 0}, {1, 1, 2, 4, 0}, {2, 1, 4, 1, 0},
                        {1, 2, 2, 2, 0}, {2, 1, 1, 4, 1}, {1, 1, 1, 2, 2}, {2, 2, 1, 4, 1}};
  std::vector<GridSpec> out;
  for (const Case& k : cases) {
    const int etp = k.etp ? k.etp : k.tp;
    if (world % (k.tp * k.cp * k.pp) || (world / k.pp) % (etp * k.ep)) continue;
    GridSpec s;
    s.world = world; s.tp = k.tp; s.cp = k.cp; s.pp = k.pp; s.ep = k.ep; s.etp = k.etp;
    out.push_back(s);
  }
  return out;
}

void check_all(CommBackend backend, Device d) {
  for (const GridSpec& s : grids_for(world().size)) {
    SCOPED_TRACE(testing::Message() << backend_name(backend) << " tp " << s.tp << " cp "
                                    << s.cp << " pp " << s.pp << " ep " << s.ep
                                    << " etp " << s.etp);
    Topology topo(s, backend, d);
    for (int g = 0; g < kNumCommGroups; ++g) check_group(topo, CommGroup(g), d);
    // pipeline neighbours: the activation of the previous stage arrives from pp_prev()
    Communicator& pp = topo.pp();
    Buf send(d, iota_of(topo.rank(), 4)), recv(d, 16);
    pp.send_recv({P2POp::send(send.data(), 4, topo.pp_next()),
                  P2POp::recv(recv.data(), 4, topo.pp_prev())});
    EXPECT_EQ(recv.read(), iota_of(topo.layout().pp_prev_rank(topo.rank()), 4));
    CommStats::instance().reset();
  }
}

bool gpu_usable() {
#ifndef PARALAB_CPU_ONLY
  return kernels::cuda_device_count() > 0;
#else
  return false;
#endif
}

}  // namespace

TEST(Comm, MpiHostBuffers) { check_all(CommBackend::MPI, Device::CPU); }

TEST(Comm, MpiStagedDeviceBuffers) {
  if (!gpu_usable()) GTEST_SKIP() << "no GPU";
  check_all(CommBackend::MPI, Device::CUDA);
}

TEST(Comm, NcclDeviceBuffers) {
  if (!gpu_usable() || world().local_size > kernels::cuda_device_count())
    GTEST_SKIP() << "NCCL needs one GPU per local rank";
  check_all(CommBackend::NCCL, Device::CUDA);
}

TEST(CommStats, SerialiseTableJson) {
  CommStats s;
  s.record_call(CommGroup::TP, CommOp::ALL_REDUCE, 1 << 20, 4);
  s.record_time(CommGroup::TP, CommOp::ALL_REDUCE, 0.003, 0.001);
  s.record_call(CommGroup::DP, CommOp::REDUCE_SCATTER, 3 << 20, 2);
  const CommStats t = CommStats::from_vector(s.to_vector());
  EXPECT_EQ(t.to_vector(), s.to_vector());
  EXPECT_EQ(t.get(CommGroup::TP, CommOp::ALL_REDUCE).payload_bytes, uint64_t(1) << 20);
  EXPECT_DOUBLE_EQ(t.get(CommGroup::TP, CommOp::ALL_REDUCE).bus_bytes, 1.5 * (1 << 20));
  EXPECT_DOUBLE_EQ(t.get(CommGroup::DP, CommOp::REDUCE_SCATTER).bus_bytes, 1.5 * (1 << 20));
  EXPECT_EQ(t.total().calls, 2u);
  const std::string table = t.table();
  EXPECT_NE(table.find("tp         all-reduce"), std::string::npos) << table;
  EXPECT_NE(table.find("1.50"), std::string::npos) << table;
  const std::string json = t.json();
  EXPECT_EQ(json.front(), '[');
  EXPECT_NE(json.find("{\"group\":\"dp\",\"op\":\"reduce-scatter\",\"calls\":1,"
                      "\"payload_bytes\":3145728"), std::string::npos) << json;
  CommStats sum = t;
  sum.add(t);
  EXPECT_EQ(sum.get(CommGroup::TP, CommOp::ALL_REDUCE).calls, 2u);
  sum.reset();
  EXPECT_EQ(sum.total().calls, 0u);
  EXPECT_THROW(CommStats::from_vector({1.0}), std::invalid_argument);
}

namespace {
// Rank 1 fails while every other rank waits in a collective that can never complete.
int abort_test() {
  GridSpec s;
  s.world = world().size;
  Topology topo(s, CommBackend::MPI, Device::CPU);
  topo.world().barrier();
  if (topo.rank() == 1) throw FatalError("deliberate failure on one rank", 3);
  float x = 1;
  topo.world().all_reduce(&x, 1);
  return 0;
}

// On ranks other than 0: print failed assertions only, prefixed with the rank.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  const World w = init_world(argc, argv);
#ifndef PARALAB_CPU_ONLY
  if (gpu_usable()) cudaSetDevice(w.local_rank % kernels::cuda_device_count());
#endif
  if (argc > 1 && std::string(argv[1]) == "--abort-test") {
    run_main(abort_test);
    finalize_world();
    return 0;
  }
  testing::InitGoogleTest(&argc, argv);
  if (w.rank != 0) {
    testing::TestEventListeners& l = testing::UnitTest::GetInstance()->listeners();
    delete l.Release(l.default_result_printer());
    l.Append(new FailurePrinter(w.rank));
  }
  int failed = 0;
  run_main([&] {
    failed = RUN_ALL_TESTS() != 0;
    GridSpec s;
    s.world = w.size;
    Topology topo(s, CommBackend::MPI, Device::CPU);
    topo.world().all_reduce(&failed, 1, ReduceOp::MAX, DType::I32);
    return 0;
  });
  if (w.rank == 0)
    std::printf("test_comm: %d ranks: %s\n", w.size, failed ? "FAILED" : "passed");
  finalize_world();
  return failed;
}
