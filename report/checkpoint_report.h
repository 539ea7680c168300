// report/checkpoint_report.h: a checkpoint's bytes per rank and time, measured beside the plan.
//
//   predicted bytes   RankPlan::checkpoint_bytes (plan/checkpoint.cpp): owned elements x
//                     (storage bytes + 8 + 4 with bf16) + the expert bias; tensor data only
//   measured bytes    what each rank's shard holds (SaveStats::rank_payload_bytes); the files
//                     add a safetensors header per shard and the manifest
//   predicted time    the busiest node's bytes / the profile's storage_write_gbs (a node's
//                     ranks write at once: gpus_per_node consecutive ranks); none when the
//                     profile does not state it
//   measured time     the save, barrier to barrier (checkpoint/checkpoint.h)
//
// defines: checkpoint_seconds, checkpoint_plan_text, checkpoint_text, checkpoint_json
#pragma once
#include <string>
#include "measure/hardware.h"
#include "checkpoint/checkpoint.h"
#include "plan/plan.h"

namespace paralab {

// The predicted save time (seconds), or -1 without a profile or its storage_write_gbs.
double checkpoint_seconds(const Plan& plan, const HardwareProfile* hardware);
// --plan: one line, the largest rank's bytes, the total, the time.
std::string checkpoint_plan_text(const Plan& plan, const HardwareProfile* hardware);
// After a save: the measured line(s), predicted beside.
std::string checkpoint_text(const SaveStats& saved, const Plan& plan,
                            const HardwareProfile* hardware);
// --metrics-jsonl: {"type": "checkpoint", ...} (one line).
std::string checkpoint_json(const SaveStats& saved, const Plan& plan,
                            const HardwareProfile* hardware, int step);

}  // namespace paralab
