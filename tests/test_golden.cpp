// tests/test_golden.cpp: the model and the optimiser against scripts/reference.py, a second,
// independent statement of notes/model.md in PyTorch (autograd does its backward).
//
// tests/data/golden_{gpt,llama,moe,moe_shared}.bin (checkpoint/tensor_file.h) hold the config, the
// weights, one batch with its logits, loss and every gradient, and ten AdamW steps (losses,
// gradient norms, learning rates, final weights). The reference computes in float64 from
// float32 weights, so what separates it from this float32 model is only float32 rounding.
//
// moe and moe_shared are llama with mixture-of-experts MLPs (scripts/reference_moe.py):
// moe routes every layer to 4 experts, top 2; moe_shared has layer 0 MoE with a gated
// shared expert and layer 1 dense. Their gradients are of the training objective (LM loss
// plus every MoE layer's aux and z losses), and the files add the aux and z losses of the
// single step and of each of the ten, and the single step's tokens per expert. Their seeds
// were chosen so that every token's k-th and (k+1)-th router logits stay >= 2.8e-3 of the
// logit scale apart in every forward: a float32 model routes exactly as the reference (a
// float32 run of the reference does, in all 11 forwards), so the tolerances hold unchanged.
//
// Tolerances. A float32 run of the same reference and paralab's CPU model (November 2025)
// both stay 7-30x inside each of them:
//   logits, gradients  per tensor ||got - want|| / ||want|| <= 1e-5 (norm-wise; measured
//                      1e-6 at worst), and per element |got - want| <= 1e-4 |want| +
//                      1e-5 max|want| (a local bug that a large tensor's norm would hide);
//   single-step loss   relative 1e-5;
//   ten-step losses and gradient norms   relative 1e-4 (measured 3e-6 and 1.4e-5);
//   final weights      norm-wise 1e-3 per tensor (measured 8e-5): an element whose gradient
//                      is near adam_eps (1e-8) moves by lr g/(|g| + eps), so float32 rounding
//                      of a tiny g changes its step by whole percents of lr.
// One exception, in gpt: the key bias has a gradient of exactly zero (adding a constant to
// every score of a query leaves its softmax unchanged), so its computed gradient is rounding
// noise which AdamW normalises into lr-sized steps of random sign; its final value is not
// compared. Its gradient still is: noise far under the tolerance floor.
//
// Every test runs for both families, naive and flash attention, fused and unfused loss; the
// MoE files with flash attention and the fused loss, and naive with the unfused one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"        // defines: ModelConfig, TrainConfig
#include "model/optimizer.h"     // defines: AdamW, learning_rate
#include "checkpoint/tensor_file.h"   // defines: read_tensor_file, NamedTensor
#include "model/transformer.h"   // defines: Transformer
#include "model/moe.h"           // defines: MoeLayerStats

namespace {

using paralab::NamedTensor;

constexpr double kNormTol = 1e-5;
constexpr double kElemRtol = 1e-4;
constexpr double kElemFloor = 1e-5;  // times the largest |want| of the tensor
constexpr double kLossTol = 1e-5;
constexpr double kStepTol = 1e-4;
constexpr double kFinalTol = 1e-3;

// One golden file, read once per test binary.
class Golden {
 public:
  static const Golden& get(const std::string& family) {
    static std::map<std::string, Golden> cache;
    auto it = cache.find(family);
    if (it == cache.end()) it = cache.emplace(family, Golden(family)).first;
    return it->second;
  }
  const NamedTensor& at(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error(path_ + ": no tensor " + name);
    return it->second;
  }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  size_t count_prefix(const std::string& prefix) const {
    size_t n = 0;
    for (const auto& kv : tensors_) n += kv.first.rfind(prefix, 0) == 0;
    return n;
  }
  int i(const std::string& name) const { return at(name).i32.at(0); }
  float f(const std::string& name) const { return at(name).f32.at(0); }
  const std::vector<float>& floats(const std::string& name) const { return at(name).f32; }
  const std::vector<int32_t>& ints(const std::string& name) const { return at(name).i32; }
  const std::string& path() const { return path_; }

