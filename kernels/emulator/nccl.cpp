// kernels/emulator/nccl.cpp: the NCCL calls paralab makes, on the emulated device, over MPI.
//
// A communicator is an MPI communicator of the same ranks in the same order. NCCL builds one
// from a unique id that the group's rank 0 made and the others received (paralab broadcasts
// it over its MPI backend); here the id names its maker's world rank and a serial number, the
// other members tell the maker their world ranks (nonblocking point-to-point on
// MPI_COMM_WORLD, tags from kTag up), the maker sends the ordered list back, and every member
// makes the communicator with MPI_Comm_create_group, which only the group's ranks call.
//
// Each operation is posted as nonblocking MPI (MPI_Iallreduce, ...) and held by its stream as
// pending work (kernels/emulator/streams.h): an event recorded after it completes when it does,
// as on a GPU, and nothing waits with a blocking call (the ranks may share cores: paralab's
// rule). bf16 and fp16 sums are summed in fp32 and rounded to their type at each step, as NCCL's
// reduction kernels do (with paralab's encodings, kernels/float16.h). ncclSend/ncclRecv inside ncclGroupStart/End are posted together at the End, so no
// ordering of a group's pairs can deadlock. Every buffer must be device memory of the operation's
// size (else ncclInvalidArgument, and the message names the buffer).
//
// defines: the nccl* functions of include/nccl.h
#include <mpi.h>
#include <sched.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/emulator/device.h"
#include "kernels/emulator/include/nccl.h"
#include "kernels/emulator/memory_check.h"
#include "kernels/emulator/streams.h"
#include "kernels/float16.h"  // to_float, round_to: the 16-bit reductions

struct ncclComm {
  MPI_Comm comm;
  int rank, size;
};

namespace {

constexpr int kTag = 31000;  // the bootstrap's tags: kTag + serial % 256, and + 256 for replies
std::string g_message;
ncclResult_t g_message_result = ncclSuccess;

ncclResult_t refuse(ncclResult_t r, const std::string& why) {
  g_message_result = r;
  g_message = "emulator: " + why;
  return r;
}

// Tests and yields until every request has completed.
void wait_all(std::vector<MPI_Request>& requests) {
  for (;;) {
    int done = 0;
    MPI_Testall((int)requests.size(), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return;
    sched_yield();
  }
}

struct MpiOp : emu::AsyncOp {
  std::vector<MPI_Request> requests;
  bool done = false;
  // An operation whose result MPI leaves in a scratch buffer: copied to `result` at completion.
  std::vector<char> scratch;
  void* result = nullptr;
  bool test() override {
    if (done) return true;
    int flag = 0;
    MPI_Testall((int)requests.size(), requests.data(), &flag, MPI_STATUSES_IGNORE);
    done = flag != 0;
    if (done && result != nullptr) std::memcpy(result, scratch.data(), scratch.size());
    return done;
  }
};

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

// 16-bit reductions, H kernels::bf16 or kernels::fp16: widen, add (or compare), round.
template <class H>
void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; i++) b[i] = kernels::round_to<H>(kernels::to_float(a[i]) + kernels::to_float(b[i]));
}
template <class H>
void half_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; i++)
    if (kernels::to_float(a[i]) > kernels::to_float(b[i])) b[i] = a[i];
}
template <class H>
bool half_op(ncclRedOp_t op, MPI_Op* out) {
  static MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;
  if (sum == MPI_OP_NULL) {
    MPI_Op_create(half_sum<H>, 1, &sum);
    MPI_Op_create(half_max<H>, 1, &max);
  }
  if (op == ncclSum) *out = sum;
  else if (op == ncclMax) *out = max;
  else return false;
  return true;
}

bool mpi_type(ncclDataType_t t, MPI_Datatype* out) {
  switch (t) {
    case ncclInt8: *out = MPI_INT8_T; return true;
    case ncclUint8: *out = MPI_UINT8_T; return true;
    case ncclInt32: *out = MPI_INT32_T; return true;
    case ncclUint32: *out = MPI_UINT32_T; return true;
    case ncclInt64: *out = MPI_INT64_T; return true;
    case ncclUint64: *out = MPI_UINT64_T; return true;
    case ncclFloat32: *out = MPI_FLOAT; return true;
    case ncclFloat64: *out = MPI_DOUBLE; return true;
    case ncclBfloat16: case ncclFloat16: *out = MPI_UINT16_T; return true;
    default: return false;
  }
}

