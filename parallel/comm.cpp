// parallel/comm.cpp: the backend-independent half of the communication layer: argument
// checks, the byte accounting of every call, handles and their timing, errors.
//
// A call's life: Communicator::X_async records (calls, payload, bus) at once, asks the
// backend to post it, and returns a handle; the first test() or wait() that sees it
// complete records its time (post -> completion) and exposed time (posting + blocked in
// wait()). Payload per operation is defined in measure/comm_stats.h.
#include "parallel/comm.h"
#include <mpi.h>
#include <sched.h>
#include <time.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>

namespace paralab {

const char* backend_name(CommBackend b) { return b == CommBackend::NCCL ? "nccl" : "mpi"; }

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
// The steady clock as seconds, the timebase of CommEvent and of the pipeline's timings.
double steady_seconds(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}
}  // namespace

namespace detail {

struct OpState {
  Pending op;
  CommGroup group;
  CommOp kind;
  Clock::time_point posted;
  double post_s = 0;  // time spent inside the post itself (staging copies included)
  bool done = false;

  // Completion was just observed, after `blocked_s` seconds blocked in wait().
  void finish(double blocked_s) {
    done = true;
    op.reset();  // frees staging buffers and events
    const Clock::time_point now = Clock::now();
    const double time_s = std::chrono::duration<double>(now - posted).count();
    CommStats::instance().record_time(group, kind, time_s, post_s + blocked_s);
    CommStats::instance().record_event({group, kind, steady_seconds(posted), steady_seconds(now)});
  }
};

bool g_oversubscribed = false;
double g_collective_timeout_s = 0;
int g_step = 0;

// With a core per rank, sched_yield keeps the latency of a small all-reduce at ~10 us.
// With more ranks than cores, Linux's CFS rarely gives the core to the rank that has the
// work after a sched_yield: 8 ranks on 2 cores measured ~9 ms per 64-byte all-reduce. A
// 10 us nanosleep (~60 us with the kernel's timer slack) does hand it over: ~0.7 ms.
void wait_until_done(PendingOp& op, const char* group, const char* operation) {
  const timespec nap{0, 10000};
  const Clock::time_point start = Clock::now();
  for (uint64_t tries = 1; !op.test(); ++tries) {
    if (g_oversubscribed)
      nanosleep(&nap, nullptr);
    else
      sched_yield();
    // a peer that died or stopped never arrives: every other rank gets here within the
    // limit, and fail()'s MPI_Abort takes the job down (the stopped rank with it)
    if (g_collective_timeout_s > 0 && tries % 1024 == 0 &&
        seconds_since(start) > g_collective_timeout_s)
      fail("--collective-timeout " + std::to_string((long long)g_collective_timeout_s) +
               " s passed waiting for " + group + " " + operation +
               (g_step > 0 ? " at step " + std::to_string(g_step) : std::string()) +
               ": a rank of the group has died or hangs",
           1);
  }
}

}  // namespace detail

namespace {
// Outstanding asynchronous calls, for comm_progress(). Weak: a waited handle drops out.
std::vector<std::weak_ptr<detail::OpState>>& outstanding() {
  static std::vector<std::weak_ptr<detail::OpState>> v;
  return v;
}
void prune_outstanding() {
  auto& v = outstanding();
  size_t kept = 0;
  for (auto& w : v) {
    auto s = w.lock();
    if (s && !s->done) v[kept++] = w;
  }
  v.resize(kept);
}
}  // namespace

void comm_progress() {
  for (auto& w : outstanding())
    if (auto s = w.lock())
      if (!s->done && s->op->test()) s->finish(0.0);
  prune_outstanding();
}

// ---- CommHandle ------------------------------------------------------------------------

CommHandle& CommHandle::operator=(CommHandle&& o) {
  if (this != &o) {
    wait();
    state_ = std::move(o.state_);
  }
  return *this;
}

CommHandle::~CommHandle() {
  // While an exception unwinds, the peers may never arrive: leave it to fail().
  if (state_ && !state_->done && std::uncaught_exceptions() == 0) wait();
}

void CommHandle::wait() {
  if (!state_ || state_->done) return;
  const Clock::time_point t0 = Clock::now();
  detail::wait_until_done(*state_->op, group_name(state_->group), op_name(state_->kind));
  state_->finish(seconds_since(t0));
}

bool CommHandle::test() {
  if (!state_ || state_->done) return true;
  if (!state_->op->test()) return false;
  state_->finish(0.0);
  return true;
}

// ---- Communicator ---------------------------------------------------------------------

Communicator::Communicator(CommGroup name, std::vector<int> members,
                           std::shared_ptr<detail::Backend> b, CommBackend kind,
                           kernels::Device device)
    : name_(name), members_(std::move(members)), backend_(std::move(b)), kind_(kind),
      device_(device) {
  if (int(members_.size()) != backend_->size())
    fail(std::string("communicator ") + group_name(name_) + ": " +
         std::to_string(members_.size()) + " members but the backend has " +
         std::to_string(backend_->size()));
}

