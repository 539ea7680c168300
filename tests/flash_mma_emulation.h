// tests/flash_mma_emulation.h: the three tensor-core flash attention kernels
// (kernels/cuda/flash_mma_forward.cu, flash_mma_backward.cu) emulated on the CPU, warp by warp,
// for tests/test_flash_mma_kernels.cpp.
//
// Each function follows its kernel step for step with the emulated warp of
// tests/flash_mma_warp.h (ldmatrix, mma.m16n8k16, the quad shuffles, bf16 packing): the same tile
// sizes, tile ranges, warp skips and masks (kernels/cuda/flash_mma_tiles.h), the same lane
// addresses and fragment coordinates (mma_layout.h), the same online softmax in base 2 and the
// same keep bits; buffers are bf16 bits (uint16_t) and floats at the kernels' pointers and
// views. The warps of a block share only read-only shared tiles between barriers, so running
// them one after another is exact; the cp.async pipeline is not emulated (each tile is loaded
// when used, into the stage the kernel would use).
//
// defines: flash_mma_test::{Call, emulate_forward, emulate_delta, emulate_dq, emulate_dkdv}
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/flash_mma_tiles.h"
#include "kernels/cuda/mma_layout.h"
#include "kernels/math.h"
#include "tests/flash_mma_warp.h"

namespace flash_mma_test {

using kernels::AttentionBlock;
namespace fm = kernels::cuda::flash_mma;
namespace mma = kernels::mma;
using Lanes = std::array<float, 32>;

struct Call {  // the arguments of flash_mma_forward / _backward besides the buffers
  int B, A, G, D;
  float scale, p;
  uint64_t seed, stream;
  AttentionBlock blk;
};

// load_rows_async: rows row0 .. row0 + ROWS - 1 of a head into a tile at dst0, zero past `rows`.
inline void load_rows(Bits& sm, size_t dst0, const uint16_t* head, int row0, int rows, int ROWS,
                      int D) {
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < D; c++)
      sm[dst0 + (size_t)r * (D + fm::kPad) + c] =
          row0 + r < rows ? head[(size_t)(row0 + r) * D + c] : 0;
}
// Fragments of `rows` (an A operand from shared rows r0 .. r0 + 15, channel block kk).
inline Regs a_frag(const Bits& sm, size_t r0, int kk, int stride) {
  return ldsm_x4(sm, [&](int l) {
    return (r0 + mma::ldsm_a(l).row) * stride + 16 * kk + mma::ldsm_a(l).col;
  }, false);
}
inline Regs b_frag(const Bits& sm, size_t r0, int kk, int stride) {
  return ldsm_x4(sm, [&](int l) {
    return (r0 + mma::ldsm_b(l).row) * stride + 16 * kk + mma::ldsm_b(l).col;
  }, false);
}
inline Regs bt_frag(const Bits& sm, size_t r0, int dp, int stride) {
  return ldsm_x4(sm, [&](int l) {
    return (r0 + mma::ldsm_bt(l).row) * stride + 16 * dp + mma::ldsm_bt(l).col;
  }, true);
}
// rows_times_rows_t: C (16 x 8NT) = A rows a0.. (16 x D) times B rows b0.. (8NT x D) transposed.
inline std::vector<Acc> rows_times_rows_t(const Bits& sa, size_t a0, const Bits& sb, size_t b0,
                                          int NT, int D) {
  std::vector<Acc> acc(NT, Acc{});
  for (int kk = 0; kk < D / 16; kk++) {
    const Regs af = a_frag(sa, a0, kk, D + fm::kPad);
    for (int np = 0; np < NT / 2; np++) {
      const Regs bfr = b_frag(sb, b0 + 16 * np, kk, D + fm::kPad);
      mma_x(acc[2 * np], af, bfr, 0);
      mma_x(acc[2 * np + 1], af, bfr, 2);
    }
  }
  return acc;
}
// regs_times_rows: acc (16 x D) += X (16 x 8NT, rounded to bf16) times rows y0.. (8NT x D).
inline void regs_times_rows(std::vector<Acc>& acc, const std::vector<Acc>& x, const Bits& sy,
                            size_t y0, int D) {
  for (int kt = 0; kt < (int)x.size() / 2; kt++) {
    const Regs xf = c_to_a_regs(x[2 * kt], x[2 * kt + 1]);
    for (int dp = 0; dp < D / 16; dp++) {
      const Regs yf = bt_frag(sy, y0 + 16 * kt, dp, D + fm::kPad);
      mma_x(acc[2 * dp], xf, yf, 0);
      mma_x(acc[2 * dp + 1], xf, yf, 2);
    }
  }
}
// keep_bits of flash_mma.cuh: bit 4 nt + e of a lane, rows = queries.
inline uint32_t keep_bits(const Call& a, int b, int h, const int (&row)[2], int k0, int lane) {
  uint32_t keep = 0;
  for (int bit = 0; bit < 32; bit++) {
    const mma::Coord at = mma::c_coord(lane, bit & 3);
    const int i = at.row < 8 ? row[0] : row[1], j = k0 + 8 * (bit >> 2) + at.col;
    keep |= (uint32_t)kernels::dropout_keep(a.seed, a.stream, a.blk.dropout_index(b, h, i, j), a.p)
            << bit;
  }
  return keep;
}
inline bool kept(uint32_t keep, int nt, int e) { return (keep >> (4 * nt + e)) & 1u; }

