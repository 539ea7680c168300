// tests/test_hardware.cpp: hardware profiles (measure/hardware.h): the parser reads every
// field and names file:line for a bad one, the writer round-trips exactly, --hardware finds
// a profile by file stem, name or path, the shipped configs/hardware files are complete and
// say which figures are assumptions, device names go to the right file, and the GEMM time
// curve has the shape the header gives.
#include <gtest/gtest.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>
#include "measure/hardware.h"  // defines: HardwareProfile, parse/write/load/find/match_...
#include "measure/peak.h"      // defines: peak_from_profile

namespace paralab {
namespace {

const char* kDir = "configs/hardware";

// Every field of a profile set to a value other than its default.
const char* kFull = R"(# a comment line
name = "Test GPU"            # trailing comment
match = ["Test GPU", "TG-1", ]
confirmed = false
source = "made up for the test # not a comment"
bf16_tflops = 100
fp16_tflops = 101
fp8_tflops = 202
fp32_tflops = 12.5
memory_gib = 48
memory_bandwidth_gbs = 1500
gpus_per_node = 4
intra_node_link = "NVLink 3"
intra_node_gbs = 300
inter_node_gbs = 25
launch_overhead_us = 4.5
collective_latency_us = 11
inter_node_latency_us = 33
gemm_efficiency = 0.7
gemm_half_gflop = 0.6
attention_efficiency = 0.45
memory_efficiency = 0.85
pcie_gbs = 26
pcie_latency_us = 9
host_memory_gib = 512
host_cores = 48
host_adam_params_per_s = 2.5e8
assumed = ["inter_node_gbs", "gpus_per_node"]
)";

// Every field equal (the file it was read from aside).
void expect_same(const HardwareProfile& a, const HardwareProfile& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.match, b.match);
  EXPECT_EQ(a.confirmed, b.confirmed);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.bf16_tflops, b.bf16_tflops);
  EXPECT_EQ(a.fp16_tflops, b.fp16_tflops);
  EXPECT_EQ(a.fp8_tflops, b.fp8_tflops);
  EXPECT_EQ(a.fp32_tflops, b.fp32_tflops);
  EXPECT_EQ(a.memory_gib, b.memory_gib);
  EXPECT_EQ(a.memory_bandwidth_gbs, b.memory_bandwidth_gbs);
  EXPECT_EQ(a.gpus_per_node, b.gpus_per_node);
  EXPECT_EQ(a.intra_node_link, b.intra_node_link);
  EXPECT_EQ(a.intra_node_gbs, b.intra_node_gbs);
  EXPECT_EQ(a.inter_node_gbs, b.inter_node_gbs);
  EXPECT_EQ(a.launch_overhead_us, b.launch_overhead_us);
  EXPECT_EQ(a.collective_latency_us, b.collective_latency_us);
  EXPECT_EQ(a.inter_node_latency_us, b.inter_node_latency_us);
  EXPECT_EQ(a.gemm_efficiency, b.gemm_efficiency);
  EXPECT_EQ(a.gemm_half_gflop, b.gemm_half_gflop);
  EXPECT_EQ(a.attention_efficiency, b.attention_efficiency);
  EXPECT_EQ(a.memory_efficiency, b.memory_efficiency);
  EXPECT_EQ(a.pcie_gbs, b.pcie_gbs);
  EXPECT_EQ(a.pcie_latency_us, b.pcie_latency_us);
  EXPECT_EQ(a.host_memory_gib, b.host_memory_gib);
  EXPECT_EQ(a.host_cores, b.host_cores);
  EXPECT_EQ(a.host_adam_params_per_s, b.host_adam_params_per_s);
  EXPECT_EQ(a.assumed, b.assumed);
}

