// tests/gpu/op_check.cpp: the GPU self-check. Runs every op of kernels/ops.h on both twins
// (kernels::NAME(Device::CPU, ...) and kernels::NAME(Device::CUDA, ...), through the
// dispatcher) on the same random inputs, and prints one row per op:
//
//   op   max rel err   bound   PASS/FAIL
//
// Error metric, per output tensor: max_i |gpu_i - cpu_i| / max_i |cpu_i| (the largest
// deviation relative to the tensor's scale, so near-zero elements do not blow it up); an op
// with several outputs reports the worst. NaN or Inf on either side is an error of inf.
// Bounds: 1e-4 for elementwise and layout ops (same math.h function, at most a few ulp apart),
// 1e-3 for reductions, GEMM and attention (different summation orders), 0 for bytes and
// masks, 1e-9 for the double-precision sum of squares. Outputs documented as "+=" are seeded
// with the same random values on both sides, and "=" outputs with different ones, so a
// twin that accumulates where it should write (or the reverse) fails.
//
// bf16 storage (rows tagged "bf16"): the checks are templated on the storage type T, and the
// bf16 rows run the ops of ops.h's bf16 section on bf16 inputs (kernels::NAME(Device::CPU,
// bf16...) against kernels::NAME(Device::CUDA, bf16...)). Both twins compute in fp32 from the
// same exactly-widened inputs and round once, so an fp32 difference of an ulp can at most flip
// the last bf16 bit (2^-8 relative): the bound is 1e-2 for every computing op. Ops that only
// move values (conversion, layout without RoPE, masks) must agree bit for bit; fp32 outputs
// of bf16 ops (norm statistics, lse, the logits GEMM, AdamW's master and moments) keep
// their fp32 bounds.
//
// The harness (Twin, the metric, check) is op_check.h; this file holds main and the memory and
// conversion rows, op_check_{dense,attention,loss,moe}.cpp the rest, one op family each. A
// log-sum-exp may hold -inf (a row that sees no key): err_lse requires both twins to agree on
// where.
//
// Each family of rows runs in a process of its own (run_family), so a CUDA error that poisons
// the context, or an exception outside a row, fails that family and the others still run.
// `op_check --jobs N` runs N families at a time, their rows printed in the same order.
// Exit status: 0 when every row passes, 1 otherwise, 2 when no GPU is visible.
// Built and run by scripts/gpu_check.sh.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "tests/gpu/op_check.h"  // defines: the harness (Twin, check, ...) and every check_X

