// tests/test_attention_block.cpp: attention on one pass of query rows against key rows
// (kernels/math.h AttentionBlock), the kernels of context parallelism's ring attention.
//
// The ring here is Megatron's load-balanced ("zig-zag") one, written out in the test so that
// the kernels are checked without parallel/: the sequence of S rows is cut into 2cp chunks
// of c = S / 2cp rows and rank r holds chunks r and 2cp-1-r (L = 2c local rows). At ring step
// t rank r holds the keys and values of rank j = (r - t) mod cp and computes one pass:
//   j == r  the diagonal: all local queries against all local keys, causal;
//   j <  r  all local queries against j's first chunk, which every one of them sees;
//   j >  r  r's second chunk of queries against all of j's keys, which it sees whole;
// and merges the pass's (o, lse) into its running result (attention_merge). Every rank
// covers each (query, key <= query) pair of its queries once (RingCoversEveryCausalPairOnce),
// so the merged passes are the whole sequence's attention, forward and backward, flash and
// naive, with dropout drawing the single-rank bits through the rows' global positions.
//
// The reference is causal attention over the whole sequence in double (forward), and the
// whole-sequence kernel (backward: tests/test_kernels_attention.cpp checks it against finite
// differences). Tolerances: normwise relative errors (tests/test_kernels_helpers.h), 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/math.h"
#include "kernels/ops.h"
#include "tests/test_kernels_helpers.h"