bool mpi_op(ncclRedOp_t op, ncclDataType_t t, MPI_Op* out) {
  if (t == ncclBfloat16) return half_op<kernels::bf16>(op, out);
  if (t == ncclFloat16) return half_op<kernels::fp16>(op, out);
  switch (op) {
    case ncclSum: *out = MPI_SUM; return true;
    case ncclProd: *out = MPI_PROD; return true;
    case ncclMax: *out = MPI_MAX; return true;
    case ncclMin: *out = MPI_MIN; return true;
    default: return false;
  }
}

// ---- groups of point-to-point operations -----------------------------------------------------
struct PointToPoint {
  bool send;
  void* buffer;
  size_t bytes;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
};
int g_group_depth = 0;
std::vector<PointToPoint> g_group;

void post(const std::vector<PointToPoint>& ops) {
  if (ops.empty()) return;
  auto op = std::make_shared<MpiOp>();
  for (const PointToPoint& p : ops) {
    MPI_Request r;
    if (p.send)
      MPI_Isend(p.buffer, (int)p.bytes, MPI_BYTE, p.peer, 0, p.comm->comm, &r);
    else
      MPI_Irecv(p.buffer, (int)p.bytes, MPI_BYTE, p.peer, 0, p.comm->comm, &r);
    op->requests.push_back(r);
  }
  for (const PointToPoint& p : ops) emu::stream_pending(p.stream, op);
}

ncclResult_t check_buffer(const void* p, size_t bytes, const char* what) {
  const std::string bad = emu::device_range_error(p, bytes, what);
  return bad.empty() ? ncclSuccess : refuse(ncclInvalidArgument, bad);
}

