#include "model/config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace qwick {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Typed access to one JSON object's fields; every error names "<file>: <path>.<key>" and the value.
class Fields {
 public:
  Fields(const json& obj, std::string where, std::string prefix)
      : obj_(obj), where_(std::move(where)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const json& at(const char* key) const { return obj_.at(key); }
  std::string path(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

  [[noreturn]] void bad(const char* key, const std::string& why) const {
    fail("{}: {} = {} {}", where_, path(key), has(key) ? at(key).dump() : std::string("(missing)"), why);
  }

  int64_t integer(const char* key) const {
    if (!has(key)) fail("{}: missing field {}", where_, path(key));
    const json& v = at(key);
    if (!v.is_number_integer()) bad(key, "is not an integer");
    return v.get<int64_t>();
  }
  int64_t positive(const char* key) const {
    const int64_t v = integer(key);
    if (v <= 0) bad(key, "must be positive");
    if (v > (int64_t{1} << 40)) bad(key, "is out of range");
    return v;
  }
  int64_t positive_or(const char* key, int64_t fallback) const { return has(key) ? positive(key) : fallback; }
  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_number()) bad(key, "is not a number");
    return at(key).get<double>();
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_boolean()) bad(key, "is not true/false");
    return at(key).get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_string()) bad(key, "is not a string");
    return at(key).get<std::string>();
  }
  // A token id or list of token ids (eos_token_id is written both ways).
  std::vector<int32_t> token_ids(const char* key) const {
    std::vector<int32_t> out;
    if (!has(key)) return out;
    const json& v = at(key);
    auto one = [&](const json& x) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        bad(key, "is not a token id or list of token ids");
      out.push_back(static_cast<int32_t>(x.get<int64_t>()));
    };
    if (v.is_array())
      for (const auto& x : v) one(x);
    else
      one(v);
    return out;
  }

 private:
  const json& obj_;
  std::string where_, prefix_;
};

json parse_json_object(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", where, e.what());
  }
  if (!j.is_object()) fail("{}: expected a JSON object", where);
  return j;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

QuantSpec parse_quant_spec(const Fields& f, const QuantSpec& fallback) {
  QuantSpec q;
  q.bits = static_cast<int>(f.has("bits") ? f.integer("bits") : fallback.bits);
  q.group_size = static_cast<int>(f.has("group_size") ? f.integer("group_size") : fallback.group_size);
  if (q.bits != 4 && q.bits != 8)
    f.bad("bits", "is not supported (qwick runs 4-bit and 8-bit affine weights)");
  if (q.group_size != 32 && q.group_size != 64 && q.group_size != 128)
    f.bad("group_size", "is not supported (expected 32, 64 or 128)");
  return q;
}

QuantConfig parse_quant_config(const json& top, const std::string& where) {
  QuantConfig qc;
  const char* key = top.contains("quantization")          ? "quantization"
                    : top.contains("quantization_config") ? "quantization_config"
                                                          : nullptr;
  if (key == nullptr || top.at(key).is_null()) return qc;
  const json& block = top.at(key);
  if (!block.is_object()) fail("{}: {} is not an object", where, key);
  const Fields f(block, where, key);
  if (f.has("quant_method"))
    f.bad("quant_method", "is not supported (qwick runs MLX affine 4/8-bit and bf16/f16/f32 checkpoints)");
  const std::string mode = f.string_or("mode", "affine");
  if (mode != "affine") f.bad("mode", "is not supported (only MLX affine quantization)");
  qc.enabled = true;
  qc.defaults = parse_quant_spec(f, QuantSpec{});
  for (auto it = block.begin(); it != block.end(); ++it) {
    if (it.value().is_object()) {
      const Fields o(it.value(), where, std::string(key) + "." + it.key());
      qc.overrides[it.key()] = parse_quant_spec(o, qc.defaults);
    } else if (it.value().is_boolean() && !it.value().get<bool>()) {
      qc.overrides[it.key()] = std::nullopt;  // module explicitly left unquantized
    }
  }
  return qc;
}

}  // namespace

