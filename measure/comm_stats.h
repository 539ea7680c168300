// measure/comm_stats.h: the measured half of the communication ledger.
//
// Every collective or point-to-point call made through parallel/comm is recorded here, per
// group (tp, cp, pp, dp, dp_cp, ep, etp, etp_ep, edp, embedding, world: parallel/topology.h
// says what each is for) and per operation: calls, payload bytes, bus bytes, total time
// and exposed time. plan/ predicts the same payload and bus bytes; the report prints both
// and the tests hold them equal. CPU offload's copies between device and host memory
// (parallel/offload.h) are recorded the same way, as group "pcie" with the operations
// device-to-host and host-to-device (one rank, bus factor 1: the bytes cross the link once).
//
// Payload convention (bytes of the collective's full buffer, per rank):
//   all-reduce       the buffer reduced (input = output size)
//   reduce-scatter   the input, i.e. the full un-scattered size n * shard
//   all-gather       the output, i.e. the full gathered size n * shard
//   all-to-all(-v)   the bytes this rank sends (its whole send buffer)
//   broadcast        the buffer broadcast
//   send/recv        the bytes this rank sends (received bytes are the sender's payload,
//                    so the payload summed over ranks is the traffic on the wire)
//   barrier          0
// Bus bytes, from nccl-tests (PERFORMANCE.md), n = group size, S = payload:
//   all-reduce 2(n-1)/n * S; reduce-scatter, all-gather, all-to-all (n-1)/n * S;
//   broadcast, send/recv, device-to-host, host-to-device 1 * S. Bus bytes over time is the
//   bus bandwidth, which is
//   comparable to the link speed whatever n is. all-to-all-v uses the all-to-all factor.
// Time: "time" runs from posting the call to observing its completion (an upper bound of
// the transfer: an asynchronous call completes at the latest when it is waited for);
// "exposed" is the time the calling rank spent inside the communication layer itself,
// posting (staging copies included) and blocked in wait(): the part no compute hid.
// Events: besides the sums, each call's own interval (posted, completion observed) on the
// steady clock, the first kMaxEvents of a step, for --trace's comm lane (report/).
//
// defines: CommGroup, CommOp, group_name, op_name, bus_factor, CommRecord, CommEvent,
//          CommStats
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace paralab {

// The dense grid's groups, the expert grid's (ep, etp, etp_ep, edp), then embedding, mirror
// (DualPipe's two ranks holding the same stages), world.
// PCIE: a rank's own copies between device and host memory (CPU offload), not a group.
enum class CommGroup : int {
  TP = 0, CP, PP, DP, DP_CP, EP, ETP, ETP_EP, EDP, EMBEDDING, MIRROR, WORLD, PCIE, COUNT
};
enum class CommOp : int {
  ALL_REDUCE = 0,
  REDUCE_SCATTER,
  ALL_GATHER,
  ALL_TO_ALL,
  ALL_TO_ALL_V,
  BROADCAST,
  SEND_RECV,
  BARRIER,
  DEVICE_TO_HOST,  // group PCIE: a copy down to host memory
  HOST_TO_DEVICE,  //   and up
  COUNT
};
constexpr int kNumCommGroups = static_cast<int>(CommGroup::COUNT);
constexpr int kNumCommOps = static_cast<int>(CommOp::COUNT);

const char* group_name(CommGroup g);  // "tp", "dp_cp", ...
const char* op_name(CommOp op);       // "all-reduce", "send/recv", ...

// nccl-tests bus-bandwidth factor of `op` on a group of n ranks (see the header comment).
double bus_factor(CommOp op, int n);

struct CommRecord {
  uint64_t calls = 0;
  uint64_t payload_bytes = 0;
  double bus_bytes = 0;
  double time_s = 0;     // post -> completion observed, summed over calls
  double exposed_s = 0;  // inside post + blocked in wait(), summed over calls
  void add(const CommRecord& o);
};

// One call: posted at start_s, its completion observed at end_s; seconds on the steady
// clock (CLOCK_MONOTONIC, which the processes of one node share).
struct CommEvent {
  CommGroup group = CommGroup::WORLD;
  CommOp op = CommOp::ALL_REDUCE;
  double start_s = 0, end_s = 0;
};

class CommStats {
 public:
  // The process-wide record that parallel/comm writes into.
  static CommStats& instance();

  // A call was posted: one more call of `payload_bytes` on a group of n ranks.
  void record_call(CommGroup g, CommOp op, uint64_t payload_bytes, int n);
  // A call completed: its total and exposed seconds.
  void record_time(CommGroup g, CommOp op, double time_s, double exposed_s);
  // A call's interval, for the trace. Bounded: a step keeps its first kMaxEvents (a push
  // into reserved space, cheap beside any call) and counts the rest in events_dropped().
  void record_event(const CommEvent& e);
  const std::vector<CommEvent>& events() const { return events_; }
  uint64_t events_dropped() const { return events_dropped_; }
  static constexpr size_t kMaxEvents = 4096;

  const CommRecord& get(CommGroup g, CommOp op) const;
  CommRecord total() const;  // summed over every group and operation
  void reset();              // start a new step (the events too)
  void add(const CommStats& o);  // accumulate the sums (e.g. a run total), not the events

  // Fixed-length flat form (kNumCommGroups * kNumCommOps * 5 doubles, group-major) for
  // gathering every rank's record to rank 0. Bytes stay exact up to 2^53.
  std::vector<double> to_vector() const;
  static CommStats from_vector(const std::vector<double>& v);
  static constexpr size_t kVectorSize = size_t(kNumCommGroups) * kNumCommOps * 5;

  // Human table, one row per (group, operation) with at least one call, then a total:
  //   group  operation       calls  payload MiB  bus MiB  time ms  exposed ms
  std::string table(const std::string& title = "communication per step") const;
  // JSON list of the same rows: [{"group":"tp","op":"all-reduce","calls":..,
  // "payload_bytes":..,"bus_bytes":..,"time_ms":..,"exposed_ms":..}, ...]
  std::string json() const;

 private:
  std::array<CommRecord, size_t(kNumCommGroups) * kNumCommOps> rec_{};
  std::vector<CommEvent> events_;
  uint64_t events_dropped_ = 0;
  CommRecord& at(CommGroup g, CommOp op) {
    return rec_[static_cast<int>(g) * kNumCommOps + static_cast<int>(op)];
  }
};

}  // namespace paralab
