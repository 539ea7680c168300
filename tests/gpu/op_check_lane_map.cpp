// tests/gpu/op_check_lane_map.cpp: op_check --lane-map, which lane of a warp holds which
// element of S, P and O while the tensor-core flash forward (kernels/cuda/flash_mma_forward.cu)
// runs one tile on the emulated device. The emulator records every mma.sync of warp 0 of block
// 0 (each lane's A, B, C, D registers: emu::trace_mma); this reads the warp's 16 query rows
// against the first 64 keys back out of them with the PTX ISA's tables (tests/ptx_isa_tables.h)
// and checks each value against the host's own product:
//   S = Q K^T    the D fragments of the last mma of each n-tile of the score loop
//   P            the A fragments of P V's mmas: the probabilities, rounded to bf16, in the same
//                lanes as S held them (FlashAttention-2's register trick: no data moves)
//   O = P V      the D fragments of the last mma of each n-tile of the output loop (before the
//                1/l scaling)
// One head, 64 rows, head dim 64, not causal (every score unmasked). Needs the emulated build.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/flash_mma.h"
#include "kernels/emulator/kernel_counters.h"
#include "tests/gpu/op_check.h"
#include "tests/ptx_isa_tables.h"

namespace op_check {

#if defined(PARALAB_EMULATED)
namespace {

constexpr int S = 64, D = 64;

float widen(kernels::bf16 x) { return kernels::to_float(x); }
float half_of(uint32_t r, int h) { return kernels::bits_to_float((h ? r >> 16 : r & 0xffffu) << 16); }

// Prints a 16-row map: the lane holding element (row, col) for cols [0, 16) (the pattern
// repeats every 8 columns).
void print_map(const char* title, int lanes[16][16]) {
  std::printf("%s\n        ", title);
  for (int c = 0; c < 16; c++) std::printf("%3d", c);
  std::printf("\n");
  for (int r = 0; r < 16; r++) {
    std::printf("row %2d  ", r);
    for (int c = 0; c < 16; c++) std::printf("%3d", lanes[r][c]);
    std::printf("\n");
  }
}

}  // namespace
#endif

int lane_map_main() {
#if !defined(PARALAB_EMULATED)
  std::fprintf(stderr, "op_check --lane-map: the registers are read by the emulated device: run "
                       "build/emulated/op_check (make emulated)\n");
  return 2;
#else
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<kernels::bf16> q(S * D), k(S * D), v(S * D);
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = kernels::to_bf16(u(gen));
  kernels::AttentionBlock blk = kernels::whole_sequence(S, 1, D);
  blk.causal = false;
  Twin<kernels::bf16> tq(q), tk(k), tv(v), to(std::vector<kernels::bf16>(S * D));
  Twin<float> tl{std::vector<float>(S)};
  const float scale = 1.0f / std::sqrt((float)D);
  emu::trace_mma(true);
  const bool ran = kernels::cuda::flash_mma_forward(to.g(), tl.g(), tq.g(), tk.g(), tv.g(), 1, 1, 1,
                                                    D, scale, 0.0f, 1, 2, blk);
  kernels::synchronize(Device::CUDA);
  emu::trace_mma(false);
  const std::vector<emu::MmaTrace> t = emu::mma_traces();
  // warp 0: D/16 x 8 score mmas, then 64/16 x D/16 x 2 output mmas
  const size_t score_mmas = D / 16 * 8, output_mmas = 4 * D / 16 * 2;
  if (!ran || t.size() != score_mmas + output_mmas) {
    std::fprintf(stderr, "op_check --lane-map: expected %zu mma of warp 0, saw %zu\n",
                 score_mmas + output_mmas, t.size());
    return 1;
  }
  // The host's S, P (this tile alone: m the row's max, P = 2^(c (s - m)) rounded to bf16), O.
  double s_host[16][S], p_host[16][S], o_host[16][D];
  const double c = scale * 1.4426950408889634;
  for (int i = 0; i < 16; i++) {
    double m = -1e30;
    for (int j = 0; j < S; j++) {
      double dot = 0;
      for (int x = 0; x < D; x++) dot += (double)widen(q[i * D + x]) * widen(k[j * D + x]);
      s_host[i][j] = dot;
      m = std::max(m, dot);
    }
    for (int j = 0; j < S; j++)
      p_host[i][j] = kernels::to_float(kernels::to_bf16((float)std::exp2(c * (s_host[i][j] - m))));
    for (int x = 0; x < D; x++) {
      double o = 0;
      for (int j = 0; j < S; j++) o += p_host[i][j] * widen(v[j * D + x]);
      o_host[i][x] = o;
    }
  }
  int s_lane[16][16], p_lane[16][16], o_lane[16][16];
  double worst = 0;
  auto seen = [&](double got, double want) {
    worst = std::max(worst, std::fabs(got - want) / std::max(1.0, std::fabs(want)));
  };
  for (int lane = 0; lane < 32; lane++) {
    for (int nt = 0; nt < S / 8; nt++)  // S: the last k-chunk's mma of n-tile nt
      for (int e = 0; e < 4; e++) {
        const ptx_isa::Coord at = ptx_isa::c(lane, e);
        seen(t[score_mmas - 8 + nt].d[lane][e], s_host[at.row][8 * nt + at.col]);
        if (nt < 2) s_lane[at.row][8 * nt + at.col] = lane;
      }
    for (int kt = 0; kt < S / 16; kt++)  // P: the A operand of the first mma of key block kt
      for (int e = 0; e < 8; e++) {
        const ptx_isa::Coord at = ptx_isa::a(lane, e);
        const float got = half_of(t[score_mmas + kt * (D / 16) * 2].a[lane][e / 2], e % 2);
        seen(got, p_host[at.row][16 * kt + at.col]);
        if (kt == 0) p_lane[at.row][at.col] = lane;
      }
    for (int nt = 0; nt < D / 8; nt++)  // O: the last key block's mma of n-tile nt
      for (int e = 0; e < 4; e++) {
        const ptx_isa::Coord at = ptx_isa::c(lane, e);
        seen(t[score_mmas + 3 * (D / 16) * 2 + nt].d[lane][e], o_host[at.row][8 * nt + at.col]);
        if (nt < 2) o_lane[at.row][8 * nt + at.col] = lane;
      }
  }
  std::printf("the tensor-core flash forward, one tile on the emulated device: warp 0's 16 query "
              "rows x 64 keys, head dim 64 (flash_mma_forward.cu; the lanes read from its mma.sync "
              "registers)\n\n");
  print_map("S = Q K^T (16 x 64): the lane holding each element, keys 0..15", s_lane);
  print_map("\nP (16 x 16 block of keys 0..15), the A operand of O += P V: the lane holding each",
            p_lane);
  print_map("\nO (16 x 64): the lane holding each element, channels 0..15", o_lane);
  bool same = true;  // FlashAttention-2's register trick, checked on the maps
  for (int r = 0; r < 16; r++)
    for (int col = 0; col < 16; col++)
      same = same && s_lane[r][col] == 4 * (r % 8) + (col % 8) / 2 &&
             p_lane[r][col] == s_lane[r][col] && o_lane[r][col] == s_lane[r][col];
  std::printf("\nthe same lane holds S(r, c), P(r, c) and O(r, c), lane 4 (r mod 8) + (c mod 8) / 2: "
              "%s; S, P and O equal the host's Q K^T, 2^(c (s - max)) and P V to %.1e "
              "(relative)\n",
              same ? "yes" : "NO", worst);
  return worst < 1e-2 && same ? 0 : 1;
#endif
}

}  // namespace op_check
