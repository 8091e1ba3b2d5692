// Options every command that runs the model shares (-m, -t, -c, --kv-type, --device), and opening
// the model and backend from them.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "cli/args.h"
#include "model/model.h"

namespace qwick {

struct EngineOptions {
  std::string model;  // empty: the built-in small model
  std::string mtp;    // a checkpoint to take the MTP head from (load_model's mtp_dir)
  int threads = 0;
  int64_t ctx_size = 0;
  std::string kv_type = "bf16";
  std::string device;  // empty: default_device()
  bool exact = false;
  std::string cuda_off;  // BackendOptions::cuda_off
  int spec_draft = -1;   // speculative drafts a step; < 0: kDefaultDraft where there is a head
  int sequences = 1;     // BackendOptions::sequences (set by the commands that run several)

  static constexpr int kDefaultDraft = 2;

  void add_to(ArgParser& parser);
  BackendOptions backend_options() const;
};

struct Engine {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  int draft_max = 0;  // speculative drafts a step (BackendEngineOptions::draft_max); 0 = off
};

// Loads the model (making the built-in one first if no model was given) and starts the backend.
Engine open_engine(const EngineOptions& options);

// `model` itself, or when empty the built-in small model's directory (made first if needed).
std::string model_dir_or_builtin(const std::string& model);

// Where the built-in small model lives: $QWICK_HOME, else $XDG_CACHE_HOME/qwick, else ~/.cache/qwick,
// plus /builtin-small. Created by make-model on first use.
std::string builtin_model_dir();

}  // namespace qwick
