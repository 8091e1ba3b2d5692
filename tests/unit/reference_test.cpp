// End to end against Hugging Face transformers: the fixtures in tests/fixtures/reference (float32
// reference logits and per-layer hidden states) through the CPU backend, in all three checkpoint
// layouts; plus the backend's own invariants (prefill N then decode k = prefill N + k; any chunk
// size gives the same logits; every SIMD level passes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "model/model.h"
#include "model/tensor_io.h"
#include "test_util.h"

namespace qwick {
namespace {

struct RunSpec {
  int64_t chunk = 512;
  int64_t decode_from = -1;  // prefill this many, then decode the rest
  KvDtype kv = KvDtype::kF32;
  bool exact = true;  // f32 activations in every matmul (the reference numerics)
  LayerObserver observer;
};

std::vector<float> logits_of(const Model& model, const std::vector<int32_t>& tokens, const RunSpec& run) {
  BackendOptions opt;
  opt.threads = 2;
  opt.kv_dtype = run.kv;
  opt.exact = run.exact;
  auto backend = make_cpu_backend(model, opt);
  const int64_t T = static_cast<int64_t>(tokens.size()), V = model.config.vocab_size;
  std::vector<float> logits(static_cast<size_t>(T * V), NAN);
  const int64_t n = run.decode_from >= 0 ? run.decode_from : T;
  PrefillOptions p;
  p.chunk = run.chunk;
  p.all_logits = true;
  p.observer = run.observer;
  if (n > 0) backend->prefill(std::span<const int32_t>(tokens.data(), static_cast<size_t>(n)), logits, p);
  for (int64_t t = n; t < T; ++t)
    backend->decode(tokens[static_cast<size_t>(t)],
                    std::span<float>(logits.data() + t * V, static_cast<size_t>(V)));
  return logits;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - ref[i]) * (static_cast<double>(a[i]) - ref[i]);
    r += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / r);
}

// Positions where the reference's top-two margin exceeds `margin` must have the same argmax.
void expect_top1_where_clear(const std::vector<float>& a, const std::vector<float>& ref, int64_t V,
                             float margin) {
  const int64_t T = static_cast<int64_t>(ref.size()) / V;
  int checked = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* r = ref.data() + t * V;
    const float* x = a.data() + t * V;
    int64_t best = 0, second = -1, mine = 0;
    for (int64_t v = 1; v < V; ++v) {
      if (r[v] > r[best]) {
        second = best;
        best = v;
      } else if (second < 0 || r[v] > r[second]) {
        second = v;
      }
      if (x[v] > x[mine]) mine = v;
    }
    if (r[best] - r[second] <= margin) continue;
    ++checked;
    EXPECT_EQ(mine, best) << "position " << t;
  }
  EXPECT_GT(checked, T / 4) << "too few clear positions to mean anything";
}

struct Fixture {
  std::vector<int32_t> tokens;
  F32Tensor logits, logits_mlx4, hidden;
  explicit Fixture(const std::string& preset) {
    const std::string f = test::fixture(preset + "/reference.safetensors").string();
    tokens = read_i32_tensor(f, "tokens");
    logits = read_f32_tensor(f, "logits");
    logits_mlx4 = read_f32_tensor(f, "logits_mlx4");
    hidden = read_f32_tensor(f, "hidden");
  }
};

TEST(Reference, TinyLogitsInEveryLayout) {
  const Fixture fx("tiny");
  for (const char* layout : {"hf", "hf-perexpert"}) {
    const auto model = load_model(test::fixture(std::string("tiny/") + layout));
    const auto f32kv = logits_of(*model, fx.tokens, {});
    EXPECT_LT(rel_err(f32kv, fx.logits.data), 1e-4) << layout;
    expect_top1_where_clear(f32kv, fx.logits.data, model->config.vocab_size, 1e-3f);
    RunSpec bf16;
    bf16.kv = KvDtype::kBF16;
    EXPECT_LT(rel_err(logits_of(*model, fx.tokens, bf16), fx.logits.data), 1e-3) << layout << " bf16 KV";
  }
}

