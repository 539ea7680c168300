// tests/test_kernels_vocab.cpp: the ops that let tensor parallelism split the vocabulary —
// the vocab-range token embedding, the position embedding, and the three-pass cross-entropy —
// against double-precision references and finite differences (method:
// tests/test_kernels_helpers.h), and split over simulated ranks.
//
// A simulated rank is one call of an op on that rank's slice: the columns (or table rows)
// [r rows, (r+1) rows) of a vocabulary padded to a multiple of the rank count. What
// parallel/tensor_parallel.cpp does between the passes (max over ranks, then sums) is done
// here on the host, so the split must reproduce the unsplit loss and gradient.
//
// Tolerances as in tests/test_kernels.cpp: 1e-6 for copies and sums of a few terms, 1e-5 for
// a loss or its analytic gradient (exp, log and a row reduction), 1e-4 for gradients against
// finite differences. bf16 storage rounds once per output: within 2^-8 relative of the double
// reference, on positive data so that no sum cancels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/math.h"
#include "kernels/ops.h"
#include "tests/test_kernels_helpers.h"

namespace {

using namespace ktest;
using kernels::bf16;
using kernels::Device;

class Vocab : public ::testing::TestWithParam<Device> {
 protected:
  Device dev() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Devices, Vocab, ::testing::ValuesIn(test_devices()), device_label);

// out(N, C) of a table holding ids [start, start + rows), in double.
std::vector<double> ref_embedding(const std::vector<double>& table, const std::vector<int>& tokens,
                                  int start, int rows, int C) {
  std::vector<double> out(tokens.size() * C, 0.0);
  for (size_t i = 0; i < tokens.size(); i++) {
    const int row = tokens[i] - start;
    if (row < 0 || row >= rows) continue;
    for (int c = 0; c < C; c++) out[i * C + c] = table[row * C + c];
  }
  return out;
}

// ---- vocab-range token embedding ------------------------------------------------------------

TEST_P(Vocab, EmbeddingRangeForwardBackward) {
  const int start = 3, rows = 5, C = 6, N = 9;
  // ids below, inside (repeated) and above the range [3, 8), and an ignored -1
  const std::vector<int> tokens = {3, 1, 7, 3, 9, 5, -1, 7, 8};
  std::vector<float> wte = uniform(rows * C, 1), R = uniform(N * C, 2);
  std::vector<float> dwte0 = uniform(rows * C, 3);
  DevBuf<int> dtok(dev(), tokens);
  DevBuf<float> table(dev(), wte), out(dev(), uniform(N * C, 4)), dR(dev(), R);
  DevBuf<float> grad(dev(), dwte0);

  kernels::embedding_forward(dev(), out.get(), dtok.get(), table.get(), start, rows, N, C);
  EXPECT_LT(max_rel_err(out.host(), ref_embedding(to_double(wte), tokens, start, rows, C)), 1e-7)
      << "\"=\": the garbage in out must be overwritten, with 0 for tokens out of range";

  kernels::embedding_backward(dev(), grad.get(), dR.get(), dtok.get(), start, rows, N, C);
  auto L = [&](const std::vector<double>& te) {
    return dot(ref_embedding(te, tokens, start, rows, C), to_double(R));
  };
  std::vector<double> want = fd_grad(L, to_double(wte));
  for (int k = 0; k < rows * C; k++) want[k] += dwte0[k];
  EXPECT_LT(max_rel_err(grad.host(), want), 1e-6);
}

// Ranks r = 0..p-1 each hold rows [r rows, (r+1) rows) of a table padded to p rows >= V;
// the sum of their outputs is the whole-vocabulary embedding, and their gradients laid side
// by side are the whole table's gradient.
TEST_P(Vocab, EmbeddingSplitOverRanksSumsToFullEmbedding) {
  const int V = 10, C = 5, N = 12;
  const std::vector<int> tokens = {0, 9, 4, 4, 5, 2, 9, 7, 1, 3, 6, 8};
  std::vector<float> wte = uniform(V * C, 5), R = uniform(N * C, 6);
  DevBuf<int> dtok(dev(), tokens);
  DevBuf<float> dR(dev(), R);

  DevBuf<float> full_table(dev(), wte), full_out(dev(), N * C), full_grad(dev(), V * C);
  kernels::embedding_forward(dev(), full_out.get(), dtok.get(), full_table.get(), 0, V, N, C);
  kernels::embedding_backward(dev(), full_grad.get(), dR.get(), dtok.get(), 0, V, N, C);
  const std::vector<float> want_out = full_out.host(), want_grad = full_grad.host();
  EXPECT_LT(max_rel_err(want_out, ref_embedding(to_double(wte), tokens, 0, V, C)), 1e-7);

  for (int p : {2, 3}) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    const int rows = (V + p - 1) / p;
    std::vector<float> sum(N * C, 0.0f), grad(V * C, 0.0f);
    for (int r = 0; r < p; r++) {
      std::vector<float> slice(rows * C, 0.0f);  // padding rows stay 0: no token reaches them
      for (int k = 0; k < rows * C && r * rows * C + k < V * C; k++)
        slice[k] = wte[r * rows * C + k];
      DevBuf<float> table(dev(), slice), out(dev(), uniform(N * C, 7 + r));
      DevBuf<float> g(dev(), rows * C);
      kernels::embedding_forward(dev(), out.get(), dtok.get(), table.get(), r * rows, rows, N, C);
      kernels::embedding_backward(dev(), g.get(), dR.get(), dtok.get(), r * rows, rows, N, C);
      const std::vector<float> o = out.host(), gh = g.host();
      for (int k = 0; k < N * C; k++) sum[k] += o[k];
      for (int k = 0; k < rows * C; k++) {
        if (r * rows * C + k < V * C) grad[r * rows * C + k] = gh[k];
        else EXPECT_EQ(gh[k], 0.0f) << "padding row of rank " << r;
      }
    }
    EXPECT_EQ(sum, want_out) << "one rank's row plus zeros is exact";
    EXPECT_LT(max_rel_err(grad, to_double(want_grad)), 1e-6);
  }
}

