// tests/test_bf16.cpp: --bf16 storage. The rounding itself, the CPU twins of the bf16 ops
// ("widen, run the fp32 twin, round": so they must equal exactly that), and a whole model
// whose bf16 training tracks its fp32 training: bf16 keeps ~3 significant digits, so over
// ten steps the losses agree to ~1e-2 relative, not to fp32's 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/math.h"
#include "kernels/ops.h"
#include "model/optimizer.h"
#include "model/param_table.h"
#include "model/transformer.h"
#include "parallel/data_parallel.h"

namespace {

using kernels::bits_to_float;
using kernels::bf16;
using kernels::Device;
using kernels::to_bf16;
using kernels::to_float;


TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3F80);
  EXPECT_EQ(to_float(to_bf16(1.0f)), 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0)
  EXPECT_EQ(to_bf16(bits_to_float(0x3F808000u)).bits, 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up
  EXPECT_EQ(to_bf16(bits_to_float(0x3F818000u)).bits, 0x3F82);
  // just above halfway rounds up
  EXPECT_EQ(to_bf16(bits_to_float(0x3F808001u)).bits, 0x3F81);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(to_float(to_bf16(std::numeric_limits<float>::infinity()))));
  // relative rounding error at most 2^-9
  for (float x : {3.14159f, -2.71828e-3f, 1.2345e20f, 7.0e-30f})
    EXPECT_LE(std::fabs(to_float(to_bf16(x)) - x), std::ldexp(std::fabs(x), -9));
}

std::vector<bf16> rounded(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
  return out;
}
std::vector<float> widened(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
  return out;
}
std::vector<float> random_values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = kernels::counter_uniform(seed, 0, i) * 2.0f - 1.0f;
  return v;
}

TEST(Bf16, GemmIsTheFp32GemmOfRoundedInputs) {
  const int m = 7, n = 5, k = 9;
  auto a = rounded(random_values(m * k, 1)), b = rounded(random_values(k * n, 2));
  auto c = rounded(random_values(m * n, 3));
  std::vector<float> fa = widened(a), fb = widened(b), fc = widened(c);
  kernels::gemm(Device::CPU, false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 1.0f,
                c.data(), n);
  kernels::gemm(Device::CPU, false, true, m, n, k, 1.0f, fa.data(), k, fb.data(), k, 1.0f,
                fc.data(), n);
  for (int i = 0; i < m * n; ++i) EXPECT_EQ(c[i].bits, to_bf16(fc[i]).bits) << i;
  // the mixed form keeps the fp32 result unrounded (the logits)
  std::vector<float> logits(m * n, 0.0f), want(m * n, 0.0f);
  kernels::gemm(Device::CPU, false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f,
                logits.data(), n);
  kernels::gemm(Device::CPU, false, true, m, n, k, 1.0f, fa.data(), k, fb.data(), k, 0.0f,
                want.data(), n);
  EXPECT_EQ(logits, want);
}

