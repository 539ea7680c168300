// measure/clock.h: the one clock every measured time of the run reads.
//
// now_seconds(): the steady clock in seconds since its (arbitrary) epoch. Differences are
// durations; values of two ranks on one node share the epoch (the trace aligns ranks on other
// nodes by the ping-pong offsets of report/rank_metrics.cpp). Host time: on CUDA a duration is
// the GPU's only where the code synchronized the stream before reading it.
//
// defines: now_seconds
#pragma once
#include <chrono>

namespace paralab {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

}  // namespace paralab
