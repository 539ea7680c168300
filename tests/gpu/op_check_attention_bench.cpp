// tests/gpu/op_check_attention_bench.cpp: op_check's two modes for the tensor-core flash
// attention (kernels/cuda/flash_mma.h) alone: its rows, and its speed. op_check's main hands
// them argv (op_check --attention-check, op_check --attention-bench ...), so the binary the GPU
// pack carries (shared/gpu/pack.sh builds tests/gpu/op_check*.cpp) has them.
//
//   op_check --attention-check
//       op_check's flash-mma rows (tests/gpu/op_check_flash_mma.cpp); exit 1 when one fails,
//       2 without a GPU
//   op_check --attention-bench [--iters N] [--dump DIR] [--seqs 1024,4096,16384]
//       causal bf16 forward and backward at seq S, head dim D 64 and 128, with FlashAttention-2's
//       benchmark shapes: 16384 tokens per batch (B = 16384 / S) and 2048 channels (A = 2048 / D
//       heads, G = A). One JSON line per shape: milliseconds per call (mean of N after 2 warm-up
//       calls; the backward's += accumulates across calls) and TFLOP/s by the usual count,
//       forward 4 D pairs, backward 10 D pairs (2.5 x; the kernels do 14 D: S and dP twice),
//       pairs = B A S (S + 1) / 2. With --dump, a second run at B 1, A 2 writes its inputs and
//       outputs to DIR/S<S>_D<D>_<name>.bin (raw little-endian: bf16 q k v dout o dk dv, fp32
//       lse dq; dq, dk, dv from zero) for bench/gpu/attention.py's fp32 reference.
//
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/flash_mma.h"
#include "tests/gpu/op_check.h"  // check_flash_mma_*, the harness (failures), Device, bf16

namespace {

using kernels::bf16;
using kernels::Device;

struct Buf {  // a device buffer
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t n) : p(kernels::device_malloc(Device::CUDA, n)), bytes(n) {}
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { kernels::device_free(Device::CUDA, p); }
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

std::vector<bf16> random_bf16(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<bf16> x(n);
  for (bf16& e : x) e = kernels::to_bf16(d(rng));
  return x;
}

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void write_file(const std::string& path, const Buf& b) {
  std::vector<char> host(b.bytes);
  kernels::memcpy_to_host(Device::CUDA, host.data(), b.p, b.bytes);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(host.data(), 1, host.size(), f) != host.size())
    throw std::runtime_error("op_check: cannot write " + path);
  std::fclose(f);
}

