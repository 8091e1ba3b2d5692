#include "model/model.h"

#include <algorithm>

#include "core/error.h"

namespace qwick {

std::vector<int32_t> Model::stop_token_ids() const {
  std::vector<int32_t> ids = generation.eos_token_ids;
  for (int32_t id : config.eos_token_ids)
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, const std::filesystem::path& mtp_dir) {
  if (dir.extension() == ".gguf")
    fail(
        "{}: GGUF files are not supported; point --model at a Hugging Face model directory "
        "(config.json + *.safetensors)",
        dir.string());
  if (!std::filesystem::is_directory(dir)) fail("{}: not a directory", dir.string());
  auto model = std::make_unique<Model>();
  model->dir = dir;
  model->config = load_model_config(dir);
  model->generation = load_generation_config(dir);
  model->checkpoint = Checkpoint::open(dir);
  model->weights = bind_weights(model->config, *model->checkpoint);
  if (!mtp_dir.empty()) {
    if (!std::filesystem::is_directory(mtp_dir)) fail("--mtp {}: not a directory", mtp_dir.string());
    model->mtp_checkpoint = Checkpoint::open(mtp_dir);
    try {
      model->weights.mtp = bind_mtp_weights(model->config, *model->mtp_checkpoint);
    } catch (const Error& e) {
      fail("--mtp {}: {}", mtp_dir.string(), e.what());
    }
  }
  return model;
}

}  // namespace qwick
