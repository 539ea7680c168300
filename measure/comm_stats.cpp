// measure/comm_stats.cpp: see comm_stats.h.
#include "measure/comm_stats.h"
#include <cstdio>
#include <stdexcept>

namespace paralab {

const char* group_name(CommGroup g) {
  switch (g) {
    case CommGroup::TP: return "tp";
    case CommGroup::CP: return "cp";
    case CommGroup::PP: return "pp";
    case CommGroup::DP: return "dp";
    case CommGroup::DP_CP: return "dp_cp";
    case CommGroup::EP: return "ep";
    case CommGroup::ETP: return "etp";
    case CommGroup::ETP_EP: return "etp_ep";
    case CommGroup::EDP: return "edp";
    case CommGroup::EMBEDDING: return "embedding";
    case CommGroup::MIRROR: return "mirror";
    case CommGroup::WORLD: return "world";
    case CommGroup::PCIE: return "pcie";
    default: return "?";
  }
}

const char* op_name(CommOp op) {
  switch (op) {
    case CommOp::ALL_REDUCE: return "all-reduce";
    case CommOp::REDUCE_SCATTER: return "reduce-scatter";
    case CommOp::ALL_GATHER: return "all-gather";
    case CommOp::ALL_TO_ALL: return "all-to-all";
    case CommOp::ALL_TO_ALL_V: return "all-to-all-v";
    case CommOp::BROADCAST: return "broadcast";
    case CommOp::SEND_RECV: return "send/recv";
    case CommOp::BARRIER: return "barrier";
    case CommOp::DEVICE_TO_HOST: return "device-to-host";
    case CommOp::HOST_TO_DEVICE: return "host-to-device";
    default: return "?";
  }
}

double bus_factor(CommOp op, int n) {
  switch (op) {
    case CommOp::ALL_REDUCE: return 2.0 * (n - 1) / n;
    case CommOp::REDUCE_SCATTER:
    case CommOp::ALL_GATHER:
    case CommOp::ALL_TO_ALL:
    case CommOp::ALL_TO_ALL_V: return double(n - 1) / n;
    case CommOp::BROADCAST:
    case CommOp::SEND_RECV:
    case CommOp::DEVICE_TO_HOST:
    case CommOp::HOST_TO_DEVICE: return 1.0;
    default: return 0.0;
  }
}

void CommRecord::add(const CommRecord& o) {
  calls += o.calls;
  payload_bytes += o.payload_bytes;
  bus_bytes += o.bus_bytes;
  time_s += o.time_s;
  exposed_s += o.exposed_s;
}

CommStats& CommStats::instance() {
  static CommStats stats;
  return stats;
}

void CommStats::record_call(CommGroup g, CommOp op, uint64_t payload_bytes, int n) {
  CommRecord& r = at(g, op);
  r.calls += 1;
  r.payload_bytes += payload_bytes;
  r.bus_bytes += bus_factor(op, n) * double(payload_bytes);
}

void CommStats::record_time(CommGroup g, CommOp op, double time_s, double exposed_s) {
  CommRecord& r = at(g, op);
  r.time_s += time_s;
  r.exposed_s += exposed_s;
}

const CommRecord& CommStats::get(CommGroup g, CommOp op) const {
  return rec_[static_cast<int>(g) * kNumCommOps + static_cast<int>(op)];
}

CommRecord CommStats::total() const {
  CommRecord t;
  for (const CommRecord& r : rec_) t.add(r);
  return t;
}

void CommStats::record_event(const CommEvent& e) {
  if (events_.size() >= kMaxEvents) {
    ++events_dropped_;
    return;
  }
  if (events_.capacity() == 0) events_.reserve(256);
  events_.push_back(e);
}

void CommStats::reset() {
  rec_.fill(CommRecord{});
  events_.clear();  // keeps its capacity: no allocation in the next step's calls
  events_dropped_ = 0;
}

void CommStats::add(const CommStats& o) {
  for (size_t i = 0; i < rec_.size(); ++i) rec_[i].add(o.rec_[i]);
}

std::vector<double> CommStats::to_vector() const {
  std::vector<double> v;
  v.reserve(kVectorSize);
  for (const CommRecord& r : rec_) {
    v.push_back(double(r.calls));
    v.push_back(double(r.payload_bytes));
    v.push_back(r.bus_bytes);
    v.push_back(r.time_s);
    v.push_back(r.exposed_s);
  }
  return v;
}

CommStats CommStats::from_vector(const std::vector<double>& v) {
  if (v.size() != kVectorSize)
    throw std::invalid_argument("CommStats::from_vector: expected " +
                                std::to_string(kVectorSize) + " values, got " +
                                std::to_string(v.size()));
  CommStats s;
  for (size_t i = 0; i < s.rec_.size(); ++i) {
    const double* p = &v[i * 5];
    s.rec_[i] = CommRecord{uint64_t(p[0]), uint64_t(p[1]), p[2], p[3], p[4]};
  }
  return s;
}

namespace {
constexpr double kMiB = 1024.0 * 1024.0;

std::string row(const char* group, const char* op, const CommRecord& r) {
  char line[160];
  std::snprintf(line, sizeof line, "  %-10s %-15s %8llu %12.2f %10.2f %9.2f %11.2f\n", group,
                op, static_cast<unsigned long long>(r.calls), r.payload_bytes / kMiB,
                r.bus_bytes / kMiB, r.time_s * 1e3, r.exposed_s * 1e3);
  return line;
}
}  // namespace

std::string CommStats::table(const std::string& title) const {
  char head[160];
  std::snprintf(head, sizeof head, "%-28s %8s %12s %10s %9s %11s\n", title.c_str(), "calls",
                "payload MiB", "bus MiB", "time ms", "exposed ms");
  std::string out = head;
  for (int g = 0; g < kNumCommGroups; ++g)
    for (int o = 0; o < kNumCommOps; ++o) {
      const CommRecord& r = get(CommGroup(g), CommOp(o));
      if (r.calls) out += row(group_name(CommGroup(g)), op_name(CommOp(o)), r);
    }
  out += row("total", "", total());
  return out;
}

std::string CommStats::json() const {
  std::string out = "[";
  bool first = true;
  for (int g = 0; g < kNumCommGroups; ++g)
    for (int o = 0; o < kNumCommOps; ++o) {
      const CommRecord& r = get(CommGroup(g), CommOp(o));
      if (!r.calls) continue;
      char obj[320];
      std::snprintf(obj, sizeof obj,
                    "%s{\"group\":\"%s\",\"op\":\"%s\",\"calls\":%llu,\"payload_bytes\":%llu,"
                    "\"bus_bytes\":%.17g,\"time_ms\":%.6g,\"exposed_ms\":%.6g}",
                    first ? "" : ",", group_name(CommGroup(g)), op_name(CommOp(o)),
                    static_cast<unsigned long long>(r.calls),
                    static_cast<unsigned long long>(r.payload_bytes), r.bus_bytes,
                    r.time_s * 1e3, r.exposed_s * 1e3);
      out += obj;
      first = false;
    }
  return out + "]";
}

}  // namespace paralab