 private:
  explicit Golden(const std::string& family) {
    const char* dir = std::getenv("PARALAB_GOLDEN_DIR");
    path_ = std::string(dir ? dir : "tests/data") + "/golden_" + family + ".bin";
    tensors_ = paralab::read_tensor_file(path_);  // throws, naming the file, when missing
  }
  std::string path_;
  std::map<std::string, NamedTensor> tensors_;
};

paralab::ModelConfig model_config(const Golden& g, paralab::AttentionImpl attention,
                                  bool fused_ce) {
  paralab::ModelConfig m;
  m.arch = g.i("config.arch") == 0 ? paralab::Arch::GPT : paralab::Arch::LLAMA;
  m.num_layers = g.i("config.num_layers");
  m.hidden_size = g.i("config.hidden_size");
  m.ffn_hidden_size = g.i("config.ffn_hidden_size");
  m.num_attention_heads = g.i("config.num_attention_heads");
  m.num_query_groups = g.i("config.num_query_groups");
  m.seq_length = g.i("config.seq_length");
  m.vocab_size = g.i("config.vocab_size");
  m.norm_epsilon = g.f("config.norm_epsilon");
  m.rope_theta = g.f("config.rope_theta");
  m.hidden_dropout = 0.0f;
  m.attention_dropout = 0.0f;
  m.attention = attention;
  m.fused_cross_entropy = fused_ce;
  m.cross_entropy_chunk = 10;  // does not divide B*S = 32: several chunks and a ragged last one
  if (g.has("config.num_experts")) {  // the MoE files (scripts/reference_moe.py)
    paralab::Moe& moe = m.moe;
    moe.num_experts = g.i("config.num_experts");
    moe.ffn_hidden_size = g.i("config.moe_ffn_hidden_size");
    const std::vector<int32_t>& pattern = g.ints("config.moe_layer_pattern");
    moe.layer_pattern.assign(pattern.begin(), pattern.end());
    moe.topk = g.i("config.moe_topk");
    moe.aux_loss_coeff = g.f("config.moe_aux_loss_coeff");
    moe.z_loss_coeff = g.f("config.moe_z_loss_coeff");
    moe.shared_expert_size = g.i("config.moe_shared_expert_size");
    moe.shared_expert_gate = g.i("config.moe_shared_expert_gate") != 0;
    moe.score = paralab::Moe::Score::SOFTMAX;  // top-k, then softmax over the k
    moe.pre_softmax = false;
    moe.balancing = paralab::Moe::Balancing::AUX_LOSS;
    moe.capacity_factor = 0.0f;  // dropless
  }
  return m;
}

paralab::TrainConfig train_config(const Golden& g) {
  const paralab::LrDecay styles[] = {paralab::LrDecay::CONSTANT, paralab::LrDecay::LINEAR,
                                     paralab::LrDecay::COSINE};  // the file's 0, 1, 2
  paralab::TrainConfig t;
  t.micro_batch_size = g.i("config.micro_batch_size");
  t.global_batch_size = t.micro_batch_size;
  t.train_iters = g.i("train.train_iters");
  t.lr = g.f("train.lr");
  t.min_lr = g.f("train.min_lr");
  t.lr_warmup_iters = g.i("train.lr_warmup_iters");
  t.lr_decay_iters = g.i("train.lr_decay_iters");
  t.lr_decay_style = styles[g.i("train.lr_decay_style")];
  t.weight_decay = g.f("train.weight_decay");
  t.clip_grad = g.f("train.clip_grad");
  t.adam_beta1 = g.f("train.adam_beta1");
  t.adam_beta2 = g.f("train.adam_beta2");
  t.adam_eps = g.f("train.adam_eps");
  return t;
}

// A CPU model holding the golden (initial) weights.
std::unique_ptr<paralab::Transformer> golden_model(const Golden& g,
                                                   const paralab::ModelConfig& cfg) {
  auto model = std::make_unique<paralab::Transformer>(cfg, kernels::Device::CPU);
  for (const paralab::ParamSpec& p : model->table()) model->set_param(p.name, g.floats(p.name));
  return model;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

double rel(double got, double want) { return std::fabs(got - want) / std::fabs(want); }

bool is_moe(const Golden& g) { return g.has("aux_loss"); }

// The aux and z losses the model summed since reset_moe_stats(), added over its layers.
struct MoeLosses {
  double aux = 0, z = 0;
};
MoeLosses moe_losses(const paralab::Transformer& model) {
  MoeLosses sum;
  for (const paralab::MoeLayerState& layer : model.moe_layers()) {
    sum.aux += layer.stats.aux_loss;
    sum.z += layer.stats.z_loss;
  }
  return sum;
}

// The norm-wise and elementwise checks of the header; `skip` marks elements not compared.
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want,
                                 double norm_tol, bool elementwise,
                                 const std::vector<bool>& skip = {}) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << ", golden " << want.size();
  double diff2 = 0, want2 = 0, want_max = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!skip.empty() && skip[i]) continue;
    diff2 += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
    want2 += (double)want[i] * want[i];
    want_max = std::max(want_max, std::fabs((double)want[i]));
  }
  const double norm_err = want2 > 0 ? std::sqrt(diff2 / want2) : std::sqrt(diff2);
  if (!(norm_err <= norm_tol))  // written so that NaN fails
    return ::testing::AssertionFailure()
           << "norm-wise relative error " << norm_err << " > " << norm_tol;
  if (elementwise) {
    for (size_t i = 0; i < want.size(); ++i) {
      if (!skip.empty() && skip[i]) continue;
      const double err = std::fabs((double)got[i] - want[i]);
      if (!(err <= kElemRtol * std::fabs(want[i]) + kElemFloor * want_max))
        return ::testing::AssertionFailure()
               << "element " << i << ": " << got[i] << ", golden " << want[i];
    }
  }
  return ::testing::AssertionSuccess() << "norm-wise relative error " << norm_err;
}

