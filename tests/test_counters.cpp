// tests/test_counters.cpp: the host side of the kernels' time per phase and of the caching
// allocator (kernels/counters.h, kernels/block_cache.h), on the CPU backend: which phase a
// timed call goes to, the per-label GEMM seconds, the pool resolved when it fills, and the
// cache's bins (a freed block reused, a fresh one only when none fits, the counts).
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <vector>
#include "kernels/block_cache.h"  // defines: BlockCache
#include "kernels/ops.h"          // defines: gemm, add, phase_seconds, allocation_counts

using kernels::Device;

namespace {

void reset_all() {
  kernels::reset_phase_seconds();
  kernels::reset_gemm_counts();
  kernels::reset_flop_counter();
}

TEST(PhaseTimes, EachCallGoesToThePhaseItsDispatcherCounted) {
  const int n = 64;
  std::vector<float> a(n * n, 1.0f), b(n * n, 1.0f), c(n * n);
  reset_all();
  {
    kernels::GemmLabel label("mlp");
    kernels::gemm(Device::CPU, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                  c.data(), n);
  }
  kernels::add(Device::CPU, c.data(), a.data(), b.data(), (size_t)n * n);
  kernels::PhaseSeconds s = kernels::phase_seconds();
  EXPECT_GT(s.gemm, 0);
  EXPECT_GE(s.memory, 0);
  EXPECT_EQ(s.attention, -1);  // nothing timed: not measured
  EXPECT_EQ(s.optimizer, -1);
  // the GEMM's seconds went to its label too
  double label_seconds = 0;
  for (const auto& [label, count] : kernels::gemm_counts())
    if (label == "mlp") label_seconds = count.seconds;
  EXPECT_DOUBLE_EQ(label_seconds, s.gemm);

  // inside a PhaseScope every kernel is the scope's; a malloc is not timed
  reset_all();
  {
    kernels::PhaseScope scope(kernels::Phase::optimizer);
    kernels::add(Device::CPU, c.data(), a.data(), b.data(), (size_t)n * n);
    void* p = kernels::device_malloc(Device::CPU, 100);
    kernels::device_free(Device::CPU, p);
  }
  s = kernels::phase_seconds();
  EXPECT_GE(s.optimizer, 0);
  EXPECT_EQ(s.memory, -1);
  EXPECT_EQ(s.gemm, -1);
  // a call that moves nothing launches nothing and is not timed
  reset_all();
  kernels::add(Device::CPU, c.data(), a.data(), b.data(), 0);
  EXPECT_EQ(kernels::phase_seconds().memory, -1);
}

TEST(PhaseTimes, AFullPoolIsResolvedAndTheSumsKept) {
  std::vector<float> a(16, 1.0f), c(16);
  reset_all();
  const int calls = kernels::kMaxTimerMarks / 2 + 10;  // one resolve on the way
  for (int i = 0; i < calls; ++i) kernels::add(Device::CPU, c.data(), a.data(), a.data(), 16);
  const double first = kernels::phase_seconds().memory;
  EXPECT_GT(first, 0);
  // resolved sums are kept until the reset, and the next read adds nothing new
  EXPECT_DOUBLE_EQ(kernels::phase_seconds().memory, first);
  kernels::reset_phase_seconds();
  EXPECT_EQ(kernels::phase_seconds().memory, -1);
}

// A backend that hands out heap blocks and remembers them.
struct FakeBackend {
  std::set<void*> held;
  int fresh_calls = 0;
  bool fail = false;
  kernels::BlockCache cache{[this](size_t bytes) -> void* {
                              ++fresh_calls;
                              if (fail) return nullptr;
                              void* p = std::malloc(bytes);
                              held.insert(p);
                              return p;
                            },
                            [this](void* p) {
                              held.erase(p);
                              std::free(p);
                            }};
  ~FakeBackend() {
    for (void* p : held) std::free(p);
  }
};

TEST(BlockCache, AFreedBlockIsReusedAndAFreshOneMadeOnlyWhenNoneFits) {
  FakeBackend b;
  kernels::reset_allocation_counts();
  void* x = b.cache.take(1000);  // rounded to 1024
  EXPECT_EQ(b.fresh_calls, 1);
  EXPECT_TRUE(b.cache.give(x));
  EXPECT_FALSE(b.cache.give(x));  // not live any more
  EXPECT_EQ(b.cache.cached_bytes(), 1024u);
  EXPECT_EQ(b.cache.take(1024), x);  // the same bin
  EXPECT_EQ(b.fresh_calls, 1);
  b.cache.give(x);
  // a larger request does not fit the cached block: fresh
  void* y = b.cache.take(4096);
  EXPECT_EQ(b.fresh_calls, 2);
  b.cache.give(y);
  // a request within 1/8 below a cached block takes it (best fit: the smallest that fits)
  EXPECT_EQ(b.cache.take(3700), y);
  // but a small one does not pin a large block
  void* z = b.cache.take(512);
  EXPECT_NE(z, x);
  EXPECT_EQ(b.fresh_calls, 3);
  const kernels::AllocationCount a = kernels::allocation_counts();
  EXPECT_EQ(a.fresh, 3);
  EXPECT_DOUBLE_EQ(a.fresh_bytes, 1024 + 4096 + 512);
  EXPECT_EQ(a.reused, 2);
  EXPECT_EQ(b.cache.live_blocks(), 2u);
}

TEST(BlockCache, AFailedFreshAllocationEmptiesTheCacheAndRetries) {
  FakeBackend b;
  void* x = b.cache.take(512);
  b.cache.give(x);
  b.fail = true;
  EXPECT_THROW(b.cache.take(1 << 20), std::bad_alloc);
  EXPECT_EQ(b.cache.cached_bytes(), 0u);  // given back to the backend before the retry
  EXPECT_TRUE(b.held.empty());
}

TEST(BlockCache, DeviceMallocZeroesAReusedBlock) {
  const size_t bytes = 3000;
  auto* p = static_cast<unsigned char*>(kernels::device_malloc(Device::CPU, bytes));
  for (size_t i = 0; i < bytes; ++i) p[i] = 0xab;
  kernels::device_free(Device::CPU, p);
  kernels::reset_allocation_counts();
  auto* q = static_cast<unsigned char*>(kernels::device_malloc(Device::CPU, bytes));
  // a cached block of the bin (p, or one an earlier test freed): zeroed all the same
  for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(q[i], 0) << i;
  EXPECT_EQ(kernels::allocation_counts().fresh, 0);
  EXPECT_EQ(kernels::allocation_counts().reused, 1);
  EXPECT_DOUBLE_EQ(kernels::allocation_counts().zeroed_bytes, (double)bytes);
  kernels::device_free(Device::CPU, q);
}

}  // namespace