// One (S, D): times the forward and the backward at the benchmark shape, then (dump) the small
// run whose tensors the Python side checks against fp32.
void bench_shape(int S, int D, int iters, const std::string& dump, std::mt19937& rng) {
  const int B = std::max(1, 16384 / S), A = 2048 / D, G = A;
  const float scale = 1.0f / std::sqrt((float)D);
  const kernels::AttentionBlock blk = kernels::whole_sequence(S, A, D);
  const size_t n = (size_t)B * A * S * D, rows = (size_t)B * A * S;
  Buf q(n * 2), k(n * 2), v(n * 2), o(n * 2), dout(n * 2), lse(rows * 4), dq(n * 4), dk(n * 2),
      dv(n * 2);
  // Timing inputs: windows of one pool of values in [-2, 2), drawn once per size.
  static std::vector<bf16> pool;
  if (pool.size() != n + 4096) pool = random_bf16(n + 4096, -2.0f, 2.0f, rng);
  int shift = 0;
  for (Buf* b : {&q, &k, &v, &dout})
    kernels::memcpy_from_host(Device::CUDA, b->p, pool.data() + 1024 * shift++, n * 2);
  auto forward = [&] {
    if (!kernels::cuda::flash_mma_forward(o.as<bf16>(), lse.as<float>(), q.as<bf16>(),
                                          k.as<bf16>(), v.as<bf16>(), B, A, G, D, scale, 0.0f, 1,
                                          2, blk))
      throw std::runtime_error("flash_mma_forward declined the shape");
  };
  auto backward = [&] {
    if (!kernels::cuda::flash_mma_backward(dq.as<float>(), dk.as<bf16>(), dv.as<bf16>(),
                                           dout.as<bf16>(), q.as<bf16>(), k.as<bf16>(),
                                           v.as<bf16>(), o.as<bf16>(), lse.as<float>(), B, A, G,
                                           D, scale, 0.0f, 1, 2, blk))
      throw std::runtime_error("flash_mma_backward declined the shape");
  };
  auto time_ms = [&](const auto& call) {
    for (int i = 0; i < 2; i++) call();
    kernels::synchronize(Device::CUDA);
    const double t0 = seconds();
    for (int i = 0; i < iters; i++) call();
    kernels::synchronize(Device::CUDA);
    return (seconds() - t0) * 1e3 / iters;
  };
  const double fwd_ms = time_ms(forward), bwd_ms = time_ms(backward);
  const double pairs = (double)B * A * S * (S + 1.0) / 2.0;
  std::printf("{\"impl\": \"paralab\", \"kernel\": \"%s\", \"S\": %d, \"D\": %d, \"B\": %d, "
              "\"A\": %d, \"causal\": true, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
              "\"fwd_tflops\": %.2f, \"bwd_tflops\": %.2f",
              kernels::cuda::flash_mma_name(), S, D, B, A, fwd_ms, bwd_ms,
              4.0 * D * pairs / (fwd_ms * 1e-3) / 1e12, 10.0 * D * pairs / (bwd_ms * 1e-3) / 1e12);
  if (!dump.empty()) {
    // B 1, A 2 (the first two heads' worth of fresh values), dq, dk, dv from zero.
    const int eB = 1, eA = 2;
    const kernels::AttentionBlock eblk = kernels::whole_sequence(S, eA, D);
    const size_t en = (size_t)eB * eA * S * D;
    Buf eq(en * 2), ek(en * 2), ev(en * 2), eo(en * 2), ed(en * 2), el((size_t)eA * S * 4),
        edq(en * 4), edk(en * 2), edv(en * 2);
    for (Buf* b : {&eq, &ek, &ev, &ed}) {
      const std::vector<bf16> x = random_bf16(en, b == &ed ? -1.0f : -2.0f, 2.0f, rng);
      kernels::memcpy_from_host(Device::CUDA, b->p, x.data(), en * 2);
    }
    const bool ok =
        kernels::cuda::flash_mma_forward(eo.as<bf16>(), el.as<float>(), eq.as<bf16>(),
                                         ek.as<bf16>(), ev.as<bf16>(), eB, eA, eA, D, scale, 0.0f,
                                         1, 2, eblk) &&
        kernels::cuda::flash_mma_backward(edq.as<float>(), edk.as<bf16>(), edv.as<bf16>(),
                                          ed.as<bf16>(), eq.as<bf16>(), ek.as<bf16>(),
                                          ev.as<bf16>(), eo.as<bf16>(), el.as<float>(), eB, eA,
                                          eA, D, scale, 0.0f, 1, 2, eblk);
    if (!ok) throw std::runtime_error("flash_mma declined the error run");
    kernels::synchronize(Device::CUDA);
    const std::string prefix = dump + "/S" + std::to_string(S) + "_D" + std::to_string(D);
    const char* names[] = {"q", "k", "v", "dout", "o", "lse", "dq", "dk", "dv"};
    const Buf* bufs[] = {&eq, &ek, &ev, &ed, &eo, &el, &edq, &edk, &edv};
    for (int i = 0; i < 9; i++) write_file(prefix + "_" + names[i] + ".bin", *bufs[i]);
    std::printf(", \"dump\": \"%s\", \"dump_B\": %d, \"dump_A\": %d", prefix.c_str(), eB, eA);
  }
  std::printf("}\n");
  std::fflush(stdout);
}

int usage() {
  std::fprintf(stderr,
               "usage: op_check --attention-check | --attention-bench [--iters N] [--dump DIR] "
               "[--seqs 1024,4096,16384]\n");
  return 2;
}

}  // namespace

namespace op_check {
int attention_main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string mode = argv[1];
  if (!kernels::cuda_compiled() || kernels::cuda_device_count() == 0) {
    std::fprintf(stderr, "op_check: no GPU visible\n");
    return 2;
  }
  if (mode == "--attention-check") {
    std::printf("%-52s %12s %10s   %s\n", "op", "max rel err", "bound", "result");
    op_check::check_flash_mma_whole();
    op_check::check_flash_mma_cp();
    std::printf("op_check --attention-check: %s\n", op_check::failures ? "FAILED" : "all PASS");
    return op_check::failures ? 1 : 0;
  }
  if (mode != "--attention-bench") return usage();
  int iters = 10;
  std::string dump, seqs = "1024,4096,16384";
  for (int i = 2; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--dump" && i + 1 < argc) dump = argv[++i];
    else if (a == "--seqs" && i + 1 < argc) seqs = argv[++i];
    else return usage();
  }
  std::mt19937 rng(20250425);
  std::stringstream list(seqs);
  std::string item;
  try {
    while (std::getline(list, item, ','))
      for (int D : {64, 128}) bench_shape(std::atoi(item.c_str()), D, iters, dump, rng);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "op_check: %s\n", e.what());
    return 1;
  }
  return 0;
}
}  // namespace op_check