// gpt's key-bias rows: per query group the rows are [a/g query heads | key | value], d each.
std::vector<bool> key_bias_rows(const paralab::ModelConfig& m) {
  const int d = m.head_dim(), per = m.num_attention_heads / m.groups();
  std::vector<bool> key(m.qkv_size());
  for (int r = 0; r < m.qkv_size(); ++r) key[r] = (r % ((per + 2) * d)) / d == per;
  return key;
}

struct Variant {
  std::string family;
  paralab::AttentionImpl attention;
  bool fused_ce;
};

void PrintTo(const Variant& v, std::ostream* os) {
  *os << v.family << (v.attention == paralab::AttentionImpl::FLASH ? " flash" : " naive")
      << (v.fused_ce ? " fused-ce" : " unfused-ce");
}

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  const Variant& v = info.param;
  return v.family + (v.attention == paralab::AttentionImpl::FLASH ? "_flash" : "_naive") +
         (v.fused_ce ? "_fused" : "_unfused");
}

class GoldenTest : public ::testing::TestWithParam<Variant> {
 protected:
  const Golden& golden() const { return Golden::get(GetParam().family); }
  paralab::ModelConfig config() const {
    return model_config(golden(), GetParam().attention, GetParam().fused_ce);
  }
};

// The C++ table and the reference's must agree name for name and shape for shape.
TEST_P(GoldenTest, ParamTableMatchesReference) {
  const Golden& g = golden();
  const auto table = paralab::param_table(config());
  for (const paralab::ParamSpec& p : table) {
    ASSERT_TRUE(g.has(p.name)) << p.name << " is not in " << g.path();
    EXPECT_EQ(g.at(p.name).shape, p.shape) << p.name;
    EXPECT_EQ(g.at("grad." + p.name).shape, p.shape) << p.name;
  }
  EXPECT_EQ(g.count_prefix("grad."), table.size()) << "the reference has other parameters";
  EXPECT_EQ(g.floats("logits").size(), (size_t)g.i("config.micro_batch_size") *
                                           g.i("config.seq_length") * g.i("config.vocab_size"));
}

