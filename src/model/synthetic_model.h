// Random-weight checkpoints with the real file layout, for tests and benchmarks (`qwick make-model`).
//
// Presets: "tiny" and "small" (toy shapes that run in milliseconds) and "qwen3.6-35b-a3b" (the exact
// shapes of the real model, 19.4 GB in MLX 4-bit), each with its MTP head (`mtp.*`) unless asked
// not to. Formats: "mlx4" (MLX community layout: affine
// 4-bit, router and shared-expert gate at 8 bits) and "bf16" (the official release layout).
//
// Values come from small pools of random numbers addressed by a hash of (seed, tensor name), so the
// output is deterministic for a seed, costs memcpy speed rather than RNG speed, and streams to disk
// shard by shard (several shards at once) with little memory. Weights are scaled by fan-in so
// activations stay in a realistic range through all layers.
#pragma once

#include <cstdint>
#include <string>

namespace qwick {

struct SyntheticModelSpec {
  std::string preset = "small";  // tiny | small | qwen3.6-35b-a3b
  std::string config_path;       // a config.json to take the shapes from instead of a preset
  std::string format = "mlx4";   // mlx4 | bf16
  uint64_t seed = 0;
  int threads = 0;  // shards written at once (0 = one per core)
  uint64_t shard_bytes = uint64_t{2} << 30;
  bool mtp = true;  // write the MTP head (model-spec.md §2.8)
};

// Writes config.json, generation_config.json, the shards and model.safetensors.index.json into
// `dir` (created if needed). Throws Error on a bad spec or an I/O failure.
void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& dir);

// Copies model directory `src` to `dst` (the same directory is allowed) and adds a random MTP head
// in the checkpoint's own form (MLX affine when it is an MLX checkpoint, else official bf16) as
// extra shards, with an index listing every tensor. For giving reference fixtures a head. Throws
// Error when `src` already has one.
void add_synthetic_mtp(const SyntheticModelSpec& spec, const std::string& src, const std::string& dst);

// The config.json text a preset produces (with the quantization block for mlx4).
std::string synthetic_config_json(const std::string& preset, const std::string& format);

// First id of the 33 added (special) tokens in a vocabulary of `vocab_size`: the real model's
// 248044 when the vocabulary is that large, else the last 33 ids.
int32_t special_token_base(int64_t vocab_size);

}  // namespace qwick
