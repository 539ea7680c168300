// parallel/comm_mpi.cpp: the MPI backend (MPICH), and the world's start-up.
//
// The pattern of every operation: post the nonblocking MPI call (MPI_Iallreduce,
// MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ialltoall(v), MPI_Ibcast, MPI_Isend/Irecv,
// MPI_Ibarrier) and return an MpiOp; waiting is MPI_Testall + sched_yield (nanosleep when
// the node is oversubscribed) in a loop (comm.cpp), so a rank that waits gives its core to
// the rank that has work. Eight ranks on two cores would otherwise spin in MPICH's
// progress engine against each other.
//
// Host staging: MPI reads and writes host memory. When the buffers are on a GPU
// (--comm mpi --device cuda), the inputs are copied to host vectors when the call is
// posted and the outputs copied back when completion is observed. The same copy-back
// handles outputs that alias inputs in a way MPI forbids (in-place reduce-scatter at
// out = in + rank*shard). The host vectors, and the count arrays of MPI_Ialltoallv, live
// in the MpiOp because MPI reads them until the operation completes.
//
// bf16 (--bf16): 2-byte elements with user-defined reduction operations (mpi_op below).
//
// Cost on the wire is MPICH's choice of algorithm; the byte accounting (comm.cpp) records
// the nccl-tests formulas, not what MPICH did.
#include <cblas.h>  // openblas_set_num_threads
#include <mpi.h>
#include <sched.h>
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include "kernels/math.h"  // to_float, round_to: the 16-bit reduction operations
#include "kernels/ops.h"   // memcpy_to_host, memcpy_from_host, synchronize
#include "parallel/comm.h"

namespace paralab {

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(std::string(what) + " failed: " + std::string(text, len));
}

// bf16 and fp16 travel as 2-byte elements (MPI_UINT16_T: MPI has no 16-bit float type);
// moving them is moving bits, and reducing them takes the user-defined operations below.
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::I32: return MPI_INT;
    case DType::BF16: case DType::F16: return MPI_UINT16_T;
    default: return MPI_BYTE;
  }
}

// 16-bit reductions (H: kernels::bf16 or kernels::fp16): inout[i] = round(widen(in[i]) op
// widen(inout[i])), as NCCL's ncclBfloat16 and ncclFloat16 do. The rounded sum is symmetric in
// its two arguments, so the operations are declared commutative; like fp32 addition they are
// not associative, and the result depends on MPICH's reduction order, as it does for MPI_SUM on
// floats.
template <class H>
void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = kernels::round_to<H>(kernels::to_float(a[i]) + kernels::to_float(b[i]));
}
template <class H>
void half_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i)
    if (kernels::to_float(a[i]) > kernels::to_float(b[i])) b[i] = a[i];
}
// The sum and max of H, created once, at first use (after MPI_Init); they live until
// MPI_Finalize frees them.
template <class H>
MPI_Op half_op(ReduceOp op) {
  static MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;
  if (sum == MPI_OP_NULL) {
    check(MPI_Op_create(half_sum<H>, 1, &sum), "MPI_Op_create");
    check(MPI_Op_create(half_max<H>, 1, &max), "MPI_Op_create");
  }
  return op == ReduceOp::MAX ? max : sum;
}

// The MPI_Op of a reduction on `t`. A user-defined MPI_Op is valid in every reduction
// collective, nonblocking ones included: MPI_Iallreduce and MPI_Ireduce_scatter_block accept
// it exactly as they accept MPI_SUM.
MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::BF16) return half_op<kernels::bf16>(op);
  if (t == DType::F16) return half_op<kernels::fp16>(op);
  return op == ReduceOp::MAX ? MPI_MAX : MPI_SUM;
}

// MPI counts are int: a larger message would need derived datatypes; say so instead.
int as_count(size_t n, const char* what) {
  if (n > size_t(INT_MAX))
    fail(std::string(what) + ": " + std::to_string(n) + " elements exceed MPI's int count");
  return int(n);
}

bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return na && nb && x < y + nb && y < x + na;
}

class MpiOp : public detail::PendingOp {
 public:
  explicit MpiOp(kernels::Device d) : device_(d) {}

  std::vector<MPI_Request> reqs;
  std::vector<int> counts[4];  // MPI_Ialltoallv's send/recv counts and displacements

