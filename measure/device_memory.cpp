// measure/device_memory.cpp: see device_memory.h.
#include "measure/device_memory.h"
#include <cstdio>
#include <fstream>
#include <sstream>
#ifndef PARALAB_CPU_ONLY
#include <cuda_runtime_api.h>
#endif

namespace paralab {

static std::string gib(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return s;
}

AvailableMemory available_memory(bool cuda, int ranks_on_node) {
  AvailableMemory a;
  if (cuda) {
#ifndef PARALAB_CPU_ONLY
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) {
      a.bytes = (double)free_bytes;
      a.source = "GPU free memory " + gib(a.bytes) + " of " + gib((double)total);
    }
#endif
    return a;
  }
  // "MemAvailable:   21312344 kB": what the kernel estimates can be allocated without
  // swapping, page cache it can drop included.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit)
    if (key == "MemAvailable:") {
      const int ranks = ranks_on_node > 0 ? ranks_on_node : 1;
      a.bytes = kb * 1024.0 / ranks;
      a.source = "host MemAvailable " + gib(kb * 1024.0) + " / " + std::to_string(ranks) +
                 (ranks == 1 ? " rank" : " ranks") + " on the node";
      break;
    }
  return a;
}

}  // namespace paralab
