// tests/emulator/test_checks.cpp: every scenario of tests/emulator/check_kernels.cu on the
// emulated device: a defect must be reported by the right check (racecheck, memcheck,
// synccheck, or the launch's error) naming the right kernel, and its correct twin must run
// clean. Each runs in a child process (a death test): a fault is sticky, as on a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/emulator/test_kernels.h"

namespace {

using namespace emulator_test;

// Runs the scenario in this (child) process; prints the outcome; exits 0 clean, 1 on an error.
void run(const std::string& name) {
  const Outcome o = run_scenario(name);
  std::fprintf(stderr, "outcome %d: %s\n", o.error, o.message.c_str());
  std::exit(o.error == 0 ? 0 : 1);
}

struct Expected {
  const char* scenario;
  const char* report;  // a regular expression the error's message must match
};
const Expected kReports[] = {
    {"race: neighbour read without a barrier", "racecheck: .*neighbour_kernel.*hazard on __shared__ s"},
    {"race: write after another thread's read", "racecheck: .*read_then_write_kernel.*write-after-read"},
    {"race: warp exchange without __syncwarp", "racecheck: .*warp_exchange_kernel.*hazard.*no __syncwarp \\(one warp\\)"},
    {"sync: divergent __syncthreads", "synccheck: .*divergent_barrier_kernel.*divergent __syncthreads"},
    {"sync: a barrier some threads never reach", "synccheck: .*stuck_kernel.*cannot go on"},
    {"sync: a shuffle naming an ended lane", "synccheck: .*missing_lane_kernel.*ended"},
    {"mem: global read past the end", "memcheck: .*read_past_end_kernel.*bytes \\[256, 260\\) of a 256-byte allocation.*4 bytes past its end"},
    {"mem: shared read past the dynamic bytes", "memcheck: .*shared_past_end_kernel.*invalid __shared__ read"},
    {"mem: misaligned float4 load", "memcheck: .*misaligned_vector_kernel.*misaligned global access of 16"},
    {"mem: a host pointer in a kernel", "memcheck: .*host_pointer_kernel.*invalid global read"},
    {"mem: ldmatrix row not 16-byte aligned", "memcheck: .*ldmatrix_misaligned_kernel.*not 16-byte aligned"},
    {"mem: cp.async source not 16-byte aligned", "memcheck: .*cp_async_misaligned_kernel.*cp.async source"},
    {"launch: 64 KiB of dynamic shared memory, no attribute", "big_shared_kernel.*65536 bytes of dynamic shared memory, above the kernel's limit of 49152"},
    {"launch: 64 KiB with another kernel's attribute", "big_shared_kernel.*above the kernel's limit of 49152"},
    {"launch: 2048 threads per block", "other_kernel.*2048 threads per block"},
};

TEST(EmulatorChecks, EachDefectIsReportedByItsCheck) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  for (const Expected& e : kReports)
    EXPECT_EXIT(run(e.scenario), ::testing::ExitedWithCode(1), e.report) << e.scenario;
}

TEST(EmulatorChecks, EveryCorrectTwinRunsClean) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  int clean = 0;
  for (int i = 0; i < kScenarioCount; i++) {
    if (kScenarios[i].defect) continue;
    EXPECT_EXIT(run(kScenarios[i].name), ::testing::ExitedWithCode(0), "outcome 0") << kScenarios[i].name;
    clean++;
  }
  EXPECT_GE(clean, 4);
}

TEST(EmulatorChecks, EveryDefectScenarioHasAnExpectedReport) {
  for (int i = 0; i < kScenarioCount; i++) {
    if (!kScenarios[i].defect) continue;
    bool found = false;
    for (const Expected& e : kReports) found |= std::string(e.scenario) == kScenarios[i].name;
    EXPECT_TRUE(found) << kScenarios[i].name;
  }
}

}  // namespace
