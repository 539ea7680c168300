// kernels/emulator/race_check.h: racecheck, the emulated device's shared-memory hazard check
// (compute-sanitizer's racecheck is the anchor).
//
// Two threads of a block that touch the same shared byte, at least one of them writing,
// race unless something orders them: a __syncthreads between the two accesses, or, for two
// lanes of one warp, a __syncwarp of that warp (the only warp-level operation the CUDA memory
// model lets order shared accesses: a shuffle or an mma does not). The block's barrier periods
// are numbered (Block::interval, unique across blocks); each shared byte remembers its last
// writer and up to two readers of the current period, with the warp's __syncwarp count at the
// time. An access that meets an unordered one of another thread is a hazard:
//   read after write (RAW), write after read (WAR), write after write (WAW),
// reported with the byte's offset, both threads and both source lines, once per pair of lines.
// A cp.async's write counts from its issue until the wait_group that completes it, in every
// barrier period between (the data may land at any moment).
//
// defines: emu::{race_shared_access, race_new_interval}
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/emulator/machine.h"

namespace emu {

void race_shared_access(const Lane& lane, const Block& block, size_t offset, size_t bytes,
                        bool write, uintptr_t site);
// A new barrier period began (a block's start or a released barrier): re-records the writes of
// every cp.async still in flight.
void race_new_interval(Block& block);

}  // namespace emu
