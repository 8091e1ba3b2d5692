#include "model/synthetic_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "core/progress.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace qwick {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t name_hash(const std::string& name, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return splitmix64(h);
}

// Pools of random values, built once per seed. Sizes are odd so rows of power-of-two length do not
// repeat the same values.
struct RandomPools {
  static constexpr size_t kNormal = 1'000'003;
  static constexpr size_t kBytes = (size_t{1} << 24) + 43;
  std::vector<float> normal;   // N(0, 1)
  std::vector<uint8_t> bytes;  // uniform bytes: random 4-bit and 8-bit codes

  explicit RandomPools(uint64_t seed) : normal(kNormal), bytes(kBytes + 4096) {
    uint64_t s = seed ^ 0x5eedull;
    for (size_t i = 0; i < kNormal; i += 2) {  // Box-Muller
      const double u1 = (static_cast<double>(splitmix64(s) >> 11) + 1.0) * 0x1.0p-53;
      const double u2 = static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53;
      const double r = std::sqrt(-2.0 * std::log(u1));
      normal[i] = static_cast<float>(r * std::cos(2 * M_PI * u2));
      if (i + 1 < kNormal) normal[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2));
    }
    for (size_t i = 0; i < bytes.size(); i += 8) {
      const uint64_t v = splitmix64(s);
      std::memcpy(bytes.data() + i, &v, std::min<size_t>(8, bytes.size() - i));
    }
  }
  float gauss(uint64_t i) const { return normal[i % kNormal]; }
};

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  SafetensorsWriter::Fill fill;
  uint64_t bytes() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n * static_cast<uint64_t>(dtype_bits(dtype)) / 8;
  }
};

class TensorFactory {
 public:
  TensorFactory(const RandomPools& pools, uint64_t seed) : pools_(pools), seed_(seed) {}

  // Random 4/8-bit codes: memcpy from the byte pool.
  SafetensorsWriter::Fill packed(const std::string& name) const {
    const uint64_t base = name_hash(name, seed_) % RandomPools::kBytes;
    const RandomPools* pools = &pools_;
    return [pools, base](size_t offset, std::span<uint8_t> out) {
      size_t done = 0;
      while (done < out.size()) {
        const size_t at = (base + offset + done) % RandomPools::kBytes;
        const size_t n = std::min(out.size() - done, RandomPools::kBytes - at);
        std::memcpy(out.data() + done, pools->bytes.data() + at, n);
        done += n;
      }
    };
  }

  // Affine scales or biases for weights of standard deviation `sigma`: q is uniform over
  // [0, 2^bits), so w = s·q + b with b = -s·(2^bits - 1)/2 has mean 0 and std ≈ sigma. About one
  // group in eight gets a negative scale, as real MLX files have.
  SafetensorsWriter::Fill affine(const std::string& module, float sigma, int bits, bool biases) const {
    const uint64_t base = name_hash(module + ".scales", seed_);
    const float levels = static_cast<float>((1 << bits) - 1);
    const float q_std =
        std::sqrt((static_cast<float>(1 << bits) * static_cast<float>(1 << bits) - 1.0f) / 12.0f);
    const RandomPools* pools = &pools_;
    return [=](size_t offset, std::span<uint8_t> out) {
      for (size_t i = 0; i < out.size() / 2; ++i) {
        const uint64_t g = base + offset / 2 + i;
        const float f = 1.0f + 0.2f * std::clamp(pools->gauss(g), -2.0f, 2.0f);
        const float sign = pools->gauss(g + 7919) > 1.15f ? -1.0f : 1.0f;
        const float s = round_to_bf16(sign * sigma / q_std * f);
        const uint16_t v = f32_to_bf16(biases ? -s * levels / 2 : s);
        std::memcpy(out.data() + 2 * i, &v, 2);
      }
    };
  }

