#include "strata/engine/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "strata/common/file_util.h"

namespace strata {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/configs/" + name;
}

ModelConfig Load(const std::string& name) {
  absl::StatusOr<ModelConfig> c = ModelConfig::FromDirectory(Fixture(name));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig();
}

TEST(ModelConfigTest, Llama31) {
  const ModelConfig c = Load("llama-3.1-8b-instruct");
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rotary_dim(), 128);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.attention_bias || c.attention_out_bias || c.mlp_bias || c.qk_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.is_moe());
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_EQ(c.SlidingWindow(0), 0);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(ModelConfigTest, TransformersFiveRopeParameters) {
  const ModelConfig c = Load("llama-3.2-1b-transformers5");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_layers, 16);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");  // from "dtype"
}

TEST(ModelConfigTest, Qwen25HasImplicitQkvBiasAndGenerationEos) {
  const ModelConfig c = Load("qwen2.5-7b-instruct");
  EXPECT_EQ(c.family, ModelFamily::kQwen2);
  EXPECT_EQ(c.head_dim, 128);  // 3584 / 28
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.attention_out_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);  // use_sliding_window: false
  EXPECT_EQ(c.SlidingWindow(27), 0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(151645, 151643));  // 151643 from generation_config
}

TEST(ModelConfigTest, Qwen3HasQkNorm) {
  const ModelConfig c = Load("qwen3-8b");
  EXPECT_EQ(c.family, ModelFamily::kQwen3);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);  // written as the integer 1000000
  EXPECT_THAT(c.eos_token_ids, ElementsAre(151645, 151643));
}

TEST(ModelConfigTest, MistralSlidingWindow) {
  const ModelConfig v3 = Load("mistral-7b-instruct-v0.3");
  EXPECT_EQ(v3.family, ModelFamily::kMistral);
  EXPECT_EQ(v3.sliding_window, 0);
  EXPECT_EQ(v3.vocab_size, 32768);
  const ModelConfig v1 = Load("mistral-7b-v0.1");
  EXPECT_EQ(v1.sliding_window, 4096);
  EXPECT_EQ(v1.SlidingWindow(0), 4096);
  EXPECT_EQ(v1.SlidingWindow(31), 4096);
  EXPECT_EQ(v1.SlidingWindow(32), 0);
  EXPECT_THAT(v1.eos_token_ids, ElementsAre(2));
}

TEST(ModelConfigTest, Mixtral) {
  const ModelConfig c = Load("mixtral-8x7b-instruct-v0.1");
  EXPECT_EQ(c.family, ModelFamily::kMixtral);
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 14336);
  EXPECT_TRUE(c.norm_topk_prob);
  for (int l = 0; l < c.num_layers; ++l) EXPECT_TRUE(c.IsMoeLayer(l)) << l;
  EXPECT_FALSE(c.IsMoeLayer(c.num_layers));
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.sliding_window, 0);
}

TEST(ModelConfigTest, Qwen3Moe) {
  const ModelConfig c = Load("qwen3-30b-a3b");
  EXPECT_EQ(c.family, ModelFamily::kQwen3Moe);
  EXPECT_EQ(c.head_dim, 128);  // explicit; hidden_size / heads would be 64
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(47));
}