// ---- position embedding ---------------------------------------------------------------------

TEST_P(Vocab, PositionEmbeddingForwardBackward) {
  const int S = 4, C = 6, N = 7, first = 5;  // rows 5..11 of a (batch, 4) layout
  std::vector<float> wpe = uniform(S * C, 8), out0 = uniform(N * C, 9), R = uniform(N * C, 10);
  std::vector<float> dwpe0 = uniform(S * C, 11);
  auto fwd = [&](const std::vector<double>& pe) {
    std::vector<double> out = to_double(out0);
    for (int i = 0; i < N; i++)
      for (int c = 0; c < C; c++) out[i * C + c] += pe[((first + i) % S) * C + c];
    return out;
  };
  DevBuf<float> table(dev(), wpe), out(dev(), out0), dR(dev(), R), grad(dev(), dwpe0);
  kernels::position_embedding_forward(dev(), out.get(), table.get(), N, S, first, C);
  EXPECT_LT(max_rel_err(out.host(), fwd(to_double(wpe))), 1e-6) << "\"+=\" into out";

  kernels::position_embedding_backward(dev(), grad.get(), dR.get(), N, S, first, C);
  auto L = [&](const std::vector<double>& pe) { return dot(fwd(pe), to_double(R)); };
  std::vector<double> want = fd_grad(L, to_double(wpe));
  for (int k = 0; k < S * C; k++) want[k] += dwpe0[k];
  EXPECT_LT(max_rel_err(grad.host(), want), 1e-6);
}

// Sequence parallelism: rank r embeds rows [r N/p, (r+1) N/p) with first_row = r N/p; side
// by side they are the whole batch's embedding (first_row 0).
TEST_P(Vocab, EmbeddingSplitOverRowsMatchesTheWholeBatch) {
  const int V = 7, S = 5, C = 4, N = 10, p = 2, n = N / p;
  const std::vector<int> tokens = {1, 6, 0, 3, 3, 2, 5, 4, 6, 1};
  std::vector<float> wte = uniform(V * C, 12), wpe = uniform(S * C, 13);
  DevBuf<int> dtok(dev(), tokens);
  DevBuf<float> te(dev(), wte), pe(dev(), wpe), whole(dev(), N * C);
  kernels::embedding_forward(dev(), whole.get(), dtok.get(), te.get(), 0, V, N, C);
  kernels::position_embedding_forward(dev(), whole.get(), pe.get(), N, S, 0, C);
  const std::vector<float> want = whole.host();
  for (int r = 0; r < p; r++) {
    DevBuf<int> rtok(dev(), std::vector<int>(tokens.begin() + r * n, tokens.begin() + (r + 1) * n));
    DevBuf<float> out(dev(), n * C);
    kernels::embedding_forward(dev(), out.get(), rtok.get(), te.get(), 0, V, n, C);
    kernels::position_embedding_forward(dev(), out.get(), pe.get(), n, S, r * n, C);
    EXPECT_EQ(out.host(), std::vector<float>(want.begin() + r * n * C, want.begin() + (r + 1) * n * C))
        << "rank " << r;
  }
}

