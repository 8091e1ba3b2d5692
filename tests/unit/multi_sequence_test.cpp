// The CPU backend holding several sequences (Backend::max_sequences): sequences stepped together give
// each the logits and greedy tokens it gets alone, bit for bit, whatever their lengths and however
// their KV blocks interleave in the shared pool; a reset or restore of one leaves the others as they
// were; a full pool is an Error that changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "test_util.h"

namespace qwick {
namespace {

const Model& tiny() {
  static const std::unique_ptr<Model> model = load_model(test::fixture("tiny/hf"));
  return *model;
}

const Model& tiny_4bit() {
  static const std::unique_ptr<Model> model = load_model(test::fixture("tiny/mlx4"));
  return *model;
}

std::unique_ptr<Backend> backend_for(const Model& model, bool exact, int sequences, int64_t context = 0) {
  BackendOptions opt;
  opt.threads = 2;
  opt.kv_dtype = exact ? KvDtype::kF32 : KvDtype::kBF16;
  opt.exact = exact;
  opt.sequences = sequences;
  opt.max_context = context;
  return make_cpu_backend(model, opt);
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// One conversation's greedy continuation run alone: the logits of each decoded token, in order.
struct Alone {
  std::vector<std::vector<float>> logits;  // [0]: the prompt's last; [i]: after the i-th decoded token
};

Alone run_alone(const Model& model, bool exact, const std::vector<int32_t>& prompt, int steps) {
  const auto V = static_cast<size_t>(model.config.vocab_size);
  auto b = backend_for(model, exact, 1);
  Alone out;
  std::vector<float> logits(V);
  b->prefill(prompt, logits, {});
  out.logits.push_back(logits);
  for (int i = 0; i < steps; ++i) {
    b->decode(argmax(logits), logits);
    out.logits.push_back(logits);
  }
  return out;
}

// Sequences being decoded together, each compared at every step with the same conversation alone.
class Batch {
 public:
  Batch(const Model& model, bool exact, Backend& backend)
      : model_(model), exact_(exact), backend_(backend), V_(static_cast<size_t>(model.config.vocab_size)) {}

  // Starts `prompt` in `sequence` (in pieces of `piece` tokens, so that blocks interleave).
  void start(int sequence, const std::vector<int32_t>& prompt, int steps, int64_t piece = 1 << 20) {
    backend_.reset_sequence(sequence);
    std::vector<float> logits(V_);
    for (size_t done = 0; done < prompt.size(); done += static_cast<size_t>(piece)) {
      const size_t n = std::min(prompt.size() - done, static_cast<size_t>(piece));
      backend_.prefill_sequence(sequence, std::span<const int32_t>(prompt.data() + done, n), logits, {});
    }
    Running& r = running_[sequence];
    r.alone = run_alone(model_, exact_, prompt, steps);
    r.done = 0;
    r.prompt = static_cast<int64_t>(prompt.size());
    ASSERT_EQ(logits, r.alone.logits[0]) << "sequence " << sequence << " prefill";
    r.next = argmax(logits);
  }
  void stop(int sequence) { running_.erase(sequence); }

  // One step with one row per running sequence; every row's logits equal its sequence's alone.
  void step() {
    std::vector<StepRow> rows;
    for (const auto& [s, r] : running_) rows.push_back({r.next, s, backend_.sequence_position(s)});
    std::vector<float> logits(rows.size() * V_);
    backend_.step(rows, logits);
    backend_.commit(static_cast<int64_t>(rows.size()));
    size_t i = 0;
    for (auto& [s, r] : running_) {
      const std::span<const float> row(logits.data() + i++ * V_, V_);
      ++r.done;
      ASSERT_LT(static_cast<size_t>(r.done), r.alone.logits.size());
      const std::vector<float>& want = r.alone.logits[static_cast<size_t>(r.done)];
      ASSERT_TRUE(std::equal(row.begin(), row.end(), want.begin())) << "sequence " << s << " step " << r.done;
      EXPECT_EQ(backend_.sequence_position(s), r.prompt + r.done);
      r.next = argmax(row);
    }
  }

 private:
  struct Running {
    Alone alone;
    int done = 0;
    int64_t prompt = 0;
    int32_t next = 0;
  };
  const Model& model_;
  bool exact_;
  Backend& backend_;
  size_t V_;
  std::map<int, Running> running_;
};

// Prompts of different lengths (prefilled in pieces) near the pool's block edges: decoding together,
// the sequences cross those edges at different steps, so their blocks interleave and attention reads
// them both in place and gathered.
void expect_batch_equals_alone(const Model& model, bool exact) {
  const std::vector<int64_t> lengths = {5, 62, 63, 130};
  const int steps = 12;
  auto backend = backend_for(model, exact, static_cast<int>(lengths.size()));
  ASSERT_EQ(backend->max_sequences(), 4);
  Batch batch(model, exact, *backend);
  for (int s = 0; s < 4; ++s)
    batch.start(s,
                test::random_tokens(static_cast<size_t>(lengths[static_cast<size_t>(s)]),
                                    model.config.vocab_size, 40 + static_cast<uint64_t>(s)),
                steps, 16);
  for (int i = 0; i < steps; ++i) ASSERT_NO_FATAL_FAILURE(batch.step());
}

TEST(MultiSequence, ExactBatchEqualsEachSequenceAlone) {
  expect_batch_equals_alone(tiny(), true);
}

TEST(MultiSequence, QuantizedModelWithFastNumerics) {
  expect_batch_equals_alone(tiny_4bit(), false);
}

TEST(MultiSequence, ResetOneWhileTheOthersContinue) {
  auto backend = backend_for(tiny(), true, 3);
  Batch batch(tiny(), true, *backend);
  const int64_t V = tiny().config.vocab_size;
  batch.start(0, test::random_tokens(30, V, 1), 16);
  batch.start(1, test::random_tokens(70, V, 2), 16);
  batch.start(2, test::random_tokens(9, V, 3), 16);
  for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(batch.step());
  batch.start(1, test::random_tokens(12, V, 4), 16);  // a new conversation in sequence 1
  for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(batch.step());
  batch.stop(0);  // idle: the others step without it
  backend->reset_sequence(2);
  batch.stop(2);
  for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(batch.step());
  EXPECT_EQ(backend->sequence_position(0), 30 + 8);
  EXPECT_EQ(backend->sequence_position(2), 0);
}

TEST(MultiSequence, SnapshotRestoresIntoAnotherSequence) {
  const auto V = static_cast<size_t>(tiny().config.vocab_size);
  auto backend = backend_for(tiny(), true, 3);
  const std::vector<int32_t> prompt = test::random_tokens(90, static_cast<int64_t>(V), 5);
  std::vector<float> logits(V);
  backend->prefill_sequence(2, test::random_tokens(3, static_cast<int64_t>(V), 7), logits, {});
  backend->prefill_sequence(1, test::random_tokens(70, static_cast<int64_t>(V), 6), logits, {});
  backend->prefill_sequence(0, prompt, logits, {});
  const auto snap = backend->snapshot_sequence(0);
  EXPECT_EQ(snap->position(), 90);
  backend->restore_sequence(2, *snap);  // into blocks apart from each other and from sequence 0's
  ASSERT_EQ(backend->sequence_position(2), 90);

  const Alone alone = run_alone(tiny(), true, prompt, 3);
  int32_t next = argmax(alone.logits[0]);
  for (int i = 1; i <= 3; ++i) {
    std::vector<float> rows(2 * V);
    const int64_t pos = 90 + i - 1;
    backend->step(std::vector<StepRow>{{next, 0, pos}, {next, 2, pos}}, rows);
    backend->commit(2);
    const std::vector<float>& want = alone.logits[static_cast<size_t>(i)];
    EXPECT_TRUE(std::equal(want.begin(), want.end(), rows.begin())) << "sequence 0, step " << i;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), rows.begin() + static_cast<std::ptrdiff_t>(V)))
        << "sequence 2, step " << i;
    next = argmax(want);
  }
}