  // Dense values mean + sigma·N(0,1) in dtype (BF16 or F32).
  SafetensorsWriter::Fill dense(const std::string& name, DType dtype, float sigma, float mean = 0.0f) const {
    const uint64_t base = name_hash(name, seed_);
    const RandomPools* pools = &pools_;
    const size_t esize = static_cast<size_t>(dtype_bits(dtype) / 8);
    return [=](size_t offset, std::span<uint8_t> out) {
      for (size_t i = 0; i < out.size() / esize; ++i) {
        const float v = mean + sigma * pools->gauss(base + offset / esize + i);
        if (dtype == DType::kF32) {
          std::memcpy(out.data() + 4 * i, &v, 4);
        } else {
          const uint16_t b = f32_to_bf16(v);
          std::memcpy(out.data() + 2 * i, &b, 2);
        }
      }
    };
  }

  // A_log = log(U(1, 16)), stored F32 as the official files do.
  SafetensorsWriter::Fill a_log(const std::string& name) const {
    const uint64_t base = name_hash(name, seed_);
    const RandomPools* pools = &pools_;
    return [=](size_t offset, std::span<uint8_t> out) {
      for (size_t i = 0; i < out.size() / 4; ++i) {
        const float u = 0.5f + 0.5f * std::erf(pools->gauss(base + offset / 4 + i) / std::sqrt(2.0f));
        const float v = std::log(1.0f + 15.0f * u);
        std::memcpy(out.data() + 4 * i, &v, 4);
      }
    };
  }

 private:
  const RandomPools& pools_;
  uint64_t seed_;
};

ojson preset_text_config(const std::string& preset) {
  auto types = [](int n, int interval) {
    ojson t = ojson::array();
    for (int i = 0; i < n; ++i) t.push_back((i + 1) % interval == 0 ? "full_attention" : "linear_attention");
    return t;
  };
  struct Shape {
    int64_t vocab, hidden;
    int layers, heads, kv_heads, head_dim, lin_k, lin_v, lin_k_dim, lin_v_dim, experts, top_k;
    int64_t expert_dim, shared_dim;
    std::vector<int> mrope;
  };
  Shape s;
  if (preset == "tiny") {
    s = {512, 128, 4, 4, 2, 32, 2, 4, 32, 32, 8, 2, 64, 128, {2, 1, 1}};
  } else if (preset == "small") {
    s = {4096, 512, 8, 8, 2, 128, 4, 8, 64, 64, 32, 4, 128, 256, {6, 5, 5}};
  } else if (preset == "qwen3.6-35b-a3b") {
    s = {248320, 2048, 40, 16, 2, 256, 16, 32, 128, 128, 256, 8, 512, 512, {11, 11, 10}};
  } else {
    fail("unknown preset \"{}\" (expected tiny, small or qwen3.6-35b-a3b)", preset);
  }
  const int32_t base = special_token_base(s.vocab);
  ojson t;
  t["model_type"] = "qwen3_5_moe_text";
  t["vocab_size"] = s.vocab;
  t["hidden_size"] = s.hidden;
  t["num_hidden_layers"] = s.layers;
  t["layer_types"] = types(s.layers, 4);
  t["full_attention_interval"] = 4;
  t["num_attention_heads"] = s.heads;
  t["num_key_value_heads"] = s.kv_heads;
  t["head_dim"] = s.head_dim;
  t["attn_output_gate"] = true;
  t["linear_num_key_heads"] = s.lin_k;
  t["linear_num_value_heads"] = s.lin_v;
  t["linear_key_head_dim"] = s.lin_k_dim;
  t["linear_value_head_dim"] = s.lin_v_dim;
  t["linear_conv_kernel_dim"] = 4;
  t["num_experts"] = s.experts;
  t["num_experts_per_tok"] = s.top_k;
  t["moe_intermediate_size"] = s.expert_dim;
  t["shared_expert_intermediate_size"] = s.shared_dim;
  t["hidden_act"] = "silu";
  t["rms_norm_eps"] = 1e-6;
  t["max_position_embeddings"] = 262144;
  t["tie_word_embeddings"] = false;
  t["attention_bias"] = false;
  t["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", 10000000.0},
                          {"partial_rotary_factor", 0.25},
                          {"mrope_section", s.mrope},
                          {"mrope_interleaved", true}};
  t["partial_rotary_factor"] = 0.25;
  t["mamba_ssm_dtype"] = "float32";
  t["bos_token_id"] = base;
  t["eos_token_id"] = base;
  t["dtype"] = "bfloat16";
  return t;
}