namespace {

using namespace ktest;
using kernels::AttentionBlock;
using kernels::AttentionRows;
using kernels::Device;
using kernels::TokenPositions;

class AttentionBlocks : public ::testing::TestWithParam<Device> {
 protected:
  Device dev() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Devices, AttentionBlocks, ::testing::ValuesIn(test_devices()),
                         device_label);

// The shapes of every ring test: GQA (two query heads per group), S = 24 cut into 4 chunks
// (cp 2), 6 (cp 3) or 8 (cp 4).
constexpr int kB = 2, kA = 4, kG = 2, kD = 8, kS = 24;
const uint64_t kSeed = 17, kStream = 5;

// ---- the zig-zag ring ---------------------------------------------------------------------

// Rank r's rows: chunk r, then chunk 2cp-1-r.
TokenPositions zigzag(int cp, int r, int S) {
  const int c = S / (2 * cp);
  TokenPositions p;
  p.chunk = c;
  p.start[0] = r * c;
  p.start[1] = (2 * cp - 1 - r) * c;
  p.local = 2 * c;
  p.length = S;
  return p;
}

// One pass of rank r: the block, the rank whose keys it reads and where its views start (the
// first local row of the q view and of the k view).
struct Pass {
  int from = 0, q_row = 0, k_row = 0;
  AttentionBlock blk;
};

std::vector<Pass> ring_passes(int cp, int r, int S, int A, int D) {
  const int c = S / (2 * cp), L = 2 * c;
  std::vector<Pass> passes;
  for (int t = 0; t < cp; t++) {
    Pass p;
    p.from = (r - t + cp) % cp;
    const AttentionRows mine{L, (long long)L * D, zigzag(cp, r, S)};
    const AttentionRows theirs{L, (long long)L * D, zigzag(cp, p.from, S)};
    p.blk.dropout_heads = A;
    p.blk.dropout_length = S;
    if (p.from == r) {
      p.blk.q = mine;
      p.blk.k = mine;
    } else if (p.from < r) {
      p.blk.q = mine;
      p.blk.k = AttentionRows{c, (long long)L * D, theirs.pos};  // their first chunk
      p.blk.causal = false;
    } else {
      TokenPositions second;  // my second chunk alone
      second.start[0] = mine.pos.start[1];
      p.blk.q = AttentionRows{c, (long long)L * D, second};
      p.blk.k = theirs;
      p.blk.causal = false;
      p.q_row = c;
    }
    passes.push_back(p);
  }
  return passes;
}

// The rows of a (B, H, S, D) tensor at a rank's positions: (B, H, L, D).
std::vector<float> gather(const std::vector<float>& x, int BH, int S, int D,
                          const TokenPositions& pos) {
  std::vector<float> out((size_t)BH * pos.local * D);
  for (int bh = 0; bh < BH; bh++)
    for (int i = 0; i < pos.local; i++)
      for (int c = 0; c < D; c++)
        out[((size_t)bh * pos.local + i) * D + c] = x[((size_t)bh * S + pos.at(i)) * D + c];
  return out;
}
// And back: the rank's rows written into the (B, H, S, D) tensor.
void scatter(std::vector<float>& x, const std::vector<float>& local, int BH, int S, int D,
             const TokenPositions& pos) {
  for (int bh = 0; bh < BH; bh++)
    for (int i = 0; i < pos.local; i++)
      for (int c = 0; c < D; c++)
        x[((size_t)bh * S + pos.at(i)) * D + c] = local[((size_t)bh * pos.local + i) * D + c];
}

// ---- the reference: causal attention over the whole sequence, in double ---------------------

struct Reference {
  std::vector<double> o, lse, P;  // o (B,A,S,D), lse (B,A,S), P (B*A, S, S) before dropout
};

// s_ij = scale q_i . k_j over j <= i (k of group h / (A/G)), lse_i = log sum_j e^(s_ij),
// P_ij = e^(s_ij - lse_i), o_i = sum_j P_ij keep_ij / (1-p) v_j with the single-rank keep
// bit dropout_keep(seed, stream, ((b*A + h)*S + i)*S + j).
Reference reference(const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, float scale, float p) {
  const int S = kS, D = kD;
  Reference r{std::vector<double>(q.size(), 0.0), std::vector<double>(kB * kA * S),
              std::vector<double>((size_t)kB * kA * S * S, 0.0)};
  for (int b = 0; b < kB; b++)
    for (int h = 0; h < kA; h++) {
      const int bh = b * kA + h, bg = b * kG + h / (kA / kG);
      for (int i = 0; i < S; i++) {
        std::vector<double> s(i + 1);
        double m = -INFINITY;
        for (int j = 0; j <= i; j++) {
          double dot = 0.0;
          for (int c = 0; c < D; c++)
            dot += (double)q[((size_t)bh * S + i) * D + c] * k[((size_t)bg * S + j) * D + c];
          s[j] = scale * dot;
          m = std::max(m, s[j]);
        }
        double sum = 0.0;
        for (int j = 0; j <= i; j++) sum += std::exp(s[j] - m);
        const double lse = m + std::log(sum);
        r.lse[(size_t)bh * S + i] = lse;
        for (int j = 0; j <= i; j++) {
          const double P = std::exp(s[j] - lse);
          r.P[((size_t)bh * S + i) * S + j] = P;
          const uint64_t idx = ((uint64_t)bh * S + i) * S + j;
          const bool keep = p == 0.0f || kernels::dropout_keep(kSeed, kStream, idx, p);
          if (!keep) continue;
          for (int c = 0; c < D; c++)
            r.o[((size_t)bh * S + i) * D + c] += P / (1.0 - p) * v[((size_t)bg * S + j) * D + c];
        }
      }
    }
  return r;
}

// ---- the ring, run on one device rank after rank -------------------------------------------

using Buf = std::unique_ptr<DevBuf<float>>;

// Every rank's local tensors, its running (o, lse), its gradients, and per pass what the
// naive path keeps for its backward (the pass's probabilities and lse).
struct Ring {
  Device d;
  int cp, L;
  float scale, p;
  std::vector<TokenPositions> pos;
  std::vector<Buf> q, k, v, dO, o, lse, dq, dk, dv;
  std::vector<std::vector<Buf>> probs, lse_pass;

  Ring(Device dev, int cp_, float p_, const std::vector<float>& Q, const std::vector<float>& K,
       const std::vector<float>& V, const std::vector<float>& dOut)
      : d(dev), cp(cp_), L(kS / cp_), scale(1.0f / std::sqrt((float)kD)), p(p_) {
    auto buf = [&](const std::vector<float>& host) { return Buf(new DevBuf<float>(d, host)); };
    for (int r = 0; r < cp; r++) {
      pos.push_back(zigzag(cp, r, kS));
      q.push_back(buf(gather(Q, kB * kA, kS, kD, pos[r])));
      k.push_back(buf(gather(K, kB * kG, kS, kD, pos[r])));
      v.push_back(buf(gather(V, kB * kG, kS, kD, pos[r])));
      dO.push_back(buf(gather(dOut, kB * kA, kS, kD, pos[r])));
      // Before the first merge o may hold anything: NaN shows that the merge ignores it.
      o.push_back(buf(std::vector<float>((size_t)kB * kA * L * kD, NAN)));
      lse.push_back(buf(std::vector<float>((size_t)kB * kA * L, -INFINITY)));
      dq.push_back(buf(std::vector<float>((size_t)kB * kA * L * kD, 0.0f)));
      dk.push_back(buf(std::vector<float>((size_t)kB * kG * L * kD, 0.0f)));
      dv.push_back(buf(std::vector<float>((size_t)kB * kG * L * kD, 0.0f)));
      probs.emplace_back();
      lse_pass.emplace_back();
    }
  }