// ---- bf16 storage ---------------------------------------------------------------------------

std::vector<bf16> rounded(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = kernels::to_bf16(v[i]);
  return out;
}
std::vector<double> widened(const std::vector<bf16>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = kernels::to_float(v[i]);
  return out;
}
// Elements of got further than one bf16 rounding (2^-8 relative, with margin) from want.
int beyond_one_rounding(const std::vector<bf16>& got, const std::vector<double>& want) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); i++)
    bad += std::fabs(kernels::to_float(got[i]) - want[i]) > std::ldexp(std::fabs(want[i]), -8);
  return bad;
}

// Each token id repeats ~57 times and each position 50 times, with gradients in [0.5, 1.5]:
// rounded to bf16 after every add (spacing 0.25 once the sum passes 32) the sum would drift
// by many roundings; summed in fp32 (exactly, here) and rounded once it stays within one.
TEST_P(Vocab, Bf16EmbeddingsRoundOnce) {
  const int start = 2, rows = 4, S = 8, C = 3, N = 400, first = 3;
  std::vector<int> tokens(N);
  for (int i = 0; i < N; i++) tokens[i] = (i * 3) % 7;  // ids 0..6 in turn; range [2, 6)
  const std::vector<bf16> wte = rounded(uniform(rows * C, 14, 0.5f, 1.5f));
  const std::vector<bf16> wpe = rounded(uniform(S * C, 15, 0.5f, 1.5f));
  const std::vector<bf16> dout = rounded(uniform(N * C, 16, 0.5f, 1.5f));
  const std::vector<bf16> dwte0 = rounded(uniform(rows * C, 17, 0.5f, 1.5f));
  const std::vector<bf16> dwpe0 = rounded(uniform(S * C, 18, 0.5f, 1.5f));
  DevBuf<int> dtok(dev(), tokens);
  DevBuf<bf16> te(dev(), wte), pe(dev(), wpe), g(dev(), dout), out(dev(), rounded(uniform(N * C, 19)));
  DevBuf<bf16> gte(dev(), dwte0), gpe(dev(), dwpe0);

  kernels::embedding_forward(dev(), out.get(), dtok.get(), te.get(), start, rows, N, C);
  const std::vector<bf16> copied = out.host();
  const std::vector<double> want_copy = ref_embedding(widened(wte), tokens, start, rows, C);
  for (int k = 0; k < N * C; k++) ASSERT_EQ(kernels::to_float(copied[k]), want_copy[k]) << k;

  kernels::position_embedding_forward(dev(), out.get(), pe.get(), N, S, first, C);
  std::vector<double> want_out = want_copy;
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++) want_out[i * C + c] += kernels::to_float(wpe[((first + i) % S) * C + c]);
  EXPECT_EQ(beyond_one_rounding(out.host(), want_out), 0);

  kernels::embedding_backward(dev(), gte.get(), g.get(), dtok.get(), start, rows, N, C);
  kernels::position_embedding_backward(dev(), gpe.get(), g.get(), N, S, first, C);
  std::vector<double> want_te = widened(dwte0), want_pe = widened(dwpe0);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++) {
      const double d = kernels::to_float(dout[i * C + c]);
      const int row = tokens[i] - start;
      if (row >= 0 && row < rows) want_te[row * C + c] += d;
      want_pe[((first + i) % S) * C + c] += d;
    }
  EXPECT_EQ(beyond_one_rounding(gte.host(), want_te), 0);
  EXPECT_EQ(beyond_one_rounding(gpe.host(), want_pe), 0);
}

// ---- three-pass cross-entropy -----------------------------------------------------------------

// Double reference over the `valid` real columns of z(N, width): per-row losses.
std::vector<double> ref_losses(const std::vector<double>& z, const std::vector<int>& targets,
                               int width, int valid) {
  const int N = (int)targets.size();
  std::vector<double> l(N, 0.0);
  for (int i = 0; i < N; i++) {
    if (targets[i] < 0) continue;
    double m = -INFINITY, s = 0.0;
    for (int j = 0; j < valid; j++) m = std::max(m, z[i * width + j]);
    for (int j = 0; j < valid; j++) s += std::exp(z[i * width + j] - m);
    l[i] = m + std::log(s) - z[i * width + targets[i]];
  }
  return l;
}

// One rank's passes on its own buffers; the caller combines between them on the host.
struct Rank {
  DevBuf<float> logits, row_max, sum_exp, target_logit, losses;
  Rank(Device d, const std::vector<float>& z, int N)
      : logits(d, z), row_max(d, N), sum_exp(d, N), target_logit(d, N), losses(d, N) {}
};