TEST_P(GoldenTest, ForwardBackwardMatchesReference) {
  const Golden& g = golden();
  const int B = g.i("config.micro_batch_size");
  const paralab::ModelConfig cfg = config();
  auto model = golden_model(g, cfg);
  model->keep_logits(true);
  model->zero_grads();
  model->reset_moe_stats();
  const float loss =
      model->forward(g.ints("tokens").data(), g.ints("targets").data(), B, 1.0f, 0);
  model->backward();

  EXPECT_LE(rel(loss, g.f("loss")), kLossTol) << loss << ", golden " << g.f("loss");
  if (is_moe(g)) {
    const MoeLosses moe = moe_losses(*model);
    EXPECT_LE(rel(moe.aux, g.f("aux_loss")), kLossTol)
        << "aux loss " << moe.aux << ", golden " << g.f("aux_loss");
    EXPECT_LE(rel(moe.z, g.f("z_loss")), kLossTol)
        << "z loss " << moe.z << ", golden " << g.f("z_loss");
    // Routing is exact (the margins are wide): every MoE layer's counts equal the file's.
    const int E = cfg.moe.num_experts;
    const std::vector<int32_t>& want = g.ints("tokens_per_expert");  // (L, E)
    ASSERT_EQ(model->moe_layers().size(), (size_t)cfg.num_layers);
    for (int l = 0; l < cfg.num_layers; ++l) {
      if (!cfg.moe.is_moe_layer(l)) continue;
      const paralab::MoeLayerStats& s = model->moe_layers()[l].stats;
      EXPECT_EQ(s.tokens_per_expert,
                std::vector<long long>(want.begin() + l * E, want.begin() + (l + 1) * E))
          << "layer " << l << " tokens per expert";
      EXPECT_EQ(s.dropped_pairs, 0) << "layer " << l << ": dropless";
    }
  }
  EXPECT_TRUE(close(model->last_logits(), g.floats("logits"), kNormTol, true)) << "logits";
  for (const paralab::ParamSpec& p : model->table())
    EXPECT_TRUE(close(model->get_grad(p.name), g.floats("grad." + p.name), kNormTol, true))
        << "grad." << p.name;
}

// Two microbatches of half weight accumulate (+=) into the gradient of one at full weight.
TEST_P(GoldenTest, ScaledMicrobatchesAccumulate) {
  const Golden& g = golden();
  const int B = g.i("config.micro_batch_size");
  auto model = golden_model(g, config());
  model->zero_grads();
  for (int k = 0; k < 2; ++k) {
    model->forward(g.ints("tokens").data(), g.ints("targets").data(), B, 0.5f, 0);
    model->backward();
  }
  for (const paralab::ParamSpec& p : model->table())
    EXPECT_TRUE(close(model->get_grad(p.name), g.floats("grad." + p.name), kNormTol, true))
        << "grad." << p.name;
}