  // Views of a pass: head (b, h)'s q-view rows, group g's k-view rows of rank `from`.
  float* qv(std::vector<Buf>& t, int r, const Pass& s, int bh = 0) {
    return t[r]->get() + ((size_t)bh * L + s.q_row) * kD;
  }
  float* kv(std::vector<Buf>& t, const Pass& s, int bh = 0) {
    const int bg = bh / kA * kG + bh % kA / (kA / kG);
    return t[s.from]->get() + ((size_t)bg * L + s.k_row) * kD;
  }
  float* lse_at(Buf& t, const Pass& s) { return t->get() + s.q_row; }

  void flash_forward() {
    for (int r = 0; r < cp; r++)
      for (const Pass& s : ring_passes(cp, r, kS, kA, kD)) {
        DevBuf<float> o_pass(d, o[r]->size()), l_pass(d, lse[r]->size());
        kernels::flash_attention_forward(d, o_pass.get() + s.q_row * kD, l_pass.get() + s.q_row,
                                         qv(q, r, s), kv(k, s), kv(v, s), kB, kA, kG, kD, scale,
                                         p, kSeed, kStream, s.blk);
        kernels::attention_merge(d, qv(o, r, s), lse_at(lse[r], s), o_pass.get() + s.q_row * kD,
                                 l_pass.get() + s.q_row, kB * kA, kD, s.blk.q);
      }
  }

  // scores = Q K^T per head, P = attention_softmax, P' = attention_dropout(P), o_pass = P' V.
  void naive_forward() {
    for (int r = 0; r < cp; r++)
      for (const Pass& s : ring_passes(cp, r, kS, kA, kD)) {
        const int Sq = s.blk.q.rows, Sk = s.blk.k.rows, BA = kB * kA;
        const size_t np = (size_t)BA * Sq * Sk;
        DevBuf<float> scores(d, np), Pd(d, np), o_pass(d, o[r]->size());
        DevBuf<uint8_t> mask(d, np);
        probs[r].push_back(Buf(new DevBuf<float>(d, np)));
        lse_pass[r].push_back(Buf(new DevBuf<float>(d, lse[r]->size())));
        float* P = probs[r].back()->get();
        for (int bh = 0; bh < BA; bh++)
          kernels::gemm(d, false, true, Sq, Sk, kD, 1.0f, qv(q, r, s, bh), kD, kv(k, s, bh), kD,
                        0.0f, scores.get() + (size_t)bh * Sq * Sk, Sk);
        kernels::attention_softmax_forward(d, P, lse_at(lse_pass[r].back(), s), scores.get(), BA,
                                           kD, scale, s.blk);
        kernels::attention_dropout_forward(d, Pd.get(), mask.get(), P, kB, kA, p, kSeed, kStream,
                                           s.blk);
        for (int bh = 0; bh < BA; bh++)
          kernels::gemm(d, false, false, Sq, kD, Sk, 1.0f, Pd.get() + (size_t)bh * Sq * Sk, Sk,
                        kv(v, s, bh), kD, 0.0f,
                        o_pass.get() + ((size_t)bh * L + s.q_row) * kD, kD);
        kernels::attention_merge(d, qv(o, r, s), lse_at(lse[r], s), o_pass.get() + s.q_row * kD,
                                 lse_at(lse_pass[r].back(), s), BA, kD, s.blk.q);
      }
  }

  // Each pass's share, from the final o and lse, into the querying rank's dq and the key
  // owner's dk, dv (the ring sends those back).
  void flash_backward() {
    for (int r = 0; r < cp; r++)
      for (const Pass& s : ring_passes(cp, r, kS, kA, kD))
        kernels::flash_attention_backward(d, qv(dq, r, s), kv(dk, s), kv(dv, s), qv(dO, r, s),
                                          qv(q, r, s), kv(k, s), kv(v, s), qv(o, r, s),
                                          lse_at(lse[r], s), kB, kA, kG, kD, scale, p, kSeed,
                                          kStream, s.blk);
  }

