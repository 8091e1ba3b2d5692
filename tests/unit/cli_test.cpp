// The qwick binary end to end: make-model output loads and runs in both formats, eval's summary
// line, info, and bad input giving a clear error and a non-zero exit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "model/model.h"
#include "test_util.h"

namespace qwick {
namespace {

namespace fs = std::filesystem;

TEST(Cli, MakeModelOutputLoadsAndRuns) {
  for (const char* format : {"mlx4", "bf16"}) {
    const fs::path dir = test::scratch_dir(std::string("made-") + format);
    std::string out;
    ASSERT_EQ(test::run_qwick(std::string("make-model --preset tiny --format ") + format + " " + dir.string(),
                              &out),
              0)
        << out;
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors.index.json"})
      EXPECT_TRUE(fs::exists(dir / f)) << f;
    const auto model = load_model(dir);  // binds every tensor
    EXPECT_EQ(model->weights.layout,
              std::string(format) == "mlx4" ? CheckpointLayout::kMlx : CheckpointLayout::kOfficial);
    ASSERT_EQ(test::run_qwick("run -m " + dir.string() + " --prompt-ids 1,2,3,4,5 -n 6 --ignore-eos", &out),
              0)
        << out;
    EXPECT_TRUE(std::regex_search(out, std::regex(R"(^\d+( \d+){5}\n)"))) << out;
    EXPECT_NE(out.find("prompt eval time"), std::string::npos) << out;
    EXPECT_NE(out.find("tokens per second"), std::string::npos) << out;
  }
}

TEST(Cli, MakeModelIsDeterministicForASeed) {
  const fs::path a = test::scratch_dir("seed-a"), b = test::scratch_dir("seed-b"),
                 c = test::scratch_dir("seed-c");
  ASSERT_EQ(test::run_qwick("make-model --preset tiny -s 7 " + a.string(), nullptr), 0);
  ASSERT_EQ(test::run_qwick("make-model --preset tiny -s 7 " + b.string(), nullptr), 0);
  ASSERT_EQ(test::run_qwick("make-model --preset tiny -s 8 " + c.string(), nullptr), 0);
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p / "model-00001-of-00001.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(a), bytes(b));
  EXPECT_NE(bytes(a), bytes(c));
}

TEST(Cli, EvalPrintsAParseableSummary) {
  const std::string ref = test::fixture("tiny/reference.safetensors").string();
  std::string out;
  ASSERT_EQ(
      test::run_qwick("eval -m " + test::fixture("tiny/hf").string() + " --tokens " + ref + " --reference " +
                          ref + " --key logits --kv-type f32 --exact --decode-from 60 --chunk 16",
                      &out),
      0)
      << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m, std::regex(R"(tokens=100 rel_err=(\S+) max_abs=(\S+) top1=(\S+)% ppl=(\S+)\n$)")))
      << out;
  EXPECT_LT(std::stod(m[1]), 1e-4);
  EXPECT_EQ(std::stod(m[3]), 100.0);
  EXPECT_GT(std::stod(m[4]), 1.0);

  const fs::path dir = test::scratch_dir("eval-out");
  ASSERT_EQ(test::run_qwick("eval -m " + test::fixture("tiny/hf").string() + " --tokens " + ref + " --out " +
                                (dir / "l.safetensors").string(),
                            &out),
            0)
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(tokens=100 ppl=\S+\n$)"))) << out;
  EXPECT_TRUE(fs::exists(dir / "l.safetensors"));
}

TEST(Cli, BadInputIsAClearErrorAndNonZeroExit) {
  const std::string ref = test::fixture("tiny/reference.safetensors").string();
  const std::string tiny = test::fixture("tiny/hf").string();
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {"eval -m " + tiny + " --tokens /nonexistent.safetensors", "cannot open /nonexistent.safetensors"},
      {"eval -m " + tiny + " --tokens " + ref + " --tokens-key nope", "no tensor \"nope\""},
      {"eval -m " + tiny + " --tokens " + ref + " --tokens-key logits", "is F32, expected I32"},
      {"eval -m " + tiny + " --tokens " + ref + " --reference " + ref + " --key hidden",
       "has shape [5, 100, 128]"},
      {"eval -m " + tiny + " --tokens " + ref + " --chunk 0", "chunk must be positive"},
      {"eval -m " + tiny + " --tokens " + ref + " -c 50", "context overflow"},
      {"run -m " + tiny + " --prompt-ids 1,2,99999", "token id 99999 is out of range"},
      {"run -m " + tiny + " --prompt-ids 1,x", "expected an integer"},
      {"run -m " + tiny + " --kv-type f8 --prompt-ids 1", "unknown type \"f8\""},
      {"run -m /nonexistent --prompt-ids 1", "not a directory"},
      {"run --bogus", "unknown option \"--bogus\""},
      {"info", "missing argument MODEL_DIR"},
      {"make-model --preset huge /tmp/x", "unknown preset \"huge\""},
      {"bench -m " + tiny + " --parallel 2,0", "counts must be positive"},
      {"bench -m " + tiny + " --parallel 1,x", "expected an integer"},
      {"bench -m " + tiny + " --parallel 2 --parallel-context 0", "must be positive"},
      {"nonsense", "unknown command"},
  };
  for (const auto& c : cases) {
    std::string out;
    EXPECT_NE(test::run_qwick(c.args, &out), 0) << c.args;
    EXPECT_NE(out.find(c.expect), std::string::npos) << c.args << "\n" << out;
  }
}

TEST(Cli, BenchParallelPrintsARowPerCount) {
  std::string out;
  ASSERT_EQ(
      test::run_qwick("bench -m " + test::fixture("tiny/hf").string() +
                          " -t 2 --parallel 1,3 --parallel-context 20 --decode-tokens 2 --decode-reps 1",
                      &out),
      0)
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\|\s+1 \|[^\n]*\|\s+1\.00x \|)"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\|\s+3 \|\s+[0-9.]+ \|\s+[0-9.]+ \|)"))) << out;
}

TEST(Cli, InfoSummarisesTheModel) {
  std::string out;
  ASSERT_EQ(test::run_qwick("info " + test::fixture("small/mlx4").string(), &out), 0) << out;
  EXPECT_NE(out.find("[DDDAD]"), std::string::npos) << out;
  EXPECT_NE(out.find("16 q heads / 2 kv heads x 256"), std::string::npos) << out;
  EXPECT_NE(out.find("affine 4-bit, group 64, 10 module(s) at 8-bit"), std::string::npos) << out;
}

TEST(Cli, HelpListsOptionsWithTheirEnvironmentVariables) {
  std::string out;
  ASSERT_EQ(test::run_qwick("run --help", &out), 0);
  EXPECT_NE(out.find("-m, --model DIR"), std::string::npos) << out;
  EXPECT_NE(out.find("[env: LLAMA_ARG_MODEL]"), std::string::npos) << out;
}

}  // namespace
}  // namespace qwick