// The MLX files hold the zero-centred norms as bf16(1 + w) while the reference computed with 1 + w
// exactly; with the norms restored from the bf16 checkpoint the quantized path must be exact.
TEST(Reference, TinyMlx4QuantizedPathIsExact) {
  const Fixture fx("tiny");
  const auto hf = test::read_all_tensors(test::fixture("tiny/hf"));
  const auto dir = test::scratch_dir("mlx4-exact-norms");
  test::copy_checkpoint(test::fixture("tiny/mlx4"), dir, [&](test::TensorMap& t) {
    for (auto& [name, raw] : t) {
      const bool zero_centred =
          name.find("norm.weight") != std::string::npos && name.find("linear_attn.norm") == std::string::npos;
      if (!zero_centred) continue;
      const auto& src =
          hf.at("model.language_model." + name.substr(std::string("language_model.model.").size()));
      std::vector<uint8_t> bytes(src.bytes.size() * 2);
      for (size_t i = 0; i < src.bytes.size() / 2; ++i) {
        const uint32_t bits = static_cast<uint32_t>(src.bytes[2 * i] | src.bytes[2 * i + 1] << 8) << 16;
        float v;
        std::memcpy(&v, &bits, 4);
        v += 1.0f;
        std::memcpy(&bytes[4 * i], &v, 4);
      }
      raw = {DType::kF32, src.shape, bytes};
    }
  });
  const auto model = load_model(dir);
  EXPECT_LT(rel_err(logits_of(*model, fx.tokens, {}), fx.logits_mlx4.data), 1e-4);
}

TEST(Reference, Mlx4FixturesAsShipped) {
  for (const char* preset : {"tiny", "small"}) {
    const Fixture fx(preset);
    const auto model = load_model(test::fixture(std::string(preset) + "/mlx4"));
    RunSpec run;
    run.kv = KvDtype::kBF16;
    run.chunk = 128;  // small: T = 300, several chunks
    const auto logits = logits_of(*model, fx.tokens, run);
    // Bounded by the bf16 rounding of 1 + w in the file (see above): measured 3.1e-2 and 1.1e-2.
    EXPECT_LT(rel_err(logits, fx.logits_mlx4.data), 5e-2) << preset;
    expect_top1_where_clear(logits, fx.logits_mlx4.data, model->config.vocab_size, 0.25f);
  }
}

// Share of positions whose argmax agrees with the reference's.
double top1_agreement(const std::vector<float>& a, const std::vector<float>& ref, int64_t V) {
  const int64_t T = static_cast<int64_t>(ref.size()) / V;
  int64_t agree = 0;
  for (int64_t t = 0; t < T; ++t) {
    const auto row = [&](const std::vector<float>& v) { return v.begin() + t * V; };
    agree +=
        std::max_element(row(a), row(a) + V) - row(a) == std::max_element(row(ref), row(ref) + V) - row(ref);
  }
  return static_cast<double>(agree) / static_cast<double>(T);
}

// The fast defaults (bf16 KV cache; bf16 prefill products, two-part int8 decode products; see
// docs/cpu.md) keep the reference's top-1 token at >= 95 % of positions and its logits within 3e-2
// relative, through one prefill and through decode from the first token on. The bf16 layouts are
// compared with the transformers logits; the MLX layouts with the exact path on the same files,
// since the stored logits_mlx4 were computed from unrounded norms (TinyMlx4QuantizedPathIsExact
// ties the exact path to them). One case misses the error target: on tiny/hf the bf16 prefill
// rounding flips one token's expert choice at a near-tie (position 52 alone carries 57 % relative
// error and most of the total, measured 6.9e-2, top-1 99 %); its bound says so.
TEST(Reference, FastPathsKeepTheReferenceTop1AndError) {
  struct Case {
    const char* dir;
    bool mlx;
    double prefill_bound = 3e-2;
  };
  for (const Case& c : {Case{"tiny/hf", false, 8e-2}, Case{"tiny/hf-perexpert", false, 8e-2},
                        Case{"tiny/mlx4", true}, Case{"small/mlx4", true}}) {
    SCOPED_TRACE(c.dir);
    const Fixture fx(std::string(c.dir).substr(0, std::string(c.dir).find('/')));
    const auto model = load_model(test::fixture(c.dir));
    const int64_t V = model->config.vocab_size;
    const auto exact = logits_of(*model, fx.tokens, {});
    if (!c.mlx) {
      EXPECT_LT(rel_err(exact, fx.logits.data), 1e-5);
    }
    const std::vector<float>& ref = c.mlx ? exact : fx.logits.data;
    RunSpec prefill;
    prefill.exact = false;
    prefill.kv = KvDtype::kBF16;
    prefill.chunk = 64;
    RunSpec decode = prefill;
    decode.decode_from = 1;
    const auto fast_prefill = logits_of(*model, fx.tokens, prefill),
               fast_decode = logits_of(*model, fx.tokens, decode);
    EXPECT_LE(rel_err(fast_prefill, ref), c.prefill_bound) << "prefill";
    EXPECT_GE(top1_agreement(fast_prefill, ref, V), 0.95) << "prefill";
    EXPECT_LE(rel_err(fast_decode, ref), 3e-2) << "decode";
    EXPECT_GE(top1_agreement(fast_decode, ref, V), 0.95) << "decode";
  }
}

