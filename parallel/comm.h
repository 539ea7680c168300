// parallel/comm.h: one communication interface, two backends, every byte counted.
//
// The idea: the parallel code calls collectives on a Communicator (one per process group,
// made by parallel/topology) and never sees MPI or NCCL. Behind it:
//   MPI  (parallel/comm_mpi.cpp)  host buffers. With --device cuda the data is staged
//        through host copies (kernels::memcpy_to_host/from_host), so a single-GPU machine
//        can run several ranks. Every operation is nonblocking MPI (MPI_Iallreduce, ...)
//        and waits with MPI_Testall + sched_yield (a short nanosleep when the node has
//        more ranks than cores), never a bare blocking wait: tests run 8 ranks on 2
//        cores, where MPICH's busy polling starves the ranks doing the work.
//        Nonblocking collectives only progress inside MPI calls, so code that wants
//        overlap calls comm_progress() now and then (e.g. between layers).
//   NCCL (parallel/comm_nccl.cpp) device buffers, one CUDA stream per communicator, the
//        ncclUniqueId broadcast over MPI; batched send/recv inside ncclGroupStart/End.
//        Each operation first waits (on the GPU) for the compute stream's earlier work
//        (kernels::cuda_current_stream() unless the topology is given another).
//
// Every call is recorded in CommStats (measure/comm_stats.h) under the group's name:
// calls, payload bytes, bus bytes, time, exposed time. Payload S is the collective's full
// buffer per rank (reduce-scatter: its input; all-gather: its output; send/recv and
// all-to-all: the bytes sent); bus = S x 2(n-1)/n (all-reduce), (n-1)/n (reduce-scatter,
// all-gather, all-to-all), 1 (broadcast, send/recv), as nccl-tests count them.
//
// Rules shared with NCCL: every member of a group posts the group's collectives in the
// same order; send/recv between two ranks match in posting order (there are no tags).
// Buffers must stay untouched until the operation's handle has been waited for.
//
// Errors: fail() ends every rank with one message (MPI_Abort), never a hang.
//
// defines: CommBackend, DType, comm_type, ReduceOp, P2POp, CommHandle, Communicator,
//          comm_progress, World, init_world, finalize_world, first_rank_where, FatalError, fail,
//          exit_all_ranks, run_main
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>
#include "measure/comm_stats.h"
#include "kernels/common.h"

namespace paralab {

enum class CommBackend { MPI, NCCL };
// U8 moves raw bytes (no reductions). BF16 (kernels::bf16, --bf16 parameters and
// gradients) and F16 (kernels::fp16, --fp16's) reduce as widen to fp32, op, round to nearest
// even: NCCL's ncclBfloat16 and ncclFloat16, and user-defined MPI_Ops (MPI has no 16-bit
// float type).
enum class DType { F32, I32, U8, BF16, F16 };
enum class ReduceOp { SUM, MAX };  // MAX: the vocab-parallel loss's row maximum

inline size_t dtype_size(DType t) {
  return t == DType::U8 ? 1 : t == DType::BF16 || t == DType::F16 ? 2 : 4;
}
// The DType of a storage type T: float, kernels::bf16 or kernels::fp16.
template <typename T>
DType comm_type() {
  return std::is_same<T, kernels::bf16>::value   ? DType::BF16
         : std::is_same<T, kernels::fp16>::value ? DType::F16
                                                 : DType::F32;
}
// Calls f with a value of the storage type t names, float (F32), kernels::bf16 (BF16) or
// kernels::fp16 (F16): code on the model's parameters, gradients or activations written once
// for the three (`using T = decltype(x)` inside f).
template <class F>
decltype(auto) with_storage(DType t, F&& f) {
  switch (t) {
    case DType::BF16: return f(kernels::bf16{});
    case DType::F16: return f(kernels::fp16{});
    default: return f(0.0f);
  }
}
const char* backend_name(CommBackend b);

// One send or receive of a batched send_recv; `peer` is a rank *in the group*.
struct P2POp {
  enum Kind { SEND, RECV } kind;
  void* buf;  // a SEND only reads it
  size_t count;
  int peer;
  DType type = DType::F32;
  static P2POp send(const void* buf, size_t count, int peer, DType t = DType::F32) {
    return P2POp{SEND, const_cast<void*>(buf), count, peer, t};
  }
  static P2POp recv(void* buf, size_t count, int peer, DType t = DType::F32) {
    return P2POp{RECV, buf, count, peer, t};
  }
};

namespace detail {
// A posted operation of a backend. test() returns true once it has completed (and, for
// staged MPI, once the results are back in the caller's buffers); it never blocks.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual bool test() = 0;
};
using Pending = std::unique_ptr<PendingOp>;

// What a backend implements. Counts are elements of `t`; ranks are group ranks.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Pending all_reduce(void* buf, size_t count, DType t, ReduceOp op) = 0;
  virtual Pending reduce_scatter(const void* in, void* out, size_t shard, DType t) = 0;
  virtual Pending all_gather(const void* in, void* out, size_t shard, DType t) = 0;
  virtual Pending all_to_all(const void* in, void* out, size_t per_peer, DType t) = 0;
  virtual Pending all_to_all_v(const void* in, const std::vector<size_t>& send_counts,
                               void* out, const std::vector<size_t>& recv_counts,
                               DType t) = 0;
  virtual Pending broadcast(void* buf, size_t count, DType t, int root) = 0;
  virtual Pending send_recv(const std::vector<P2POp>& ops) = 0;
  virtual Pending barrier() = 0;
};

