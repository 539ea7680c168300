// report/checkpoint_report.cpp: see checkpoint_report.h.
#include "report/checkpoint_report.h"

#include <algorithm>
#include "checkpoint/json.h"
#include "report/text.h"

namespace paralab {

namespace {

std::string format_bytes(int64_t bytes) { return strprintf("%.2f MiB", bytes / 1048576.0); }

int64_t total_bytes(const Plan& plan) {
  int64_t total = 0;
  for (const RankPlan& r : plan.ranks) total += r.checkpoint_bytes;
  return total;
}

const RankPlan& largest(const Plan& plan) {
  return *std::max_element(plan.ranks.begin(), plan.ranks.end(),
                           [](const RankPlan& a, const RankPlan& b) {
                             return a.checkpoint_bytes < b.checkpoint_bytes;
                           });
}

}  // namespace

double checkpoint_seconds(const Plan& plan, const HardwareProfile* hardware) {
  if (!hardware || hardware->storage_write_gbs <= 0) return -1;
  const int per_node = std::max(1, hardware->gpus_per_node);
  int64_t busiest = 0;
  for (size_t first = 0; first < plan.ranks.size(); first += per_node) {
    int64_t node = 0;
    for (size_t r = first; r < std::min(plan.ranks.size(), first + per_node); ++r)
      node += plan.ranks[r].checkpoint_bytes;
    busiest = std::max(busiest, node);
  }
  return busiest / (hardware->storage_write_gbs * 1e9);
}

std::string checkpoint_plan_text(const Plan& plan, const HardwareProfile* hardware) {
  const RankPlan& big = largest(plan);
  const double seconds = checkpoint_seconds(plan, hardware);
  return strprintf(
      "checkpoint (--save): %s per rank at most (rank %d), %s in all: owned elements x %d B "
      "(parameter %d + Adam m, v 8%s)%s\n",
      format_bytes(big.checkpoint_bytes).c_str(), big.rank, format_bytes(total_bytes(plan)).c_str(),
      plan.train.half() ? 14 : 12, plan.train.half() ? 2 : 4, plan.train.half() ? " + master 4" : "",
      seconds >= 0 ? strprintf("; %.3g s to write at %.3g GB/s per node (%s)", seconds,
                               hardware->storage_write_gbs, hardware->name.c_str()).c_str()
                   : "; no write time (the profile states no storage_write_gbs)");
}

std::string checkpoint_text(const SaveStats& saved, const Plan& plan,
                            const HardwareProfile* hardware) {
  int mismatched = -1;
  for (size_t r = 0; r < saved.rank_payload_bytes.size() && r < plan.ranks.size(); ++r)
    if ((int64_t)saved.rank_payload_bytes[r] != plan.ranks[r].checkpoint_bytes && mismatched < 0)
      mismatched = (int)r;
  uint64_t measured_total = 0;
  for (uint64_t b : saved.rank_payload_bytes) measured_total += b;
  const double predicted = checkpoint_seconds(plan, hardware);
  std::string out = strprintf(
      "checkpoint: saved %s in %.3f s%s; tensor data %s in all, %s per rank %s; files %s\n",
      saved.folder.c_str(), saved.seconds,
      predicted >= 0 ? strprintf(" (predicted %.3g s at %.3g GB/s per node)", predicted,
                                 hardware->storage_write_gbs).c_str()
                     : "",
      format_bytes((int64_t)measured_total).c_str(),
      mismatched < 0 ? "measured == predicted" : "measured != predicted",
      mismatched < 0 ? strprintf("(largest %s)", format_bytes(largest(plan).checkpoint_bytes).c_str()).c_str()
                     : strprintf("(rank %d: %llu B measured, %lld B predicted)", mismatched,
                                 (unsigned long long)saved.rank_payload_bytes[mismatched],
                                 (long long)plan.ranks[mismatched].checkpoint_bytes).c_str(),
      format_bytes((int64_t)saved.total_file_bytes).c_str());
  return out;
}

std::string checkpoint_json(const SaveStats& saved, const Plan& plan,
                            const HardwareProfile* hardware, int step) {
  JsonWriter j;
  j.begin_object().field("type", "checkpoint").field("step", step);
  j.field("folder", saved.folder).field("seconds", saved.seconds);
  j.field("file_bytes", (int64_t)saved.total_file_bytes);
  j.key("payload_bytes").begin_array();
  for (uint64_t b : saved.rank_payload_bytes) j.value((int64_t)b);
  j.end_array().key("predicted_bytes").begin_array();
  for (const RankPlan& r : plan.ranks) j.value(r.checkpoint_bytes);
  j.end_array();
  const double predicted = checkpoint_seconds(plan, hardware);
  if (predicted >= 0) j.field("predicted_seconds", predicted);
  j.end_object();
  return j.str();
}

}  // namespace paralab