json MinimalConfig(const std::string& model_type) {
  json j = {{"model_type", model_type}, {"vocab_size", 1000},     {"hidden_size", 64},
            {"intermediate_size", 128}, {"num_hidden_layers", 4}, {"num_attention_heads", 4},
            {"num_key_value_heads", 2}};
  if (model_type == "mixtral") j.update({{"num_local_experts", 4}, {"num_experts_per_tok", 2}});
  if (model_type == "qwen3_moe") {
    j.update({{"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32}});
  }
  return j;
}

ModelConfig Parse(const json& j) {
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(j, "test.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig();
}

TEST(ModelConfigTest, Qwen3MoeSparseStepAndMlpOnlyLayers) {
  json j = MinimalConfig("qwen3_moe");
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  const ModelConfig c = Parse(j);
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_FALSE(c.IsMoeLayer(2));
  EXPECT_FALSE(c.IsMoeLayer(3));   // (3+1) % 2 == 0 but listed in mlp_only_layers
  EXPECT_FALSE(c.norm_topk_prob);  // Qwen3MoeConfig's default
}

TEST(ModelConfigTest, TransformersClassDefaults) {
  const ModelConfig llama = Parse(MinimalConfig("llama"));
  EXPECT_EQ(llama.architecture, "LlamaForCausalLM");
  EXPECT_EQ(llama.bos_token_id, 1);
  EXPECT_THAT(llama.eos_token_ids, ElementsAre(2));
  EXPECT_EQ(llama.max_position_embeddings, 2048);
  EXPECT_EQ(llama.head_dim, 16);
  EXPECT_EQ(llama.torch_dtype, "float32");
  const ModelConfig qwen3 = Parse(MinimalConfig("qwen3"));
  EXPECT_EQ(qwen3.head_dim, 128);  // Qwen3Config.head_dim defaults to 128, not hidden / heads
  EXPECT_EQ(qwen3.bos_token_id, -1);
  EXPECT_TRUE(qwen3.eos_token_ids.empty());
  json mistral = MinimalConfig("mistral");
  EXPECT_EQ(Parse(mistral).sliding_window, 4096);  // key absent
  mistral["use_sliding_window"] = false;           // a Qwen-only key: ignored
  EXPECT_EQ(Parse(mistral).SlidingWindow(3), 4096);
  const ModelConfig mixtral = Parse(MinimalConfig("mixtral"));
  EXPECT_DOUBLE_EQ(mixtral.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(mixtral.rms_norm_eps, 1e-5);
  json mha = MinimalConfig("llama");
  mha.erase("num_key_value_heads");
  EXPECT_EQ(Parse(mha).num_kv_heads, 4);
  json moe = MinimalConfig("qwen3_moe");
  moe.erase("num_experts");
  moe["num_local_experts"] = 6;  // how transformers 5.x saves it
  EXPECT_EQ(Parse(moe).num_experts, 6);
}

TEST(ModelConfigTest, QwenSlidingLayers) {
  json j = MinimalConfig("qwen2");
  j.update({{"use_sliding_window", true}, {"sliding_window", 256}, {"max_window_layers", 2}});
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.sliding_window, 256);
  EXPECT_EQ(c.SlidingWindow(1), 0);
  EXPECT_EQ(c.SlidingWindow(2), 256);
  j["layer_types"] = {"sliding_attention", "full_attention", "full_attention", "full_attention"};
  const ModelConfig typed = Parse(j);
  EXPECT_EQ(typed.SlidingWindow(0), 256);
  EXPECT_EQ(typed.SlidingWindow(2), 0);
  j["use_sliding_window"] = false;
  EXPECT_EQ(Parse(j).SlidingWindow(0), 0);
}

TEST(ModelConfigTest, RopePrecedence) {
  json j = MinimalConfig("llama");
  j["rope_theta"] = 1000.0;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 2000.0}};
  EXPECT_DOUBLE_EQ(Parse(j).rope_theta, 2000.0);  // the dict's theta wins
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const ModelConfig scaled = Parse(j);  // a non-empty rope_scaling wins over rope_parameters
  EXPECT_EQ(scaled.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(scaled.rope_theta, 1000.0);
  j["rope_scaling"] = json::object();
  EXPECT_DOUBLE_EQ(Parse(j).rope_theta, 2000.0);
  j.erase("rope_parameters");
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}};
  EXPECT_EQ(Parse(j).rope_scaling.original_max_position_embeddings, 2048);  // max positions
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct RopeCase {
  const char* fixture;
  size_t size;
  std::vector<std::pair<int, float>> expected;  // recorded from transformers 5.24 (CPU)
};

TEST(ModelConfigTest, RopeInvFreqMatchesTransformers) {
  const std::vector<RopeCase> cases = {
      {"llama-3.1-8b-instruct",
       64,
       {{0, 1.0f},
        {10, 0.12868738174438477f},
        {28, 0.0032114461064338684f},
        {30, 0.0013718936825171113f},
        {33, 0.0003126936499029398f},
        {36, 7.784655463183299e-05f},
        {63, 3.068925877869333e-07f}}},
      {"llama-3.2-1b-transformers5",
       32,
       {{0, 1.0f},
        {5, 0.12868738174438477f},
        {14, 0.0032114461064338684f},
        {15, 0.0012905480107292533f},
        {16, 0.000429556705057621f},
        {17, 9.708286233944818e-05f},
        {31, 9.418306490260875e-08f}}},
      {"qwen3-8b",
       64,
       {{0, 1.0f},
        {10, 0.11547820270061493f},
        {28, 0.0023713738191872835f},
        {30, 0.0015399265103042126f},
        {33, 0.0008058422245085239f},
        {36, 0.00042169648804701865f},
        {63, 1.2409377632138785e-06f}}},
      {"mistral-7b-v0.1",
       64,
       {{0, 1.0f},
        {10, 0.23713736236095428f},
        {28, 0.017782794311642647f},
        {33, 0.00865964312106371f},
        {63, 0.00011547819303814322f}}},
  };
  for (const RopeCase& rc : cases) {
    const std::vector<float> inv = Load(rc.fixture).RopeInvFreq();
    ASSERT_EQ(inv.size(), rc.size) << rc.fixture;
    for (const auto& [i, want] : rc.expected) {
      // torch's vectorized pow may round differently by one ulp.
      const int64_t ulps = static_cast<int64_t>(Bits(inv[i])) - static_cast<int64_t>(Bits(want));
      EXPECT_LE(std::abs(ulps), 1) << rc.fixture << " [" << i << "] " << inv[i] << " vs " << want;
    }
  }
}

TEST(ModelConfigTest, LinearRopeMatchesTransformers) {
  json j = MinimalConfig("llama");
  j.update({{"hidden_size", 4096},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 32},
            {"rope_theta", 10000.0},
            {"rope_scaling", {{"type", "linear"}, {"factor", 4.0}}}});
  const std::vector<float> inv = Parse(j).RopeInvFreq();
  ASSERT_EQ(inv.size(), 64u);
  EXPECT_EQ(inv[0], 0.25f);
  EXPECT_EQ(inv[10], 0.05928434059023857f);
  EXPECT_EQ(inv[33], 0.0021649107802659273f);
  EXPECT_EQ(inv[63], 2.8869548259535804e-05f);
}

TEST(ModelConfigTest, ToJsonRoundTripsEveryFixture) {
  for (const char* name : {"llama-3.1-8b-instruct", "llama-3.2-1b-transformers5",
                           "qwen2.5-7b-instruct", "qwen3-8b", "mistral-7b-instruct-v0.3",
                           "mistral-7b-v0.1", "mixtral-8x7b-instruct-v0.1", "qwen3-30b-a3b"}) {
    const ModelConfig c = Load(name);
    const json written = c.ToJson();
    absl::StatusOr<ModelConfig> back = ModelConfig::FromJson(written, name);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->ToJson(), written) << name;
    EXPECT_EQ(back->eos_token_ids, c.eos_token_ids) << name;
    EXPECT_EQ(back->RopeInvFreq(), c.RopeInvFreq()) << name;
    EXPECT_EQ(back->attention_bias, c.attention_bias) << name;
    EXPECT_EQ(back->qk_norm, c.qk_norm) << name;
  }
  json j = MinimalConfig("qwen2");
  j.update({{"use_sliding_window", true}, {"sliding_window", 256}, {"max_window_layers", 1}});
  const ModelConfig sliding = Parse(j);
  const ModelConfig back = Parse(sliding.ToJson());
  EXPECT_EQ(back.sliding_window_layers, sliding.sliding_window_layers);
  EXPECT_EQ(back.SlidingWindow(0), 0);
  EXPECT_EQ(back.SlidingWindow(1), 256);
}