TEST_P(GoldenTest, AdamWStepsMatchReference) {
  const Golden& g = golden();
  const paralab::ModelConfig cfg = config();
  const paralab::TrainConfig train = train_config(g);
  const int B = train.micro_batch_size, S = cfg.seq_length, T = train.train_iters;
  const std::vector<int32_t>& tokens = g.ints("steps.tokens");
  const std::vector<int32_t>& targets = g.ints("steps.targets");
  auto model = golden_model(g, cfg);
  paralab::AdamW opt(*model, train);

  for (int t = 1; t <= T; ++t) {
    const size_t at = (size_t)(t - 1) * B * S;
    model->zero_grads();
    model->reset_moe_stats();
    const float loss = model->forward(tokens.data() + at, targets.data() + at, B, 1.0f, 0);
    model->backward();
    if (is_moe(g)) {
      const MoeLosses moe = moe_losses(*model);
      const double aux = g.floats("steps.aux_losses")[t - 1];
      const double z = g.floats("steps.z_losses")[t - 1];
      EXPECT_LE(rel(moe.aux, aux), kStepTol)
          << "step " << t << " aux loss " << moe.aux << ", golden " << aux;
      EXPECT_LE(rel(moe.z, z), kStepTol) << "step " << t << " z loss " << moe.z << ", golden "
                                         << z;
    }
    const float lr = paralab::learning_rate(train, t);
    const float norm = opt.step(lr);
    EXPECT_LE(rel(lr, g.floats("steps.lr")[t - 1]), 1e-6) << "step " << t << " lr " << lr;
    EXPECT_LE(rel(loss, g.floats("steps.losses")[t - 1]), kStepTol)
        << "step " << t << " loss " << loss << ", golden " << g.floats("steps.losses")[t - 1];
    EXPECT_LE(rel(norm, g.floats("steps.grad_norms")[t - 1]), kStepTol)
        << "step " << t << " grad norm " << norm << ", golden "
        << g.floats("steps.grad_norms")[t - 1];
  }
  EXPECT_EQ(opt.steps_taken(), T);
  for (const paralab::ParamSpec& p : model->table()) {
    const bool qkv_bias = ends_with(p.name, "attn.qkv.bias");
    EXPECT_TRUE(close(model->get_param(p.name), g.floats("final." + p.name), kFinalTol, false,
                      qkv_bias ? key_bias_rows(cfg) : std::vector<bool>{}))
        << "final." << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Golden, GoldenTest,
    ::testing::Values(Variant{"gpt", paralab::AttentionImpl::NAIVE, false},
                      Variant{"gpt", paralab::AttentionImpl::FLASH, true},
                      Variant{"gpt", paralab::AttentionImpl::NAIVE, true},
                      Variant{"gpt", paralab::AttentionImpl::FLASH, false},
                      Variant{"llama", paralab::AttentionImpl::NAIVE, false},
                      Variant{"llama", paralab::AttentionImpl::FLASH, true},
                      Variant{"llama", paralab::AttentionImpl::NAIVE, true},
                      Variant{"llama", paralab::AttentionImpl::FLASH, false}),
    variant_name);

INSTANTIATE_TEST_SUITE_P(
    GoldenMoe, GoldenTest,
    ::testing::Values(Variant{"moe", paralab::AttentionImpl::FLASH, true},
                      Variant{"moe", paralab::AttentionImpl::NAIVE, false},
                      Variant{"moe_shared", paralab::AttentionImpl::FLASH, true},
                      Variant{"moe_shared", paralab::AttentionImpl::NAIVE, false}),
    variant_name);

// The MoE files themselves, without the model: the config they carry reads into a
// ModelConfig, its MoE layers have the router, expert and shared-expert tensors (and no
// dense fc1/fc2), and the routing counts add up to N k per MoE layer (dropless).
TEST(GoldenMoeFile, ConfigTensorsAndCountsAgree) {
  for (const char* family : {"moe", "moe_shared"}) {
    SCOPED_TRACE(family);
    const Golden& g = Golden::get(family);
    const paralab::ModelConfig m = model_config(g, paralab::AttentionImpl::FLASH, true);
    ASSERT_TRUE(m.moe.enabled());
    ASSERT_EQ(m.moe.layer_pattern.size(), (size_t)m.num_layers);
    const int64_t E = m.moe.num_experts, h = m.hidden_size, fe = m.moe_ffn();
    const int64_t fs = m.moe.shared_expert_size;
    const int64_t N = (int64_t)g.i("config.micro_batch_size") * m.seq_length;
    const std::vector<int32_t>& counts = g.ints("tokens_per_expert");
    ASSERT_EQ(g.at("tokens_per_expert").shape, (std::vector<int64_t>{m.num_layers, E}));
    int moe_layers = 0;
    for (int l = 0; l < m.num_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".mlp.";
      int64_t pairs = 0;
      for (int e = 0; e < E; ++e) pairs += counts[l * E + e];
      if (!m.moe.is_moe_layer(l)) {
        EXPECT_TRUE(g.has(p + "fc1.weight") && !g.has(p + "router.weight")) << l;
        EXPECT_EQ(pairs, 0) << l;
        continue;
      }
      ++moe_layers;
      EXPECT_FALSE(g.has(p + "fc1.weight") || g.has(p + "fc2.weight")) << l;
      EXPECT_EQ(g.at(p + "router.weight").shape, (std::vector<int64_t>{E, h}));
      EXPECT_EQ(g.at(p + "experts.fc1.weight").shape, (std::vector<int64_t>{E, 2 * fe, h}));
      EXPECT_EQ(g.at(p + "experts.fc2.weight").shape, (std::vector<int64_t>{E, h, fe}));
      EXPECT_EQ(g.has(p + "shared.fc1.weight"), fs > 0);
      if (fs > 0) {
        EXPECT_EQ(g.at(p + "shared.fc1.weight").shape, (std::vector<int64_t>{2 * fs, h}));
        EXPECT_EQ(g.at(p + "shared.fc2.weight").shape, (std::vector<int64_t>{h, fs}));
      }
      EXPECT_EQ(g.has(p + "shared.gate.weight"), fs > 0 && m.moe.shared_expert_gate);
      EXPECT_EQ(pairs, N * m.moe.topk) << l;
    }
    EXPECT_GT(moe_layers, 0);
    // Near balance, each MoE layer's aux loss is about alpha; z is positive.
    EXPECT_GT(g.f("aux_loss"), 0.9 * moe_layers * m.moe.aux_loss_coeff);
    EXPECT_LT(g.f("aux_loss"), 2.0 * moe_layers * m.moe.aux_loss_coeff);
    EXPECT_GT(g.f("z_loss"), 0.0f);
    EXPECT_EQ(g.floats("steps.aux_losses").size(), (size_t)g.i("train.train_iters"));
    EXPECT_EQ(g.floats("steps.z_losses").size(), (size_t)g.i("train.train_iters"));
  }
}

}  // namespace
