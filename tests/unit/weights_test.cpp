// Binding the three checkpoint layouts, and a clear error naming the tensor for every kind of
// missing, extra, mis-shaped or wrongly typed tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/numeric.h"
#include "model/model.h"
#include "test_util.h"

namespace qwick {
namespace {

namespace fs = std::filesystem;

std::string load_error(const fs::path& dir) {
  try {
    load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Weights, BindsAllThreeLayouts) {
  const auto official = load_model(test::fixture("tiny/hf"));
  EXPECT_EQ(official->weights.layout, CheckpointLayout::kOfficial);
  EXPECT_EQ(official->weights.layers[0].moe.experts[0].gate.format, WeightFormat::kBF16);

  const auto native = load_model(test::fixture("tiny/hf-perexpert"));
  EXPECT_EQ(native->weights.layout, CheckpointLayout::kTransformers);
  EXPECT_EQ(native->weights.layers[0].moe.experts[7].down.format, WeightFormat::kF32);

  const auto mlx = load_model(test::fixture("tiny/mlx4"));
  EXPECT_EQ(mlx->weights.layout, CheckpointLayout::kMlx);
  const MoeWeights& moe = mlx->weights.layers[0].moe;
  EXPECT_EQ(moe.router.format, WeightFormat::kAffine8);
  EXPECT_EQ(moe.shared_gate.format, WeightFormat::kAffine8);
  EXPECT_EQ(moe.experts[3].up.format, WeightFormat::kAffine4);
  EXPECT_EQ(mlx->weights.embed.format, WeightFormat::kAffine4);
  // The zero-centred norms come out as 1 + w in every layout: same values for hf and mlx4 up to
  // the bf16 rounding of 1 + w in the MLX file.
  for (size_t i = 0; i < official->weights.final_norm.size(); ++i)
    EXPECT_NEAR(official->weights.final_norm[i], mlx->weights.final_norm[i], 1e-2f);
}

TEST(Weights, FusedExpertsSplitGateFirst) {
  const auto official = load_model(test::fixture("tiny/hf"));
  const auto native = load_model(test::fixture("tiny/hf-perexpert"));
  // Same values (bf16 vs f32 holding bf16 values) for expert 5's up projection, row 3.
  const WeightMatrix& a = official->weights.layers[2].moe.experts[5].up;
  const WeightMatrix& b = native->weights.layers[2].moe.experts[5].up;
  for (int64_t c = 0; c < a.cols; ++c)
    EXPECT_EQ(bf16_to_f32(load_u16(a.data + 3 * a.row_stride + 2 * c)),
              load_f32(b.data + 3 * b.row_stride + 4 * c));
}

class BrokenCheckpoint : public ::testing::Test {
 protected:
  // Copies tiny/<layout> with `edit` applied and returns the load error.
  std::string broken(const std::string& layout, const std::function<void(test::TensorMap&)>& edit) {
    const fs::path dir = test::scratch_dir("broken");
    test::copy_checkpoint(test::fixture("tiny/" + layout), dir, edit);
    return load_error(dir);
  }
};

TEST_F(BrokenCheckpoint, MissingTensor) {
  const std::string name = "language_model.model.layers.1.linear_attn.in_proj_z.weight";
  const std::string err = broken("mlx4", [&](test::TensorMap& t) { t.erase(name); });
  EXPECT_NE(err.find("missing tensor \"" + name + "\""), std::string::npos) << err;
}

TEST_F(BrokenCheckpoint, MissingExperts) {
  const std::string err = broken("hf", [](test::TensorMap& t) {
    t.erase("model.language_model.layers.2.mlp.experts.gate_up_proj");
    t.erase("model.language_model.layers.2.mlp.experts.down_proj");
  });
  EXPECT_NE(err.find("missing expert weights for layer 2"), std::string::npos) << err;
}

TEST_F(BrokenCheckpoint, MisShapedTensor) {
  const std::string name = "model.language_model.layers.3.self_attn.k_proj.weight";
  const std::string err = broken("hf", [&](test::TensorMap& t) {
    auto& x = t.at(name);
    x.shape = {x.shape[1], x.shape[0]};
  });
  EXPECT_NE(err.find("\"" + name + "\" has shape [128, 64]; the config needs [64, 128]"), std::string::npos)
      << err;
}

TEST_F(BrokenCheckpoint, WronglyTypedTensor) {
  const std::string name = "model.language_model.layers.0.mlp.shared_expert.up_proj.weight";
  const std::string err = broken("hf", [&](test::TensorMap& t) { t.at(name).dtype = DType::kI16; });
  EXPECT_NE(err.find("\"" + name + "\" has dtype I16"), std::string::npos) << err;

  const std::string scales = "language_model.model.layers.0.mlp.gate.scales";
  const std::string err2 = broken("mlx4", [&](test::TensorMap& t) { t.at(scales).dtype = DType::kF16; });
  EXPECT_NE(err2.find("\"" + scales + "\" has dtype F16"), std::string::npos) << err2;
}

TEST_F(BrokenCheckpoint, ExtraTensorIsRejectedButVisionIsSkipped) {
  const std::string err = broken("hf", [](test::TensorMap& t) {
    t["model.language_model.layers.0.mlp.experts.extra_proj"] = {DType::kF32, {1}, {0, 0, 0, 0}};
  });
  EXPECT_NE(err.find("unexpected tensor \"model.language_model.layers.0.mlp.experts.extra_proj\""),
            std::string::npos)
      << err;
  EXPECT_EQ(broken("hf",
                   [](test::TensorMap& t) {
                     t["model.visual.blocks.0.weight"] = {DType::kF32, {1}, {0, 0, 0, 0}};
                   }),
            "");
}

TEST_F(BrokenCheckpoint, PackedWidthMustMatchTheConfiguredBits) {
  // Store the 8-bit router as if it were 4-bit: half the packed width.
  const std::string name = "language_model.model.layers.1.mlp.gate.weight";
  const std::string err = broken("mlx4", [&](test::TensorMap& t) {
    auto& w = t.at(name);
    w.shape[1] /= 2;
    w.bytes.resize(w.bytes.size() / 2);
  });
  EXPECT_NE(err.find("\"" + name + "\" is packed 16 wide, i.e. 4-bit"), std::string::npos) << err;
}

TEST_F(BrokenCheckpoint, PackedWeightWithoutScales) {
  const std::string module = "language_model.model.layers.0.linear_attn.in_proj_a";
  const std::string err = broken("mlx4", [&](test::TensorMap& t) {
    t.erase(module + ".scales");
    t.erase(module + ".biases");
  });
  EXPECT_NE(err.find("\"" + module + ".weight\" is packed (U32) but \"" + module + ".scales\" is missing"),
            std::string::npos)
      << err;
}

TEST_F(BrokenCheckpoint, NonFiniteNormWeight) {
  const std::string name = "model.language_model.norm.weight";
  const std::string err = broken("hf", [&](test::TensorMap& t) {
    t.at(name).bytes[2] = 0x80;  // element 1 = bf16 0x7f80 = +inf
    t.at(name).bytes[3] = 0x7f;
  });
  EXPECT_NE(err.find("\"" + name + "\" holds a non-finite value at index 1"), std::string::npos) << err;
}

TEST(Weights, QuantizedTensorsNeedAQuantizationBlock) {
  const fs::path dir = test::scratch_dir("noquant");
  test::copy_checkpoint(test::fixture("tiny/mlx4"), dir, [](test::TensorMap&) {});
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  cfg.erase("quantization");
  cfg.erase("quantization_config");
  std::ofstream(dir / "config.json") << cfg.dump();
  const std::string err = load_error(dir);
  EXPECT_NE(err.find("config.json has no quantization block"), std::string::npos) << err;
}

TEST(Weights, ShardIndexProblemsNameTheFile) {
  const fs::path dir = test::scratch_dir("index");
  for (const auto& e : fs::directory_iterator(test::fixture("tiny/hf")))
    fs::copy_file(e.path(), dir / e.path().filename());
  fs::remove(dir / "model-00002-of-00002.safetensors");
  EXPECT_NE(load_error(dir).find("shard model-00002-of-00002.safetensors listed in the index does not exist"),
            std::string::npos);

  const fs::path dir2 = test::scratch_dir("index2");
  for (const auto& e : fs::directory_iterator(test::fixture("tiny/hf")))
    fs::copy_file(e.path(), dir2 / e.path().filename());
  nlohmann::json index = nlohmann::json::parse(std::ifstream(dir2 / "model.safetensors.index.json"));
  index["weight_map"]["model.language_model.ghost.weight"] = "model-00001-of-00002.safetensors";
  std::ofstream(dir2 / "model.safetensors.index.json") << index.dump();
  EXPECT_NE(load_error(dir2).find("\"model.language_model.ghost.weight\" is listed in the index but missing"),
            std::string::npos);
}

TEST(Weights, NotAModelDirectory) {
  EXPECT_NE(load_error("/nonexistent-dir").find("not a directory"), std::string::npos);
  EXPECT_NE(load_error("model.gguf").find("GGUF files are not supported"), std::string::npos);
  const fs::path empty = test::scratch_dir("empty");
  EXPECT_NE(load_error(empty).find("no config.json"), std::string::npos);
}

}  // namespace
}  // namespace qwick