ojson full_config(const ojson& text, const std::string& format) {
  const int32_t base = special_token_base(text["vocab_size"].get<int64_t>());
  ojson c;
  c["architectures"] = {"Qwen3_5MoeForConditionalGeneration"};
  c["model_type"] = "qwen3_5_moe";
  c["text_config"] = text;
  c["tie_word_embeddings"] = false;
  c["eos_token_id"] = {base + 2, base};  // <|im_end|>, <|endoftext|>
  c["image_token_id"] = 248056;
  c["video_token_id"] = 248057;
  c["vision_start_token_id"] = 248053;
  c["vision_end_token_id"] = 248054;
  if (format == "mlx4") {
    ojson q;
    q["group_size"] = 64;
    q["bits"] = 4;
    q["mode"] = "affine";
    const int n = text["num_hidden_layers"].get<int>();
    for (int L = 0; L < n; ++L)
      for (const char* m : {"mlp.gate", "mlp.shared_expert_gate"})
        q[fmt::format("language_model.model.layers.{}.{}", L, m)] = {{"group_size", 64}, {"bits", 8}};
    for (const char* m : {"mlp.gate", "mlp.shared_expert_gate"})
      q[fmt::format("mtp.layers.0.{}", m)] = {{"group_size", 64}, {"bits", 8}};
    c["quantization"] = q;
    c["quantization_config"] = q;
  }
  return c;
}

// The tensors of a checkpoint in `format` (mlx4: affine with the config's bits and group per module,
// else bf16 in the official layout), written by the members below.
class SpecWriter {
 public:
  SpecWriter(const ModelConfig& cfg, const std::string& format, const TensorFactory& f)
      : cfg_(cfg),
        mlx_(format == "mlx4"),
        f_(f),
        out_gain_(1.0f / std::sqrt(2.0f * static_cast<float>(cfg.n_layers()))) {}

  // The whole model; with `mtp`, its head as well.
  std::vector<TensorSpec> model(bool mtp) {
    const std::string P = mlx_ ? "language_model.model." : "model.language_model.";
    const int64_t H = cfg_.hidden_size;
    matrix(P + "embed_tokens", {}, cfg_.vocab_size, H, 1.0f);
    zc_norm(P + "norm.weight", H);
    matrix(mlx_ ? "language_model.lm_head" : "lm_head", {}, cfg_.vocab_size, H, fan(H));
    for (int L = 0; L < cfg_.n_layers(); ++L)
      layer(P + "layers." + std::to_string(L) + ".", cfg_.layers[static_cast<size_t>(L)]);
    if (mtp) head();
    return std::move(out_);
  }

  // The MTP head alone (model-spec.md §2.8), under `mtp.`.
  std::vector<TensorSpec> head_only() {
    head();
    return std::move(out_);
  }

 private:
  static float fan(int64_t cols) { return 1.0f / std::sqrt(static_cast<float>(cols)); }

  void head() {
    const int64_t H = cfg_.hidden_size;
    zc_norm("mtp.pre_fc_norm_embedding.weight", H);
    zc_norm("mtp.pre_fc_norm_hidden.weight", H);
    matrix("mtp.fc", {}, H, 2 * H, fan(2 * H));
    layer("mtp.layers.0.", LayerKind::kAttention);
    zc_norm("mtp.norm.weight", H);
  }