// ---- forward_kernel ---------------------------------------------------------------------------
inline void emulate_forward(uint16_t* o, float* lse, const uint16_t* q, const uint16_t* k,
                            const uint16_t* v, const Call& a) {
  const int D = a.D, kBr = fm::Fwd<64>::kBr, kBc = fm::Fwd<64>::kBc, kStride = D + fm::kPad;
  const AttentionBlock& blk = a.blk;
  const int Sq = blk.q.rows, Sk = blk.k.rows;
  const float c = a.scale * fm::kLog2e, kept_scale = 1.0f / (1.0f - a.p);
  Bits sQ((size_t)kBr * kStride), sK((size_t)2 * kBc * kStride), sV((size_t)2 * kBc * kStride);
  for (int b = 0; b < a.B; b++)
    for (int h = 0; h < a.A; h++)
      for (int qt = 0; qt * kBr < Sq; qt++) {
        const int q0 = qt * kBr;
        const size_t bh = (size_t)b * a.A + h, bg = (size_t)b * a.G + h / (a.A / a.G);
        const uint16_t *Qh = q + bh * blk.q.head_stride, *Kh = k + bg * blk.k.head_stride,
                       *Vh = v + bg * blk.k.head_stride;
        const int key_tiles = (blk.visible(std::min(q0 + kBr, Sq) - 1) + kBc - 1) / kBc;
        load_rows(sQ, 0, Qh, q0, Sq, kBr, D);
        struct Warp {
          std::vector<Regs> qf;
          std::vector<Acc> acc;
          Lanes m[2], l[2];
          int row[32][2], row_keys[32][2];
          int w0, first, keys;
        };
        std::vector<Warp> W(fm::kWarps);
        for (int w = 0; w < fm::kWarps; w++) {
          Warp& x = W[w];
          x.w0 = q0 + 16 * w;
          x.first = blk.visible(std::min(x.w0, Sq - 1));
          x.keys = x.w0 < Sq ? blk.visible(std::min(x.w0 + 15, Sq - 1)) : 0;
          for (int lane = 0; lane < 32; lane++)
            for (int hf = 0; hf < 2; hf++) {
              x.row[lane][hf] = x.w0 + mma::group_of(lane) + 8 * hf;
              x.row_keys[lane][hf] = blk.visible(std::min(x.row[lane][hf], Sq - 1));
              x.m[hf][lane] = -INFINITY;
              x.l[hf][lane] = 0.0f;
            }
          for (int kk = 0; kk < D / 16; kk++) x.qf.push_back(a_frag(sQ, 16 * w, kk, kStride));
          x.acc.assign(D / 8, Acc{});
        }
        for (int t = 0; t < key_tiles; t++) {
          const int k0 = t * kBc, stage = t & 1;
          load_rows(sK, (size_t)stage * kBc * kStride, Kh, k0, Sk, kBc, D);
          load_rows(sV, (size_t)stage * kBc * kStride, Vh, k0, Sk, kBc, D);
          for (int w = 0; w < fm::kWarps; w++) {
            Warp& x = W[w];
            if (!(k0 < x.keys)) continue;
            uint32_t keep[32];
            for (int lane = 0; lane < 32; lane++)
              keep[lane] = a.p > 0.0f ? keep_bits(a, b, h, x.row[lane], k0, lane) : 0xffffffffu;
            std::vector<Acc> s(kBc / 8, Acc{});
            for (int kk = 0; kk < D / 16; kk++)
              for (int np = 0; np < kBc / 16; np++) {
                const Regs kf = b_frag(sK, (size_t)stage * kBc + 16 * np, kk, kStride);
                mma_x(s[2 * np], x.qf[kk], kf, 0);
                mma_x(s[2 * np + 1], x.qf[kk], kf, 2);
              }
            if (fm::tile_needs_mask(k0, kBc, x.first, x.w0, 16, Sq))
              for (int nt = 0; nt < kBc / 8; nt++)
                for (int lane = 0; lane < 32; lane++)
                  for (int e = 0; e < 4; e++)
                    if (k0 + 8 * nt + mma::c_coord(lane, e).col >= x.row_keys[lane][e >> 1])
                      s[nt][lane][e] = -INFINITY;
            for (int hf = 0; hf < 2; hf++) {
              Lanes mx = x.m[hf];
              for (int lane = 0; lane < 32; lane++)
                for (int nt = 0; nt < kBc / 8; nt++)
                  mx[lane] = std::fmax(mx[lane],
                                       std::fmax(s[nt][lane][2 * hf], s[nt][lane][2 * hf + 1]));
              mx = quad(mx, [](float u, float z) { return std::fmax(u, z); });
              for (int lane = 0; lane < 32; lane++) {
                const float cm = mx[lane] == -INFINITY ? 0.0f : c * mx[lane];
                const float corr = std::exp2(c * x.m[hf][lane] - cm);
                x.m[hf][lane] = mx[lane];
                float sum = 0.0f;
                for (int nt = 0; nt < kBc / 8; nt++)
                  for (int e = 2 * hf; e < 2 * hf + 2; e++) {
                    s[nt][lane][e] = std::exp2(std::fma(s[nt][lane][e], c, -cm));
                    sum += s[nt][lane][e];
                  }
                x.l[hf][lane] = x.l[hf][lane] * corr + sum;
                for (int dt = 0; dt < D / 8; dt++) {
                  x.acc[dt][lane][2 * hf] *= corr;
                  x.acc[dt][lane][2 * hf + 1] *= corr;
                }
              }
            }
            for (int nt = 0; nt < kBc / 8; nt++)
              for (int lane = 0; lane < 32; lane++)
                for (int e = 0; e < 4; e++)
                  if (!kept(keep[lane], nt, e)) s[nt][lane][e] = 0.0f;
            regs_times_rows(x.acc, s, sV, (size_t)stage * kBc, D);
          }
        }
        for (int w = 0; w < fm::kWarps; w++) {
          Warp& x = W[w];
          for (int hf = 0; hf < 2; hf++) {
            const Lanes sum = quad(x.l[hf], [](float u, float z) { return u + z; });
            for (int lane = 0; lane < 32; lane++) {
              const int i = x.row[lane][hf];
              if (i >= Sq) continue;
              const float inv = sum[lane] > 0.0f ? kept_scale / sum[lane] : 0.0f;
              uint16_t* o_row = o + bh * blk.q.head_stride + (size_t)i * D;
              for (int dt = 0; dt < D / 8; dt++) {
                const int col = 8 * dt + 2 * mma::tig_of(lane);
                o_row[col] = bf(x.acc[dt][lane][2 * hf] * inv);
                o_row[col + 1] = bf(x.acc[dt][lane][2 * hf + 1] * inv);
              }
              if (mma::tig_of(lane) == 0)
                lse[bh * (blk.q.head_stride / D) + i] =
                    sum[lane] > 0.0f ? a.scale * x.m[hf][lane] + std::log(sum[lane]) : -INFINITY;
            }
          }
        }
      }
}

