// config.json as the real checkpoints write it (nested or flat, MLX quantization blocks), and an
// error naming the field and its value for everything the engine cannot run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "model/config.h"
#include "model/synthetic_model.h"

namespace qwick {
namespace {

using json = nlohmann::json;

json full_preset() {
  return json::parse(synthetic_config_json("qwen3.6-35b-a3b", "mlx4"));
}

std::string error_of(const json& j) {
  try {
    parse_model_config(j.dump(), "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ReadsNestedTextConfigWithQuantization) {
  const ModelConfig c = parse_model_config(full_preset().dump(), "config.json");
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.hidden_size, 2048);
  ASSERT_EQ(c.n_layers(), 40);
  EXPECT_EQ(c.n_attention_layers(), 10);
  for (int L = 0; L < 40; ++L)
    EXPECT_EQ(c.layers[static_cast<size_t>(L)],
              (L + 1) % 4 == 0 ? LayerKind::kAttention : LayerKind::kDeltaNet);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.q_proj_rows(), 8192);
  EXPECT_EQ(c.conv_channels(), 8192);
  EXPECT_EQ(c.n_experts, 256);
  EXPECT_EQ(c.n_experts_per_tok, 8);
  EXPECT_TRUE(c.quant.enabled);
  EXPECT_EQ(c.quant.for_module("language_model.model.layers.0.mlp.gate")->bits, 8);
  EXPECT_EQ(c.quant.for_module("language_model.model.layers.0.mlp.shared_expert_gate")->bits, 8);
  EXPECT_EQ(c.quant.for_module("language_model.model.layers.0.self_attn.q_proj")->bits, 4);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{248046, 248044}));
}

TEST(Config, ReadsFlatTextConfigAndLegacyRopeKeys) {
  json t = full_preset()["text_config"];
  t.erase("rope_parameters");
  t.erase("layer_types");
  t["rope_theta"] = 1e6;
  t["partial_rotary_factor"] = 0.5;
  const ModelConfig c = parse_model_config(t.dump(), "config.json");
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rotary_dim, 128);
  EXPECT_EQ(c.n_attention_layers(), 10);  // from full_attention_interval
  EXPECT_FALSE(c.quant.enabled);
}

TEST(Config, QuantizationConfigAliasAndUnquantizedOverride) {
  json j = full_preset();
  j.erase("quantization");
  j["quantization_config"]["language_model.lm_head"] = false;
  const ModelConfig c = parse_model_config(j.dump(), "config.json");
  EXPECT_FALSE(c.quant.for_module("language_model.lm_head").has_value());
  EXPECT_EQ(c.quant.for_module("x")->bits, 4);
}

TEST(Config, ErrorsNameTheFieldAndValue) {
  struct Case {
    std::function<void(json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["model_type"] = "llama"; }, "model_type = \"llama\""},
      {[](json& j) { j.erase("text_config"); }, "needs a text_config"},
      {[](json& j) { j["text_config"]["hidden_act"] = "gelu"; }, "text_config.hidden_act = \"gelu\""},
      {[](json& j) { j["text_config"]["hidden_size"] = -5; }, "text_config.hidden_size = -5"},
      {[](json& j) { j["text_config"]["hidden_size"] = "big"; }, "text_config.hidden_size = \"big\""},
      {[](json& j) { j["text_config"].erase("num_experts"); }, "missing field text_config.num_experts"},
      {[](json& j) { j["text_config"]["layer_types"][3] = "sliding_attention"; }, "\"sliding_attention\""},
      {[](json& j) { j["text_config"]["layer_types"].erase(0); }, "text_config.layer_types"},
      {[](json& j) { j["text_config"]["num_key_value_heads"] = 3; }, "num_key_value_heads = 3"},
      {[](json& j) { j["text_config"]["num_experts_per_tok"] = 300; }, "num_experts_per_tok = 300"},
      {[](json& j) { j["text_config"]["rope_parameters"]["rope_type"] = "yarn"; },
       "text_config.rope_parameters.rope_type = \"yarn\""},
      {[](json& j) { j["text_config"]["rope_parameters"]["partial_rotary_factor"] = 0.1; },
       "partial_rotary_factor 0.1"},
      {[](json& j) { j["text_config"]["attention_bias"] = true; }, "attention_bias = true"},
      {[](json& j) { j["quantization"]["bits"] = 3; }, "quantization.bits = 3"},
      {[](json& j) { j["quantization"]["group_size"] = 48; }, "quantization.group_size = 48"},
      {[](json& j) { j["quantization"]["mode"] = "mxfp4"; }, "quantization.mode = \"mxfp4\""},
      {[](json& j) { j["quantization"]["language_model.model.layers.0.mlp.gate"]["bits"] = 2; },
       "quantization.language_model.model.layers.0.mlp.gate.bits = 2"},
      {[](json& j) {
         j.erase("quantization");
         j["quantization_config"] = {{"quant_method", "fp8"}};
       },
       "quantization_config.quant_method = \"fp8\""},
  };
  for (const auto& c : cases) {
    json j = full_preset();
    c.edit(j);
    const std::string err = error_of(j);
    EXPECT_NE(err.find(c.expect), std::string::npos)
        << "expected \"" << c.expect << "\" in \"" << err << "\"";
    EXPECT_NE(err.find("config.json"), std::string::npos) << err;
  }
  EXPECT_NE(error_of(json::array()).find("expected a JSON object"), std::string::npos);
  try {
    parse_model_config("{not json", "config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
  }
}

TEST(Config, GenerationConfig) {
  const GenerationConfig g = parse_generation_config(
      R"({"eos_token_id":[248046,248044],"pad_token_id":248044,"temperature":0.7,"top_k":20,"top_p":0.8,"do_sample":true})",
      "generation_config.json");
  EXPECT_EQ(g.eos_token_ids, (std::vector<int32_t>{248046, 248044}));
  EXPECT_EQ(*g.pad_token_id, 248044);
  EXPECT_FLOAT_EQ(*g.temperature, 0.7f);
  EXPECT_EQ(*g.top_k, 20);
  EXPECT_FALSE(g.min_p.has_value());
  EXPECT_THROW(parse_generation_config(R"({"top_k":"many"})", "g.json"), Error);
}

}  // namespace
}  // namespace qwick
