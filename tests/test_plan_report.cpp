// tests/test_plan_report.cpp: the report writers (plan JSON, the per-step line and JSON, the
// memory, FLOPs and communication tables) and the peak FLOP/s a rank is measured against
// (hardware profiles, their resolution, the timed sgemm on CPU).
#include <gtest/gtest.h>
#include <sstream>
#include <cblas.h>
#include <stdexcept>
#include <string>
#include <vector>
#include "measure/peak.h"  // defines: Peak, HardwareProfile, resolve_peak, ...
#include "plan/plan.h"  // defines: make_plan, Plan
#include "report/report.h"
#include "report/text.h"  // strprintf  // defines: plan_json, step_json, the tables, format_*
#include "tests/test_plan_helpers.h"  // defines: gpt, world, batch

namespace paralab {
namespace {

using namespace plan_test;  // gpt, world, batch

TEST(Report, PlanJsonHasRequiredKeys) {
  const Plan p = make_plan(gpt(2, 64, 4, 32, 256), batch(2, 8), world(2, 1));
  const Peak peak{989, "configs/hardware/h100-sxm.toml (bf16 dense)"};
  const std::string j = plan_json(p, &peak, false);
  for (const char* key : {"\"params\":{\"total\":", "\"per_rank\":", "\"memory\":[{\"rank\":0",
                          "{\"rank\":1", "\"flops\":{\"convention\":\"full\"",
                          "\"model_per_step\":", "\"hardware_per_step\":", "\"total\":",
                          "\"optimizer_states\":", "\"comm_buffers\":", "\"peak\":",
                          // the communication tables' order: group, then operation
                          "\"comm\":[{\"group\":\"dp\",\"op\":\"all-reduce\",\"calls\":1,",
                          "},{\"group\":\"dp\",\"op\":\"reduce-scatter\",\"calls\":1,",
                          "\"data_parallel\":{\"buckets\":1,"})
    EXPECT_NE(j.find(key), std::string::npos) << key;
  // Balanced outside strings: the writer closed what it opened.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < j.size(); ++i) {
    if (j[i] == '"' && (i == 0 || j[i - 1] != '\\')) in_string = !in_string;
    if (in_string) continue;
    if (j[i] == '{' || j[i] == '[') ++depth;
    if (j[i] == '}' || j[i] == ']') --depth;
    ASSERT_GE(depth, 0);
  }
  EXPECT_EQ(depth, 0);
  EXPECT_NE(plan_json(p, nullptr, true).find("\n  \"params\": {"), std::string::npos);
}

// The run header names FP8's format and recipe and the path its GEMMs take on the device:
// the CPU twin, cuBLASLt for per-tensor scales, the emulated path for block scales.
TEST(Report, RunHeaderNamesFp8AndItsGemmPath) {
  ModelConfig m = gpt(2, 64, 4, 32, 256);
  EXPECT_EQ(run_header(make_plan(m, batch(2, 8), world(1, 0)), "cpu", nullptr).find("FP8"),
            std::string::npos);
  m.fp8.enabled = m.fp8.hybrid = true;
  const std::string cpu = run_header(make_plan(m, batch(2, 8), world(1, 0)), "cpu", nullptr);
  EXPECT_NE(cpu.find("| cpu fp32 + FP8 hybrid delayed (GEMMs: dequantise to fp32, fp32 GEMM) |"),
            std::string::npos) << cpu;
  const std::string cuda = run_header(make_plan(m, batch(2, 8), world(1, 0)), "cuda", nullptr);
  EXPECT_NE(cuda.find("FP8 hybrid delayed (GEMMs: cuBLASLt FP8 GEMM (per-tensor scales"),
            std::string::npos) << cuda;
  m.fp8.hybrid = false;
  m.fp8.recipe = Fp8Recipe::Blockwise;
  const std::string block = run_header(make_plan(m, batch(2, 8), world(1, 0)), "cuda", nullptr);
  EXPECT_NE(block.find("FP8 e4m3 blockwise (GEMMs: emulated (block scales: dequantise to fp32, "
                       "cuBLAS sgemm))"),
            std::string::npos) << block;
  const std::string plan = run_header(make_plan(m, batch(2, 8), world(1, 0)), "", nullptr);
  EXPECT_NE(plan.find("| fp32 + FP8 e4m3 blockwise | flash"), std::string::npos) << plan;
}

TEST(Report, StepLineJsonAndTables) {
  const Plan p = make_plan(gpt(2, 64, 4, 32, 256), batch(2, 4), world(2, 0));
  StepMetrics s;
  s.step = 1; s.loss = 5.546; s.lr = 3e-5; s.grad_norm = 1.92; s.step_seconds = 0.0412;
  for (int c = 0; c < kNumMemoryCategories; ++c) s.memory_bytes[c] = p.ranks[0].memory.at(c);
  s.peak_memory_bytes = p.ranks[0].memory.total();
  s.hardware_flops = p.flops.hardware_per_rank_step;
  fill_rates(s, p, Peak{0.001, "flag"});
  EXPECT_DOUBLE_EQ(s.tokens_per_second, 4 * 32 / 0.0412);
  EXPECT_NEAR(s.mfu, p.flops.model_per_step / (0.0412 * 1e9 * 2), 1e-12);
  // flash runs 7 causal attention products where the full convention counts 6 full ones.
  EXPECT_NEAR(s.hfu, p.flops.hardware_per_step / (0.0412 * 1e9 * 2), 1e-12);
  EXPECT_EQ(step_header(s).size(), step_row(s).size());
  s.comm_bytes = 1 << 20;
  EXPECT_EQ(step_header(s).size(), step_row(s).size());
  const std::string j = step_json(s, p, 0);
  EXPECT_EQ(j.find('\n'), std::string::npos);
  for (const char* key : {"\"loss\":", "\"mfu\":", "\"hfu\":", "\"activations\":{\"measured\":",
                          "\"comm_bytes\":", "\"hardware_per_rank_measured\":"})
    EXPECT_NE(j.find(key), std::string::npos) << key;
  // what is held between steps, measured (the ledger after the optimizer step) beside the
  // plan's resident model states; one byte more in grads shows in its row and the total
  const MemoryPlan& r = p.ranks[0].memory;
  s.resident_bytes = {r.resident_params, r.resident_grads + 1, r.master_params,
                      r.optimizer_states, 0, 0, 0, 0, 0};
  s.resident_measured = true;
  const std::string sj = step_json(s, p, 0);
  EXPECT_NE(sj.find("\"resident\":{\"params\":{\"measured\":" + std::to_string(r.resident_params) +
                    ",\"predicted\":" + std::to_string(r.resident_params) + "}"),
            std::string::npos) << sj;
  EXPECT_NE(sj.find("\"total\":{\"measured\":" + std::to_string(r.resident_total() + 1) +
                    ",\"predicted\":" + std::to_string(r.resident_total()) + "}"),
            std::string::npos) << sj;
  EXPECT_NE(sj.find("\"exact\":true"), std::string::npos) << sj;
  const std::string mt = memory_table(p, 0, &s);
  EXPECT_NE(mt.find("held between steps (after the optimizer step)"), std::string::npos) << mt;
  EXPECT_NE(mt.find(strprintf("  %-22s %10s %10s", "  grads", format_mib(r.resident_grads).c_str(),
                              format_mib(r.resident_grads + 1).c_str())),
            std::string::npos) << mt;
  EXPECT_NE(mt.find("optimizer_states"), std::string::npos);
  EXPECT_NE(mt.find("+0.0%"), std::string::npos);
  EXPECT_NE(flops_table(p, 0, &s).find("(+0.00%)"), std::string::npos);
  EXPECT_NE(plan_text(p, nullptr).find("activations saved per layer"), std::string::npos);
  EXPECT_NE(plan_text(p, nullptr).find("communication per step"), std::string::npos);
  // Predicted beside measured: a record equal to the plan shows no diff; one more call does.
  CommStats measured;
  for (const CommPlanEntry& e : p.comm)
    for (int64_t c = 0; c < e.calls; ++c)
      measured.record_call(e.group, e.op, e.payload_bytes / e.calls, 2);
  std::string ct = comm_table(p, &measured);
  EXPECT_NE(ct.find("dp        all-reduce"), std::string::npos) << ct;
  EXPECT_EQ(ct.find("diff"), std::string::npos) << ct;
  measured.record_call(CommGroup::DP, CommOp::ALL_REDUCE, 8, 2);
  measured.record_call(CommGroup::TP, CommOp::ALL_GATHER, 8, 2);
  ct = comm_table(p, &measured);
  EXPECT_NE(ct.find("payload diff +8 B"), std::string::npos) << ct;
  // One order for the bytes table and the measured time table (CommStats::table): the
  // (group, operation) pairs of their rows, read back, are the same sequence.
  auto pairs = [](const std::string& table) {
    std::vector<std::string> out;
    std::istringstream in(table);
    std::string line;
    std::getline(in, line);  // title
    while (std::getline(in, line)) {
      std::istringstream w(line);
      std::string g, op;
      w >> g >> op;
      if (g != "group" && g != "total" && !op.empty()) out.push_back(g + " " + op);
    }
    return out;
  };
  EXPECT_EQ(pairs(ct), pairs(measured.table("communication time, rank 0"))) << ct;
  EXPECT_NE(ct.find("(time: the next table)"), std::string::npos) << ct;
  EXPECT_NE(ct.find("tp        all-gather"), std::string::npos) << ct;
  EXPECT_EQ(format_mib(1.5 * 1024 * 1024), "1.50");
  EXPECT_EQ(format_si(1.234e15), "1.23P");
  EXPECT_EQ(format_si(12400, 1), "12.4k");
}

TEST(Peak, ProfilesMatchDeviceNames) {
  std::vector<HardwareProfile> ps = {
      parse_hardware_profile("name = \"H200\"\nmatch = [\"H200\"]\nbf16_tflops = 989\n", "h200"),
      parse_hardware_profile("name = \"H20\" # export part\nmatch = [\"H20\"]\n"
                             "bf16_tflops = 148\nconfirmed = false\n", "h20"),
      parse_hardware_profile("name = \"H100\"\nmatch = [\"H100 80GB HBM3\", \"H100\"]\n"
                             "bf16_tflops = 989\nfp32_tflops = 67\n", "h100"),
      parse_hardware_profile("name = \"H100 PCIe\"\nmatch = [\"H100 PCIe\"]\n"
                             "bf16_tflops = 756\n", "h100-pcie")};
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA H200")->name, "H200");
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA H20")->name, "H20");
  EXPECT_FALSE(match_hardware_profile(ps, "NVIDIA H20")->confirmed);
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA H100 PCIe")->name, "H100 PCIe");
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA H100 80GB HBM3")->name, "H100");
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA GeForce RTX 3090"), nullptr);
  EXPECT_THROW(parse_hardware_profile("name = \"x\"\nmatch = [\"x\"]\nbf16 = 1\n", "bad"),
               std::runtime_error);
}

TEST(Peak, ShippedProfilesAndResolution) {
  const auto ps = load_hardware_profiles("configs/hardware");
  if (ps.empty()) GTEST_SKIP() << "run from the repository root to read configs/hardware";
  for (const char* gpu : {"NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB",
                          "NVIDIA H20", "NVIDIA GeForce RTX 4090", "NVIDIA H100 PCIe"})
    EXPECT_NE(match_hardware_profile(ps, gpu), nullptr) << gpu;
  EXPECT_EQ(resolve_peak(0, "NVIDIA H200", Precision::BF16, "configs/hardware", {}).tflops, 989);
  EXPECT_EQ(resolve_peak(0, "NVIDIA A100-SXM4-80GB", Precision::FP32, "configs/hardware", {}).tflops, 19.5);
  EXPECT_NE(resolve_peak(0, "NVIDIA H20", Precision::BF16, "configs/hardware", {}).source.find("unconfirmed"),
            std::string::npos);
  const Peak flag = resolve_peak(123, "NVIDIA H200", Precision::BF16, "configs/hardware", {});
  EXPECT_EQ(flag.source, "flag");
  EXPECT_EQ(resolve_peak(0, "NVIDIA B300", Precision::BF16, "configs/hardware", {}).tflops, 0);
}

TEST(Peak, MeasuredSgemmOnCpu) {
  const int n = 128;
  std::vector<float> A(n * n, 1.0f), B(n * n, 0.5f), C(n * n);
  auto gemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n,
                B.data(), n, 0.0f, C.data(), n);
  };
  const Peak p = resolve_peak(0, "", Precision::FP32, "configs/hardware",
                              [&] { return measure_peak_tflops(gemm, 2.0 * n * n * n, 0.01); });
  EXPECT_GT(p.tflops, 0);
  EXPECT_EQ(p.source, "measured sgemm, best of 5 trials of 40 ms");
  EXPECT_NE(describe_peak(p).find("TFLOP/s/rank (measured sgemm"), std::string::npos);
  // the header says how to make MFU comparable between runs
  EXPECT_NE(describe_peak(p).find("pass --peak-tflops"), std::string::npos);
  EXPECT_EQ(describe_peak(Peak{989, "flag"}), "989.00 TFLOP/s/rank (flag)");
  // the best of the trials counts: no trial is faster than it
  double worst = 0;
  const double best = measure_peak_tflops(gemm, 2.0 * n * n * n, 0.002, 3, &worst);
  EXPECT_GT(worst, 0);
  EXPECT_LE(worst, best);
}

}  // namespace
}  // namespace paralab
