// The CPU backend's multi-row decode step (Backend::step / commit), speculation's verify pass: a
// step over k rows then commit(n) must leave the sequence, and the MTP head following it, exactly
// where decoding those n tokens one by one would, for every n.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "test_util.h"

namespace qwick {
namespace {

namespace fs = std::filesystem;

const Model& tiny_with_head() {
  static const std::unique_ptr<Model> model = [] {
    const fs::path dir = test::scratch_dir("tiny-mtp");
    add_synthetic_mtp(SyntheticModelSpec{}, test::fixture("tiny/hf").string(), dir.string());
    return load_model(dir);
  }();
  return *model;
}

std::unique_ptr<Backend> backend_for(const Model& model, bool exact) {
  BackendOptions opt;
  opt.threads = 2;
  opt.kv_dtype = exact ? KvDtype::kF32 : KvDtype::kBF16;
  opt.exact = exact;
  opt.mtp = model.weights.mtp.has_value();
  return make_cpu_backend(model, opt);
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

std::vector<StepRow> rows_at(const std::vector<int32_t>& tokens, int64_t pos0) {
  std::vector<StepRow> rows;
  for (size_t i = 0; i < tokens.size(); ++i) rows.push_back({tokens[i], 0, pos0 + static_cast<int64_t>(i)});
  return rows;
}

// For k rows and every n <= k: the step's logits equal one-by-one decoding bit for bit, and after commit(n)
// the next decode and the head's next draft equal those after decoding the n tokens.
void expect_step_equals_decode(const Model& model, bool exact, float tolerance) {
  const auto V = static_cast<size_t>(model.config.vocab_size);
  const std::vector<int32_t> prompt = test::random_tokens(23, model.config.vocab_size, 11);
  const std::vector<int32_t> more = test::random_tokens(9, model.config.vocab_size, 12);
  std::vector<float> logits(V), a(V), b(V);
  for (int64_t k = 1; k <= 8; ++k) {
    const std::vector<int32_t> rows_tokens(more.begin(), more.begin() + k);
    auto seq = backend_for(model, exact);
    seq->prefill(prompt, logits, {});
    std::vector<float> one_by_one(static_cast<size_t>(k) * V);
    for (int64_t i = 0; i < k; ++i)
      seq->decode(rows_tokens[static_cast<size_t>(i)], std::span<float>(one_by_one.data() + i * V, V));

    for (int64_t n = 1; n <= k; ++n) {
      auto step = backend_for(model, exact);
      step->prefill(prompt, logits, {});
      std::vector<float> step_logits(static_cast<size_t>(k) * V);
      step->step(rows_at(rows_tokens, step->position()), step_logits);
      EXPECT_LE(max_abs_diff(step_logits, one_by_one), tolerance) << "k " << k;
      step->commit(n);
      ASSERT_EQ(step->position(), static_cast<int64_t>(prompt.size()) + n);

      auto ref = backend_for(model, exact);
      ref->prefill(prompt, logits, {});
      for (int64_t i = 0; i < n; ++i) ref->decode(rows_tokens[static_cast<size_t>(i)], logits);
      // The token after the kept rows differs from the rejected one (the attention row there is rewritten).
      const int32_t next = (more[static_cast<size_t>(n)] + 1) % static_cast<int32_t>(V);
      if (model.weights.mtp) {
        step->draft_begin(next, a);
        ref->draft_begin(next, b);
        EXPECT_LE(max_abs_diff(a, b), tolerance) << "head after k " << k << ", n " << n;
      }
      step->decode(next, a);
      ref->decode(next, b);
      EXPECT_LE(max_abs_diff(a, b), tolerance) << "k " << k << ", n " << n;
      step->decode(3, a);  // and one more, through the conv window and the recurrent state
      ref->decode(3, b);
      EXPECT_LE(max_abs_diff(a, b), tolerance) << "k " << k << ", n " << n;
    }
  }
}

TEST(MultiRowStep, ExactStepThenCommitEqualsDecodingEveryPrefix) {
  expect_step_equals_decode(tiny_with_head(), true, 0.0f);
}

TEST(MultiRowStep, QuantizedModelWithFastNumerics) {
  // The MLX 4-bit model on the decode fast path (int8 activations), no head.
  expect_step_equals_decode(*load_model(test::fixture("tiny/mlx4")), false, 0.0f);
}

TEST(MultiRowStep, MisuseIsAnError) {
  const Model& model = tiny_with_head();
  const auto V = static_cast<size_t>(model.config.vocab_size);
  auto b = backend_for(model, true);
  std::vector<float> logits(9 * V);
  const std::vector<int32_t> prompt = {1, 2, 3};
  b->prefill(prompt, logits, {});
  EXPECT_EQ(b->max_step_rows(), 8);
  EXPECT_THROW(b->commit(1), Error);                                                     // nothing to commit
  EXPECT_THROW(b->step(rows_at({1, 2}, 4), logits), Error);                              // not at position()
  EXPECT_THROW(b->step(std::vector<StepRow>{{1, 1, 3}}, logits), Error);                 // another sequence
  EXPECT_THROW(b->step(rows_at(std::vector<int32_t>(9, 1), 3), logits), Error);          // too many rows
  EXPECT_THROW(b->step(rows_at({1, 2}, 3), std::span<float>(logits.data(), V)), Error);  // logits too small
  b->step(rows_at({1, 2}, 3), logits);
  EXPECT_THROW(b->decode(1, logits), Error);  // uncommitted
  EXPECT_THROW(b->snapshot(), Error);
  EXPECT_THROW(b->commit(3), Error);
  EXPECT_THROW(b->commit(0), Error);
  b->commit(2);
  EXPECT_EQ(b->position(), 5);
}

}  // namespace
}  // namespace qwick