template <typename Post>
CommHandle Communicator::run(CommOp op, uint64_t payload_bytes, Post&& post) {
  CommStats::instance().record_call(name_, op, payload_bytes, size());
  auto s = std::make_shared<detail::OpState>();
  s->group = name_;
  s->kind = op;
  s->posted = Clock::now();
  s->op = post();
  s->post_s = seconds_since(s->posted);
  if (outstanding().size() >= 64) prune_outstanding();
  outstanding().push_back(s);
  return CommHandle(std::move(s));
}

namespace {
void check_reducible(DType t, const char* what) {
  if (t == DType::U8)
    throw std::invalid_argument(std::string(what) + ": raw bytes (U8) cannot be reduced");
}
void check_rank(int r, int n, const char* what) {
  if (r < 0 || r >= n)
    throw std::invalid_argument(std::string(what) + ": rank " + std::to_string(r) +
                                " outside a group of " + std::to_string(n));
}
}  // namespace

CommHandle Communicator::all_reduce_async(void* buf, size_t count, ReduceOp op, DType t) {
  check_reducible(t, "all_reduce");
  return run(CommOp::ALL_REDUCE, count * dtype_size(t),
             [&] { return backend_->all_reduce(buf, count, t, op); });
}

CommHandle Communicator::reduce_scatter_async(const void* in, void* out, size_t shard,
                                              DType t) {
  check_reducible(t, "reduce_scatter");
  return run(CommOp::REDUCE_SCATTER, size() * shard * dtype_size(t),
             [&] { return backend_->reduce_scatter(in, out, shard, t); });
}

CommHandle Communicator::all_gather_async(const void* in, void* out, size_t shard, DType t) {
  return run(CommOp::ALL_GATHER, size() * shard * dtype_size(t),
             [&] { return backend_->all_gather(in, out, shard, t); });
}

CommHandle Communicator::all_to_all_async(const void* in, void* out, size_t per_peer,
                                          DType t) {
  return run(CommOp::ALL_TO_ALL, size() * per_peer * dtype_size(t),
             [&] { return backend_->all_to_all(in, out, per_peer, t); });
}

CommHandle Communicator::all_to_all_v_async(const void* in,
                                            const std::vector<size_t>& send_counts, void* out,
                                            const std::vector<size_t>& recv_counts, DType t) {
  if (int(send_counts.size()) != size() || int(recv_counts.size()) != size())
    throw std::invalid_argument("all_to_all_v: need one send and one receive count per rank");
  size_t sent = 0;
  for (size_t c : send_counts) sent += c;
  return run(CommOp::ALL_TO_ALL_V, sent * dtype_size(t), [&] {
    return backend_->all_to_all_v(in, send_counts, out, recv_counts, t);
  });
}

CommHandle Communicator::broadcast_async(void* buf, size_t count, int root, DType t) {
  check_rank(root, size(), "broadcast root");
  return run(CommOp::BROADCAST, count * dtype_size(t),
             [&] { return backend_->broadcast(buf, count, t, root); });
}

CommHandle Communicator::send_recv_async(const std::vector<P2POp>& ops) {
  uint64_t sent = 0;
  for (const P2POp& p : ops) {
    check_rank(p.peer, size(), "send_recv peer");
    if (p.kind == P2POp::SEND) sent += p.count * dtype_size(p.type);
  }
  return run(CommOp::SEND_RECV, sent, [&] { return backend_->send_recv(ops); });
}

CommHandle Communicator::barrier_async() {
  return run(CommOp::BARRIER, 0, [&] { return backend_->barrier(); });
}

// ---- errors ----------------------------------------------------------------------------

namespace {
bool mpi_running(int* rank, int* size) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return false;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return true;
}
}  // namespace

void fail(const std::string& msg, int code) {
  int rank = 0, size = 1;
  const bool mpi = mpi_running(&rank, &size);
  std::fflush(stdout);
  std::fprintf(stderr, "paralab: error: rank %d: %s\n", rank, msg.c_str());
  std::fflush(stderr);
  // MPI_Abort makes the launcher kill every other rank, wherever it is blocked. The launcher
  // forwards our stderr asynchronously and may tear the job down before it has: give it a
  // moment, so the job ends WITH this rank's message (seen lost on a loaded machine).
  if (mpi && size > 1) {
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, nullptr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::exit(code);
}

void exit_all_ranks(const std::string& msg, int code) {
  int rank = 0, size = 1;
  mpi_running(&rank, &size);
  std::fflush(stdout);
  if (rank == 0) std::fprintf(stderr, "paralab: %s\n", msg.c_str());
  std::fflush(stderr);
  finalize_world();
  std::exit(code);
}

void set_collective_timeout(double seconds) { detail::g_collective_timeout_s = seconds; }
void set_comm_step(int step) { detail::g_step = step; }

int run_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (const FatalError& e) {
    fail(e.what(), e.code);
  } catch (const std::exception& e) {
    fail(e.what(), 1);
  } catch (...) {
    fail("unknown exception", 1);
  }
}

}  // namespace paralab
