// What every backend promises whatever its numerics, run on each device this build has (the CUDA
// instance is skipped without a GPU): a snapshot restored continues bit for bit, bad input throws and
// leaves the sequence where it was, and reset starts over exactly. The numeric agreement with the
// references is per device (reference_test.cpp, tests/cuda/cuda_backend_test.cpp): the tolerances
// follow each device's arithmetic.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/model.h"
#include "model/tensor_io.h"
#include "test_util.h"

namespace qwick {
namespace {

class BackendContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() != "cpu" && default_device() != GetParam())
      GTEST_SKIP() << "no " << GetParam() << " device on this machine: test not run";
  }
  std::unique_ptr<Backend> make(const Model& model, BackendOptions options) const {
    options.threads = 2;
    return make_backend(GetParam(), model, options);
  }
};

// In both stored types (q8's snapshot carries its scales: the run in between overwrites them), and
// across a decode, which on CUDA runs through a captured graph that the run in between moved on.
TEST_P(BackendContract, SnapshotRestoreContinuesExactly) {
  const auto model = load_model(test::fixture("small/mlx4"));
  const std::vector<int32_t> tokens =
      read_i32_tensor(test::fixture("small/reference.safetensors").string(), "tokens");
  const std::vector<int32_t> head(tokens.begin(), tokens.begin() + 40),
      tail(tokens.begin() + 40, tokens.begin() + 60);
  const auto V = static_cast<size_t>(model->config.vocab_size);
  for (const KvDtype kv : {KvDtype::kBF16, KvDtype::kQ8}) {
    SCOPED_TRACE(kv == KvDtype::kQ8 ? "q8 cache" : "bf16 cache");
    BackendOptions opt;
    opt.max_context = 512;
    opt.kv_dtype = kv;
    auto backend = make(*model, opt);
    std::vector<float> expected(V), got(V), scratch(V);
    backend->prefill(head, scratch, {});
    const auto snap = backend->snapshot();
    EXPECT_EQ(snap->position(), 40);
    EXPECT_GT(snap->bytes(), 0u);
    backend->prefill(tail, scratch, {});
    backend->decode(tokens[60], expected);
    // Something else entirely, then back to the snapshot.
    backend->reset();
    backend->prefill(std::vector<int32_t>(70, 7), scratch, {});
    backend->decode(3, scratch);
    backend->restore(*snap);
    EXPECT_EQ(backend->position(), 40);
    backend->prefill(tail, scratch, {});
    backend->decode(tokens[60], got);
    EXPECT_EQ(got, expected);
    auto other = make(*model, opt);
    EXPECT_THROW(other->restore(*snap), Error);
  }
}

TEST_P(BackendContract, ResetAndBadInputLeaveAConsistentState) {
  const auto model = load_model(test::fixture("tiny/mlx4"));
  BackendOptions opt;
  opt.max_context = 10;
  auto backend = make(*model, opt);
  const auto V = static_cast<size_t>(model->config.vocab_size);
  std::vector<float> a(V), b(V), c(V), d(V);
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  backend->prefill(prompt, a, {});
  backend->decode(9, c);
  EXPECT_EQ(backend->position(), 5);
  EXPECT_THROW(backend->prefill(std::vector<int32_t>{5, 512}, b, {}), Error);  // 512 >= vocab
  EXPECT_THROW(backend->prefill(std::vector<int32_t>(6, 1), b, {}), Error);    // 5 + 6 > 10
  EXPECT_THROW(backend->decode(-1, b), Error);
  EXPECT_EQ(backend->position(), 5);
  backend->reset();
  backend->prefill(prompt, b, {});
  backend->decode(9, d);
  EXPECT_EQ(a, b);
  EXPECT_EQ(c, d);
}

INSTANTIATE_TEST_SUITE_P(Devices, BackendContract, ::testing::ValuesIn(built_devices()),
                         [](const ::testing::TestParamInfo<std::string>& device) { return device.param; });

}  // namespace
}  // namespace qwick
