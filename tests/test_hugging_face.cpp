// tests/test_hugging_face.cpp: the Hugging Face export and import (checkpoint/hugging_face.h).
//
// Export then import is the identity, bit for bit in F32, for every family (GPT-2, Llama with
// grouped-query attention, Qwen3, Qwen3-MoE with a dense layer, Mixtral); BF16 stores
// to_bf16 of each value. The names, shapes and element positions are Hugging Face's (spot
// checks of the fused tensors' splits); what Hugging
// Face cannot hold is refused with one line naming the flag; a small shard size gives an
// index covering every tensor; a folder with a tensor removed, renamed, reshaped or of an
// integer dtype fails naming the file and the tensor. scripts/hf_check.py checks the
// logits against transformers itself; test_hugging_face_config.cpp holds config.json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <set>
#include <string>
#include <vector>
#include "checkpoint/hugging_face.h"
#include "checkpoint/json_document.h"
#include "kernels/math.h"  // to_bf16, to_float
#include "model/param_table.h"
#include "tests/test_hugging_face_helpers.h"

namespace paralab {
namespace {

using namespace hf_test;  // TempFolder, the families' models, random_tensors, the readers

// Rewrites FOLDER/model.safetensors through edit(name, dtype, shape, bytes), which returns
// false to drop the tensor.
using Edit = std::function<bool(std::string&, SafeDType&, std::vector<int64_t>&,
                                std::vector<uint8_t>&)>;
void rewrite(const std::string& folder, const Edit& edit) {
  const std::string path = folder + "/model.safetensors";
  SafetensorsWriter w;
  {
    SafetensorsReader r(path);
    for (const SafeTensor& t : r.header().tensors) {
      std::vector<uint8_t> bytes(t.end - t.begin);
      r.read(t, 0, bytes.size(), bytes.data());
      std::string name = t.name;
      SafeDType dtype = t.dtype;
      std::vector<int64_t> shape = t.shape;
      if (edit(name, dtype, shape, bytes)) w.add(name, dtype, shape, bytes.data(), bytes.size());
    }
  }
  w.write(path);
}

// ---- round trips -------------------------------------------------------------------------

struct Family {
  const char* name;
  ModelConfig (*config)();
  const char* architecture;
};
const Family kFamilies[] = {{"gpt", gpt, "GPT2LMHeadModel"},
                            {"llama", llama, "LlamaForCausalLM"},
                            {"qwen3", qwen3, "Qwen3ForCausalLM"},
                            {"qwen3_moe", qwen3_moe, "Qwen3MoeForCausalLM"},
                            {"mixtral", mixtral, "MixtralForCausalLM"}};

TEST(HuggingFace, RoundTripIsBitExactForEveryFamily) {
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.name);
    const ModelConfig m = f.config();
    const LogicalTensors want = random_tensors(m);
    TempFolder dir;
    const HfExport e = export_hugging_face(dir.path(), m, want);
    EXPECT_EQ(e.architecture, f.architecture);
    EXPECT_EQ(e.files, (std::vector<std::string>{"model.safetensors", "config.json"}));
    EXPECT_EQ(e.payload_bytes, (uint64_t)parameter_count(m) * 4);
    EXPECT_EQ(dir.files(), (std::set<std::string>{"model.safetensors", "config.json"}));
    EXPECT_NO_THROW(check_hugging_face_config(dir.path(), m));
    EXPECT_TRUE(bitwise_equal(import_hugging_face(dir.path(), m), want));
    SafetensorsReader r(dir.path() + "/model.safetensors");
    const std::string* format = r.header().meta("format");
    ASSERT_NE(format, nullptr);
    EXPECT_EQ(*format, "pt");
  }
}

TEST(HuggingFace, Bf16ExportStoresEachValueRounded) {
  const ModelConfig m = qwen3_moe();
  const LogicalTensors values = random_tensors(m);
  TempFolder dir;
  const HfExport e = export_hugging_face(dir.path(), m, values, SafeDType::BF16);
  EXPECT_EQ(e.payload_bytes, (uint64_t)parameter_count(m) * 2);
  SafetensorsReader r(dir.path() + "/model.safetensors");
  for (const SafeTensor& t : r.header().tensors) EXPECT_EQ(t.dtype, SafeDType::BF16) << t.name;
  EXPECT_NE(read_text(dir.path() + "/config.json").find("\"dtype\": \"bfloat16\""),
            std::string::npos);
  const LogicalTensors got = import_hugging_face(dir.path(), m);
  for (const auto& [name, v] : values)
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(got.at(name)[i], kernels::to_float(kernels::to_bf16(v[i]))) << name << " " << i;
}

