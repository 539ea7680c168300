// kernels/emulator/streams.h: work a stream holds that is not done when its call returns —
// NCCL's operations, which kernels/emulator/nccl.cpp runs as nonblocking MPI — and how the
// runtime (kernels/emulator/runtime.cpp) orders it: an event recorded on the stream holds it,
// and whatever is queued next on the stream waits for it first.
//
// defines: emu::{AsyncOp, stream_pending, stream_ready, wait_for}
#pragma once
#include <memory>
#include <vector>

#include "kernels/emulator/include/cuda_runtime.h"

namespace emu {

// One operation in flight; test() is true once it has completed (and stays true).
struct AsyncOp {
  virtual ~AsyncOp() = default;
  virtual bool test() = 0;
};

// The op joins the stream's pending work.
void stream_pending(cudaStream_t stream, std::shared_ptr<AsyncOp> op);
// Waits (testing and yielding) until the stream's pending work has completed.
void stream_ready(cudaStream_t stream);
void wait_for(std::vector<std::shared_ptr<AsyncOp>>& ops);

}  // namespace emu