  // After naive_forward: P becomes the whole row's (attention_probs_rescale), P' its dropout,
  // dP' = dO V^T, dV += P'^T dO, dP = dropout_backward(dP'), dS = softmax backward with the
  // whole row's delta = dO . O (attention_delta), dQ += dS K, dK += dS^T Q.
  void naive_backward() {
    for (int r = 0; r < cp; r++) {
      DevBuf<float> delta(d, lse[r]->size());
      kernels::attention_delta(d, delta.get(), dO[r]->get(), o[r]->get(), kB * kA, kD,
                               AttentionRows{L, (long long)L * kD, pos[r]});
      const std::vector<Pass> passes = ring_passes(cp, r, kS, kA, kD);
      for (size_t n = 0; n < passes.size(); n++) {
        const Pass& s = passes[n];
        const int Sq = s.blk.q.rows, Sk = s.blk.k.rows, BA = kB * kA;
        const size_t np = (size_t)BA * Sq * Sk;
        DevBuf<float> Pd(d, np), dPd(d, np), dP(d, np), dS(d, np);
        DevBuf<uint8_t> mask(d, np);
        float* P = probs[r][n]->get();
        kernels::attention_probs_rescale(d, P, lse_at(lse_pass[r][n], s), lse_at(lse[r], s), BA,
                                         kD, s.blk);
        kernels::attention_dropout_forward(d, Pd.get(), mask.get(), P, kB, kA, p, kSeed, kStream,
                                           s.blk);
        auto mat = [&](DevBuf<float>& t, int bh) { return t.get() + (size_t)bh * Sq * Sk; };
        for (int bh = 0; bh < BA; bh++) {
          kernels::gemm(d, false, true, Sq, Sk, kD, 1.0f, qv(dO, r, s, bh), kD, kv(v, s, bh), kD,
                        0.0f, mat(dPd, bh), Sk);
          kernels::gemm(d, true, false, Sk, kD, Sq, 1.0f, mat(Pd, bh), Sk, qv(dO, r, s, bh), kD,
                        1.0f, kv(dv, s, bh), kD);
        }
        kernels::dropout_backward(d, dP.get(), dPd.get(), mask.get(), np, p);
        kernels::attention_softmax_backward(d, dS.get(), dP.get(), P, delta.get() + s.q_row, BA,
                                            kD, scale, s.blk);
        for (int bh = 0; bh < BA; bh++) {
          kernels::gemm(d, false, false, Sq, kD, Sk, 1.0f, mat(dS, bh), Sk, kv(k, s, bh), kD,
                        1.0f, qv(dq, r, s, bh), kD);
          kernels::gemm(d, true, false, Sk, kD, Sq, 1.0f, mat(dS, bh), Sk, qv(q, r, s, bh), kD,
                        1.0f, kv(dk, s, bh), kD);
        }
      }
    }
  }