// comm_mpi.cpp: split the world by `color` (ordered by `key`) into an MPI backend whose
// buffers live on `device` (CUDA buffers are staged through the host).
std::shared_ptr<Backend> make_mpi_backend(int color, int key, kernels::Device device);
// comm_nccl.cpp: an NCCL communicator over the ranks of `bootstrap` (an MPI backend of the
// same group, used to broadcast the unique id and for barriers).
std::shared_ptr<Backend> make_nccl_backend(std::shared_ptr<Backend> bootstrap,
                                           void* compute_stream);
// Loop on `op.test()`, giving the core away between tries: sched_yield, or a 10 us
// nanosleep when g_oversubscribed (more ranks than cores on the node; set by init_world).
// The watchdog: past g_collective_timeout_s seconds (0: never) it ends the job with fail(),
// naming `group` and `operation` (static strings: no allocation on this path) and g_step.
void wait_until_done(PendingOp& op, const char* group, const char* operation);
extern bool g_oversubscribed;
extern double g_collective_timeout_s;  // --collective-timeout
extern int g_step;                     // the training step in flight, for that message
struct OpState;  // comm.cpp: a posted call and its timing
}  // namespace detail

// The handle of an asynchronous call. wait() blocks (yielding the core) until the call is
// complete; test() only checks. Waiting twice is fine; an empty handle is done. A handle
// destroyed before completion waits in its destructor (except while an exception unwinds).
class CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::shared_ptr<detail::OpState> s) : state_(std::move(s)) {}
  CommHandle(CommHandle&&) = default;
  CommHandle& operator=(CommHandle&& o);
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ~CommHandle();
  void wait();
  bool test();

 private:
  std::shared_ptr<detail::OpState> state_;
};

// Test every outstanding asynchronous call once (lets MPI progress them during compute).
void comm_progress();

// A process group. Buffer arguments are on `device()`; counts are elements of `t`.
class Communicator {
 public:
  Communicator(CommGroup name, std::vector<int> members, std::shared_ptr<detail::Backend> b,
               CommBackend kind, kernels::Device device);

  CommGroup name() const { return name_; }
  int rank() const { return backend_->rank(); }  // this rank's index in the group
  int size() const { return backend_->size(); }
  const std::vector<int>& members() const { return members_; }  // world ranks, in order
  CommBackend backend() const { return kind_; }
  kernels::Device device() const { return device_; }