// The split loss: logits(N, p rows) of a vocabulary of V padded to p rows columns, rank r
// holding columns [r rows, (r+1) rows). Returns the losses (every rank's must agree) and the
// gradient of the V real columns; padding gradients must be 0.
void split_cross_entropy(Device d, const std::vector<float>& z, const std::vector<int>& targets,
                         int V, int p, int rows, float grad_scale, std::vector<float>* losses,
                         std::vector<float>* grad) {
  const int N = (int)targets.size(), width = p * rows;
  DevBuf<int> dt(d, targets);
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < p; r++) {
    std::vector<float> local(N * rows);
    for (int i = 0; i < N; i++)
      for (int j = 0; j < rows; j++) local[i * rows + j] = z[i * width + r * rows + j];
    ranks.push_back(std::make_unique<Rank>(d, local, N));
  }
  auto valid = [&](int r) { return std::clamp(V - r * rows, 0, rows); };
  // 1. max over ranks
  std::vector<float> m(N, -INFINITY);
  for (int r = 0; r < p; r++) {
    kernels::cross_entropy_row_max(d, ranks[r]->row_max.get(), ranks[r]->logits.get(), N, rows,
                                   valid(r));
    const std::vector<float> mr = ranks[r]->row_max.host();
    for (int i = 0; i < N; i++) m[i] = std::max(m[i], mr[i]);
  }
  // 2. sums over ranks
  std::vector<float> s(N, 0.0f), zt(N, 0.0f);
  for (int r = 0; r < p; r++) {
    ranks[r]->row_max.upload(m);
    kernels::cross_entropy_sum_exp(d, ranks[r]->sum_exp.get(), ranks[r]->target_logit.get(),
                                   ranks[r]->logits.get(), ranks[r]->row_max.get(), dt.get(), N,
                                   rows, valid(r), r * rows);
    const std::vector<float> sr = ranks[r]->sum_exp.host(), tr = ranks[r]->target_logit.host();
    for (int i = 0; i < N; i++) {
      s[i] += sr[i];
      zt[i] += tr[i];
    }
  }
  // 3. every rank finishes with the combined statistics
  grad->assign(N * V, 0.0f);
  for (int r = 0; r < p; r++) {
    ranks[r]->sum_exp.upload(s);
    ranks[r]->target_logit.upload(zt);
    kernels::cross_entropy_finish(d, ranks[r]->losses.get(), ranks[r]->logits.get(), dt.get(),
                                  ranks[r]->row_max.get(), ranks[r]->sum_exp.get(),
                                  ranks[r]->target_logit.get(), N, rows, valid(r), r * rows,
                                  grad_scale);
    const std::vector<float> lr = ranks[r]->losses.host(), gr = ranks[r]->logits.host();
    if (r == 0) *losses = lr;
    else EXPECT_EQ(lr, *losses) << "rank " << r << " disagrees on the losses";
    for (int i = 0; i < N; i++)
      for (int j = 0; j < rows; j++) {
        const int col = r * rows + j;
        if (col < V) (*grad)[i * V + col] = gr[i * rows + j];
        else EXPECT_EQ(gr[i * rows + j], 0.0f) << "padding column " << col << ", row " << i;
      }
  }
}

// Logits (N, V) with a row far above float's exp range (needs the max), and targets with
// ignored rows and both ends of the vocabulary.
struct LossCase {
  static constexpr int N = 7, V = 11;
  std::vector<int> targets = {3, -1, 10, 0, 5, -1, 7};
  std::vector<float> z = uniform(N * V, 42, -3.0f, 3.0f);
  LossCase() {
    for (int j = 0; j < V; j++) z[4 * V + j] += 80.0f;
  }
};

// One rank, no padding: the losses and gradient against the double formulas,
// dz_ij = grad_scale (softmax(z_i)_j - [j == t_i]).
TEST_P(Vocab, CrossEntropyOneRankMatchesDoubleReference) {
  LossCase c;
  const float grad_scale = 0.25f;
  std::vector<float> losses, grad;
  split_cross_entropy(dev(), c.z, c.targets, c.V, 1, c.V, grad_scale, &losses, &grad);
  const std::vector<double> z = to_double(c.z);
  const std::vector<double> want_l = ref_losses(z, c.targets, c.V, c.V);
  std::vector<double> want_g(c.N * c.V, 0.0);
  for (int i = 0; i < c.N; i++) {
    if (c.targets[i] < 0) continue;
    // exp(z - loss - z_t) = exp(z - logsumexp(z)): the softmax
    const double lse = want_l[i] + z[i * c.V + c.targets[i]];
    for (int j = 0; j < c.V; j++)
      want_g[i * c.V + j] = grad_scale * (std::exp(z[i * c.V + j] - lse) - (j == c.targets[i]));
  }
  EXPECT_LT(max_rel_err(losses, want_l), 1e-5);
  EXPECT_LT(max_rel_err(grad, want_g), 1e-5);
}