// F16 (--export-hf-dtype fp16): a weight that would round to infinity is refused, naming the
// tensor, before any file is written; 65504 itself is fp16's largest finite value.
TEST(HuggingFace, Fp16ExportRefusesAWeightPastItsRange) {
  const ModelConfig m = gpt();
  LogicalTensors values = random_tensors(m);
  values.begin()->second[0] = 65504.0f;
  TempFolder ok;
  export_hugging_face(ok.path(), m, values, SafeDType::F16);
  values.begin()->second[0] = -70000.0f;
  TempFolder dir;
  const std::string why =
      input_error([&] { export_hugging_face(dir.path(), m, values, SafeDType::F16); });
  EXPECT_NE(why.find(values.begin()->first + " holds -70000"), std::string::npos) << why;
  EXPECT_EQ(access((dir.path() + "/model.safetensors").c_str(), F_OK), -1);  // nothing written
}

// ---- names, shapes and positions ---------------------------------------------------------

TEST(HuggingFace, Gpt2NamesConv1dLayoutAndQkvColumns) {
  const ModelConfig m = gpt();
  const int64_t h = 16, d = 4;
  const LogicalTensors t = random_tensors(m);
  TempFolder dir;
  export_hugging_face(dir.path(), m, t);
  const std::string file = dir.path() + "/model.safetensors";
  std::vector<int64_t> shape;
  const std::vector<float> c_attn = read_tensor(file, "h.0.attn.c_attn.weight", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{h, 3 * h}));
  // column h + 1 d + 2: the key of head 1, channel 2; paralab's row 1 (3d) + d + 2, input 5
  const std::vector<float>& qkv = t.at("layers.0.attn.qkv.weight");
  EXPECT_EQ(c_attn[5 * 3 * h + h + d + 2], qkv[(3 * d + d + 2) * h + 5]);
  // column 2h + 3d: the value of head 3, channel 0
  EXPECT_EQ(c_attn[7 * 3 * h + 2 * h + 3 * d], qkv[(3 * 3 * d + 2 * d) * h + 7]);
  EXPECT_EQ(read_tensor(file, "h.1.mlp.c_fc.weight", &shape)[3 * 4 * h + 9],
            t.at("layers.1.mlp.fc1.weight")[9 * h + 3]);  // [in, out] = fc1[out][in]
  EXPECT_EQ(shape, (std::vector<int64_t>{h, 4 * h}));
  EXPECT_EQ(read_tensor(file, "wpe.weight", &shape), t.at("embedding.position"));
  EXPECT_EQ(shape, (std::vector<int64_t>{8, h}));
  SafetensorsReader r(file);
  EXPECT_EQ(r.header().find("lm_head.weight"), nullptr) << "the tied head is stored once";
  EXPECT_EQ(r.header().tensors.size(), 4 + 12 * 2u);  // wte wpe ln_f x2; 12 per layer
}

TEST(HuggingFace, LlamaSplitsQkvPerGroupAndFc1IntoGateAndUp) {
  const ModelConfig m = llama();
  const int64_t h = 16, d = 4, f = 24;
  const LogicalTensors t = random_tensors(m);
  TempFolder dir;
  export_hugging_face(dir.path(), m, t);
  const std::string file = dir.path() + "/model.safetensors";
  const std::vector<float>& qkv = t.at("layers.0.attn.qkv.weight");  // 2 groups of [q q k v]
  std::vector<int64_t> shape;
  const std::vector<float> k = read_tensor(file, "model.layers.0.self_attn.k_proj.weight", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{2 * d, h}));
  for (int64_t r = 0; r < 2 * d; ++r)  // key head g, channel c: paralab row g 4d + 2d + c
    for (int64_t c = 0; c < h; ++c)
      ASSERT_EQ(k[r * h + c], qkv[((r / d) * 4 * d + 2 * d + r % d) * h + c]) << r;
  const std::vector<float> q = read_tensor(file, "model.layers.0.self_attn.q_proj.weight", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{4 * d, h}));
  EXPECT_EQ(q[(3 * d + 1) * h], qkv[(4 * d + d + 1) * h]);  // head 3 = group 1's second
  const std::vector<float> up = read_tensor(file, "model.layers.1.mlp.up_proj.weight", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{f, h}));
  EXPECT_EQ(up[2 * h + 5], t.at("layers.1.mlp.fc1.weight")[(f + 2) * h + 5]);
  EXPECT_EQ(read_tensor(file, "lm_head.weight"), t.at("output.weight"));
}