TEST(Bf16, NormsAccumulateIntoRoundedGradients) {
  const int N = 6, C = 16;
  auto x = rounded(random_values(N * C, 4)), w = rounded(random_values(C, 5));
  auto dout = rounded(random_values(N * C, 6));
  std::vector<bf16> dx = rounded(random_values(N * C, 7)), dw = rounded(random_values(C, 8));
  std::vector<float> rstd(N), fdx = widened(dx), fdw = widened(dw), frstd(N);
  std::vector<bf16> out(N * C);
  std::vector<float> fout(N * C);
  kernels::rmsnorm_forward(Device::CPU, out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  kernels::rmsnorm_forward(Device::CPU, fout.data(), frstd.data(), widened(x).data(),
                           widened(w).data(), N, C, 1e-5f);
  EXPECT_EQ(rstd, frstd);  // statistics stay fp32
  for (int i = 0; i < N * C; ++i) EXPECT_EQ(out[i].bits, to_bf16(fout[i]).bits);
  kernels::rmsnorm_backward(Device::CPU, dx.data(), dw.data(), dout.data(), x.data(), w.data(),
                            rstd.data(), N, C);
  kernels::rmsnorm_backward(Device::CPU, fdx.data(), fdw.data(), widened(dout).data(),
                            widened(x).data(), widened(w).data(), frstd.data(), N, C);
  for (int i = 0; i < N * C; ++i) EXPECT_EQ(dx[i].bits, to_bf16(fdx[i]).bits);
  for (int i = 0; i < C; ++i) EXPECT_EQ(dw[i].bits, to_bf16(fdw[i]).bits);
}

TEST(Bf16, AdamWUpdatesTheMasterAndRoundsTheParameter) {
  const size_t n = 32;
  std::vector<float> master = random_values(n, 9), m(n, 0.0f), v(n, 0.0f);
  std::vector<float> fmaster = master, fm = m, fv = v;
  auto grads = rounded(random_values(n, 10));
  const std::vector<float> wide = widened(grads);
  std::vector<bf16> params(n);
  kernels::AdamStep step;
  step.lr = 1e-2f, step.beta1 = 0.9f, step.beta2 = 0.95f, step.eps = 1e-8f;
  step.bias1 = 0.1f, step.bias2 = 0.05f;
  // two runs (the second without weight decay) against the fp32 op on the widened gradients
  kernels::AdamRun a, b;
  a.master = master.data(), a.params = params.data(), a.grads = grads.data(), a.m = m.data();
  a.v = v.data(), a.n = 20, a.weight_decay = 0.1f;
  b = a;
  b.master += 20, b.params = params.data() + 20, b.grads = grads.data() + 20, b.m = m.data() + 20, b.v = v.data() + 20;
  b.n = 12, b.weight_decay = 0.0f;
  const kernels::AdamRun runs[2] = {a, b};
  kernels::adamw_update<bf16>(Device::CPU, runs, 2, step);
  kernels::AdamRun fa = a, fb = b;
  fa.master = fmaster.data(), fa.params = nullptr, fa.grads = wide.data(), fa.m = fm.data();
  fa.v = fv.data();
  fb.master = fmaster.data() + 20, fb.params = nullptr, fb.grads = wide.data() + 20;
  fb.m = fm.data() + 20, fb.v = fv.data() + 20;
  const kernels::AdamRun fruns[2] = {fa, fb};
  kernels::adamw_update<float>(Device::CPU, fruns, 2, step);
  EXPECT_EQ(master, fmaster);
  EXPECT_EQ(m, fm);
  EXPECT_EQ(v, fv);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(params[i].bits, to_bf16(master[i]).bits);
}

// One ring pass in bf16 (the second half of 6 local rows against another rank's 6 keys, with
// dropout): o is the rounded fp32 o; backward's dq stays fp32 and accumulates, dk and dv
// widen, take the fp32 pass's share and round; the merge takes the widened o_pass.
TEST(Bf16, FlashPassOnAViewIsTheFp32PassRounded) {
  const int B = 1, A = 2, G = 1, D = 4, L = 6, half = 3;
  kernels::AttentionBlock blk;
  kernels::TokenPositions mine, theirs;
  mine.start[0] = 9;  // my second chunk: positions 9..11
  theirs.chunk = 3;   // their chunks: 3..5 and 6..8
  theirs.start[0] = 3;
  theirs.start[1] = 6;
  blk.q = kernels::AttentionRows{half, (long long)L * D, mine};
  blk.k = kernels::AttentionRows{L, (long long)L * D, theirs};
  blk.causal = false;
  blk.dropout_heads = A;
  blk.dropout_length = 12;
  const size_t nq = (size_t)B * A * L * D, nk = (size_t)B * G * L * D, off = (size_t)half * D;
  auto q = rounded(random_values(nq, 20)), k = rounded(random_values(nk, 21));
  auto v = rounded(random_values(nk, 22)), dout = rounded(random_values(nq, 23));
  std::vector<bf16> o(nq);
  std::vector<float> fo(nq), lse(B * A * L, 0.0f), flse(B * A * L, 0.0f);
  kernels::flash_attention_forward(Device::CPU, o.data() + off, lse.data() + half, q.data() + off,
                                   k.data(), v.data(), B, A, G, D, 0.5f, 0.2f, 3, 4, blk);
  kernels::flash_attention_forward(Device::CPU, fo.data() + off, flse.data() + half,
                                   widened(q).data() + off, widened(k).data(), widened(v).data(),
                                   B, A, G, D, 0.5f, 0.2f, 3, 4, blk);
  EXPECT_EQ(lse, flse);
  for (size_t i = 0; i < nq; ++i) EXPECT_EQ(o[i].bits, to_bf16(fo[i]).bits) << i;

  std::vector<float> dq = random_values(nq, 24), fdq = dq;
  std::vector<bf16> dk = rounded(random_values(nk, 25)), dv = rounded(random_values(nk, 26));
  std::vector<float> fdk = widened(dk), fdv = widened(dv);
  kernels::flash_attention_backward(Device::CPU, dq.data() + off, dk.data(), dv.data(),
                                    dout.data() + off, q.data() + off, k.data(), v.data(),
                                    o.data() + off, lse.data() + half, B, A, G, D, 0.5f, 0.2f, 3,
                                    4, blk);
  kernels::flash_attention_backward(Device::CPU, fdq.data() + off, fdk.data(), fdv.data(),
                                    widened(dout).data() + off, widened(q).data() + off,
                                    widened(k).data(), widened(v).data(), widened(o).data() + off,
                                    lse.data() + half, B, A, G, D, 0.5f, 0.2f, 3, 4, blk);
  EXPECT_EQ(dq, fdq);
  for (size_t i = 0; i < nk; ++i) EXPECT_EQ(dk[i].bits, to_bf16(fdk[i]).bits) << i;
  for (size_t i = 0; i < nk; ++i) EXPECT_EQ(dv[i].bits, to_bf16(fdv[i]).bits) << i;

  std::vector<float> acc = random_values(nq, 27), facc = acc, acc_lse(B * A * L, 0.3f);
  std::vector<float> facc_lse = acc_lse;
  kernels::attention_merge(Device::CPU, acc.data() + off, acc_lse.data() + half, o.data() + off,
                           lse.data() + half, B * A, D, blk.q);
  kernels::attention_merge(Device::CPU, facc.data() + off, facc_lse.data() + half,
                           widened(o).data() + off, lse.data() + half, B * A, D, blk.q);
  EXPECT_EQ(acc, facc);
  EXPECT_EQ(acc_lse, facc_lse);
}

// Ten AdamW steps of a small llama and gpt in bf16 and in fp32 from the same initial
// weights and data: the losses agree to 2e-2 relative and the bf16 loss falls. `moe`: the
// MLPs (default: dense everywhere).
std::vector<float> train_losses(paralab::Arch arch, bool bf16_storage,
                                const paralab::Moe& moe = paralab::Moe()) {
  paralab::ModelConfig m;
  m.arch = arch;
  m.moe = moe;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.num_query_groups = arch == paralab::Arch::LLAMA ? 2 : 0;
  m.seq_length = 16;
  m.vocab_size = 64;
  paralab::TrainConfig t;
  t.lr = 1e-2f;
  t.min_lr = 1e-3f;
  t.train_iters = 10;
  paralab::DataParallelOptions options;
  options.storage = (bf16_storage) ? paralab::DType::BF16 : paralab::DType::F32;
  paralab::DataParallel dp(paralab::param_units(m), nullptr, options, Device::CPU);
  paralab::Transformer model(m, Device::CPU, &dp);
  model.init_parameters(7);
  paralab::AdamW opt(model, t);
  const int B = 2, N = B * m.seq_length;
  std::vector<int> tokens(N), targets(N);
  std::vector<float> losses;
  for (int step = 1; step <= t.train_iters; ++step) {
    for (int i = 0; i < N; ++i) {
      tokens[i] = (int)(kernels::mix64(step * 1000 + i) % m.vocab_size);
      targets[i] = (tokens[i] * 5 + 3) % m.vocab_size;  // a learnable rule
    }
    model.zero_grads();
    dp.begin_microbatch(true);
    losses.push_back(model.forward(tokens.data(), targets.data(), B, 1.0f, 0));
    model.backward();
    opt.step(paralab::learning_rate(t, step));
  }
  return losses;
}

TEST(Bf16, TrainingTracksFp32) {
  for (auto arch : {paralab::Arch::GPT, paralab::Arch::LLAMA}) {
    const auto fp32 = train_losses(arch, false), bf = train_losses(arch, true);
    for (size_t i = 0; i < fp32.size(); ++i)
      EXPECT_NEAR(bf[i], fp32[i], 2e-2 * fp32[i]) << "step " << i + 1;
    EXPECT_LT(bf.back(), bf.front() - 0.2f);
  }
}

// The same for llama with the golden MoE layers (tests/test_golden.cpp): every layer routed
// to 4 experts, top 2; and layer 0 with a gated shared expert, layer 1 dense. bf16 may
// route a near-tied token differently from fp32; such a token's two experts have nearly
// equal gates, so the loss moves far less than the tolerance.
TEST(Bf16, MoeTrainingTracksFp32) {
  paralab::Moe routed;
  routed.num_experts = 4;
  routed.ffn_hidden_size = 24;
  routed.topk = 2;
  routed.aux_loss_coeff = 1e-2f;
  routed.z_loss_coeff = 1e-3f;
  paralab::Moe shared = routed;
  shared.layer_pattern = {1, 0};
  shared.shared_expert_size = 32;
  shared.shared_expert_gate = true;
  for (const paralab::Moe& moe : {routed, shared}) {
    SCOPED_TRACE(moe.shared_expert_size ? "moe_shared" : "moe");
    const auto fp32 = train_losses(paralab::Arch::LLAMA, false, moe);
    const auto bf = train_losses(paralab::Arch::LLAMA, true, moe);
    for (size_t i = 0; i < fp32.size(); ++i)
      EXPECT_NEAR(bf[i], fp32[i], 2e-2 * fp32[i]) << "step " << i + 1;
    EXPECT_LT(bf.back(), bf.front() - 0.2f);
  }
}

}  // namespace