namespace op_check {

void check_memory() {
  check("memory (malloc/copy/memset)", 0.0, [] {
    const size_t n = 1003;
    float* a = (float*)kernels::device_malloc(Device::CUDA, n * sizeof(float));
    float* b = (float*)kernels::device_malloc(Device::CUDA, n * sizeof(float));
    Floats host(n), x = random_floats(n);
    double bad = 0;
    kernels::memcpy_to_host(Device::CUDA, host.data(), a, n * sizeof(float));
    for (float v : host) bad += v != 0.0f;  // device_malloc zero-fills
    kernels::memcpy_from_host(Device::CUDA, a, x.data(), n * sizeof(float));
    kernels::memcpy_device(Device::CUDA, b, a, n * sizeof(float));
    kernels::memcpy_to_host(Device::CUDA, host.data(), b, n * sizeof(float));
    for (size_t i = 0; i < n; i++) bad += host[i] != x[i];
    kernels::memset_zero(Device::CUDA, b, 10 * sizeof(float));
    kernels::synchronize(Device::CUDA);
    kernels::memcpy_to_host(Device::CUDA, host.data(), b, n * sizeof(float));
    for (size_t i = 0; i < n; i++) bad += host[i] != (i < 10 ? 0.0f : x[i]);
    kernels::device_free(Device::CUDA, a);
    kernels::device_free(Device::CUDA, b);
    return bad;
  });
}

// float <-> bf16, bit for bit, on values that exercise the rounding: ties to even (both
// directions), carries into the exponent, overflow to inf, subnormals, signed zeros, NaN.
void check_convert() {
  Floats x = random_floats(4099, -1e3f, 1e3f);
  const float inf = std::numeric_limits<float>::infinity();
  const uint32_t special_bits[] = {0x3F808000u, 0x3F818000u, 0x3F80FFFFu, 0x3F7FFFFFu,
                                   0x7F7FFFFFu, 0x00000001u, 0x00408000u, 0x80000000u,
                                   0x7FC00001u, 0xFF800001u};
  for (uint32_t bits : special_bits) x.push_back(kernels::bits_to_float(bits));
  for (float v : {0.0f, inf, -inf, 1e-40f, -3.0e38f}) x.push_back(v);
  check("convert fp32 -> bf16", 0.0, [&] {
    Twin<float> in(x);
    std::unique_ptr<Twin<bf16>> out(written<bf16>(x.size()));
    kernels::convert(Device::CPU, out->c(), in.c(), x.size());
    kernels::convert(Device::CUDA, out->g(), in.g(), x.size());
    return mismatches(*out);
  });
  check("convert bf16 -> fp32", 0.0, [&] {
    Twin<bf16> in(round_all(x));
    std::unique_ptr<Twin<float>> out(written(x.size()));
    kernels::convert(Device::CPU, out->c(), in.c(), x.size());
    kernels::convert(Device::CUDA, out->g(), in.g(), x.size());
    return mismatches(*out);
  });
}

// float <-> fp16 the same way, on values that reach fp16's own ends: past 65504 (to inf), the
// tie at 65520, subnormals down to 2^-24 and the tie at 2^-25 (to 0), every code widened.
void check_convert_fp16() {
  using kernels::fp16;
  Floats x = random_floats(4099, -7e4f, 7e4f);
  for (float v : {65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f,
                  2.9802326e-08f, 8.940697e-08f, 1e-10f, -0.0f})
    x.push_back(v);
  check("convert fp32 -> fp16", 0.0, [&] {
    Twin<float> in(x);
    std::unique_ptr<Twin<fp16>> out(written<fp16>(x.size()));
    kernels::convert(Device::CPU, out->c(), in.c(), x.size());
    kernels::convert(Device::CUDA, out->g(), in.g(), x.size());
    return mismatches(*out);
  });
  check("convert fp16 -> fp32 (all 65,536 codes)", 0.0, [&] {
    std::vector<fp16> codes(65536);
    for (uint32_t c = 0; c < 65536; ++c) codes[c].bits = (uint16_t)c;
    Twin<fp16> in(codes);
    std::unique_ptr<Twin<float>> out(written(codes.size()));
    kernels::convert(Device::CPU, out->c(), in.c(), codes.size());
    kernels::convert(Device::CUDA, out->g(), in.g(), codes.size());
    return mismatches(*out);
  });
}

// One family of rows in a child process of its own: an exception outside a row, or a CUDA
// error that poisons the context (an illegal or misaligned address is sticky: every later call
// of the process fails; issue 27's grouped GEMM stopped the whole run so), fails that family's
// rows and no other. The parent never touches CUDA (a CUDA context does not survive fork).
// The child writes its rows to `out` (the parent's stdout, or a file the parent prints once
// the family is done). Returns the child's pid.
pid_t start_family(const char* name, void (*family)(), FILE* out) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("op_check: fork failed");
  if (pid == 0) {
    if (out != stdout) dup2(fileno(out), STDOUT_FILENO);
    try {
      family();
    } catch (const std::exception& e) {
      std::printf("%-52s %12s %10s   FAIL  (%s)\n", name, "-", "-", e.what());
      failures++;
    }
    std::fflush(stdout);
    _exit(std::min(failures, 255));
  }
  return pid;
}

// The family's failed rows from its child's exit status (1 at least when it died).
int family_failures(const char* name, int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  std::printf("%-52s %12s %10s   FAIL  (killed by signal %d)\n", name, "-", "-",
              WIFSIGNALED(status) ? WTERMSIG(status) : -1);
  return 1;
}

int run_family(const char* name, void (*family)()) {
  int status = 0;
  waitpid(start_family(name, family, stdout), &status, 0);
  return family_failures(name, status);
}

