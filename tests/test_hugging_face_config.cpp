// tests/test_hugging_face_config.cpp: the Hugging Face export's config.json
// (checkpoint/hugging_face_config.h): it carries the flags' numbers, not transformers'
// defaults; the check of a folder's config.json against the flags names the key, both values
// and the flag, and takes transformers' defaults for absent keys.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include "checkpoint/hugging_face.h"
#include "checkpoint/json_document.h"
#include "tests/test_hugging_face_helpers.h"

namespace paralab {
namespace {

using namespace hf_test;  // TempFolder, the families' models, random_tensors, the readers

TEST(HuggingFace, ConfigJsonCarriesTheFlagsNumbers) {
  TempFolder g, q;
  export_hugging_face(g.path(), gpt(), random_tensors(gpt()));
  const std::string gtext = read_text(g.path() + "/config.json");
  EXPECT_NE(gtext.find("\"layer_norm_epsilon\": 1e-05,"), std::string::npos) << gtext;
  const Json gc = JsonDocument(gtext).root();
  EXPECT_EQ(gc.at("activation_function").get<std::string>(), "gelu");
  EXPECT_EQ(json_int(gc.at("n_positions")), 8);
  EXPECT_EQ(json_int(gc.at("n_inner")), 64);
  EXPECT_TRUE(gc.at("tie_word_embeddings").get<bool>());
  EXPECT_EQ(gc.at("architectures").at(0).get<std::string>(), "GPT2LMHeadModel");

  ModelConfig m = qwen3_moe();
  m.rope_theta = 500000.0f;
  m.moe.aux_loss_coeff = 0.0f;
  export_hugging_face(q.path(), m, random_tensors(m));
  const std::string qtext = read_text(q.path() + "/config.json");
  // a float field is never written as an integer: transformers' config classes refuse that
  EXPECT_NE(qtext.find("\"router_aux_loss_coef\": 0.0,"), std::string::npos) << qtext;
  EXPECT_NE(qtext.find("\"rms_norm_eps\": 1e-05,"), std::string::npos) << qtext;
  const Json qc = JsonDocument(qtext).root();
  EXPECT_EQ(qc.at("model_type").get<std::string>(), "qwen3_moe");
  EXPECT_EQ(qc.at("rope_parameters").at("rope_theta").get<double>(), 500000.0);
  EXPECT_EQ(qc.at("rope_parameters").at("rope_type").get<std::string>(), "default");
  EXPECT_EQ(qc.at("rope_theta").get<double>(), 500000.0);
  EXPECT_EQ(qc.at("hidden_act").get<std::string>(), "silu");
  EXPECT_EQ(json_int(qc.at("num_key_value_heads")), 2);
  EXPECT_EQ(json_int(qc.at("head_dim")), 4);
  EXPECT_EQ(json_int(qc.at("intermediate_size")), 24);
  EXPECT_EQ(json_int(qc.at("moe_intermediate_size")), 8);
  EXPECT_EQ(json_int(qc.at("num_experts")), 4);
  EXPECT_EQ(json_int(qc.at("num_experts_per_tok")), 2);
  EXPECT_TRUE(qc.at("norm_topk_prob").get<bool>());  // top-k, then softmax over the k
  ASSERT_EQ(qc.at("mlp_only_layers").size(), 1u);
  EXPECT_EQ(json_int(qc.at("mlp_only_layers")[0]), 1);
  EXPECT_FALSE(qc.at("tie_word_embeddings").get<bool>());
  EXPECT_EQ(json_int(qc.at("max_position_embeddings")), 8);
}

TEST(HuggingFace, ConfigCheckNamesTheKeyTheValuesAndTheFlag) {
  TempFolder g, q;
  export_hugging_face(g.path(), gpt(), random_tensors(gpt()));
  export_hugging_face(q.path(), qwen3_moe(), random_tensors(qwen3_moe()));
  const std::string gc = g.path() + "/config.json: ", qc = q.path() + "/config.json: ";
  ModelConfig m = gpt();
  m.seq_length = 16;
  EXPECT_EQ(input_error([&] { check_hugging_face_config(g.path(), m); }),
            gc + "n_positions is 8, the flags give 16 (--seq-length)");
  EXPECT_EQ(input_error([&] { check_hugging_face_config(g.path(), llama()); }),
            gc + "model_type is \"gpt2\", the flags give llama (--arch)");
  EXPECT_EQ(input_error([&] { check_hugging_face_config(q.path(), qwen3()); }),
            qc + "model_type is \"qwen3_moe\", the flags give qwen3 (--num-experts)");
  EXPECT_EQ(input_error([&] { check_hugging_face_config(q.path(), mixtral()); }),
            qc + "model_type is \"qwen3_moe\", the flags give mixtral (--qk-layernorm)");
  m = qwen3_moe();
  m.norm_epsilon = 1e-6f;
  EXPECT_EQ(input_error([&] { check_hugging_face_config(q.path(), m); }),
            qc + "rms_norm_eps is 1e-05, the flags give 1e-06 (--norm-epsilon)");
  m = qwen3_moe();
  m.rope_theta = 1e6f;
  EXPECT_EQ(input_error([&] { check_hugging_face_config(q.path(), m); }),
            qc + "rope_theta is 10000, the flags give 1e+06 (--rotary-base)");
  m = qwen3_moe();
  m.num_query_groups = 4;
  EXPECT_EQ(input_error([&] { check_hugging_face_config(q.path(), m); }),
            qc + "num_key_value_heads is 2, the flags give 4 (--num-query-groups)");
  m = qwen3_moe();
  m.moe.layer_pattern = {1, 1};
  EXPECT_EQ(input_error([&] { check_hugging_face_config(q.path(), m); }),
            qc + "the dense layers (decoder_sparse_step, mlp_only_layers) is [1], the flags "
                 "give [] (--moe-layer-freq)");
  m = qwen3_moe();
  m.moe.pre_softmax = true;
  EXPECT_EQ(input_error([&] { check_hugging_face_config(q.path(), m); }),
            qc + "norm_topk_prob is true, the flags give false (--moe-router-pre-softmax)");
  m = qwen3_moe();
  m.moe.topk = 1;
  EXPECT_EQ(input_error([&] { check_hugging_face_config(q.path(), m); }),
            qc + "num_experts_per_tok is 2, the flags give 1 (--moe-router-topk)");
  EXPECT_EQ(input_error([&] { check_hugging_face_config(q.path() + "/none", m); }),
            q.path() + "/none/config.json: cannot open");
}

TEST(HuggingFace, ConfigCheckUsesTransformersDefaultsForAbsentKeys) {
  TempFolder dir;
  const ModelConfig m = llama();
  export_hugging_face(dir.path(), m, random_tensors(m));
  // a Llama config.json without rms_norm_eps means transformers' 1e-6, not paralab's 1e-5
  std::ofstream(dir.path() + "/config.json")
      << "{\"model_type\": \"llama\", \"hidden_size\": 16, \"num_hidden_layers\": 2,"
         " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 32,"
         " \"intermediate_size\": 24}";
  EXPECT_EQ(input_error([&] { check_hugging_face_config(dir.path(), m); }),
            dir.path() + "/config.json: rms_norm_eps is absent (Hugging Face's default 1e-06), "
                         "the flags give 1e-05 (--norm-epsilon)");
  ModelConfig eps6 = m;
  eps6.norm_epsilon = 1e-6f;
  EXPECT_NO_THROW(check_hugging_face_config(dir.path(), eps6));
  std::ofstream(dir.path() + "/config.json") << "{\"model_type\": \"llama\",";
  EXPECT_NE(input_error([&] { check_hugging_face_config(dir.path(), m); }).find("config.json: "),
            std::string::npos);
}

}  // namespace
}  // namespace paralab