  // A per-rank tensor put together in the whole sequence's (B, H, S, width) layout.
  std::vector<float> global(const std::vector<Buf>& t, int BH, int width) const {
    std::vector<float> x((size_t)BH * kS * width);
    for (int r = 0; r < cp; r++) scatter(x, t[r]->host(), BH, kS, width, pos[r]);
    return x;
  }
};

struct Inputs {
  std::vector<float> q, k, v, dO;
};
Inputs inputs() {
  const size_t nq = (size_t)kB * kA * kS * kD, nk = (size_t)kB * kG * kS * kD;
  return {uniform(nq, 80, -2.0f, 2.0f), uniform(nk, 81, -2.0f, 2.0f), uniform(nk, 82),
          uniform(nq, 83)};
}

// ---- 1. the log-sum-exp merge -------------------------------------------------------------

TEST_P(AttentionBlocks, RingMergeEqualsWholeAttention) {
  const Inputs in = inputs();
  for (int cp : {2, 3}) {
    SCOPED_TRACE(testing::Message() << "cp " << cp);
    Ring flash(dev(), cp, 0.0f, in.q, in.k, in.v, in.dO), naive(dev(), cp, 0.0f, in.q, in.k,
                                                                in.v, in.dO);
    const Reference ref = reference(in.q, in.k, in.v, flash.scale, 0.0f);
    flash.flash_forward();
    naive.naive_forward();
    for (Ring* ring : {&flash, &naive}) {
      EXPECT_LT(max_rel_err(ring->global(ring->o, kB * kA, kD), ref.o), 1e-5);
      EXPECT_LT(max_rel_err(ring->global(ring->lse, kB * kA, 1), ref.lse), 1e-5);
    }
    // Rescaled by the final lse, every pass's probabilities are the whole row's softmax.
    naive.naive_backward();
    for (int r = 0; r < cp; r++) {
      const std::vector<Pass> passes = ring_passes(cp, r, kS, kA, kD);
      for (size_t n = 0; n < passes.size(); n++) {
        const AttentionBlock& blk = passes[n].blk;
        const int Sq = blk.q.rows, Sk = blk.k.rows;
        std::vector<double> want((size_t)kB * kA * Sq * Sk);
        for (int bh = 0; bh < kB * kA; bh++)
          for (int i = 0; i < Sq; i++)
            for (int j = 0; j < Sk; j++)
              want[((size_t)bh * Sq + i) * Sk + j] =
                  ref.P[((size_t)bh * kS + blk.q.pos.at(i)) * kS + blk.k.pos.at(j)];
        EXPECT_LT(max_rel_err(naive.probs[r][n]->host(), want), 1e-5);
      }
    }
  }
}

// With dropout the ring draws the single-rank kernel's keep bits, by the rows' positions.
TEST_P(AttentionBlocks, RingWithDropoutEqualsSingleRank) {
  const Inputs in = inputs();
  const float p = 0.25f;
  const size_t nq = in.q.size();
  DevBuf<float> q(dev(), in.q), k(dev(), in.k), v(dev(), in.v), o(dev(), nq),
      lse(dev(), kB * kA * kS);
  const float scale = 1.0f / std::sqrt((float)kD);
  kernels::flash_attention_forward(dev(), o.get(), lse.get(), q.get(), k.get(), v.get(), kB, kA,
                                   kG, kD, scale, p, kSeed, kStream,
                                   kernels::whole_sequence(kS, kA, kD));
  const std::vector<double> single = to_double(o.host());
  EXPECT_LT(max_rel_err(o.host(), reference(in.q, in.k, in.v, scale, p).o), 1e-5);
  for (int cp : {2, 3}) {
    SCOPED_TRACE(testing::Message() << "cp " << cp);
    Ring flash(dev(), cp, p, in.q, in.k, in.v, in.dO), naive(dev(), cp, p, in.q, in.k, in.v,
                                                             in.dO);
    flash.flash_forward();
    naive.naive_forward();
    EXPECT_LT(max_rel_err(flash.global(flash.o, kB * kA, kD), single), 1e-5);
    EXPECT_LT(max_rel_err(naive.global(naive.o, kB * kA, kD), single), 1e-5);
  }
}

// ---- 2. the ring's block selection --------------------------------------------------------

TEST(AttentionBlockRing, RingCoversEveryCausalPairOnce) {
  for (int cp : {2, 3, 4}) {
    SCOPED_TRACE(testing::Message() << "cp " << cp);
    std::vector<int> count((size_t)kS * kS, 0);  // (query, key) -> passes computing it
    long long pairs = 0;
    for (int r = 0; r < cp; r++) {
      const TokenPositions mine = zigzag(cp, r, kS);
      std::vector<bool> is_mine(kS, false);
      for (int i = 0; i < mine.local; i++) is_mine[mine.at(i)] = true;
      for (const Pass& s : ring_passes(cp, r, kS, kA, kD)) {
        pairs += kernels::visible_pairs(s.blk);
        for (int i = 0; i < s.blk.q.rows; i++) {
          const int query = s.blk.q.pos.at(i);
          ASSERT_TRUE(is_mine[query]) << "rank " << r << " computes query " << query;
          for (int j = 0; j < s.blk.visible(i); j++) {
            const int key = s.blk.k.pos.at(j);
            ASSERT_LE(key, query) << "rank " << r << " pass from " << s.from;
            count[(size_t)query * kS + key]++;
          }
        }
      }
    }
    for (int i = 0; i < kS; i++)
      for (int j = 0; j <= i; j++) ASSERT_EQ(count[(size_t)i * kS + j], 1) << i << ", " << j;
    EXPECT_EQ(pairs, kS * (kS + 1) / 2);
  }
}

// ---- 3. backward --------------------------------------------------------------------------

TEST_P(AttentionBlocks, RingBackwardSumsToWholeBackward) {
  const Inputs in = inputs();
  const float scale = 1.0f / std::sqrt((float)kD);
  for (float p : {0.0f, 0.25f}) {
    SCOPED_TRACE(testing::Message() << "p " << p);
    const size_t nq = in.q.size(), nk = in.k.size();
    DevBuf<float> q(dev(), in.q), k(dev(), in.k), v(dev(), in.v), dO(dev(), in.dO),
        o(dev(), nq), lse(dev(), kB * kA * kS), dq(dev(), nq), dk(dev(), nk), dv(dev(), nk);
    const AttentionBlock whole = kernels::whole_sequence(kS, kA, kD);
    kernels::flash_attention_forward(dev(), o.get(), lse.get(), q.get(), k.get(), v.get(), kB,
                                     kA, kG, kD, scale, p, kSeed, kStream, whole);
    kernels::flash_attention_backward(dev(), dq.get(), dk.get(), dv.get(), dO.get(), q.get(),
                                      k.get(), v.get(), o.get(), lse.get(), kB, kA, kG, kD, scale,
                                      p, kSeed, kStream, whole);
    const std::vector<double> want_q = to_double(dq.host()), want_k = to_double(dk.host()),
                              want_v = to_double(dv.host());
    for (int cp : {2, 3}) {
      SCOPED_TRACE(testing::Message() << "cp " << cp);
      Ring flash(dev(), cp, p, in.q, in.k, in.v, in.dO), naive(dev(), cp, p, in.q, in.k, in.v,
                                                               in.dO);
      flash.flash_forward();
      flash.flash_backward();
      naive.naive_forward();
      naive.naive_backward();
      for (Ring* ring : {&flash, &naive}) {
        EXPECT_LT(max_rel_err(ring->global(ring->dq, kB * kA, kD), want_q), 1e-5);
        EXPECT_LT(max_rel_err(ring->global(ring->dk, kB * kG, kD), want_k), 1e-5);
        EXPECT_LT(max_rel_err(ring->global(ring->dv, kB * kG, kD), want_v), 1e-5);
      }
    }
  }
}

// ---- rows that see no key, and the merge's edge cases ---------------------------------------

// Queries at positions 0..3 against keys at 2..5, causal: queries 0 and 1 see nothing, so
// their o is 0 and their lse -inf (flash and naive), and merging such a pass leaves the
// running result of those rows as it was.
TEST_P(AttentionBlocks, RowsThatSeeNoKey) {
  const int B = 1, A = 2, G = 1, D = 4, Sq = 4, Sk = 4;
  AttentionBlock blk;
  blk.q = AttentionRows{Sq, (long long)Sq * D, TokenPositions()};
  TokenPositions later;
  later.start[0] = 2;
  blk.k = AttentionRows{Sk, (long long)Sk * D, later};
  blk.dropout_heads = A;
  blk.dropout_length = 6;
  EXPECT_EQ(blk.visible(0), 0);
  EXPECT_EQ(blk.visible(1), 0);
  EXPECT_EQ(blk.visible(3), 2);
  const size_t nq = (size_t)B * A * Sq * D, nk = (size_t)B * G * Sk * D;
  DevBuf<float> q(dev(), uniform(nq, 90)), k(dev(), uniform(nk, 91)), v(dev(), uniform(nk, 92)),
      o(dev(), nq), lse(dev(), B * A * Sq);
  kernels::flash_attention_forward(dev(), o.get(), lse.get(), q.get(), k.get(), v.get(), B, A, G,
                                   D, 0.5f, 0.0f, kSeed, kStream, blk);
  const std::vector<float> O = o.host(), LSE = lse.host();
  DevBuf<float> scores(dev(), uniform((size_t)B * A * Sq * Sk, 93)), P(dev(), B * A * Sq * Sk),
      lse_naive(dev(), B * A * Sq);
  kernels::attention_softmax_forward(dev(), P.get(), lse_naive.get(), scores.get(), B * A, D,
                                     0.5f, blk);
  const std::vector<float> Pn = P.host(), LSEn = lse_naive.host();
  for (int bh = 0; bh < B * A; bh++)
    for (int i = 0; i < 2; i++) {
      EXPECT_EQ(LSE[bh * Sq + i], -INFINITY);
      EXPECT_EQ(LSEn[bh * Sq + i], -INFINITY);
      for (int c = 0; c < D; c++) EXPECT_EQ(O[(bh * Sq + i) * D + c], 0.0f);
      for (int j = 0; j < Sk; j++) EXPECT_EQ(Pn[(bh * Sq + i) * Sk + j], 0.0f);
    }
  for (int bh = 0; bh < B * A; bh++) EXPECT_TRUE(std::isfinite(LSE[bh * Sq + 3]));
  // Merge into a running result: rows 0 and 1 keep theirs; the others take the pass's
  // weighted share, which the running lse -inf (nothing merged yet) makes the pass itself.
  std::vector<float> acc = uniform(nq, 94), acc_lse(B * A * Sq, 1.5f);
  for (int bh = 0; bh < B * A; bh++)
    for (int i = 2; i < Sq; i++) acc_lse[bh * Sq + i] = -INFINITY;
  DevBuf<float> o_acc(dev(), acc), lse_acc(dev(), acc_lse);
  kernels::attention_merge(dev(), o_acc.get(), lse_acc.get(), o.get(), lse.get(), B * A, D,
                           blk.q);
  const std::vector<float> merged = o_acc.host(), merged_lse = lse_acc.host();
  for (int bh = 0; bh < B * A; bh++)
    for (int i = 0; i < Sq; i++) {
      const bool none = i < 2;
      EXPECT_EQ(merged_lse[bh * Sq + i], none ? 1.5f : LSE[bh * Sq + i]);
      for (int c = 0; c < D; c++)
        EXPECT_EQ(merged[(bh * Sq + i) * D + c], none ? acc[(bh * Sq + i) * D + c]
                                                      : O[(bh * Sq + i) * D + c]);
    }
}

// Two finite partial results merge to the exact two-term log-sum-exp.
TEST_P(AttentionBlocks, MergeOfTwoPartsIsTheirLogSumExp) {
  const int BH = 2, D = 3, rows = 2;
  const AttentionRows view{rows, (long long)rows * D, TokenPositions()};
  const std::vector<float> o1 = uniform(BH * rows * D, 95), o2 = uniform(BH * rows * D, 96);
  const std::vector<float> l1 = {0.5f, -3.0f, 40.0f, 2.0f}, l2 = {1.0f, 2.0f, -1.0f, 2.0f};
  DevBuf<float> o(dev(), o1), lse(dev(), l1), o_pass(dev(), o2), lse_pass(dev(), l2);
  kernels::attention_merge(dev(), o.get(), lse.get(), o_pass.get(), lse_pass.get(), BH, D, view);
  std::vector<double> want_o(o1.size()), want_l(l1.size());
  for (int r = 0; r < BH * rows; r++) {
    const double L = std::log(std::exp((double)l1[r]) + std::exp((double)l2[r]));
    want_l[r] = L;
    for (int c = 0; c < D; c++)
      want_o[r * D + c] = o1[r * D + c] * std::exp(l1[r] - L) + o2[r * D + c] * std::exp(l2[r] - L);
  }
  EXPECT_LT(max_rel_err(o.host(), want_o), 1e-6);
  EXPECT_LT(max_rel_err(lse.host(), want_l), 1e-6);
}

// ---- 4. the token ops at a rank's positions ---------------------------------------------------

// A zig-zag rank's rows through RoPE, the QKV split, the position embedding and the hidden
// dropout are the whole sequence's rows at those positions, bit for bit (the same arithmetic
// on the same position).
TEST_P(AttentionBlocks, TokenOpsAtPositionsEqualWholeSequenceRows) {
  const int B = kB, S = kS, A = kA, G = kG, D = kD, W = (A + 2 * G) * D, C = 6;
  const float theta = 10000.0f, p = 0.3f;
  const std::vector<float> x = uniform((size_t)B * A * S * D, 100),
                           qkv = uniform((size_t)B * S * W, 101),
                           wpe = uniform((size_t)S * C, 102),
                           hidden = uniform((size_t)B * S * C, 103);
  // Whole sequence.
  DevBuf<float> xw(dev(), x), qkv_w(dev(), qkv), qw(dev(), x.size()),
      kw(dev(), (size_t)B * G * S * D), vw(dev(), (size_t)B * G * S * D), pe_w(dev(), B * S * C),
      wpe_d(dev(), wpe), hid_w(dev(), hidden), drop_w(dev(), hidden.size()),
      dwpe_w(dev(), S * C), dqkv_w(dev(), qkv.size());
  DevBuf<uint8_t> mask_w(dev(), hidden.size());
  kernels::rope_forward(dev(), xw.get(), B, A, S, D, theta);
  kernels::qkv_split_forward(dev(), qw.get(), kw.get(), vw.get(), qkv_w.get(), B, S, A, G, D,
                             theta);
  kernels::qkv_split_backward(dev(), dqkv_w.get(), qw.get(), kw.get(), vw.get(), B, S, A, G, D,
                              theta);
  kernels::position_embedding_forward(dev(), pe_w.get(), wpe_d.get(), B * S, S, 0, C);
  kernels::position_embedding_backward(dev(), dwpe_w.get(), hid_w.get(), B * S, S, 0, C);
  kernels::dropout_forward(dev(), drop_w.get(), mask_w.get(), hid_w.get(), hidden.size(), p,
                           kSeed, kStream);
  // Token-major tensors (B*S, width) are (B, S, width): gather with BH = B.
  auto tokens = [&](const std::vector<float>& t, int width, const TokenPositions& pos) {
    return gather(t, B, S, width, pos);
  };
  for (int cp : {2, 3}) {
    std::vector<float> dwpe_sum((size_t)S * C, 0.0f);
    for (int r = 0; r < cp; r++) {
      SCOPED_TRACE(testing::Message() << "cp " << cp << " rank " << r);
      const TokenPositions pos = zigzag(cp, r, S);
      const int L = pos.local;
      DevBuf<float> xl(dev(), gather(x, B * A, S, D, pos)), qkv_l(dev(), tokens(qkv, W, pos)),
          ql(dev(), (size_t)B * A * L * D), kl(dev(), (size_t)B * G * L * D),
          vl(dev(), (size_t)B * G * L * D), pe_l(dev(), B * L * C),
          hid_l(dev(), tokens(hidden, C, pos)), drop_l(dev(), (size_t)B * L * C),
          dwpe_l(dev(), S * C), dqkv_l(dev(), (size_t)B * L * W);
      DevBuf<uint8_t> mask_l(dev(), (size_t)B * L * C);
      kernels::rope_forward(dev(), xl.get(), B, A, L, D, theta, pos);
      EXPECT_EQ(xl.host(), gather(xw.host(), B * A, S, D, pos));
      kernels::qkv_split_forward(dev(), ql.get(), kl.get(), vl.get(), qkv_l.get(), B, L, A, G, D,
                                 theta, pos);
      EXPECT_EQ(ql.host(), gather(qw.host(), B * A, S, D, pos));
      EXPECT_EQ(kl.host(), gather(kw.host(), B * G, S, D, pos));
      EXPECT_EQ(vl.host(), gather(vw.host(), B * G, S, D, pos));
      kernels::qkv_split_backward(dev(), dqkv_l.get(), ql.get(), kl.get(), vl.get(), B, L, A, G,
                                  D, theta, pos);
      EXPECT_EQ(dqkv_l.host(), tokens(dqkv_w.host(), W, pos));
      kernels::position_embedding_forward(dev(), pe_l.get(), wpe_d.get(), B * L, L, 0, C, pos);
      EXPECT_EQ(pe_l.host(), tokens(pe_w.host(), C, pos));
      kernels::position_embedding_backward(dev(), dwpe_l.get(), hid_l.get(), B * L, L, 0, C,
                                           pos);
      const std::vector<float> dwpe_r = dwpe_l.host();
      for (size_t e = 0; e < dwpe_r.size(); e++) dwpe_sum[e] += dwpe_r[e];
      kernels::dropout_forward(dev(), drop_l.get(), mask_l.get(), hid_l.get(), (size_t)B * L * C,
                               p, kSeed, kStream, pos, C);
      EXPECT_EQ(drop_l.host(), tokens(drop_w.host(), C, pos));
    }
    // Every position belongs to one rank: the ranks' table gradients add up to the whole's.
    EXPECT_EQ(dwpe_sum, dwpe_w.host());
  }
}

}  // namespace