// ---- delta_kernel, dq_kernel -------------------------------------------------------------------
inline std::vector<float> emulate_delta(const uint16_t* dout, const uint16_t* o, const Call& a) {
  const int Sq = a.blk.q.rows, D = a.D;
  std::vector<float> delta((size_t)a.B * a.A * Sq);
  for (size_t r = 0; r < delta.size(); r++) {
    const size_t at = (r / Sq) * a.blk.q.head_stride + (r % Sq) * D;
    float s = 0.0f;
    for (int col = 0; col < D; col++) s += fl(dout[at + col]) * fl(o[at + col]);
    delta[r] = s;
  }
  return delta;
}

inline void emulate_dq(float* dq, const uint16_t* dout, const uint16_t* q, const uint16_t* k,
                       const uint16_t* v, const float* lse, const float* delta, const Call& a) {
  const int D = a.D, kBr = fm::Dq<64>::kBr, kBc = fm::Dq<64>::kBc, kStride = D + fm::kPad;
  const AttentionBlock& blk = a.blk;
  const int Sq = blk.q.rows, Sk = blk.k.rows;
  const float c = a.scale * fm::kLog2e, kept_scale = 1.0f / (1.0f - a.p);
  Bits sQ((size_t)kBr * kStride), sdO((size_t)kBr * kStride), sK((size_t)2 * kBc * kStride),
      sV((size_t)2 * kBc * kStride);
  for (int b = 0; b < a.B; b++)
    for (int h = 0; h < a.A; h++)
      for (int qt = 0; qt * kBr < Sq; qt++) {
        const int q0 = qt * kBr;
        const size_t bh = (size_t)b * a.A + h, bg = (size_t)b * a.G + h / (a.A / a.G);
        const int key_tiles = (blk.visible(std::min(q0 + kBr, Sq) - 1) + kBc - 1) / kBc;
        load_rows(sQ, 0, q + bh * blk.q.head_stride, q0, Sq, kBr, D);
        load_rows(sdO, 0, dout + bh * blk.q.head_stride, q0, Sq, kBr, D);
        for (int w = 0; w < fm::kWarps; w++) {
          const int w0 = q0 + 16 * w;
          const int first = blk.visible(std::min(w0, Sq - 1));
          const int keys = w0 < Sq ? blk.visible(std::min(w0 + 15, Sq - 1)) : 0;
          int row[32][2], row_keys[32][2];
          float lse2[32][2], dl[32][2];
          for (int lane = 0; lane < 32; lane++)
            for (int hf = 0; hf < 2; hf++) {
              const int i = row[lane][hf] = w0 + mma::group_of(lane) + 8 * hf;
              row_keys[lane][hf] = i < Sq ? blk.visible(i) : 0;
              const size_t at = bh * (blk.q.head_stride / D) + i;
              lse2[lane][hf] = row_keys[lane][hf] > 0 ? lse[at] * fm::kLog2e : 0.0f;
              dl[lane][hf] = i < Sq ? delta[bh * Sq + i] : 0.0f;
            }
          std::vector<Acc> acc(D / 8, Acc{});
          for (int t = 0; t < key_tiles; t++) {  // the warps share nothing but the loaded tiles
            const int k0 = t * kBc, stage = t & 1;
            const size_t tile0 = (size_t)stage * kBc * kStride;
            load_rows(sK, tile0, k + bg * blk.k.head_stride, k0, Sk, kBc, D);
            load_rows(sV, tile0, v + bg * blk.k.head_stride, k0, Sk, kBc, D);
            if (!(k0 < keys)) continue;
            std::vector<Acc> s = rows_times_rows_t(sQ, 16 * w, sK, (size_t)stage * kBc, 8, D);
            const std::vector<Acc> dp =
                rows_times_rows_t(sdO, 16 * w, sV, (size_t)stage * kBc, 8, D);
            const bool mask = fm::tile_needs_mask(k0, kBc, first, w0, 16, Sq);
            for (int lane = 0; lane < 32; lane++) {
              const uint32_t keep = a.p > 0.0f ? keep_bits(a, b, h, row[lane], k0, lane) : ~0u;
              for (int nt = 0; nt < 8; nt++)
                for (int e = 0; e < 4; e++) {
                  const int hf = e >> 1, j = k0 + 8 * nt + mma::c_coord(lane, e).col;
                  const float p = !mask || j < row_keys[lane][hf]
                                      ? std::exp2(std::fma(s[nt][lane][e], c, -lse2[lane][hf]))
                                      : 0.0f;
                  const float z = kept(keep, nt, e) ? kept_scale : 0.0f;
                  s[nt][lane][e] = p * (dp[nt][lane][e] * z - dl[lane][hf]);
                }
            }
            regs_times_rows(acc, s, sK, (size_t)stage * kBc, D);
          }
          for (int lane = 0; lane < 32; lane++)
            for (int hf = 0; hf < 2; hf++) {
              if (row[lane][hf] >= Sq) continue;
              float* dq_row = dq + bh * blk.q.head_stride + (size_t)row[lane][hf] * D;
              for (int dt = 0; dt < D / 8; dt++) {
                const int col = 8 * dt + 2 * mma::tig_of(lane);
                dq_row[col] += a.scale * acc[dt][lane][2 * hf];
                dq_row[col + 1] += a.scale * acc[dt][lane][2 * hf + 1];
              }
            }
        }
      }
}

