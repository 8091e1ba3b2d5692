// The MTP head on the CPU: against the PyTorch reference (tools/mtp_reference.py) where its fixture
// exists, and its own invariants (the head follows the sequence the same way whatever the prefill
// chunking; snapshots carry its cache; a draft changes nothing the sequence depends on).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "model/tensor_io.h"
#include "test_util.h"

namespace qwick {
namespace {

namespace fs = std::filesystem;

// tiny/hf with the head `qwick make-model --add-mtp` gives it (seed 0).
const Model& tiny_with_head() {
  static const std::unique_ptr<Model> model = [] {
    const fs::path dir = test::scratch_dir("tiny-mtp");
    add_synthetic_mtp(SyntheticModelSpec{}, test::fixture("tiny/hf").string(), dir.string());
    return load_model(dir);
  }();
  return *model;
}

std::unique_ptr<Backend> exact_backend(const Model& model) {
  BackendOptions opt;
  opt.threads = 2;
  opt.kv_dtype = KvDtype::kF32;
  opt.exact = true;
  opt.mtp = true;
  return make_cpu_backend(model, opt);
}

double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - ref[i]) * (static_cast<double>(a[i]) - ref[i]);
    r += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / r);
}

// Head logits of every row t = 0 .. T-2 (the main model's state at t, the token at t + 1).
std::vector<float> head_logits(const Model& model, const std::vector<int32_t>& tokens) {
  auto backend = exact_backend(model);
  const auto V = static_cast<size_t>(model.config.vocab_size);
  std::vector<float> main(V), out;
  backend->prefill(std::span<const int32_t>(tokens.data(), 1), main, {});
  std::vector<float> row(V);
  for (size_t t = 0; t + 1 < tokens.size(); ++t) {
    backend->draft_begin(tokens[t + 1], row);
    out.insert(out.end(), row.begin(), row.end());
    backend->decode(tokens[t + 1], main);
  }
  return out;
}

TEST(MtpHead, MatchesThePyTorchReference) {
  int compared = 0;
  for (const char* preset : {"tiny", "small"}) {
    const fs::path ref = test::fixture(std::string(preset) + "/mtp.safetensors");
    const fs::path hf = test::fixture(std::string(preset) + "/hf");
    if (!fs::exists(ref) || !fs::exists(hf)) continue;
    const fs::path dir = test::scratch_dir(std::string("ref-mtp-") + preset);
    add_synthetic_mtp(SyntheticModelSpec{}, hf.string(), dir.string());
    const auto model = load_model(dir);
    const std::vector<int32_t> tokens = read_i32_tensor(ref.string(), "tokens");
    const F32Tensor expected = read_f32_tensor(ref.string(), "logits");
    const std::vector<float> mine = head_logits(*model, tokens);
    ASSERT_EQ(mine.size(), expected.data.size()) << preset;
    EXPECT_LT(rel_err(mine, expected.data), 1e-4) << preset;
    ++compared;
  }
  if (compared == 0)
    GTEST_SKIP()
        << "no tests/fixtures/reference/{tiny,small}/mtp.safetensors: make them with tools/mtp_reference.py";
}

TEST(MtpHead, FollowsTheSequenceWhateverThePrefillChunking) {
  const Model& model = tiny_with_head();
  const std::vector<int32_t> tokens = test::random_tokens(40, model.config.vocab_size, 7);
  const auto V = static_cast<size_t>(model.config.vocab_size);
  std::vector<float> logits(V), first(V), other(V);
  // Reference: prefill all but the last token in one chunk, then draft from the last.
  auto a = exact_backend(model);
  a->prefill(std::span<const int32_t>(tokens.data(), tokens.size() - 1), logits, {});
  a->draft_begin(tokens.back(), first);
  for (int64_t chunk : {1, 3, 16}) {
    auto b = exact_backend(model);
    PrefillOptions p;
    p.chunk = chunk;
    b->prefill(std::span<const int32_t>(tokens.data(), tokens.size() - 6), logits, p);
    for (size_t t = tokens.size() - 6; t + 1 < tokens.size(); ++t) b->decode(tokens[t], logits);
    b->draft_begin(tokens.back(), other);
    EXPECT_LT(rel_err(other, first), 1e-6) << "chunk " << chunk;
  }
}

TEST(MtpHead, DraftsChangeNothingAndSnapshotsCarryTheHead) {
  const Model& model = tiny_with_head();
  const std::vector<int32_t> tokens = test::random_tokens(20, model.config.vocab_size, 3);
  const auto V = static_cast<size_t>(model.config.vocab_size);
  std::vector<float> logits(V), d1(V), d2(V), again1(V), again2(V);
  auto b = exact_backend(model);
  b->prefill(std::span<const int32_t>(tokens.data(), 12), logits, {});
  const auto snap = b->snapshot();
  b->draft_begin(tokens[12], d1);
  b->draft_continue(5, d2);
  b->draft_continue(9, logits);  // a longer draft leaves the head's committed rows alone
  b->draft_begin(tokens[12], again1);
  b->draft_continue(5, again2);
  EXPECT_EQ(again1, d1);
  EXPECT_EQ(again2, d2);

  b->decode(tokens[12], logits);
  b->decode(tokens[13], logits);
  b->restore(*snap);
  b->draft_begin(tokens[12], again1);
  EXPECT_EQ(again1, d1);
  EXPECT_NE(d1, d2);
}

TEST(MtpHead, MisuseIsAnError) {
  const Model& model = tiny_with_head();
  const auto V = static_cast<size_t>(model.config.vocab_size);
  std::vector<float> logits(V);
  auto b = exact_backend(model);
  EXPECT_THROW(b->draft_begin(1, logits), Error);  // empty sequence
  const std::vector<int32_t> tokens = {1, 2, 3};
  b->prefill(tokens, logits, {});
  EXPECT_THROW(b->draft_continue(1, logits), Error);  // no draft begun
  EXPECT_THROW(b->draft_begin(static_cast<int32_t>(V), logits), Error);

  BackendOptions opt;
  opt.mtp = true;
  const auto no_head = load_model(test::fixture("tiny/hf"));
  try {
    make_cpu_backend(*no_head, opt);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no MTP head"), std::string::npos) << e.what();
  }
  opt.mtp = false;
  auto plain = make_cpu_backend(*no_head, opt);
  EXPECT_FALSE(plain->has_draft_head());
  plain->prefill(tokens, logits, {});
  EXPECT_THROW(plain->draft_begin(1, logits), Error);
}

}  // namespace
}  // namespace qwick
