#include "cli/engine_options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "model/synthetic_model.h"
#include "text/synthetic_tokenizer.h"

namespace qwick {

void EngineOptions::add_to(ArgParser& p) {
  p.option({"-m", "--model"}, "DIR",
           "model directory (Hugging Face layout); default: the built-in small model", &model,
           "LLAMA_ARG_MODEL");
  p.option({"--mtp"}, "DIR",
           "take the MTP head (speculative decoding's drafter) from this checkpoint of the same model, e.g. "
           "the official bf16 one or a directory holding just the mtp.* tensors",
           &mtp, "QWICK_MTP");
  p.option(
      {"--spec-draft"}, "N",
      "speculative decoding: tokens the MTP head drafts a step (default 2 where the model has a head; 0 = "
      "off); lossless, the output is that of plain decoding",
      &spec_draft, "QWICK_SPEC_DRAFT");
  p.option({"-t", "--threads"}, "N", "CPU threads (0 = one per core)", &threads, "LLAMA_ARG_THREADS");
  p.option({"-c", "--ctx-size"}, "N", "context size in tokens (0 = the model's maximum)", &ctx_size,
           "LLAMA_ARG_CTX_SIZE");
  p.option(
      {"--kv-type"}, "TYPE",
      "attention KV cache type: bf16, f32 or q8 (a byte a value and a scale a row, half of bf16's bytes)",
      &kv_type, "QWICK_KV_TYPE");
  p.option({"--device"}, "DEV", "where to run: cpu or cuda (default: cuda when built and a GPU is present)",
           &device, "QWICK_DEVICE");
  p.flag({"--exact"}, "f32 activations in every decode matrix product (reference numerics, slower decode)",
         &exact, "QWICK_EXACT");
  p.option({"--cuda-off"}, "LIST",
           "CUDA debug switches to turn off, comma separated: graph, fusion, overlap, step-ahead", &cuda_off,
           "QWICK_CUDA_OFF");
}

BackendOptions EngineOptions::backend_options() const {
  BackendOptions b;
  b.threads = threads;
  if (ctx_size < 0) fail("--ctx-size must not be negative, got {}", ctx_size);
  b.max_context = ctx_size;
  b.exact = exact;
  b.cuda_off = cuda_off;
  b.sequences = sequences;
  if (kv_type == "bf16")
    b.kv_dtype = KvDtype::kBF16;
  else if (kv_type == "f32")
    b.kv_dtype = KvDtype::kF32;
  else if (kv_type == "q8")
    b.kv_dtype = KvDtype::kQ8;
  else
    fail("--kv-type: unknown type \"{}\" (expected bf16, f32 or q8)", kv_type);
  return b;
}

std::string builtin_model_dir() {
  namespace fs = std::filesystem;
  fs::path base;
  if (const char* h = std::getenv("QWICK_HOME"); h && *h) {
    base = h;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    base = fs::path(x) / "qwick";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    base = fs::path(home) / ".cache" / "qwick";
  } else {
    base = fs::temp_directory_path() / "qwick";
  }
  return (base / "builtin-small").string();
}

std::string model_dir_or_builtin(const std::string& model) {
  if (!model.empty()) return model;
  const std::filesystem::path dir = builtin_model_dir();
  if (!std::filesystem::exists(dir / "config.json")) {
    std::fprintf(stderr, "making the built-in small model in %s\n", dir.c_str());
    SyntheticModelSpec spec;
    spec.preset = "small";
    write_synthetic_model(spec, dir.string());
  }
  // (Also for a built-in model made before the text files were part of it.)
  if (!std::filesystem::exists(dir / "tokenizer.json"))
    write_synthetic_text_files(dir.string(), special_token_base(load_model_config(dir).vocab_size));
  return dir.string();
}

Engine open_engine(const EngineOptions& options) {
  const std::string dir = model_dir_or_builtin(options.model);
  Engine e;
  e.model = load_model(dir, options.mtp);
  const std::string device = options.device.empty() ? default_device() : options.device;
  if (device == "cpu") {  // the CPU backend reads the weights in place
    e.model->checkpoint->load_pages();
    if (e.model->mtp_checkpoint) e.model->mtp_checkpoint->load_pages();
  }
  BackendOptions backend_options = options.backend_options();
  const int wanted = options.spec_draft < 0 ? EngineOptions::kDefaultDraft : options.spec_draft;
  backend_options.mtp = wanted > 0 && e.model->weights.mtp.has_value() && device == "cpu";
  e.backend = make_backend(device, *e.model, backend_options);
  if (wanted > 0 && !e.backend->has_draft_head()) {
    std::fprintf(stderr, "note: no speculative decoding: %s\n",
                 !e.model->weights.mtp ? "the model has no MTP head (--mtp DIR can supply one)"
                                       : "this device does not run the MTP head yet");
  } else if (wanted > 0) {
    e.draft_max = std::min(wanted, e.backend->max_step_rows() - 1);
  }
  return e;
}

}  // namespace qwick
