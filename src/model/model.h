// A loaded model directory: config, generation defaults, the mapped checkpoint and its bound weights.
#pragma once

#include <filesystem>
#include <memory>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/weights.h"

namespace qwick {

struct Model {
  std::filesystem::path dir;
  ModelConfig config;
  GenerationConfig generation;
  std::unique_ptr<Checkpoint> checkpoint;      // owns the memory the weights point into
  std::unique_ptr<Checkpoint> mtp_checkpoint;  // the --mtp directory's, when the head comes from there
  ModelWeights weights;

  // Token ids that end generation: generation_config.json's, else config.json's.
  std::vector<int32_t> stop_token_ids() const;
};

// Loads and validates everything; throws Error naming the file, field or tensor at fault. A
// non-empty `mtp_dir` supplies the MTP head (bind_mtp_weights), replacing any head in `dir`.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir,
                                  const std::filesystem::path& mtp_dir = {});

}  // namespace qwick