// The message parse_hardware_profile throws for text ("" when it does not throw).
std::string parse_error(const std::string& text) {
  try {
    parse_hardware_profile(text, "bad.toml");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// A fresh directory under /tmp, removed (with its files) at the end of the test.
struct TempDir {
  std::string path;
  std::vector<std::string> files;
  TempDir() {
    char tmpl[] = "/tmp/paralab_hardware_XXXXXX";
    path = mkdtemp(tmpl);
  }
  std::string write(const std::string& name, const std::string& text) {
    files.push_back(path + "/" + name);
    std::ofstream(files.back()) << text;
    return files.back();
  }
  ~TempDir() {
    for (const auto& f : files) std::remove(f.c_str());
    rmdir(path.c_str());
  }
};

TEST(Hardware, ParsesEveryField) {
  const HardwareProfile p = parse_hardware_profile(kFull, "full.toml");
  EXPECT_EQ(p.file, "full.toml");
  EXPECT_EQ(p.name, "Test GPU");
  EXPECT_EQ(p.match, (std::vector<std::string>{"Test GPU", "TG-1"}));
  EXPECT_FALSE(p.confirmed);
  EXPECT_EQ(p.source, "made up for the test # not a comment");  // '#' inside a string stays
  EXPECT_EQ(p.bf16_tflops, 100);
  EXPECT_EQ(p.fp16_tflops, 101);
  EXPECT_EQ(p.fp8_tflops, 202);
  EXPECT_EQ(p.fp32_tflops, 12.5);
  EXPECT_EQ(p.memory_gib, 48);
  EXPECT_EQ(p.memory_bandwidth_gbs, 1500);
  EXPECT_EQ(p.gpus_per_node, 4);
  EXPECT_EQ(p.intra_node_link, "NVLink 3");
  EXPECT_EQ(p.intra_node_gbs, 300);
  EXPECT_EQ(p.inter_node_gbs, 25);
  EXPECT_EQ(p.launch_overhead_us, 4.5);
  EXPECT_EQ(p.collective_latency_us, 11);
  EXPECT_EQ(p.inter_node_latency_us, 33);
  EXPECT_EQ(p.gemm_efficiency, 0.7);
  EXPECT_EQ(p.gemm_half_gflop, 0.6);
  EXPECT_EQ(p.attention_efficiency, 0.45);
  EXPECT_EQ(p.memory_efficiency, 0.85);
  EXPECT_EQ(p.pcie_gbs, 26);
  EXPECT_EQ(p.host_adam_params_per_s, 2.5e8);
  EXPECT_EQ(p.assumed, (std::vector<std::string>{"inter_node_gbs", "gpus_per_node"}));
  EXPECT_TRUE(p.is_assumed("gpus_per_node"));
  EXPECT_FALSE(p.is_assumed("bf16_tflops"));

  // The least a profile needs: name, match (may be empty) and one peak; the rest defaults.
  const HardwareProfile cpu =
      parse_hardware_profile("name = \"cpu\"\nmatch = []\nfp32_tflops = 0.05\n", "cpu.toml");
  EXPECT_TRUE(cpu.match.empty());
  EXPECT_EQ(cpu.gpus_per_node, 8);
  EXPECT_EQ(cpu.gemm_efficiency, 0.75);
  EXPECT_TRUE(cpu.confirmed);
}

TEST(Hardware, WriteParseRoundTrip) {
  HardwareProfile p = parse_hardware_profile(kFull, "full.toml");
  // Values %.6g would not keep, and strings that need escapes.
  p.fp32_tflops = 0.1 + 0.2;
  p.memory_gib = 1.0 / 3.0;
  p.launch_overhead_us = 1e-7;
  p.inter_node_gbs = 123456789.123;
  p.name = "quote \" backslash \\ hash # tab \t";
  p.source = "two\nlines";
  p.match = {};
  const std::string text = write_hardware_profile(p, "written by the test\n\nsecond line");
  EXPECT_EQ(text.rfind("# written by the test\n#\n# second line\nname = ", 0), 0u) << text;
  // numbers as short as they read back exactly: no "100.000", no "1.5e+03"
  for (const char* line : {"bf16_tflops = 100\n", "memory_bandwidth_gbs = 1500\n",
                           "fp32_tflops = 0.30000000000000004\n", "launch_overhead_us = 1e-07\n",
                           "gemm_efficiency = 0.7\n", "gpus_per_node = 4\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  const HardwareProfile back = parse_hardware_profile(text, "back.toml");
  expect_same(p, back);
  EXPECT_EQ(write_hardware_profile(back, "written by the test\n\nsecond line"), text);

  // Every shipped profile survives the trip too.
  for (const auto& shipped : load_hardware_profiles(kDir))
    expect_same(shipped, parse_hardware_profile(write_hardware_profile(shipped, ""), "x"));
}

TEST(Hardware, ErrorsNameFileAndLine) {
  const std::string head = "name = \"x\"\nmatch = [\"x\"]\n";
  std::string e = parse_error(head + "bf16 = 1\n");
  EXPECT_NE(e.find("bad.toml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key bf16"), std::string::npos) << e;

  e = parse_error(head + "bf16_tflops = 1\nassumed = [\"inter_node_gbs\", \"nvlink_speed\"]\n");
  EXPECT_NE(e.find("bad.toml:4"), std::string::npos) << e;
  EXPECT_NE(e.find("'nvlink_speed'"), std::string::npos) << e;
  EXPECT_NE(e.find("inter_node_gbs"), std::string::npos) << e;  // lists the keys it may name
  // descriptive keys are not figures: they cannot be assumptions
  EXPECT_NE(parse_error(head + "bf16_tflops = 1\nassumed = [\"name\"]\n").find("bad.toml:4"),
            std::string::npos);

  // bad values, each naming its line
  for (const char* bad : {"gemm_efficiency = 75", "gemm_efficiency = 0", "memory_gib = -1",
                          "gpus_per_node = 2.5", "bf16_tflops = fast", "bf16_tflops = 1e999",
                          "confirmed = yes", "source = unquoted", "assumed = [\"a\" \"b\"]",
                          "intra_node_link = \"open", "bf16_tflops = 1", "no equals sign"}) {
    e = parse_error(head + "bf16_tflops = 1\n" + bad + "\n");
    EXPECT_NE(e.find("bad.toml:4"), std::string::npos) << bad << " -> " << e;
  }
  EXPECT_NE(parse_error(head + "bf16_tflops = 1\nbf16_tflops = 2\n").find("set twice"),
            std::string::npos);

  // what a profile needs (no line: the whole file lacks it)
  EXPECT_NE(parse_error("match = []\nbf16_tflops = 1\n").find("needs a name"), std::string::npos);
  EXPECT_NE(parse_error("name = \"x\"\nbf16_tflops = 1\n").find("needs match"), std::string::npos);
  EXPECT_NE(parse_error(head + "memory_gib = 80\n").find("needs a peak"), std::string::npos);
}

TEST(Hardware, FindByStemNameOrPath) {
  TempDir dir;
  HardwareProfile a = parse_hardware_profile(kFull, "");
  a.name = "Big GPU";
  HardwareProfile b = a;
  b.name = "Small GPU";
  b.bf16_tflops = 7;
  dir.write("big-gpu.toml", write_hardware_profile(a, ""));
  const std::string small_path = dir.write("small.toml", write_hardware_profile(b, ""));
  dir.write("notes.txt", "not a profile");  // only *.toml files are profiles

  ASSERT_EQ(load_hardware_profiles(dir.path).size(), 2u);
  EXPECT_EQ(load_hardware_profiles(dir.path)[0].file, dir.path + "/big-gpu.toml");  // sorted
  EXPECT_EQ(find_hardware_profile("big-gpu", dir.path).name, "Big GPU");     // file stem
  EXPECT_EQ(find_hardware_profile("SMALL", dir.path).bf16_tflops, 7);        // case-insensitive
  EXPECT_EQ(find_hardware_profile("small gpu", dir.path).file, small_path);  // name
  EXPECT_EQ(find_hardware_profile(small_path, "no/such/dir").name, "Small GPU");  // a path
  try {
    find_hardware_profile("h100", dir.path);
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--hardware h100"), std::string::npos) << m;
    EXPECT_NE(m.find("big-gpu (Big GPU), small (Small GPU)"), std::string::npos) << m;
  }
  EXPECT_THROW(find_hardware_profile(dir.path + "/missing.toml", kDir), std::runtime_error);
  EXPECT_THROW(find_hardware_profile("h100-sxm", "no/such/dir"), std::runtime_error);
  EXPECT_TRUE(load_hardware_profiles("no/such/dir").empty());

  if (load_hardware_profiles(kDir).empty()) GTEST_SKIP() << "run from the repository root";
  EXPECT_EQ(find_hardware_profile("h100-sxm", kDir).name, "H100 SXM");
  EXPECT_EQ(find_hardware_profile("A100 80GB", kDir).file, "configs/hardware/a100-80gb.toml");
  EXPECT_EQ(find_hardware_profile("configs/hardware/h20.toml", "unused").name, "H20");
}

TEST(Hardware, ShippedProfilesAreComplete) {
  const auto ps = load_hardware_profiles(kDir);
  if (ps.empty()) GTEST_SKIP() << "run from the repository root to read configs/hardware";
  for (const char* stem : {"a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "h20",
                           "rtx4090", "rtx3090", "l40s", "v100", "t4"})
    EXPECT_NO_THROW(find_hardware_profile(stem, kDir)) << stem;
  for (const auto& p : ps) {
    // cpu.toml is the CPU benchmark's measurement (--benchmark-save), not a datasheet file
    if (p.file == std::string(kDir) + "/cpu.toml") continue;
    SCOPED_TRACE(p.file);
    EXPECT_FALSE(p.match.empty());
    // bf16 tensor cores from compute capability 8.0 on (V100 and T4 have fp16 only)
    if (p.compute_capability == 0 || p.compute_capability >= 8.0) {
      EXPECT_GT(p.bf16_tflops, 0);
    } else {
      EXPECT_EQ(p.bf16_tflops, 0);
    }
    EXPECT_GT(p.fp16_tflops, 0);
    // FP8 tensor cores from 8.9 (Ada) and 9.0 (Hopper) on, none before
    if (p.compute_capability >= 8.9) {
      EXPECT_GT(p.fp8_tflops, 0);
    } else if (p.compute_capability > 0) {
      EXPECT_EQ(p.fp8_tflops, 0);
    }
    EXPECT_GT(p.fp32_tflops, 0);
    EXPECT_GT(p.memory_gib, 0);
    EXPECT_GT(p.memory_bandwidth_gbs, 0);
    EXPECT_GT(p.intra_node_gbs, 0);
    EXPECT_GT(p.inter_node_gbs, 0);
    EXPECT_FALSE(p.intra_node_link.empty());
    EXPECT_FALSE(p.source.empty());
    // CPU offload's figures (parallel/offload.h): the link to host memory, the node's RAM and
    // cores, the host AdamW rate (never on a GPU datasheet: an assumption until measured)
    EXPECT_GT(p.pcie_gbs, 0);
    EXPECT_GT(p.pcie_latency_us, 0);
    EXPECT_GT(p.host_memory_gib, 0);
    EXPECT_GT(p.host_cores, 0);
    EXPECT_GT(p.host_adam_params_per_s, 0);
    EXPECT_TRUE(p.is_assumed("host_adam_params_per_s"));
    EXPECT_TRUE(p.is_assumed("pcie_latency_us"));
    // the network is never on a GPU's datasheet
    EXPECT_TRUE(p.is_assumed("inter_node_gbs"));
    for (const char* k : {"launch_overhead_us", "collective_latency_us", "inter_node_latency_us",
                          "gemm_efficiency", "gemm_half_gflop", "attention_efficiency",
                          "memory_efficiency"}) {
      EXPECT_TRUE(p.is_assumed(k)) << k;
    }
    // An unconfirmed profile assumes its datasheet figures too.
    if (!p.confirmed) {
      for (const char* k : {"bf16_tflops", "memory_gib", "memory_bandwidth_gbs", "intra_node_gbs"})
        EXPECT_TRUE(p.is_assumed(k)) << k;
    }
    // Each figure's line says where it comes from: a comment on every `key = value` line but
    // the descriptive ones.
    std::ifstream f(p.file);
    std::string line;
    for (int n = 1; std::getline(f, line); ++n) {
      const bool descriptive = line.rfind("name", 0) == 0 || line.rfind("match", 0) == 0 ||
                               line.rfind("confirmed", 0) == 0 || line.rfind("source", 0) == 0 ||
                               line.rfind("assumed", 0) == 0 ||
                               line.rfind("intra_node_link", 0) == 0;
      if (line.empty() || line[0] == '#' || descriptive) continue;
      EXPECT_NE(line.find('#'), std::string::npos) << "line " << n << " has no source: " << line;
    }
  }
  EXPECT_EQ(find_hardware_profile("a100-40gb", kDir).fp8_tflops, 0);  // Ampere has no FP8
  EXPECT_FALSE(find_hardware_profile("h20", kDir).confirmed);
  EXPECT_EQ(find_hardware_profile("h20", kDir).bf16_tflops, 148);
}

TEST(Hardware, DeviceNamesMatchTheirFiles) {
  const auto ps = load_hardware_profiles(kDir);
  if (ps.empty()) GTEST_SKIP() << "run from the repository root to read configs/hardware";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"NVIDIA A100-SXM4-40GB", "a100-40gb"},   {"NVIDIA A100-PCIE-40GB", "a100-40gb"},
      {"NVIDIA A100-SXM4-80GB", "a100-80gb"},   {"NVIDIA A100 80GB PCIe", "a100-80gb"},
      {"NVIDIA H100 80GB HBM3", "h100-sxm"},    {"NVIDIA H100 PCIe", "h100-pcie"},
      {"NVIDIA H200", "h200"},                  {"NVIDIA H20", "h20"},
      {"NVIDIA GeForce RTX 4090", "rtx4090"},  {"NVIDIA GeForce RTX 3090", "rtx3090"}};
  for (const auto& [gpu, stem] : cases) {
    const HardwareProfile* p = match_hardware_profile(ps, gpu);
    ASSERT_NE(p, nullptr) << gpu;
    EXPECT_EQ(p->file, std::string(kDir) + "/" + stem + ".toml") << gpu;
  }
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA A100-SXM4-40GB")->memory_gib, 40);
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA A100-SXM4-80GB")->memory_gib, 80);
  EXPECT_EQ(match_hardware_profile(ps, "NVIDIA GeForce RTX 3080"), nullptr);
}

TEST(Hardware, GemmSecondsCurve) {
  HardwareProfile p;
  p.name = "curve";
  p.bf16_tflops = 1000;
  p.fp32_tflops = 50;
  p.gemm_efficiency = 0.8;
  p.gemm_half_gflop = 1.0;
  p.memory_bandwidth_gbs = 2000;
  p.launch_overhead_us = 5;
  const double launch = 5e-6;

  // A large GEMM approaches F / (peak x efficiency): 1 PFLOP at 800 TFLOP/s.
  const double big = 1e15;
  EXPECT_NEAR(p.gemm_seconds(big, 0, Precision::BF16), big / (1000e12 * 0.8), 1e-5 * big / 800e12);
  // At F = gemm_half_gflop, half of the large-GEMM efficiency: twice F / (peak x eff).
  EXPECT_NEAR(p.gemm_seconds(1e9, 0, Precision::BF16) - launch, 2 * 1e9 / 800e12, 1e-15);
  // A small one, a vector times a 4096 x 4096 bf16 matrix: bound by its bytes, plus launch.
  const double flops = 2.0 * 4096 * 4096, bytes = 2.0 * 4096 * 4096;
  const double bytes_s = bytes / 2000e9;
  EXPECT_GT(bytes_s, (flops + 1e9) / 800e12);
  EXPECT_DOUBLE_EQ(p.gemm_seconds(flops, bytes, Precision::BF16), bytes_s + launch);
  // No memory bandwidth in the profile: the bytes term is skipped.
  HardwareProfile no_bandwidth = p;
  no_bandwidth.memory_bandwidth_gbs = 0;
  EXPECT_DOUBLE_EQ(no_bandwidth.gemm_seconds(flops, bytes, Precision::BF16),
                   (flops + 1e9) / 800e12 + launch);
  // fp32 training uses the fp32 peak.
  EXPECT_NEAR(p.gemm_seconds(big, 0, Precision::FP32), big / (50e12 * 0.8), 1e-5 * big / 40e12);
  // Monotone in FLOPs and in bytes; the achieved rate rises toward 0.8 of the peak.
  double last_time = 0, last_rate = 0;
  for (double f = 1e6; f <= 1e16; f *= 10) {
    const double t = p.gemm_seconds(f, 1e6, Precision::BF16), rate = f / (t - launch);
    EXPECT_GT(t, last_time) << f;
    EXPECT_GE(rate, last_rate) << f;
    EXPECT_LE(rate, 0.8 * 1000e12) << f;
    last_time = t;
    last_rate = rate;
  }
  for (double b = 1e3; b <= 1e12; b *= 10)
    EXPECT_LE(p.gemm_seconds(1e9, b, Precision::BF16), p.gemm_seconds(1e9, b * 10, Precision::BF16)) << b;
  HardwareProfile no_peak;
  EXPECT_THROW(no_peak.gemm_seconds(1e9, 0, Precision::BF16), std::runtime_error);
}

TEST(Hardware, PeakFallbacksAndSource) {
  HardwareProfile p;
  p.file = "configs/hardware/x.toml";
  p.bf16_tflops = 989;
  p.fp32_tflops = 67;
  EXPECT_EQ(p.peak_tflops(Precision::BF16), 989);
  EXPECT_EQ(p.peak_tflops(Precision::FP32), 67);
  EXPECT_EQ(peak_from_profile(p, Precision::BF16).source, "configs/hardware/x.toml, bf16 dense");
  EXPECT_EQ(peak_from_profile(p, Precision::FP32).source, "configs/hardware/x.toml, fp32 dense");
  p.fp32_tflops = 0;  // fp32 training without an fp32 figure: the bf16 one, said so
  EXPECT_EQ(peak_from_profile(p, Precision::FP32).tflops, 989);
  EXPECT_EQ(peak_from_profile(p, Precision::FP32).source,
            "configs/hardware/x.toml, bf16 dense (no fp32 figure)");
  p.confirmed = false;
  EXPECT_EQ(peak_from_profile(p, Precision::BF16).source, "configs/hardware/x.toml, bf16 dense, unconfirmed");

  HardwareProfile fp16_only;  // built in memory: the name stands for the file
  fp16_only.name = "old card";
  fp16_only.fp16_tflops = 125;
  EXPECT_EQ(peak_from_profile(fp16_only, Precision::BF16).tflops, 125);
  EXPECT_EQ(peak_from_profile(fp16_only, Precision::BF16).source, "old card, fp16 dense (no bf16 figure)");
  // --fp16 takes the fp16 figure, or the bf16 one where only it is stated (the same tensor
  // rate on every NVIDIA part that has both)
  EXPECT_EQ(peak_from_profile(fp16_only, Precision::FP16).source, "old card, fp16 dense");
  p.fp16_tflops = 0;
  EXPECT_EQ(peak_from_profile(p, Precision::FP16).tflops, 989);
  EXPECT_EQ(peak_from_profile(p, Precision::FP16).source,
            "configs/hardware/x.toml, bf16 dense (no fp16 figure), unconfirmed");
  HardwareProfile cpu;  // the CPU benchmark's profile states only fp32
  cpu.fp32_tflops = 0.05;
  EXPECT_EQ(cpu.peak_tflops(Precision::BF16), 0.05);
  EXPECT_NE(peak_from_profile(cpu, Precision::BF16).source.find("fp32 dense (no bf16 figure)"),
            std::string::npos);
}

}  // namespace
}  // namespace paralab