std::optional<QuantSpec> QuantConfig::for_module(const std::string& path) const {
  if (!enabled) return std::nullopt;
  auto it = overrides.find(path);
  return it != overrides.end() ? it->second : std::optional<QuantSpec>(defaults);
}

int ModelConfig::n_attention_layers() const {
  int n = 0;
  for (LayerKind k : layers) n += k == LayerKind::kAttention;
  return n;
}
int ModelConfig::n_deltanet_layers() const {
  return n_layers() - n_attention_layers();
}

const char* layer_kind_name(LayerKind kind) {
  return kind == LayerKind::kAttention ? "full_attention" : "linear_attention";
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& where) {
  const json top = parse_json_object(json_text, where);
  const Fields tf(top, where, "");
  ModelConfig c;
  c.model_type = tf.string_or("model_type", "");
  const json* text = &top;
  std::string prefix;
  if (c.model_type == "qwen3_5_moe") {
    if (!top.contains("text_config") || !top["text_config"].is_object())
      fail("{}: model_type \"qwen3_5_moe\" needs a text_config object", where);
    text = &top["text_config"];
    prefix = "text_config";
  } else if (c.model_type != "qwen3_5_moe_text") {
    tf.bad("model_type",
           "is not supported (qwick runs qwen3_5_moe: Qwen3.5/Qwen3.6-35B-A3B and their shapes)");
  }
  const Fields f(*text, where, prefix);
  if (text != &top) {
    const std::string inner = f.string_or("model_type", "qwen3_5_moe_text");
    if (inner != "qwen3_5_moe_text") f.bad("model_type", "is not supported (expected qwen3_5_moe_text)");
  }
  if (f.string_or("hidden_act", "silu") != "silu") f.bad("hidden_act", "is not supported (only silu)");
  if (f.boolean_or("attention_bias", false))
    f.bad("attention_bias", "is not supported (this model has no biases)");

  c.vocab_size = f.positive("vocab_size");
  c.hidden_size = f.positive("hidden_size");
  const int64_t n_layers = f.positive("num_hidden_layers");
  if (n_layers > 4096) f.bad("num_hidden_layers", "is out of range");
  c.rms_norm_eps = static_cast<float>(f.number_or("rms_norm_eps", 1e-6));
  if (!(c.rms_norm_eps > 0)) f.bad("rms_norm_eps", "must be positive");
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", tf.boolean_or("tie_word_embeddings", false));
  c.max_position_embeddings = f.positive_or("max_position_embeddings", 262144);

  if (f.has("layer_types")) {
    const json& lt = f.at("layer_types");
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != n_layers)
      f.bad("layer_types", fmt::format("must list {} layer types (num_hidden_layers)", n_layers));
    for (const auto& v : lt) {
      if (v == "linear_attention") {
        c.layers.push_back(LayerKind::kDeltaNet);
      } else if (v == "full_attention") {
        c.layers.push_back(LayerKind::kAttention);
      } else {
        fail("{}: {} contains {}, expected \"linear_attention\" or \"full_attention\"", where,
             f.path("layer_types"), v.dump());
      }
    }
  } else {
    const int64_t interval = f.positive_or("full_attention_interval", 4);
    for (int64_t i = 0; i < n_layers; ++i)
      c.layers.push_back((i + 1) % interval == 0 ? LayerKind::kAttention : LayerKind::kDeltaNet);
  }

  c.n_heads = static_cast<int>(f.positive("num_attention_heads"));
  c.n_kv_heads = static_cast<int>(f.positive("num_key_value_heads"));
  if (c.n_heads % c.n_kv_heads != 0) f.bad("num_key_value_heads", "must divide num_attention_heads");
  c.head_dim = static_cast<int>(f.positive_or("head_dim", c.hidden_size / c.n_heads));
  c.attn_output_gate = f.boolean_or("attn_output_gate", true);

  // RoPE: current transformers writes rope_parameters; older configs keep the keys at the top.
  double partial = f.number_or("partial_rotary_factor", 1.0);
  c.rope_theta = f.number_or("rope_theta", 10000.0);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!f.has(key)) continue;
    if (!f.at(key).is_object()) f.bad(key, "is not an object");
    const Fields r(f.at(key), where, f.path(key));
    const std::string type = r.string_or("rope_type", r.string_or("type", "default"));
    if (type != "default")
      r.bad(r.has("rope_type") ? "rope_type" : "type",
            "is not supported (only default RoPE; no YaRN scaling yet)");
    c.rope_theta = r.number_or("rope_theta", c.rope_theta);
    partial = r.number_or("partial_rotary_factor", partial);
  }
  if (!(c.rope_theta > 1)) f.bad("rope_theta", "must be greater than 1");
  c.rotary_dim = static_cast<int>(c.head_dim * partial);
  if (!(partial > 0 && partial <= 1) || c.rotary_dim <= 0 || c.rotary_dim % 2 != 0)
    fail("{}: partial_rotary_factor {} gives {} rotary dims of head_dim {}; need an even number in 2..{}",
         where, partial, c.rotary_dim, c.head_dim, c.head_dim);

  c.lin_n_k_heads = static_cast<int>(f.positive("linear_num_key_heads"));
  c.lin_n_v_heads = static_cast<int>(f.positive("linear_num_value_heads"));
  if (c.lin_n_v_heads % c.lin_n_k_heads != 0)
    f.bad("linear_num_value_heads", "must be a multiple of linear_num_key_heads");
  c.lin_k_dim = static_cast<int>(f.positive("linear_key_head_dim"));
  c.lin_v_dim = static_cast<int>(f.positive("linear_value_head_dim"));
  c.conv_kernel = static_cast<int>(f.positive_or("linear_conv_kernel_dim", 4));
  if (c.conv_kernel > 64) f.bad("linear_conv_kernel_dim", "is out of range");

  c.n_experts = static_cast<int>(f.positive("num_experts"));
  c.n_experts_per_tok = static_cast<int>(f.positive("num_experts_per_tok"));
  if (c.n_experts_per_tok > c.n_experts) f.bad("num_experts_per_tok", "exceeds num_experts");
  c.expert_dim = f.positive("moe_intermediate_size");
  c.shared_expert_dim = f.positive("shared_expert_intermediate_size");

  c.eos_token_ids = tf.token_ids("eos_token_id");
  for (int32_t id : f.token_ids("eos_token_id"))
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(id);

  c.quant = parse_quant_config(top, where);
  return c;
}