ncclResult_t usable(ncclComm_t comm, const char* call) {
  if (emu::sticky_error() != cudaSuccess) return refuse(ncclUnhandledCudaError, std::string(call) + ": the CUDA context has faulted");
  if (comm == nullptr) return refuse(ncclInvalidArgument, std::string(call) + ": no communicator");
  return ncclSuccess;
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  if (r != ncclSuccess && r == g_message_result) return g_message.c_str();
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "internal error";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return refuse(ncclInvalidUsage, "ncclGetUniqueId: the emulated NCCL runs on MPI, which is not initialised");
  static int serial = 0;
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  std::memset(id, 0, sizeof *id);
  const int fields[3] = {0x454d55, world, serial++};  // "EMU", maker, serial
  std::memcpy(id->internal, fields, sizeof fields);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  int fields[3];
  std::memcpy(fields, id.internal, sizeof fields);
  if (fields[0] != 0x454d55) return refuse(ncclInvalidArgument, "ncclCommInitRank: not an id of the emulated ncclGetUniqueId");
  if (rank < 0 || rank >= nranks) return refuse(ncclInvalidArgument, "ncclCommInitRank: rank outside the group");
  const int maker = fields[1], tag = kTag + fields[2] % 256;
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  std::vector<int> members(nranks, -1);
  std::vector<MPI_Request> requests;
  if (rank == 0) {
    // The maker learns every member's world rank (each sends its group rank and world rank)...
    std::vector<int> heard(2 * (nranks - 1));
    for (int i = 0; i < nranks - 1; i++) {
      requests.emplace_back();
      MPI_Irecv(&heard[2 * i], 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &requests.back());
    }
    wait_all(requests);
    members[0] = world;
    for (int i = 0; i < nranks - 1; i++) members[heard[2 * i]] = heard[2 * i + 1];
    // ... and tells them the list.
    requests.clear();
    for (int r = 1; r < nranks; r++) {
      requests.emplace_back();
      MPI_Isend(members.data(), nranks, MPI_INT, members[r], tag + 256, MPI_COMM_WORLD, &requests.back());
    }
    wait_all(requests);
  } else {
    int mine[2] = {rank, world};
    requests.resize(2);
    MPI_Isend(mine, 2, MPI_INT, maker, tag, MPI_COMM_WORLD, &requests[0]);
    MPI_Irecv(members.data(), nranks, MPI_INT, maker, tag + 256, MPI_COMM_WORLD, &requests[1]);
    wait_all(requests);
  }
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, nranks, members.data(), &group);
  ncclComm_t comm = new ncclComm();
  MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &comm->comm);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  comm->rank = rank;
  comm->size = nranks;
  *out = comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  MPI_Comm_free(&comm->comm);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* async_error) {
  *async_error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclAllReduce")) return r;
  const size_t bytes = count * type_bytes(type);
  if (ncclResult_t r = check_buffer(send, bytes, "ncclAllReduce's send buffer")) return r;
  if (ncclResult_t r = check_buffer(recv, bytes, "ncclAllReduce's receive buffer")) return r;
  MPI_Datatype t;
  MPI_Op o;
  if (!mpi_type(type, &t) || !mpi_op(op, type, &o)) return refuse(ncclInvalidArgument, "ncclAllReduce: a type or operation the emulator does not run");
  auto pending = std::make_shared<MpiOp>();
  pending->requests.emplace_back();
  MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, t, o, comm->comm,
                 &pending->requests.back());
  emu::stream_pending(stream, pending);
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclReduceScatter")) return r;
  const size_t bytes = recv_count * type_bytes(type);
  if (ncclResult_t r = check_buffer(send, bytes * comm->size, "ncclReduceScatter's send buffer")) return r;
  if (ncclResult_t r = check_buffer(recv, bytes, "ncclReduceScatter's receive buffer")) return r;
  MPI_Datatype t;
  MPI_Op o;
  if (!mpi_type(type, &t) || !mpi_op(op, type, &o)) return refuse(ncclInvalidArgument, "ncclReduceScatter: a type or operation the emulator does not run");
  // NCCL's in-place form (recv inside send, at this rank's shard) is not MPI's (which leaves
  // the result at the buffer's start): the result goes through scratch then.
  const bool overlaps = static_cast<const char*>(recv) < static_cast<const char*>(send) + bytes * comm->size &&
                        static_cast<const char*>(send) < static_cast<const char*>(recv) + bytes;
  auto pending = std::make_shared<MpiOp>();
  pending->requests.emplace_back();
  void* target = recv;
  if (overlaps) {
    pending->scratch.resize(bytes);
    pending->result = recv;
    target = pending->scratch.data();
  }
  MPI_Ireduce_scatter_block(send, target, (int)recv_count, t, o, comm->comm, &pending->requests.back());
  emu::stream_pending(stream, pending);
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclAllGather")) return r;
  const size_t bytes = send_count * type_bytes(type);
  if (ncclResult_t r = check_buffer(send, bytes, "ncclAllGather's send buffer")) return r;
  if (ncclResult_t r = check_buffer(recv, bytes * comm->size, "ncclAllGather's receive buffer")) return r;
  const bool in_place = static_cast<const char*>(recv) + bytes * comm->rank == send;
  auto pending = std::make_shared<MpiOp>();
  pending->requests.emplace_back();
  MPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                 comm->comm, &pending->requests.back());
  emu::stream_pending(stream, pending);
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclBroadcast")) return r;
  const size_t bytes = count * type_bytes(type);
  if (comm->rank == root)
    if (ncclResult_t r = check_buffer(send, bytes, "ncclBroadcast's send buffer")) return r;
  if (ncclResult_t r = check_buffer(recv, bytes, "ncclBroadcast's receive buffer")) return r;
  if (comm->rank == root && send != recv) {
    emu::stream_ready(stream);
    std::memmove(recv, send, bytes);
  }
  auto pending = std::make_shared<MpiOp>();
  pending->requests.emplace_back();
  MPI_Ibcast(recv, (int)bytes, MPI_BYTE, root, comm->comm, &pending->requests.back());
  emu::stream_pending(stream, pending);
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclSend")) return r;
  const size_t bytes = count * type_bytes(type);
  if (ncclResult_t r = check_buffer(send, bytes, "ncclSend's buffer")) return r;
  PointToPoint p{true, const_cast<void*>(send), bytes, peer, comm, stream};
  if (g_group_depth > 0) g_group.push_back(p);
  else post({p});
  return ncclSuccess;
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclRecv")) return r;
  const size_t bytes = count * type_bytes(type);
  if (ncclResult_t r = check_buffer(recv, bytes, "ncclRecv's buffer")) return r;
  PointToPoint p{false, recv, bytes, peer, comm, stream};
  if (g_group_depth > 0) g_group.push_back(p);
  else post({p});
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  g_group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g_group_depth == 0) {
    post(g_group);
    g_group.clear();
  }
  return ncclSuccess;
}