  // In place: buf(count) = op over the group of buf(count).
  CommHandle all_reduce_async(void* buf, size_t count, ReduceOp op = ReduceOp::SUM,
                              DType t = DType::F32);
  // in(size*shard) -> out(shard): out = sum over ranks of in[rank*shard, (rank+1)*shard).
  // In place when out == in + rank*shard.
  CommHandle reduce_scatter_async(const void* in, void* out, size_t shard,
                                  DType t = DType::F32);
  // in(shard) -> out(size*shard), rank r's shard at out + r*shard. In place when
  // in == out + rank*shard.
  CommHandle all_gather_async(const void* in, void* out, size_t shard, DType t = DType::F32);
  // in(size*per_peer) -> out(size*per_peer): block j of in goes to rank j, block i of out
  // came from rank i.
  CommHandle all_to_all_async(const void* in, void* out, size_t per_peer,
                              DType t = DType::F32);
  // The same with per-peer counts; blocks are packed contiguously in peer order.
  CommHandle all_to_all_v_async(const void* in, const std::vector<size_t>& send_counts,
                                void* out, const std::vector<size_t>& recv_counts,
                                DType t = DType::F32);
  CommHandle broadcast_async(void* buf, size_t count, int root, DType t = DType::F32);
  // Every send and receive of `ops` posted together (one call in the stats).
  CommHandle send_recv_async(const std::vector<P2POp>& ops);
  CommHandle barrier_async();

  // Blocking forms: post, then wait.
  void all_reduce(void* buf, size_t count, ReduceOp op = ReduceOp::SUM, DType t = DType::F32) {
    all_reduce_async(buf, count, op, t).wait();
  }
  void reduce_scatter(const void* in, void* out, size_t shard, DType t = DType::F32) {
    reduce_scatter_async(in, out, shard, t).wait();
  }
  void all_gather(const void* in, void* out, size_t shard, DType t = DType::F32) {
    all_gather_async(in, out, shard, t).wait();
  }
  void all_to_all(const void* in, void* out, size_t per_peer, DType t = DType::F32) {
    all_to_all_async(in, out, per_peer, t).wait();
  }
  void all_to_all_v(const void* in, const std::vector<size_t>& send_counts, void* out,
                    const std::vector<size_t>& recv_counts, DType t = DType::F32) {
    all_to_all_v_async(in, send_counts, out, recv_counts, t).wait();
  }
  void broadcast(void* buf, size_t count, int root, DType t = DType::F32) {
    broadcast_async(buf, count, root, t).wait();
  }
  void send_recv(const std::vector<P2POp>& ops) { send_recv_async(ops).wait(); }
  void barrier() { barrier_async().wait(); }

 private:
  template <typename Post>
  CommHandle run(CommOp op, uint64_t payload_bytes, Post&& post);

  CommGroup name_;
  std::vector<int> members_;
  std::shared_ptr<detail::Backend> backend_;
  CommBackend kind_;
  kernels::Device device_;
};

// ---- the world: start-up, shut-down, errors ------------------------------------------

struct World {
  int rank = 0, size = 1;              // in MPI_COMM_WORLD
  int local_rank = 0, local_size = 1;  // on this node
  int blas_threads = 0;                // OpenBLAS threads set per rank (0: left as is)
};
// MPI_Init (works without mpirun: a world of 1), MPI errors returned and turned into
// fail(), and OpenBLAS limited to cores/local_size threads per rank (at least 1) when
// several ranks share the node, unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is set.
World init_world(int& argc, char**& argv);
void finalize_world();
const World& world();
// Every rank calls it (one all-reduce, min, over MPI_COMM_WORLD): the lowest world rank whose
// `mine` is true, -1 when no rank's is. For a check whose answer differs by rank (each rank's
// own GPU): the first refusing rank prints, and every rank exits together.
int first_rank_where(bool mine);

// An error that carries its exit code (2: bad input, notes/design.md).
struct FatalError : std::runtime_error {
  int code;
  explicit FatalError(const std::string& msg, int code_ = 1)
      : std::runtime_error(msg), code(code_) {}
};

// Prints "paralab: error: rank R: msg" to stderr and ends every rank: MPI_Abort(MPI_COMM_WORLD,
// code) when MPI runs with more than one rank, else exit(code).
[[noreturn]] void fail(const std::string& msg, int code = 1);
// For an error that every rank detects identically (a bad flag): rank 0 alone prints
// "paralab: msg", then every rank finalises MPI and exits with `code`. Only call it from
// all ranks, or it hangs in MPI_Finalize; otherwise use fail().
[[noreturn]] void exit_all_ranks(const std::string& msg, int code);
// The watchdog's limit and the step its message names (detail::wait_until_done).
void set_collective_timeout(double seconds);
void set_comm_step(int step);
// Runs main's body; an exception becomes fail(what, code) (FatalError's code, else 1).
int run_main(const std::function<int()>& body);

}  // namespace paralab