  // A matrix [stack..., rows, cols] of standard deviation sigma.
  void matrix(const std::string& module, std::vector<int64_t> lead, int64_t rows, int64_t cols, float sigma) {
    std::vector<int64_t> shape = lead;
    shape.push_back(rows);
    if (!mlx_) {
      shape.push_back(cols);
      out_.push_back(
          {module +
               (module.ends_with("_proj") && module.find(".experts.") != std::string::npos ? "" : ".weight"),
           DType::kBF16, shape, f_.dense(module, DType::kBF16, sigma)});
      return;
    }
    const auto quant = cfg_.quant.for_module(module);
    if (!quant)
      fail("the config's quantization block leaves {} unquantized; make-model quantizes every matrix",
           module);
    std::vector<int64_t> wshape = shape, gshape = shape;
    wshape.push_back(cols * quant->bits / 32);
    gshape.push_back(cols / quant->group_size);
    out_.push_back({module + ".weight", DType::kU32, wshape, f_.packed(module)});
    out_.push_back({module + ".scales", DType::kBF16, gshape, f_.affine(module, sigma, quant->bits, false)});
    out_.push_back({module + ".biases", DType::kBF16, gshape, f_.affine(module, sigma, quant->bits, true)});
  }

  void vec(const std::string& name, std::vector<int64_t> shape, SafetensorsWriter::Fill fill,
           DType dtype = DType::kBF16) {
    out_.push_back({name, dtype, std::move(shape), std::move(fill)});
  }

  // Zero-centred norms: the official layout stores w, MLX stores 1 + w.
  void zc_norm(const std::string& name, int64_t n) {
    vec(name, {n}, f_.dense(name, DType::kBF16, 0.1f, mlx_ ? 1.0f : 0.0f));
  }

  // One decoder layer under `p`. Output projections are scaled down so the residual stream grows
  // slowly over the layers.
  void layer(const std::string& p, LayerKind kind) {
    const ModelConfig& cfg = cfg_;
    const int64_t H = cfg.hidden_size, I = cfg.expert_dim, S = cfg.shared_expert_dim;
    const int64_t E = cfg.n_experts, C = cfg.conv_channels(), K = cfg.conv_kernel;
    zc_norm(p + "input_layernorm.weight", H);
    zc_norm(p + "post_attention_layernorm.weight", H);
    if (kind == LayerKind::kAttention) {
      const int64_t hd = cfg.head_dim, kv = cfg.n_kv_heads * hd;
      matrix(p + "self_attn.q_proj", {}, cfg.q_proj_rows(), H, fan(H));
      matrix(p + "self_attn.k_proj", {}, kv, H, fan(H));
      matrix(p + "self_attn.v_proj", {}, kv, H, fan(H));
      matrix(p + "self_attn.o_proj", {}, H, cfg.n_heads * hd, out_gain_ * fan(cfg.n_heads * hd));
      zc_norm(p + "self_attn.q_norm.weight", hd);
      zc_norm(p + "self_attn.k_norm.weight", hd);
    } else {
      const int64_t Hv = cfg.lin_n_v_heads, Vt = cfg.lin_v_total();
      matrix(p + "linear_attn.in_proj_qkv", {}, C, H, fan(H));
      matrix(p + "linear_attn.in_proj_z", {}, Vt, H, fan(H));
      matrix(p + "linear_attn.in_proj_b", {}, Hv, H, fan(H));
      matrix(p + "linear_attn.in_proj_a", {}, Hv, H, fan(H));
      matrix(p + "linear_attn.out_proj", {}, H, Vt, out_gain_ * fan(Vt));
      const std::string conv = p + "linear_attn.conv1d.weight";
      vec(conv, mlx_ ? std::vector<int64_t>{C, K, 1} : std::vector<int64_t>{C, 1, K},
          f_.dense(conv, DType::kBF16, fan(K)));
      vec(p + "linear_attn.A_log", {Hv}, f_.a_log(p + "linear_attn.A_log"), DType::kF32);
      vec(p + "linear_attn.dt_bias", {Hv}, f_.dense(p + "linear_attn.dt_bias", DType::kBF16, 0.5f));
      vec(p + "linear_attn.norm.weight", {cfg.lin_v_dim},
          f_.dense(p + "linear_attn.norm.weight", DType::kBF16, 0.1f, 1.0f));
    }
    matrix(p + "mlp.gate", {}, E, H, fan(H));
    if (mlx_) {
      matrix(p + "mlp.switch_mlp.gate_proj", {E}, I, H, fan(H));
      matrix(p + "mlp.switch_mlp.up_proj", {E}, I, H, fan(H));
      matrix(p + "mlp.switch_mlp.down_proj", {E}, H, I, out_gain_ * fan(I));
    } else {
      matrix(p + "mlp.experts.gate_up_proj", {E}, 2 * I, H, fan(H));
      matrix(p + "mlp.experts.down_proj", {E}, H, I, out_gain_ * fan(I));
    }
    matrix(p + "mlp.shared_expert.gate_proj", {}, S, H, fan(H));
    matrix(p + "mlp.shared_expert.up_proj", {}, S, H, fan(H));
    matrix(p + "mlp.shared_expert.down_proj", {}, H, S, out_gain_ * fan(S));
    matrix(p + "mlp.shared_expert_gate", {}, 1, H, fan(H));
  }