TEST(MultiSequence, FullPoolIsAnErrorThatChangesNothing) {
  const Model& model = tiny();
  const auto V = static_cast<size_t>(model.config.vocab_size);
  const auto prompt = [&](int64_t n, uint64_t seed) {
    return test::random_tokens(static_cast<size_t>(n), static_cast<int64_t>(V), seed);
  };
  std::vector<float> logits(2 * V);
  {
    // Any sequences whose lengths add up to the context size fit, however they fill their blocks.
    auto backend = backend_for(model, true, 4, 128);
    for (int s = 0; s < 3; ++s) backend->prefill_sequence(s, prompt(1, 1), logits, {});
    backend->prefill_sequence(3, prompt(125, 2), logits, {});
  }
  // Five blocks of 64 positions.
  auto backend = backend_for(model, true, 4, 128);
  backend->prefill_sequence(0, prompt(128, 3), logits, {});
  const std::vector<int32_t> one = prompt(60, 4);
  backend->prefill_sequence(1, one, logits, {});
  backend->prefill_sequence(2, prompt(64, 5), logits, {});
  backend->prefill_sequence(3, prompt(40, 6), logits, {});
  EXPECT_THROW(backend->prefill_sequence(3, prompt(30, 7), logits, {}), Error);
  EXPECT_EQ(backend->sequence_position(3), 40);
  // Sequence 1 fits in its block; sequence 2 needs a new one: the step is refused as a whole.
  EXPECT_THROW(backend->step(std::vector<StepRow>{{1, 1, 60}, {1, 2, 64}}, logits), Error);
  EXPECT_EQ(backend->sequence_position(1), 60);
  EXPECT_EQ(backend->sequence_position(2), 64);
  const auto snap = backend->snapshot_sequence(0);
  EXPECT_THROW(backend->restore_sequence(3, *snap), Error);
  EXPECT_EQ(backend->sequence_position(3), 40);

  // Freeing sequence 2's block lets sequence 1 go on past its block exactly as it would alone.
  backend->reset_sequence(2);
  const int steps = 6;
  const Alone alone = run_alone(model, true, one, steps);
  int32_t next = argmax(alone.logits[0]);
  for (int i = 1; i <= steps; ++i) {
    backend->step(std::vector<StepRow>{{next, 1, 60 + i - 1}}, logits);
    backend->commit(1);
    const std::vector<float>& want = alone.logits[static_cast<size_t>(i)];
    EXPECT_TRUE(std::equal(want.begin(), want.end(), logits.begin())) << "step " << i;
    next = argmax(want);
  }
  EXPECT_THROW(backend->prefill_sequence(2, std::vector<int32_t>{1}, logits, {}), Error);
}