TEST(HuggingFace, Qwen3MoeExpertsRouterAndNorms) {
  const ModelConfig m = qwen3_moe();
  const int64_t h = 16, fe = 8;
  const LogicalTensors t = random_tensors(m);
  TempFolder dir;
  export_hugging_face(dir.path(), m, t);
  const std::string file = dir.path() + "/model.safetensors";
  std::vector<int64_t> shape;
  const std::vector<float> up =
      read_tensor(file, "model.layers.0.mlp.experts.3.up_proj.weight", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{fe, h}));
  const std::vector<float>& fc1 = t.at("layers.0.mlp.experts.fc1.weight");  // (E, 2 fe, h)
  for (int64_t i = 0; i < fe * h; ++i) ASSERT_EQ(up[i], fc1[(3 * 2 * fe + fe) * h + i]) << i;
  const std::vector<float> down =
      read_tensor(file, "model.layers.0.mlp.experts.2.down_proj.weight", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{h, fe}));
  EXPECT_EQ(down[5 * fe + 1], t.at("layers.0.mlp.experts.fc2.weight")[(2 * h + 5) * fe + 1]);
  EXPECT_EQ(read_tensor(file, "model.layers.0.mlp.gate.weight", &shape),
            t.at("layers.0.mlp.router.weight"));
  EXPECT_EQ(shape, (std::vector<int64_t>{4, h}));
  EXPECT_EQ(read_tensor(file, "model.layers.1.self_attn.k_norm.weight"),
            t.at("layers.1.attn.k_norm.weight"));
  EXPECT_EQ(read_tensor(file, "model.layers.1.mlp.down_proj.weight", &shape),
            t.at("layers.1.mlp.fc2.weight"));  // the dense layer
  TempFolder mix;
  export_hugging_face(mix.path(), mixtral(), random_tensors(mixtral()));
  SafetensorsReader r(mix.path() + "/model.safetensors");
  EXPECT_NE(r.header().find("model.layers.1.block_sparse_moe.experts.3.w3.weight"), nullptr);
  EXPECT_NE(r.header().find("model.layers.0.block_sparse_moe.gate.weight"), nullptr);
}

// ---- refusals -----------------------------------------------------------------------------

TEST(HuggingFace, RefusesWhatHuggingFaceCannotHoldInOneLineNamingTheFlag) {
  struct Case {
    std::function<void(ModelConfig&)> change;
    ModelConfig (*base)();
    const char* flag;
  };
  const Case cases[] = {
      {[](ModelConfig& m) { m.num_query_groups = 2; }, gpt, "--num-query-groups"},
      {[](ModelConfig& m) { m.kv_channels = 8; }, gpt, "--kv-channels"},
      {[](ModelConfig& m) { m.qk_layernorm = true; }, gpt, "--qk-layernorm"},
      {[](ModelConfig& m) { m.moe.num_experts = 4; }, gpt, "--num-experts"},
      {[](ModelConfig& m) { m.hidden_size = 18; m.kv_channels = 4; }, llama, "--kv-channels"},
      {[](ModelConfig& m) { m.moe.score = Moe::Score::SIGMOID; }, qwen3_moe,
       "--moe-router-score-function"},
      {[](ModelConfig& m) { m.moe.topk_scaling_factor = 2.5f; }, qwen3_moe,
       "--moe-router-topk-scaling-factor"},
      {[](ModelConfig& m) { m.moe.shared_expert_size = 8; }, qwen3_moe,
       "--moe-shared-expert-intermediate-size"},
      {[](ModelConfig& m) { m.moe.capacity_factor = 1.25f; }, qwen3_moe,
       "--moe-expert-capacity-factor"},
      {[](ModelConfig& m) { m.moe.layer_pattern = {1, 0}; }, mixtral, "--moe-layer-freq"},
      {[](ModelConfig& m) { m.moe.pre_softmax = true; }, mixtral, "--moe-router-pre-softmax"},
  };
  for (const Case& c : cases) {
    ModelConfig m = c.base();
    c.change(m);
    const std::string why = hugging_face_refusal(m);
    SCOPED_TRACE(why);
    EXPECT_EQ(why.rfind(std::string(c.flag) + ": ", 0), 0u);
    EXPECT_EQ(why.find('\n'), std::string::npos);
    TempFolder dir;
    const std::string folder = dir.path() + "/export";
    EXPECT_EQ(input_error([&] { export_hugging_face(folder, m, random_tensors(m)); }),
              folder + ": " + why);
    EXPECT_EQ(access(folder.c_str(), F_OK), -1) << "nothing written";
  }
  EXPECT_EQ(hugging_face_refusal(gpt()), "");
  ModelConfig pre = qwen3_moe();
  pre.moe.pre_softmax = true;  // Qwen3-MoE's norm_topk_prob false
  EXPECT_EQ(hugging_face_refusal(pre), "");
  ModelConfig gqa = gpt();
  gqa.num_query_groups = 2;
  EXPECT_EQ(hugging_face_refusal(gqa), "--num-query-groups: GPT-2 has no grouped-query attention "
                                       "(gpt with 2 query groups for 4 heads)");
}