TEST(ModelConfigTest, FamilyNames) {
  EXPECT_STREQ(ModelFamilyName(ModelFamily::kQwen3Moe), "qwen3_moe");
  EXPECT_STREQ(ModelFamilyName(ModelFamily::kMixtral), "mixtral");
  EXPECT_STREQ(ModelFamilyName(ModelFamily::kLlama), "llama");
}

struct ErrorCase {
  const char* model_type;
  const char* key;  // set to `value`, or erased when value is absent
  json value;
  bool erase;
  const char* expected;  // in the message, with "test.json"
};

TEST(ModelConfigTest, InvalidConfigsNameOriginAndKey) {
  const json kAbsent;
  const std::vector<ErrorCase> cases = {
      {"llama", "hidden_size", kAbsent, true, "\"hidden_size\" is required"},
      {"llama", "hidden_size", "4096", false, "\"hidden_size\" must be an integer"},
      {"llama", "hidden_size", 4096.5, false, "\"hidden_size\" must be an integer"},
      {"llama", "hidden_size", 10000000000LL, false, "\"hidden_size\" is out of range"},
      {"llama", "hidden_size", 10000000000ULL, false, "\"hidden_size\" is out of range"},
      {"llama", "hidden_size", 0, false, "\"hidden_size\" must be positive"},
      {"llama", "vocab_size", -3, false, "\"vocab_size\" must be positive"},
      {"llama", "num_hidden_layers", nullptr, false, "\"num_hidden_layers\" is required"},
      {"llama", "num_key_value_heads", 3, false, "\"num_key_value_heads\" (3) must be positive"},
      {"llama", "num_attention_heads", 6, false, "(6) must divide hidden_size (64)"},
      {"llama", "head_dim", 15, false, "\"head_dim\" must be even"},
      {"mistral", "num_key_value_heads", kAbsent, true, "\"num_key_value_heads\" is required"},
      {"gpt2", "model_type", "gpt2", false, "\"model_type\" names unsupported architecture"},
      {"llama", "architectures", json::array({"GPT2LMHeadModel"}), false,
       "unsupported architecture \"GPT2LMHeadModel\""},
      {"llama", "architectures", json::array({"MistralForCausalLM"}), false,
       "\"model_type\" is \"llama\" but architecture MistralForCausalLM"},
      {"llama", "architectures", "LlamaForCausalLM", false, "\"architectures\" must be a"},
      {"llama", "model_type", kAbsent, true, "\"architectures\" is required"},
      {"llama", "rope_scaling", json({{"rope_type", "llama3"}, {"factor", 8.0}}), false,
       "\"rope_scaling.low_freq_factor\" is required"},
      {"llama", "rope_scaling",
       json({{"rope_type", "llama3"},
             {"factor", 8.0},
             {"low_freq_factor", 4.0},
             {"high_freq_factor", 1.0}}),
       false, "\"rope_scaling.high_freq_factor\" must exceed"},
      {"llama", "rope_scaling", json({{"rope_type", "yarn"}, {"factor", 4.0}}), false,
       "\"rope_scaling.rope_type\" \"yarn\" is not supported"},
      {"llama", "rope_scaling", json({{"type", "linear"}}), false,
       "\"rope_scaling.factor\" is required"},
      {"llama", "rope_scaling", "linear", false, "\"rope_scaling\" must be an object"},
      {"llama", "rope_parameters", json({{"rope_theta", "big"}}), false,
       "\"rope_parameters.rope_theta\" must be a number"},
      {"llama", "rope_parameters", json({{"full_attention", {{"rope_theta", 1.0}}}}), false,
       "\"rope_parameters\" holds per-layer-type"},
      {"llama", "rope_theta", -1.0, false, "\"rope_theta\" must be positive"},
      {"llama", "partial_rotary_factor", 0.5, false, "\"partial_rotary_factor\" must be 1.0"},
      {"llama", "hidden_act", "gelu", false, "\"hidden_act\" must be \"silu\""},
      {"llama", "rms_norm_eps", 0.0, false, "\"rms_norm_eps\" must be positive"},
      {"llama", "tie_word_embeddings", 1, false, "\"tie_word_embeddings\" must be a boolean"},
      {"llama", "torch_dtype", "int8", false, "\"torch_dtype\" must be"},
      {"llama", "eos_token_id", 1000, false, "\"eos_token_id\" has id 1000 outside"},
      {"llama", "eos_token_id", json::array({2, "x"}), false,
       "\"eos_token_id\" must be an integer"},
      {"llama", "bos_token_id", -5, false, "\"bos_token_id\" is outside"},
      {"mistral", "sliding_window", -1, false, "\"sliding_window\" must be a positive integer"},
      {"mistral", "sliding_window", 0, false, "\"sliding_window\" must be a positive integer"},
      {"qwen2", "layer_types", json::array({"full_attention"}), false,
       "\"layer_types\" must be a list with one entry per layer"},
      {"mixtral", "num_experts_per_tok", 5, false, "\"num_experts_per_tok\" (5) exceeds"},
      {"mixtral", "num_local_experts", kAbsent, true, "\"num_local_experts\" is required"},
      {"qwen3_moe", "moe_intermediate_size", kAbsent, true,
       "\"moe_intermediate_size\" is required"},
      {"qwen3_moe", "mlp_only_layers", json::array({4}), false,
       "\"mlp_only_layers\" has layer 4 outside [0, 4)"},
      {"qwen3_moe", "decoder_sparse_step", 0, false, "\"decoder_sparse_step\" must be positive"},
  };
  for (const ErrorCase& ec : cases) {
    json j = MinimalConfig(ec.model_type);
    if (ec.erase) {
      j.erase(ec.key);
    } else {
      j[ec.key] = ec.value;
    }
    absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(j, "test.json");
    ASSERT_FALSE(c.ok()) << ec.key << " = " << ec.value.dump();
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr("test.json: key ")) << ec.expected;
    EXPECT_THAT(c.status().message(), HasSubstr(ec.expected)) << c.status();
  }
  EXPECT_THAT(ModelConfig::FromJson(json::array({1}), "test.json").status().message(),
              HasSubstr("test.json: config must be a JSON object"));
}

