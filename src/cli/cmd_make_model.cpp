// qwick make-model: write a random-weight checkpoint.
#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/config.h"
#include "model/synthetic_model.h"
#include "text/synthetic_tokenizer.h"

namespace qwick {

int cmd_make_model(int argc, char** argv) {
  SyntheticModelSpec spec;
  std::string out, add_mtp;
  bool no_mtp = false;
  int64_t seed = 0, shard_mb = 2048;
  ArgParser p("qwick make-model [options] OUT_DIR",
              "Writes a checkpoint with random weights in the real file layout: config.json,\n"
              "generation_config.json, sharded safetensors and the index, and tokenizer.json,\n"
              "tokenizer_config.json and chat_template.jinja (a byte-level BPE vocabulary learned from\n"
              "a built-in text, the Qwen added tokens, the Qwen3.6 template). Deterministic for a seed.");
  p.positional("OUT_DIR", "directory to write (created if needed)", &out, true);
  p.option({"--preset"}, "NAME", "tiny, small or qwen3.6-35b-a3b (the exact full shapes)", &spec.preset);
  p.option({"--config"}, "FILE", "take the shapes from this config.json instead of a preset",
           &spec.config_path);
  p.option({"--format"}, "FMT", "mlx4 (MLX affine 4-bit) or bf16 (official layout)", &spec.format);
  p.option({"-s", "--seed"}, "N", "random seed", &seed);
  p.option({"-t", "--threads"}, "N", "shards written at once (0 = one per core)", &spec.threads);
  p.option({"--shard-mb"}, "N", "largest shard size in MiB", &shard_mb);
  p.flag({"--no-mtp"}, "leave out the MTP head (mtp.* tensors)", &no_mtp);
  p.option({"--add-mtp"}, "SRC_DIR",
           "instead: copy the model directory SRC_DIR to OUT_DIR and add a random MTP head to it (in its "
           "layout: MLX affine for MLX checkpoints, else bf16)",
           &add_mtp);
  if (!p.parse(argc, argv)) return 0;
  if (shard_mb <= 0) fail("--shard-mb must be positive");
  spec.seed = static_cast<uint64_t>(seed);
  spec.shard_bytes = static_cast<uint64_t>(shard_mb) << 20;
  spec.mtp = !no_mtp;
  const auto t0 = std::chrono::steady_clock::now();
  if (!add_mtp.empty()) {
    add_synthetic_mtp(spec, add_mtp, out);
    std::fprintf(stderr, "wrote %s (%s with an MTP head)\n", out.c_str(), add_mtp.c_str());
    return 0;
  }
  write_synthetic_model(spec, out);
  write_synthetic_text_files(out, special_token_base(load_model_config(out).vocab_size));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "wrote %s (%s, %s) in %.1f s\n", out.c_str(),
               spec.config_path.empty() ? spec.preset.c_str() : spec.config_path.c_str(), spec.format.c_str(),
               s);
  return 0;
}

}  // namespace qwick