void gpu_present() {
  if (!kernels::cuda_compiled() || kernels::cuda_device_count() == 0) failures = 1;
}
void embedding_fp32() { check_embedding<float>(3, 41, 96, 50); }
void embedding_bf16() {
  check_embedding<bf16>(3, 41, 96, 50);
  check_embedding<bf16>(4, 150, 300, 50);
}

// The families in order, each in its own process (run_family); a null run is a heading.
// costly: started before the others (the families' rows are still printed in this order). On
// the emulated device these three are 60% of op_check's CPU seconds (OP_CHECK_TIMES=1 on the
// 2-core development machine, 2026-12-06: 35, 13 and 28 s of 124 s); started in their place,
// the tensor-core family (then one family of 50 s) ran alone at the end.
struct Family {
  const char* name;
  void (*run)();
  bool costly = false;
};
const Family kFamilies[] = {
    {"memory", check_memory},
    {"gemm", check_gemm<float>},
    {"elementwise", check_elementwise<float>},
    {"embedding", embedding_fp32},
    {"norms", check_norms<float>},
    {"attention layout", check_attention_layout<float>},
    {"attention naive", check_attention_naive<float>},
    {"flash attention", check_flash_cases<float>},
    {"loss, optimizer", check_loss_optimizer},
    {"moe router", check_moe_router},
    {"moe dispatch", check_moe_dispatch, true},
    {"moe", check_moe<float>},
    {"grouped gemm layouts (fp32 and bf16)", check_gemm_grouped_cases},
    {"---- bf16 storage ----", nullptr},
    {"convert", check_convert},
    {"gemm bf16", check_gemm<bf16>},
    {"elementwise bf16", check_elementwise<bf16>},
    {"embedding bf16", embedding_bf16},
    {"norms bf16", check_norms<bf16>},
    {"attention layout bf16", check_attention_layout<bf16>},
    {"attention naive bf16", check_attention_naive<bf16>},
    {"flash attention bf16", check_flash_cases<bf16>},
    {"flash attention, tensor cores (bf16)", check_flash_mma_whole, true},
    {"flash attention, tensor cores (bf16), cp", check_flash_mma_cp, true},
    {"optimizer bf16", check_optimizer_bf16},
    {"optimizer bf16 moments", check_optimizer_bf16_moments},
    {"moe bf16", check_moe<bf16>},
    {"---- fp8 ----", nullptr},
    {"fp8 cast", check_fp8_cast},
    {"fp8 quantize (fp32 source)", check_fp8_quantize<float>},
    {"fp8 quantize (bf16 source)", check_fp8_quantize<bf16>},
    {"fp8 shard of a weight (fp32 source)", check_fp8_shard<float>},
    {"fp8 shard of a weight (bf16 source)", check_fp8_shard<bf16>},
    {"fp8 scales", check_fp8_scales},
    {"gemm fp8 -> fp32", check_gemm_fp8<float>},
    {"gemm fp8 -> bf16", check_gemm_fp8<bf16>},
    {"---- fp16 storage ----", nullptr},
    {"convert fp16", check_convert_fp16},
    {"gemm fp16", check_gemm<kernels::fp16>},
    {"elementwise fp16", check_elementwise<kernels::fp16>},
    {"norms fp16", check_norms<kernels::fp16>},
    {"attention layout fp16", check_attention_layout<kernels::fp16>},
    {"attention naive fp16", check_attention_naive<kernels::fp16>},
    {"flash attention fp16", check_flash_cases<kernels::fp16>},
};

// OP_CHECK_TIMES=1: each family's CPU seconds (its child's user + system time, which the
// machine's load does not change) on stderr after the rows, the costliest first: what to look
// at when CI's time grows.
void print_family_times(const std::vector<double>& seconds) {
  if (std::getenv("OP_CHECK_TIMES") == nullptr) return;
  std::vector<size_t> order;
  for (size_t i = 0; i < seconds.size(); i++)
    if (kFamilies[i].run != nullptr) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return seconds[a] > seconds[b]; });
  for (size_t i : order) std::fprintf(stderr, "%8.1f s  %s\n", seconds[i], kFamilies[i].name);
}

