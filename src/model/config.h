// The model's configuration, read from a Hugging Face model directory.
//
// config.json is either the vision-language form the real checkpoints ship (text model under
// `text_config`) or a flat text config. MLX conversions add a `quantization` block (also copied to
// `quantization_config`) with per-module overrides. Anything the engine cannot run is rejected at
// load with an Error naming the field and its value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace qwick {

enum class LayerKind { kDeltaNet, kAttention };  // "linear_attention", "full_attention"

// Affine quantization of one module: w = scale * q + bias per `group_size` inputs of a row.
struct QuantSpec {
  int bits = 4;
  int group_size = 64;
};

struct QuantConfig {
  bool enabled = false;
  QuantSpec defaults;
  // Keyed by module path (the tensor name without .weight/.scales/.biases); nullopt = left unquantized.
  std::map<std::string, std::optional<QuantSpec>> overrides;

  // The spec for a module, or nullopt when the module is not quantized.
  std::optional<QuantSpec> for_module(const std::string& path) const;
};

struct ModelConfig {
  // Sizes of the text model. Names follow the Hugging Face config keys.
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  std::vector<LayerKind> layers;  // one entry per decoder layer
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;

  // Gated full attention.
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  bool attn_output_gate = true;  // q_proj also produces a per-head sigmoid output gate
  double rope_theta = 1e7;
  int rotary_dim = 0;  // leading dims of each head that rotate (head_dim * partial_rotary_factor)

  // Gated DeltaNet.
  int lin_n_k_heads = 0;
  int lin_n_v_heads = 0;
  int lin_k_dim = 0;
  int lin_v_dim = 0;
  int conv_kernel = 4;

  // Mixture of experts (every layer).
  int n_experts = 0;
  int n_experts_per_tok = 0;
  int64_t expert_dim = 0;         // moe_intermediate_size
  int64_t shared_expert_dim = 0;  // shared_expert_intermediate_size

  std::vector<int32_t> eos_token_ids;  // from config.json (text and top level)
  QuantConfig quant;
  std::string model_type;  // as written at the top level

  int n_layers() const { return static_cast<int>(layers.size()); }
  int n_attention_layers() const;
  int n_deltanet_layers() const;
  int64_t lin_q_dim() const { return int64_t{lin_n_k_heads} * lin_k_dim; }  // = key dim
  int64_t lin_v_total() const { return int64_t{lin_n_v_heads} * lin_v_dim; }
  int64_t conv_channels() const { return 2 * lin_q_dim() + lin_v_total(); }
  int64_t q_proj_rows() const { return int64_t{n_heads} * head_dim * (attn_output_gate ? 2 : 1); }
};

// Sampling defaults and stop ids from generation_config.json (all optional).
struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id, pad_token_id;
  std::optional<float> temperature, top_p, min_p, repetition_penalty, presence_penalty;
  std::optional<int> top_k;
  std::optional<bool> do_sample;
};

ModelConfig parse_model_config(const std::string& json_text, const std::string& where);
ModelConfig load_model_config(const std::filesystem::path& dir);
GenerationConfig parse_generation_config(const std::string& json_text, const std::string& where);
// Empty config when the file does not exist.
GenerationConfig load_generation_config(const std::filesystem::path& dir);

const char* layer_kind_name(LayerKind kind);

}  // namespace qwick