TEST(MultiSequence, MisuseIsAnError) {
  const auto V = static_cast<size_t>(tiny().config.vocab_size);
  auto backend = backend_for(tiny(), true, 2);
  EXPECT_EQ(backend->max_step_rows(), 16);
  std::vector<float> logits(3 * V);
  backend->prefill_sequence(0, std::vector<int32_t>{1, 2}, logits, {});
  backend->prefill_sequence(1, std::vector<int32_t>{3}, logits, {});
  EXPECT_THROW(backend->reset_sequence(2), Error);
  EXPECT_THROW(backend->sequence_position(-1), Error);
  EXPECT_THROW(backend->prefill_sequence(2, std::vector<int32_t>{1}, logits, {}), Error);
  // A sequence's rows must be adjacent and at its next positions.
  EXPECT_THROW(backend->step(std::vector<StepRow>{{1, 0, 2}, {1, 1, 1}, {1, 0, 3}}, logits), Error);
  EXPECT_THROW(backend->step(std::vector<StepRow>{{1, 0, 2}, {1, 1, 2}}, logits), Error);
  backend->step(std::vector<StepRow>{{1, 0, 2}, {1, 0, 3}, {1, 1, 1}}, logits);
  EXPECT_THROW(backend->commit(2), Error);          // a step of two sequences is committed whole
  EXPECT_THROW(backend->reset_sequence(1), Error);  // and before either is reset
  backend->commit(3);
  EXPECT_EQ(backend->sequence_position(0), 4);
  EXPECT_EQ(backend->sequence_position(1), 2);

  BackendOptions options;
  options.sequences = 0;
  EXPECT_THROW(make_cpu_backend(tiny(), options), Error);
  // The MTP head follows a single sequence.
  const auto dir = test::scratch_dir("multi-sequence-mtp");
  add_synthetic_mtp(SyntheticModelSpec{}, test::fixture("tiny/hf").string(), dir.string());
  const std::unique_ptr<Model> with_head = load_model(dir);
  options.mtp = true;
  options.sequences = 1;
  EXPECT_NO_THROW(make_cpu_backend(*with_head, options));
  options.sequences = 2;
  EXPECT_THROW(make_cpu_backend(*with_head, options), Error);
}

}  // namespace
}  // namespace qwick
