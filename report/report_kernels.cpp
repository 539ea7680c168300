// report/report_kernels.cpp: see report_kernels.h.
#include "report/report_kernels.h"

namespace paralab {

void kernel_traffic_json(JsonWriter& j, const KernelTrafficPlan& predicted,
                         const kernels::KernelCount& measured) {
  auto pair = [&](const char* name, double m, double p, bool integral) {
    j.key(name).begin_object();
    if (integral) {
      j.field("measured", (int64_t)m).field("predicted", (int64_t)p);
    } else {
      j.field("measured", m).field("predicted", p);
    }
    j.end_object();
  };
  j.key("kernels").begin_object();
  pair("launches", (double)measured.launches, (double)predicted.step_total.launches, true);
  pair("bytes", measured.bytes, predicted.step_total.bytes, false);
  pair("attention_launches", (double)measured.attention_launches,
       (double)predicted.step_attention.launches, true);
  pair("routing_host_copies", (double)measured.routing_copies,
       (double)predicted.step_routing.launches, true);
  pair("routing_host_bytes", measured.routing_copy_bytes, predicted.step_routing.bytes, false);
  j.field("exact", predicted.exact);
  j.end_object();
}

}  // namespace paralab