// The q8 KV cache (kv_q8.h) with every other step exact: measured 8.7e-4 against the transformers
// logits (bf16 KV: 2.8e-4); a cache read with the wrong row's scale, or scales off by 30 %, is off
// by ~0.1.
TEST(Reference, TinyQ8KvStaysCloseToTheReference) {
  const Fixture fx("tiny");
  const auto model = load_model(test::fixture("tiny/hf"));
  RunSpec run;
  run.kv = KvDtype::kQ8;
  const auto logits = logits_of(*model, fx.tokens, run);
  EXPECT_LT(rel_err(logits, fx.logits.data), 2e-3);
  expect_top1_where_clear(logits, fx.logits.data, model->config.vocab_size, 1e-3f);
}

TEST(Reference, TinyHiddenStatesPerLayer) {
  const Fixture fx("tiny");
  const auto model = load_model(test::fixture("tiny/hf"));
  const int64_t T = static_cast<int64_t>(fx.tokens.size()), H = model->config.hidden_size;
  ASSERT_EQ(fx.hidden.shape, (std::vector<int64_t>{model->config.n_layers() + 1, T, H}));
  std::vector<float> mine(fx.hidden.data.size(), NAN);
  RunSpec run;
  run.chunk = 37;
  run.observer = [&](int stage, const float* hidden, int64_t n, int64_t pos0) {
    std::copy_n(hidden, n * H, mine.begin() + (stage * T + pos0) * H);
  };
  logits_of(*model, fx.tokens, run);
  for (int stage = 0; stage <= model->config.n_layers(); ++stage) {
    const auto at = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + stage * T * H, v.begin() + (stage + 1) * T * H);
    };
    EXPECT_LT(rel_err(at(mine), at(fx.hidden.data)), 1e-5) << "stage " << stage;
  }
}

TEST(Backend, PrefillThenDecodeEqualsOnePrefill) {
  for (const char* dir : {"tiny/hf", "small/mlx4"}) {
    const auto model = load_model(test::fixture(dir));
    const Fixture fx(std::string(dir).substr(0, std::string(dir).find('/')));
    const std::vector<int32_t> tokens(fx.tokens.begin(), fx.tokens.begin() + 80);
    for (KvDtype kv : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kQ8}) {
      RunSpec whole, split;
      whole.kv = split.kv = kv;
      split.decode_from = 70;
      EXPECT_LT(rel_err(logits_of(*model, tokens, split), logits_of(*model, tokens, whole)), 1e-5) << dir;
    }
  }
}

TEST(Backend, ChunkSizeDoesNotChangeLogits) {
  const Fixture fx("small");
  const auto model = load_model(test::fixture("small/mlx4"));
  RunSpec base;
  base.chunk = 4096;
  const auto ref = logits_of(*model, fx.tokens, base);
  for (int64_t chunk : {1, 7, 64}) {
    RunSpec r;
    r.chunk = chunk;
    EXPECT_LT(rel_err(logits_of(*model, fx.tokens, r), ref), 1e-5) << "chunk " << chunk;
  }
}

// The fast prefill path is chosen by phase, not by row count, so any chunking gives the same bits
// (what lets prompt reuse restore a prefix state and match a fresh start exactly).
TEST(Backend, FastPrefillDoesNotDependOnTheChunking) {
  const Fixture fx("small");
  const auto model = load_model(test::fixture("small/mlx4"));
  RunSpec base;
  base.exact = false;
  base.chunk = 4096;
  const auto ref = logits_of(*model, fx.tokens, base);
  for (int64_t chunk : {1, 7, 64}) {
    RunSpec r = base;
    r.chunk = chunk;
    EXPECT_EQ(logits_of(*model, fx.tokens, r), ref) << "chunk " << chunk;
  }
}

TEST(Backend, EverySimdLevelPassesTheFixture) {
  const Fixture fx("tiny");
  const auto model = load_model(test::fixture("tiny/hf"));
  const SimdLevel saved = active_simd_level();
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (static_cast<int>(level) > static_cast<int>(detected_simd_level())) continue;
    set_active_simd_level(level);
    EXPECT_LT(rel_err(logits_of(*model, fx.tokens, {}), fx.logits.data), 1e-4) << simd_level_name(level);
  }
  set_active_simd_level(saved);
}

}  // namespace
}  // namespace qwick
