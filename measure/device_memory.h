// measure/device_memory.h: how much memory a rank may use, for the fit check before a run
// allocates (plan/fit.h): on a GPU its free memory now (cudaMemGetInfo); on the CPU backend
// the host's MemAvailable (/proc/meminfo) divided among the ranks on the node, since they
// share it.
//
// defines: AvailableMemory, available_memory
#pragma once
#include <string>

namespace paralab {

struct AvailableMemory {
  double bytes = 0;    // per rank; 0 = unknown (no check)
  std::string source;  // "GPU free memory 79.1 GiB", "host MemAvailable 20.3 GiB / 2 ranks"
};

// cuda: the selected GPU's. ranks_on_node: the ranks sharing the host (World::local_size).
AvailableMemory available_memory(bool cuda, int ranks_on_node);

}  // namespace paralab