// ---- shards -------------------------------------------------------------------------------

TEST(HuggingFace, ShardsAndTheirIndexCoverEveryTensor) {
  const ModelConfig m = qwen3_moe();
  const LogicalTensors t = random_tensors(m);
  TempFolder dir;
  export_hugging_face(dir.path(), m, t);  // a single file first: the sharded export replaces it
  const HfExport e = export_hugging_face(dir.path(), m, t, SafeDType::F32, 4096);
  ASSERT_GT(e.files.size(), 3u);
  EXPECT_EQ(e.files.back(), "config.json");
  EXPECT_EQ(e.files[e.files.size() - 2], "model.safetensors.index.json");
  const size_t n = e.files.size() - 2;
  char last[64];
  std::snprintf(last, sizeof last, "model-%05zu-of-%05zu.safetensors", n, n);
  EXPECT_EQ(e.files[n - 1], last);
  EXPECT_EQ(dir.files().count("model.safetensors"), 0u) << "a stale single file would win";

  const Json index = JsonDocument(read_text(dir.path() + "/model.safetensors.index.json")).root();
  EXPECT_EQ((uint64_t)json_int(index.at("metadata").at("total_size")), e.payload_bytes);
  std::set<std::string> in_files;
  uint64_t largest = 0;
  for (size_t s = 0; s < n; ++s) {
    SafetensorsReader r(dir.path() + "/" + e.files[s]);
    uint64_t bytes = 0;
    for (const SafeTensor& st : r.header().tensors) {
      in_files.insert(st.name);
      bytes += st.end - st.begin;
      EXPECT_EQ(index.at("weight_map").at(st.name).get<std::string>(), e.files[s]) << st.name;
    }
    if (r.header().tensors.size() > 1) largest = std::max(largest, bytes);
  }
  EXPECT_LE(largest, 4096u) << "a shard of several tensors stays within max_shard_bytes";
  EXPECT_EQ(index.at("weight_map").size(), in_files.size());
  EXPECT_TRUE(bitwise_equal(import_hugging_face(dir.path(), m), t));
  // and back to one file: the index goes
  export_hugging_face(dir.path(), m, t);
  EXPECT_EQ(dir.files().count("model.safetensors.index.json"), 0u);
  for (size_t s = 0; s < n; ++s) std::remove((dir.path() + "/" + e.files[s]).c_str());
}

// ---- strict import ------------------------------------------------------------------------