  const ModelConfig& cfg_;
  bool mlx_;
  const TensorFactory& f_;
  float out_gain_;
  std::vector<TensorSpec> out_;
};

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) fail("cannot write {}", path.string());
}

// Writes `specs` into shards named STEM-0000i-of-0000n.safetensors, greedily in declaration order
// (layer by layer), each at most spec.shard_bytes unless one tensor is larger, several at once.
// Returns (tensor, shard file) pairs.
std::vector<std::pair<std::string, std::string>> write_shards(const std::vector<TensorSpec>& specs,
                                                              const fs::path& out_dir,
                                                              const std::string& stem,
                                                              const SyntheticModelSpec& spec) {
  std::vector<std::vector<const TensorSpec*>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& t : specs) {
    if (in_shard > 0 && in_shard + t.bytes() > spec.shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&t);
    in_shard += t.bytes();
    total += t.bytes();
  }
  const size_t n_shards = shards.size();
  auto shard_name = [&](size_t i) {
    return fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, i + 1, n_shards);
  };

  Progress progress("writing " + out_dir.string(), total);
  std::mutex progress_mutex;
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::string error;
  const int n_threads = std::max(
      1,
      std::min<int>(spec.threads > 0 ? spec.threads : static_cast<int>(std::thread::hardware_concurrency()),
                    static_cast<int>(n_shards)));
  auto worker = [&] {
    for (size_t i = next++; i < n_shards; i = next++) {
      try {
        SafetensorsWriter w;
        w.set_metadata("format", "pt");
        for (const TensorSpec* t : shards[i]) w.add(t->name, t->dtype, t->shape, t->fill);
        w.write((out_dir / shard_name(i)).string(), [&](size_t n) {
          std::lock_guard<std::mutex> lock(progress_mutex);
          progress.advance(n);
        });
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (error.empty()) error = e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < n_threads; ++i) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (!error.empty()) throw Error(error);

  std::vector<std::pair<std::string, std::string>> entries;
  for (size_t i = 0; i < n_shards; ++i)
    for (const TensorSpec* t : shards[i]) entries.emplace_back(t->name, shard_name(i));
  return entries;
}

// model.safetensors.index.json for (tensor, shard file) pairs; total_size from the shards on disk.
void write_index(const fs::path& out_dir, std::vector<std::pair<std::string, std::string>> entries) {
  std::sort(entries.begin(), entries.end());
  uint64_t total = 0;
  std::vector<std::string> files;
  for (const auto& [name, file] : entries)
    if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
  for (const std::string& file : files) total += fs::file_size(out_dir / file);
  ojson index;
  index["metadata"] = {{"total_size", total}};
  ojson map = ojson::object();
  for (const auto& [name, file] : entries) map[name] = file;
  index["weight_map"] = map;
  write_text(out_dir / "model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace

int32_t special_token_base(int64_t vocab_size) {
  return vocab_size >= 248077 ? 248044 : static_cast<int32_t>(vocab_size - 33);
}

std::string synthetic_config_json(const std::string& preset, const std::string& format) {
  if (format != "mlx4" && format != "bf16") fail("unknown format \"{}\" (expected mlx4 or bf16)", format);
  return full_config(preset_text_config(preset), format).dump(2);
}

void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& dir) {
  if (spec.format != "mlx4" && spec.format != "bf16")
    fail("unknown format \"{}\" (expected mlx4 or bf16)", spec.format);
  ojson text;
  if (!spec.config_path.empty()) {
    std::ifstream in(spec.config_path);
    if (!in) fail("cannot read {}", spec.config_path);
    ojson given;
    try {
      given = ojson::parse(in);
    } catch (const ojson::exception& e) {
      fail("{}: not valid JSON: {}", spec.config_path, e.what());
    }
    text = given.contains("text_config") ? given["text_config"] : given;
    text.erase("quantization");
    text.erase("quantization_config");
    text["model_type"] = "qwen3_5_moe_text";
  } else {
    text = preset_text_config(spec.preset);
  }
  const std::string config_text = full_config(text, spec.format).dump(2);
  const ModelConfig cfg = parse_model_config(config_text, "generated config.json");  // validates the shapes
  if (spec.format == "mlx4") {
    for (int64_t cols : {cfg.hidden_size, cfg.expert_dim, cfg.shared_expert_dim, cfg.lin_v_total(),
                         int64_t{cfg.n_heads} * cfg.head_dim})
      if (cols % 64 != 0) fail("mlx4 needs every input width to be a multiple of 64; {} is not", cols);
  }

  const fs::path out_dir(dir);
  fs::create_directories(out_dir);
  write_text(out_dir / "config.json", config_text + "\n");
  const int32_t base = special_token_base(cfg.vocab_size);
  ojson gen;
  gen["bos_token_id"] = base;
  gen["do_sample"] = true;
  gen["eos_token_id"] = {base + 2, base};
  gen["pad_token_id"] = base;
  gen["temperature"] = 1.0;
  gen["top_k"] = 20;
  gen["top_p"] = 0.95;
  write_text(out_dir / "generation_config.json", gen.dump(2) + "\n");

  const RandomPools pools(spec.seed);
  const TensorFactory factory(pools, spec.seed);
  const std::vector<TensorSpec> specs = SpecWriter(cfg, spec.format, factory).model(spec.mtp);
  write_index(out_dir, write_shards(specs, out_dir, "model", spec));
}

void add_synthetic_mtp(const SyntheticModelSpec& spec, const std::string& src, const std::string& dst) {
  const ModelConfig cfg = load_model_config(src);
  const auto ckpt = Checkpoint::open(src);
  for (const std::string& name : ckpt->names())
    if (name.starts_with("mtp.") || name.find(".mtp.") != std::string::npos)
      fail("{} already has an MTP head (tensor \"{}\")", src, name);
  const std::string format = ckpt->has("language_model.model.embed_tokens.weight") ? "mlx4" : "bf16";

  const fs::path out_dir(dst);
  fs::create_directories(out_dir);
  std::vector<std::pair<std::string, std::string>> entries;
  for (const std::string& name : ckpt->names())
    entries.emplace_back(name, fs::path(*ckpt->find(name)->file).filename().string());
  if (!fs::equivalent(fs::path(src), out_dir))
    for (const auto& e : fs::directory_iterator(src))
      if (e.is_regular_file())
        fs::copy_file(e.path(), out_dir / e.path().filename(), fs::copy_options::overwrite_existing);

  const RandomPools pools(spec.seed);
  const TensorFactory factory(pools, spec.seed);
  const auto head = write_shards(SpecWriter(cfg, format, factory).head_only(), out_dir, "mtp", spec);
  entries.insert(entries.end(), head.begin(), head.end());
  write_index(out_dir, entries);
}

}  // namespace qwick