// Every family, `jobs` at a time, each child's rows kept in a file of its own and printed in
// the families' order as soon as those before it are done: the output is the same whatever
// `jobs` is. Several at a time suit the emulated device (each family runs on one CPU core; a
// 2-core machine halves op_check's time); on a GPU, one at a time (the default). The costly
// families start first (longest first: the others then fill the cores around them).
int run_families(int jobs) {
  const size_t n = sizeof(kFamilies) / sizeof(kFamilies[0]);
  std::vector<size_t> launch;
  for (bool costly : {true, false})
    for (size_t i = 0; i < n; i++)
      if (kFamilies[i].costly == costly) launch.push_back(i);
  std::vector<FILE*> rows(n, nullptr);
  std::vector<pid_t> pid(n, 0);
  std::vector<int> status(n, 0);
  std::vector<bool> done(n, false);
  std::vector<double> cpu_seconds(n, 0.0);
  size_t next = 0, printed = 0;
  int running = 0, failed = 0;
  while (printed < n) {
    for (; next < n && running < jobs; next++) {
      const size_t i = launch[next];
      const Family& f = kFamilies[i];
      if (f.run == nullptr) { done[i] = true; continue; }
      rows[i] = std::tmpfile();
      if (rows[i] == nullptr) throw std::runtime_error("op_check: tmpfile failed");
      pid[i] = start_family(f.name, f.run, rows[i]);
      running++;
    }
    for (; printed < n && done[printed]; printed++) {  // the finished prefix, in order
      const Family& f = kFamilies[printed];
      if (f.run == nullptr) { std::printf("%s\n", f.name); continue; }
      std::rewind(rows[printed]);
      char buffer[4096];
      for (size_t got; (got = std::fread(buffer, 1, sizeof buffer, rows[printed])) > 0;)
        std::fwrite(buffer, 1, got, stdout);
      std::fclose(rows[printed]);
      failed += family_failures(f.name, status[printed]);
      std::fflush(stdout);
    }
    if (running == 0) continue;
    int child_status = 0;
    rusage usage{};
    const pid_t child = wait4(-1, &child_status, 0, &usage);
    for (size_t i = 0; i < n; i++)
      if (pid[i] == child && !done[i]) {
        status[i] = child_status;
        done[i] = true;
        running--;
        cpu_seconds[i] = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
                         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
      }
  }
  print_family_times(cpu_seconds);
  return failed;
}

}  // namespace op_check

using namespace op_check;

int main(int argc, char** argv) {
  // op_check --kernel-table: the emulated device's counters and projection of the tensor-core
  // flash attention (tests/gpu/op_check_kernel_table.cpp)
  if (argc > 1 && std::string(argv[1]) == "--kernel-table") return kernel_table_main(argc, argv);
  // op_check --lane-map: which lane holds which element of S, P and O (op_check_lane_map.cpp)
  if (argc > 1 && std::string(argv[1]) == "--lane-map") return lane_map_main();
  // op_check --attention-check | --attention-bench ...: the tensor-core flash attention alone
  // (tests/gpu/op_check_attention_bench.cpp)
  // op_check --jobs N: N families at a time (run_families)
  int jobs = 1;
  if (argc == 3 && std::string(argv[1]) == "--jobs") {
    jobs = std::atoi(argv[2]);
    if (jobs < 1) {
      std::fprintf(stderr, "op_check: --jobs must be a whole number >= 1, got '%s'\n", argv[2]);
      return 2;
    }
  } else if (argc > 1) {
    return attention_main(argc, argv);
  }
  if (run_family("a GPU", gpu_present) != 0) {  // asked in a child: no context here
    std::fprintf(stderr, "op_check: no GPU visible (cuda_compiled=%d)\n",
                 (int)kernels::cuda_compiled());
    return 2;
  }
  std::printf("op_check: CUDA twin vs CPU twin, error = max|gpu - cpu| / max|cpu| per output\n");
  std::printf("%-52s %12s %10s   %s\n", "op", "max rel err", "bound", "result");
  const int failed = run_families(jobs);
  if (failed > 0) {
    std::printf("op_check: %d FAILED\n", failed);
    return 1;
  }
  std::printf("op_check: all PASS\n");
  return 0;
}