TEST(HuggingFace, ImportNamesTheFileAndTheTensorThatIsWrong) {
  const ModelConfig m = llama();
  const std::string k = "model.layers.0.self_attn.k_proj.weight";
  TempFolder dir;
  const std::string file = dir.path() + "/model.safetensors";
  auto fresh = [&] { export_hugging_face(dir.path(), m, random_tensors(m)); };
  auto import = [&] { return input_error([&] { import_hugging_face(dir.path(), m); }); };

  fresh();
  rewrite(dir.path(), [&](std::string& name, SafeDType&, std::vector<int64_t>&,
                          std::vector<uint8_t>&) { return name != k; });
  EXPECT_EQ(import(),
            file + ": no tensor " + k + " (the flags' LlamaForCausalLM needs it, [8, 16])");

  fresh();
  rewrite(dir.path(), [&](std::string& name, SafeDType&, std::vector<int64_t>&,
                          std::vector<uint8_t>&) {
    if (name == k) name = "model.layers.0.self_attn.kv_proj.weight";
    return true;
  });
  EXPECT_EQ(import(), file + ": tensor model.layers.0.self_attn.kv_proj.weight is not one of the "
                             "LlamaForCausalLM the flags describe");

  fresh();
  rewrite(dir.path(), [&](std::string& name, SafeDType&, std::vector<int64_t>& shape,
                          std::vector<uint8_t>&) {
    if (name == k) shape = {16, 8};
    return true;
  });
  EXPECT_EQ(import(),
            file + ": tensor " + k + " has shape [16, 8], the flags' model needs [8, 16]");

  fresh();
  rewrite(dir.path(), [&](std::string& name, SafeDType& dtype, std::vector<int64_t>&,
                          std::vector<uint8_t>&) {
    if (name == k) dtype = SafeDType::I32;
    return true;
  });
  EXPECT_EQ(import(), file + ": tensor " + k + " is I32, not F32, BF16 or F16");

  fresh();  // F16 is read exactly: 0x3C00 is 1.0
  rewrite(dir.path(), [&](std::string& name, SafeDType& dtype, std::vector<int64_t>&,
                          std::vector<uint8_t>& bytes) {
    if (name != "model.norm.weight") return true;
    dtype = SafeDType::F16;
    bytes.assign(2 * 16, 0);
    for (size_t i = 0; i < 16; ++i) bytes[2 * i + 1] = 0x3C;
    return true;
  });
  EXPECT_EQ(import_hugging_face(dir.path(), m).at("final_norm.weight"),
            std::vector<float>(16, 1.0f));

  EXPECT_EQ(input_error([&] { import_hugging_face(dir.path() + "/none", m); }),
            dir.path() + "/none: no model.safetensors and no model.safetensors.index.json");
  EXPECT_EQ(input_error([&] { import_hugging_face(dir.path(), qwen3()); }),
            file + ": no tensor model.layers.0.self_attn.q_norm.weight (the flags' "
                   "Qwen3ForCausalLM needs it, [4])");
}

TEST(HuggingFace, ImportChecksTheIndex) {
  const ModelConfig m = gpt();
  const LogicalTensors t = random_tensors(m);
  TempFolder dir;
  const HfExport e = export_hugging_face(dir.path(), m, t, SafeDType::F32, 2048);
  const std::string index = dir.path() + "/model.safetensors.index.json";
  const std::string good = read_text(index);
  auto with_index = [&](const std::string& text) {
    std::ofstream(index) << text;
    return input_error([&] { import_hugging_face(dir.path(), m); });
  };
  std::string bad = good;
  bad.replace(bad.find("\"ln_f.weight\""), 13, "\"ln_g.weight\"");
  EXPECT_EQ(with_index(bad), index + ": tensor ln_g.weight is not one of the GPT2LMHeadModel "
                                     "the flags describe");
  bad = good;
  bad.replace(bad.find(e.files[0]), e.files[0].size(), "../" + e.files[0].substr(3));
  EXPECT_NE(with_index(bad).find("not a file name in the folder"), std::string::npos);
  EXPECT_NE(with_index("{\"weight_map\": {").find(index + ": "), std::string::npos);
  std::ofstream(index) << good;
  EXPECT_TRUE(bitwise_equal(import_hugging_face(dir.path(), m), t));
  for (const std::string& f : e.files) std::remove((dir.path() + "/" + f).c_str());
}

TEST(HuggingFace, ImportTakesGpt2AsSavePretrainedNamesIt) {
  // transformers' save_pretrained writes GPT2LMHeadModel's tensors as transformer.h.0...
  const ModelConfig m = gpt();
  const LogicalTensors t = random_tensors(m);
  TempFolder dir;
  export_hugging_face(dir.path(), m, t);
  rewrite(dir.path(), [](std::string& name, SafeDType&, std::vector<int64_t>&,
                         std::vector<uint8_t>&) {
    name = "transformer." + name;
    return true;
  });
  EXPECT_TRUE(bitwise_equal(import_hugging_face(dir.path(), m), t));
}

}  // namespace
}  // namespace paralab