// One rank whose last columns are padding filled with logits larger than any real one: the
// loss and gradient must be those of the real columns alone.
TEST_P(Vocab, CrossEntropyIgnoresPaddingAndMatchesFiniteDifferences) {
  LossCase c;
  const int pad = 3, width = c.V + pad;
  const float grad_scale = 0.5f;
  std::vector<float> z(c.N * width);
  for (int i = 0; i < c.N; i++)
    for (int j = 0; j < width; j++) z[i * width + j] = j < c.V ? c.z[i * c.V + j] : 200.0f;
  std::vector<float> losses, grad;
  split_cross_entropy(dev(), z, c.targets, c.V, 1, width, grad_scale, &losses, &grad);
  EXPECT_LT(max_rel_err(losses, ref_losses(to_double(c.z), c.targets, c.V, c.V)), 1e-5);
  auto L = [&](const std::vector<double>& v) {
    std::vector<double> l = ref_losses(v, c.targets, c.V, c.V);
    return grad_scale * std::accumulate(l.begin(), l.end(), 0.0);
  };
  EXPECT_LT(max_rel_err(grad, fd_grad(L, to_double(c.z))), 1e-4);
  for (int i : {1, 5}) {
    EXPECT_EQ(losses[i], 0.0f);
    for (int j = 0; j < c.V; j++) EXPECT_EQ(grad[i * c.V + j], 0.0f) << "ignored row " << i;
  }
}

// The split over p ranks equals the unsplit loss, p = 2 and 3 and a 4-way split whose last
// rank holds only padding (valid = 0).
TEST_P(Vocab, CrossEntropySplitOverRanksEqualsUnsplit) {
  LossCase c;
  const float grad_scale = 1.0f / c.N;
  std::vector<float> want_l, want_g;
  split_cross_entropy(dev(), c.z, c.targets, c.V, 1, c.V, grad_scale, &want_l, &want_g);
  const std::pair<int, int> splits[] = {{2, 6}, {3, 4}, {4, 4}};  // (ranks, columns each)
  for (auto [p, rows] : splits) {
    SCOPED_TRACE(std::to_string(p) + " ranks of " + std::to_string(rows) + " columns");
    const int width = p * rows;
    std::vector<float> z(c.N * width);
    for (int i = 0; i < c.N; i++)
      for (int j = 0; j < width; j++) z[i * width + j] = j < c.V ? c.z[i * c.V + j] : 200.0f;
    std::vector<float> losses, grad;
    split_cross_entropy(dev(), z, c.targets, c.V, p, rows, grad_scale, &losses, &grad);
    EXPECT_LT(max_rel_err(losses, to_double(want_l)), 1e-6);
    EXPECT_LT(max_rel_err(grad, to_double(want_g)), 1e-6);
  }
}

// A target in the padding columns is no token: the CPU twin throws, the CUDA one (which
// cannot) makes the loss NaN.
TEST_P(Vocab, CrossEntropyTargetInPaddingIsAnError) {
  const int N = 1, V = 6, valid = 4;
  DevBuf<float> z(dev(), uniform(N * V, 43)), m(dev(), N), s(dev(), N), zt(dev(), N);
  DevBuf<float> losses(dev(), N);
  DevBuf<int> t(dev(), std::vector<int>{5});
  kernels::cross_entropy_row_max(dev(), m.get(), z.get(), N, V, valid);
  if (dev() == Device::CPU) {
    EXPECT_THROW(kernels::cross_entropy_sum_exp(dev(), s.get(), zt.get(), z.get(), m.get(),
                                                t.get(), N, V, valid, 0),
                 std::out_of_range);
    return;
  }
  kernels::cross_entropy_sum_exp(dev(), s.get(), zt.get(), z.get(), m.get(), t.get(), N, V, valid,
                                 0);
  kernels::cross_entropy_finish(dev(), losses.get(), z.get(), t.get(), m.get(), s.get(), zt.get(),
                                N, V, valid, 0, 1.0f);
  EXPECT_TRUE(std::isnan(losses.host()[0]));
}

}  // namespace