  MPI_Request* request() {
    reqs.push_back(MPI_REQUEST_NULL);
    return &reqs.back();
  }
  // The pointer MPI should read `bytes` from: the caller's, or a host copy of it.
  const void* input(const void* src, size_t bytes) {
    if (device_ == kernels::Device::CPU) return src;
    char* h = host(bytes);
    kernels::synchronize(device_);  // the producing kernels must have finished
    kernels::memcpy_to_host(device_, h, src, bytes);
    return h;
  }
  // The pointer MPI should write `bytes` to: the caller's, or a host vector copied to
  // dst on completion (always when `stage`, e.g. because dst aliases an input).
  void* output(void* dst, size_t bytes, bool stage = false) {
    if (device_ == kernels::Device::CPU && !stage) return dst;
    char* h = host(bytes);
    copy_back_.push_back({dst, h, bytes});
    return h;
  }
  // Read and written in place (all-reduce, broadcast, in-place all-gather).
  void* inout(void* buf, size_t bytes) {
    if (device_ == kernels::Device::CPU) return buf;
    void* h = const_cast<void*>(input(buf, bytes));
    copy_back_.push_back({buf, static_cast<char*>(h), bytes});
    return h;
  }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    check(MPI_Testall(int(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE),
          "MPI_Testall");
    if (!flag) return false;
    for (const CopyBack& c : copy_back_) {
      if (device_ == kernels::Device::CPU)
        std::memcpy(c.dst, c.src, c.bytes);
      else
        kernels::memcpy_from_host(device_, c.dst, c.src, c.bytes);
    }
    // The host vectors are freed with this op: the copies must have read them.
    if (device_ != kernels::Device::CPU && !copy_back_.empty()) kernels::synchronize(device_);
    done_ = true;
    return true;
  }

 private:
  struct CopyBack {
    void* dst;
    const char* src;
    size_t bytes;
  };
  char* host(size_t bytes) {
    staging_.emplace_back(new char[std::max<size_t>(bytes, 1)]);
    return staging_.back().get();
  }
  kernels::Device device_;
  bool done_ = false;
  std::vector<std::unique_ptr<char[]>> staging_;
  std::vector<CopyBack> copy_back_;
};