std::string MakeTempDir() {
  std::string pattern = ::testing::TempDir() + "/strata_cfg_XXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

TEST(ModelConfigTest, FromDirectoryErrors) {
  const std::string dir = MakeTempDir();
  EXPECT_EQ(ModelConfig::FromDirectory(dir).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteStringToFile(dir + "/config.json", "{\"model_type\": ").ok());
  absl::Status bad_json = ModelConfig::FromDirectory(dir).status();
  EXPECT_EQ(bad_json.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_json.message(), HasSubstr(dir + "/config.json"));
  ASSERT_TRUE(WriteStringToFile(dir + "/config.json", MinimalConfig("llama").dump()).ok());
  ASSERT_TRUE(
      WriteStringToFile(dir + "/generation_config.json", R"({"eos_token_id": [7, 2]})").ok());
  absl::StatusOr<ModelConfig> ok = ModelConfig::FromDirectory(dir);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(ok->eos_token_ids, ElementsAre(2, 7));
  ASSERT_TRUE(WriteStringToFile(dir + "/generation_config.json", R"({"eos_token_id": "x"})").ok());
  absl::Status bad_gen = ModelConfig::FromDirectory(dir).status();
  EXPECT_THAT(bad_gen.message(), HasSubstr("generation_config.json: key \"eos_token_id\""));
}

}  // namespace
}  // namespace strata
