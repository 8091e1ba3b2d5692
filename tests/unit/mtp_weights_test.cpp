// Binding the MTP head (`mtp.*`) in every checkpoint layout, from the model directory or from
// another checkpoint (--mtp), and a clear error for every missing, extra or mis-shaped piece.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "test_util.h"

namespace qwick {
namespace {

namespace fs = std::filesystem;

// A copy of tiny/<layout> with a random head added (make-model --add-mtp).
fs::path with_head(const std::string& layout) {
  const fs::path dir = test::scratch_dir("head-" + layout);
  add_synthetic_mtp(SyntheticModelSpec{}, test::fixture("tiny/" + layout).string(), dir.string());
  return dir;
}

std::string load_error(const fs::path& dir, const fs::path& mtp_dir = {}) {
  try {
    load_model(dir, mtp_dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_complete_head(const Model& m) {
  ASSERT_TRUE(m.weights.mtp.has_value());
  const MtpWeights& h = *m.weights.mtp;
  const int64_t H = m.config.hidden_size;
  EXPECT_EQ(h.fc.rows, H);
  EXPECT_EQ(h.fc.cols, 2 * H);
  EXPECT_EQ(h.pre_fc_norm_embedding.size(), static_cast<size_t>(H));
  EXPECT_EQ(h.pre_fc_norm_hidden.size(), static_cast<size_t>(H));
  EXPECT_EQ(h.norm.size(), static_cast<size_t>(H));
  EXPECT_TRUE(std::holds_alternative<AttentionWeights>(h.layer.mixer));
  EXPECT_EQ(h.layer.moe.experts.size(), static_cast<size_t>(m.config.n_experts));
}

TEST(MtpWeights, AbsentHeadIsNoHead) {
  EXPECT_FALSE(load_model(test::fixture("tiny/hf"))->weights.mtp.has_value());
  EXPECT_FALSE(load_model(test::fixture("tiny/mlx4"))->weights.mtp.has_value());
}

TEST(MtpWeights, OfficialLayoutBindsFusedExperts) {
  const auto m = load_model(with_head("hf"));
  expect_complete_head(*m);
  EXPECT_EQ(m->weights.mtp->fc.format, WeightFormat::kBF16);
  // Official norms hold w; the engine adds the 1. The synthetic w is N(0, 0.1), so 1 + w is near 1.
  for (float x : m->weights.mtp->norm) EXPECT_NEAR(x, 1.0f, 0.6f);
}

TEST(MtpWeights, MlxLayoutBindsAffineWithTheConfiguredBits) {
  const auto m = load_model(with_head("mlx4"));
  expect_complete_head(*m);
  EXPECT_EQ(m->weights.mtp->fc.format, WeightFormat::kAffine4);
  EXPECT_EQ(m->weights.mtp->layer.moe.experts[1].down.format, WeightFormat::kAffine4);
  for (float x : m->weights.mtp->pre_fc_norm_hidden)
    EXPECT_NEAR(x, 1.0f, 0.6f);  // 1 folded in, not added again
}

TEST(MtpWeights, TransformersLayoutBindsPerExpertHead) {
  // The transformers layout with the head's experts as one tensor each, like its decoder layers.
  const fs::path dir = test::scratch_dir("perexpert-head");
  test::copy_checkpoint(with_head("hf-perexpert"), dir, [](test::TensorMap& t) {
    const test::RawTensor gate_up = t.at("mtp.layers.0.mlp.experts.gate_up_proj");
    const test::RawTensor down = t.at("mtp.layers.0.mlp.experts.down_proj");
    t.erase("mtp.layers.0.mlp.experts.gate_up_proj");
    t.erase("mtp.layers.0.mlp.experts.down_proj");
    const int64_t E = gate_up.shape[0], I = gate_up.shape[1] / 2, H = gate_up.shape[2];
    const size_t piece = static_cast<size_t>(I * H * 2);  // bf16
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = "mtp.layers.0.mlp.experts." + std::to_string(e) + ".";
      auto slice = [](const test::RawTensor& src, size_t at, size_t n, std::vector<int64_t> shape) {
        return test::RawTensor{src.dtype, std::move(shape),
                               std::vector<uint8_t>(src.bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                                    src.bytes.begin() + static_cast<std::ptrdiff_t>(at + n))};
      };
      t[p + "gate_proj.weight"] = slice(gate_up, static_cast<size_t>(e) * 2 * piece, piece, {I, H});
      t[p + "up_proj.weight"] = slice(gate_up, static_cast<size_t>(e) * 2 * piece + piece, piece, {I, H});
      t[p + "down_proj.weight"] = slice(down, static_cast<size_t>(e) * piece, piece, {H, I});
    }
  });
  const auto split = load_model(dir);
  const auto fused = load_model(with_head("hf"));
  EXPECT_EQ(split->weights.layout, CheckpointLayout::kTransformers);
  expect_complete_head(*split);
  // Expert 3's up projection: the same bytes whether fused or split.
  const WeightMatrix& a = split->weights.mtp->layer.moe.experts[3].up;
  const WeightMatrix& b = fused->weights.mtp->layer.moe.experts[3].up;
  EXPECT_EQ(std::memcmp(a.data, b.data, static_cast<size_t>(a.rows) * a.row_stride), 0);
}

TEST(MtpWeights, MakeModelWritesAHeadInEveryFormatUnlessAskedNot) {
  for (const char* format : {"mlx4", "bf16"}) {
    SyntheticModelSpec spec;
    spec.preset = "tiny";
    spec.format = format;
    const fs::path dir = test::scratch_dir(std::string("made-") + format);
    write_synthetic_model(spec, dir.string());
    expect_complete_head(*load_model(dir));
    spec.mtp = false;
    const fs::path bare = test::scratch_dir(std::string("bare-") + format);
    write_synthetic_model(spec, bare.string());
    EXPECT_FALSE(load_model(bare)->weights.mtp.has_value()) << format;
  }
}

TEST(MtpWeights, AddingASecondHeadIsAnError) {
  const fs::path dir = with_head("hf");
  try {
    add_synthetic_mtp(SyntheticModelSpec{}, dir.string(), test::scratch_dir("twice").string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already has an MTP head"), std::string::npos) << e.what();
  }
}

TEST(MtpWeights, HeadFromAnotherCheckpoint) {
  // An MLX model without a head takes the bf16 head of another checkpoint of the same model.
  const fs::path donor = with_head("hf");
  const auto m = load_model(test::fixture("tiny/mlx4"), donor);
  expect_complete_head(*m);
  EXPECT_EQ(m->weights.mtp->fc.format, WeightFormat::kBF16);
  EXPECT_NE(m->mtp_checkpoint, nullptr);

  // A directory holding just the mtp.* tensors works as well.
  const fs::path head_only = test::scratch_dir("head-only");
  test::copy_checkpoint(donor, head_only, [](test::TensorMap& t) {
    std::erase_if(t, [](const auto& kv) { return !kv.first.starts_with("mtp."); });
  });
  expect_complete_head(*load_model(test::fixture("tiny/mlx4"), head_only));
}

TEST(MtpWeights, HeadOfAnotherShapeNamesTheTensor) {
  SyntheticModelSpec spec;
  spec.preset = "small";
  spec.format = "bf16";
  const fs::path small = test::scratch_dir("small-donor");
  write_synthetic_model(spec, small.string());
  const std::string err = load_error(test::fixture("tiny/hf"), small);
  EXPECT_NE(err.find("--mtp " + small.string()), std::string::npos) << err;
  EXPECT_NE(err.find("tensor \"mtp.pre_fc_norm_embedding.weight\" has shape [512]; the config needs [128]"),
            std::string::npos)
      << err;
  EXPECT_NE(load_error(test::fixture("tiny/hf"), test::fixture("tiny/mlx4")).find("has no MTP head"),
            std::string::npos);
  EXPECT_NE(load_error(test::fixture("tiny/hf"), "/nonexistent-head").find("not a directory"),
            std::string::npos);
}

TEST(MtpWeights, MissingOrExtraPiecesNameTheTensor) {
  const fs::path donor = with_head("hf");
  auto broken = [&](const std::function<void(test::TensorMap&)>& edit) {
    const fs::path dir = test::scratch_dir("broken-head");
    test::copy_checkpoint(donor, dir, edit);
    return load_error(dir);
  };
  std::string err = broken([](test::TensorMap& t) { t.erase("mtp.fc.weight"); });
  EXPECT_NE(err.find("missing tensor \"mtp.fc.weight\""), std::string::npos) << err;
  err = broken([](test::TensorMap& t) { t.erase("mtp.layers.0.self_attn.k_norm.weight"); });
  EXPECT_NE(err.find("mtp.layers.0.self_attn.k_norm.weight"), std::string::npos) << err;
  err = broken([](test::TensorMap& t) {
    t.erase("mtp.layers.0.mlp.experts.gate_up_proj");
    t.erase("mtp.layers.0.mlp.experts.down_proj");
  });
  EXPECT_NE(err.find("missing expert weights for the MTP head"), std::string::npos) << err;
  err =
      broken([](test::TensorMap& t) { t["mtp.layers.1.input_layernorm.weight"] = t.at("mtp.norm.weight"); });
  EXPECT_NE(err.find("unexpected tensor \"mtp.layers.1.input_layernorm.weight\""), std::string::npos) << err;
  err = broken([](test::TensorMap& t) {
    auto& fc = t.at("mtp.fc.weight");
    fc.shape[1] /= 2;
    fc.bytes.resize(fc.bytes.size() / 2);
  });
  EXPECT_NE(err.find("tensor \"mtp.fc.weight\" has shape [128, 128]; the config needs [128, 256]"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace qwick