class MpiBackend : public detail::Backend {
 public:
  MpiBackend(MPI_Comm comm, kernels::Device device) : comm_(comm), device_(device) {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiBackend() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  detail::Pending all_reduce(void* buf, size_t count, DType t, ReduceOp op) override {
    auto o = std::make_unique<MpiOp>(device_);
    void* b = o->inout(buf, count * dtype_size(t));
    check(MPI_Iallreduce(MPI_IN_PLACE, b, as_count(count, "all_reduce"), mpi_type(t),
                         mpi_op(op, t), comm_, o->request()),
          "MPI_Iallreduce");
    return o;
  }

  detail::Pending reduce_scatter(const void* in, void* out, size_t shard, DType t) override {
    auto o = std::make_unique<MpiOp>(device_);
    const size_t es = dtype_size(t), in_bytes = size_ * shard * es;
    const void* i = o->input(in, in_bytes);
    void* r = o->output(out, shard * es, overlaps(in, in_bytes, out, shard * es));
    check(MPI_Ireduce_scatter_block(i, r, as_count(shard, "reduce_scatter"), mpi_type(t),
                                    mpi_op(ReduceOp::SUM, t), comm_, o->request()),
          "MPI_Ireduce_scatter_block");
    return o;
  }

  detail::Pending all_gather(const void* in, void* out, size_t shard, DType t) override {
    auto o = std::make_unique<MpiOp>(device_);
    const size_t es = dtype_size(t), out_bytes = size_ * shard * es;
    const int n = as_count(shard, "all_gather");
    if (in == static_cast<const char*>(out) + rank_ * shard * es) {
      // In place: this rank's shard already sits at its slot of the output.
      void* b = o->inout(out, out_bytes);
      check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, n, mpi_type(t), comm_,
                           o->request()),
            "MPI_Iallgather");
    } else {
      const void* i = o->input(in, shard * es);
      void* r = o->output(out, out_bytes, overlaps(in, shard * es, out, out_bytes));
      check(MPI_Iallgather(i, n, mpi_type(t), r, n, mpi_type(t), comm_, o->request()),
            "MPI_Iallgather");
    }
    return o;
  }

  detail::Pending all_to_all(const void* in, void* out, size_t per_peer, DType t) override {
    auto o = std::make_unique<MpiOp>(device_);
    const size_t bytes = size_ * per_peer * dtype_size(t);
    const void* i = o->input(in, bytes);
    void* r = o->output(out, bytes, overlaps(in, bytes, out, bytes));
    const int n = as_count(per_peer, "all_to_all");
    check(MPI_Ialltoall(i, n, mpi_type(t), r, n, mpi_type(t), comm_, o->request()),
          "MPI_Ialltoall");
    return o;
  }

  detail::Pending all_to_all_v(const void* in, const std::vector<size_t>& send_counts,
                               void* out, const std::vector<size_t>& recv_counts,
                               DType t) override {
    auto o = std::make_unique<MpiOp>(device_);
    std::vector<int>&sc = o->counts[0], &sd = o->counts[1], &rc = o->counts[2],
               &rd = o->counts[3];
    size_t s_total = 0, r_total = 0;
    for (int p = 0; p < size_; ++p) {
      sd.push_back(as_count(s_total, "all_to_all_v"));
      rd.push_back(as_count(r_total, "all_to_all_v"));
      sc.push_back(as_count(send_counts[p], "all_to_all_v"));
      rc.push_back(as_count(recv_counts[p], "all_to_all_v"));
      s_total += send_counts[p];
      r_total += recv_counts[p];
    }
    const size_t es = dtype_size(t);
    const void* i = o->input(in, s_total * es);
    void* r = o->output(out, r_total * es, overlaps(in, s_total * es, out, r_total * es));
    check(MPI_Ialltoallv(i, sc.data(), sd.data(), mpi_type(t), r, rc.data(), rd.data(),
                         mpi_type(t), comm_, o->request()),
          "MPI_Ialltoallv");
    return o;
  }

  detail::Pending broadcast(void* buf, size_t count, DType t, int root) override {
    auto o = std::make_unique<MpiOp>(device_);
    void* b = o->inout(buf, count * dtype_size(t));
    check(MPI_Ibcast(b, as_count(count, "broadcast"), mpi_type(t), root, comm_, o->request()),
          "MPI_Ibcast");
    return o;
  }

  detail::Pending send_recv(const std::vector<P2POp>& ops) override {
    auto o = std::make_unique<MpiOp>(device_);
    // One tag: messages between two ranks match in posting order, as NCCL's do.
    for (const P2POp& p : ops) {
      const size_t bytes = p.count * dtype_size(p.type);
      const int n = as_count(p.count, "send_recv");
      if (p.kind == P2POp::SEND)
        check(MPI_Isend(o->input(p.buf, bytes), n, mpi_type(p.type), p.peer, 0, comm_,
                        o->request()),
              "MPI_Isend");
      else
        check(MPI_Irecv(o->output(p.buf, bytes), n, mpi_type(p.type), p.peer, 0, comm_,
                        o->request()),
              "MPI_Irecv");
    }
    return o;
  }

  detail::Pending barrier() override {
    auto o = std::make_unique<MpiOp>(device_);
    check(MPI_Ibarrier(comm_, o->request()), "MPI_Ibarrier");
    return o;
  }

 private:
  MPI_Comm comm_;
  kernels::Device device_;
  int rank_ = 0, size_ = 1;
};

World g_world;

int cores_available() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

std::shared_ptr<detail::Backend> detail::make_mpi_backend(int color, int key,
                                                          kernels::Device device) {
  MPI_Comm comm;
  check(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm), "MPI_Comm_split");
  return std::make_shared<MpiBackend>(comm, device);
}

World init_world(int& argc, char**& argv) {
  int init = 0;
  MPI_Initialized(&init);
  // MPI_Init's own failure can only abort: its error handler is not ours yet.
  if (!init) MPI_Init(&argc, &argv);
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  World w;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &w.size), "MPI_Comm_size");
  MPI_Comm node;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  check(MPI_Comm_rank(node, &w.local_rank), "MPI_Comm_rank");
  check(MPI_Comm_size(node, &w.local_size), "MPI_Comm_size");
  MPI_Comm_free(&node);
  // OpenBLAS starts one thread per core in every rank: with k ranks on a node that is k
  // times too many, and they spin against each other. Give each rank cores/k (>= 1).
  const int cores = cores_available();
  detail::g_oversubscribed = w.local_size > cores;
  if (w.local_size > 1 && !std::getenv("OPENBLAS_NUM_THREADS") &&
      !std::getenv("OMP_NUM_THREADS")) {
    w.blas_threads = std::max(1, cores / w.local_size);
    openblas_set_num_threads(w.blas_threads);
  }
  g_world = w;
  return w;
}

void finalize_world() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
}

const World& world() { return g_world; }

int first_rank_where(bool mine) {
  int rank = 0, size = 1;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  const int candidate = mine ? rank : size;
  int first = size;
  check(MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  return first < size ? first : -1;
}

}  // namespace paralab