ModelConfig load_model_config(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  if (!fs::exists(path)) fail("{}: no config.json (is this a Hugging Face model directory?)", dir.string());
  return parse_model_config(read_file(path), path.string());
}

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& where) {
  const json j = parse_json_object(json_text, where);
  const Fields f(j, where, "");
  GenerationConfig g;
  g.eos_token_ids = f.token_ids("eos_token_id");
  if (auto ids = f.token_ids("bos_token_id"); !ids.empty()) g.bos_token_id = ids[0];
  if (auto ids = f.token_ids("pad_token_id"); !ids.empty()) g.pad_token_id = ids[0];
  auto num = [&](const char* key) -> std::optional<float> {
    if (!f.has(key)) return std::nullopt;
    return static_cast<float>(f.number_or(key, 0));
  };
  g.temperature = num("temperature");
  g.top_p = num("top_p");
  g.min_p = num("min_p");
  g.repetition_penalty = num("repetition_penalty");
  g.presence_penalty = num("presence_penalty");
  if (f.has("top_k")) g.top_k = static_cast<int>(f.integer("top_k"));
  if (f.has("do_sample")) g.do_sample = f.boolean_or("do_sample", false);
  return g;
}

GenerationConfig load_generation_config(const fs::path& dir) {
  const fs::path path = dir / "generation_config.json";
  if (!fs::exists(path)) return {};
  return parse_generation_config(read_file(path), path.string());
}

}  // namespace qwick
