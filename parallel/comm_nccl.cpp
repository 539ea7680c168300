// parallel/comm_nccl.cpp: the NCCL backend (device buffers; CUDA build only).
//
// The pattern: one NCCL communicator and one non-blocking CUDA stream per group. Posting
// an operation
//   1. records an event on the compute stream and makes the comm stream wait for it
//      (the data the kernels produced is complete before NCCL reads it; the GPU waits,
//      not the host),
//   2. enqueues the NCCL call on the comm stream, so compute launched afterwards runs
//      concurrently with it,
//   3. records a "done" event; test() is cudaEventQuery on it, and a waiting rank spins
//      on test() with sched_yield (comm.cpp), checking NCCL's asynchronous error too.
// After wait() the host knows the result is in place; kernels launched after it on any
// stream see it.
//
// Bootstrap: group rank 0 makes the ncclUniqueId, the group's MPI backend broadcasts it
// (nonblocking, waited the same way), and every member calls ncclCommInitRank. Batched
// send/recv and all-to-all(-v) are ncclSend/ncclRecv pairs inside ncclGroupStart/End, so
// NCCL posts them together and no ordering of the pairs can deadlock.
#ifndef PARALAB_CPU_ONLY
// Older nccl.h versions declare ncclBfloat16 only when cuda_bf16.h came first.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <string>
#include "kernels/common.h"  // cuda_current_stream: the compute stream of kernels/
#include "parallel/comm.h"

namespace paralab {

namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string(what) + " failed: " + cudaGetErrorString(e));
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail(std::string(what) + " failed: " + ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::I32: return ncclInt32;
    // kernels::bf16 has __nv_bfloat16's bits, kernels::fp16 __half's; each partial sum is
    // rounded to the type, as in the MPI backend's half_sum.
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    default: return ncclUint8;
  }
}

class NcclOp : public detail::PendingOp {
 public:
  NcclOp(ncclComm_t comm, cudaStream_t stream) : comm_(comm) {
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(done_, stream), "cudaEventRecord");
  }
  ~NcclOp() override { cudaEventDestroy(done_); }

  bool test() override {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) cuda_check(e, "cudaEventQuery");
    // A peer that failed inside NCCL shows up here rather than as a hang.
    ncclResult_t async = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) nccl_check(async, "NCCL (async)");
    return false;
  }

 private:
  ncclComm_t comm_;
  cudaEvent_t done_;
};

class NcclBackend : public detail::Backend {
 public:
  NcclBackend(std::shared_ptr<detail::Backend> bootstrap, void* compute_stream)
      : boot_(std::move(bootstrap)),
        compute_(static_cast<cudaStream_t>(compute_stream ? compute_stream
                                                          : kernels::cuda_current_stream())) {
    ncclUniqueId id;
    if (boot_->rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    detail::wait_until_done(*boot_->broadcast(&id, sizeof id, DType::U8, 0), "the NCCL id's",
                            "broadcast");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    nccl_check(ncclCommInitRank(&comm_, boot_->size(), id, boot_->rank()), "ncclCommInitRank");
  }
  ~NcclBackend() override {
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return boot_->rank(); }
  int size() const override { return boot_->size(); }

  detail::Pending all_reduce(void* buf, size_t count, DType t, ReduceOp op) override {
    after_compute();
    nccl_check(ncclAllReduce(buf, buf, count, nccl_type(t),
                             op == ReduceOp::MAX ? ncclMax : ncclSum, comm_, stream_),
               "ncclAllReduce");
    return posted();
  }

  detail::Pending reduce_scatter(const void* in, void* out, size_t shard, DType t) override {
    after_compute();
    nccl_check(ncclReduceScatter(in, out, shard, nccl_type(t), ncclSum, comm_, stream_),
               "ncclReduceScatter");
    return posted();
  }

  detail::Pending all_gather(const void* in, void* out, size_t shard, DType t) override {
    after_compute();
    nccl_check(ncclAllGather(in, out, shard, nccl_type(t), comm_, stream_), "ncclAllGather");
    return posted();
  }

  detail::Pending all_to_all(const void* in, void* out, size_t per_peer, DType t) override {
    std::vector<size_t> counts(size(), per_peer);
    return all_to_all_v(in, counts, out, counts, t);
  }

  detail::Pending all_to_all_v(const void* in, const std::vector<size_t>& send_counts,
                               void* out, const std::vector<size_t>& recv_counts,
                               DType t) override {
    after_compute();
    const size_t es = dtype_size(t);
    const char* src = static_cast<const char*>(in);
    char* dst = static_cast<char*>(out);
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (int p = 0; p < size(); ++p) {
      nccl_check(ncclSend(src, send_counts[p], nccl_type(t), p, comm_, stream_), "ncclSend");
      nccl_check(ncclRecv(dst, recv_counts[p], nccl_type(t), p, comm_, stream_), "ncclRecv");
      src += send_counts[p] * es;
      dst += recv_counts[p] * es;
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    return posted();
  }

  detail::Pending broadcast(void* buf, size_t count, DType t, int root) override {
    after_compute();
    nccl_check(ncclBroadcast(buf, buf, count, nccl_type(t), root, comm_, stream_),
               "ncclBroadcast");
    return posted();
  }

  detail::Pending send_recv(const std::vector<P2POp>& ops) override {
    after_compute();
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (const P2POp& p : ops) {
      if (p.kind == P2POp::SEND)
        nccl_check(ncclSend(p.buf, p.count, nccl_type(p.type), p.peer, comm_, stream_),
                   "ncclSend");
      else
        nccl_check(ncclRecv(p.buf, p.count, nccl_type(p.type), p.peer, comm_, stream_),
                   "ncclRecv");
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    return posted();
  }

  // A barrier orders hosts, not streams: the group's MPI barrier does it.
  detail::Pending barrier() override { return boot_->barrier(); }

 private:
  void after_compute() {
    cudaEvent_t ready;
    cuda_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(ready, compute_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);  // released once the wait has been satisfied
  }
  detail::Pending posted() { return std::make_unique<NcclOp>(comm_, stream_); }

  std::shared_ptr<detail::Backend> boot_;
  cudaStream_t compute_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::shared_ptr<detail::Backend> detail::make_nccl_backend(std::shared_ptr<Backend> bootstrap,
                                                           void* compute_stream) {
  return std::make_shared<NcclBackend>(std::move(bootstrap), compute_stream);
}

}  // namespace paralab
#endif  // PARALAB_CPU_ONLY