// ---- dkdv_kernel (parts: Dkv<D>::kParts, 2 on sm_90 at D 128, 4 on sm_80) ---------------------
inline void emulate_dkdv(uint16_t* dk, uint16_t* dv, const uint16_t* dout, const uint16_t* q,
                         const uint16_t* k, const uint16_t* v, const float* lse, const float* delta,
                         const Call& a, int parts) {
  const int D = a.D, kBc = fm::Dkv<64>::kBc, kBr = fm::Dkv<64>::kBr, kStride = D + fm::kPad;
  const AttentionBlock& blk = a.blk;
  const int Sq = blk.q.rows, Sk = blk.k.rows, hpg = a.A / a.G;
  const float c = a.scale * fm::kLog2e, kept_scale = 1.0f / (1.0f - a.p);
  Bits sK((size_t)kBc * kStride), sV((size_t)kBc * kStride), sQ((size_t)2 * kBr * kStride),
      sdO((size_t)2 * kBr * kStride);
  float sLse2[2][fm::Dkv<64>::kBr], sDelta[2][fm::Dkv<64>::kBr];
  int sKeys[2][fm::Dkv<64>::kBr];
  for (int b = 0; b < a.B; b++)
    for (int g = 0; g < a.G; g++)
      for (int kt = 0; kt * kBc < Sk; kt++) {
        const int k0 = kt * kBc;
        const size_t bg = (size_t)b * a.G + g;
        const int first = fm::first_query_seeing(blk, k0);
        if (first >= Sq) continue;
        const int qt_first = first / kBr, per_head = (Sq + kBr - 1) / kBr - qt_first;
        load_rows(sK, 0, k + bg * blk.k.head_stride, k0, Sk, kBc, D);
        load_rows(sV, 0, v + bg * blk.k.head_stride, k0, Sk, kBc, D);
        std::vector<std::vector<Acc>> acc_k(fm::kWarps, std::vector<Acc>(D / 8, Acc{})),
            acc_v = acc_k;
        for (int s = 0; s < hpg * per_head; s++) {
          const int stage = s & 1;
          const int h = g * hpg + s / per_head, q0 = (qt_first + s % per_head) * kBr;
          const size_t bh = (size_t)b * a.A + h;
          load_rows(sQ, (size_t)stage * kBr * kStride, q + bh * blk.q.head_stride, q0, Sq, kBr, D);
          load_rows(sdO, (size_t)stage * kBr * kStride, dout + bh * blk.q.head_stride, q0, Sq, kBr,
                    D);
          for (int r = 0; r < kBr; r++) {
            const int i = q0 + r, n = i < Sq ? blk.visible(i) : 0;
            sKeys[stage][r] = n;
            sLse2[stage][r] = n > 0 ? lse[bh * (blk.q.head_stride / D) + i] * fm::kLog2e : 0.0f;
            sDelta[stage][r] = i < Sq ? delta[bh * Sq + i] : 0.0f;
          }
          const int n_first = blk.visible(q0), n_last = blk.visible(std::min(q0 + kBr, Sq) - 1);
          for (int w = 0; w < fm::kWarps; w++) {
            const int kw0 = k0 + 16 * w;
            if (!(kw0 < n_last)) continue;
            uint32_t keep[32];
            for (int lane = 0; lane < 32; lane++) {
              keep[lane] = a.p > 0.0f ? 0u : ~0u;
              if (a.p > 0.0f)
                for (int bit = 0; bit < 32; bit++) {
                  const mma::Coord at = mma::c_coord(lane, bit & 3);
                  const uint64_t index =
                      blk.dropout_index(b, h, q0 + 8 * (bit >> 2) + at.col, kw0 + at.row);
                  keep[lane] |=
                      (uint32_t)kernels::dropout_keep(a.seed, a.stream, index, a.p) << bit;
                }
            }
            const bool mask = fm::tile_needs_mask(kw0, 16, n_first, q0, kBr, Sq);
            const int NT = 8 / parts;
            for (int part = 0; part < parts; part++) {
              const int c0 = 8 * NT * part;
              const size_t qrow = (size_t)stage * kBr + c0;
              std::vector<Acc> st = rows_times_rows_t(sK, 16 * w, sQ, qrow, NT, D);
              std::vector<Acc> dpt = rows_times_rows_t(sV, 16 * w, sdO, qrow, NT, D);
              for (int nt = 0; nt < NT; nt++)
                for (int lane = 0; lane < 32; lane++)
                  for (int e = 0; e < 4; e++) {
                    const mma::Coord at = mma::c_coord(lane, e);
                    const int j = kw0 + at.row, il = c0 + 8 * nt + at.col;
                    const float p = !mask || j < sKeys[stage][il]
                                        ? std::exp2(std::fma(st[nt][lane][e], c, -sLse2[stage][il]))
                                        : 0.0f;
                    const float z = kept(keep[lane], NT * part + nt, e) ? kept_scale : 0.0f;
                    st[nt][lane][e] = p * z;
                    dpt[nt][lane][e] = p * (dpt[nt][lane][e] * z - sDelta[stage][il]);
                  }
              regs_times_rows(acc_v[w], st, sdO, qrow, D);
              regs_times_rows(acc_k[w], dpt, sQ, qrow, D);
            }
          }
        }
        for (int w = 0; w < fm::kWarps; w++)
          for (int lane = 0; lane < 32; lane++)
            for (int hf = 0; hf < 2; hf++) {
              const int j = k0 + 16 * w + mma::group_of(lane) + 8 * hf;
              if (j >= Sk) continue;
              const size_t at = bg * blk.k.head_stride + (size_t)j * D + 2 * mma::tig_of(lane);
              for (int dt = 0; dt < D / 8; dt++)
                for (int x = 0; x < 2; x++) {
                  uint16_t& ek = dk[at + 8 * dt + x];
                  uint16_t& ev = dv[at + 8 * dt + x];
                  ek = bf(fl(ek) + a.scale * acc_k[w][dt][lane][2 * hf + x]);
                  ev = bf(fl(ev) + acc_v[w][dt][lane][2 * hf + x]);
                }
            }
      }
}

}  // namespace flash_mma_test
